"""The language of the error-semantics table (error_semantics_table.py):
Kafka's error codes by name (``E``), the names the cases refer to, a
server's ``World``, a case's ``Row``, and the request builders and answer
checks the rows are written with.

Who may call: error_semantics_table.py and test_error_semantics.py, which
runs the rows (a builder that makes a group first does so on the server
it is given).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Callable

from compat_helpers import KafkaWire

from harness import ServerProcess
from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder

# Kafka's error codes by Kafka's names (kafkalite/errors.py holds the table)
E = type("E", (), {cls.name: cls.code for cls in (getattr(errors, n) for n in errors.__all__)
                   if isinstance(cls, type) and issubclass(cls, errors.KafkaError)
                   and cls is not errors.KafkaError})
NONE = 0
CONTROLLER = 1000
TOPIC, SMALL, SEEN = "errsem-topic", "errsem-small", "errsem-seen"
USERS = {"admin": "admin-secret-1", "alice": "alice-secret-1", "bob": "bob-secret-1"}
BOB_GROUP = "errsem-bobs"            # the group bob may DELETE (and nothing else of)
TRANSACTION_LEVEL = 2                # the transaction.version ApiVersions says is finalized
# resource types, pattern type, operations and permission of the ACL APIs
TOPIC_RESOURCE, GROUP_RESOURCE, LITERAL, DESCRIBE_OP, DELETE_OP, ALLOW = 2, 3, 3, 8, 6, 3
BROKER_CONFIG, TOPIC_CONFIG = 4, 2


@dataclass
class World:
    """What the cases refer to on one server: its existing topic, that
    topic's id and leader, every topic's id (``ids``), the primary Kafka
    listener's name, and fresh names of things that do not exist."""
    server: ServerProcess
    topic_id: uuid.UUID
    leader: int
    workers: list
    ids: dict
    listener: str

    @staticmethod
    def missing(kind: str) -> str:
        return f"errsem-missing-{kind}-{uuid.uuid4().hex[:8]}"


@dataclass
class Row:
    """One case of one API. ``build(world, version) -> body``; ``expect`` a
    code, or [(low, high, code)] by version; the answer's codes are every
    ``*error_code`` in it that is not NONE (``codes`` to pick others), and
    ``check(response)`` what else Kafka's answer says (a -1 offset, a Dead
    group). ``node``: "controller", "leader" (of the topic) or "worker";
    ``user``: None on the plain server, else the secured server's user (admin
    is a super user);
    ``fresh``: on a connection of its own (the SASL APIs)."""
    case: str
    build: Callable
    expect: object = NONE
    versions: tuple | None = None
    node: str = "controller"
    user: str | None = None
    check: Callable | None = None
    codes: Callable | None = None
    fresh: bool = False

    def expected(self, version: int) -> int:
        if isinstance(self.expect, int):
            return self.expect
        return next(code for low, high, code in self.expect if low <= version <= high)


def batch(value: bytes = b"v") -> bytes:
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, value)
    return bytes(b.build())


def produce(topic: str, partition: int = 0, acks: int = -1, value: bytes = b"v"):
    """v13 names the topic by its id (a fresh one for a topic that does not exist)."""
    return lambda w, v: {"acks": acks, "timeout_ms": 5000, "transactional_id": None,
                         "topic_data": [{"name": topic, "topic_id": w.ids.get(topic, uuid.uuid4()),
                                         "partition_data": [
                                             {"index": partition, "records": batch(value)}]}]}


def fetch(topic: str | None, partition: int = 0, offset: int = 0):
    def build(w, v):
        name = topic or w.missing("topic")
        topic_id = w.topic_id if topic == TOPIC else uuid.uuid4()
        return {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "isolation_level": 0, "session_id": 0, "session_epoch": -1, "rack_id": "",
                "topics": [{"topic": name, "topic_id": topic_id, "partitions": [
                    {"partition": partition, "fetch_offset": offset, "current_leader_epoch": -1,
                     "last_fetched_epoch": -1, "log_start_offset": -1,
                     "partition_max_bytes": 1 << 20}]}], "forgotten_topics_data": []}
    return build


def list_offsets(topic: str | None, partition: int = 0, timestamp: int = -1):
    return lambda w, v: {"replica_id": -1, "isolation_level": 0, "timeout_ms": 0, "topics": [
        {"name": topic or w.missing("topic"), "partitions": [
            {"partition_index": partition, "current_leader_epoch": -1, "timestamp": timestamp,
             "max_num_offsets": 1}]}]}


