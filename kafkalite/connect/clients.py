"""The clients a worker makes for its own cluster: kafkalite's native ones,
or confluent-kafka's over Kafka's protocol.

Kafka Connect always talks Kafka's protocol; a kafkalite worker talks to
its cluster through kafkalite's native clients (ZeroMQ) by default, or, with
the worker setting ``kafkalite.client.protocol=kafka``, through
confluent-kafka's Producer, Consumer and AdminClient, so the worker runs
against any cluster that speaks Kafka's protocol (Apache Kafka, Redpanda,
kafkalite's Kafka listener). Every client the worker makes -- internal
topics, source and sink tasks, the dead-letter queue, exactly-once and
leader producers, the admin calls of the offsets endpoints -- comes from
``Producer``/``Consumer``/``AdminClient`` here, which read the choice from
the client config they are given (``PROTOCOL``, the worker puts it there)
and hand the rest to the chosen client.

This module is the one seam between the worker and confluent-kafka: the
worker code keeps the native clients' shapes, and the Kafka* classes below
give confluent-kafka's clients those shapes where they differ:

- ``Producer.produce_batch`` (native only) is produce() per record;
  ``close(timeout)`` is flush (confluent-kafka's producer has no close);
  a delivery error or a raised error is a kafkalite.errors exception of
  the broker's code (``fatal`` kept, as for the transactional producer's
  fencing), so the worker's ``except`` clauses hold for both;
- the consumer takes kafkalite's TopicPartition (converted at its calls);
  ``get_watermark_offsets`` is bounded by default; a seek or pause asked
  inside ``on_assign`` (the sink task's rewinds) is applied as the
  assignment's start offsets, and the pause after it (librdkafka takes
  neither before the partitions are assigned);
- the admin client's consumer-group calls take and return the native
  shapes; ``close()`` does nothing.

Client settings: in ``kafka`` mode the worker passes ``bootstrap.servers``,
``client.id``, ``security.protocol``, ``sasl.*`` and ``ssl.*`` to every client,
then ``producer.``/``consumer.``/``admin.`` prefixed settings to that kind
(Kafka Connect's). The Connect group's membership has its own Kafka-protocol
client (kafka_group.py): confluent-kafka cannot join a group of protocol
type ``connect``.

Who calls: worker.py, offsets.py, distributed/, herder.py. Thread safety:
as the wrapped clients (one consumer per thread).
"""
from __future__ import annotations

import time

from kafkalite import errors

PROTOCOL = "kafkalite.client.protocol"
NATIVE, KAFKA = "native", "kafka"
# settings every client of a kafka-protocol worker gets (Kafka Connect passes them
# unprefixed to its clients)
_SHARED = ("bootstrap.servers", "client.id")
_SHARED_PREFIXES = ("security.", "sasl.", "ssl.")
# keys only kafkalite's native clients know
_NATIVE_ONLY = ("kafkalite.transport",)


def protocol_of(config: dict) -> str:
    """The worker's client protocol (``native`` unless set); a bad value is
    a ValueError naming the setting."""
    p = str(config.get(PROTOCOL, NATIVE)).strip().lower()
    if p not in (NATIVE, KAFKA):
        raise ValueError(f"{PROTOCOL}={config.get(PROTOCOL)!r}: {NATIVE} or {KAFKA}")
    return p


def worker_client_config(config: dict) -> dict:
    """The settings of a worker config every client it makes gets (with
    ``PROTOCOL``, which the factories below strip)."""
    protocol = protocol_of(config)
    if protocol == NATIVE:
        keys = ("bootstrap.servers", "client.id", "kafkalite.transport")
        return {k: v for k, v in config.items() if k in keys}
    out = {k: v for k, v in config.items()
           if k in _SHARED or k.startswith(_SHARED_PREFIXES + ("admin.",))}
    out[PROTOCOL] = KAFKA
    return out


