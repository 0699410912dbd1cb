"""v3's ``POST /v3/clusters/{c}/topics/{t}/records``: records in, delivery reports out.

A record is ``{"partition_id", "headers": [{"name", "value": base64}],
"key": {"type", "data"}, "value": {"type", "data"}, "timestamp"}``, every
field optional; a key's or value's type is BINARY (``data`` base64),
JSON (``data`` any JSON, written as its compact text) or STRING
(``data`` a string, written as UTF-8); without a type, JSON. A key or
value with a schema (Confluent's ProduceRequestData: ``schema_id``; or
``type`` AVRO, PROTOBUF or JSONSCHEMA with ``schema`` text, registered
under the subject; or ``subject`` / ``subject_name_strategy`` with
``schema_version``, the latest without) is written in Confluent's wire
format by schemas.py, and answered with its ``subject`` and
``schema_id``. Its answer
is ``{"error_code": 200, "cluster_id", "topic_name", "partition_id",
"offset", "timestamp", "key": {"type", "size"}, "value": ...}``, or
``{"error_code", "message"}``.

Streaming mode (a ``Transfer-Encoding: chunked`` body, stream.py): the
body is concatenated JSON, each record produced as it arrives and
answered in the order it came, one JSON object a line (AnswerLines); the
HTTP status is 200 and each answer carries its own error_code. A body of
one record (Content-Length) is answered with that record's status.

Delivery: one idempotent producer with acks=all for the whole proxy (a
report is a committed offset); reports run on whichever request thread
polls, each setting its own record's slot.

Who may call: the proxy's request threads, any number at once.
"""
from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from datetime import datetime, timezone

from kafkalite.rest_proxy.errors import (BAD_REQUEST, PARTITION_NOT_FOUND, ProxyError,
                                         from_kafka, topic_not_found)

# what makes a v3 key or value one with a schema (Confluent's ProduceRequestData)
SCHEMA_FIELDS = frozenset(("schema_id", "schema", "subject", "schema_version",
                           "subject_name_strategy"))
SCHEMA_TYPES = ("AVRO", "PROTOBUF", "JSONSCHEMA")
TOPIC_CACHE_S = 5.0
DELIVERY_TIMEOUT_MS = 30_000
POLL_S = 0.02


# the key's and value's JSON text, made once per call's encoder (json.dumps
# with arguments builds an encoder per call: a third of the stream's time)
_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class DeliverySlot:
    """One record's answer: an error body (a dict), or, once its delivery
    report came, (partition, offset, timestamp ms); None until then."""

    __slots__ = ("answer", "key", "value", "timestamp")

    def __init__(self, answer=None):
        self.answer = answer

    def __call__(self, err, msg) -> None:
        if err is not None:
            self.answer = from_kafka(err).body()
            return
        ts = self.timestamp
        if not ts:
            got = msg.timestamp()
            ts = got[1] if isinstance(got, tuple) and got[1] > 0 else int(time.time() * 1000)
        self.answer = (msg.partition(), msg.offset(), ts)


def iso_timestamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _info(kind_size) -> dict | None:
    if kind_size is None or isinstance(kind_size, dict):    # a dict: a schema's (schemas.py)
        return kind_size
    return {"type": kind_size[0], "size": kind_size[1]}


class AnswerLines:
    """The answer lines of one stream: the cluster and topic's part made once,
    timestamps of the same millisecond formatted once."""

    def __init__(self, cluster_id: str, topic: str):
        self.prefix = (f'{{"error_code": 200, "cluster_id": {json.dumps(cluster_id)}, '
                       f'"topic_name": {json.dumps(topic)}, "partition_id": ')
        self._ms, self._iso = -1, ""

    def line(self, slot: "DeliverySlot") -> str:
        answer = slot.answer
        if isinstance(answer, dict):
            return json.dumps(answer)
        partition, offset, ms = answer
        if ms != self._ms:
            self._ms, self._iso = ms, iso_timestamp(ms)
        k, v = slot.key, slot.value
        return (f'{self.prefix}{partition}, "offset": {offset}, "timestamp": "{self._iso}", '
                f'"key": {"null" if k is None else _info_text(k)}, '
                f'"value": {"null" if v is None else _info_text(v)}}}')


def _info_text(kind_size) -> str:
    if isinstance(kind_size, dict):
        return json.dumps(kind_size)
    return f'{{"type": "{kind_size[0]}", "size": {kind_size[1]}}}'


def _data(field: str, spec):
    """(bytes or None, the answer's (type, size) or None) of a key or value."""
    if spec is None:
        return None, None
    if not isinstance(spec, dict):
        raise ProxyError(BAD_REQUEST, f"{field} must be an object with type and data")
    kind = str(spec.get("type") or "JSON").upper()
    data = spec.get("data")
    if data is None and kind != "JSON":
        return None, None
    if kind == "BINARY":
        if not isinstance(data, str):
            raise ProxyError(BAD_REQUEST, f"{field}.data of type BINARY must be base64 text")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raise ProxyError(BAD_REQUEST, f"{field}.data is not base64") from None
    elif kind == "STRING":
        if not isinstance(data, str):
            raise ProxyError(BAD_REQUEST, f"{field}.data of type STRING must be a string")
        raw = data.encode()
    elif kind == "JSON":
        if "data" not in spec:
            return None, None
        raw = _COMPACT(data).encode()
    else:
        raise ProxyError(BAD_REQUEST, f"{field}.type {kind} is not one of BINARY, JSON, "
                                      f"STRING, AVRO, PROTOBUF, JSONSCHEMA")
    return raw, (kind, len(raw))


