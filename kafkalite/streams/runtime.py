"""KafkaStreams: a topology run by one instance of an application, in a
consumer group with the application's other instances.

One module of about 1,000 lines, with reason: KafkaStreams and its
threaded variant share one life cycle (states, rebalance callbacks,
task creation and closing, exactly-once commits) that the task, store
and restore modules beside it plug into.

``application.id`` is the group id and the prefix of the internal topics.
At start the instance checks co-partitioning, creates the repartition topics
and the changelog topics (cleanup.policy=compact, the partition count of the
sub-topology), and joins the group with one native Consumer (the range
assignor, which gives partition p of co-partitioned topics to one member).
A task runs per (sub-topology, partition); tasks are created when their
partitions are assigned, their stores restored from the changelog (read to
its end, read_committed under exactly-once; from the task's checkpoint where
a persistent store has one, restore.py, with a StateRestoreListener told of
each store's progress), and suspended on revoke after a commit (a suspended
task that comes back keeps its state; one that does not is closed, writing
its checkpoint).

One StreamThread per KafkaStreams (``num.stream.threads`` N > 1: N of them,
each a member of the group with its own consumer, producer, tasks and state
directory ``<state.dir>/thread-<i>``, behind one KafkaStreams: see
``_ThreadedKafkaStreams``): poll
``consume_batch``, split the batch by topic and partition, run each task,
produce its outputs and changelog changes, and every ``commit.interval.ms``
commit:

- ``at_least_once``: flush the producer (every delivery acknowledged), then
  commit the consumed positions to the group. A crash replays from the last
  commit: outputs may repeat, counts may be higher than the model, never
  lower.
- ``exactly_once_v2``: one transactional producer per instance
  (``transactional.id`` = ``<application.id>-<instance>``); every commit
  interval's outputs, changelog writes and input offsets
  (``send_offsets_to_transaction`` with the consumer's group metadata) are
  one transaction. On a failure the transaction is aborted, the consumer
  rewound to the committed offsets and every store restored from its
  changelog (which holds only committed changes), so the aborted work is
  done again exactly once. Input is read read_committed.

Standby replicas (``num.standby.replicas`` N, Kafka's): each instance keeps
warm copies of the stores of the tasks of the N instances after the active
owner's (members ordered by client id, read from the group's description
every ``standby.refresh.ms`` and after each rebalance: the group's
assignment protocol is the plain range assignor, so standbys are placed by
the instances themselves, deterministically, rather than by a Streams
assignor), by reading those tasks' changelog partitions with a consumer of
their own between polls (read_committed under exactly-once). When such a
task is assigned to the instance, the standby becomes the active task and
restores only what the standby had not read yet.

A task with several input partitions (a join, a merge) buffers each
partition's records across polls and takes them in timestamp order across
them (Kafka's PartitionGroup: the head record with the smallest timestamp,
records.merge_runs) while every partition has records buffered; when one
has none, it waits up to ``max.task.idle.ms`` (KIP-353; KIP-695's "no
wait for a partition known to be at its end" is not implemented) for it,
then processes what it has. A commit covers the records processed, not the
consumer's position: a partition with records buffered commits the offset
of its first buffered record, so those are read again after a crash (or an
abort, a rebalance: the buffers are dropped then).

Global tables (``builder.global_table``): the stream thread reads every
partition of their topics with a consumer of its own (no group), into one
store per table shared by the tasks: to the end before the group is joined,
then between polls.

Each commit records the tasks' stream times in the committed offsets'
metadata (as Kafka Streams does); a task created on assignment, or rewound
after an abort, takes them back, so that late records are judged as one
uninterrupted run would judge them.

A record that fails deserialization or processing goes to the exception
handlers and the dead-letter queue (errors.py); a DLQ record is produced
with the outputs (in the transaction under exactly_once_v2). "fail" (the
default) stops the stream thread: the instance goes to ERROR. Once every
stream thread of an instance has died, the handler set with
``set_uncaught_exception_handler`` is told; without one the process exits
with status 1 and one line on stderr saying why (an application whose
threads died must not exit 0, or live on, doing nothing).

Who may call: ``start``, ``close``, ``state``, ``store`` and ``metrics`` from
any thread; the topology's functions run in the StreamThread.
"""
from __future__ import annotations

import collections
import json
import logging
import os
import sys
import threading
import time
import uuid

import numpy as np
import pyarrow as pa

from kafkalite import errors
from kafkalite.client import (OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, Producer,
                              TopicPartition)
from kafkalite.errors import KafkaError
from kafkalite.streams.config import EXACTLY_ONCE_V2, StreamsConfig
from kafkalite.streams.errors import ErrorHandling
from kafkalite.streams.local_stores import LocalStores, ThreadsStores
from kafkalite.streams.records import by_partition, merge_runs
from kafkalite.streams.restore import (CHECKPOINT_DELTA, RestoreProgress, StateRestoreListener,
                                       checkpoint_task, delete_checkpoint, restore_tasks,
                                       start_offsets, write_checkpoint)
