"""The worker: runs connector tasks in threads, with a Producer (source
tasks) and a Consumer (sink tasks) from clients.py: kafkalite's native
clients, or confluent-kafka's with ``kafkalite.client.protocol=kafka``.

A source task's thread: ``poll()``, transforms, key/value converters,
then the producer's bulk path (``produce_batch``, one per topic and poll);
every ``offset.flush.interval.ms`` (and when it stops) the
producer is flushed and only then are the source offsets of the records
polled so far written to the offset store (so a stored offset never runs
ahead of an acknowledged record), then ``commit()``.

A sink task's thread: a consumer in the group ``connect-<connector>``
(``enable.auto.commit`` off, ``auto.offset.reset=earliest`` as Kafka
Connect's), converters, transforms, ``put(records)``; every
``offset.flush.interval.ms``, on ``request_commit()``, before partitions
are revoked and when it stops: ``pre_commit(offsets)`` (by default flush)
and a synchronous commit of the offsets it returns. Partitions the group
took away (``on_lost``) are closed without a commit, and a commit the
group refuses in a rebalance is not the task's failure; a consumer refused
by the brokers (an authorization or login error: a connector acting as a
creator without READ on its topic, creator.py) fails the task, as Kafka's.
Records skipped by the error tolerance count as consumed.

Pause stops polling (a sink task's consumer pauses its partitions and
keeps its group membership); stop asks the task to stop and joins the
thread. A task that raises is FAILED with its traceback as ``trace`` (set
before the state, here and in the herder: the REST API reads both from
another thread and must never show a FAILED task without its trace).

Worker config (Kafka's keys): ``bootstrap.servers`` (and, over Kafka's
protocol, ``security.protocol``, ``sasl.*``, ``ssl.*``, ``admin.*``:
clients.py), ``kafkalite.client.protocol``, ``key.converter``,
``value.converter`` (+ their ``.schemas.enable``...),
``offset.flush.interval.ms`` (default 10000), ``producer.*`` and
``consumer.*`` overrides, and a connector's ``producer.override.*`` /
``consumer.override.*``.

Who calls: herder.py. Thread safety: a WorkerTask's pause/resume/stop may
be called from any thread.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import traceback

from kafkalite.connect.api import SinkRecord, SinkRecordBatch, SourceRecordBatch, SourceTask
from kafkalite.connect.clients import worker_client_config
from kafkalite.connect.config_providers import ConfigTransformer
from kafkalite.connect.converters import JsonStructValues, converter_from_config
from kafkalite.connect.errors import ConnectException, DataException, RetriableException
from kafkalite.connect.file_access import FileAccess
from kafkalite.connect.tolerance import SKIPPED, ErrorHandler
from kafkalite.connect.transforms import TransformationChain

log = logging.getLogger("kafkalite.connect")

UNASSIGNED, RUNNING, PAUSED, FAILED, RESTARTING, STOPPED = (
    "UNASSIGNED", "RUNNING", "PAUSED", "FAILED", "RESTARTING", "STOPPED")
# consumer errors no retry mends (TOPIC_, GROUP_, CLUSTER_AUTHORIZATION_FAILED,
# SASL_AUTHENTICATION_FAILED, librdkafka's _AUTHENTICATION): the sink task fails, as Kafka's
# does on its consumer's authorization and authentication exceptions, instead of polling on
_DENIED_CODES = (29, 30, 31, 58, -169)
_BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
_JSON = "org.apache.kafka.connect.json.JsonConverter"


def _denied(err) -> bool:
    """Whether a consumer's error (confluent-kafka's KafkaError, or
    kafkalite's) is a refused login or authorization."""
    code = getattr(err, "code", None)
    return (code() if callable(code) else code) in _DENIED_CODES


class OffsetStorageReader:
    """What a source task sees of the offset store: its connector's offsets."""

    def __init__(self, store, connector):
        self._store, self._connector = store, connector

    def offset(self, partition: dict) -> dict | None:
        return self._store.get(self._connector, partition)

    def offsets(self, partitions: list[dict]) -> dict:
        return {json.dumps(p, sort_keys=True): self.offset(p) for p in partitions}


class SourceTaskContext:
    def __init__(self, config, reader, transactions=None, file_access=None):
        self.config, self._reader, self._transactions = config, reader, transactions
        # the files the task may open (file_access.py)
        self.file_access = file_access

    def offset_storage_reader(self) -> OffsetStorageReader:
        return self._reader

    def transaction_context(self):
        """A TransactionContext with exactly-once support and
        ``transaction.boundary=connector``, else None (as Kafka's)."""
        return self._transactions