def _split(config: dict, admin: bool = False) -> tuple[str, dict]:
    """(protocol, the client's config): ``admin.`` settings go unprefixed to
    an admin client, and to no other."""
    protocol = protocol_of(config)
    cfg = {k: v for k, v in config.items() if k != PROTOCOL and not k.startswith("admin.")}
    if protocol == KAFKA:
        for k in _NATIVE_ONLY:
            cfg.pop(k, None)
        if admin:
            cfg.update({k[len("admin."):]: v for k, v in config.items()
                        if k.startswith("admin.")})
    return protocol, cfg


def Producer(config: dict):           # noqa: N802 -- a class to its callers
    protocol, cfg = _split(config)
    if protocol == NATIVE:
        from kafkalite.client import Producer as NativeProducer
        return NativeProducer(cfg)
    return KafkaProducer(cfg)


def Consumer(config: dict):           # noqa: N802
    protocol, cfg = _split(config)
    if protocol == NATIVE:
        from kafkalite.client import Consumer as NativeConsumer
        return NativeConsumer(cfg)
    return KafkaConsumer(cfg)


def AdminClient(config: dict):        # noqa: N802
    protocol, cfg = _split(config, admin=True)
    if protocol == NATIVE:
        from kafkalite.client import AdminClient as NativeAdmin
        return NativeAdmin(cfg)
    return KafkaAdmin({k: v for k, v in cfg.items()
                       if not k.startswith(("linger.", "transactional."))})


# ---- confluent-kafka's errors as kafkalite's -------------------------------------------------

def _error(err, what: str = "") -> errors.KafkaError:
    """A kafkalite.errors exception for a confluent_kafka.KafkaError: the
    broker's code picks the class (librdkafka's own, negative, codes are a
    plain KafkaError); ``fatal`` and ``txn_requires_abort`` carried over."""
    code = err.code()
    cls = errors.error_for_code(code) if code >= 0 else errors.KafkaError
    e = cls(f"{what}: {err.str()}" if what else err.str())
    if code < 0:
        e.code, e.name = code, err.name()
    e.fatal = bool(err.fatal())
    e.txn_requires_abort = bool(err.txn_requires_abort())
    e.retriable = bool(err.retriable())
    return e


def _raise(exc, what: str = ""):
    """Re-raise a confluent_kafka.KafkaException as kafkalite's exception."""
    err = exc.args[0] if exc.args else None
    if err is not None and hasattr(err, "code"):
        raise _error(err, what) from None
    raise errors.KafkaError(f"{what}: {exc}") from None


def _call(what: str, fn, *args, **kw):
    from confluent_kafka import KafkaException
    try:
        return fn(*args, **kw)
    except KafkaException as e:
        _raise(e, what)


def _tp(tp):
    """confluent-kafka's TopicPartition of any topic/partition/offset object."""
    from confluent_kafka import TopicPartition
    if isinstance(tp, TopicPartition):
        return tp
    return TopicPartition(tp.topic, tp.partition, tp.offset)


def _tps(tps) -> list:
    return [_tp(tp) for tp in tps]


class _Future:
    """A confluent-kafka future whose result() raises kafkalite's errors."""

    def __init__(self, fut, what: str, convert=None):
        self._fut, self._what, self._convert = fut, what, convert

    def result(self, timeout=None):
        from confluent_kafka import KafkaException
        try:
            value = self._fut.result(timeout)
        except KafkaException as e:
            _raise(e, self._what)
        return self._convert(value) if self._convert else value


# ---- the clients ----------------------------------------------------------------------------

