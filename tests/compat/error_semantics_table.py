"""The error-semantics table (issue 48, issue 70): ``ROWS``, for each API
key the cases Kafka defines and what Kafka answers them, per version range
(the expectations from Kafka's source, each row's citation beside it), and
``KNOWN_DIFFERENCES``, the rows kafkalite does not meet yet, with why.
test_error_semantics.py says how a row runs; error_semantics_rows.py holds
the builders the rows are written with.

Who may call: test_error_semantics.py.
"""
from __future__ import annotations

import uuid

from error_semantics_rows import (
    ALLOW,
    BOB_GROUP,
    BROKER_CONFIG,
    CONTROLLER,
    DESCRIBE_OP,
    E,
    LITERAL,
    NONE,
    SEEN,
    SMALL,
    TOPIC,
    TOPIC_CONFIG,
    TOPIC_RESOURCE,
    TRANSACTION_LEVEL,
    add_partitions,
    alter_configs,
    configs,
    create_topics,
    dead_group,
    delete_share_offsets,
    feature,
    fetch,
    join,
    list_offsets,
    metadata,
    new_topic,
    no_topics,
    offset_commit,
    offset_fetch,
    offsets_of,
    produce,
    Row,
    share_member,
    share_state,
    simple_group,
    token,
    topic_partitions,
    txn,
    voter,
)

from kafkalite.protocol import ApiKey

# ---- the table ----------------------------------------------------------------------------------

