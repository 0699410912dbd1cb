"""Native-protocol connections and the cluster metadata cache.

A Connection is one ZeroMQ DEALER socket to one kafkalite process (the
supervisor or a worker), carrying pipelined requests matched to responses
by correlation id (framing: kafkalite/protocol/native.py, docs/protocol.md).

Thread safety: a Connection and a Metadata object are used by one thread
at a time; the client classes give each thread its own or hold a lock.
"""
from __future__ import annotations

import itertools
import struct
import time
from dataclasses import dataclass, field

import zmq

from kafkalite import errors
from kafkalite.errors import KafkaError, error_for_code
from kafkalite.protocol import ApiKey, decode_response, encode_request
from kafkalite.protocol import native

# The versions kafkalite's clients speak (all within SUPPORTED_VERSIONS).
VERSIONS = {
    ApiKey.PRODUCE: 9, ApiKey.FETCH: 12, ApiKey.LIST_OFFSETS: 7, ApiKey.METADATA: 12,
    ApiKey.API_VERSIONS: 3, ApiKey.CREATE_TOPICS: 7, ApiKey.DELETE_TOPICS: 6,
    ApiKey.CREATE_PARTITIONS: 3, ApiKey.DESCRIBE_CONFIGS: 4, ApiKey.ALTER_CONFIGS: 2,
    ApiKey.INCREMENTAL_ALTER_CONFIGS: 1, ApiKey.DESCRIBE_CLUSTER: 0,
    ApiKey.FIND_COORDINATOR: 4, ApiKey.JOIN_GROUP: 9, ApiKey.SYNC_GROUP: 5,
    ApiKey.HEARTBEAT: 4, ApiKey.LEAVE_GROUP: 5, ApiKey.OFFSET_COMMIT: 8,
    ApiKey.OFFSET_FETCH: 8, ApiKey.OFFSET_DELETE: 0, ApiKey.DESCRIBE_GROUPS: 5,
    ApiKey.LIST_GROUPS: 4, ApiKey.DELETE_GROUPS: 2,
}
_CORRELATION = struct.Struct(">i")


class KafkaTimeoutError(errors.RequestTimedOutError):
    """No answer within the timeout (the server may be down or unreachable)."""


def parse_bootstrap(servers: str) -> list[str]:
    """'host:port,host2:port' -> ZeroMQ endpoints; ValueError for anything else."""
    if not isinstance(servers, str) or not servers.strip():
        raise ValueError("bootstrap.servers must be 'host:port' (comma-separated for several)")
    out = []
    for item in servers.split(","):
        item = item.strip()
        if item.startswith("tcp://"):
            item = item[len("tcp://"):]
        host, _, port = item.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"bootstrap.servers entry {item!r} is not host:port")
        out.append(f"tcp://{host}:{int(port)}")
    return out