class SinkTaskContext:
    def __init__(self, config, runner):
        self.config, self._runner = config, runner
        # the files the task may open (file_access.py)
        self.file_access = runner.worker.file_access

    def offset(self, offsets: dict) -> None:
        """Rewind or skip: {(topic, partition): next offset to consume}."""
        self._runner.rewind.update(offsets)

    def request_commit(self) -> None:
        self._runner.commit_requested = True

    def current_lag(self, topic: str, partition: int) -> int | None:
        """kafkalite's own, Kafka's Consumer.currentLag (KIP-695): the
        records of a partition between the consumer's position and its end
        (high watermark; last stable offset read_committed) as the last
        fetch of it saw that end, with no request made; None where either
        is unknown. A sink that buffers learns from it that it has read a
        backlog to its end (iceberg.py then commits at once)."""
        from kafkalite.client import TopicPartition
        consumer = getattr(self._runner, "consumer", None)
        if consumer is None:
            return None
        tp = TopicPartition(topic, partition)
        try:
            _, high = consumer.get_watermark_offsets(tp, cached=True)
            position = consumer.position([tp])[0].offset
        except Exception:       # noqa: BLE001 -- a client that keeps neither: unknown
            return None
        if high is None or high < 0 or position is None or position < 0:
            return None
        return max(high - position, 0)

    def interval_commit(self) -> bool:
        """kafkalite's own: whether the ``pre_commit`` under way is only the
        worker's ``offset.flush.interval.ms`` one (not requested, a rebalance's
        or the stop's), which a sink may let pass (iceberg.py)."""
        return bool(getattr(self._runner, "interval_commit", False))

    def assignment(self) -> list:
        return list(self._runner.assignment)

    def pause(self, *partitions) -> None:
        self._runner.consumer.pause(list(partitions))

    def resume(self, *partitions) -> None:
        self._runner.consumer.resume(list(partitions))


class WorkerTask:
    """One task in its thread; ``state`` is what /status shows."""

    def __init__(self, worker, connector: str, task_id: int, connector_config: dict,
                 task_config: dict, task_class: type):
        self.worker, self.connector, self.id = worker, connector, task_id
        # config provider references (${file:...}, ${env:...}) resolved here, at the task's
        # start, and nowhere that is stored or shown (config_providers.py)
        transform = worker.config_transformer.transform
        self.connector_config = transform(connector_config)
        self.task_config = transform(task_config)
        connector_config = self.connector_config
        self.task = task_class()
        self.state, self.trace = UNASSIGNED, None
        self._stopping = threading.Event()
        self._paused = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"connect-{connector}-{task_id}")
        cfg = {**worker.config, **connector_config}
        self.key_converter = converter_from_config(cfg, "key.converter", True, _JSON)
        self.value_converter = converter_from_config(cfg, "value.converter", False, _JSON)
        self.transforms = TransformationChain(connector_config)
        # the bulk path (api.py) needs no record objects: none with transforms to run
        self.bulk = not self.transforms.stages
        self.flush_interval = int(worker.config.get("offset.flush.interval.ms", 10_000)) / 1000

    def start(self, paused=False) -> None:
        if paused:
            self._paused.set()
        self._thread.start()

    def pause(self) -> None:
        self._paused.set()
        if self.state == RUNNING:
            self.state = PAUSED

    def resume(self) -> None:
        self._paused.clear()
        if self.state == PAUSED:
            self.state = RUNNING

    def stop(self, timeout: float = 30.0) -> None:
        # the task's own thread calls task.stop() once its loop ends (poll/put
        # return within a poll interval), so stop() never races put or flush
        self._stopping.set()
        self._thread.join(timeout)

    def _run(self) -> None:
        try:
            self.execute()
            if self.state != FAILED:
                self.state = UNASSIGNED
        except Exception as e:      # noqa: BLE001 -- a task failure is its state, not a crash
            # the trace first: the REST API reads state and trace from another
            # thread, and a FAILED task must never be shown without its trace
            self.trace = "".join(traceback.format_exception(e))
            self.state = FAILED
            log.error("connector %s task %d failed: %s", self.connector, self.id, e)
        finally:
            try:
                self.task.stop()
            except Exception:       # noqa: BLE001 -- stopping anyway
                log.exception("connector %s task %d: stop()", self.connector, self.id)
            self.worker.task_ended(self)

    def _client_config(self, kind: str) -> dict:
        """Worker's client config + ``producer.``/``consumer.`` + the
        connector's ``producer.override.``/``consumer.override.``."""
        out = dict(self.worker.client_config)
        for src, prefix in ((self.worker.config, kind + "."),
                            (self.connector_config, kind + ".override.")):
            out.update({k[len(prefix):]: v for k, v in src.items() if k.startswith(prefix)})
        return out


