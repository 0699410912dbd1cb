"""v2's consumer instances: ``/consumers/{group}/instances/{name}/...``.

An instance is one kafkalite Consumer, a member of ``group``, that a
client drives over HTTP: create (``POST /consumers/{group}``: name,
format binary|json|avro|protobuf|jsonschema, auto.offset.reset,
auto.commit.enable, fetch.min.bytes, consumer.request.timeout.ms, each
checked as Confluent checks it), subscribe, or take partitions itself
(``.../assignments``), fetch records (``GET .../records``, ``timeout``
and ``max_bytes``), move its positions (``POST .../positions`` to an
offset or a timestamp, ``.../positions/beginning``, ``.../positions/end``:
a partition it is not assigned is 40903, Kafka's IllegalStateException),
commit and read offsets, delete. Answers are ``application/vnd.kafka.v2+json``;
records are answered in the embedded format the instance was made with
(``application/vnd.kafka.json.v2+json``, ``...binary...``, ``...avro...``,
``...protobuf...``, ``...jsonschema...``: the last three decoded through
the registry as JSON, schemas.py), and an Accept that names another of
these formats is 40601, one that names none 406.

Offsets as Confluent's v2 has them: ``POST .../offsets`` with
``{"offsets": [{"topic", "partition", "offset"}]}`` commits each
partition at ``offset + 1`` (the offset named is the last record
consumed); an empty body commits every partition up to the last record
this instance answered. ``GET .../offsets`` answers the committed
offsets (the next record to read).

No record is lost to ``max_bytes``: records fetched past it wait in the
instance's backlog for the next GET. An instance that nothing used for
``instance_timeout_ms`` (Confluent's ``consumer.instance.timeout.ms``,
300,000 by default) is closed by the idle timer, leaving its group; a
later call on it is 40403.

Authorization (authorization.py): an instance belongs to the principal
that created it; another user's request for it is refused (40301). Its
consumer is the server's, so each request asks the user's ACLs what the
consumer's Kafka requests would: subscribe and records Read on the group
and on each topic named (at every fetch: an ACL removed takes effect at
the next one), commit Read on the group and each topic, committed
offsets Describe on both. A ``topic_pattern`` subscription answers only
the records of topics the user may read, as Kafka's Metadata would not
have matched the others.

Who may call: the proxy's request threads; one request at a time per
instance (its lock), any number of instances at once; the idle timer's
thread closes instances no request holds.
"""
from __future__ import annotations

import base64
import collections
import json
import threading
import time
import uuid

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.consumer_positions import Positions
from kafkalite.rest_proxy.errors import (AUTHORIZATION_FAILED, BAD_REQUEST,
                                         CONSUMER_ALREADY_EXISTS, CONSUMER_FORMAT_MISMATCH,
                                         CONSUMER_INSTANCE_NOT_FOUND, ILLEGAL_STATE,
                                         INVALID_CONSUMER_CONFIG,
                                         INVALID_CONSUMER_CONFIG_CONSTRAINT, KAFKA_ERROR,
                                         NOT_ACCEPTABLE, UNPROCESSABLE_ENTITY,
                                         ConstraintViolation, ProxyError, from_kafka)
from kafkalite.rest_proxy.http import (V2, V2_AVRO, V2_BINARY, V2_JSON, V2_JSONSCHEMA,
                                       V2_PROTOBUF, Answer)

DEFAULT_INSTANCE_TIMEOUT_MS = 300_000
DEFAULT_REQUEST_TIMEOUT_MS = 1_000      # Confluent's consumer.request.timeout.ms
DEFAULT_MAX_BYTES = 64 << 20            # Confluent's consumer.request.max.bytes
MAX_TIMEOUT_MS = 60_000
FORMATS = {"binary": V2_BINARY, "json": V2_JSON, "avro": V2_AVRO, "protobuf": V2_PROTOBUF,
           "jsonschema": V2_JSONSCHEMA}
