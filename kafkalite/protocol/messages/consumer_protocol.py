"""The consumer protocol's embedded schemas (KIP-429, KIP-792, KIP-881).

A consumer group member puts a Subscription in each JoinGroup protocol's
``metadata`` bytes, and the leader hands each member an Assignment in the
SyncGroup ``assignments``. Both start with an int16 version and are never
flexible. A reader meeting a newer version than it knows parses it as its
newest one and ignores what follows, so later versions may only append.
"""
from __future__ import annotations

from kafkalite.protocol.schema import Array, Data, Field

# v1: owned_partitions for cooperative rebalancing (KIP-429). v2: the
# generation_id those partitions were owned in (KIP-792). v3: rack_id for
# rack-aware assignment (KIP-881).
ConsumerProtocolSubscription = Data("ConsumerProtocolSubscription", "0-3", fields=[
    Field("topics", "[]string"),
    Field("user_data", "bytes", nullable="0+"),
    Array("owned_partitions", "1+", fields=[
        Field("topic", "string"),
        Field("partitions", "[]int32"),
    ]),
    Field("generation_id", "int32", "2+", default=-1),
    Field("rack_id", "string", "3+", nullable="3+"),
])

# v1-v3 carry no new fields; they follow the Subscription's version bumps.
ConsumerProtocolAssignment = Data("ConsumerProtocolAssignment", "0-3", fields=[
    Array("assigned_partitions", fields=[
        Field("topic", "string"),
        Field("partitions", "[]int32"),
    ]),
    Field("user_data", "bytes", nullable="0+"),
])