def poll_units(records) -> list:
    """What a source task's ``poll()`` returned, as the units the worker sends
    one at a time: [] for nothing, [batch] for a SourceRecordBatch, the
    batches of a list of them, [records] for a list of SourceRecords."""
    if not records:
        return []
    if isinstance(records, SourceRecordBatch):
        return [records] if len(records) else []
    if isinstance(records[0], SourceRecordBatch):
        return [b for b in records if len(b)]
    return [records]


def track_offsets(records, pending: dict) -> None:
    """The latest source offset of each source partition among ``records``
    (a list, or a SourceRecordBatch), into ``pending`` {json(partition):
    (partition, offset)}."""
    if isinstance(records, SourceRecordBatch):
        if records.source_partition is not None and records.source_offset is not None:
            pending[json.dumps(records.source_partition, sort_keys=True)] = (
                records.source_partition, records.source_offset)
        return
    last_part, last_key = None, None
    for r in records:
        part = r.source_partition
        if part is not None and r.source_offset is not None:
            # a poll's records mostly share one partition dict: its key once
            if part is not last_part:
                last_part, last_key = part, json.dumps(part, sort_keys=True)
            pending[last_key] = (part, r.source_offset)


class TransactionContext:
    """KIP-618's TransactionContext, for ``transaction.boundary=connector``:
    the task asks to commit or abort the open transaction, after a given
    record of its last poll (or after the whole poll)."""

    def __init__(self):
        self.requests: list = []      # (action, record or None)

    def commit_transaction(self, record=None) -> None:
        self.requests.append(("commit", record))

    def abort_transaction(self, record=None) -> None:
        self.requests.append(("abort", record))


