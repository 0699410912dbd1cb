"""The admin client: topics, configs, consumer groups, transactions,
client quotas and record deletion (DeleteRecords), with confluent-kafka's call shapes (and,
for transactions, which confluent-kafka lacks, the Java Admin's:
list/describe transactions, describe producers, abort a hanging
transaction, find hanging transactions).

One module of about 1,000 lines, with reason: AdminClient is one class
whose methods are one per admin call (a request and its futures), and
the result types are what those calls return; split by API family, the
one client a user imports would be spread over modules sharing its
connection and error handling. The share group calls (KIP-932) are
in share_group_admin.py, a part of AdminClient it inherits.

Every method returns ``{topic or resource: concurrent.futures.Future}``
like confluent-kafka's AdminClient; here the request is made before the
method returns (against the supervisor), so the futures are already
resolved: ``.result()`` gives the value or raises the KafkaError the
server gave for that topic or resource.

Thread safety: every method may be called from any thread (one lock
around the supervisor connection).
"""
from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field

from kafkalite import errors
from kafkalite.client.config import ADMIN, resolve
from kafkalite.client.connection import Connection, client_context, parse_bootstrap
from kafkalite.client.metadata import (BrokerMetadata, ClusterMetadata, Metadata,  # noqa: F401
                                       PartitionMetadata, TopicMetadata, cluster_metadata,
                                       list_offsets)
from kafkalite.client.share_group_admin import ShareGroupAdmin, _by_topic, _done
from kafkalite.client.types import TopicPartition
from kafkalite.errors import error_or_none
from kafkalite.protocol import ApiKey, decode_assignment
from kafkalite.protocol.enums import AlterConfigOp, ConfigSource, ResourceType  # noqa: F401
from kafkalite.protocol.errors import ProtocolError


# Kafka's enums, defined once in the protocol package; AlterConfigOpType is
# confluent-kafka's name for AlterConfigOp.
AlterConfigOpType = AlterConfigOp


@dataclass
class NewTopic:
    topic: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignment: list | None = None
    config: dict = field(default_factory=dict)


@dataclass
class NewPartitions:
    topic: str
    new_total_count: int
    replica_assignment: list | None = None


@dataclass
class ConfigEntry:
    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN_CONFIG
    is_read_only: bool = False
    is_default: bool = False
    is_sensitive: bool = False
    incremental_operation: AlterConfigOpType | None = None


class ConfigResource:
    def __init__(self, restype, name: str, set_config: dict | None = None,
                 incremental_configs: list[ConfigEntry] | None = None):
        self.restype = ResourceType(restype) if not isinstance(restype, str) else \
            ResourceType[restype.upper()]
        self.name = name
        self.set_config_dict = dict(set_config or {})
        self.incremental_configs = list(incremental_configs or [])

    def set_config(self, name: str, value: str) -> None:
        self.set_config_dict[name] = value

    def add_incremental_config(self, entry: ConfigEntry) -> None:
        self.incremental_configs.append(entry)

    def __hash__(self):
        return hash((self.restype, self.name))

    def __eq__(self, other):
        return isinstance(other, ConfigResource) and (self.restype, self.name) == (
            other.restype, other.name)

    def __repr__(self):
        return f"ConfigResource({self.restype.name}, {self.name!r})"


@dataclass
class ClientQuotaEntity:
    """A client quota entity (Kafka's ClientQuotaEntity): entity type
    ("user", "client-id", or "ip" alone) -> name, None for that type's
    default entity.
    ``ClientQuotaEntity({"user": "alice", "client-id": None})`` is
    /config/users/alice/clients/<default>. Hashable, a key of results."""

    __slots__ = ("entries",)

    def __init__(self, entries: dict):
        self.entries = tuple(sorted(dict(entries).items()))

    def as_dict(self) -> dict:
        return dict(self.entries)

    def __hash__(self):
        return hash(self.entries)

    def __eq__(self, other):
        return isinstance(other, ClientQuotaEntity) and self.entries == other.entries

    def __repr__(self):
        return f"ClientQuotaEntity({self.as_dict()!r})"


@dataclass
class ClientQuotaAlteration:
    """Changes to one entity's quotas: ``ops`` maps a quota key
    (producer_byte_rate, consumer_byte_rate, request_percentage) to its new
    value, or to None to remove it."""
    entity: ClientQuotaEntity
    ops: dict


@dataclass
class ClientQuotaFilterComponent:
    """One part of a describe filter (Kafka's ClientQuotaFilterComponent):
    ``match`` a name for an exact match, None with ``default=True`` for the
    default entity, None alone for any specified name."""
    entity_type: str
    match: str | None = None
    default: bool = False


@dataclass
class ConsumerGroupListing:
    group_id: str
    is_simple_consumer_group: bool
    state: str


@dataclass
class MemberDescription:
    member_id: str
    client_id: str
    host: str
    assignment: list
    group_instance_id: str | None = None
    # KIP-848 groups only (ConsumerGroupDescribe): the member's epoch, its
    # target assignment, and whether it speaks the consumer protocol (False:
    # a classic member of a consumer group; Kafka's tools call it "upgraded")
    member_epoch: int | None = None
    target_assignment: list | None = None
    upgraded: bool | None = None


@dataclass
class ConsumerGroupDescription:
    group_id: str
    is_simple_consumer_group: bool
    members: list
    partition_assignor: str
    state: str
    coordinator: BrokerMetadata | None = None
    type: str = "classic"                   # "consumer": a KIP-848 group
    group_epoch: int | None = None          # KIP-848 groups only
    target_assignment_epoch: int | None = None