def metadata(topic: str | None, by_id: bool = False, auto_create: bool = False):
    """``by_id``: the topic named by its id alone (a fresh id when ``topic``
    is None). Before v4 every request asks for auto-creation."""
    def build(w, v):
        if by_id:
            return {"topics": [{"topic_id": w.ids.get(topic, uuid.uuid4()), "name": None}],
                    "allow_auto_topic_creation": False}
        return {"topics": [{"topic_id": uuid.UUID(int=0), "name": topic or w.missing("topic")}],
                "allow_auto_topic_creation": auto_create}
    return build


def new_topic(name=None, partitions=1, rf=1, configs=(), assignments=()):
    return {"name": name, "num_partitions": partitions, "replication_factor": rf,
            "assignments": list(assignments),
            "configs": [{"name": k, "value": val} for k, val in configs]}


def create_topics(*topics, validate_only=True):
    def build(w, v):
        fresh = w.missing("new")
        return {"timeout_ms": 10_000, "validate_only": validate_only,
                "topics": [{**t, "name": t["name"] if t["name"] is not None else fresh}
                           for t in topics]}
    return build


def group_of(name: str | None):
    return name if name is not None else World.missing("group")


def join(group=None, session=10_000, member="", protocol_type="consumer", protocols=None):
    return lambda w, v: {
        "group_id": group_of(group), "session_timeout_ms": session,
        "rebalance_timeout_ms": 10_000, "member_id": member, "group_instance_id": None,
        "protocol_type": protocol_type, "reason": None,
        "protocols": [{"name": "range", "metadata": b""}] if protocols is None else protocols}


def offset_commit(topic=None, generation=-1, member="", group=None, metadata=""):
    return lambda w, v: {
        "group_id": group_of(group), "generation_id_or_member_epoch": generation,
        "member_id": member, "group_instance_id": None, "retention_time_ms": -1,
        "topics": [{"name": topic or w.missing("topic"), "partitions": [
            {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1,
             "commit_timestamp": -1, "committed_metadata": metadata}]}]}


def offset_fetch(group=None, topic=TOPIC):
    return lambda w, v: {
        "group_id": group_of(group), "require_stable": False,
        "topics": [{"name": topic, "partition_indexes": [0]}],
        "groups": [{"group_id": group_of(group), "member_id": None, "member_epoch": -1,
                    "topics": [{"name": topic, "partition_indexes": [0]}]}]}


def offsets_of(response: dict) -> list:
    if "groups" in response and response["groups"]:
        topics = [t for g in response["groups"] for t in g["topics"]]
    else:
        topics = response["topics"]
    return [p["committed_offset"] for t in topics for p in t["partitions"]]


def txn(api_body: dict):
    return lambda w, v: {"transactional_id": World.missing("txn"), "producer_id": 4242,
                         "producer_epoch": 0, **api_body}


def add_partitions(topic=TOPIC):
    def build(w, v):
        tid = w.missing("txn")
        topics = [{"name": topic, "partitions": [0]}]
        return {"v3_and_below_transactional_id": tid, "v3_and_below_producer_id": 4242,
                "v3_and_below_producer_epoch": 0, "v3_and_below_topics": topics,
                "transactions": [{"transactional_id": tid, "producer_id": 4242,
                                  "producer_epoch": 0, "verify_only": False, "topics": topics}]}
    return build


def configs(resource_type: int, name, keys=None):
    return lambda w, v: {"include_synonyms": False, "include_documentation": False,
                         "resources": [{"resource_type": resource_type,
                                        "resource_name": name or w.missing("topic"),
                                        "configuration_keys": keys}]}


def alter_configs(resource_type: int, name, entries, incremental=False):
    def build(w, v):
        cfg = [{"name": k, "value": val} for k, val in entries]
        if incremental:
            cfg = [{**c, "config_operation": 0} for c in cfg]
        return {"validate_only": True, "resources": [{
            "resource_type": resource_type, "resource_name": name or w.missing("topic"),
            "configs": cfg}]}
    return build