class WorkerSourceTask(WorkerTask):
    def execute(self) -> None:
        from kafkalite.connect.clients import Producer
        self.producer = producer = Producer(self._client_config("producer"))
        handler = ErrorHandler(self.connector_config, self.connector, self.id)
        pending: dict = {}      # json(partition) -> (partition, offset), since the last commit
        sent: list = []         # records polled since the last commit
        failures: list = []

        def on_delivery(err, delivery):
            if err is not None:
                failures.append(err)
        try:
            self.task.initialize(SourceTaskContext(
                self.task_config, OffsetStorageReader(self.worker.offsets, self.connector),
                file_access=self.worker.file_access))
            self.task.start(self.task_config)
            self.state = PAUSED if self._paused.is_set() else RUNNING
            next_commit = time.monotonic() + self.flush_interval
            while not self._stopping.is_set():
                if self._paused.is_set():
                    self._stopping.wait(0.05)
                    continue
                try:
                    records = self.task.poll()
                except RetriableException:
                    records = None
                for unit in poll_units(records):
                    self._send_all(unit, producer, handler, on_delivery)
                    if isinstance(unit, SourceRecordBatch):
                        sent.append(unit)
                    else:
                        sent.extend(unit)
                    track_offsets(unit, pending)
                producer.poll(0)
                if failures:
                    raise failures[0]
                if time.monotonic() >= next_commit:
                    self._commit(producer, pending, failures, sent)
                    next_commit = time.monotonic() + self.flush_interval
            self._commit(producer, pending, failures, sent)
        finally:
            producer.close(10)

    def _send_all(self, records, producer, handler, on_delivery) -> None:
        """Transform and convert a poll's records, then hand them to the
        producer's bulk path: one produce_batch per (topic, partition given
        or not), records in poll order within each. A SourceRecordBatch
        without transforms is converted a batch at a time (_send_batch)."""
        if isinstance(records, SourceRecordBatch):
            if self.bulk and self._send_batch(records, producer, on_delivery):
                return
            records = records.records()
        groups: dict = {}
        now = int(time.time() * 1000)
        for r in records:
            t = handler.execute("TRANSFORMATION", self.transforms.apply, r)
            if t is None or t is SKIPPED:
                continue
            key = handler.execute("KEY_CONVERTER", self.key_converter.from_connect_data,
                                  t.topic, t.key_schema, t.key)
            value = handler.execute("VALUE_CONVERTER", self.value_converter.from_connect_data,
                                    t.topic, t.value_schema, t.value)
            if key is SKIPPED or value is SKIPPED:
                continue
            g = groups.get((t.topic, t.kafka_partition))
            if g is None:
                g = groups[(t.topic, t.kafka_partition)] = ([], [], [], [])
            g[0].append(key)
            g[1].append(value)
            g[2].append(t.timestamp or now)
            g[3].append([(k, v.encode() if isinstance(v, str) else v) for k, v in t.headers]
                        if t.headers else None)
        for (topic, partition), (keys, values, stamps, headers) in groups.items():
            self.worker.topic_active(self.connector, topic, self.id)
            producer.produce_batch(
                topic, values, keys=keys if any(k is not None for k in keys) else None,
                partition=-1 if partition is None else partition, timestamp=stamps,
                headers=headers if any(h is not None for h in headers) else None,
                on_delivery=on_delivery)

    def _send_batch(self, batch, producer, on_delivery) -> bool:
        """A SourceRecordBatch converted a batch at a time and produced;
        False (nothing sent) when a converter refused a value: the caller
        then goes record by record, through the error tolerance."""
        try:
            values = batch.values
            if batch.tombstones:
                # the others converted as one batch, the tombstones' null put back
                gone = set(batch.tombstones)
                values = values.without(gone) if isinstance(values, JsonStructValues) else \
                    [v for i, v in enumerate(values) if i not in gone]
            values = self.value_converter.from_connect_batch(batch.topic, batch.value_schema,
                                                             values)
            if batch.tombstones:
                it = iter(values)
                values = [None if i in gone else next(it) for i in range(len(batch.values))]
            keys = None if batch.keys is None else self.key_converter.from_connect_batch(
                batch.topic, batch.key_schema, batch.keys)
        except DataException:
            return False
        self.worker.topic_active(self.connector, batch.topic, self.id)
        stamps = batch.timestamps
        if stamps is None:
            stamps = batch.timestamp or int(time.time() * 1000)
        elif isinstance(stamps, list) and None in stamps:
            stamps = [-1 if t is None else t for t in stamps]    # the producer's "now"
        partition = -1 if batch.kafka_partition is None else batch.kafka_partition
        try:
            producer.produce_batch(batch.topic, values, keys=keys, partition=partition,
                                   timestamp=stamps, headers=batch.headers,
                                   on_delivery=on_delivery)
        except TypeError:
            if batch.headers is None:
                raise
            # a str header value (the native producer takes bytes; it refuses the call
            # before queueing any of it): encoded here, not checked per record each time
            headers = [[(k, v.encode() if isinstance(v, str) else v) for k, v in h] if h
                       else None for h in batch.headers]
            producer.produce_batch(batch.topic, values, keys=keys, partition=partition,
                                   timestamp=stamps, headers=headers, on_delivery=on_delivery)
        return True

    def _commit(self, producer, pending: dict, failures: list, sent: list) -> None:
        left = producer.flush(60)
        if failures:
            raise failures[0]
        if left:
            raise TimeoutError(f"{left} records not acknowledged in 60 s; offsets not committed")
        if pending:
            self.worker.offsets.put(self.connector, list(pending.values()))
            pending.clear()
        commit_record(self.task, sent)
        sent.clear()
        self.task.commit()


def commit_record(task, sent: list) -> None:
    """``task.commit_record`` of each record polled and ``task.commit_batch``
    of each batch, where the task has its own: the defaults do nothing, and
    a batch then needs no records made."""
    own_record = type(task).commit_record is not SourceTask.commit_record
    own_batch = type(task).commit_batch is not SourceTask.commit_batch
    if not (own_record or own_batch):
        return
    for r in sent:
        if isinstance(r, SourceRecordBatch):
            task.commit_batch(r)
        elif own_record:
            task.commit_record(r, None)


