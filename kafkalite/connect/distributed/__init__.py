"""Connect's distributed mode (Kafka Connect's ``runtime.distributed``):
workers sharing connectors and their tasks through a group of protocol
type ``connect`` and compacted internal topics. The design:
docs/connect-distributed.md.

What it holds:

- distributed_herder.py: ``DistributedHerder``, the Herder of a worker in
  a Connect cluster (connect/herder.py holds the base Herder and the
  standalone mode's), with the parts it inherits: connector_views.py
  (reads from the views, tracked topics), leader_forwarding.py (the
  leader's config writes, calls forwarded to the leader or an owner),
  offset_admin.py (KIP-875 offsets) and leader_duties.py (session key
  rotation, KIP-618 zombie fencing);
- group_member.py: ``WorkerGroupMember``, a worker's group membership;
- assignor.py: the assignment units and ``IncrementalCooperativeAssignor``
  (KIP-415), the leader's assignment;
- internal_topics.py: ``InternalTopics``, the config and status topics
  (Kafka's KafkaConfigBackingStore and KafkaStatusBackingStore).

Which process runs it: a ``kafkalite connect distributed`` worker
(cli/connect.py).

What it may import: connect/ (it is part of Connect's layer),
kafkalite.client, kafkalite.protocol's ApiKey, kafkalite.errors and the
standard library; nothing in connect/ outside this package imports it but
the command that starts a worker.
"""
from kafkalite.connect.distributed.assignor import (IncrementalCooperativeAssignor,
                                                    connector_unit, parse_unit, task_unit,
                                                    unit_connector)
from kafkalite.connect.distributed.distributed_herder import DistributedHerder
from kafkalite.connect.distributed.group_member import WorkerGroupMember
from kafkalite.connect.distributed.internal_topics import InternalTopics

__all__ = ["DistributedHerder", "IncrementalCooperativeAssignor", "InternalTopics",
           "WorkerGroupMember", "connector_unit", "parse_unit", "task_unit", "unit_connector"]