class Connection:
    def __init__(self, endpoint: str, client_id: str = "kafkalite", ctx: zmq.Context | None = None):
        self.endpoint = endpoint
        self.client_id = client_id
        self.sock = (ctx or zmq.Context.instance()).socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.SNDHWM, 0)
        self.sock.setsockopt(zmq.RCVHWM, 0)
        self.sock.connect(endpoint)
        self._ids = itertools.count(1)
        self._outstanding: dict[int, tuple[int, int]] = {}
        self._stash: dict[int, object] = {}

    def send(self, api_key: int, body: dict, *, expect_response: bool = True,
             version: int | None = None) -> int:
        """Send a request; returns its correlation id."""
        version = VERSIONS[api_key] if version is None else version
        correlation_id = next(self._ids) & 0x7FFFFFFF
        records: list = []
        frame = encode_request(api_key, version, correlation_id, self.client_id, body,
                               records_out=records)
        if expect_response:
            self._outstanding[correlation_id] = (api_key, version)
        self.sock.send_multipart([frame, *records], copy=False)
        return correlation_id

    def send_extension(self, body: dict) -> int:
        correlation_id = next(self._ids) & 0x7FFFFFFF
        self._outstanding[correlation_id] = (native.EXTENSION_API_KEY, 0)
        self.sock.send(native.encode_extension_request(correlation_id, body))
        return correlation_id

    @property
    def has_stashed(self) -> bool:
        """A response was read (by ``wait_for``) but not yet taken by ``recv``."""
        return bool(self._stash)

    @property
    def in_flight(self) -> int:
        return len(self._outstanding)

    def recv(self, timeout_ms: int = 0):
        """The next response as (correlation id, body or KafkaError), or None."""
        if self._stash:
            cid = next(iter(self._stash))
            return cid, self._stash.pop(cid)
        return self._recv_socket(timeout_ms)

    def _recv_socket(self, timeout_ms: int):
        if not self.sock.poll(timeout_ms):
            return None
        frames = self.sock.recv_multipart(copy=False)
        first = frames[0].bytes if len(frames[0]) <= 1 else None
        if first == native.ERROR_FRAME:
            cid, code, message = native.decode_error(frames[1].bytes)
            self._outstanding.pop(cid, None)
            return cid, error_for_code(code)(message or f"server error {code}")
        (cid,) = _CORRELATION.unpack_from(frames[0].buffer)
        api_key, version = self._outstanding.pop(cid, (None, None))
        if api_key is None:
            return cid, errors.UnknownServerError(f"unexpected response {cid}")
        if api_key == native.EXTENSION_API_KEY:
            return cid, native.decode_extension_response(frames[0].bytes)[1]
        _, body = decode_response(api_key, version, frames[0].buffer,
                                  records_in=[f.buffer for f in frames[1:]])
        return cid, body

    def wait_for(self, correlation_id: int, timeout: float):
        """The response to ``correlation_id`` (others are kept for recv)."""
        deadline = time.monotonic() + timeout
        while True:
            if correlation_id in self._stash:
                return self._stash.pop(correlation_id)
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self._outstanding.pop(correlation_id, None)
                raise KafkaTimeoutError(f"no response from {self.endpoint} within {timeout:.1f} s "
                                        f"(is the server running?)")
            # from the socket: what recv() would give first may be stashed already
            got = self._recv_socket(int(remaining * 1000) + 1)
            if got is None:
                continue
            cid, body = got
            if cid == correlation_id:
                return body
            self._stash[cid] = body

    def request(self, api_key: int, body: dict, timeout: float = 30.0, version: int | None = None):
        """Send and wait; raises the KafkaError of an error reply."""
        result = self.wait_for(self.send(api_key, body, version=version), timeout)
        if isinstance(result, KafkaError):
            raise result
        return result

    def extension(self, body: dict, timeout: float = 30.0) -> dict:
        result = self.wait_for(self.send_extension(body), timeout)
        if isinstance(result, KafkaError):
            raise result
        if result.get("error_code"):
            raise error_for_code(result["error_code"])(result.get("message", ""))
        return result

    def close(self, linger_ms: int = 0) -> None:
        """Close; with ``linger_ms``, requests ZeroMQ has not sent yet still go
        out for that long (acks=0 producers have nothing else to wait on)."""
        self.sock.close(linger_ms)


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

    def connection(self) -> Connection:
        if self._conn is None:
            self._conn = Connection(self.bootstrap[0], self.client_id, self.ctx)
        return self._conn

    def admin_request(self, api_key: int, body: dict, timeout: float = 30.0):
        return self._with_failover(lambda conn: conn.request(api_key, body, timeout))

    def _with_failover(self, fn):
        last = None
        for _ in self.bootstrap:
            try:
                return fn(self.connection())
            except KafkaTimeoutError as exc:
                last = exc
                self._conn.close()
                self._conn = None
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
            info = TopicInfo(t["name"], t.get("topic_id"), error_code=t["error_code"])
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
        """The topic's metadata (fetched if unknown); raises its error."""
        info = self.topics.get(name)
        if info is None or not info.partitions:
            resp = self.refresh([name], auto_create, timeout)
            entry = next((t for t in resp["topics"] if t["name"] == name), None)
            if entry is not None and entry["error_code"]:
                raise error_for_code(entry["error_code"])(f"topic {name!r}: "
                                                          f"{error_for_code(entry['error_code']).name}")
            info = self.topics.get(name)
            if info is None:
                raise errors.UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
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
    by_node: dict[int, dict] = {}
    for (t, p), ts in requests.items():
        node = meta.leader(t, p)
        by_node.setdefault(node, {}).setdefault(t, []).append(
            {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts})
    out = {}
    for node, topics in by_node.items():
        resp = connection_to(node).request(ApiKey.LIST_OFFSETS, {
            "replica_id": -1, "isolation_level": isolation_level,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]}, timeout)
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error_code"]:
                    raise error_for_code(p["error_code"])(
                        f"ListOffsets of {t['name']}-{p['partition_index']}")
                out[(t["name"], p["partition_index"])] = (p["offset"], p["timestamp"])
    return out