class ExactlyOnceWorkerSourceTask(WorkerSourceTask):
    """KIP-618: a source task's records and their source offsets in one
    transaction (``exactly.once.source.support=enabled`` on the worker; the
    offsets go to the offsets topic through the task's transactional
    producer, ``transactional.id`` = ``<group.id>-<connector>-<task>``).
    ``transaction.boundary``: ``poll`` (default: one transaction per
    non-empty poll) or ``connector`` (the task decides through
    ``context.transaction_context()``). A failure aborts the open
    transaction: neither its records (for read_committed consumers) nor its
    offsets count, and the task restarts from the last committed offsets."""

    def execute(self) -> None:
        from kafkalite.connect.clients import Producer
        store = self.worker.offsets
        if not hasattr(store, "records_for"):
            raise ConnectException("exactly-once source support needs source offsets in a "
                                   "topic (offset.storage.topic), not a file")
        boundary = self.connector_config.get("transaction.boundary", "poll")
        if boundary not in ("poll", "connector"):
            raise ConnectException(f"transaction.boundary {boundary!r}: poll or connector")
        txn_id = self.worker.task_transactional_id(self.connector, self.id)
        self.producer = producer = Producer({**self._client_config("producer"),
                                             "transactional.id": txn_id})
        handler = ErrorHandler(self.connector_config, self.connector, self.id)
        ctx = TransactionContext() if boundary == "connector" else None
        pending: dict = {}
        sent: list = []
        failures: list = []
        in_txn = False

        def on_delivery(err, delivery):
            if err is not None:
                failures.append(err)

        def send(records):
            nonlocal in_txn
            if not records:
                return
            if not in_txn:
                producer.begin_transaction()
                in_txn = True
            self._send_all(records, producer, handler, on_delivery)
            if isinstance(records, SourceRecordBatch):
                sent.append(records)
            else:
                sent.extend(records)
            track_offsets(records, pending)

        def end(action):
            nonlocal in_txn
            if not in_txn:
                return
            if action == "commit":
                entries = list(pending.values())
                for key, value in store.records_for(self.connector, entries):
                    producer.produce(store.topic, key=key, value=value, on_delivery=on_delivery)
                producer.commit_transaction(60)
                if failures:
                    raise failures[0]
                store.remember(self.connector, entries)
                commit_record(self.task, sent)
                self.task.commit()
            else:
                producer.abort_transaction(60)
                failures.clear()
            pending.clear()
            sent.clear()
            in_txn = False
        try:
            producer.init_transactions(60)   # fences an earlier incarnation, aborts its txn
            self.task.initialize(SourceTaskContext(
                self.task_config, OffsetStorageReader(store, self.connector), ctx,
                file_access=self.worker.file_access))
            self.task.start(self.task_config)
            self.state = PAUSED if self._paused.is_set() else RUNNING
            while not self._stopping.is_set():
                if self._paused.is_set():
                    self._stopping.wait(0.05)
                    continue
                try:
                    units = poll_units(self.task.poll())
                except RetriableException:
                    units = []
                if ctx is None:
                    for unit in units:
                        send(unit)
                    end("commit")
                    continue
                # transaction boundaries name records: batches go the per-record path
                records = [r for u in units
                           for r in (u.records() if isinstance(u, SourceRecordBatch) else u)]
                requests, ctx.requests = ctx.requests, []
                done = 0
                for action, record in requests:
                    upto = len(records) if record is None else \
                        next(i for i, r in enumerate(records) if r is record) + 1
                    send(records[done:upto])
                    done = max(done, upto)
                    end(action)
                send(records[done:])
            end("abort")      # stopping with a transaction the task left open
        except BaseException:
            if in_txn:
                try:
                    producer.abort_transaction(30)
                except Exception:       # noqa: BLE001 -- the next init_transactions aborts it
                    log.exception("%s-%d: abort", self.connector, self.id)
            raise
        finally:
            producer.close(10)


