"""Administration: topics, partitions, records, configs, log directories."""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import Array, Field, Request, Response

# CreateTopics, API key 19. v1: validate_only, per-topic error_message. v2:
# throttle_time_ms. v4: num_partitions / replication_factor may be -1 for
# broker defaults (KIP-464). v5: flexible; the response carries the created
# topic's configs (KIP-525). v6: THROTTLING_QUOTA_EXCEEDED (KIP-599). v7:
# topic_id.
CreateTopicsRequest = Request(ApiKey.CREATE_TOPICS, "0-7", flexible="5+", fields=[
    Array("topics", fields=[
        Field("name", "string"),
        Field("num_partitions", "int32"),
        Field("replication_factor", "int16"),
        Array("assignments", fields=[
            Field("partition_index", "int32"),
            Field("broker_ids", "[]int32"),
        ]),
        Array("configs", fields=[
            Field("name", "string"),
            Field("value", "string", nullable="0+"),
        ]),
    ]),
    Field("timeout_ms", "int32", default=60000),
    Field("validate_only", "bool", "1+"),
])
CreateTopicsResponse = Response(ApiKey.CREATE_TOPICS, "0-7", flexible="5+", fields=[
    Field("throttle_time_ms", "int32", "2+"),
    Array("topics", fields=[
        Field("name", "string"),
        Field("topic_id", "uuid", "7+"),
        Field("error_code", "int16"),
        Field("error_message", "string", "1+", nullable="1+"),
        Field("topic_config_error_code", "int16", "5+", tag=0),
        Field("num_partitions", "int32", "5+", default=-1),
        Field("replication_factor", "int16", "5+", default=-1),
        Array("configs", "5+", nullable="5+", fields=[
            Field("name", "string"),
            Field("value", "string", nullable="0+"),
            Field("read_only", "bool"),
            Field("config_source", "int8", default=-1),
            Field("is_sensitive", "bool"),
        ]),
    ]),
])

# DeleteTopics, API key 20. v1: throttle_time_ms. v4: flexible. v5:
# error_message, THROTTLING_QUOTA_EXCEEDED. v6: topics by name or id
# (KIP-516).
DeleteTopicsRequest = Request(ApiKey.DELETE_TOPICS, "0-6", flexible="4+", fields=[
    Array("topics", "6+", fields=[
        Field("name", "string", nullable="0+"),
        Field("topic_id", "uuid"),
    ]),
    Field("topic_names", "[]string", "0-5"),
    Field("timeout_ms", "int32"),
])
DeleteTopicsResponse = Response(ApiKey.DELETE_TOPICS, "0-6", flexible="4+", fields=[
    Field("throttle_time_ms", "int32", "1+"),
    Array("responses", fields=[
        Field("name", "string", nullable="6+"),
        Field("topic_id", "uuid", "6+"),
        Field("error_code", "int16"),
        Field("error_message", "string", "5+", nullable="5+"),
    ]),
])

# CreatePartitions, API key 37. v2: flexible. v3: THROTTLING_QUOTA_EXCEEDED
# (KIP-599).
CreatePartitionsRequest = Request(ApiKey.CREATE_PARTITIONS, "0-3", flexible="2+", fields=[
    Array("topics", fields=[
        Field("name", "string"),
        Field("count", "int32"),
        Array("assignments", nullable="0+", fields=[
            Field("broker_ids", "[]int32"),
        ]),
    ]),
    Field("timeout_ms", "int32"),
    Field("validate_only", "bool"),
])
CreatePartitionsResponse = Response(ApiKey.CREATE_PARTITIONS, "0-3", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("results", fields=[
        Field("name", "string"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
    ]),
])

# DeleteRecords, API key 21. Moves a partition's log start offset forward. v2:
# flexible.
DeleteRecordsRequest = Request(ApiKey.DELETE_RECORDS, "0-2", flexible="2+", fields=[
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("offset", "int64"),
        ]),
    ]),
    Field("timeout_ms", "int32"),
])
DeleteRecordsResponse = Response(ApiKey.DELETE_RECORDS, "0-2", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("low_watermark", "int64"),
            Field("error_code", "int16"),
        ]),
    ]),
])