REGISTRY_FORMATS = ("avro", "protobuf", "jsonschema")     # decoded through schemas.py
CONSUME_BATCH = 1000
CLOSE_WAIT_S = 1.0
# kafka-rest's KafkaRestConfig.PROXY_FETCH_MIN_BYTES_VALIDATOR: Range.between(-1, 10 MB)
FETCH_MIN_BYTES_RANGE = (-1, 10_000_000)
OFFSET_RESETS = ("latest", "earliest", "none")     # what Kafka's consumer takes


class ConsumerInstance:
    def __init__(self, group: str, name: str, fmt: str, consumer, principal=None):
        self.group, self.name, self.format = group, name, fmt
        self.principal = principal          # who created it (None: security off)
        self.consumer = consumer
        self.lock = threading.Lock()
        self.last_used = time.monotonic()
        self.topics: list[str] = []
        self.assigned: list[tuple[str, int]] = []           # by .../assignments
        self.request_timeout_ms = DEFAULT_REQUEST_TIMEOUT_MS
        self.backlog: collections.deque = collections.deque()
        self.consumed: dict[tuple[str, int], int] = {}     # last offset answered
        self.closed = False

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.consumer.close()
            except Exception:
                pass


class ConsumerInstances(Positions):
    """Every instance of the proxy, and their idle timer (its assignments
    and positions: consumer_positions.py)."""

    def __init__(self, client_config: dict, instance_timeout_ms: int | None = None,
                 schemas=None):
        self.client_config = client_config
        self.schemas = schemas          # schemas.SchemaFormats, for avro, protobuf, jsonschema
        self.timeout_s = (instance_timeout_ms or DEFAULT_INSTANCE_TIMEOUT_MS) / 1000
        self._instances: dict[tuple[str, str], ConsumerInstance] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._timer = threading.Thread(target=self._expire_idle, name="rest-proxy-idle",
                                       daemon=True)
        self._timer.start()

    def close(self) -> None:
        """Every instance closed, waiting CLOSE_WAIT_S at most: the server
        closes the proxy once its own loop (the group coordinator a
        consumer's LeaveGroup goes to) has stopped, and a consumer's close
        would wait its request timeout there; its membership ends with the
        server."""
        self._stop.set()
        with self._lock:
            instances, self._instances = list(self._instances.values()), {}
        closing = [threading.Thread(target=inst.close, name="rest-proxy-close", daemon=True)
                   for inst in instances]
        for t in closing:
            t.start()
        deadline = time.monotonic() + CLOSE_WAIT_S
        for t in closing:
            t.join(max(0.0, deadline - time.monotonic()))

    def _expire_idle(self) -> None:
        while not self._stop.wait(min(1.0, self.timeout_s / 4)):
            now = time.monotonic()
            with self._lock:
                idle = [k for k, i in self._instances.items()
                        if now - i.last_used > self.timeout_s]
            for key in idle:
                inst = self._instances.get(key)
                if inst is None or not inst.lock.acquire(blocking=False):
                    continue            # a request holds it: not idle
                try:
                    if time.monotonic() - inst.last_used > self.timeout_s:
                        with self._lock:
                            self._instances.pop(key, None)
                        inst.close()
                finally:
                    inst.lock.release()

    def _instance(self, group: str, name: str) -> ConsumerInstance:
        inst = self._instances.get((group, name))
        if inst is None:
            raise ProxyError(CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
        return inst

    def _using(self, req, group: str, name: str, work):
        """``work(instance)`` under the instance's lock, its idle clock reset;
        40301 for a user other than the one who created it."""
        inst = self._instance(group, name)
        if inst.principal != req.access.principal:
            raise ProxyError(AUTHORIZATION_FAILED, f"{req.access.principal} may not use "
                                                   f"consumer instance {name} of group "
                                                   f"{group}: {inst.principal} created it")
        with inst.lock:
            if inst.closed:
                raise ProxyError(CONSUMER_INSTANCE_NOT_FOUND, "Consumer instance not found.")
            try:
                return work(inst)
            finally:
                inst.last_used = time.monotonic()

    # ---- handlers -----------------------------------------------------------------------------

    def create(self, req, group) -> Answer:
        from kafkalite.client import Consumer
        body = req.json({}) or {}
        if not isinstance(body, dict):
            raise ProxyError(BAD_REQUEST, "the request body must be a JSON object")
        name = body.get("name") or body.get("id") or f"rest-consumer-{uuid.uuid4()}"
        config, timeout_ms = self._consumer_config(body)
        config = {**self.client_config, "group.id": group, "client.id": str(name), **config}
        fmt = str(body.get("format") or "binary").lower()
        with self._lock:
            if (group, name) in self._instances:
                raise ProxyError(CONSUMER_ALREADY_EXISTS, "Consumer with specified consumer ID "
                                                          "already exists in the specified "
                                                          "consumer group.")
            try:
                consumer = Consumer(config)
            except Exception as exc:
                raise ProxyError(INVALID_CONSUMER_CONFIG, str(exc)) from None
            inst = ConsumerInstance(group, name, fmt, consumer, req.access.principal)
            if timeout_ms is not None:
                inst.request_timeout_ms = timeout_ms
            self._instances[(group, name)] = inst
        return Answer(200, {"instance_id": name, "base_uri": f"{req.base_url}/consumers/"
                                                             f"{group}/instances/{name}"}, V2)

    @staticmethod
    def _consumer_config(body: dict) -> tuple[dict, int | None]:
        """The kafkalite consumer settings of a create request, and its
        ``consumer.request.timeout.ms``, checked as kafka-rest checks them
        (CreateConsumerInstanceRequest, then Kafka's ConsumerConfig): a
        format it has not 422, fetch.min.bytes out of its range 422 with
        error_code 40001, a value Kafka's consumer refuses 42204."""
        fmt = str(body.get("format") or "binary").lower()
        if fmt not in FORMATS:
            raise ConstraintViolation(UNPROCESSABLE_ENTITY, "Invalid format type.")
        config = {}
        reset = body.get("auto.offset.reset")
        if reset is not None:
            if reset not in OFFSET_RESETS:
                raise ProxyError(INVALID_CONSUMER_CONFIG, _invalid_config(
                    reset, "auto.offset.reset", "String must be one of: latest, earliest, none"))
            config["auto.offset.reset"] = reset
        commit = body.get("auto.commit.enable")
        if commit is not None:
            if str(commit).lower() not in ("true", "false"):
                raise ProxyError(INVALID_CONSUMER_CONFIG, _invalid_config(
                    commit, "enable.auto.commit", "Expected value to be either true or false"))
            config["enable.auto.commit"] = str(commit).lower() == "true"
        min_bytes = _integer(body, "fetch.min.bytes", "responseMinBytes")
        if min_bytes is not None:
            low, high = FETCH_MIN_BYTES_RANGE
            if not low <= min_bytes <= high:
                raise ConstraintViolation(
                    INVALID_CONSUMER_CONFIG_CONSTRAINT,
                    "Invalid consumer configuration. It does not abide by the constraints: "
                    f"Invalid value {min_bytes} for configuration fetch.min.bytes: Value must "
                    f"be {'at least' if min_bytes < low else 'no more than'} "
                    f"{low if min_bytes < low else high}")
            if min_bytes >= 0:
                config["fetch.min.bytes"] = min_bytes
        timeout_ms = _integer(body, "consumer.request.timeout.ms", "requestWaitMs")
        if timeout_ms is not None and timeout_ms < 0:
            raise ConstraintViolation(INVALID_CONSUMER_CONFIG_CONSTRAINT,
                                      f"consumer.request.timeout.ms {timeout_ms} is negative")
        return config, timeout_ms

    def delete(self, req, group, name) -> Answer:
        def work(inst):
            with self._lock:
                self._instances.pop((group, name), None)
            inst.close()
        self._using(req, group, name, work)
        return Answer(204, None, V2)

    def subscribe(self, req, group, name) -> Answer:
        body = req.json({}) or {}
        topics = body.get("topics") if isinstance(body, dict) else None
        pattern = body.get("topic_pattern") if isinstance(body, dict) else None
        if pattern is not None:
            topics = [f"^{pattern}"]
        if not isinstance(topics, list) or not topics or \
                not all(isinstance(t, str) and t for t in topics):
            raise ProxyError(BAD_REQUEST, "topics is a list of topic names")

        def work(inst):
            if inst.assigned:
                raise ProxyError(ILLEGAL_STATE, "Illegal state: Subscription to topics, "
                                                "partitions and pattern are mutually exclusive")
            req.access.require(Op.READ, Res.GROUP, group)          # JoinGroup
            if pattern is None:
                req.access.require(Op.READ, Res.TOPIC, *topics)    # Fetch
            try:
                inst.consumer.subscribe(topics)
            except Exception as exc:
                raise from_kafka(exc) from None
            inst.topics = list(topics)
        self._using(req, group, name, work)
        return Answer(204, None, V2)

    def subscription(self, req, group, name) -> Answer:
        return Answer(200, {"topics": self._using(req, group, name,
                                                  lambda i: list(i.topics))}, V2)

    def unsubscribe(self, req, group, name) -> Answer:
        def work(inst):
            inst.consumer.unsubscribe()
            inst.consumer.unassign()            # Kafka's unsubscribe ends an assign() too
            inst.topics, inst.assigned = [], []
            inst.backlog.clear()
        self._using(req, group, name, work)
        return Answer(204, None, V2)

    def records(self, req, group, name) -> Answer:
        try:
            timeout_ms = int(req.query["timeout"]) if "timeout" in req.query else None
            max_bytes = int(req.query.get("max_bytes", DEFAULT_MAX_BYTES))
        except ValueError:
            raise ProxyError(BAD_REQUEST, "timeout and max_bytes are integers") from None

        def work(inst):
            wait_ms = min(max(inst.request_timeout_ms if timeout_ms is None else timeout_ms, 0),
                          MAX_TIMEOUT_MS)
            req.access.require(Op.READ, Res.GROUP, group)          # Heartbeat, OffsetCommit
            named = [t for t in inst.topics if not t.startswith("^")]
            named += [t for t in dict.fromkeys(t for t, _ in inst.assigned) if t not in named]
            req.access.require(Op.READ, Res.TOPIC, *named)         # Fetch
            readable = req.access.sees(Op.READ, Res.TOPIC)
            wanted = FORMATS[inst.format]
            if req.accept:
                offered = [a.split(";")[0].strip().lower() for a in req.accept.split(",")]
                if wanted not in offered and not {"*/*", "application/*"} & set(offered):
                    if any(a in FORMATS.values() for a in offered):
                        raise ProxyError(CONSUMER_FORMAT_MISMATCH,
                                         "The requested embedded data format does not match "
                                         "the deserializer for this consumer instance")
                    raise ProxyError(NOT_ACCEPTABLE, "HTTP 406 Not Acceptable")
            deadline = time.monotonic() + wait_ms / 1000
            while not inst.backlog:
                left = deadline - time.monotonic()
                try:
                    got = inst.consumer.consume(CONSUME_BATCH, max(left, 0.0))
                except Exception as exc:
                    raise from_kafka(exc) from None
                for m in got:
                    # a pattern's topic the user may not read: as if not matched
                    if m.error() is None and readable(m.topic()):
                        inst.backlog.append(m)
                if left <= 0:
                    break
            out, size = [], 0
            # the writer's schemas fetched as the caller (schemas.py)
            decode = (self.schemas.reader(req, inst.format) if inst.format in REGISTRY_FORMATS
                      and inst.backlog else None)
            while inst.backlog:
                m = inst.backlog[0]
                n = len(m.value() or b"") + len(m.key() or b"")
                if out and size + n > max_bytes:
                    break
                out.append(self._record(inst.format, m, decode))     # may refuse: m stays
                inst.backlog.popleft()
                size += n
                inst.consumed[(m.topic(), m.partition())] = m.offset()
            return Answer(200, out, wanted)
        return self._using(req, group, name, work)

    @staticmethod
    def _record(fmt: str, m, decode=None) -> dict:
        key, value = m.key(), m.value()
        if decode is not None:
            def enc(b, is_key=False):
                if b is None:
                    return None
                try:
                    return decode(b, m.topic(), is_key)
                except ProxyError:
                    raise
                except Exception as exc:
                    raise ProxyError(KAFKA_ERROR, f"the record at {m.topic()}-{m.partition()}@"
                                                  f"{m.offset()} is not {fmt} in Confluent's "
                                                  f"wire format ({exc}); read it with a "
                                                  f"binary instance") from None
            return {"topic": m.topic(), "key": enc(key, True), "value": enc(value),
                    "partition": m.partition(), "offset": m.offset()}
        if fmt == "binary":
            enc = (lambda b: None if b is None else base64.b64encode(b).decode())
        else:
            def enc(b):
                if b is None:
                    return None
                try:
                    return json.loads(b)
                except ValueError:
                    raise ProxyError(KAFKA_ERROR, f"the record at {m.topic()}-{m.partition()}@"
                                            f"{m.offset()} is not JSON; read it with a "
                                            f"binary instance") from None
        return {"topic": m.topic(), "key": enc(key), "value": enc(value),
                "partition": m.partition(), "offset": m.offset()}

    def commit(self, req, group, name) -> Answer:
        from kafkalite.client import TopicPartition
        body = req.json({}) or {}
        offsets = body.get("offsets") if isinstance(body, dict) else None

        def work(inst):
            if offsets:
                try:
                    tps = [TopicPartition(o["topic"], int(o["partition"]), int(o["offset"]) + 1)
                           for o in offsets]
                except (KeyError, TypeError, ValueError):
                    raise ProxyError(BAD_REQUEST, "offsets is a list of {topic, partition, "
                                                  "offset}") from None
            else:
                tps = [TopicPartition(t, p, o + 1) for (t, p), o in inst.consumed.items()]
            req.access.require(Op.READ, Res.GROUP, group)          # OffsetCommit
            req.access.require(Op.READ, Res.TOPIC, *dict.fromkeys(tp.topic for tp in tps))
            if tps:
                try:
                    inst.consumer.commit(offsets=tps, asynchronous=False)
                except Exception as exc:
                    raise from_kafka(exc) from None
        self._using(req, group, name, work)
        return Answer(200, None, V2)

    def committed(self, req, group, name) -> Answer:
        from kafkalite.client import TopicPartition
        body = req.json({}) or {}
        parts = body.get("partitions") if isinstance(body, dict) else None
        if not isinstance(parts, list):
            raise ProxyError(BAD_REQUEST, "partitions is a list of {topic, partition}")

        def work(inst):
            try:
                tps = [TopicPartition(p["topic"], int(p["partition"])) for p in parts]
            except (KeyError, TypeError, ValueError):
                raise ProxyError(BAD_REQUEST, "partitions is a list of {topic, partition}") \
                    from None
            req.access.require(Op.DESCRIBE, Res.GROUP, group)      # OffsetFetch
            req.access.require(Op.DESCRIBE, Res.TOPIC, *dict.fromkeys(tp.topic for tp in tps))
            try:
                got = inst.consumer.committed(tps, timeout=10.0) if tps else []
            except Exception as exc:
                raise from_kafka(exc) from None
            return [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset,
                     "metadata": tp.metadata or ""} for tp in got]
        return Answer(200, {"offsets": self._using(req, group, name, work)}, V2)


def _integer(body: dict, name: str, alias: str) -> int | None:
    """An integer setting of a create request (its JSON alias too); 400
    for another type, as Jackson refuses one."""
    value = body.get(name, body.get(alias))
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ProxyError(BAD_REQUEST, f"{name} is an integer, not {value!r}")
    try:
        return int(value)
    except ValueError:
        raise ProxyError(BAD_REQUEST, f"{name} is an integer, not {value!r}") from None


def _invalid_config(value, name: str, why: str) -> str:
    """kafka-rest's 42204 message around Kafka's ConfigException's."""
    return f"Invalid consumer configuration: Invalid value {value} for configuration {name}: {why}"
