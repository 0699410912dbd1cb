"""A partition worker process: owns a set of partition logs and serves them.

Each worker owns the partitions the supervisor assigns to it -- their
PartitionLog directories, indexes and state -- and serves produce, fetch
and list-offsets for them itself, so the supervisor is never on the data
path. Inputs, all handled by one thread in one event loop:

- the native protocol: a ZeroMQ ROUTER; each request is a multipart message
  [Kafka request header + body, record batch frames...] (docs/protocol.md);
- the control channel to the supervisor: a DEALER carrying JSON messages
  (assign / unassign / configs / shutdown in, hello / ready / done out);
- shared-memory rings from same-host producers (kafkalite.shm), whose
  doorbell descriptors sit in the same poller;
- Kafka's wire protocol over TCP (kafka_listener.py): this worker is Kafka
  broker ``index`` to Kafka clients. It serves the data APIs itself (fetch
  responses sendfile the segment bytes) and relays every other API over a
  ZeroMQ DEALER to the supervisor, which answers as controller and group
  coordinator.

Produce applies the partition's idempotent producer state
(storage/producer_state.py) on every path -- native, Kafka, rings.

Fetches that cannot be answered yet (fewer than fetch.min.bytes available)
wait in a purgatory until an append to one of their partitions brings
enough bytes or fetch.max.wait.ms passes; the poll timeout is the nearest
deadline, so an idle worker sleeps.

Who may call: run as ``python -m kafkalite.server.worker`` by the supervisor.
"""
from __future__ import annotations

import argparse
import heapq
import itertools
import json
import logging
import os
import signal
import struct
import sys
import time
import uuid

import zmq

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey, ProtocolError, decode_request, encode_response
from kafkalite.protocol import native
from kafkalite.server.config import ServerConfig
from kafkalite.server.kafka_listener import FORWARD_IDENTITY_PREFIX, KafkaConnection, KafkaListener
from kafkalite.server.ratelimit import RateLimitedLog
from kafkalite.storage import PartitionLog
from kafkalite.storage.log import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP
from kafkalite.storage.producer_state import ProducerStateManager, producer_batches
from kafkalite.storage.segment import FileRegion

log = logging.getLogger("kafkalite.worker")

HOUSEKEEPING_INTERVAL_S = 1.0
CHECKPOINT_INTERVAL_S = 5.0
READ_COMMITTED = 1
# The APIs a worker serves itself; over the Kafka wire everything else is
# relayed to the supervisor.
DATA_APIS = (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.LIST_OFFSETS, ApiKey.OFFSET_FOR_LEADER_EPOCH)


class Partition:
    """A partition this worker leads."""

    __slots__ = ("topic", "index", "topic_id", "log", "leader_epoch", "waiters", "producers")

    def __init__(self, topic, index, topic_id, plog, leader_epoch):
        self.topic = topic
        self.index = index
        self.topic_id = topic_id
        self.log = plog
        self.leader_epoch = leader_epoch
        self.waiters: set = set()
        self.producers = ProducerStateManager()
        self.producers.rebuild(plog.segments)


class DelayedFetch:
    """A fetch parked until min_bytes arrive or its deadline passes."""

    __slots__ = ("identity", "header", "body", "deadline", "min_bytes", "bytes_seen", "done",
                 "partitions")

    def __init__(self, identity, header, body, deadline, min_bytes, bytes_seen, partitions):
        self.identity = identity
        self.header = header
        self.body = body
        self.deadline = deadline
        self.min_bytes = min_bytes
        self.bytes_seen = bytes_seen
        self.done = False
        self.partitions = partitions