from kafkalite.streams.stores import apply_global, global_store
from kafkalite.streams.task import StreamTask
from kafkalite.streams.topology import Topology, TopologyException

log = logging.getLogger(__name__)

_DEATHS = threading.Lock()      # one report of an instance whose threads all died


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class KafkaStreams:
    CREATED, REBALANCING, RUNNING, PENDING_SHUTDOWN, NOT_RUNNING, ERROR = (
        "CREATED", "REBALANCING", "RUNNING", "PENDING_SHUTDOWN", "NOT_RUNNING", "ERROR")

    def __new__(cls, topology=None, config=None):
        if cls is KafkaStreams and config and int(config.get("num.stream.threads", 1)) > 1:
            return super().__new__(_ThreadedKafkaStreams)
        return super().__new__(cls)

    def __init__(self, topology: Topology, config: dict):
        self.topology = topology
        self.config = StreamsConfig(config)
        self.application_id = self.config["application.id"]
        self.eos = self.config["processing.guarantee"] == EXACTLY_ONCE_V2
        self.errors = ErrorHandling(self.config.values)
        self.instance = self.config["instance.id"] or uuid.uuid4().hex[:12]
        self.state = self.CREATED
        self.error: BaseException | None = None
        self.tasks: dict[tuple[int, int], StreamTask] = {}
        self._suspended: dict[tuple[int, int], StreamTask] = {}
        self._committed: dict[tuple[str, int], int] = {}    # what this instance committed
        self._in_txn = False
        self._delivery_errors: list = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._metrics = collections.Counter()
        self.restored_records = 0
        self.restore_progress = RestoreProgress()   # per task and store (restore.py)
        self._restore_listener: StateRestoreListener | None = None
        self.global_records = 0     # records applied to global tables
        self.global_stores: dict = {}
        self._global_store_of: dict = {}        # global topic -> its store
        self._global_partitions: list = []
        self._global_consumer = None
        self.standbys: dict[tuple[int, int], StreamTask] = {}
        self._standby_consumer = None
        self._standby_admin = None
        self._standby_refresh = 0.0         # monotonic time of the next refresh
        self._changelog_sub: dict = {}      # changelog topic -> sub-topology id
        # tasks with several input partitions: task key -> {topic: records
        # fetched, not processed yet}, and since when each waits (monotonic)
        self._buffered: dict[tuple[int, int], dict] = {}
        self._idle_since: dict[tuple[int, int], float] = {}
        self._owner = None                  # the _ThreadedKafkaStreams this thread is one of
        self._uncaught_handler = None
        self._death_reported = False

    # ---- lifecycle ----
    def start(self) -> None:
        if self.state != self.CREATED:
            raise RuntimeError(f"start() in state {self.state}")
        self._setup_topics()
        self.state = self.REBALANCING
        self._thread = threading.Thread(target=self._run, name=f"{self.application_id}-"
                                        f"StreamThread-{self.instance}", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 30.0, leave_group: bool = False) -> None:
        """Commit what was processed, leave the group, close the stores. A
        static member (``instance.id`` set) stays in the group until its
        session times out, so that a restart takes its tasks back without a
        rebalance (KIP-345); ``leave_group`` (Kafka's CloseOptions
        LEAVE_GROUP, KIP-812) removes it at once: it will not come back."""
        if self._thread is not None:
            self.state = self.PENDING_SHUTDOWN if self.state != self.ERROR else self.ERROR
            self._stop.set()
            self._thread.join(timeout)
            if leave_group and not self._thread.is_alive():
                self._leave_group()
        if self.state != self.ERROR:
            self.state = self.NOT_RUNNING

    def _leave_group(self) -> None:
        """Removes the closed static member by its group.instance.id (as
        _run names it), with the Admin call Kafka Streams uses; a dynamic
        member left in its consumer's close."""
        instance = self.config.prefixed("consumer.").get("group.instance.id") or (
            f"{self.application_id}-{self.instance}" if self.config["instance.id"] else None)
        if instance is None:
            return
        try:
            with AdminClient(self._client_config()) as admin:
                admin.remove_members_from_consumer_group(
                    self.application_id, [instance], "the Streams instance is closing for good"
                ).all().result()
        except KafkaError as exc:       # the session timeout removes it in the end
            log.warning("%s: %s did not leave the group: %s", self.application_id, instance,
                        _one_line(exc))

    def set_global_state_restore_listener(self, listener: StateRestoreListener) -> None:
        """Kafka's: ``listener`` hears of every store restore (before start)."""
        if self.state != self.CREATED:
            raise RuntimeError("set_global_state_restore_listener() after start()")
        self._restore_listener = listener

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # ---- queries ----
    def store(self, name: str):
        """The named store of every local task, as one read-only view."""
        return LocalStores(self, name)

    def metrics(self) -> collections.Counter:
        with self._lock:
            total = collections.Counter(self._metrics)
            for task in list(self.tasks.values()):
                total.update(task.metrics)
        return total

    # ---- internal topics ----
    def _client_config(self) -> dict:
        return self.config.connection()

    def _setup_topics(self) -> None:
        admin = AdminClient(self._client_config())
        try:
            meta = admin.list_topics(timeout=30)
            external = {t for sub in self.topology.subtopologies() for t in sub.sources
                        if t not in self.topology.internal_topics}
            global_topics = {g.topic for g in self.topology.global_tables.values()}
            missing = sorted(t for t in external | global_topics if t not in meta.topics)
            if missing:
                raise TopologyException(f"source topics {missing} do not exist: create them "
                                        f"before starting the application")
            counts = self.topology.check_copartitioning(
                {t: len(meta.topics[t].partitions) for t in external}, self.application_id)
            self.partitions = counts
            self._global_partitions = [TopicPartition(t, p, OFFSET_BEGINNING)
                                       for t in sorted(global_topics)
                                       for p in sorted(meta.topics[t].partitions)]
            new = []
            for sub in self.topology.subtopologies():
                for t in sub.sources:
                    if t in self.topology.internal_topics:
                        new.append(NewTopic(self.topology.topic_name(t, self.application_id),
                                            counts[sub.id]))
                for spec in sub.stores.values():
                    if spec.logged:
                        new.append(NewTopic(spec.changelog(self.application_id), counts[sub.id],
                                            config={"cleanup.policy": "compact"}))
            if self.errors.dlq_topic:
                # created if missing (KIP-1034 leaves that to the user; a DLQ
                # record for a topic that does not exist would fail the commit)
                new.append(NewTopic(self.errors.dlq_topic, 1))
            new = [n for n in new if n.topic not in meta.topics]
            if new:
                for name, fut in admin.create_topics(new).items():
                    try:
                        fut.result()
                    except KafkaError as exc:
                        if not isinstance(exc, errors.TopicAlreadyExistsError):
                            raise
            self._sub_of = self.topology.source_topics(self.application_id)
        finally:
            admin.close()

    # ---- the stream thread ----
    def _run(self) -> None:
        cfg = self.config
        self._consumer = self._producer = self._restorer = None
        try:
            consumer_cfg = {
                **self._client_config(), "group.id": self.application_id,
                "enable.auto.commit": False, "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "range",
                "isolation.level": "read_committed" if self.eos else "read_uncommitted",
                "client.id": f"{self.application_id}-{self.instance}-consumer",
                **cfg.prefixed("consumer.")}
            if cfg["instance.id"]:
                consumer_cfg.setdefault("group.instance.id",
                                        f"{self.application_id}-{self.instance}")
            producer_cfg = {**self._client_config(), "linger.ms": 5,
                            "client.id": f"{self.application_id}-{self.instance}-producer",
                            "on_delivery": self._on_delivery, **cfg.prefixed("producer.")}
            if self.eos:
                producer_cfg["transactional.id"] = f"{self.application_id}-{self.instance}"
                producer_cfg.setdefault("transaction.timeout.ms", cfg["transaction.timeout.ms"])
            self._producer = Producer(producer_cfg)
            if self.eos:
                self._producer.init_transactions()
            self._restorer = Consumer({**self._client_config(), "isolation.level":
                                       "read_committed" if self.eos else "read_uncommitted",
                                       "client.id": f"{self.application_id}-{self.instance}"
                                                    f"-restore"})
            self._start_global_tables()
            self._consumer = Consumer(consumer_cfg)
            self._consumer.subscribe(sorted(self._sub_of), on_assign=self._on_assign,
                                     on_revoke=self._on_revoke, on_lost=self._on_lost)
            interval = cfg["commit.interval.ms"] / 1000.0
            poll = cfg["poll.ms"] / 1000.0
            next_commit = time.monotonic() + interval
            while not self._stop.is_set():
                batch = self._consumer.consume_batch(poll)
                # a short wait, not 0: a consumer that waits 0 sends no fetch
                self._poll_global(0.002)
                self._poll_standbys(0.002)
                try:
                    if batch.num_rows:
                        self._process(batch)
                    if self._buffered:
                        self._process_buffered()
                    self._punctuate()
                    if time.monotonic() >= next_commit:
                        self._commit()
                        next_commit = time.monotonic() + interval
                except KafkaError as exc:
                    if not self.eos or getattr(exc, "fatal", False):
                        raise
                    log.warning("%s: transaction failed (%s): aborting and rewinding",
                                self.application_id, exc)
                    self._abort_and_rewind()
            self._commit()
            self._consumer.close()      # revokes: tasks suspended, then closed below
            self._consumer = None
            with self._lock:        # a clean close: the next run restores only the tail
                for task in [*self.tasks.values(), *self._suspended.values()]:
                    self._close_task(task, clean=True)
                self.tasks.clear()
                self._suspended.clear()
        except BaseException as exc:     # noqa: BLE001 - the thread's error is the instance's
            # one line: the traceback is for whoever asked for DEBUG
            log.error("%s: stream thread %s died: %s", self.application_id, self.instance,
                      _one_line(exc), exc_info=log.isEnabledFor(logging.DEBUG))
            self.error = exc
            self.state = self.ERROR
            if self.eos and self._in_txn and self._producer is not None:
                try:
                    self._producer.abort_transaction(5)
                except KafkaError:
                    pass
        finally:
            with self._lock:
                for task in [*self.tasks.values(), *self._suspended.values()]:
                    task.close()
                self.tasks.clear()
                self._suspended.clear()
            for store in self.global_stores.values():
                store.close()
            with self._lock:
                for task in self.standbys.values():
                    self._close_standby(task)
                self.standbys.clear()
            for client in (self._consumer, self._restorer, self._global_consumer,
                           self._standby_consumer, self._standby_admin):
                if client is not None:
                    try:
                        client.close()
                    except Exception:    # noqa: BLE001 - closing after a failure
                        pass
            if self._producer is not None:
                self._producer.close(5)
        if self.error is not None:
            # closing the consumer revoked its partitions, which set REBALANCING
            self.state = self.ERROR
            (self._owner or self)._thread_died()

    def _thread_died(self) -> None:
        """A stream thread ended with an error (its clients closed). Once no
        thread of the instance is left the instance is dead: the handler
        set by ``set_uncaught_exception_handler`` hears it; without one the
        process ends with status 1 and one line saying why, since an
        application whose every thread died would otherwise carry on
        (or exit 0) doing nothing."""
        threads = getattr(self, "threads", [self])
        if any(t.error is None and t._thread is not None and t._thread.is_alive()
               for t in threads):
            return
        with _DEATHS:
            if self._death_reported:
                return          # another thread, dying at the same time, did
            self._death_reported = True
        exc = next(t.error for t in threads if t.error is not None)
        if self._uncaught_handler is not None:
            self._uncaught_handler(exc)
            return
        logging.shutdown()
        sys.stdout.flush()
        print(f"kafkalite.streams: application {self.application_id!r}: every stream thread "
              f"died: {_one_line(exc)}; exiting with status 1", file=sys.stderr, flush=True)
        os._exit(1)

    def set_uncaught_exception_handler(self, handler) -> None:
        """Kafka's ``setUncaughtExceptionHandler``, for the instance as a
        whole: ``handler(exc)`` is called (in the last stream thread) once
        every stream thread has died, and the process carries on (the
        instance is in ERROR, as Kafka's SHUTDOWN_CLIENT leaves it). Without
        a handler the process exits with status 1."""
        self._uncaught_handler = handler

    def _on_delivery(self, err, _msg) -> None:
        if err is not None:
            self._delivery_errors.append(err)

    def _begin(self) -> None:
        if self.eos and not self._in_txn:
            self._producer.begin_transaction()
            self._in_txn = True

    def _process(self, batch: pa.RecordBatch) -> None:
        self._begin()
        for (topic, partition), rows in by_partition(batch):
            key = (self._sub_of[topic], partition)
            task = self.tasks.get(key)
            if task is None:
                continue            # revoked while the batch was on its way
            if len(task.sources) == 1:
                task.process(topic, rows)
                self._send(task)
                continue
            # one topic per buffer: its dictionary made the same in every
            # batch, so that buffered batches concatenate
            rows = rows.set_column(rows.schema.get_field_index("topic"), "topic",
                                   pa.DictionaryArray.from_arrays(
                                       pa.array(np.zeros(rows.num_rows, np.int32)),
                                       pa.array([topic])))
            held = self._buffered.setdefault(key, {})
            held[topic] = pa.concat_batches([held[topic], rows]) if topic in held else rows

    def _process_buffered(self) -> None:
        """Tasks with several input partitions: in timestamp order across
        them while each has records buffered; a partition with none is
        waited for up to max.task.idle.ms, then the others go on alone."""
        idle = self.config["max.task.idle.ms"] / 1000.0
        now = time.monotonic()
        for key, held in list(self._buffered.items()):
            task = self.tasks.get(key)
            if task is None:
                self._buffered.pop(key, None)
                continue
            inputs = [(t, held[t]) for t in task.sources if t in held]
            every = len(inputs) == len(task.sources)
            if not every and idle > 0:
                since = self._idle_since.setdefault(key, now)
                if now - since < idle:
                    continue        # wait for the partition with nothing buffered
            self._idle_since.pop(key, None)
            self._begin()
            left = [rows.num_rows for _, rows in inputs]
            for i, start, end in merge_runs([rows.column("timestamp").cast(pa.int64())
                                             .to_numpy() for _, rows in inputs]):
                topic, rows = inputs[i]
                task.process(topic, rows.slice(start, end - start))
                left[i] -= end - start
                if every and idle > 0 and not left[i]:
                    break           # a partition ran dry: wait for it again
            for (topic, rows), n in zip(inputs, left):
                if n:
                    held[topic] = rows.slice(rows.num_rows - n)
                else:
                    del held[topic]
            if not held:
                del self._buffered[key]
            self._send(task)

    def _drop_buffers(self) -> None:
        """Records buffered, not processed: forgotten (they are read again
        from the committed offsets)."""
        self._buffered.clear()
        self._idle_since.clear()

    def _punctuate(self) -> None:
        """Wall-clock punctuators of the Processor API that are due."""
        now = int(time.time() * 1000)
        for task in list(self.tasks.values()):
            if task.punctuators:
                if self.eos and not self._in_txn:
                    self._producer.begin_transaction()
                    self._in_txn = True
                task.punctuate(now)
                self._send(task)

    def _send(self, task: StreamTask) -> None:
        p = self._producer
        for topic, keys, values, ts, headers in task.take_outputs():
            if len(keys):
                # each record keeps its own timestamp (Kafka Streams' rule) and headers
                p.produce_batch(topic, values.to_pylist(), keys.to_pylist(),
                                timestamp=ts.cast(pa.int64()).to_numpy(), headers=headers)
        for topic, keys, values in task.take_changelog():
            p.produce_batch(topic, values.to_pylist(), keys, partition=task.partition)
        for topic, key, value, ts, headers in task.take_dead_letters():
            p.produce(topic, value, key, timestamp=ts, headers=headers)

    def _commit(self) -> None:
        # The consumer's positions, not the last offsets processed + 1: a
        # position also steps over transaction markers, so a committed
        # offset reaches the end of a transactional input (and lag is 0).
        owned = [TopicPartition(t, p) for t, p in self._owned_partitions()]
        offsets = []
        for tp in (self._consumer.position(owned) if owned else []):
            held = self._buffered.get((self._sub_of[tp.topic], tp.partition), {}).get(tp.topic)
            if held is not None:    # only what was processed: the first buffered record's
                tp.offset = int(held.column("offset")[0].as_py())
            if tp.offset >= 0 and self._committed.get((tp.topic, tp.partition)) != tp.offset:
                offsets.append(tp)
        for tp in offsets:
            # the task's stream times ride in the offset metadata (as Kafka
            # Streams does): a task resumed elsewhere, or after an abort,
            # judges late records as this one would have
            task = self.tasks[(self._sub_of[tp.topic], tp.partition)]
            times = task.stream_times()
            tp.metadata = json.dumps({"stream_time": times}, separators=(",", ":")) \
                if times else None
        if not offsets and not self._in_txn:
            return
        # The stores' write-back caches are not written into RocksDB here:
        # the changelog is a store's durability, and what RocksDB holds
        # counts after a crash only with a checkpoint, which flushes the
        # store itself (checkpoint_task). Writing every commit interval's
        # changes into RocksDB was a third of the exactly-once count's time
        # at 3,000,000 records, growing with the database (memtable
        # flushes, level-0 compactions on the same two cores).
        if self.eos:
            if not self._in_txn:
                self._producer.begin_transaction()
                self._in_txn = True
            if offsets:
                self._producer.send_offsets_to_transaction(
                    offsets, self._consumer.consumer_group_metadata())
            self._producer.commit_transaction()
            self._in_txn = False
        else:
            left = self._producer.flush(30)
            if left or self._delivery_errors:
                err, self._delivery_errors = self._delivery_errors, []
                raise errors.KafkaError(f"at_least_once commit: {left} undelivered, "
                                        f"errors {err[:3]}")
            if offsets:
                self._consumer.commit(offsets=offsets, asynchronous=False)
            for task in self.tasks.values():
                if task.changelog_records >= CHECKPOINT_DELTA and task.dir:
                    checkpoint_task(task, self._restorer)
                    task.changelog_records = 0
        self._committed.update({(tp.topic, tp.partition): tp.offset for tp in offsets})
        self._metrics["commits"] += 1

    def _abort_and_rewind(self) -> None:
        """Exactly-once after a failed transaction: nothing it did counts."""
        if self._in_txn:
            try:
                self._producer.abort_transaction()
            finally:
                self._in_txn = False
        self._drop_buffers()
        owned = [TopicPartition(t, p) for (t, p) in self._owned_partitions()]
        committed = self._consumer.committed(owned) if owned else []
        for tp in committed:
            self._consumer.seek(TopicPartition(tp.topic, tp.partition,
                                               tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        for task in self.tasks.values():
            task.discard_changelog()
        self._restore(list(self.tasks.values()), use_checkpoint=False)
        for task in self.tasks.values():
            task.resume(self._committed_stream_times(task, committed))
        self._metrics["aborts"] += 1

    def _committed_stream_times(self, task: StreamTask, committed=None) -> dict:
        """The stream times the last commit of ``task``'s partitions recorded."""
        if committed is None:
            committed = self._consumer.committed(
                [TopicPartition(t, task.partition) for t in task.sources])
        times: dict = {}
        for tp in committed:
            if tp.partition != task.partition or tp.topic not in task.sources or not tp.metadata:
                continue
            try:
                got = json.loads(tp.metadata).get("stream_time", {})
            except (ValueError, AttributeError):
                continue        # metadata not written by us
            for name, st in got.items():
                times[name] = max(times.get(name, -1), int(st))
        return times

    def _owned_partitions(self):
        return [(t, task.partition) for (sub, _), task in self.tasks.items()
                for t in task.sources]

    # ---- rebalance callbacks (called inside consume_batch) ----
    def _on_assign(self, consumer, partitions) -> None:
        wanted = {(self._sub_of[tp.topic], tp.partition) for tp in partitions}
        with self._lock:
            for key in list(self._suspended):
                if key not in wanted:       # committed when suspended: a clean close
                    self._close_task(self._suspended.pop(key), clean=True)
            created = []
            for key in sorted(wanted):
                if key in self.tasks:
                    continue
                task = self._suspended.pop(key, None)
                if task is None and key in self.standbys:
                    task = self.standbys.pop(key)     # promoted: restores only the tail
                    created.append(task)
                elif task is None:
                    sub = self.topology.subtopologies()[key[0]]
                    task = StreamTask(self.topology, sub, key[1], self.application_id,
                                      self.config["state.dir"], self.config["default.dsl.store"],
                                      self.errors, self.global_stores)
                    created.append(task)
                self.tasks[key] = task
            if any(t.restored_to is not None for t in created):
                self._assign_standbys()     # promoted: no longer fed as standbys
            self._restore(created)      # every new task's changelogs read at once
            for task in created:
                task.resume(self._committed_stream_times(task))
        self._standby_refresh = 0.0
        self.state = self.RUNNING

    def _on_revoke(self, consumer, partitions) -> None:
        self.state = self.REBALANCING
        try:
            self._commit()
        except KafkaError as exc:
            if not self.eos or getattr(exc, "fatal", False):
                raise
            self._abort_and_rewind()
            # the work since the last commit is aborted; tasks that leave
            # must not keep state that was not committed
            self._close_tasks(partitions, wipe=True)
            return
        self._close_tasks(partitions, wipe=False)

    def _on_lost(self, consumer, partitions) -> None:
        self.state = self.REBALANCING
        if self.eos and self._in_txn:
            try:
                self._producer.abort_transaction()
            except KafkaError:
                pass
            self._in_txn = False
        self._close_tasks(partitions, wipe=True)

    def _close_tasks(self, partitions, wipe: bool) -> None:
        gone = {(self._sub_of[tp.topic], tp.partition) for tp in partitions}
        for key in gone:    # after the commit: read again from the committed offsets
            self._buffered.pop(key, None)
            self._idle_since.pop(key, None)
        with self._lock:
            for key in gone:
                task = self.tasks.pop(key, None)
                if task is None:
                    continue
                if wipe:
                    task.close()
                else:
                    self._suspended[key] = task
            self._committed = {k: v for k, v in self._committed.items()
                               if (self._sub_of[k[0]], k[1]) not in gone}

    # ---- global tables ----
    def _start_global_tables(self) -> None:
        """Every global table's store, from nothing, read to the end of
        every partition of its topic before any task runs (Kafka's global
        state bootstrap); later records are applied between polls."""
        if not self.topology.global_tables:
            return
        for name, g in self.topology.global_tables.items():
            self.global_stores[name] = store = global_store(
                g.store, self.config["state.dir"], self.application_id,
                self.config["default.dsl.store"])
            store.wipe()
            self._global_store_of[g.topic] = store
        self._global_consumer = c = Consumer({
            **self._client_config(), "isolation.level":
            "read_committed" if self.eos else "read_uncommitted",
            "client.id": f"{self.application_id}-{self.instance}-global"})
        c.assign(self._global_partitions)
        ends = [c.get_watermark_offsets(tp)[1] for tp in self._global_partitions]
        while not self._stop.is_set():
            positions = [p.offset for p in c.position(self._global_partitions)]
            if all(pos >= end for pos, end in zip(positions, ends)):
                break
            self._poll_global(0.2)

    def _poll_global(self, timeout: float) -> None:
        if self._global_consumer is None:
            return
        batch = self._global_consumer.consume_batch(timeout)
        if not batch.num_rows:
            return
        topics = batch.column("topic")
        names = topics.dictionary.to_pylist()
        codes = topics.indices.to_numpy()
        with self._lock:
            for i in np.unique(codes):
                rows = batch.filter(pa.array(codes == i))
                apply_global(self._global_store_of[names[int(i)]], rows)
                self.global_records += rows.num_rows

    # ---- standby replicas ----
    def _standby_wanted(self) -> set | None:
        """The tasks this instance keeps standbys of, from the group's
        current assignment (None: the group is rebalancing, keep what is)."""
        app = self.application_id
        desc = self._standby_admin.describe_consumer_groups([app])[app].result()
        if desc.state != "Stable":
            return None
        members = sorted(desc.members, key=lambda m: m.client_id)
        mine = f"{app}-{self.instance}-consumer"
        me = next((i for i, m in enumerate(members) if m.client_id == mine), None)
        if me is None:
            return None
        n, replicas = len(members), int(self.config["num.standby.replicas"])
        logged = {sub.id for sub in self.topology.subtopologies()
                  if any(spec.logged for spec in sub.stores.values())}
        wanted = set()
        for i, m in enumerate(members):
            # the ``replicas`` members after i, cyclically, keep i's standbys
            if i != me and (me - i) % n <= replicas:
                wanted |= {(self._sub_of[tp.topic], tp.partition) for tp in m.assignment
                           if tp.topic in self._sub_of and self._sub_of[tp.topic] in logged}
        # a standby of a task the group already gave this instance is kept
        # until the consumer hears of it: the promotion takes it over
        wanted |= {(self._sub_of[tp.topic], tp.partition) for tp in members[me].assignment
                   if tp.topic in self._sub_of} & set(self.standbys)
        return wanted - set(self.tasks) - set(self._suspended)

    def _refresh_standbys(self) -> None:
        if self._standby_admin is None:
            self._standby_admin = AdminClient(self._client_config())
            self._standby_consumer = Consumer({
                **self._client_config(), "isolation.level":
                "read_committed" if self.eos else "read_uncommitted",
                "client.id": f"{self.application_id}-{self.instance}-standby"})
            self._changelog_sub = {spec.changelog(self.application_id): sub.id
                                   for sub in self.topology.subtopologies()
                                   for spec in sub.stores.values() if spec.logged}
        wanted = self._standby_wanted()
        if wanted is None or wanted == set(self.standbys):
            return
        with self._lock:
            for key in list(self.standbys):
                if key not in wanted:
                    self._close_standby(self.standbys.pop(key))
            for key in sorted(wanted - set(self.standbys)):
                sub = self.topology.subtopologies()[key[0]]
                task = StreamTask(self.topology, sub, key[1], self.application_id,
                                  self.config["state.dir"], self.config["default.dsl.store"],
                                  self.errors, self.global_stores)
                task.restored_to = {(tp.topic, tp.partition): start for tp, _, _, start, _ in
                                    start_offsets(task, self._restorer, use_checkpoint=True)}
                self.standbys[key] = task
        self._assign_standbys()

    def _close_standby(self, task: StreamTask) -> None:
        """Close a standby, checkpointing its persistent stores where it got
        to (it applied committed changelog records only), so that the task
        started here later restores from there."""
        offsets = {}
        try:
            for topic, name in task.changelogs.items():
                store = task.stores[name]
                if store.persistent and task.dir:
                    store.checkpoint_flush()
                    offsets[(topic, task.partition)] = task.restored_to[(topic, task.partition)]
            if offsets:
                write_checkpoint(task.dir, offsets)
        finally:
            task.close()

    def _assign_standbys(self) -> None:
        if self._standby_consumer is None:
            return
        tps = [TopicPartition(topic, partition, offset) for task in self.standbys.values()
               for (topic, partition), offset in task.restored_to.items()]
        if tps:
            self._standby_consumer.assign(tps)
        else:
            self._standby_consumer.unassign()

    def _poll_standbys(self, timeout: float) -> None:
        """Standby tasks follow their changelogs (refreshed from the group
        every ``standby.refresh.ms``)."""
        if not int(self.config["num.standby.replicas"]):
            return
        if time.monotonic() >= self._standby_refresh:
            self._standby_refresh = time.monotonic() + self.config["standby.refresh.ms"] / 1000
            try:
                self._refresh_standbys()
            except KafkaError as exc:       # the next refresh tries again
                log.warning("%s: standby refresh failed: %s", self.application_id, exc)
        if not self.standbys:
            return
        batch = self._standby_consumer.consume_batch(timeout)
        if not batch.num_rows:
            return
        with self._lock:
            for (topic, partition), rows in by_partition(batch):
                task = self.standbys.get((self._changelog_sub[topic], partition))
                if task is None or (topic, partition) not in task.restored_to:
                    continue
                task.stores[task.changelogs[topic]].restore(rows.column("key").to_pylist(),
                                                            rows.column("value"))
                task.restored_to[(topic, partition)] = rows.column("offset")[-1].as_py() + 1
                self._metrics["standby_records"] += rows.num_rows

    # ---- restore ----
    def _restore(self, tasks: list, use_checkpoint: bool = True) -> None:
        """Every store of ``tasks`` from its changelog partition, to the end
        (from the task's checkpoint where one holds: restore.py)."""
        if not tasks:
            return
        self.restored_records += restore_tasks(tasks, self._restorer, self._restore_listener,
                                               self.restore_progress, use_checkpoint)
        for task in tasks:
            task.restored_to = None
            if self.eos and task.dir:
                # its databases may now take changes that a transaction abort
                # undoes: after a crash they must not be trusted
                delete_checkpoint(task.dir)
            task.changelog_records = 0

    def _close_task(self, task: StreamTask, clean: bool) -> None:
        """Close ``task``; a clean close (everything it did committed)
        writes its checkpoint first."""
        if clean and task.dir and task.changelogs and self._restorer is not None:
            try:
                checkpoint_task(task, self._restorer)
            except KafkaError as exc:       # no checkpoint: the next run restores it whole
                log.warning("%s: task %s checkpoint not written: %s", self.application_id,
                            task.id, exc)
        task.close()


class _ThreadedKafkaStreams(KafkaStreams):
    """KafkaStreams with ``num.stream.threads`` N > 1: N stream threads,
    each a single-thread KafkaStreams of its own in the application's group
    (as Kafka's StreamThreads are: each its own consumer, so tasks spread
    over the threads of all instances), with ``instance.id`` and
    transactional.id suffixed ``-<i>`` and its own state directory
    ``<state.dir>/thread-<i>`` (a task that moves between threads of one
    instance restores from its changelog or its checkpoint there, and two
    threads never open one RocksDB database). This object answers for all
    of them. Under the GIL the threads overlap where Arrow, RocksDB and the
    client's I/O release it."""

    def __init__(self, topology: Topology, config: dict):
        base = StreamsConfig(config)
        self.topology, self.config = topology, base
        self.application_id = base["application.id"]
        self.instance = base["instance.id"] or uuid.uuid4().hex[:12]
        self.threads = []
        for i in range(1, int(base["num.stream.threads"]) + 1):
            thread = KafkaStreams(topology, {
                **config, "num.stream.threads": 1,
                "instance.id": f"{base['instance.id']}-{i}" if base["instance.id"] else None,
                "state.dir": os.path.join(base["state.dir"], f"thread-{i}")})
            thread.instance = f"{self.instance}-{i}"
            thread._owner = self
            self.threads.append(thread)
        self._owner = None
        self._uncaught_handler = None
        self._death_reported = False
        self._thread = None

    @property
    def state(self) -> str:
        states = {t.state for t in self.threads}
        for s in (self.ERROR, self.PENDING_SHUTDOWN, self.REBALANCING, self.CREATED):
            if s in states:
                return s
        return states.pop()         # all RUNNING or all NOT_RUNNING

    @property
    def error(self):
        return next((t.error for t in self.threads if t.error is not None), None)

    def start(self) -> None:
        for t in self.threads:
            t.start()
        self.partitions = self.threads[0].partitions

    def close(self, timeout: float = 30.0, leave_group: bool = False) -> None:
        for t in self.threads:
            t._stop.set()           # all threads stop at once, then each commits and leaves
        for t in self.threads:
            t.close(timeout, leave_group)

    def set_global_state_restore_listener(self, listener) -> None:
        for t in self.threads:
            t.set_global_state_restore_listener(listener)

    def _merged(self, attr) -> dict:
        out = {}
        for t in self.threads:
            with t._lock:
                out.update(getattr(t, attr))
        return out

    @property
    def tasks(self) -> dict:
        return self._merged("tasks")

    @property
    def standbys(self) -> dict:
        return self._merged("standbys")

    @property
    def restored_records(self) -> int:
        return sum(t.restored_records for t in self.threads)

    @property
    def restore_progress(self) -> RestoreProgress:
        merged = RestoreProgress()
        for t in self.threads:
            merged.tasks.update(t.restore_progress.tasks)
        return merged

    def metrics(self) -> collections.Counter:
        total = collections.Counter()
        for t in self.threads:
            total.update(t.metrics())
        return total

    def store(self, name: str):
        return ThreadsStores([t.store(name) for t in self.threads])