@dataclass
class RemoveMembersFromConsumerGroupResult:
    """What ``remove_members_from_consumer_group`` did (the Java Admin's
    result of that name): a Future per group.instance.id asked for."""
    members: dict[str, Future]

    def member_result(self, group_instance_id: str) -> Future:
        if group_instance_id not in self.members:
            raise ValueError(f"{group_instance_id!r} was not asked to be removed")
        return self.members[group_instance_id]

    def all(self) -> Future:
        """Done when every member was removed; else the first member's error."""
        failed = next((f.exception() for f in self.members.values() if f.exception()), None)
        return _done(None, failed)


@dataclass
class PartitionLag:
    """One partition of ``describe_group_offsets``: committed offset, log end, lag."""
    topic: str
    partition: int
    committed: int              # -1: nothing committed
    log_end: int
    lag: int | None             # None when nothing is committed
    member_id: str | None = None
    client_id: str | None = None


@dataclass
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str


@dataclass
class TransactionDescription:
    transactional_id: str
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int          # -1: no transaction open
    topic_partitions: list                  # [TopicPartition] of the open transaction


@dataclass
class ProducerState:
    """A producer with state in a partition (DescribeProducers)."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int   # -1: no open transaction here


@dataclass
class HangingTransaction:
    """An open transaction in a partition that its coordinator will not end."""
    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    start_offset: int
    last_timestamp: int
    transactional_id: str | None            # None: no coordinator knows the producer
    reason: str


@dataclass
class DeletedRecords:
    """What DeleteRecords did to a partition (confluent-kafka's
    DeletedRecords): its low watermark, the new first offset readable."""
    low_watermark: int


# DeleteRecords answers that a new metadata lookup may cure (the leader moved)
_DELETE_RECORDS_ATTEMPTS = 3
_DELETE_RECORDS_BACKOFF_S = 0.5
# DeleteRecords answers carry no message: what each code means there
_DELETE_RECORDS_ERRORS = {
    errors.OffsetOutOfRangeError.code: "the offset is above the partition's high watermark",
    errors.InvalidTopicError.code: "records of an internal topic cannot be deleted",
    errors.PolicyViolationError.code: "the topic's cleanup.policy is not delete",
    errors.RequestTimedOutError.code: "the log start moved on the leader, but not on every "
                                      "in-sync follower in time",
}


RESET_SPECS = ("to-earliest", "to-latest", "to-current", "to-datetime", "by-duration",
               "to-offset", "shift-by", "from-file")


def _assigned_partitions(raw: bytes) -> list:
    if not raw:
        return []
    try:
        _, a = decode_assignment(raw)
    except ProtocolError:
        return []
    return [TopicPartition(t["topic"], p) for t in a["assigned_partitions"] for p in t["partitions"]]


class AdminClient(ShareGroupAdmin):
    def __init__(self, config: dict | None = None, **kwargs):
        cfg = resolve({**(config or {}), **kwargs}, ADMIN)
        self.config = cfg
        self._ctx = client_context(cfg)
        self._meta = Metadata(parse_bootstrap(cfg["bootstrap.servers"]), cfg["client.id"], self._ctx)
        self._lock = threading.Lock()
        self._timeout = cfg["request.timeout.ms"] / 1000.0
        self._worker_conns: dict[int, Connection] = {}

    def _request(self, api_key, body, timeout=None):
        with self._lock:
            return self._meta.admin_request(api_key, body, timeout or self._timeout)

    def list_topics(self, topic: str | None = None, timeout: float = 30.0) -> ClusterMetadata:
        with self._lock:
            return cluster_metadata(self._meta, topic, timeout)

    def create_topics(self, new_topics: list[NewTopic], operation_timeout: float = 30.0,
                      request_timeout: float | None = None, validate_only: bool = False) -> dict:
        resp = self._request(ApiKey.CREATE_TOPICS, {
            "topics": [{"name": t.topic,
                        "num_partitions": -1 if t.replica_assignment else t.num_partitions,
                        "replication_factor": -1 if t.replica_assignment else t.replication_factor,
                        "assignments": [{"partition_index": i, "broker_ids": list(b)}
                                        for i, b in enumerate(t.replica_assignment or ())],
                        "configs": [{"name": k, "value": str(v)} for k, v in t.config.items()]}
                       for t in new_topics],
            "timeout_ms": int(operation_timeout * 1000), "validate_only": validate_only},
            request_timeout or operation_timeout + 5)
        return {t["name"]: _done(exc=error_or_none(t["error_code"], t["error_message"]))
                for t in resp["topics"]}

    def delete_topics(self, topics: list[str], operation_timeout: float = 30.0,
                      request_timeout: float | None = None) -> dict:
        resp = self._request(ApiKey.DELETE_TOPICS, {
            "topics": [{"name": t} for t in topics],
            "timeout_ms": int(operation_timeout * 1000)}, request_timeout or operation_timeout + 5)
        return {r["name"]: _done(exc=error_or_none(r["error_code"], r["error_message"]))
                for r in resp["responses"]}

    def create_partitions(self, new_partitions: list[NewPartitions], operation_timeout: float = 30.0,
                          request_timeout: float | None = None, validate_only: bool = False) -> dict:
        resp = self._request(ApiKey.CREATE_PARTITIONS, {
            "topics": [{"name": p.topic, "count": p.new_total_count,
                        "assignments": [{"broker_ids": list(b)} for b in p.replica_assignment]
                        if p.replica_assignment else None}
                       for p in new_partitions],
            "timeout_ms": int(operation_timeout * 1000), "validate_only": validate_only},
            request_timeout or operation_timeout + 5)
        return {r["name"]: _done(exc=error_or_none(r["error_code"], r["error_message"]))
                for r in resp["results"]}

    def elect_leaders(self, election_type: int = 0, partitions: list | None = None,
                      request_timeout: float | None = None) -> Future:
        """Elect leaders (confluent-kafka's shape): ``election_type`` 0 (or
        ``ElectionType.PREFERRED``) gives each partition to its preferred
        replica, 1 (UNCLEAN) gives one without a live leader to any live
        replica; ``partitions``: [TopicPartition], None for all. A Future
        of {TopicPartition: KafkaError or None}."""
        election_type = int(getattr(election_type, "value", election_type))
        body = {"election_type": election_type, "timeout_ms": 60_000, "topic_partitions": None}
        if partitions is not None:
            body["topic_partitions"] = [{"topic": t, "partitions": ps}
                                        for t, ps in _by_topic(partitions).items()]
        resp = self._request(ApiKey.ELECT_LEADERS, body, request_timeout or 65)
        return _done({TopicPartition(r["topic"], p["partition_id"]):
                      error_or_none(p["error_code"], p["error_message"])
                      for r in resp["replica_election_results"] for p in r["partition_result"]})

    def alter_partition_reassignments(self, reassignments: dict,
                                      request_timeout: float | None = None) -> Future:
        """Move partitions' replicas (the Java admin's
        alterPartitionReassignments): {TopicPartition: [broker ids] or None
        to cancel}. A Future of {TopicPartition: KafkaError or None}; the
        data is copied to the new replicas after it returns (see
        ``list_partition_reassignments``)."""
        by_topic: dict[str, list] = {}
        for tp, replicas in reassignments.items():
            by_topic.setdefault(tp.topic, []).append(
                {"partition_index": tp.partition,
                 "replicas": None if replicas is None else list(replicas)})
        resp = self._request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, {
            "timeout_ms": 60_000,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
            request_timeout or 65)
        if resp["error_code"]:
            return _done(exc=error_or_none(resp["error_code"], resp["error_message"]))
        return _done({TopicPartition(t["name"], p["partition_index"]):
                      error_or_none(p["error_code"], p["error_message"])
                      for t in resp["responses"] for p in t["partitions"]})

    def list_partition_reassignments(self, partitions: list | None = None,
                                     request_timeout: float | None = None) -> Future:
        """Reassignments under way: a Future of {TopicPartition: {"replicas",
        "adding_replicas", "removing_replicas"}}."""
        topics = None
        if partitions is not None:
            topics = [{"name": t, "partition_indexes": ps}
                      for t, ps in _by_topic(partitions).items()]
        resp = self._request(ApiKey.LIST_PARTITION_REASSIGNMENTS,
                             {"timeout_ms": 60_000, "topics": topics}, request_timeout or 65)
        if resp["error_code"]:
            return _done(exc=error_or_none(resp["error_code"], resp["error_message"]))
        return _done({TopicPartition(t["name"], p["partition_index"]):
                      {k: list(p[k]) for k in ("replicas", "adding_replicas", "removing_replicas")}
                      for t in resp["topics"] for p in t["partitions"]})

    def describe_configs(self, resources: list[ConfigResource], request_timeout: float | None = None) -> dict:
        resp = self._request(ApiKey.DESCRIBE_CONFIGS, {
            "resources": [{"resource_type": int(r.restype), "resource_name": r.name,
                           "configuration_keys": None} for r in resources],
            "include_synonyms": False, "include_documentation": False}, request_timeout)
        out = {}
        for r, res in zip(resources, resp["results"]):
            exc = error_or_none(res["error_code"], res["error_message"])
            entries = {c["name"]: ConfigEntry(c["name"], c["value"], ConfigSource(c["config_source"]),
                                              c["read_only"], c["config_source"] == ConfigSource.DEFAULT_CONFIG,
                                              c["is_sensitive"])
                       for c in res["configs"]}
            out[r] = _done(None if exc else entries, exc)
        return out

    def alter_configs(self, resources: list[ConfigResource], request_timeout: float | None = None,
                      validate_only: bool = False) -> dict:
        """Replace each resource's whole set of overrides (Kafka's AlterConfigs)."""
        resp = self._request(ApiKey.ALTER_CONFIGS, {
            "resources": [{"resource_type": int(r.restype), "resource_name": r.name,
                           "configs": [{"name": k, "value": str(v)} for k, v in r.set_config_dict.items()]}
                          for r in resources], "validate_only": validate_only}, request_timeout)
        return {r: _done(exc=error_or_none(res["error_code"], res["error_message"]))
                for r, res in zip(resources, resp["responses"])}

    def incremental_alter_configs(self, resources: list[ConfigResource],
                                  request_timeout: float | None = None,
                                  validate_only: bool = False) -> dict:
        resp = self._request(ApiKey.INCREMENTAL_ALTER_CONFIGS, {
            "resources": [{"resource_type": int(r.restype), "resource_name": r.name,
                           "configs": [{"name": e.name, "config_operation": int(
                               e.incremental_operation if e.incremental_operation is not None
                               else AlterConfigOpType.SET), "value": e.value}
                               for e in r.incremental_configs]}
                          for r in resources], "validate_only": validate_only}, request_timeout)
        return {r: _done(exc=error_or_none(res["error_code"], res["error_message"]))
                for r, res in zip(resources, resp["responses"])}

    # ---- client quotas ----------------------------------------------------------------------

    def describe_client_quotas(self, components: list[ClientQuotaFilterComponent] = (),
                               strict: bool = False,
                               request_timeout: float | None = None) -> Future:
        """DescribeClientQuotas: a Future of {ClientQuotaEntity: {key: value}}
        for the entities the filter matches (no components: every entity)."""
        resp = self._request(ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": [
            {"entity_type": c.entity_type, "match": c.match,
             "match_type": 0 if c.match is not None else (1 if c.default else 2)}
            for c in components], "strict": strict}, request_timeout)
        exc = error_or_none(resp["error_code"], resp["error_message"])
        if exc is not None:
            return _done(exc=exc)
        return _done({ClientQuotaEntity({e["entity_type"]: e["entity_name"]
                                         for e in entry["entity"]}):
                      {v["key"]: v["value"] for v in entry["values"]}
                      for entry in resp["entries"] or ()})

    def alter_client_quotas(self, alterations: list[ClientQuotaAlteration],
                            validate_only: bool = False,
                            request_timeout: float | None = None) -> dict:
        """AlterClientQuotas: {ClientQuotaEntity: Future} (None, or the
        KafkaError the broker gave for that entity)."""
        resp = self._request(ApiKey.ALTER_CLIENT_QUOTAS, {"entries": [
            {"entity": [{"entity_type": t, "entity_name": n} for t, n in a.entity.entries],
             "ops": [{"key": k, "value": float(v) if v is not None else 0.0,
                      "remove": v is None} for k, v in a.ops.items()]}
            for a in alterations], "validate_only": validate_only}, request_timeout)
        return {a.entity: _done(exc=error_or_none(r["error_code"], r["error_message"]))
                for a, r in zip(alterations, resp["entries"])}

    # ---- consumer groups ------------------------------------------------------------------------

    def list_consumer_groups(self, request_timeout: float | None = None, states=None) -> Future:
        """A Future of [ConsumerGroupListing] (optionally only in ``states``)."""
        resp = self._request(ApiKey.LIST_GROUPS, {"states_filter": list(states or [])},
                             request_timeout)
        exc = error_or_none(resp["error_code"])
        return _done(None if exc else [
            ConsumerGroupListing(g["group_id"], g["protocol_type"] == "", g["group_state"])
            for g in sorted(resp["groups"], key=lambda g: g["group_id"])], exc)

    def describe_consumer_groups(self, group_ids: list[str],
                                 request_timeout: float | None = None) -> dict:
        """{group id: Future of ConsumerGroupDescription}; a group that does
        not exist fails with GroupIdNotFoundError. KIP-848 groups are
        described by ConsumerGroupDescribe (epochs, target assignments, member
        types), the others by DescribeGroups, as librdkafka does."""
        out = {}
        resp = self._request(ApiKey.CONSUMER_GROUP_DESCRIBE, {
            "group_ids": list(group_ids), "include_authorized_operations": False},
            request_timeout)
        for g in resp["groups"]:
            if g["error_code"] == errors.GroupIdNotFoundError.code:
                continue                             # not a consumer group: classic below
            exc = error_or_none(g["error_code"], g["error_message"])
            out[g["group_id"]] = _done(None if exc else self._consumer_group(g), exc)
        classic = [gid for gid in group_ids if gid not in out]
        if not classic:
            return out
        resp = self._request(ApiKey.DESCRIBE_GROUPS, {"groups": classic,
                                                      "include_authorized_operations": False},
                             request_timeout)
        for g in resp["groups"]:
            exc = error_or_none(g["error_code"])
            if exc is None and g["group_state"] == "Dead":
                exc = errors.GroupIdNotFoundError(f"consumer group {g['group_id']!r} does not exist")
            out[g["group_id"]] = _done(None if exc else ConsumerGroupDescription(
                g["group_id"], g["protocol_type"] == "",
                [MemberDescription(m["member_id"], m["client_id"], m["client_host"],
                                   _assigned_partitions(m["member_assignment"]),
                                   m["group_instance_id"]) for m in g["members"]],
                g["protocol_data"], g["group_state"]), exc)
        return out

    @staticmethod
    def _consumer_group(g: dict) -> ConsumerGroupDescription:
        def partitions(assignment) -> list:
            return sorted(TopicPartition(t["topic_name"], p)
                          for t in assignment["topic_partitions"] for p in t["partitions"])

        return ConsumerGroupDescription(
            g["group_id"], False,
            [MemberDescription(m["member_id"], m["client_id"], m["client_host"],
                               partitions(m["assignment"]), m["instance_id"],
                               member_epoch=m["member_epoch"],
                               target_assignment=partitions(m["target_assignment"]),
                               upgraded=None if m.get("member_type", -1) < 0
                               else m["member_type"] == 1)
             for m in g["members"]],
            g["assignor_name"], g["group_state"], type="consumer",
            group_epoch=g["group_epoch"], target_assignment_epoch=g["assignment_epoch"])

    def delete_consumer_groups(self, group_ids: list[str],
                               request_timeout: float | None = None) -> dict:
        """{group id: Future}; refused (NonEmptyGroupError) while a group has members."""
        resp = self._request(ApiKey.DELETE_GROUPS, {"groups_names": list(group_ids)},
                             request_timeout)
        out = {}
        for r in resp["results"]:
            code = r["error_code"]
            msg = {errors.GroupIdNotFoundError.code:
                   f"consumer group {r['group_id']!r} does not exist",
                   errors.NonEmptyGroupError.code:
                   f"consumer group {r['group_id']!r} has active members; stop them first"
                   }.get(code)
            out[r["group_id"]] = _done(exc=error_or_none(code, msg))
        return out

    def remove_members_from_consumer_group(self, group_id: str, group_instance_ids: list[str],
                                           reason: str | None = None,
                                           request_timeout: float | None = None
                                           ) -> RemoveMembersFromConsumerGroupResult:
        """Remove static members (KIP-345) from a classic group at once, as
        the Java Admin's removeMembersFromConsumerGroup: a static member's
        close leaves it in the group until its session times out (it may
        come back), this is the way to say it will not. LeaveGroup v3+
        names each by its group.instance.id; one that is not in the group
        fails with UnknownMemberIdError."""
        if not group_instance_ids:
            raise ValueError("remove_members_from_consumer_group: name at least one "
                             "group.instance.id")
        resp = self._request(ApiKey.LEAVE_GROUP, {"group_id": group_id, "members": [
            {"member_id": "", "group_instance_id": i,
             "reason": reason or "member was removed by an admin"}
            for i in group_instance_ids]}, request_timeout)

        def failed(code: int, who: str):
            return error_or_none(code, code and f"consumer group {group_id!r}{who}: "
                                              f"{errors.error_for_code(code).name}")
        top = failed(resp["error_code"], "")
        codes = {m["group_instance_id"]: m["error_code"] for m in resp["members"]}
        return RemoveMembersFromConsumerGroupResult({
            i: _done(exc=top or failed(codes.get(i, errors.UnknownServerError.code),
                                       f", member {i!r}"))
            for i in group_instance_ids})

    def list_consumer_group_offsets(self, group_id: str, partitions=None,
                                    request_timeout: float | None = None) -> Future:
        """A Future of [TopicPartition] with the group's committed offsets
        (all of them, or those of ``partitions``; OFFSET_INVALID where none)."""
        topics = None
        if partitions is not None:
            topics = [{"name": t, "partition_indexes": ps}
                      for t, ps in _by_topic(partitions).items()]
        resp = self._request(ApiKey.OFFSET_FETCH, {
            "group_id": group_id, "topics": topics, "require_stable": False,
            "groups": [{"group_id": group_id, "member_id": None, "member_epoch": -1,
                        "topics": topics}]}, request_timeout)
        g = resp["groups"][0]
        exc = error_or_none(g["error_code"])
        out = []
        for t in g["topics"]:
            for p in t["partitions"]:
                tp = TopicPartition(t["name"], p["partition_index"],
                                    p["committed_offset"] if p["committed_offset"] >= 0 else -1001,
                                    p["metadata"] or None)
                tp.error = error_or_none(p["error_code"])
                out.append(tp)
        return _done(None if exc else sorted(out), exc)

    def alter_consumer_group_offsets(self, group_id: str, offsets: list,
                                     request_timeout: float | None = None) -> Future:
        """Set a group's committed offsets; refused while the group has
        active members (their positions would overwrite the change)."""
        by_topic: dict[str, list] = {}
        for tp in offsets:
            by_topic.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": tp.offset,
                "committed_leader_epoch": -1, "committed_metadata": tp.metadata or ""})
        resp = self._request(ApiKey.OFFSET_COMMIT, {
            "group_id": group_id, "generation_id_or_member_epoch": -1, "member_id": "",
            "group_instance_id": None, "retention_time_ms": -1,
            "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]},
            request_timeout)
        for t in resp["topics"]:
            for p in t["partitions"]:
                code = p["error_code"]
                if code in (errors.UnknownMemberIdError.code, errors.RebalanceInProgressError.code,
                            errors.IllegalGenerationError.code):
                    return _done(exc=errors.NonEmptyGroupError(
                        f"consumer group {group_id!r} has active members; stop them before "
                        f"changing its offsets"))
                if code:
                    return _done(exc=error_or_none(code, f"{t['name']}-{p['partition_index']}: "
                                                f"{errors.error_for_code(code).name}"))
        return _done(sorted(offsets))

    def delete_consumer_group_offsets(self, group_id: str, partitions: list,
                                      request_timeout: float | None = None) -> dict:
        """{TopicPartition: Future}: delete a group's committed offsets of
        ``partitions`` (OffsetDelete, KIP-496; the Java Admin's
        deleteConsumerGroupOffsets). A topic the group's members still
        subscribe to is refused GROUP_SUBSCRIBED_TO_TOPIC."""
        resp = self._request(ApiKey.OFFSET_DELETE, {"group_id": group_id, "topics": [
            {"name": t, "partitions": [{"partition_index": p} for p in ps]}
            for t, ps in _by_topic(partitions).items()]}, request_timeout)
        if resp["error_code"]:
            code = resp["error_code"]
            raise error_or_none(code, f"consumer group {group_id!r}: "
                                      f"{errors.error_for_code(code).name}")
        out = {}
        for t in resp["topics"]:
            for p in t["partitions"]:
                code = p["error_code"]
                out[TopicPartition(t["name"], p["partition_index"])] = _done(exc=error_or_none(
                    code, f"consumer group {group_id!r}, {t['name']}-{p['partition_index']}: "
                          f"{errors.error_for_code(code).name}" if code else None))
        return out

    def describe_cluster(self, request_timeout: float | None = None) -> dict:
        """DescribeCluster: {"cluster_id", "controller_id", "brokers":
        [BrokerMetadata]} as the native listener sees them (the partition
        workers; controller id -1 there: the supervisor answering)."""
        resp = self._request(ApiKey.DESCRIBE_CLUSTER, {"include_cluster_authorized_operations":
                                                       False}, request_timeout)
        if resp["error_code"]:
            raise error_or_none(resp["error_code"], resp["error_message"])
        return {"cluster_id": resp["cluster_id"], "controller_id": resp["controller_id"],
                "brokers": [BrokerMetadata(b["broker_id"], b["host"], b["port"])
                            for b in resp["brokers"]]}

    def server_endpoints(self, request_timeout: float | None = None) -> dict:
        """kafkalite's own, not a Kafka API: every address the server
        serves, as its ready line names them ("native", "kafka.bootstrap.servers",
        "kafka.security.protocol", "kafka_listeners", "ingest", "metrics",
        "health", the HTTP apps', "schema_registry", "rest_proxy"), asked
        of the server rather than read from its server.json, which only a
        process on its host and with its data directory can."""
        with self._lock:
            return self._meta.extension({"op": "server_endpoints"},
                                        request_timeout or self._timeout)["endpoints"]

    def _connection_to(self, node: int) -> Connection:
        endpoint = self._meta.brokers.get(node)
        if endpoint is None:
            raise errors.LeaderNotAvailableError(f"worker {node} is not available")
        conn = self._worker_conns.get(node)
        if conn is None or conn.endpoint != endpoint:
            conn = self._worker_conns[node] = Connection(endpoint, self.config["client.id"],
                                                         self._ctx)
        return conn

    def list_offsets(self, requests: dict, request_timeout: float | None = None) -> dict:
        """{(topic, partition): timestamp ms, or -1 latest / -2 earliest} ->
        {(topic, partition): offset} (-1 where no record is that late)."""
        with self._lock:
            got = list_offsets(self._meta, self._connection_to, requests, 0,
                               request_timeout or self._timeout)
        return {k: off for k, (off, _) in got.items()}

    def describe_log_dirs(self, brokers: list[int] | None = None,
                          request_timeout: float | None = None) -> dict:
        """{broker id: {TopicPartition: size in bytes}}: DescribeLogDirs asked
        of each partition worker (default: every live one), as the Java
        Admin's describeLogDirs; each broker lists the replicas it hosts."""
        out = {}
        with self._lock:
            self._meta.refresh(None, False, self._timeout)
            for broker in sorted(self._meta.brokers if brokers is None else brokers):
                resp = self._connection_to(broker).request(
                    ApiKey.DESCRIBE_LOG_DIRS, {"topics": None}, request_timeout or self._timeout)
                exc = error_or_none(resp.get("error_code", 0))
                if exc is not None:
                    raise exc
                sizes = out[broker] = {}
                for d in resp["results"]:
                    for t in d["topics"]:
                        for p in t["partitions"]:
                            sizes[TopicPartition(t["name"], p["partition_index"])] = \
                                p["partition_size"]
        return out

    # ---- transactions -------------------------------------------------------------------------

    def list_transactions(self, states=None, producer_ids=None, duration_ms: int = -1,
                          request_timeout: float | None = None) -> Future:
        """A Future of [TransactionListing] (in ``states``, of ``producer_ids``,
        open for at least ``duration_ms``)."""
        resp = self._request(ApiKey.LIST_TRANSACTIONS, {
            "state_filters": list(states or []), "producer_id_filters": list(producer_ids or []),
            "duration_filter": duration_ms}, request_timeout)
        exc = error_or_none(resp["error_code"])
        if exc is None and resp["unknown_state_filters"]:
            exc = errors.InvalidRequestError(
                f"unknown transaction state(s) {', '.join(resp['unknown_state_filters'])}")
        return _done(None if exc else [
            TransactionListing(t["transactional_id"], t["producer_id"], t["transaction_state"])
            for t in resp["transaction_states"]], exc)

    def describe_transactions(self, transactional_ids: list[str],
                              request_timeout: float | None = None) -> dict:
        """{transactional id: Future of TransactionDescription}."""
        resp = self._request(ApiKey.DESCRIBE_TRANSACTIONS,
                             {"transactional_ids": list(transactional_ids)}, request_timeout)
        out = {}
        for t in resp["transaction_states"]:
            code = t["error_code"]
            exc = error_or_none(code, f"transactional id {t['transactional_id']!r} is not known"
                                if code == errors.TransactionalIdNotFoundError.code else None)
            out[t["transactional_id"]] = _done(None if exc else TransactionDescription(
                t["transactional_id"], t["transaction_state"], t["producer_id"],
                t["producer_epoch"], t["transaction_timeout_ms"], t["transaction_start_time_ms"],
                [TopicPartition(x["topic"], p) for x in t["topics"] for p in x["partitions"]]),
                exc)
        return out

    def _by_leader(self, partitions) -> dict[int, dict[str, list]]:
        topics = sorted({tp.topic for tp in partitions})
        self._meta.refresh(topics, False, self._timeout)
        by_leader: dict[int, dict[str, list]] = {}
        for tp in partitions:
            leader = self._meta.leader(tp.topic, tp.partition)
            by_leader.setdefault(leader, {}).setdefault(tp.topic, []).append(tp.partition)
        return by_leader

    def delete_records(self, topic_partition_offsets: list[TopicPartition],
                       request_timeout: float | None = None,
                       operation_timeout: float | None = None) -> dict:
        """Delete every record before each TopicPartition's ``offset``
        (-1, OFFSET_END: the whole partition up to its high watermark), as
        confluent-kafka's ``delete_records``: {TopicPartition: Future of
        DeletedRecords}. Asked of each partition's leader, which answers
        once its in-sync followers moved their log start too or
        ``operation_timeout`` passed (REQUEST_TIMED_OUT); a partition whose
        leader moved meanwhile is asked of the new one."""
        tps = list(topic_partition_offsets)
        if not tps:
            return {}
        seen = set()
        for tp in tps:
            if not isinstance(tp, TopicPartition):
                raise TypeError(f"delete_records takes TopicPartitions, not {type(tp).__name__}")
            if not isinstance(tp.offset, int) or tp.offset < -1:
                raise ValueError(f"{tp.topic}-{tp.partition}: offset must be -1 (the high "
                                 f"watermark) or an offset >= 0, not {tp.offset!r}")
            if (tp.topic, tp.partition) in seen:
                raise ValueError(f"{tp.topic}-{tp.partition} is given twice")
            seen.add((tp.topic, tp.partition))
        timeout = request_timeout or self._timeout
        op_ms = int((timeout if operation_timeout is None else operation_timeout) * 1000)
        results: dict = {}            # (topic, partition) -> DeletedRecords or KafkaError
        todo = tps
        with self._lock:
            for attempt in range(_DELETE_RECORDS_ATTEMPTS):
                if attempt:
                    time.sleep(_DELETE_RECORDS_BACKOFF_S)   # for the new leader to be known
                todo = self._delete_records_once(todo, results, timeout, op_ms)
                if not todo:
                    break
        out = {}
        for tp in tps:
            got = results.get((tp.topic, tp.partition)) or errors.UnknownServerError(
                f"{tp.topic}-{tp.partition}: the leader's answer left it out")
            out[tp] = _done(exc=got) if isinstance(got, errors.KafkaError) else _done(got)
        return out

    def _delete_records_once(self, todo: list, results: dict, timeout: float,
                             op_ms: int) -> list:
        """One round of delete_records: DeleteRecords for ``todo`` to their
        leaders as Metadata names them now, results into ``results``;
        returns those to ask again (the leader moved or was not known)."""
        self._meta.refresh(sorted({tp.topic for tp in todo}), False, timeout)
        by_leader: dict = {}
        for tp in todo:
            try:
                leader = self._meta.leader(tp.topic, tp.partition)
            except errors.KafkaError as exc:
                results[(tp.topic, tp.partition)] = exc
                continue
            if self._meta.topics[tp.topic].is_internal:
                leader = None       # the supervisor keeps them (and refuses this)
            by_leader.setdefault(leader, []).append(tp)
        retry = []

        def retriable(exc) -> bool:
            # a timeout would only be waited for again
            return exc.retriable and not isinstance(exc, errors.RequestTimedOutError)
        for leader, group in by_leader.items():
            body = {"timeout_ms": op_ms, "topics": [
                {"name": t, "partitions": [{"partition_index": tp.partition, "offset": tp.offset}
                                           for tp in group if tp.topic == t]}
                for t in dict.fromkeys(tp.topic for tp in group)]}
            try:
                if leader is None:
                    resp = self._meta.admin_request(ApiKey.DELETE_RECORDS, body,
                                                    timeout + op_ms / 1000.0)
                else:
                    resp = self._connection_to(leader).request(ApiKey.DELETE_RECORDS, body,
                                                               timeout + op_ms / 1000.0)
            except errors.KafkaError as exc:
                for tp in group:
                    results[(tp.topic, tp.partition)] = exc
                retry += group if retriable(exc) else []
                continue
            asked = {(tp.topic, tp.partition): tp for tp in group}
            for t in resp["topics"]:
                for p in t["partitions"]:
                    key = (t["name"], p["partition_index"])
                    code = p["error_code"]
                    exc = error_or_none(code, f"{key[0]}-{key[1]}: " + (
                        _DELETE_RECORDS_ERRORS.get(code) or errors.error_for_code(code).name))
                    results[key] = exc or DeletedRecords(p["low_watermark"])
                    if exc is not None and retriable(exc) and key in asked:
                        retry.append(asked[key])
        return retry

    def describe_producers(self, partitions: list[TopicPartition],
                           request_timeout: float | None = None) -> dict:
        """{TopicPartition: Future of [ProducerState]}, asked of each
        partition's leader."""
        out = {}
        with self._lock:
            for leader, topics in self._by_leader(partitions).items():
                resp = self._connection_to(leader).request(ApiKey.DESCRIBE_PRODUCERS, {
                    "topics": [{"name": t, "partition_indexes": ps} for t, ps in topics.items()]},
                    request_timeout or self._timeout)
                for t in resp["topics"]:
                    for p in t["partitions"]:
                        exc = error_or_none(p["error_code"], p["error_message"])
                        out[TopicPartition(t["name"], p["partition_index"])] = _done(None if exc else [
                            ProducerState(a["producer_id"], a["producer_epoch"],
                                          a["last_sequence"], a["last_timestamp"],
                                          a["coordinator_epoch"], a["current_txn_start_offset"])
                            for a in p["active_producers"]], exc)
        return out

    def abort_transaction(self, partition: TopicPartition, producer_id: int, producer_epoch: int,
                          coordinator_epoch: int = 0,
                          request_timeout: float | None = None) -> Future:
        """Write an ABORT marker for ``producer_id``'s open transaction in
        ``partition`` (the Java Admin's abortTransaction): for a hanging
        transaction, one its coordinator will never end. The epoch must be
        the producer's current one in the partition (DescribeProducers)."""
        with self._lock:
            (leader, topics), = self._by_leader([partition]).items()
            resp = self._connection_to(leader).request(ApiKey.WRITE_TXN_MARKERS, {"markers": [{
                "producer_id": producer_id, "producer_epoch": producer_epoch,
                "transaction_result": False, "coordinator_epoch": coordinator_epoch,
                "topics": [{"name": partition.topic, "partition_indexes": [partition.partition]}]}]},
                request_timeout or self._timeout)
        code = resp["markers"][0]["topics"][0]["partitions"][0]["error_code"]
        return _done(exc=error_or_none(code))

    def find_hanging_transactions(self, topics: list[str] | None = None,
                                  max_transaction_timeout_ms: int = 900_000,
                                  now_ms: int | None = None) -> list[HangingTransaction]:
        """Open transactions in partitions that no coordinator will end (Kafka's
        ``kafka-transactions.sh find-hanging``): the producer's open
        transaction there is older than ``max_transaction_timeout_ms`` and
        its coordinator either does not know the producer or has no open
        transaction including the partition."""
        import time as _time
        now = int(_time.time() * 1000) if now_ms is None else now_ms
        with self._lock:
            meta = cluster_metadata(self._meta, None, self._timeout)
        names = [t for t in meta.topics if topics is None or t in topics]
        partitions = [TopicPartition(t, p) for t in names for p in meta.topics[t].partitions]
        candidates = []
        for tp, fut in self.describe_producers(partitions).items():
            for st in fut.result():
                if (st.current_transaction_start_offset >= 0
                        and now - st.last_timestamp > max_transaction_timeout_ms):
                    candidates.append((tp, st))
        if not candidates:
            return []
        listed = self.list_transactions(producer_ids=[st.producer_id for _, st in candidates]).result()
        ids = {t.producer_id: t.transactional_id for t in listed}
        described = self.describe_transactions(sorted(set(ids.values()))) if ids else {}
        out = []
        for tp, st in candidates:
            tid = ids.get(st.producer_id)
            if tid is None:
                reason = "no transaction coordinator knows the producer"
            else:
                try:
                    d = described[tid].result()
                except errors.KafkaError as exc:
                    d, reason = None, f"its coordinator cannot describe it ({exc.name})"
                if d is not None:
                    if (d.state == "Ongoing" and d.producer_id == st.producer_id
                            and tp in d.topic_partitions):
                        continue        # its coordinator will end it
                    reason = (f"its coordinator has the id in state {d.state} without this "
                              f"partition")
            out.append(HangingTransaction(tp.topic, tp.partition, st.producer_id,
                                          st.producer_epoch,
                                          st.current_transaction_start_offset,
                                          st.last_timestamp, tid, reason))
        return out

    def describe_group_offsets(self, group_id: str) -> list[PartitionLag]:
        """Per partition the group has committed or owns: committed offset,
        log end offset, lag and owning member (``kafkalite groups describe``)."""
        desc = self.describe_consumer_groups([group_id])[group_id].result()
        owners = {(tp.topic, tp.partition): m for m in desc.members for tp in m.assignment}
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in self.list_consumer_group_offsets(group_id).result()}
        keys = sorted(set(owners) | set(committed))
        with self._lock:
            self._meta.refresh(sorted({t for t, _ in keys}), False, self._timeout)
        keys = [k for k in keys if k[0] in self._meta.topics
                and k[1] in self._meta.topics[k[0]].partitions]
        ends = self.list_offsets({k: -1 for k in keys}) if keys else {}
        out = []
        for k in keys:
            c = committed.get(k, -1001)
            c = c if c >= 0 else -1
            m = owners.get(k)
            out.append(PartitionLag(k[0], k[1], c, ends[k], ends[k] - c if c >= 0 else None,
                                    m.member_id if m else None, m.client_id if m else None))
        return out

    def plan_offset_reset(self, group_id: str, topics: list[str], spec: str, value=None) -> list:
        """New offsets for ``kafkalite groups reset-offsets``: ``spec`` is one
        of RESET_SPECS; ``value`` the offset, shift, datetime (epoch ms),
        duration (ms before now), or for from-file {(topic, partition):
        offset} (its partitions are the ones reset). Targets are clamped to
        each partition's [log start, log end]; to-current keeps the committed
        offset (the log end where none is). Topics default to those the
        group has committed offsets for."""
        if spec not in RESET_SPECS:
            raise ValueError(f"unknown reset spec {spec!r}: use one of {', '.join(RESET_SPECS)}")
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in self.list_consumer_group_offsets(group_id).result()}
        if spec == "from-file":
            topics = sorted({t for t, _ in value})
        if spec == "by-duration":
            spec, value = "to-datetime", int(time.time() * 1000) - int(value)
        if not topics:
            topics = sorted({t for t, _ in committed})
            if not topics:
                raise ValueError(f"group {group_id!r} has no committed offsets: name the "
                                 f"topic(s) to reset")
        with self._lock:
            self._meta.refresh(list(topics), False, self._timeout)
        keys = []
        for t in topics:
            info = self._meta.topics.get(t)
            if info is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {t!r} does not exist")
            if spec == "from-file":
                missing = sorted(p for tt, p in value if tt == t and p not in info.partitions)
                if missing:
                    raise errors.UnknownTopicOrPartitionError(
                        f"topic {t!r} has no partition {missing[0]}")
                keys.extend(sorted(k for k in value if k[0] == t))
            else:
                keys.extend((t, p) for p in sorted(info.partitions))
        starts = self.list_offsets({k: -2 for k in keys})
        ends = self.list_offsets({k: -1 for k in keys})
        if spec == "to-datetime":
            at = self.list_offsets({k: int(value) for k in keys})
        out = []
        for k in keys:
            if spec == "to-earliest":
                target = starts[k]
            elif spec == "to-latest":
                target = ends[k]
            elif spec == "to-offset":
                target = int(value)
            elif spec == "shift-by":
                current = committed.get(k, -1001)
                target = (current if current >= 0 else ends[k]) + int(value)
            elif spec == "to-current":
                current = committed.get(k, -1001)
                target = current if current >= 0 else ends[k]
            elif spec == "from-file":
                target = int(value[k])
            else:
                target = at[k] if at[k] >= 0 else ends[k]
            out.append(TopicPartition(k[0], k[1], min(max(target, starts[k]), ends[k])))
        return out

    def close(self) -> None:
        with self._lock:
            for conn in self._worker_conns.values():
                conn.close()
            self._worker_conns.clear()
            self._meta.close()
        self._ctx.term_within("admin client")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