def topic_partitions(field_names: tuple, topic=None, partitions=(0,)):
    """A body of one topic with partitions, under the API's own field names:
    (topics array, topic name, partitions field, partition struct builder or None)."""
    array, name_field, parts, entry = field_names

    def build(w, v):
        ps = [entry(p) if entry else p for p in partitions]
        body = {array: [{name_field: topic or w.missing("topic"), parts: ps}]}
        return body if array == "topics" and name_field == "topic" else {**body,
                                                                          "timeout_ms": 5000}
    return build


def share_state(api_extra: dict):
    return lambda w, v: {"group_id": World.missing("group"), "topics": [
        {"topic_id": uuid.uuid4(), "partitions": [{"partition": 0, **api_extra}]}]}


def dead_group(response: dict) -> bool:
    return [g["group_state"] for g in response["groups"]] == ["Dead"]


def no_topics(response: dict) -> bool:
    return all(not d.get("topics") for d in response.get("results", []))


def share_member(w: World, group: str, leave: bool = False) -> None:
    """A member of share group ``group`` subscribed to TOPIC (on the plain
    server), which leaves again when ``leave``: the group is then empty."""
    wire = KafkaWire(w.server.kafka_bootstrap)
    try:
        body = {"group_id": group, "member_id": str(uuid.uuid4()), "member_epoch": 0,
                "rack_id": None, "subscribed_topic_names": [TOPIC]}
        r = wire.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, body)
        assert r["error_code"] == NONE, r
        if leave:
            r = wire.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
                **body, "member_epoch": -1, "subscribed_topic_names": None})
            assert r["error_code"] == NONE, r
    finally:
        wire.close()


def simple_group(w: World, group: str) -> None:
    """A classic group of ``group``: one offset committed, as a consumer
    that assigns itself its partitions commits."""
    wire = KafkaWire(w.server.kafka_bootstrap)
    try:
        r = wire.request(ApiKey.OFFSET_COMMIT, 9, offset_commit(TOPIC, group=group)(w, 9))
        assert error_codes(r) == [], r
    finally:
        wire.close()


def delete_share_offsets(group=None, topics=(TOPIC,), setup=None):
    """DeleteShareGroupOffsets of ``topics`` (None: a topic that does not
    exist) of ``group`` (None: one that does not exist), which
    ``setup(world, group)`` makes first."""
    def build(w, v):
        gid = group_of(group)
        if setup is not None:
            setup(w, gid)
        return {"group_id": gid,
                "topics": [{"topic_name": t or w.missing("topic")} for t in topics]}
    return build


def token(owner: str | None = None, renewer_type: str = "User"):
    """CreateDelegationToken for ``owner`` (v3; None: the requester), bob its renewer."""
    return lambda w, v: {"owner_principal_type": "User" if owner else None,
                         "owner_principal_name": owner, "max_lifetime_ms": -1,
                         "renewers": [{"principal_type": renewer_type, "principal_name": "bob"}]}


def feature(name: str = "transaction.version", level: int = TRANSACTION_LEVEL,
            upgrade_type: int = 1):
    """UpdateFeatures of one feature, validated only from v1: ``upgrade_type``
    1 an upgrade, 2 a safe downgrade (v0: allow_downgrade)."""
    return lambda w, v: {"timeout_ms": 5000, "validate_only": True, "feature_updates": [
        {"feature": name, "max_version_level": level, "allow_downgrade": upgrade_type != 1,
         "upgrade_type": upgrade_type}]}


def voter(voter_id: int = 3000, directory: bool = True, listener: bool | None = True,
          cluster_id: str | None = None):
    """AddRaftVoter of a voter with a directory id and an endpoint on the
    quorum's listener (the node's primary Kafka listener, the one
    DescribeQuorum names first), unless told otherwise; ``listener`` None:
    RemoveRaftVoter's, which has no endpoints."""
    def build(w, v):
        body = {"cluster_id": cluster_id, "voter_id": voter_id,
                "voter_directory_id": uuid.uuid4() if directory else uuid.UUID(int=0)}
        if listener is None:
            return body
        return {**body, "timeout_ms": 5000, "listeners": [
            {"name": w.listener, "host": "127.0.0.1", "port": 1}] if listener else []}
    return build


def error_codes(value) -> list:
    """Every *error_code in a response, in order, but NONE."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            if k.endswith("error_code") and isinstance(v, int):
                if v != NONE:
                    out.append(v)
            else:
                out += error_codes(v)
    elif isinstance(value, list):
        for v in value:
            out += error_codes(v)
    return out