class WorkerSinkTask(WorkerTask):
    def execute(self) -> None:
        from kafkalite.client import TopicPartition
        from kafkalite.connect.clients import Consumer
        cfg = {"auto.offset.reset": "earliest", **self._client_config("consumer"),
               "group.id": f"connect-{self.connector}", "enable.auto.commit": False}
        # Kafka's max.poll.records is the most records a put gets (not a kafkalite
        # consumer property: consume() takes the count)
        batch = int(cfg.pop("max.poll.records", 500))
        self.consumer = consumer = Consumer(cfg)
        self.assignment: set = set()
        self.current: dict = {}       # (topic, partition) -> next offset, of records put
        self.rewind: dict = {}
        self.commit_requested = False
        dlq = None
        handler = ErrorHandler(self.connector_config, self.connector, self.id)
        if handler.dlq_topic:
            from kafkalite.connect.clients import Producer
            dlq = handler.dlq_producer = Producer(self._client_config("producer"))
        topics = [t.strip() for t in self.connector_config.get("topics", "").split(",")
                  if t.strip()]
        if self.connector_config.get("topics.regex"):
            topics.append("^" + self.connector_config["topics.regex"].lstrip("^"))

        def on_assign(c, parts):
            self.assignment |= {(p.topic, p.partition) for p in parts}
            if self._paused.is_set():
                c.pause(parts)      # assigned while paused: fetch nothing yet
            self.task.open(parts)
            # the offsets open() asked for, applied before the consume() running this
            # callback returns anything (Kafka's WorkerSinkTask rewinds inside
            # onPartitionsAssigned): applied after it, that consume() would hand put()
            # records from the group's committed offset, and the seek would then deliver
            # them again -- twice into a sink that buffers, as an exactly-once one does
            self._seek_rewinds(c)

        def on_revoke(c, parts):
            self._commit(only={(p.topic, p.partition) for p in parts})
            self.task.close(parts)
            self.assignment -= {(p.topic, p.partition) for p in parts}

        def on_lost(c, parts):
            # Kafka's onPartitionsLost: the group dropped this task (its poll stalled or
            # its session expired), and they may be another's by now: closed without a
            # commit, so a task that buffers drops what it held before they open again
            lost = {(p.topic, p.partition) for p in parts}
            self.task.close(parts)
            self.assignment -= lost
            for tp in lost:
                self.current.pop(tp, None)
                self.rewind.pop(tp, None)
        try:
            self.task.initialize(SinkTaskContext(self.task_config, self))
            self.task.start(self.task_config)
            consumer.subscribe(topics, on_assign=on_assign, on_revoke=on_revoke,
                               on_lost=on_lost)
            self.state = PAUSED if self._paused.is_set() else RUNNING
            next_commit = time.monotonic() + self.flush_interval
            paused = False
            # the bulk path (api.py): kafkalite's consumer hands Arrow columns, converted a
            # batch at a time; Kafka's clients' consumer, or transforms, go record by record
            bulk = self.bulk and hasattr(consumer, "consume_batch")
            while not self._stopping.is_set():
                if self._paused.is_set() != paused:
                    paused = self._paused.is_set()
                    tps = [TopicPartition(t, p) for t, p in self.assignment]
                    (consumer.pause if paused else consumer.resume)(tps)
                self._seek_rewinds(consumer)
                if bulk:
                    rows = consumer.consume_batch(0.2)
                    if paused:
                        self._rewind_to_first_rows(rows)
                        continue
                    for lo in range(0, rows.num_rows, batch):
                        self._put_rows(rows.slice(lo, batch), handler)
                    msgs = ()
                else:
                    msgs = consumer.consume(batch, 0.2)
                if paused:
                    # fetched before the pause took hold: read again after resume
                    self._rewind_to_first(msgs)
                    continue
                records = []
                for m in msgs:
                    if m.error():
                        if _denied(m.error()):
                            raise ConnectException(f"the consumer of connector "
                                                   f"{self.connector} was refused: {m.error()}")
                        continue
                    r = self._convert(m, handler)
                    if r is not None:
                        records.append(r)
                    self.current[(m.topic(), m.partition())] = m.offset() + 1
                for topic in {m.topic() for m in msgs if not m.error()}:
                    self.worker.topic_active(self.connector, topic, self.id)
                if records:
                    self._put(records)
                if dlq is not None:
                    dlq.poll(0)
                if self.commit_requested or time.monotonic() >= next_commit:
                    self._commit(interval=not self.commit_requested)
                    self.commit_requested = False
                    next_commit = time.monotonic() + self.flush_interval
            self._commit()
            if self.assignment:
                self.task.close([TopicPartition(t, p) for t, p in self.assignment])
        finally:
            try:
                consumer.close()
            finally:
                if dlq is not None:
                    dlq.close(10)

    def _seek_rewinds(self, consumer) -> None:
        """Seek to the offsets the task asked for (``context.offset``)."""
        from kafkalite.client import TopicPartition
        for (t, p), off in list(self.rewind.items()):
            if (t, p) in self.assignment:
                consumer.seek(TopicPartition(t, p, off))
                self.current[(t, p)] = off
            del self.rewind[(t, p)]

    def _put_rows(self, rows, handler) -> None:
        """One slice of a consume_batch (at most max.poll.records): its keys
        and values converted a column at a time, then ``put_batch`` (or
        ``put`` of its SinkRecords); a converter's DataException sends the
        slice record by record through the error tolerance."""
        import numpy as np
        n = rows.num_rows
        if not n:
            return
        topic_col = rows.column("topic")
        topics = topic_col.dictionary.to_pylist()
        topic = topics[0] if len(topics) == 1 else None
        try:
            key_schema, keys = self.key_converter.to_connect_batch(topic, rows.column("key"))
            value_schema, values = self.value_converter.to_connect_batch(topic,
                                                                         rows.column("value"))
            records = SinkRecordBatch(rows, key_schema, keys, value_schema, values)
        except DataException:
            records = [r for r in (self._convert(m, handler) for m in _row_messages(rows))
                       if r is not None]
        if len(records):
            self._put(records)
        # the next offset of each partition: its last record's + 1
        idx = topic_col.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        parts = rows.column("partition").to_numpy(zero_copy_only=False)
        offs = rows.column("offset").to_numpy(zero_copy_only=False)
        key = (idx << 32) | parts.astype(np.int64)
        uniq, first_from_end = np.unique(key[::-1], return_index=True)
        for k, i in zip(uniq.tolist(), first_from_end.tolist()):
            self.current[(topics[k >> 32], k & 0xFFFFFFFF)] = int(offs[n - 1 - i]) + 1
        for t in topics:
            self.worker.topic_active(self.connector, t, self.id)

    def _rewind_to_first_rows(self, rows) -> None:
        for m in _row_messages(rows):
            self.rewind.setdefault((m.topic(), m.partition()), m.offset())

    def _rewind_to_first(self, msgs) -> None:
        first: dict = {}
        for m in msgs:
            if not m.error():
                first.setdefault((m.topic(), m.partition()), m.offset())
        for (t, p), off in first.items():
            self.rewind.setdefault((t, p), off)

    def _convert(self, m, handler):
        tt, ts = m.timestamp()
        key = handler.execute("KEY_CONVERTER", self.key_converter.to_connect_data, m.topic(),
                              m.key(), original=m, cls=type(self.key_converter))
        if key is SKIPPED:
            return None
        value = handler.execute("VALUE_CONVERTER", self.value_converter.to_connect_data,
                                m.topic(), m.value(), original=m, cls=type(self.value_converter))
        if value is SKIPPED:
            return None
        r = SinkRecord(m.topic(), m.partition(), key[0], key[1], value[0], value[1],
                       ts if ts >= 0 else None, list(m.headers() or []), m.offset(),
                       "LogAppendTime" if tt == 2 else "CreateTime", m.topic(), m.partition(),
                       m.offset())
        t = handler.execute("TRANSFORMATION", self.transforms.apply, r, original=m,
                            cls=TransformationChain)
        return None if t is SKIPPED else t

    def _put(self, records) -> None:
        """``put`` (of a list, or of a SinkRecordBatch's records when the
        task has no ``put_batch``), redelivered after a RetriableException."""
        delay = 0.1
        put_batch = getattr(self.task, "put_batch", None)
        while True:
            try:
                if not isinstance(records, SinkRecordBatch):
                    self.task.put(records)
                elif put_batch is not None:
                    put_batch(records)
                else:
                    self.task.put(records.records())
                return
            except RetriableException:
                # Kafka redelivers the same batch after a backoff
                if self._stopping.wait(delay):
                    raise
                delay = min(delay * 2, 5.0)

    def _commit(self, only: set | None = None, interval: bool = False) -> None:
        from kafkalite.client import TopicPartition
        current = {tp: off for tp, off in self.current.items() if only is None or tp in only}
        if not current:
            return
        # the interval's own commit alone, which a task may let pass (interval_commit)
        self.interval_commit = interval
        committable = self.task.pre_commit(dict(current)) or {}
        self.interval_commit = False
        offsets = [TopicPartition(t, p, off) for (t, p), off in committable.items()
                   if (t, p) in self.assignment]
        if offsets:
            from kafkalite import errors
            try:
                self.consumer.commit(offsets=offsets, asynchronous=False)
            except (errors.UnknownMemberIdError, errors.IllegalGenerationError,
                    errors.RebalanceInProgressError) as e:
                # as Kafka's WorkerSinkTask: a commit refused by a rebalance is not the
                # task's failure; the group takes the partitions away (on_lost or
                # on_revoke) and their next owner starts at the last committed offsets
                log.warning("connector %s task %d: offsets not committed (%s); the group "
                            "is rebalancing", self.connector, self.id, e)


