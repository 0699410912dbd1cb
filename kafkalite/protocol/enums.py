"""The small integer enumerations of Kafka's protocol, defined once.

Requests and responses carry these as plain int8/int16 fields; the broker
and the clients compare against these names instead of literals. Values
are Kafka's (the Java classes named on each).
"""
from __future__ import annotations

from enum import IntEnum


class ResourceType(IntEnum):
    """ACL resource types (org.apache.kafka.common.resource.ResourceType).

    confluent-kafka's ``ResourceType`` uses the same numbers, calling 4
    BROKER where Kafka says CLUSTER; the admin client accepts either name.
    """

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class AclOperation(IntEnum):
    """ACL operations (org.apache.kafka.common.acl.AclOperation). ANY only
    in filters; ALL in an ACL grants (or denies) every operation."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(IntEnum):
    """ACL permission types (org.apache.kafka.common.acl.AclPermissionType)."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class PatternType(IntEnum):
    """ACL resource pattern types (org.apache.kafka.common.resource.PatternType).
    ANY and MATCH only in filters: MATCH finds the ACLs that would apply to
    a resource name (literal equal, literal ``*``, or a prefix of it)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class ConfigResourceType(IntEnum):
    """Resource types of DescribeConfigs / AlterConfigs / IncrementalAlterConfigs
    (org.apache.kafka.common.config.ConfigResource.Type)."""

    UNKNOWN = 0
    TOPIC = 2
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    GROUP = 32


class AlterConfigOp(IntEnum):
    """IncrementalAlterConfigs operations (AlterConfigOp.OpType)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigSource(IntEnum):
    """Where a described config value comes from (DescribeConfigsResponse).
    UNKNOWN_CONFIG is confluent-kafka's name for UNKNOWN."""

    UNKNOWN = 0
    UNKNOWN_CONFIG = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8


class ConfigType(IntEnum):
    """The type of a described config value (KIP-569)."""

    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class IsolationLevel(IntEnum):
    """Fetch and ListOffsets isolation levels."""

    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


class CoordinatorType(IntEnum):
    """FindCoordinator key types."""

    GROUP = 0
    TRANSACTION = 1
    SHARE = 2


class EndpointType(IntEnum):
    """DescribeCluster endpoint types (KIP-919)."""

    BROKER = 1
    CONTROLLER = 2


# Authorized-operations bitfields are "not requested / not computed" when
# set to this (Kafka's Integer.MIN_VALUE sentinel).
AUTHORIZED_OPERATIONS_OMITTED = -2147483648