class Worker:
    def __init__(self, index: int, config: ServerConfig, control_endpoint: str, port: int,
                 kafka_port: int = 0, supervisor_endpoint: str | None = None):
        self.index = index
        self.config = config
        self.ctx = zmq.Context.instance()
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        self.port = 0
        if port:
            try:
                self.router.bind(f"tcp://{config.host}:{port}")
                self.port = port
            except zmq.ZMQError as exc:
                log.warning("worker %d: port %d is taken (%s); using any free port", index, port, exc)
        if not self.port:
            self.port = self.router.bind_to_random_port(f"tcp://{config.host}")
        self.control = self.ctx.socket(zmq.DEALER)
        self.control.setsockopt(zmq.LINGER, 1000)
        self.control.setsockopt(zmq.IDENTITY, b"worker-%d" % index)
        self.control.connect(control_endpoint)
        self.poller = zmq.Poller()
        self.poller.register(self.router, zmq.POLLIN)
        self.poller.register(self.control, zmq.POLLIN)
        self.partitions: dict[tuple[str, int], Partition] = {}
        self.topic_names: dict[uuid.UUID, str] = {}   # Fetch v13+ names topics by id
        self.rings: dict[int, object] = {}     # doorbell fd -> WorkerRing
        self.purgatory: list = []              # heap of (deadline, seq, DelayedFetch)
        self._seq = itertools.count()
        self._stop = False
        self._next_housekeeping = time.monotonic() + HOUSEKEEPING_INTERVAL_S
        self._next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL_S
        self._parent = os.getppid()
        self._bad_input = RateLimitedLog(log)
        self.handlers = {
            ApiKey.PRODUCE: self._produce,
            ApiKey.FETCH: self._fetch,
            ApiKey.LIST_OFFSETS: self._list_offsets,
            ApiKey.OFFSET_FOR_LEADER_EPOCH: self._offset_for_leader_epoch,
        }
        self.handlers[ApiKey.API_VERSIONS] = lambda i, h, b: native.api_versions_body(self.handlers)
        # Kafka wire protocol: the APIs the whole cluster serves are advertised
        # (the supervisor sends the list with the first assignment).
        self.kafka_apis: list = list(self.handlers)
        self.kafka = KafkaListener(config.host, kafka_port, self.handlers,
                                   api_keys=lambda: self.kafka_apis, forward=self._forward,
                                   name=f"worker {index}", fallback_to_any_port=True)
        self.kafka.attach(self.poller)
        self.relay = self.ctx.socket(zmq.DEALER)
        self.relay.setsockopt(zmq.LINGER, 0)
        self.relay.setsockopt(zmq.IDENTITY, FORWARD_IDENTITY_PREFIX + b"%d" % index)
        if supervisor_endpoint:
            self.relay.connect(supervisor_endpoint)
        self.poller.register(self.relay, zmq.POLLIN)
        self._relayed: dict[int, tuple] = {}   # relay correlation id -> (connection, header)
        self._relay_ids = itertools.count(1)

    # ---- control channel -----------------------------------------------------------------

    def _send_control(self, msg: dict) -> None:
        self.control.send(json.dumps(msg).encode())

    def _on_control(self, msg: dict) -> None:
        kind = msg["type"]
        if kind == "assign":
            if "kafka_apis" in msg:
                self.kafka_apis = [ApiKey(k) for k in msg["kafka_apis"]]
            opened = []
            for p in msg["partitions"]:
                opened.append(self._assign(p))
            self._send_control({"type": "done", "op": msg.get("op"), "worker": self.index,
                                "results": opened})
        elif kind == "unassign":
            for p in msg["partitions"]:
                self._unassign(p["topic"], p["partition"], delete=msg.get("delete", False))
            self._send_control({"type": "done", "op": msg.get("op"), "worker": self.index})
        elif kind == "shutdown":
            self._stop = True
        else:
            log.warning("worker %d: unknown control message %r", self.index, kind)

    def _assign(self, p: dict) -> dict:
        key = (p["topic"], p["partition"])
        cfg = self.config.log_config(p.get("configs"))
        part = self.partitions.get(key)
        try:
            if part is None:
                directory = os.path.join(self.config.data_dir, f"{p['topic']}-{p['partition']}")
                plog = PartitionLog.open(directory, cfg)
                plog.high_watermark = plog.log_end_offset  # single replica: all is committed
                part = Partition(p["topic"], p["partition"], p.get("topic_id"), plog,
                                 p["leader_epoch"])
                self.partitions[key] = part
            else:
                part.log.config = cfg
                part.leader_epoch = p["leader_epoch"]
            if p.get("topic_id"):
                self.topic_names[uuid.UUID(str(p["topic_id"]))] = p["topic"]
            if part.leader_epoch > part.log.leader_epoch:
                part.log.leader_epoch = part.leader_epoch
            return {"topic": p["topic"], "partition": p["partition"], "error": 0}
        except KafkaError as exc:
            log.error("worker %d: cannot open %s-%d: %s", self.index, *key, exc)
            return {"topic": p["topic"], "partition": p["partition"], "error": exc.code,
                    "message": str(exc)}

    def _unassign(self, topic: str, partition: int, delete: bool) -> None:
        part = self.partitions.pop((topic, partition), None)
        if part is None:
            if delete:  # the log may exist on disk from an earlier owner
                import shutil
                shutil.rmtree(os.path.join(self.config.data_dir, f"{topic}-{partition}"),
                              ignore_errors=True)
            return
        for fetch in list(part.waiters):
            self._complete_fetch(fetch)
        if delete:
            part.log.delete()
        else:
            part.log.close()

    # ---- native protocol -------------------------------------------------------------------

    def _on_request(self, frames: list) -> None:
        identity, payload, extra = frames[0].bytes, frames[1], frames[2:]
        if native.is_extension_request(payload.buffer):
            self._on_extension(identity, payload.bytes)
            return
        try:
            header, body = decode_request(payload.buffer, records_in=[f.buffer for f in extra])
        except ProtocolError as exc:
            # No correlation id we can trust: drop it and keep serving.
            self._bad_input.warning("worker %d: dropped a malformed request: %s", self.index, exc)
            return
        handler = self.handlers.get(header.api_key)
        if handler is None or not native.version_supported(header):
            native.send_error(self.router, identity, header, errors.UnsupportedVersionError.code)
            return
        try:
            response = handler(identity, header, body)
        except KafkaError as exc:
            native.send_error(self.router, identity, header, exc.code)
            return
        except Exception:
            log.exception("worker %d: %s request failed", self.index, header.api_key)
            native.send_error(self.router, identity, header, errors.UnknownServerError.code)
            return
        if response is not None:
            self.send_response(identity, header, response)

    def _on_extension(self, identity: bytes, payload: bytes) -> None:
        """An extension request (docs/protocol.md): run its op and reply."""
        ops = {"shm_attach": self._shm_attach}
        try:
            correlation_id, body = native.decode_extension_request(payload)
            op = ops[body["op"]]
        except (ValueError, KeyError, struct.error) as exc:
            self._bad_input.warning("worker %d: dropped a malformed extension request: %s",
                                    self.index, exc)
            return
        try:
            reply = {"error_code": 0, **op(body)}
        except KafkaError as exc:
            reply = {"error_code": exc.code, "message": exc.message}
        except Exception as exc:  # one request must not take the worker down
            log.exception("worker %d: extension request %s failed", self.index, body["op"])
            reply = {"error_code": errors.UnknownServerError.code, "message": str(exc)}
        self.router.send_multipart([identity, native.encode_extension_response(correlation_id, reply)])

    def send_response(self, identity, header, body: dict) -> None:
        if type(identity) is KafkaConnection:
            self.kafka.respond(identity, header, body)   # file regions go out by sendfile
            return
        records: list = []
        payload = encode_response(header.api_key, header.api_version, header.correlation_id,
                                  body, records_out=records)
        frames = [r.read() if type(r) is FileRegion else r for r in records]
        self.router.send_multipart([identity, payload, *frames], copy=False)

    # ---- Kafka requests relayed to the supervisor ------------------------------------------

    def _forward(self, conn: KafkaConnection, header, payload: bytearray) -> None:
        """Relay a request this worker does not serve (Metadata, groups, admin,
        InitProducerId) to the supervisor; the connection stays muted until
        the answer comes back. Correlation ids are replaced by our own, since
        many connections share the relay."""
        relay_id = next(self._relay_ids) & 0x7FFFFFFF
        self._relayed[relay_id] = (conn, header)
        payload[4:8] = struct.pack(">i", relay_id)
        self.relay.send(payload, copy=False)

    def _on_relay_reply(self, frames: list) -> None:
        if frames[0] == native.ERROR_FRAME and len(frames) > 1:
            relay_id, code, message = native.decode_error(frames[1])
            pending = self._relayed.pop(relay_id, None)
            if pending is not None:
                self.kafka.respond_error(pending[0], pending[1], code, message)
            return
        reply = bytearray(frames[0])
        if len(reply) < 4:
            return
        relay_id, = struct.unpack_from(">i", reply)
        pending = self._relayed.pop(relay_id, None)
        if pending is None:
            return
        conn, header = pending
        reply[0:4] = struct.pack(">i", header.correlation_id)
        self.kafka.respond_frame(conn, reply)

    def _partition(self, topic: str, index: int) -> Partition:
        part = self.partitions.get((topic, index))
        if part is None:
            raise errors.NotLeaderOrFollowerError(
                f"worker {self.index} does not lead {topic}-{index}")
        return part

    # ---- produce ---------------------------------------------------------------------------

    def append(self, part: Partition, records) -> tuple[int, int]:
        """Append as leader, applying the idempotent producer state; wakes
        parked fetches. Returns (first offset, log append time): a retried
        batch already in the log is not written again and gets the offset
        it was written at."""
        batches = producer_batches(records) if records is not None else ()
        if batches:
            duplicate = part.producers.check(batches)
            if duplicate is not None:
                return duplicate[0], -1
        info = part.log.append(records)
        if batches:
            scan = info.scan
            if len(batches) == scan.batch_count:
                part.producers.update(batches, scan.base_offsets.tolist(),
                                      scan.last_offsets.tolist())
            else:   # some batches had no producer id: match them by position
                by_pos = dict(zip(scan.positions.tolist(),
                                  zip(scan.base_offsets.tolist(), scan.last_offsets.tolist())))
                for b in batches:
                    first, last = by_pos[b.position]
                    part.producers.update([b], [first], [last])
        part.log.high_watermark = part.log.log_end_offset
        if part.waiters:
            for fetch in list(part.waiters):
                fetch.bytes_seen += info.size_in_bytes
                if fetch.bytes_seen >= fetch.min_bytes:
                    self._complete_fetch(fetch)
        return info.first_offset, info.log_append_time

    def _produce(self, identity, header, body):
        acks = body.get("acks", 1)
        if acks not in (0, 1, -1):
            raise errors.InvalidRequiredAcksError(f"acks must be 0, 1 or -1, not {acks}")
        topics_out = []
        for topic in body["topic_data"]:
            parts_out = []
            for pd in topic["partition_data"]:
                out = {"index": pd["index"], "error_code": 0, "base_offset": -1,
                       "log_append_time_ms": -1, "log_start_offset": -1,
                       "record_errors": [], "error_message": None}
                try:
                    part = self._partition(topic["name"], pd["index"])
                    if pd["records"] is None:
                        raise errors.CorruptRecordError("produce request without records")
                    out["base_offset"], out["log_append_time_ms"] = self.append(part, pd["records"])
                    out["log_start_offset"] = part.log.log_start_offset
                except KafkaError as exc:
                    out["error_code"] = exc.code
                    out["error_message"] = exc.message
                parts_out.append(out)
            topics_out.append({"name": topic["name"], "partition_responses": parts_out})
        if acks == 0:
            return None
        return {"responses": topics_out, "throttle_time_ms": 0}

    # ---- fetch -----------------------------------------------------------------------------

    def _read_fetch(self, body) -> tuple[list, int, list]:
        """Read every partition of a fetch; returns (response topics, bytes, partitions)."""
        budget = body.get("max_bytes", 52428800) or 52428800
        committed_only = body.get("isolation_level", 0) == READ_COMMITTED
        topics_out, total, parts = [], 0, []
        first = True
        for topic in body["topics"]:
            name = topic.get("topic") or ""
            topic_id = topic.get("topic_id")
            if not name and topic_id is not None and topic_id.int:
                name = self.topic_names.get(topic_id, "")
            pouts = []
            for fp in topic["partitions"]:
                # Kafka answers an erroneous partition with empty records, not null.
                out = {"partition_index": fp["partition"], "error_code": 0, "high_watermark": -1,
                       "last_stable_offset": -1, "log_start_offset": -1,
                       "aborted_transactions": [] if committed_only else None,
                       "preferred_read_replica": -1, "records": b""}
                try:
                    if not name and topic_id is not None and topic_id.int:
                        raise errors.UnknownTopicIdError(f"no topic with id {topic_id} here")
                    part = self._partition(name, fp["partition"])
                    parts.append(part)
                    epoch = fp.get("current_leader_epoch", -1)
                    if epoch >= 0 and epoch < part.leader_epoch:
                        raise errors.FencedLeaderEpochError(
                            f"leader epoch {epoch} is older than {part.leader_epoch}")
                    if epoch > part.leader_epoch:
                        raise errors.UnknownLeaderEpochError(
                            f"leader epoch {epoch} is newer than {part.leader_epoch}")
                    plog = part.log
                    limit = min(fp.get("partition_max_bytes", 1048576), budget)
                    data = plog.read(fp["fetch_offset"], limit, max_offset=plog.high_watermark,
                                     min_one_message=first)
                    out["high_watermark"] = data.high_watermark
                    out["last_stable_offset"] = data.high_watermark
                    out["log_start_offset"] = data.log_start_offset
                    if data.region is not None:
                        # Kept as a file region: sendfile over TCP, read for ZeroMQ.
                        out["records"] = data.region
                        total += data.region.length
                        budget -= data.region.length
                        first = False
                    else:
                        out["records"] = b""
                except KafkaError as exc:
                    out["error_code"] = exc.code
                    if isinstance(exc, errors.OffsetOutOfRangeError):
                        out["high_watermark"] = part.log.high_watermark
                        out["log_start_offset"] = part.log.log_start_offset
                pouts.append(out)
            topics_out.append({"topic": name, "topic_id": topic.get("topic_id"),
                               "partitions": pouts})
        return topics_out, total, parts

    def _fetch(self, identity, header, body):
        topics_out, total, parts = self._read_fetch(body)
        min_bytes = max(body.get("min_bytes", 1), 1)
        wait_ms = body.get("max_wait_ms", 0)
        if total >= min_bytes or wait_ms <= 0 or not parts:
            return self._fetch_response(topics_out)
        fetch = DelayedFetch(identity, header, body, time.monotonic() + wait_ms / 1000.0,
                             min_bytes, total, parts)
        for part in parts:
            part.waiters.add(fetch)
        heapq.heappush(self.purgatory, (fetch.deadline, next(self._seq), fetch))
        return None

    @staticmethod
    def _fetch_response(topics_out) -> dict:
        return {"throttle_time_ms": 0, "error_code": 0, "session_id": 0,
                "responses": topics_out}

    def _complete_fetch(self, fetch: DelayedFetch) -> None:
        if fetch.done:
            return
        fetch.done = True
        for part in fetch.partitions:
            part.waiters.discard(fetch)
        topics_out, _, _ = self._read_fetch(fetch.body)
        self.send_response(fetch.identity, fetch.header, self._fetch_response(topics_out))

    def _expire_fetches(self) -> None:
        now = time.monotonic()
        while self.purgatory and self.purgatory[0][0] <= now:
            _, _, fetch = heapq.heappop(self.purgatory)
            self._complete_fetch(fetch)

    # ---- list offsets ----------------------------------------------------------------------

    def _list_offsets(self, identity, header, body):
        # read_committed sees the same offsets as read_uncommitted until
        # transactions exist: the last stable offset is the high watermark.
        topics_out = []
        for topic in body["topics"]:
            pouts = []
            for lp in topic["partitions"]:
                out = {"partition_index": lp["partition_index"], "error_code": 0,
                       "old_style_offsets": [], "timestamp": -1, "offset": -1,
                       "leader_epoch": -1}
                try:
                    part = self._partition(topic["name"], lp["partition_index"])
                    plog, ts = part.log, lp["timestamp"]
                    if ts == LATEST_TIMESTAMP:
                        found = (plog.high_watermark, -1)
                    elif ts == EARLIEST_TIMESTAMP:
                        found = (plog.log_start_offset, -1)
                    elif ts == MAX_TIMESTAMP or ts >= 0:
                        found = plog.offset_for_timestamp(ts)
                    else:
                        raise errors.InvalidRequestError(f"unsupported ListOffsets timestamp {ts}")
                    if found is not None:
                        out["offset"], out["timestamp"] = found
                        out["leader_epoch"] = part.leader_epoch
                except KafkaError as exc:
                    out["error_code"] = exc.code
                pouts.append(out)
            topics_out.append({"name": topic["name"], "partitions": pouts})
        return {"throttle_time_ms": 0, "topics": topics_out}

    # ---- offset for leader epoch ---------------------------------------------------------

    def _offset_for_leader_epoch(self, identity, header, body):
        topics_out = []
        for topic in body["topics"]:
            pouts = []
            for p in topic["partitions"]:
                out = {"error_code": 0, "partition": p["partition"], "leader_epoch": -1,
                       "end_offset": -1}
                try:
                    part = self._partition(topic["topic"], p["partition"])
                    current = p.get("current_leader_epoch", -1)
                    if 0 <= current < part.leader_epoch:
                        raise errors.FencedLeaderEpochError(
                            f"leader epoch {current} is older than {part.leader_epoch}")
                    if current > part.leader_epoch:
                        raise errors.UnknownLeaderEpochError(
                            f"leader epoch {current} is newer than {part.leader_epoch}")
                    out["leader_epoch"], out["end_offset"] = part.log.end_offset_for_epoch(
                        p["leader_epoch"])
                except KafkaError as exc:
                    out["error_code"] = exc.code
                pouts.append(out)
            topics_out.append({"topic": topic["topic"], "partitions": pouts})
        return {"throttle_time_ms": 0, "topics": topics_out}

    # ---- shared-memory rings ---------------------------------------------------------------

    def _shm_attach(self, body: dict) -> dict:
        """Extension request from a same-host producer: drain its ring."""
        from kafkalite.shm.ring import WorkerRing
        try:
            ring = WorkerRing.attach(body["ring"])
        except (OSError, ValueError) as exc:
            raise errors.InvalidRequestError(f"cannot attach ring {body.get('ring')!r}: {exc}")
        self.rings[ring.fileno()] = ring
        self.poller.register(ring.fileno(), zmq.POLLIN)
        self._drain_ring(ring)
        return {"worker": self.index, "pid": os.getpid()}

    def _drop_ring(self, fd: int, unlink: bool) -> None:
        ring = self.rings.pop(fd, None)
        if ring is not None:
            self.poller.unregister(fd)
            ring.close(unlink=unlink)

    def _drain_ring(self, ring) -> None:
        while True:
            entries = ring.poll(256)
            if not entries:
                return
            for seq, topic, partition, batch in entries:
                try:
                    first_offset, _ = self.append(self._partition(topic, partition), batch)
                    ring.ack(seq, 0, first_offset)
                except KafkaError as exc:
                    ring.ack(seq, exc.code, -1)
                except Exception:
                    log.exception("worker %d: ring append failed", self.index)
                    ring.ack(seq, errors.UnknownServerError.code, -1)
                ring.release_through(seq)

    # ---- housekeeping ----------------------------------------------------------------------

    def _housekeeping(self) -> None:
        now = time.monotonic()
        if os.getppid() != self._parent:
            log.error("worker %d: the supervisor is gone; shutting down", self.index)
            self._stop = True
            return
        for fd, ring in list(self.rings.items()):
            if not ring.producer_alive():
                self._drain_ring(ring)
                self._drop_ring(fd, unlink=True)
        for part in list(self.partitions.values()):
            plog = part.log
            try:
                plog.delete_old_segments()
                plog.maybe_flush()
                if plog.config.compact:
                    from kafkalite.storage.cleaner import LogCleaner
                    cleaner = LogCleaner(plog)
                    if cleaner.cleanable_ratio() >= plog.config.min_cleanable_dirty_ratio:
                        plog.compact()
                if now >= self._next_checkpoint:
                    plog.checkpoint()
            except KafkaError as exc:
                log.error("worker %d: housekeeping of %s failed: %s", self.index, plog.name, exc)
        if now >= self._next_checkpoint:
            self._next_checkpoint = now + CHECKPOINT_INTERVAL_S
        self._next_housekeeping = now + HOUSEKEEPING_INTERVAL_S

    # ---- main loop -------------------------------------------------------------------------

    def run(self) -> int:
        self._send_control({"type": "hello", "worker": self.index, "pid": os.getpid(),
                            "port": self.port, "kafka_port": self.kafka.port})
        while not self._stop:
            for ring in list(self.rings.values()):
                while not ring.arm():  # entries arrived since the last drain
                    self._drain_ring(ring)
            now = time.monotonic()
            deadline = self._next_housekeeping
            if self.purgatory:
                deadline = min(deadline, self.purgatory[0][0])
            timeout = max(0, int((deadline - now) * 1000) + 1)
            try:
                events = dict(self.poller.poll(timeout))
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EINTR:
                    continue
                raise
            if self.control in events:
                while True:
                    try:
                        msg = self.control.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._on_control(json.loads(msg))
            if self.router in events:
                for _ in range(1024):  # bounded, so rings and timers are not starved
                    try:
                        frames = self.router.recv_multipart(zmq.NOBLOCK, copy=False)
                    except zmq.Again:
                        break
                    if len(frames) >= 2:
                        self._on_request(frames)
            if self.relay in events:
                while True:
                    try:
                        self._on_relay_reply(self.relay.recv_multipart(zmq.NOBLOCK))
                    except zmq.Again:
                        break
            for fd in [fd for fd in events if isinstance(fd, int) and fd in self.rings]:
                self._drain_ring(self.rings[fd])
            self.kafka.on_events(events)
            if self.purgatory:
                self._expire_fetches()
            if time.monotonic() >= self._next_housekeeping:
                self._housekeeping()
        self.shutdown()
        return 0

    def shutdown(self) -> None:
        for _, _, fetch in self.purgatory:
            if not fetch.done:
                self._complete_fetch(fetch)
        for fd in list(self.rings):
            self._drop_ring(fd, unlink=True)
        for part in self.partitions.values():
            try:
                part.log.close()
            except KafkaError as exc:
                log.error("worker %d: closing %s: %s", self.index, part.log.name, exc)
        self.partitions.clear()
        try:
            self._send_control({"type": "bye", "worker": self.index})
        except zmq.ZMQError:
            pass
        self.kafka.close()
        self.relay.close()
        self.router.close()
        self.control.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="kafkalite partition worker (started by the supervisor)")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--control", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kafka-port", type=int, default=0)
    parser.add_argument("--supervisor", help="the supervisor's native endpoint (Kafka relay)")
    parser.add_argument("--config-json", required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("KAFKALITE_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    config = ServerConfig(**json.loads(args.config_json))
    worker = Worker(args.index, config, args.control, args.port, args.kafka_port, args.supervisor)

    def stop(signum, frame):
        worker._stop = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides; Ctrl-C reaches it
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