class _RowMessage:
    """One row of a consume_batch as the consumer's Message shows it: the
    per-record path's input when a batch's conversion failed."""
    __slots__ = ("_row",)

    def __init__(self, row: dict):
        self._row = row

    def error(self):
        return None

    def topic(self):
        return self._row["topic"]

    def partition(self):
        return self._row["partition"]

    def offset(self):
        return self._row["offset"]

    def key(self):
        return self._row["key"]

    def value(self):
        return self._row["value"]

    def headers(self):
        return [(h["key"], h["value"]) for h in self._row["headers"] or ()] or None

    def timestamp(self):
        # confluent-kafka's (type, ms): 1 CreateTime, 2 LogAppendTime
        ts = self._row["timestamp"]
        ms = -1 if ts is None else int(ts.timestamp() * 1000)
        return (2 if self._row["timestamp_type"] == 1 else 1), ms


def _row_messages(rows) -> list:
    return [_RowMessage(r) for r in rows.to_pylist()]


class FailedTask:
    """A task whose converters, transforms or class could not be set up."""

    def __init__(self, connector, task_id, exc):
        self.connector, self.id = connector, task_id
        self.state, self.trace = FAILED, "".join(traceback.format_exception(exc))

    def pause(self):
        pass

    def resume(self):
        pass

    def stop(self, timeout=None):
        pass