# DescribeConfigs, API key 32. v1: include_synonyms, config_source and
# synonyms. v3: include_documentation, config_type, documentation (KIP-569).
# v4: flexible.
DescribeConfigsRequest = Request(ApiKey.DESCRIBE_CONFIGS, "0-4", flexible="4+", fields=[
    Array("resources", fields=[
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
        Field("configuration_keys", "[]string", nullable="0+"),
    ]),
    Field("include_synonyms", "bool", "1+"),
    Field("include_documentation", "bool", "3+"),
])
DescribeConfigsResponse = Response(ApiKey.DESCRIBE_CONFIGS, "0-4", flexible="4+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("results", fields=[
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
        Array("configs", fields=[
            Field("name", "string"),
            Field("value", "string", nullable="0+"),
            Field("read_only", "bool"),
            Field("is_default", "bool", "0"),
            Field("config_source", "int8", "1+", default=-1),
            Field("is_sensitive", "bool"),
            Array("synonyms", "1+", fields=[
                Field("name", "string"),
                Field("value", "string", nullable="0+"),
                Field("source", "int8"),
            ]),
            Field("config_type", "int8", "3+"),
            Field("documentation", "string", "3+", nullable="3+"),
        ]),
    ]),
])

# AlterConfigs, API key 33. Replaces a resource's whole config. v2: flexible.
AlterConfigsRequest = Request(ApiKey.ALTER_CONFIGS, "0-2", flexible="2+", fields=[
    Array("resources", fields=[
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
        Array("configs", fields=[
            Field("name", "string"),
            Field("value", "string", nullable="0+"),
        ]),
    ]),
    Field("validate_only", "bool"),
])
AlterConfigsResponse = Response(ApiKey.ALTER_CONFIGS, "0-2", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("responses", fields=[
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
    ]),
])

# IncrementalAlterConfigs, API key 44. Set / delete / append / subtract single
# config entries (KIP-339). v1: flexible.
IncrementalAlterConfigsRequest = Request(ApiKey.INCREMENTAL_ALTER_CONFIGS, "0-1", flexible="1+", fields=[
    Array("resources", fields=[
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
        Array("configs", fields=[
            Field("name", "string"),
            Field("config_operation", "int8"),
            Field("value", "string", nullable="0+"),
        ]),
    ]),
    Field("validate_only", "bool"),
])
IncrementalAlterConfigsResponse = Response(ApiKey.INCREMENTAL_ALTER_CONFIGS, "0-1", flexible="1+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("responses", fields=[
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
    ]),
])

# DescribeLogDirs, API key 35. v2: flexible. v3: top-level error_code. v4:
# total_bytes and usable_bytes (KIP-827).
DescribeLogDirsRequest = Request(ApiKey.DESCRIBE_LOG_DIRS, "0-4", flexible="2+", fields=[
    Array("topics", nullable="0+", fields=[
        Field("topic", "string"),
        Field("partitions", "[]int32"),
    ]),
])
DescribeLogDirsResponse = Response(ApiKey.DESCRIBE_LOG_DIRS, "0-4", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16", "3+"),
    Array("results", fields=[
        Field("error_code", "int16"),
        Field("log_dir", "string"),
        Array("topics", fields=[
            Field("name", "string"),
            Array("partitions", fields=[
                Field("partition_index", "int32"),
                Field("partition_size", "int64"),
                Field("offset_lag", "int64"),
                Field("is_future_key", "bool"),
            ]),
        ]),
        Field("total_bytes", "int64", "4+", default=-1),
        Field("usable_bytes", "int64", "4+", default=-1),
    ]),
])

# AlterReplicaLogDirs, API key 34: move replicas between a broker's log
# directories (KIP-113). v1: as v0 (throttling). v2: flexible. A kafkalite
# broker has one log dir, so a replica is always in the dir named or the dir
# is not the broker's (server/replica/replica_manager.py).
AlterReplicaLogDirsRequest = Request(ApiKey.ALTER_REPLICA_LOG_DIRS, "0-2", flexible="2+", fields=[
    Array("dirs", fields=[
        Field("path", "string"),
        Array("topics", fields=[
            Field("name", "string"),
            Field("partitions", "[]int32"),
        ]),
    ]),
])
AlterReplicaLogDirsResponse = Response(ApiKey.ALTER_REPLICA_LOG_DIRS, "0-2", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("results", fields=[
        Field("topic_name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
        ]),
    ]),
])


