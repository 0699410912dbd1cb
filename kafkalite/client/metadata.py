"""Cluster metadata on the client side: who leads what, and where.

``Metadata`` caches what the supervisor's Metadata answers say about the
brokers (the workers, by node id and endpoint) and the topics (partitions,
leaders, leader epochs), refreshing on demand; the producer, the consumer,
the group membership and the admin client each keep one. Beside it, the
two lookups several clients share: ``list_offsets`` (ListOffsets asked of
each partition's leader) and ``cluster_metadata`` (``list_topics()`` in
confluent-kafka's shapes: ClusterMetadata, BrokerMetadata, TopicMetadata,
PartitionMetadata).

Thread safety: a Metadata object is used by one thread at a time; the
client classes give each thread its own or hold a lock.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import zmq

from kafkalite import errors
from kafkalite.client.bootstrap import BootstrapError, native_endpoint
from kafkalite.client.connection import Connection, KafkaTimeoutError
from kafkalite.errors import error_for_code, error_or_none
from kafkalite.protocol import ApiKey

RETRY_BACKOFF_S = 0.1    # between ListOffsets tries of partitions whose leader moved (retry.backoff.ms)


@dataclass
class PartitionInfo:
    partition: int
    leader: int
    leader_epoch: int
    error_code: int


@dataclass
class TopicInfo:
    name: str
    topic_id: object
    partitions: dict[int, PartitionInfo] = field(default_factory=dict)
    error_code: int = 0
    is_internal: bool = False


class Metadata:
    """What the supervisor says about brokers (workers) and topics."""

    def __init__(self, bootstrap: list[str], client_id: str, ctx: zmq.Context | None = None):
        self.bootstrap = bootstrap
        self.client_id = client_id
        self.ctx = ctx or zmq.Context.instance()
        self._conn: Connection | None = None
        self.brokers: dict[int, str] = {}
        self.topics: dict[str, TopicInfo] = {}
        self.cluster_id = None
        self.refreshed_at = 0.0

    def connection(self, timeout: float = 30.0) -> Connection:
        """The link to the first bootstrap address, made once its native
        endpoint is known (bootstrap.py: a Kafka listener's address works
        too, and a server that is down is reported at once)."""
        if self._conn is None:
            endpoint = native_endpoint(self.bootstrap[0], timeout, self.client_id)
            self._conn = Connection(endpoint, self.client_id, self.ctx)
        return self._conn

    def admin_request(self, api_key: int, body: dict, timeout: float = 30.0,
                      version: int | None = None):
        return self._with_failover(lambda conn: conn.request(api_key, body, timeout, version),
                                   timeout)

    def extension(self, body: dict, timeout: float = 30.0) -> dict:
        """A kafkalite extension request to the server (the native
        protocol's extension frame, not a Kafka API)."""
        return self._with_failover(lambda conn: conn.extension(body, timeout), timeout)

    def _with_failover(self, fn, timeout: float):
        last = None
        for _ in self.bootstrap:
            try:
                return fn(self.connection(timeout))
            except (KafkaTimeoutError, BootstrapError) as exc:
                last = exc
                self.close()
                self.bootstrap = self.bootstrap[1:] + self.bootstrap[:1]
        raise last

    def refresh(self, topics: list[str] | None = None, auto_create: bool = False,
                timeout: float = 30.0) -> dict:
        body = {"topics": None if topics is None else [{"name": t} for t in topics],
                "allow_auto_topic_creation": auto_create,
                "include_topic_authorized_operations": False}
        resp = self.admin_request(ApiKey.METADATA, body, timeout)
        self.brokers = {b["node_id"]: f"tcp://{b['host']}:{b['port']}" for b in resp["brokers"]}
        self.cluster_id = resp.get("cluster_id")
        for t in resp["topics"]:
            info = TopicInfo(t["name"], t.get("topic_id"), error_code=t["error_code"],
                             is_internal=bool(t.get("is_internal")))
            for p in t["partitions"]:
                info.partitions[p["partition_index"]] = PartitionInfo(
                    p["partition_index"], p["leader_id"], p["leader_epoch"], p["error_code"])
            if t["error_code"] == errors.UnknownTopicOrPartitionError.code:
                self.topics.pop(t["name"], None)
            else:
                self.topics[t["name"]] = info
        self.refreshed_at = time.monotonic()
        return resp

    def topic(self, name: str, auto_create: bool = False, timeout: float = 30.0) -> TopicInfo:
        """The metadata of a topic to write to (fetched if unknown); raises
        its error, and InvalidTopicError for an internal topic (its leader
        is the broker's coordinator, which refuses appends from clients)."""
        info = self.topics.get(name)
        if info is None or not info.partitions:
            resp = self.refresh([name], auto_create, timeout)
            entry = next((t for t in resp["topics"] if t["name"] == name), None)
            if entry is not None and entry["error_code"]:
                raise error_for_code(entry["error_code"])(topic_error_message(
                    name, entry["error_code"]))
            info = self.topics.get(name)
            if info is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        if info.is_internal:
            raise errors.InvalidTopicError(f"cannot append to internal topic {name}: only the "
                                           f"broker writes it")
        return info

    def leader(self, topic: str, partition: int) -> int:
        info = self.topics.get(topic)
        if info is None or partition not in info.partitions:
            raise errors.UnknownTopicOrPartitionError(f"{topic}-{partition} does not exist")
        return info.partitions[partition].leader

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def list_offsets(meta: Metadata, connection_to, requests: dict, isolation_level: int = 0,
                 timeout: float = 30.0) -> dict:
    """ListOffsets for {(topic, partition): timestamp or -1 (latest) / -2
    (earliest)}, asking each partition's leader; -> {key: (offset, timestamp)}.
    ``connection_to(node)`` gives the Connection to a worker."""
    missing = {t for t, _ in requests} - set(meta.topics)
    if missing:
        meta.refresh(sorted(missing | set(meta.topics)), False, timeout)
        for t in missing:
            if t not in meta.topics:
                raise errors.UnknownTopicOrPartitionError(f"topic {t!r} does not exist")
    # a partition whose leader moved (NOT_LEADER_OR_FOLLOWER), has none yet,
    # or is not yet ready to answer (OFFSET_NOT_AVAILABLE after a leader
    # change) is asked again after a metadata refresh, until ``timeout``:
    # the retriable errors, as Kafka's consumer retries its ListOffsets
    deadline = time.monotonic() + timeout
    out: dict = {}
    todo = dict(requests)
    while True:
        failed: dict = {}
        last = None
        by_node: dict[int, dict] = {}
        for (t, p), ts in todo.items():
            node = meta.leader(t, p)
            if node < 0:
                failed[(t, p)] = ts
                last = errors.LeaderNotAvailableError(f"{t}-{p} has no leader")
                continue
            by_node.setdefault(node, {}).setdefault(t, []).append(
                {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts})
        for node, topics in by_node.items():
            resp = connection_to(node).request(ApiKey.LIST_OFFSETS, {
                "replica_id": -1, "isolation_level": isolation_level,
                "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
                max(deadline - time.monotonic(), 0.1))
            for t in resp["topics"]:
                for p in t["partitions"]:
                    key = (t["name"], p["partition_index"])
                    if p["error_code"]:
                        error = error_for_code(p["error_code"])(
                            f"ListOffsets of {t['name']}-{p['partition_index']}")
                        if not error.retriable:
                            raise error
                        failed[key], last = todo[key], error
                        continue
                    out[key] = (p["offset"], p["timestamp"])
        if not failed:
            return out
        if time.monotonic() + RETRY_BACKOFF_S >= deadline:
            raise last
        time.sleep(RETRY_BACKOFF_S)
        meta.refresh(sorted(set(meta.topics) | {t for t, _ in failed}), False,
                     max(deadline - time.monotonic(), 0.1))
        todo = failed


# ---- list_topics() in confluent-kafka's shapes ----------------------------------------------

@dataclass
class BrokerMetadata:
    id: int
    host: str
    port: int


@dataclass
class PartitionMetadata:
    id: int
    leader: int
    replicas: list
    isrs: list
    error: errors.KafkaError | None = None
    offline_replicas: list = field(default_factory=list)


@dataclass
class TopicMetadata:
    topic: str
    partitions: dict
    error: errors.KafkaError | None = None


@dataclass
class ClusterMetadata:
    cluster_id: str | None
    controller_id: int
    brokers: dict
    topics: dict


def cluster_metadata(meta: Metadata, topic: str | None = None, timeout: float = 30.0) -> ClusterMetadata:
    """list_topics(): the supervisor's view of workers and topics."""
    resp = meta.refresh(None if topic is None else [topic], False, timeout)
    brokers = {b["node_id"]: BrokerMetadata(b["node_id"], b["host"], b["port"])
               for b in resp["brokers"]}
    topics = {}
    for t in resp["topics"]:
        parts = {p["partition_index"]: PartitionMetadata(p["partition_index"], p["leader_id"],
                                                         p["replica_nodes"], p["isr_nodes"],
                                                         error_or_none(p["error_code"]),
                                                         list(p.get("offline_replicas") or ()))
                 for p in t["partitions"]}
        # the error names its topic: a CLI or log line shows it on its own
        error = t["error_code"] and error_or_none(
            t["error_code"], topic_error_message(t["name"], t["error_code"]))
        topics[t["name"]] = TopicMetadata(t["name"], parts, error or None)
    return ClusterMetadata(resp.get("cluster_id"), resp.get("controller_id", -1), brokers, topics)


def topic_error_message(name: str, code: int) -> str:
    """The message of a topic's Metadata error: it names the topic, and not
    the code again (a KafkaError prints as ``[CODE] message``: the CLI said
    "[UNKNOWN_TOPIC_OR_PARTITION] topic 'x': UNKNOWN_TOPIC_OR_PARTITION")."""
    if code == errors.UnknownTopicOrPartitionError.code:
        return f"topic {name!r} does not exist"
    return f"topic {name!r}"