class Worker:
    """Holds the worker config, the offset store and the running tasks."""

    def __init__(self, config: dict, offsets):
        self.config = dict(config)
        self.offsets = offsets
        self.worker_id = config.get("worker.id", "standalone")
        # what every client the worker makes gets, with its protocol (clients.py)
        self.client_config = worker_client_config(self.config)
        # which files connectors may open, and the config providers of their configs: both
        # read once, here, so a bad setting stops the worker at its start
        self.file_access = FileAccess.from_worker_config(self.config)
        self.config_transformer = ConfigTransformer.from_worker_config(self.config)
        self.on_task_end = None
        # KIP-558: connector -> the topics its tasks produced to or consumed from since the
        # last reset; read without a lock on the hot path (a dict lookup), added under one
        self.topic_tracking = str(self.config.get("topic.tracking.enable", "true")).lower() \
            == "true"
        self.topic_tracking_reset = str(self.config.get("topic.tracking.allow.reset",
                                                        "true")).lower() == "true"
        self.active_topics: dict[str, dict[str, dict]] = {}
        self._topics_lock = threading.Lock()
        # distributed/: writes a newly active topic to the status topic
        self.on_topic_active = None

    def start(self) -> None:
        self.offsets.start()

    def stop(self) -> None:
        self.offsets.stop()

    def task_transactional_id(self, connector: str, task: int) -> str:
        """The transactional.id of an exactly-once source task (Kafka's
        Worker.taskTransactionalId): ``<group.id>-<connector>-<task>``; the
        same for every incarnation of the task, on any worker."""
        return f"{self.config.get('group.id', 'connect')}-{connector}-{task}"

    def start_task(self, kind: str, connector: str, task_id: int, connector_config: dict,
                   task_config: dict, task_class: type, paused=False) -> WorkerTask:
        eos = str(self.config.get("exactly.once.source.support", "disabled")).lower() == "enabled"
        cls = WorkerSinkTask if kind == "sink" else \
            ExactlyOnceWorkerSourceTask if eos else WorkerSourceTask
        try:
            t = cls(self, connector, task_id, connector_config, task_config, task_class)
        except Exception as e:      # noqa: BLE001 -- a task that cannot be built is FAILED
            return FailedTask(connector, task_id, e)
        t.start(paused)
        return t

    def topic_active(self, connector: str, topic: str, task: int) -> None:
        """A task used ``topic`` (KIP-558's recordActiveTopic): recorded once
        until the connector's topics are reset."""
        if not self.topic_tracking or topic in self.active_topics.get(connector, ()):
            return
        with self._topics_lock:
            known = self.active_topics.setdefault(connector, {})
            if topic in known:
                return
            status = known[topic] = {"name": topic, "connector": connector, "task": task,
                                     "discoverTimestamp": int(time.time() * 1000)}
        if self.on_topic_active is not None:
            self.on_topic_active(status)

    def forget_topics(self, connector: str, topics=None) -> None:
        """Forget ``connector``'s active topics (all of them, or ``topics``):
        the next record of one records it again."""
        with self._topics_lock:
            known = self.active_topics.get(connector, {})
            for t in list(known) if topics is None else topics:
                known.pop(t, None)

    def task_ended(self, task: WorkerTask) -> None:
        if self.on_task_end is not None:
            self.on_task_end(task)