class KafkaProducer:
    """confluent-kafka's Producer with the native producer's shapes."""

    def __init__(self, config: dict):
        import confluent_kafka
        self._p = confluent_kafka.Producer(config)

    @staticmethod
    def _delivery(on_delivery):
        if on_delivery is None:
            return None

        def report(err, msg):
            on_delivery(None if err is None else _error(err, f"delivery to {msg.topic()}"), msg)
        return report

    def produce(self, topic, value=None, key=None, partition=-1, on_delivery=None,
                timestamp=0, headers=None):
        self._produce(topic, value, key, partition, self._delivery(on_delivery),
                      timestamp, headers)

    def _produce(self, topic, value, key, partition, report, timestamp, headers):
        kw = {"partition": partition}
        if report is not None:
            kw["on_delivery"] = report
        if timestamp:
            kw["timestamp"] = timestamp
        if headers:
            kw["headers"] = headers
        while True:
            try:
                _call(f"produce to {topic}", self._p.produce, topic, value, key, **kw)
                return
            except BufferError:
                # the local queue is full: serve delivery reports until there is room
                self._p.poll(0.1)

    def produce_batch(self, topic, values, keys=None, partition=-1, timestamp=None,
                      headers=None, on_delivery=None):
        report = self._delivery(on_delivery)
        if hasattr(timestamp, "tolist"):
            timestamp = timestamp.tolist()      # an int64 array: one per record
        for i, value in enumerate(values):
            ts = timestamp[i] if isinstance(timestamp, (list, tuple)) else timestamp
            self._produce(topic, value, None if keys is None else keys[i], partition, report,
                          ts if ts is not None and ts >= 0 else None,     # negative: now
                          None if headers is None else headers[i])

    def poll(self, timeout=0):
        return self._p.poll(timeout)

    def flush(self, timeout=None):
        return self._p.flush(-1 if timeout is None else timeout)

    def close(self, timeout=None):
        # confluent-kafka's producer has no close: what is queued is flushed, the
        # rest goes with the object
        try:
            self._p.flush(30 if timeout is None else timeout)
        finally:
            self._p = _Closed()

    def init_transactions(self, timeout=None):
        _call("init_transactions", self._p.init_transactions,
              *(() if timeout is None else (timeout,)))

    def begin_transaction(self):
        _call("begin_transaction", self._p.begin_transaction)

    def commit_transaction(self, timeout=None):
        _call("commit_transaction", self._p.commit_transaction,
              *(() if timeout is None else (timeout,)))

    def abort_transaction(self, timeout=None):
        _call("abort_transaction", self._p.abort_transaction,
              *(() if timeout is None else (timeout,)))

    def send_offsets_to_transaction(self, offsets, group_metadata, timeout=None):
        _call("send_offsets_to_transaction", self._p.send_offsets_to_transaction,
              _tps(offsets), group_metadata, *(() if timeout is None else (timeout,)))


class _Closed:
    def __getattr__(self, name):
        raise RuntimeError("the producer is closed")


_CONSUMER_ALIASES = {"fetch.max.wait.ms": "fetch.wait.max.ms"}


