"""Kafka API keys and the versions of each that kafkalite implements."""
from __future__ import annotations

from enum import IntEnum


class ApiKey(IntEnum):
    """The int16 ``request_api_key`` of every API kafkalite speaks."""

    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    ALTER_REPLICA_LOG_DIRS = 34
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    CREATE_DELEGATION_TOKEN = 38
    RENEW_DELEGATION_TOKEN = 39
    EXPIRE_DELEGATION_TOKEN = 40
    DESCRIBE_DELEGATION_TOKEN = 41
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_QUORUM = 55
    UPDATE_FEATURES = 57
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    UNREGISTER_BROKER = 64
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    LIST_CONFIG_RESOURCES = 74
    DESCRIBE_TOPIC_PARTITIONS = 75
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    ADD_RAFT_VOTER = 80
    REMOVE_RAFT_VOTER = 81
    INITIALIZE_SHARE_GROUP_STATE = 83
    READ_SHARE_GROUP_STATE = 84
    WRITE_SHARE_GROUP_STATE = 85
    DELETE_SHARE_GROUP_STATE = 86
    READ_SHARE_GROUP_STATE_SUMMARY = 87
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


# (min, max) version per API. kafkalite claims Apache Kafka 4.1: it serves
# every API a Kafka 4.1 broker advertises, each to the same newest version,
# since clients judge the release by them and a client pinned to a release
# sends its versions without asking (kafka-python: Produce v13 => 4.1,
# ListOffsets v10 => 4.0, v11 => 4.2; librdkafka gates features on them).
# So a claim is whole only when every version it implies is served: an API
# whose next version is a later release's stops before it (ListOffsets v11,
# KIP-1023's earliest-pending-upload spec, is Kafka 4.2's, and 4.2 has
# APIs kafkalite lacks: streams groups, KIP-1071). Every range starts at 0
# like Kafka 3.x's (4.0 dropped the oldest, KIP-896): clients pinned to
# older releases keep their versions. tests/protocol/test_claimed_release.py
# compares every API with a 4.1 broker's ranges, tests/protocol/
# test_definitions.py every version with Kafka's message specs.
SUPPORTED_VERSIONS: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (0, 13),                      # v13: topic ids (KIP-516)
    ApiKey.FETCH: (0, 18),                        # v17: replica directory id (KIP-853)
    ApiKey.LIST_OFFSETS: (0, 10),                 # v9: -5 (KIP-1005); v10: timeout_ms (KIP-1075)
    ApiKey.METADATA: (0, 13),                     # v13: top-level error_code (KIP-1102)
    ApiKey.OFFSET_COMMIT: (0, 9),
    ApiKey.OFFSET_FETCH: (0, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),              # v6: share coordinator keys (KIP-932)
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 6),
    ApiKey.LIST_GROUPS: (0, 5),                   # v5: group types (KIP-848)
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.API_VERSIONS: (0, 4),                  # v4: features at level 0 (KAFKA-17011)
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (0, 2),        # one log dir per broker: moves nothing
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    # delegation tokens (KIP-48): kafkalite issues none, and answers as a Kafka
    # broker without delegation.token.secret.key (DELEGATION_TOKEN_AUTH_DISABLED)
    ApiKey.CREATE_DELEGATION_TOKEN: (0, 3),
    ApiKey.RENEW_DELEGATION_TOKEN: (0, 2),
    ApiKey.EXPIRE_DELEGATION_TOKEN: (0, 2),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 1),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),   # KIP-554
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_QUORUM: (0, 2),               # the controller lease as a one-voter quorum
    ApiKey.ADD_RAFT_VOTER: (0, 0),                # ... whose voters are static (kraft.version 0)
    ApiKey.REMOVE_RAFT_VOTER: (0, 0),
    ApiKey.UPDATE_FEATURES: (0, 2),               # the finalized levels are the only ones
    ApiKey.UNREGISTER_BROKER: (0, 0),
    ApiKey.LIST_CONFIG_RESOURCES: (0, 1),         # v1: every resource with configs (KIP-1142)
    ApiKey.DESCRIBE_CLUSTER: (0, 2),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 2),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),     # KIP-966, Kafka 3.8
    # KIP-848, GA in Kafka 4.0 (librdkafka asks v1, regex subscriptions)
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),       # v1: member types (KIP-1099)
    # KIP-932 share groups: v0 as Kafka 4.0 defined them (early access), v1
    # the stable versions of Kafka 4.1 (librdkafka's ShareConsumer asks v1)
    ApiKey.SHARE_GROUP_HEARTBEAT: (0, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (0, 1),
    ApiKey.SHARE_FETCH: (0, 1),
    ApiKey.SHARE_ACKNOWLEDGE: (0, 1),
    # kafka-share-groups.sh --describe --offsets / --reset-offsets (Kafka 4.1)
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
    # the share coordinator's (KIP-932): partition leaders read and write
    # share-partition state (server/share/share_coordinator.py); brokers' APIs,
    # CLUSTER_ACTION under an authorizer, as WriteTxnMarkers
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE: (0, 0),
    ApiKey.WRITE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_STATE: (0, 0),
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: (0, 0),
}