def _timestamp_ms(value) -> int:
    if value in (None, ""):
        return 0
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return int(value)
    try:
        dt = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise ProxyError(BAD_REQUEST, f"timestamp {value!r} is not an ISO 8601 date-time") \
            from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


class RecordProducer:
    """The proxy's one producer and the topics it has seen."""

    def __init__(self, client_config: dict, admin, schemas=None):
        self.client_config = client_config
        self.admin = admin
        self.schemas = schemas          # schemas.SchemaFormats: keys and values with a schema
        self._producer = None
        self._lock = threading.Lock()
        self._topics: dict[str, tuple[int, float]] = {}     # topic -> (partitions, until)

    @property
    def producer(self):
        with self._lock:
            if self._producer is None:
                from kafkalite.client import Producer
                # a record whose topic went away (deleted by another client
                # within TOPIC_CACHE_S) is answered an error within
                # DELIVERY_TIMEOUT_MS, under an HTTP client's usual timeout
                self._producer = Producer({**self.client_config, "acks": "all",
                                           "enable.idempotence": True, "linger.ms": 2,
                                           "delivery.timeout.ms": DELIVERY_TIMEOUT_MS})
            return self._producer

    def close(self) -> None:
        # bounded: the server closes the proxy after its workers stopped
        if self._producer is not None:
            self._producer.close(1.0)

    def partitions(self, topic: str) -> int:
        """The topic's partition count; 40401 when it does not exist (no
        auto-creation: the path names a topic resource)."""
        now = time.monotonic()
        hit = self._topics.get(topic)
        if hit is not None and hit[1] > now:
            return hit[0]
        try:
            meta = self.admin.list_topics(topic, timeout=10.0)
        except Exception as exc:
            raise from_kafka(exc) from None
        t = meta.topics.get(topic)
        if t is None or t.error is not None or not t.partitions:
            raise topic_not_found(topic)
        self._topics[topic] = (len(t.partitions), now + TOPIC_CACHE_S)
        return len(t.partitions)

    def forget(self, topic: str) -> None:
        """A topic deleted through the proxy: produced to again, it is 40401
        at once, not after TOPIC_CACHE_S (nor auto-created by the producer)."""
        self._topics.pop(topic, None)

    def send(self, topic: str, count: int, record, req=None) -> DeliverySlot:
        """Produce one parsed record; its slot (already answered on an error)."""
        try:
            if not isinstance(record, dict):
                raise ProxyError(BAD_REQUEST, "a record must be a JSON object")
            partition = record.get("partition_id")
            if partition is None:
                partition = -1
            elif not isinstance(partition, int) or isinstance(partition, bool) \
                    or not 0 <= partition < count:
                raise ProxyError(PARTITION_NOT_FOUND, f"This server does not host this "
                                                      f"topic-partition: {topic}-{partition}")
            key, key_info = self._data(req, topic, "key", record.get("key"))
            value, value_info = self._data(req, topic, "value", record.get("value"))
            headers = []
            for h in record.get("headers") or ():
                if not isinstance(h, dict) or not isinstance(h.get("name"), str):
                    raise ProxyError(BAD_REQUEST, "a header is {\"name\", \"value\": base64}")
                v = h.get("value")
                try:
                    headers.append((h["name"], None if v is None else
                                    base64.b64decode(v, validate=True)))
                except (binascii.Error, ValueError, TypeError):
                    raise ProxyError(BAD_REQUEST, f"header {h['name']}'s value is not "
                                                  f"base64") from None
            ts = _timestamp_ms(record.get("timestamp"))
        except ProxyError as exc:
            return DeliverySlot(exc.body())
        slot = DeliverySlot()
        slot.key, slot.value, slot.timestamp = key_info, value_info, ts
        producer = self.producer
        while True:
            try:
                producer.produce(topic, value, key, partition, on_delivery=slot, timestamp=ts,
                                 headers=headers or None)
                return slot
            except BufferError:
                producer.poll(POLL_S)           # the queue is full: reports free it
            except Exception as exc:
                return DeliverySlot(from_kafka(exc).body())

    def _data(self, req, topic: str, field: str, spec):
        """(bytes or None, the answer's key or value info) of a key or value:
        one naming a schema goes through the registry (schemas.py)."""
        if self.schemas is not None and isinstance(spec, dict) and \
                (SCHEMA_FIELDS & spec.keys() or
                 str(spec.get("type") or "").upper() in SCHEMA_TYPES):
            return self.schemas.encode_v3(req, topic, field == "key", spec)
        return _data(field, spec)

    def produce_one(self, cluster_id: str, topic: str, record, req=None) -> dict:
        """A body of one record: its answer once delivered. ``req``: the
        request, whose caller the registry is asked as."""
        count = self.partitions(topic)
        slot = self.send(topic, count, record, req)
        producer = self.producer
        while slot.answer is None:
            producer.poll(POLL_S)
        if isinstance(slot.answer, dict):
            return slot.answer
        partition, offset, ms = slot.answer
        return {"error_code": 200, "cluster_id": cluster_id, "topic_name": topic,
                "partition_id": partition, "offset": offset, "timestamp": iso_timestamp(ms),
                "key": _info(slot.key), "value": _info(slot.value)}