ROWS: dict[ApiKey, list[Row]] = {
    # v13 names topics by id (KIP-516): KafkaApis.handleProduceRequest answers an id
    # its metadata cache does not know UNKNOWN_TOPIC_ID, before it asks the authorizer
    ApiKey.PRODUCE: [
        Row("unknown topic", produce("errsem-missing-produce"),
            [(3, 12, E.UNKNOWN_TOPIC_OR_PARTITION), (13, 13, E.UNKNOWN_TOPIC_ID)],
            versions=(3, 13), node="worker"),
        Row("unknown partition index", produce(TOPIC, partition=7),
            E.UNKNOWN_TOPIC_OR_PARTITION, versions=(3, 13), node="leader"),
        Row("acks=2", produce(TOPIC, acks=2), E.INVALID_REQUIRED_ACKS, versions=(3, 13),
            node="leader"),
        Row("a record over max.message.bytes", produce(SMALL, value=b"x" * 2000),
            E.MESSAGE_TOO_LARGE, versions=(3, 13), node="leader"),
        Row("no WRITE on the topic", produce(TOPIC), E.TOPIC_AUTHORIZATION_FAILED,
            versions=(3, 13), node="leader", user="alice"),
        Row("DESCRIBE but no WRITE on the topic", produce(SEEN), E.TOPIC_AUTHORIZATION_FAILED,
            versions=(3, 13), node="leader", user="bob"),
        Row("no WRITE, a topic id that does not exist", produce("errsem-missing-produce"),
            E.UNKNOWN_TOPIC_ID, versions=(13, 13), node="leader", user="alice"),
    ],
    ApiKey.FETCH: [
        # KafkaApis.handleFetchRequest: from v13 (KIP-516) the topics are ids, and an id
        # the metadata cache does not know is UNKNOWN_TOPIC_ID, before the authorizer
        Row("unknown topic", fetch(None), [(0, 12, E.UNKNOWN_TOPIC_OR_PARTITION),
                                           (13, 18, E.UNKNOWN_TOPIC_ID)], node="worker"),
        Row("unknown partition index", fetch(TOPIC, partition=7),
            E.UNKNOWN_TOPIC_OR_PARTITION, node="leader"),
        Row("offset past the log end", fetch(TOPIC, offset=1000), E.OFFSET_OUT_OF_RANGE,
            node="leader"),
        Row("no READ on the topic", fetch(TOPIC), E.TOPIC_AUTHORIZATION_FAILED,
            versions=(4, 18), node="leader", user="alice"),
        Row("no READ, a topic id that does not exist", fetch(None), E.UNKNOWN_TOPIC_ID,
            versions=(13, 18), node="leader", user="alice"),
    ],
    ApiKey.LIST_OFFSETS: [
        Row("unknown topic", list_offsets(None), E.UNKNOWN_TOPIC_OR_PARTITION, node="worker"),
        Row("unknown partition index", list_offsets(TOPIC, partition=7),
            E.UNKNOWN_TOPIC_OR_PARTITION, node="leader"),
        Row("a timestamp spec Kafka does not define", list_offsets(TOPIC, timestamp=-6),
            E.UNSUPPORTED_VERSION, versions=(1, 10), node="leader"),
        Row("no DESCRIBE on the topic", list_offsets(TOPIC), E.TOPIC_AUTHORIZATION_FAILED,
            node="leader", user="alice"),
    ],
    ApiKey.METADATA: [
        Row("unknown topic", metadata(None), E.UNKNOWN_TOPIC_OR_PARTITION, versions=(4, 13)),
        # KafkaApis.getTopicMetadata hands a missing topic to AutoTopicCreationManager,
        # whose createTopics answers it UNKNOWN_TOPIC_OR_PARTITION while the controller
        # makes it (the client asks again); before v4 every request asks for it
        Row("unknown topic, its auto-creation asked for", metadata(None, auto_create=True),
            E.UNKNOWN_TOPIC_OR_PARTITION),
        # Topic.validate in getTopicMetadata, and in AutoTopicCreationManager's
        # filterCreatableTopics when auto-creation is asked for
        Row("an invalid topic name", metadata("not valid!"), E.INVALID_TOPIC_EXCEPTION),
        # handleTopicMetadataRequest: "Topic IDs are not supported in requests for
        # version" 10 and 11 (an InvalidRequestException: every topic INVALID_REQUEST)
        Row("unknown topic id", metadata(None, by_id=True),
            [(10, 11, E.INVALID_REQUEST), (12, 13, E.UNKNOWN_TOPIC_ID)], versions=(10, 13)),
        Row("no DESCRIBE on the topic", metadata(TOPIC), E.TOPIC_AUTHORIZATION_FAILED,
            user="alice"),
        Row("no DESCRIBE on a topic that does not exist", metadata(None),
            E.TOPIC_AUTHORIZATION_FAILED, user="alice"),
        Row("DESCRIBE on the topic", metadata(SEEN), NONE, user="bob"),
        # unknown ids are answered before the authorizer; "Topic IDs are not considered
        # sensitive information, so returning TOPIC_AUTHORIZATION_FAILED is OK"
        Row("no DESCRIBE, a topic id that does not exist", metadata(None, by_id=True),
            E.UNKNOWN_TOPIC_ID, versions=(12, 13), user="alice"),
        Row("no DESCRIBE on a topic named by its id", metadata(TOPIC, by_id=True),
            E.TOPIC_AUTHORIZATION_FAILED, versions=(12, 13), user="alice"),
    ],
    ApiKey.OFFSET_COMMIT: [
        Row("unknown topic, simple group", offset_commit(), E.UNKNOWN_TOPIC_OR_PARTITION,
            versions=(2, 9)),
        Row("unknown group with a generation", offset_commit(TOPIC, generation=5, member="m"),
            [(1, 8, E.ILLEGAL_GENERATION), (9, 9, E.GROUP_ID_NOT_FOUND)], versions=(1, 9)),
        Row("the empty group id, kept for backwards compatibility: a simple group's",
            offset_commit(TOPIC, group=""), NONE, versions=(2, 9),
            user="admin"),        # the other server's: the shared one's "" stays unknown
        Row("metadata over offset.metadata.max.bytes", offset_commit(TOPIC, metadata="m" * 5000),
            E.OFFSET_METADATA_TOO_LARGE, versions=(2, 9)),
        Row("no READ on the group", offset_commit(TOPIC), E.GROUP_AUTHORIZATION_FAILED,
            versions=(2, 9), user="alice"),
    ],
    ApiKey.OFFSET_FETCH: [
        Row("unknown group: no error, offset -1", offset_fetch(), NONE, versions=(1, 9),
            check=lambda r: offsets_of(r) == [-1]),
        Row("the empty group id, kept for backwards compatibility: no error, offset -1",
            offset_fetch(group=""), NONE, versions=(1, 9), check=lambda r: offsets_of(r) == [-1]),
        Row("no DESCRIBE on the group", offset_fetch(), E.GROUP_AUTHORIZATION_FAILED,
            versions=(1, 9), user="alice"),
    ],
    ApiKey.FIND_COORDINATOR: [
        Row("an undefined key type", lambda w, v: {"key_type": 7, "key": "g",
                                                   "coordinator_keys": ["g"]},
            E.INVALID_REQUEST, versions=(1, 6)),
        Row("no DESCRIBE on the group", lambda w, v: {"key_type": 0, "key": "g",
                                                      "coordinator_keys": ["g"]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
        Row("no DESCRIBE on the transactional id",
            lambda w, v: {"key_type": 1, "key": "t", "coordinator_keys": ["t"]},
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, versions=(1, 6), user="alice"),
    ],
    ApiKey.JOIN_GROUP: [
        Row("session timeout under group.min.session.timeout.ms", join(session=1),
            E.INVALID_SESSION_TIMEOUT),
        Row("session timeout over group.max.session.timeout.ms", join(session=3_600_000),
            E.INVALID_SESSION_TIMEOUT),
        Row("empty group id", join(group=""), E.INVALID_GROUP_ID),
        Row("unknown member id of a group that does not exist", join(member="nobody"),
            E.UNKNOWN_MEMBER_ID),
        Row("empty protocol type", join(protocol_type=""), E.INCONSISTENT_GROUP_PROTOCOL),
        Row("no protocols", join(protocols=[]), E.INCONSISTENT_GROUP_PROTOCOL),
        Row("no READ on the group", join(), E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.HEARTBEAT: [
        Row("unknown group", lambda w, v: {"group_id": w.missing("group"), "generation_id": 1,
                                           "member_id": "m", "group_instance_id": None},
            E.UNKNOWN_MEMBER_ID),
        Row("empty group id", lambda w, v: {"group_id": "", "generation_id": 1,
                                            "member_id": "m"}, E.INVALID_GROUP_ID),
        Row("no READ on the group", lambda w, v: {"group_id": "g", "generation_id": 1,
                                                  "member_id": "m"},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.LEAVE_GROUP: [
        Row("unknown group", lambda w, v: {"group_id": w.missing("group"), "member_id": "m",
                                           "members": [{"member_id": "m",
                                                        "group_instance_id": None}]},
            E.UNKNOWN_MEMBER_ID),
        Row("empty group id", lambda w, v: {"group_id": "", "member_id": "m", "members": [
            {"member_id": "m", "group_instance_id": None}]}, E.INVALID_GROUP_ID),
        Row("no READ on the group", lambda w, v: {"group_id": "g", "member_id": "m", "members": [
            {"member_id": "m", "group_instance_id": None}]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.SYNC_GROUP: [
        Row("unknown group", lambda w, v: {"group_id": w.missing("group"), "generation_id": 1,
                                           "member_id": "m", "protocol_type": "consumer",
                                           "protocol_name": "range", "assignments": []},
            E.UNKNOWN_MEMBER_ID),
        Row("empty group id", lambda w, v: {"group_id": "", "generation_id": 1,
                                            "member_id": "m", "protocol_type": "consumer",
                                            "protocol_name": "range", "assignments": []},
            E.INVALID_GROUP_ID),
        Row("no READ on the group", lambda w, v: {"group_id": "g", "generation_id": 1,
                                                  "member_id": "m", "assignments": []},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    # KIP-1043: GroupMetadataManager.describeGroups answers a group it does not have
    # GROUP_ID_NOT_FOUND when context.requestVersion() >= 6, and NONE before, state Dead
    # either way; the empty id is looked up as any other (GroupCoordinatorService's
    # describeGroups answers INVALID_GROUP_ID only for a null one)
    ApiKey.DESCRIBE_GROUPS: [
        Row("unknown group: state Dead", lambda w, v: {"groups": [w.missing("group")]},
            [(0, 5, NONE), (6, 6, E.GROUP_ID_NOT_FOUND)], check=dead_group),
        Row("the empty group id, kept for backwards compatibility: state Dead",
            lambda w, v: {"groups": [""]}, [(0, 5, NONE), (6, 6, E.GROUP_ID_NOT_FOUND)],
            check=dead_group),
        Row("no DESCRIBE on the group", lambda w, v: {"groups": ["g"]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.LIST_GROUPS: [
        Row("an unknown state filter: nothing listed", lambda w, v: {
            "states_filter": ["NoSuchState"], "types_filter": []}, NONE, versions=(4, 5),
            check=lambda r: r["groups"] == []),
        Row("no DESCRIBE on the cluster: only the groups it may describe", lambda w, v: {},
            NONE, user="alice", check=lambda r: r["groups"] == []),
    ],
    ApiKey.SASL_HANDSHAKE: [
        Row("a mechanism the listener does not enable", lambda w, v: {"mechanism": "BOGUS"},
            E.UNSUPPORTED_SASL_MECHANISM, user="anonymous", fresh=True),
    ],
    ApiKey.API_VERSIONS: [
        Row("an invalid client software name (KIP-511)", lambda w, v: {
            "client_software_name": "not valid!", "client_software_version": "1"},
            E.INVALID_REQUEST, versions=(3, 4)),
    ],
    ApiKey.CREATE_TOPICS: [
        Row("0 partitions", create_topics(new_topic(partitions=0)), E.INVALID_PARTITIONS),
        Row("-2 partitions", create_topics(new_topic(partitions=-2)), E.INVALID_PARTITIONS),
        Row("replication factor 0", create_topics(new_topic(rf=0)),
            E.INVALID_REPLICATION_FACTOR),
        Row("replication factor over the brokers", create_topics(new_topic(rf=7)),
            E.INVALID_REPLICATION_FACTOR),
        Row("an invalid topic name", create_topics(new_topic(name="not valid!")),
            E.INVALID_TOPIC_EXCEPTION),
        Row("topic name '..'", create_topics(new_topic(name="..")), E.INVALID_TOPIC_EXCEPTION),
        Row("a topic name over 249 characters", create_topics(new_topic(name="t" * 250)),
            E.INVALID_TOPIC_EXCEPTION),
        Row("an unknown config", create_topics(new_topic(configs=[("no.such.config", "1")])),
            E.INVALID_CONFIG),
        Row("an invalid config value", create_topics(new_topic(configs=[("retention.ms", "x")])),
            E.INVALID_CONFIG),
        Row("the same topic twice in one request",
            create_topics(new_topic(name="errsem-dup"), new_topic(name="errsem-dup")),
            E.INVALID_REQUEST),
        Row("assignments and a replication factor", create_topics(new_topic(
            partitions=-1, rf=1, assignments=[{"partition_index": 0, "broker_ids": [0]}])),
            E.INVALID_REQUEST, versions=(4, 7)),
        Row("a topic that exists", create_topics(new_topic(name=TOPIC)),
            E.TOPIC_ALREADY_EXISTS),
        Row("no CREATE", create_topics(new_topic()), E.TOPIC_AUTHORIZATION_FAILED,
            user="alice"),
        Row("an existing topic it may not DESCRIBE", create_topics(new_topic(name=TOPIC)),
            E.TOPIC_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DELETE_TOPICS: [
        Row("unknown topic name", lambda w, v: {
            "timeout_ms": 5000, "topic_names": [w.missing("topic")],
            "topics": [{"name": w.missing("topic"), "topic_id": uuid.UUID(int=0)}]},
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("unknown topic id", lambda w, v: {"timeout_ms": 5000, "topics": [
            {"name": None, "topic_id": uuid.uuid4()}]}, E.UNKNOWN_TOPIC_ID, versions=(6, 6)),
        Row("a name and an id", lambda w, v: {"timeout_ms": 5000, "topics": [
            {"name": w.missing("topic"), "topic_id": uuid.uuid4()}]}, E.INVALID_REQUEST,
            versions=(6, 6)),
        Row("no DELETE on the topic", lambda w, v: {
            "timeout_ms": 5000, "topic_names": [TOPIC],
            "topics": [{"name": TOPIC, "topic_id": uuid.UUID(int=0)}]},
            E.TOPIC_AUTHORIZATION_FAILED, user="alice"),
        Row("DESCRIBE but no DELETE on the topic", lambda w, v: {
            "timeout_ms": 5000, "topic_names": [SEEN],
            "topics": [{"name": SEEN, "topic_id": uuid.UUID(int=0)}]},
            E.TOPIC_AUTHORIZATION_FAILED, user="bob"),
    ],
    ApiKey.DELETE_RECORDS: [
        Row("unknown topic", topic_partitions(("topics", "name", "partitions", lambda p: {
            "partition_index": p, "offset": 0})), E.UNKNOWN_TOPIC_OR_PARTITION, node="worker"),
        Row("an offset past the high watermark", topic_partitions(
            ("topics", "name", "partitions", lambda p: {"partition_index": p, "offset": 1000}),
            topic=TOPIC), E.OFFSET_OUT_OF_RANGE, node="leader"),
        Row("no DELETE on the topic", topic_partitions(("topics", "name", "partitions",
                                                        lambda p: {"partition_index": p,
                                                                   "offset": 0}), topic=TOPIC),
            E.TOPIC_AUTHORIZATION_FAILED, node="leader", user="alice"),
    ],
    ApiKey.INIT_PRODUCER_ID: [
        Row("a transaction timeout over transaction.max.timeout.ms", lambda w, v: {
            "transactional_id": w.missing("txn"), "transaction_timeout_ms": 3_600_000,
            "producer_id": -1, "producer_epoch": -1}, E.INVALID_TRANSACTION_TIMEOUT),
        Row("an empty transactional id", lambda w, v: {
            "transactional_id": "", "transaction_timeout_ms": 60_000, "producer_id": -1,
            "producer_epoch": -1}, E.INVALID_REQUEST),
        Row("no WRITE on the transactional id", lambda w, v: {
            "transactional_id": "t", "transaction_timeout_ms": 60_000, "producer_id": -1,
            "producer_epoch": -1}, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, user="alice"),
        Row("idempotent without IDEMPOTENT_WRITE or WRITE on a topic", lambda w, v: {
            "transactional_id": None, "transaction_timeout_ms": 60_000, "producer_id": -1,
            "producer_epoch": -1}, E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.OFFSET_FOR_LEADER_EPOCH: [
        Row("unknown topic", topic_partitions(("topics", "topic", "partitions", lambda p: {
            "partition": p, "current_leader_epoch": -1, "leader_epoch": 0})),
            E.UNKNOWN_TOPIC_OR_PARTITION, node="worker"),
        Row("no DESCRIBE on the topic", topic_partitions(("topics", "topic", "partitions",
                                                          lambda p: {"partition": p,
                                                                     "current_leader_epoch": -1,
                                                                     "leader_epoch": 0}),
                                                         topic=TOPIC),
            E.TOPIC_AUTHORIZATION_FAILED, node="leader", user="alice"),
    ],
    ApiKey.ADD_PARTITIONS_TO_TXN: [
        Row("unknown transactional id", add_partitions(), E.INVALID_PRODUCER_ID_MAPPING),
        Row("no WRITE on the transactional id", add_partitions(),
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.ADD_OFFSETS_TO_TXN: [
        Row("unknown transactional id", txn({"group_id": "g"}), E.INVALID_PRODUCER_ID_MAPPING),
        Row("no WRITE on the transactional id", txn({"group_id": "g"}),
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.END_TXN: [
        Row("unknown transactional id", txn({"committed": True}), E.INVALID_PRODUCER_ID_MAPPING),
        Row("no WRITE on the transactional id", txn({"committed": True}),
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.WRITE_TXN_MARKERS: [
        Row("unknown topic", lambda w, v: {"markers": [{
            "producer_id": 4242, "producer_epoch": 0, "transaction_result": False,
            "coordinator_epoch": 0, "topics": [{"name": w.missing("topic"),
                                                "partition_indexes": [0]}]}]},
            E.UNKNOWN_TOPIC_OR_PARTITION, node="worker"),
        Row("no CLUSTER_ACTION", lambda w, v: {"markers": [{
            "producer_id": 4242, "producer_epoch": 0, "transaction_result": False,
            "coordinator_epoch": 0, "topics": [{"name": TOPIC, "partition_indexes": [0]}]}]},
            E.CLUSTER_AUTHORIZATION_FAILED, node="leader", user="alice"),
    ],
    ApiKey.TXN_OFFSET_COMMIT: [
        Row("empty group id", txn({"group_id": "", "generation_id": -1, "member_id": "",
                                   "topics": [{"name": TOPIC, "partitions": [
                                       {"partition_index": 0, "committed_offset": 1}]}]}),
            E.INVALID_GROUP_ID),
        Row("no WRITE on the transactional id", txn({
            "group_id": "g", "topics": [{"name": TOPIC, "partitions": [
                {"partition_index": 0, "committed_offset": 1}]}]}),
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DESCRIBE_ACLS: [
        Row("without an authorizer", lambda w, v: {
            "resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
            "permission_type": 1}, E.SECURITY_DISABLED),
        Row("no DESCRIBE on the cluster", lambda w, v: {
            "resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
            "permission_type": 1}, E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.CREATE_ACLS: [
        Row("without an authorizer", lambda w, v: {"creations": [{
            "resource_type": TOPIC_RESOURCE, "resource_name": TOPIC,
            "resource_pattern_type": LITERAL, "principal": "User:x", "host": "*",
            "operation": DESCRIBE_OP, "permission_type": ALLOW}]}, E.SECURITY_DISABLED),
        Row("no ALTER on the cluster", lambda w, v: {"creations": [{
            "resource_type": TOPIC_RESOURCE, "resource_name": TOPIC,
            "resource_pattern_type": LITERAL, "principal": "User:x", "host": "*",
            "operation": DESCRIBE_OP, "permission_type": ALLOW}]},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DELETE_ACLS: [
        Row("without an authorizer", lambda w, v: {"filters": [{
            "resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
            "permission_type": 1}]}, E.SECURITY_DISABLED),
        Row("no ALTER on the cluster", lambda w, v: {"filters": [{
            "resource_type_filter": 1, "pattern_type_filter": 1, "operation": 1,
            "permission_type": 1}]}, E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DESCRIBE_CONFIGS: [
        Row("unknown topic", configs(TOPIC_CONFIG, None), E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("another broker's id", configs(BROKER_CONFIG, "99"), E.INVALID_REQUEST),
        Row("an undefined resource type", configs(99, "x"), E.INVALID_REQUEST),
        Row("no DESCRIBE_CONFIGS on the topic", configs(TOPIC_CONFIG, TOPIC),
            E.TOPIC_AUTHORIZATION_FAILED, user="alice"),
        Row("no DESCRIBE_CONFIGS on the cluster", configs(BROKER_CONFIG, str(CONTROLLER)),
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.ALTER_CONFIGS: [
        Row("unknown topic", alter_configs(TOPIC_CONFIG, None, [("retention.ms", "1000")]),
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("an unknown config", alter_configs(TOPIC_CONFIG, TOPIC, [("no.such.config", "1")]),
            E.INVALID_CONFIG),
        Row("an invalid config value", alter_configs(TOPIC_CONFIG, TOPIC,
                                                     [("retention.ms", "x")]), E.INVALID_CONFIG),
        Row("another broker's id", alter_configs(BROKER_CONFIG, "99", [
            ("log.retention.ms", "1000")]), E.INVALID_REQUEST),
        Row("no ALTER_CONFIGS on the topic", alter_configs(TOPIC_CONFIG, TOPIC, [
            ("retention.ms", "1000")]), E.TOPIC_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.INCREMENTAL_ALTER_CONFIGS: [
        Row("unknown topic", alter_configs(TOPIC_CONFIG, None, [("retention.ms", "1000")],
                                           incremental=True),
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("an unknown config", alter_configs(TOPIC_CONFIG, TOPIC, [("no.such.config", "1")],
                                               incremental=True),
            E.INVALID_CONFIG),
        Row("no ALTER_CONFIGS on the cluster", alter_configs(BROKER_CONFIG, str(CONTROLLER), [
            ("log.retention.ms", "1000")], incremental=True), E.CLUSTER_AUTHORIZATION_FAILED,
            user="alice"),
    ],
    ApiKey.ALTER_REPLICA_LOG_DIRS: [
        Row("unknown topic", lambda w, v: {"dirs": [{"path": "/nowhere", "topics": [
            {"name": w.missing("topic"), "partitions": [0]}]}]},
            [(0, 2, E.LOG_DIR_NOT_FOUND)]),
        Row("no ALTER on the cluster", lambda w, v: {"dirs": [{"path": "/x", "topics": [
            {"name": TOPIC, "partitions": [0]}]}]}, E.CLUSTER_AUTHORIZATION_FAILED,
            user="alice"),
    ],
    ApiKey.DESCRIBE_LOG_DIRS: [
        Row("unknown topic: not listed", lambda w, v: {"topics": [
            {"topic": w.missing("topic"), "partitions": [0]}]}, NONE, node="worker",
            check=no_topics),
        # handleDescribeLogDirsRequest answers no log dirs and CLUSTER_AUTHORIZATION_FAILED,
        # an error code the response has from v3 on
        Row("no DESCRIBE on the cluster", lambda w, v: {"topics": None},
            [(0, 2, NONE), (3, 4, E.CLUSTER_AUTHORIZATION_FAILED)], node="leader",
            user="alice", check=lambda r: r["results"] == []),
    ],
    ApiKey.SASL_AUTHENTICATE: [
        Row("a wrong password", lambda w, v: {"auth_bytes": b"\0alice\0wrong"},
            E.SASL_AUTHENTICATION_FAILED, user="anonymous", fresh=True),
    ],
    ApiKey.CREATE_PARTITIONS: [
        Row("unknown topic", lambda w, v: {"topics": [{"name": w.missing("topic"), "count": 3,
                                                        "assignments": None}],
                                            "timeout_ms": 5000, "validate_only": True},
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("fewer partitions than it has", lambda w, v: {"topics": [
            {"name": TOPIC, "count": 1, "assignments": None}], "timeout_ms": 5000,
            "validate_only": True}, E.INVALID_PARTITIONS),
        Row("no ALTER on the topic", lambda w, v: {"topics": [
            {"name": TOPIC, "count": 5, "assignments": None}], "timeout_ms": 5000,
            "validate_only": True}, E.TOPIC_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DELETE_GROUPS: [
        Row("unknown group", lambda w, v: {"groups_names": [w.missing("group")]},
            E.GROUP_ID_NOT_FOUND),
        Row("the empty group id, kept for backwards compatibility: not found",
            lambda w, v: {"groups_names": [""]}, E.GROUP_ID_NOT_FOUND),
        Row("no DELETE on the group", lambda w, v: {"groups_names": ["g"]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.ELECT_LEADERS: [
        Row("unknown topic", lambda w, v: {"election_type": 0, "timeout_ms": 5000,
                                           "topic_partitions": [{"topic": w.missing("topic"),
                                                                 "partitions": [0]}]},
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("a preferred leader that leads already", lambda w, v: {
            "election_type": 0, "timeout_ms": 5000, "topic_partitions": [
                {"topic": TOPIC, "partitions": [0]}]}, E.ELECTION_NOT_NEEDED),
        Row("no ALTER on the cluster", lambda w, v: {"election_type": 0, "timeout_ms": 5000,
                                                     "topic_partitions": [{"topic": TOPIC,
                                                                           "partitions": [0]}]},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: [
        Row("unknown topic", lambda w, v: {"timeout_ms": 5000, "topics": [
            {"name": w.missing("topic"), "partitions": [{"partition_index": 0,
                                                         "replicas": [0]}]}]},
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("a broker that does not exist", lambda w, v: {"timeout_ms": 5000, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": [77]}]}]},
            E.INVALID_REPLICA_ASSIGNMENT),
        Row("no replicas", lambda w, v: {"timeout_ms": 5000, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": []}]}]},
            E.INVALID_REPLICA_ASSIGNMENT),
        Row("cancelling where none is in progress", lambda w, v: {"timeout_ms": 5000, "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0, "replicas": None}]}]},
            E.NO_REASSIGNMENT_IN_PROGRESS),
        Row("no ALTER on the cluster", lambda w, v: {"timeout_ms": 5000, "topics": []},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.LIST_PARTITION_REASSIGNMENTS: [
        Row("unknown topic: nothing listed", lambda w, v: {"timeout_ms": 5000, "topics": [
            {"name": w.missing("topic"), "partition_indexes": [0]}]}, NONE,
            check=lambda r: r["topics"] == []),
        Row("no DESCRIBE on the cluster", lambda w, v: {"timeout_ms": 5000, "topics": None},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.OFFSET_DELETE: [
        Row("unknown group", lambda w, v: {"group_id": w.missing("group"), "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0}]}]}, E.GROUP_ID_NOT_FOUND),
        Row("empty group id", lambda w, v: {"group_id": "", "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0}]}]}, E.INVALID_GROUP_ID),
        Row("no DELETE on the group", lambda w, v: {"group_id": "g", "topics": [
            {"name": TOPIC, "partitions": [{"partition_index": 0}]}]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DESCRIBE_CLIENT_QUOTAS: [
        Row("an undefined match type", lambda w, v: {"components": [
            {"entity_type": "user", "match_type": 9, "match": None}], "strict": False},
            E.INVALID_REQUEST),
        Row("no DESCRIBE_CONFIGS on the cluster", lambda w, v: {"components": [],
                                                                "strict": False},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.ALTER_CLIENT_QUOTAS: [
        Row("an unknown quota key", lambda w, v: {"validate_only": True, "entries": [
            {"entity": [{"entity_type": "user", "entity_name": "u"}],
             "ops": [{"key": "no_such_quota", "value": 1.0, "remove": False}]}]},
            E.INVALID_REQUEST),
        Row("no ALTER_CONFIGS on the cluster", lambda w, v: {"validate_only": True, "entries": [
            {"entity": [{"entity_type": "user", "entity_name": "u"}],
             "ops": [{"key": "producer_byte_rate", "value": 1.0, "remove": False}]}]},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: [
        Row("unknown user", lambda w, v: {"users": [{"name": w.missing("user")}]},
            E.RESOURCE_NOT_FOUND),
        Row("the same user twice", lambda w, v: {"users": [{"name": "u"}, {"name": "u"}]},
            E.DUPLICATE_RESOURCE),
        Row("no DESCRIBE on the cluster", lambda w, v: {"users": None},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: [
        Row("deleting a user's credential it does not have", lambda w, v: {
            "deletions": [{"name": w.missing("user"), "mechanism": 1}], "upsertions": []},
            E.RESOURCE_NOT_FOUND),
        Row("an undefined mechanism", lambda w, v: {"deletions": [], "upsertions": [
            {"name": "u", "mechanism": 0, "iterations": 8192, "salt": b"s" * 16,
             "salted_password": b"p" * 32}]}, E.UNSUPPORTED_SASL_MECHANISM),
        Row("iterations under 4096", lambda w, v: {"deletions": [], "upsertions": [
            {"name": "u", "mechanism": 1, "iterations": 10, "salt": b"s" * 16,
             "salted_password": b"p" * 32}]}, E.UNACCEPTABLE_CREDENTIAL),
        Row("no ALTER on the cluster", lambda w, v: {"deletions": [
            {"name": "u", "mechanism": 1}], "upsertions": []},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DESCRIBE_QUORUM: [
        Row("a partition that is not the metadata log", lambda w, v: {"topics": [
            {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 3}]}]},
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("no DESCRIBE on the cluster", lambda w, v: {"topics": [
            {"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DESCRIBE_CLUSTER: [
        Row("the controllers' endpoints of a broker", lambda w, v: {
            "include_cluster_authorized_operations": False, "endpoint_type": 2},
            E.MISMATCHED_ENDPOINT_TYPE, versions=(1, 2), node="worker"),
        Row("an endpoint type Kafka does not define", lambda w, v: {
            "include_cluster_authorized_operations": False, "endpoint_type": 9},
            E.UNSUPPORTED_ENDPOINT_TYPE, versions=(1, 2)),
        Row("no DESCRIBE needed", lambda w, v: {
            "include_cluster_authorized_operations": False, "endpoint_type": 1}, NONE,
            user="alice"),
    ],
    ApiKey.DESCRIBE_PRODUCERS: [
        Row("unknown topic", lambda w, v: {"topics": [{"name": w.missing("topic"),
                                                       "partition_indexes": [0]}]},
            E.UNKNOWN_TOPIC_OR_PARTITION, node="worker"),
        Row("a partition this broker does not lead", lambda w, v: {"topics": [
            {"name": TOPIC, "partition_indexes": [0]}]}, E.NOT_LEADER_OR_FOLLOWER,
            node="follower"),
        Row("no READ on the topic", lambda w, v: {"topics": [{"name": TOPIC,
                                                              "partition_indexes": [0]}]},
            E.TOPIC_AUTHORIZATION_FAILED, node="leader", user="alice"),
    ],
    ApiKey.DESCRIBE_TRANSACTIONS: [
        Row("unknown transactional id", lambda w, v: {"transactional_ids": [w.missing("txn")]},
            E.TRANSACTIONAL_ID_NOT_FOUND),
        Row("no DESCRIBE on the transactional id", lambda w, v: {"transactional_ids": ["t"]},
            E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.LIST_TRANSACTIONS: [
        Row("an unknown state filter is named back", lambda w, v: {
            "state_filters": ["NoSuchState"], "producer_id_filters": [], "duration_filter": -1},
            NONE, check=lambda r: r["unknown_state_filters"] == ["NoSuchState"]),
        Row("no DESCRIBE: only the ids it may describe", lambda w, v: {
            "state_filters": [], "producer_id_filters": [], "duration_filter": -1}, NONE,
            user="alice", check=lambda r: r["transaction_states"] == []),
    ],
    ApiKey.CONSUMER_GROUP_HEARTBEAT: [
        Row("empty group id", lambda w, v: {
            "group_id": "", "member_id": str(uuid.uuid4()), "member_epoch": 0,
            "rebalance_timeout_ms": 10_000, "subscribed_topic_names": [TOPIC],
            "topic_partitions": []}, E.INVALID_REQUEST),
        Row("a member epoch in a group that does not exist", lambda w, v: {
            "group_id": w.missing("group"), "member_id": str(uuid.uuid4()),
            "member_epoch": 5, "subscribed_topic_names": None, "topic_partitions": None},
            E.GROUP_ID_NOT_FOUND),
        Row("no READ on the group", lambda w, v: {
            "group_id": "g", "member_id": str(uuid.uuid4()), "member_epoch": 0,
            "rebalance_timeout_ms": 10_000, "subscribed_topic_names": [TOPIC],
            "topic_partitions": []}, E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.CONSUMER_GROUP_DESCRIBE: [
        Row("unknown group", lambda w, v: {"group_ids": [w.missing("group")]},
            E.GROUP_ID_NOT_FOUND),
        Row("no DESCRIBE on the group", lambda w, v: {"group_ids": ["g"]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: [
        Row("unknown topic", lambda w, v: {"topics": [{"name": w.missing("topic")}],
                                           "response_partition_limit": 100, "cursor": None},
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("no DESCRIBE on the topic", lambda w, v: {"topics": [{"name": TOPIC}],
                                                      "response_partition_limit": 100,
                                                      "cursor": None},
            E.TOPIC_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.SHARE_GROUP_HEARTBEAT: [
        Row("empty group id", lambda w, v: {"group_id": "", "member_id": str(uuid.uuid4()),
                                            "member_epoch": 0,
                                            "subscribed_topic_names": [TOPIC]},
            E.INVALID_REQUEST),
        Row("a member epoch in a group that does not exist", lambda w, v: {
            "group_id": w.missing("group"), "member_id": str(uuid.uuid4()), "member_epoch": 5,
            "subscribed_topic_names": None}, E.GROUP_ID_NOT_FOUND),
        Row("no READ on the group", lambda w, v: {"group_id": "g",
                                                  "member_id": str(uuid.uuid4()),
                                                  "member_epoch": 0,
                                                  "subscribed_topic_names": [TOPIC]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.SHARE_GROUP_DESCRIBE: [
        Row("unknown group", lambda w, v: {"group_ids": [w.missing("group")]},
            E.GROUP_ID_NOT_FOUND),
        Row("no DESCRIBE on the group", lambda w, v: {"group_ids": ["g"]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.SHARE_FETCH: [
        Row("a session epoch without a session", lambda w, v: {
            "group_id": w.missing("group"), "member_id": str(uuid.uuid4()),
            "share_session_epoch": 5, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
            "max_records": 10, "batch_size": 10, "topics": [
                {"topic_id": w.topic_id, "partitions": [{"partition_index": 0}]}]},
            E.SHARE_SESSION_NOT_FOUND, node="leader"),
        Row("no READ on the group", lambda w, v: {
            "group_id": "g", "member_id": str(uuid.uuid4()), "share_session_epoch": 0,
            "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "max_records": 10,
            "batch_size": 10, "topics": [{"topic_id": w.topic_id,
                                          "partitions": [{"partition_index": 0}]}]},
            E.GROUP_AUTHORIZATION_FAILED, node="leader", user="alice"),
    ],
    ApiKey.SHARE_ACKNOWLEDGE: [
        Row("a session epoch without a session", lambda w, v: {
            "group_id": w.missing("group"), "member_id": str(uuid.uuid4()),
            "share_session_epoch": 5, "topics": [{"topic_id": w.topic_id, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]},
            E.SHARE_SESSION_NOT_FOUND, node="leader"),
        Row("opening a session (epoch 0)", lambda w, v: {
            "group_id": w.missing("group"), "member_id": str(uuid.uuid4()),
            "share_session_epoch": 0, "topics": []}, E.INVALID_SHARE_SESSION_EPOCH,
            node="leader"),
        Row("no READ on the group", lambda w, v: {
            "group_id": "g", "member_id": str(uuid.uuid4()), "share_session_epoch": 1,
            "topics": [{"topic_id": w.topic_id, "partitions": [
                {"partition_index": 0, "acknowledgement_batches": [
                    {"first_offset": 0, "last_offset": 0, "acknowledge_types": [1]}]}]}]},
            E.GROUP_AUTHORIZATION_FAILED, node="leader", user="alice"),
    ],
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: [
        Row("no CLUSTER_ACTION", share_state({"state_epoch": 0, "start_offset": 0}),
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.READ_SHARE_GROUP_STATE: [
        Row("a topic the metadata does not have", share_state({"leader_epoch": 0}),
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("no CLUSTER_ACTION", share_state({"leader_epoch": 0}),
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.WRITE_SHARE_GROUP_STATE: [
        Row("a topic the metadata does not have", share_state({
            "state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "state_batches": []}),
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("no CLUSTER_ACTION", share_state({"state_epoch": 0, "leader_epoch": 0,
                                              "start_offset": 0, "state_batches": []}),
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DELETE_SHARE_GROUP_STATE: [
        Row("no CLUSTER_ACTION", share_state({}), E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: [
        Row("a topic the metadata does not have", share_state({"leader_epoch": 0}),
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("no CLUSTER_ACTION", share_state({"leader_epoch": 0}),
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: [
        Row("unknown group", lambda w, v: {"groups": [{"group_id": w.missing("group"),
                                                       "topics": None}]},
            E.GROUP_ID_NOT_FOUND),
        Row("no DESCRIBE on the group", lambda w, v: {"groups": [{"group_id": "g",
                                                                  "topics": None}]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: [
        Row("unknown group", lambda w, v: {"group_id": w.missing("group"), "topics": [
            {"topic_name": TOPIC, "partitions": [{"partition_index": 0, "start_offset": 0}]}]},
            E.GROUP_ID_NOT_FOUND),
        Row("no READ on the group", lambda w, v: {"group_id": "g", "topics": [
            {"topic_name": TOPIC, "partitions": [{"partition_index": 0, "start_offset": 0}]}]},
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
    ],
    # KafkaApis.handleDeleteShareGroupOffsetsRequest: DELETE on the group (else the whole
    # request is GROUP_AUTHORIZATION_FAILED), READ on each topic (else that topic's
    # TOPIC_AUTHORIZATION_FAILED, and with none left the coordinator is not asked);
    # GroupCoordinatorService.deleteShareGroupOffsets: INVALID_GROUP_ID for the empty id,
    # nothing to do for no topics; GroupCoordinatorShard.initiateDeleteShareGroupOffsets:
    # shareGroup(id) (GROUP_ID_NOT_FOUND, a group of another type too), NON_EMPTY_GROUP
    # unless it is empty; GroupMetadataManager.sharePartitionsEligibleForOffsetDeletion:
    # a topic the group has no state of is UNKNOWN_TOPIC_OR_PARTITION
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: [
        Row("unknown group", delete_share_offsets(), E.GROUP_ID_NOT_FOUND),
        Row("empty group id", delete_share_offsets(group=""), E.INVALID_GROUP_ID),
        Row("no topics: nothing to look up", delete_share_offsets(topics=()), NONE),
        Row("a consumer group's id", delete_share_offsets(setup=simple_group),
            E.GROUP_ID_NOT_FOUND),
        Row("a group with a member", delete_share_offsets(setup=share_member),
            E.NON_EMPTY_GROUP),
        Row("topics an empty group has no state of", delete_share_offsets(
            topics=(None, SEEN), setup=lambda w, g: share_member(w, g, leave=True)),
            E.UNKNOWN_TOPIC_OR_PARTITION),
        Row("no DELETE on the group", delete_share_offsets(group="g"),
            E.GROUP_AUTHORIZATION_FAILED, user="alice"),
        Row("DELETE on the group, no READ on the topic", delete_share_offsets(group=BOB_GROUP),
            E.TOPIC_AUTHORIZATION_FAILED, user="bob"),
    ],
    # KafkaApis.allowTokenRequests: never on a PLAINTEXT listener (nor 1-way SSL, nor a
    # token's own session): DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, before anything else.
    # handleCreateTokenRequest: a token for another owner needs CREATE_TOKENS on that
    # user (one's own needs no ACL), a renewer must be a User; then the controller's
    # DelegationTokenControlManager (and handleDescribeTokensRequest) answers
    # DELEGATION_TOKEN_AUTH_DISABLED without delegation.token.secret.key
    ApiKey.CREATE_DELEGATION_TOKEN: [
        Row("on a PLAINTEXT listener", token(), E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED),
        Row("without delegation.token.secret.key (one's own: no ACL needed)", token(),
            E.DELEGATION_TOKEN_AUTH_DISABLED, user="alice"),
        Row("for another owner without CREATE_TOKENS on that user", token(owner="bob"),
            E.DELEGATION_TOKEN_AUTHORIZATION_FAILED, versions=(3, 3), user="alice"),
        Row("for another owner, by a super user", token(owner="bob"),
            E.DELEGATION_TOKEN_AUTH_DISABLED, versions=(3, 3), user="admin"),
        Row("a renewer that is not a User", token(renewer_type="Group"),
            E.INVALID_PRINCIPAL_TYPE, user="alice"),
    ],
    ApiKey.RENEW_DELEGATION_TOKEN: [
        Row("on a PLAINTEXT listener", lambda w, v: {"hmac": b"x", "renew_period_ms": -1},
            E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED),
        Row("without delegation.token.secret.key", lambda w, v: {"hmac": b"x",
                                                                 "renew_period_ms": -1},
            E.DELEGATION_TOKEN_AUTH_DISABLED, user="alice"),
    ],
    ApiKey.EXPIRE_DELEGATION_TOKEN: [
        Row("on a PLAINTEXT listener", lambda w, v: {"hmac": b"x", "expiry_time_period_ms": -1},
            E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED),
        Row("without delegation.token.secret.key", lambda w, v: {"hmac": b"x",
                                                                 "expiry_time_period_ms": -1},
            E.DELEGATION_TOKEN_AUTH_DISABLED, user="alice"),
    ],
    ApiKey.DESCRIBE_DELEGATION_TOKEN: [
        Row("on a PLAINTEXT listener", lambda w, v: {"owners": None},
            E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED),
        Row("without delegation.token.secret.key", lambda w, v: {"owners": None},
            E.DELEGATION_TOKEN_AUTH_DISABLED, user="alice"),
    ],
    # ControllerApis.handleUpdateFeatures: ALTER on the cluster; QuorumController's
    # updateFeatures answers FeatureControlManager.updateFeature's first error at the top
    # and, on an error, no per-feature results (v0-1 list them only on success):
    # INVALID_UPDATE_VERSION for an upgrade type it does not know, a level no node
    # supports (a feature none knows), a downgrade asked as an upgrade
    ApiKey.UPDATE_FEATURES: [
        Row("the level it is at", feature(), NONE,
            check=lambda r: [x["error_code"] for x in r["results"]] in ([], [NONE])),
        Row("an unknown feature", feature(name="errsem.version", level=1),
            E.INVALID_UPDATE_VERSION, check=lambda r: r["results"] == []),
        Row("a level past what it supports", feature(level=TRANSACTION_LEVEL + 1),
            E.INVALID_UPDATE_VERSION, check=lambda r: r["results"] == []),
        Row("a downgrade asked as an upgrade", feature(level=TRANSACTION_LEVEL - 1),
            E.INVALID_UPDATE_VERSION, check=lambda r: r["results"] == []),
        Row("an upgrade type Kafka does not define", feature(upgrade_type=9),
            E.INVALID_UPDATE_VERSION, versions=(1, 2), check=lambda r: r["results"] == []),
        Row("a safe downgrade within the supported levels", feature(
            level=TRANSACTION_LEVEL - 1, upgrade_type=2), NONE, versions=(1, 2)),
        Row("no ALTER on the cluster", feature(), E.CLUSTER_AUTHORIZATION_FAILED,
            user="alice"),
    ],
    # ControllerApis.handleUnregisterBroker: ALTER on the cluster;
    # ReplicationControlManager.unregisterBroker: BROKER_ID_NOT_REGISTERED for an id
    # without a registration, else the broker is fenced and its registration dropped
    ApiKey.UNREGISTER_BROKER: [
        Row("an id no broker has", lambda w, v: {"broker_id": 4242},
            E.BROKER_ID_NOT_REGISTERED),
        Row("a registered broker", lambda w, v: {"broker_id": w.workers[0]}, NONE),
        Row("no ALTER on the cluster", lambda w, v: {"broker_id": 4242},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    # ControllerApis: ALTER on the cluster; KafkaRaftClient.handleAddVoterRequest and
    # handleRemoveVoterRequest: INCONSISTENT_CLUSTER_ID for another cluster's id,
    # INVALID_REQUEST for a voter without an id or a directory id (RaftUtil's
    # addVoterRequestVoterKey, ReplicaKey.of) or, adding, without an endpoint on the
    # quorum's listener; then AddVoterHandler and RemoveVoterHandler answer a quorum at
    # kraft.version 0 (static voters) UNSUPPORTED_VERSION
    ApiKey.ADD_RAFT_VOTER: [
        Row("a static quorum (kraft.version 0)", voter(), E.UNSUPPORTED_VERSION),
        Row("another cluster's id", voter(cluster_id="errsem-another"),
            E.INCONSISTENT_CLUSTER_ID),
        Row("a voter without a directory id", voter(directory=False), E.INVALID_REQUEST),
        Row("a negative voter id", voter(voter_id=-1), E.INVALID_REQUEST),
        Row("no endpoint on the quorum's listener", voter(listener=False), E.INVALID_REQUEST),
        Row("no ALTER on the cluster", voter(), E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
    ApiKey.REMOVE_RAFT_VOTER: [
        Row("a static quorum (kraft.version 0)", voter(listener=None), E.UNSUPPORTED_VERSION),
        Row("another cluster's id", voter(listener=None, cluster_id="errsem-another"),
            E.INCONSISTENT_CLUSTER_ID),
        Row("a voter without a directory id", voter(directory=False, listener=None),
            E.INVALID_REQUEST),
        Row("no ALTER on the cluster", voter(listener=None), E.CLUSTER_AUTHORIZATION_FAILED,
            user="alice"),
    ],
    # KafkaApis.handleListConfigResources: DESCRIBE_CONFIGS on the cluster; a type
    # ListConfigResourcesRequest.supportedResourceTypes lacks is UNSUPPORTED_VERSION
    ApiKey.LIST_CONFIG_RESOURCES: [
        Row("a resource type without configs", lambda w, v: {"resource_types": [99]},
            E.UNSUPPORTED_VERSION, versions=(1, 1)),
        Row("no DESCRIBE_CONFIGS on the cluster", lambda w, v: {"resource_types": []},
            E.CLUSTER_AUTHORIZATION_FAILED, user="alice"),
    ],
}


# Where kafkalite answers otherwise today: (api, case) -> why it is not fixed yet.
# Each is an xfail(strict=True): the row passes once the difference is fixed,
# and then its entry must go.
SHARE_STATE = ("the share coordinator keeps state for any topic id and does not ask the "
               "metadata (Kafka's ShareCoordinatorShard answers UNKNOWN_TOPIC_OR_PARTITION); "
               "tests/server/test_share_coordinator.py and tests/security/"
               "test_share_state_authorization.py write state for ids no topic has")
KNOWN_DIFFERENCES: dict = {
    (ApiKey.READ_SHARE_GROUP_STATE, "a topic the metadata does not have"): SHARE_STATE,
    (ApiKey.WRITE_SHARE_GROUP_STATE, "a topic the metadata does not have"): SHARE_STATE,
    (ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, "a topic the metadata does not have"): SHARE_STATE,
    (ApiKey.METADATA, "unknown topic, its auto-creation asked for"):
        "kafkalite makes the topic before it answers and answers its metadata (NONE), one "
        "round trip sooner for the client; Kafka 4.1 answers UNKNOWN_TOPIC_OR_PARTITION "
        "while its controller makes it (tests/server/test_broker.py and others rely on "
        "kafkalite's answer)",
    (ApiKey.UPDATE_FEATURES, "a safe downgrade within the supported levels"):
        "kafkalite's finalized features never change (cluster_admin.py): it refuses a "
        "level it advertises as supported (ApiVersions: transaction.version 0-2); Kafka's "
        "FeatureControlManager validates it (NONE)",
    (ApiKey.UNREGISTER_BROKER, "a registered broker"):
        "kafkalite's brokers are its nodes' workers and leave with their node "
        "(INVALID_REQUEST); Kafka fences the broker and drops its registration (NONE)",
    (ApiKey.ALTER_SHARE_GROUP_OFFSETS, "unknown group"):
        "kafkalite makes the group (share_group.alter_offsets says Kafka's alter does); Kafka "
        "4.1's GroupCoordinatorShard.alterShareGroupOffsets looks it up (shareGroup(groupId): "
        "GROUP_ID_NOT_FOUND, read in the 4.1 source); kafkalite's own tests make groups so",
}