# ElectLeaders, API key 43 (KIP-183, KIP-460). v1: election_type (0
# preferred, 1 unclean) and a top-level error_code. v2: flexible.
ElectLeadersRequest = Request(ApiKey.ELECT_LEADERS, "0-2", flexible="2+", fields=[
    Field("election_type", "int8", "1+"),
    Array("topic_partitions", nullable="0+", fields=[
        Field("topic", "string"),
        Field("partitions", "[]int32"),
    ]),
    Field("timeout_ms", "int32", default=60000),
])
ElectLeadersResponse = Response(ApiKey.ELECT_LEADERS, "0-2", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16", "1+"),
    Array("replica_election_results", fields=[
        Field("topic", "string"),
        Array("partition_result", fields=[
            Field("partition_id", "int32"),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+"),
        ]),
    ]),
])


# AlterPartitionReassignments, API key 45, and ListPartitionReassignments, 46
# (KIP-455): move a partition's replicas to other brokers, copying the data
# before the old replicas are dropped; null replicas cancel. v1:
# allow_replication_factor_change false refuses a move that would change a
# partition's replica count (KIP-860), answered back in the response.
AlterPartitionReassignmentsRequest = Request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, "0-1",
                                             flexible="0+", fields=[
    Field("timeout_ms", "int32", default=60000),
    Field("allow_replication_factor_change", "bool", "1+", default=True),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("replicas", "[]int32", nullable="0+"),
        ]),
    ]),
])
AlterPartitionReassignmentsResponse = Response(ApiKey.ALTER_PARTITION_REASSIGNMENTS, "0-1",
                                               flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("allow_replication_factor_change", "bool", "1+", default=True),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Array("responses", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+"),
        ]),
    ]),
])
ListPartitionReassignmentsRequest = Request(ApiKey.LIST_PARTITION_REASSIGNMENTS, "0",
                                            flexible="0+", fields=[
    Field("timeout_ms", "int32", default=60000),
    Array("topics", nullable="0+", fields=[
        Field("name", "string"),
        Field("partition_indexes", "[]int32"),
    ]),
])
ListPartitionReassignmentsResponse = Response(ApiKey.LIST_PARTITION_REASSIGNMENTS, "0",
                                              flexible="0+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Array("topics", fields=[
        Field("name", "string"),
        Array("partitions", fields=[
            Field("partition_index", "int32"),
            Field("replicas", "[]int32"),
            Field("adding_replicas", "[]int32"),
            Field("removing_replicas", "[]int32"),
        ]),
    ]),
])


# DescribeAcls, CreateAcls, DeleteAcls: API keys 29, 30, 31 (KIP-140). v1:
# resource pattern type (KIP-290; v0 means LITERAL). v2: flexible. v3: USER
# resource type (KIP-554). Enums: protocol/enums.py (ResourceType,
# PatternType, AclOperation, AclPermissionType).
_ACL = [
    Field("principal", "string"),
    Field("host", "string"),
    Field("operation", "int8"),
    Field("permission_type", "int8"),
]
_ACL_FILTER = [
    Field("resource_type_filter", "int8"),
    Field("resource_name_filter", "string", nullable="0+"),
    Field("pattern_type_filter", "int8", "1+", default=3),
    Field("principal_filter", "string", nullable="0+"),
    Field("host_filter", "string", nullable="0+"),
    Field("operation", "int8"),
    Field("permission_type", "int8"),
]
DescribeAclsRequest = Request(ApiKey.DESCRIBE_ACLS, "0-3", flexible="2+", fields=_ACL_FILTER)
DescribeAclsResponse = Response(ApiKey.DESCRIBE_ACLS, "0-3", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Array("resources", fields=[
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
        Field("pattern_type", "int8", "1+", default=3),
        Array("acls", fields=_ACL),
    ]),
])
CreateAclsRequest = Request(ApiKey.CREATE_ACLS, "0-3", flexible="2+", fields=[
    Array("creations", fields=[
        Field("resource_type", "int8"),
        Field("resource_name", "string"),
        Field("resource_pattern_type", "int8", "1+", default=3),
        *_ACL,
    ]),
])
CreateAclsResponse = Response(ApiKey.CREATE_ACLS, "0-3", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("results", fields=[
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
    ]),
])
DeleteAclsRequest = Request(ApiKey.DELETE_ACLS, "0-3", flexible="2+", fields=[
    Array("filters", fields=_ACL_FILTER),
])
DeleteAclsResponse = Response(ApiKey.DELETE_ACLS, "0-3", flexible="2+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("filter_results", fields=[
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
        Array("matching_acls", fields=[
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+"),
            Field("resource_type", "int8"),
            Field("resource_name", "string"),
            Field("pattern_type", "int8", "1+", default=3),
            *_ACL,
        ]),
    ]),
])