class KafkaConsumer:
    """confluent-kafka's Consumer with the native consumer's shapes."""

    def __init__(self, config: dict):
        import confluent_kafka
        # Kafka's (Java) names librdkafka spells otherwise
        cfg = {_CONSUMER_ALIASES.get(k, k): v for k, v in config.items()}
        # a consumer that only assigns (the internal topics' readers) still needs a
        # group.id in confluent-kafka; it never joins or commits that group
        cfg.setdefault("group.id", f"connect-reader-{id(self)}-{time.monotonic_ns()}")
        self._c = confluent_kafka.Consumer(cfg)
        # with a cooperative assignor librdkafka takes each rebalance's partitions
        # incrementally (and gives back the revoked ones itself)
        self._cooperative = "cooperative" in str(cfg.get("partition.assignment.strategy", ""))
        self._closed = False
        self._assigning = None        # {(topic, partition): TopicPartition} inside on_assign
        self._pause_after = []

    def subscribe(self, topics, on_assign=None, on_revoke=None, on_lost=None):
        kw = {}

        def assigned(c, parts):
            self._assigning = {(p.topic, p.partition): p for p in parts}
            self._pause_after = []
            try:
                if on_assign is not None:
                    on_assign(self, parts)
                (c.incremental_assign if self._cooperative else c.assign)(
                    list(self._assigning.values()))
                if self._pause_after:
                    c.pause(self._pause_after)
            finally:
                self._assigning, self._pause_after = None, []
        kw["on_assign"] = assigned
        if on_revoke is not None:
            kw["on_revoke"] = lambda c, parts: on_revoke(self, parts)
        if on_lost is not None:
            kw["on_lost"] = lambda c, parts: on_lost(self, parts)
        _call("subscribe", self._c.subscribe, list(topics), **kw)

    def assign(self, tps):
        _call("assign", self._c.assign, _tps(tps))

    def consume(self, num_messages=1, timeout=-1):
        return _call("consume", self._c.consume, num_messages, timeout)

    def seek(self, tp):
        if self._assigning is not None and (tp.topic, tp.partition) in self._assigning:
            self._assigning[(tp.topic, tp.partition)].offset = tp.offset
            return
        _call("seek", self._c.seek, _tp(tp))

    def pause(self, tps):
        tps = _tps(tps)
        if self._assigning is not None:
            self._pause_after.extend(tps)
            return
        _call("pause", self._c.pause, tps)

    def resume(self, tps):
        _call("resume", self._c.resume, _tps(tps))

    def position(self, tps):
        return _call("position", self._c.position, _tps(tps))

    def committed(self, tps, timeout=30):
        return _call("committed", self._c.committed, _tps(tps), timeout)

    def get_watermark_offsets(self, tp, timeout=30, cached=False):
        return _call("get_watermark_offsets", self._c.get_watermark_offsets, _tp(tp),
                     timeout, cached)

    def commit(self, message=None, offsets=None, asynchronous=True):
        kw = {"asynchronous": asynchronous}
        if offsets is not None:
            kw["offsets"] = _tps(offsets)
        elif message is not None:
            kw["message"] = message
        return _call("commit", self._c.commit, **kw)

    def assignment(self):
        return self._c.assignment()

    def close(self):
        if not self._closed:        # confluent-kafka's close raises a second time
            self._closed = True
            self._c.close()


class KafkaAdmin:
    """confluent-kafka's AdminClient with the native admin client's shapes
    for what the worker asks."""

    def __init__(self, config: dict):
        from confluent_kafka.admin import AdminClient as Admin
        self._a = Admin(config)

    def create_topics(self, new_topics, **kw):
        from confluent_kafka.admin import NewTopic
        topics = [NewTopic(t.topic, t.num_partitions,
                           getattr(t, "replication_factor", -1) or -1,
                           config=dict(getattr(t, "config", None) or {}))
                  for t in new_topics]
        futs = self._a.create_topics(topics, **kw)
        return {name: _Future(f, f"create topic {name}") for name, f in futs.items()}

    def list_topics(self, topic=None, timeout=30):
        return _call("list_topics", self._a.list_topics, topic, timeout)

    def list_consumer_group_offsets(self, group, partitions=None):
        from confluent_kafka import ConsumerGroupTopicPartitions
        req = ConsumerGroupTopicPartitions(group, _tps(partitions) if partitions else None)
        fut = self._a.list_consumer_group_offsets([req])[group]
        return _Future(fut, f"offsets of group {group}", lambda r: list(r.topic_partitions))

    def alter_consumer_group_offsets(self, group, tps):
        from confluent_kafka import ConsumerGroupTopicPartitions
        fut = self._a.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, _tps(tps))])[group]
        return _Future(fut, f"alter offsets of group {group}", lambda r: list(r.topic_partitions))

    def delete_consumer_groups(self, groups):
        futs = self._a.delete_consumer_groups(list(groups))
        return {g: _Future(f, f"delete group {g}") for g, f in futs.items()}

    def close(self):
        pass                # confluent-kafka's AdminClient has no close