# DescribeClientQuotas, AlterClientQuotas: API keys 48, 49 (KIP-546). v1:
# flexible. An entity is a list of (entity_type, entity_name) with entity
# types "user", "client-id" (and "ip", which kafkalite refuses); a null name
# is the type's default entity. Match types of a describe filter: 0 exact
# name, 1 the default, 2 any specified name.
_QUOTA_ENTITY = Array("entity", fields=[
    Field("entity_type", "string"),
    Field("entity_name", "string", nullable="0+"),
])
DescribeClientQuotasRequest = Request(ApiKey.DESCRIBE_CLIENT_QUOTAS, "0-1", flexible="1+", fields=[
    Array("components", fields=[
        Field("entity_type", "string"),
        Field("match_type", "int8"),
        Field("match", "string", nullable="0+"),
    ]),
    Field("strict", "bool"),
])
DescribeClientQuotasResponse = Response(ApiKey.DESCRIBE_CLIENT_QUOTAS, "0-1", flexible="1+",
                                        fields=[
    Field("throttle_time_ms", "int32"),
    Field("error_code", "int16"),
    Field("error_message", "string", nullable="0+"),
    Array("entries", nullable="0+", fields=[
        _QUOTA_ENTITY,
        Array("values", fields=[
            Field("key", "string"),
            Field("value", "float64"),
        ]),
    ]),
])
AlterClientQuotasRequest = Request(ApiKey.ALTER_CLIENT_QUOTAS, "0-1", flexible="1+", fields=[
    Array("entries", fields=[
        _QUOTA_ENTITY,
        Array("ops", fields=[
            Field("key", "string"),
            Field("value", "float64"),
            Field("remove", "bool"),
        ]),
    ]),
    Field("validate_only", "bool"),
])
AlterClientQuotasResponse = Response(ApiKey.ALTER_CLIENT_QUOTAS, "0-1", flexible="1+", fields=[
    Field("throttle_time_ms", "int32"),
    Array("entries", fields=[
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
        _QUOTA_ENTITY,
    ]),
])


# DescribeUserScramCredentials and AlterUserScramCredentials: API keys 50, 51
# (KIP-554), v0 flexible. ``mechanism`` is Kafka's ScramMechanism type: 1
# SCRAM-SHA-256, 2 SCRAM-SHA-512 (0 unknown). Alter carries the salt and the
# client-salted password (Hi(password, salt, iterations), RFC 5802), never
# the password.
DescribeUserScramCredentialsRequest = Request(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "0", flexible="0+", fields=[
        Array("users", nullable="0+", fields=[Field("name", "string")]),
    ])
DescribeUserScramCredentialsResponse = Response(
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, "0", flexible="0+", fields=[
        Field("throttle_time_ms", "int32"),
        Field("error_code", "int16"),
        Field("error_message", "string", nullable="0+"),
        Array("results", fields=[
            Field("user", "string"),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+"),
            Array("credential_infos", fields=[
                Field("mechanism", "int8"),
                Field("iterations", "int32"),
            ]),
        ]),
    ])
AlterUserScramCredentialsRequest = Request(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "0", flexible="0+", fields=[
        Array("deletions", fields=[
            Field("name", "string"),
            Field("mechanism", "int8"),
        ]),
        Array("upsertions", fields=[
            Field("name", "string"),
            Field("mechanism", "int8"),
            Field("iterations", "int32"),
            Field("salt", "bytes"),
            Field("salted_password", "bytes"),
        ]),
    ])
AlterUserScramCredentialsResponse = Response(
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS, "0", flexible="0+", fields=[
        Field("throttle_time_ms", "int32"),
        Array("results", fields=[
            Field("user", "string"),
            Field("error_code", "int16"),
            Field("error_message", "string", nullable="0+"),
        ]),
    ])
