"""The ``kafkalite`` Spark sink: DataFrame rows as records, batch and streaming.

Columns as Spark's Kafka sink: ``value`` (binary or string) is required;
``key`` (binary or string), ``topic`` (string; the ``topic`` option is the
default for rows without one), ``partition`` (int; null: by key) and
``headers`` (array<struct<key string, value binary>>) are optional.

Each Spark task gets Arrow batches (DataSourceArrowWriter), groups the rows
by (topic, partition) with vectorised Arrow kernels and hands each group to
``Producer.produce_batch`` (one Cython loop per batch). Rows with headers
go through ``Producer.produce``, which is the only path that carries
headers.

At-least-once (the default, as Spark's Kafka sink): a task finishes only
when every record is acknowledged (acks=all by default), and fails if any
is not, so Spark retries it. The records of a task that succeeded stay
when another task or the job fails, and a retried task or job writes them
again.

Exactly-once (``exactlyOnce=true``), for read_committed readers. Spark's
commit protocol (tasks' ``write`` on executors, ``commit``/``abort`` on the
driver) is a two-phase commit, and Kafka transactions can take part in it
because a transaction belongs to its transactional id, producer id and
epoch, not to a connection: the coordinator ends it for whoever names
those (Flink's Kafka sink commits after a restart the same way).

- Phase one, in each task: a transactional Producer whose id is
  ``<transactionalIdPrefix>-<run>-<Spark partition>`` (run: a fresh id per
  batch write job; a streaming query's id, stable across restarts from its
  checkpoint). ``init_transactions`` fences every earlier producer of the
  id -- a failed or speculative attempt of the same task, or a crashed run
  -- and aborts the transaction it left open. The task writes its rows in
  one transaction, waits until all are acknowledged, and returns the id,
  producer id and epoch without ending the transaction: the records are in
  the log, invisible to read_committed readers.
- Phase two, on the driver: ``commit`` checks with DescribeTransactions
  that every task's transaction is still open under the epoch the task
  had (a later attempt, or the transaction timeout, may have aborted it),
  then sends EndTxn(commit) for each, and waits until the coordinator has
  written every marker (CompleteCommit), so the output is visible to
  read_committed readers when the write returns. If a check fails, or on
  ``abort`` (a failed task or job), the driver fences every open
  transaction of the job: nothing of it becomes visible. ``abort`` keeps
  fencing what opens for a few seconds more (ABORT_SETTLE_S), because a task
  Spark cancelled runs on in its Python worker until that is killed.
- Streaming replays: each task's transaction also commits, as a consumer
  group offset (group = the transactional id, partition 0 of the ``topic``
  option's topic, offset = batch id + 1), that its Spark partition of the
  micro-batch is written. A micro-batch that Spark runs again after a driver
  crash -- in ``commit`` or before the checkpoint recorded it -- finds that
  record in the partitions already committed and writes nothing there; the
  others are written again (their earlier, uncommitted transaction is
  fenced and aborted). EndTxn(commit) of a transaction that is already
  committed is answered with success, so ``commit`` is idempotent too.

What that guarantees: a read_committed reader sees every row of a
successful write exactly once and nothing of a failed one, through task
failures and retries, speculative attempts (a fenced attempt fails the
job rather than duplicating: leave ``spark.speculation`` off), driver
aborts and, for streaming, driver crashes and restarts from the
checkpoint. Its limits:

- The job's transactions are ended one by one: readers may see some
  partitions' output a few milliseconds before others', and a driver that
  dies between two EndTxn leaves a batch job half visible (the rest is
  aborted by the transaction timeout). A streaming query completes such a
  micro-batch when it restarts.
- Streaming replays rely on Spark's rule that a replayed micro-batch is the
  same data; here, partition by partition (true for deterministic queries:
  Spark keeps the shuffle partition count in the checkpoint).
- A task's transaction is open from its first record until the driver
  commits the job, so the job must commit within ``transaction.timeout.ms``
  (``kafkalite.transaction.timeout.ms``; 15 minutes by default here, the
  server's ``transaction_max_timeout_ms``), and while it is open it holds
  back the last stable offset of the partitions it writes: read_committed
  readers of them wait for the commit. A transaction whose driver died is
  aborted by that timeout (a streaming query's restart fences it at once).
- read_uncommitted readers see everything, aborted attempts included.
- A stream's progress is a group offset, kept as long as the server keeps
  offsets of an empty group (``offsets_retention_minutes``); a stream that
  crashed in the window above and restarts after that writes the replayed
  micro-batch again.

Who calls: Spark, through KafkaLiteDataSource.writer / streamWriter
(source.py): ``write`` in the executors' Python workers, ``commit`` and
``abort`` in a Python worker on the driver.
"""
from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, ShortType,
                               StringType, StructType)

from kafkalite import errors
from kafkalite.client import AdminClient, Producer, TopicPartition
from kafkalite.client.connection import parse_bootstrap
from kafkalite.client.metadata import Metadata
from kafkalite.client.types import ConsumerGroupMetadata
from kafkalite.protocol import ApiKey
from kafkalite_spark import options as opt

log = logging.getLogger("kafkalite.spark")

FLUSH_TIMEOUT_S = 300.0
# exactlyOnce: how long a transaction request (InitProducerId, EndTxn) may
# be answered "not now" (the previous transaction of the id completing)
TXN_REQUEST_TIMEOUT_S = 120.0
# how long the driver waits for committed transactions' markers
VISIBLE_TIMEOUT_S = 120.0
DESCRIBE_POLL_S = 0.02
# How long a job's abort keeps watching its ids after fencing them: a task
# Spark cancelled keeps running in its Python worker until the worker is
# killed (spark.python.task.killTimeout, 2 s by default), and one that took
# its id after the fence opens a transaction the fence did not see.
ABORT_SETTLE_S = 5.0
ABORT_SETTLE_POLL_S = 0.25
# Spark's local properties of a streaming query's tasks
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass
class KafkaLiteCommitMessage(WriterCommitMessage):
    records: int


@dataclass
class TransactionCommitMessage(WriterCommitMessage):
    """A task's prepared transaction: every record is written and
    acknowledged inside it; the driver ends it."""
    transactional_id: str
    run_id: str
    producer_id: int
    producer_epoch: int
    records: int
    # it holds partitions (records, or a micro-batch's progress): the driver must end it
    open: bool
    batch_id: int = -1
    # streaming: an earlier run committed this partition of the micro-batch; nothing written
    already_committed: bool = False


class TransactionLostError(errors.KafkaError):
    """A task's prepared transaction was aborted before the driver could
    commit it (fenced by another attempt of the task, or past its
    transaction timeout); the write fails and nothing of it is visible."""
    name = "TRANSACTION_LOST"


def check_schema(schema: StructType, o: opt.SinkOptions) -> None:
    """Reject a DataFrame the sink cannot write, at planning time."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    binary_or_string = (BinaryType, StringType)
    if "value" not in fields:
        raise opt.OptionError("value", "the DataFrame needs a 'value' column (binary or string) "
                                       f"to write to kafkalite; it has {schema.fieldNames()}")
    integer = (IntegerType, ShortType, LongType)
    for name, kinds in (("value", binary_or_string), ("key", binary_or_string),
                        ("topic", (StringType,)), ("partition", integer)):
        if name in fields and not isinstance(fields[name], kinds):
            raise opt.OptionError(name, f"column {name!r} must be "
                                        f"{' or '.join(k.typeName() for k in kinds)}, "
                                        f"not {fields[name].simpleString()}")
    if "headers" in fields:
        h = fields["headers"]
        ok = (isinstance(h, ArrayType) and isinstance(h.elementType, StructType)
              and [f.name for f in h.elementType.fields] == ["key", "value"]
              and isinstance(h.elementType.fields[0].dataType, StringType)
              and isinstance(h.elementType.fields[1].dataType, binary_or_string))
        if not ok:
            raise opt.OptionError("headers", "column 'headers' must be array<struct<key: string, "
                                             f"value: binary>>, not {h.simpleString()}")
    if "topic" not in fields and o.topic is None:
        raise opt.OptionError("topic", "no topic to write to: set the 'topic' option or give "
                                       "the DataFrame a 'topic' column")
    if o.topic is not None:
        admin = AdminClient({"bootstrap.servers": o.client_config["bootstrap.servers"]})
        try:
            tm = admin.list_topics(o.topic).topics.get(o.topic)
            if tm is None or tm.error is not None or not tm.partitions:
                raise opt.OptionError("topic", f"topic {o.topic!r} does not exist")
        finally:
            admin.close()


def _binary(column: pa.Array) -> list:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = column.cast(pa.binary())
    return column.to_pylist()


def _lengths(column: pa.Array) -> np.ndarray:
    return pc.fill_null(pc.binary_length(column), 0).to_numpy().astype(np.int64)


class _Sender:
    """One Producer per task; collects delivery errors."""

    def __init__(self, o: opt.SinkOptions, config: dict | None = None):
        self.options = o
        self.producer = Producer(o.client_config if config is None else config)
        self.failures: list = []
        self.records = 0

    def _report(self, err, _):
        if err is not None:
            self.failures.append(err)

    def send(self, batch: pa.RecordBatch) -> None:
        names = {n.lower(): i for i, n in enumerate(batch.schema.names)}
        n = batch.num_rows
        if n == 0:
            return
        topic_col = batch.column(names["topic"]) if "topic" in names else None
        if topic_col is not None and self.options.topic is not None:
            topic_col = topic_col.fill_null(self.options.topic)
        if topic_col is not None and topic_col.null_count:
            raise ValueError("a row has a null topic and the 'topic' option is not set")
        part_col = batch.column(names["partition"]) if "partition" in names else None
        headers = batch.column(names["headers"]) if "headers" in names else None
        with_headers = (np.zeros(n, dtype=bool) if headers is None else
                        pc.fill_null(pc.list_value_length(headers), 0).to_numpy() > 0)
        # groups of rows by (topic, partition): each is one produce_batch call
        if topic_col is None:
            topics = np.zeros(n, dtype=np.int32)
            topic_names = [self.options.topic]
        else:
            enc = pc.dictionary_encode(topic_col)
            topics = enc.indices.to_numpy(zero_copy_only=False)
            topic_names = enc.dictionary.to_pylist()
        parts = (np.full(n, -1, dtype=np.int64) if part_col is None
                 else pc.fill_null(part_col.cast(pa.int64()), -1).to_numpy())
        group = topics.astype(np.int64) * (1 << 32) + (parts + 1)
        values = batch.column(names["value"])
        keys = batch.column(names["key"]) if "key" in names else None
        # one produce_batch per (topic, partition): it cuts record batches
        # at batch.size bytes itself
        for g in np.unique(group[~with_headers]).tolist():
            idx = np.flatnonzero((group == g) & ~with_headers)
            topic, partition = topic_names[g >> 32], (g & 0xFFFFFFFF) - 1
            take = pa.array(idx)
            self.producer.produce_batch(
                topic, _binary(values.take(take)),
                None if keys is None else _binary(keys.take(take)),
                partition=partition, on_delivery=self._report)
        if with_headers.any():
            idx = np.flatnonzero(with_headers)
            take = pa.array(idx)
            vals = _binary(values.take(take))
            ks = [None] * len(idx) if keys is None else _binary(keys.take(take))
            hs = headers.take(take).to_pylist()
            for j, i in enumerate(idx.tolist()):
                self.producer.produce(
                    topic_names[topics[i]], vals[j], ks[j], partition=int(parts[i]),
                    headers=[(h["key"], h["value"]) for h in hs[j]], on_delivery=self._report)
        self.records += n

    def deliver(self) -> None:
        """Wait until every record sent is acknowledged; raise the first failure."""
        left = self.producer.flush(FLUSH_TIMEOUT_S)
        if self.failures:
            raise self.failures[0] if isinstance(self.failures[0], Exception) else \
                errors.KafkaError(f"{len(self.failures)} writes failed: {self.failures[0]}")
        if left:
            raise errors.RequestTimedOutError(f"{left} records were not acknowledged within "
                                              f"{FLUSH_TIMEOUT_S:.0f} s")

    def finish(self) -> KafkaLiteCommitMessage:
        try:
            self.deliver()
        finally:
            self.producer.close(0)
        return KafkaLiteCommitMessage(self.records)


def write_batches(o: opt.SinkOptions, iterator) -> KafkaLiteCommitMessage:
    sender = _Sender(o)
    try:
        for batch in iterator:
            sender.send(batch)
    except BaseException:
        sender.producer.close(0)
        raise
    return sender.finish()


# ---- exactly-once: phase one, in the tasks ---------------------------------------------------

def transactional_id(o: opt.SinkOptions, run_id: str, partition: int) -> str:
    return f"{o.transactional_id_prefix}-{run_id}-{partition}"


def committed_batches(o: opt.SinkOptions, tid: str) -> int:
    """Streaming: how many micro-batches of the task ``tid`` are committed
    (the offset its transactions commit; 0 if none)."""
    admin = AdminClient({"bootstrap.servers": o.client_config["bootstrap.servers"]})
    try:
        got = admin.list_consumer_group_offsets(tid, [TopicPartition(o.topic, 0)]).result(
            TXN_REQUEST_TIMEOUT_S)
    finally:
        admin.close()
    return max(got[0].offset, 0) if got else 0


def write_transactional(o: opt.SinkOptions, iterator, run_id: str, partition: int,
                        batch_id: int | None = None) -> TransactionCommitMessage:
    """Phase one of an exactly-once write: the task's rows in one transaction
    of its own transactional id, flushed and left open for the driver.
    ``batch_id``: a streaming micro-batch, whose progress goes in the
    transaction and which is not written again once committed."""
    tid = transactional_id(o, run_id, partition)
    sender = _Sender(o, {**o.client_config, "transactional.id": tid})
    p = sender.producer
    try:
        # fences the earlier producers of the id (failed or speculative
        # attempts, a crashed run) and aborts what they left open
        p.init_transactions(TXN_REQUEST_TIMEOUT_S)
        if batch_id is not None and committed_batches(o, tid) > batch_id:
            for _ in iterator:
                pass
            return TransactionCommitMessage(tid, run_id, -1, -1, 0, open=False,
                                            batch_id=batch_id, already_committed=True)
        p.begin_transaction()
        for batch in iterator:
            sender.send(batch)
        if batch_id is not None:
            p.send_offsets_to_transaction([TopicPartition(o.topic, 0, batch_id + 1)],
                                          ConsumerGroupMetadata(tid), TXN_REQUEST_TIMEOUT_S)
        sender.deliver()
        # The producer id and epoch that own the transaction; the client has
        # no public accessor for them (Kafka's Java client neither: Flink
        # reads them by reflection).
        return TransactionCommitMessage(tid, run_id, p._pid, p._epoch, sender.records,
                                        open=sender.records > 0 or batch_id is not None,
                                        batch_id=-1 if batch_id is None else batch_id)
    except BaseException:
        # release the partitions' last stable offset now rather than at the
        # driver's abort or the next attempt
        try:
            p.abort_transaction(TXN_REQUEST_TIMEOUT_S)
        except Exception as exc:        # not in a transaction, or fenced: nothing to release
            log.debug("abort of %s after a failed write: %s", tid, exc)
        raise
    finally:
        p.close(0)


# ---- exactly-once: phase two, on the driver --------------------------------------------------

class _Transactions:
    """The driver's requests to the transaction coordinator about the
    tasks' transactions (native protocol, like the Producer's own)."""

    def __init__(self, o: opt.SinkOptions):
        self.options = o
        self.meta = Metadata(parse_bootstrap(o.client_config["bootstrap.servers"]),
                             "kafkalite-spark-driver")

    def close(self) -> None:
        self.meta.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _request(self, api_key: int, body: dict, what: str) -> dict:
        """The answer, once it is not a retriable error (or time is up)."""
        deadline = time.monotonic() + TXN_REQUEST_TIMEOUT_S
        backoff = self.options.client_config.get("retry.backoff.ms", 100)
        backoff = int(backoff) / 1000.0
        while True:
            try:
                resp = self.meta.admin_request(api_key, body, max(deadline - time.monotonic(), 0.1))
            except errors.KafkaError as exc:
                if not exc.retriable or time.monotonic() >= deadline:
                    raise
                time.sleep(backoff)
                continue
            code = resp.get("error_code", 0)
            if code and errors.error_for_code(code).retriable and time.monotonic() < deadline:
                time.sleep(backoff)
                continue
            if code:
                raise errors.error_for_code(code)(f"{what}: {errors.error_for_code(code).name}")
            return resp

    def describe(self, tids) -> dict:
        """{transactional id: DescribeTransactions entry} of the ids the
        coordinator knows."""
        resp = self._request(ApiKey.DESCRIBE_TRANSACTIONS, {"transactional_ids": sorted(tids)},
                             "DescribeTransactions")
        return {t["transactional_id"]: t for t in resp["transaction_states"]
                if t["error_code"] == 0}

    def commit(self, m: TransactionCommitMessage) -> None:
        """EndTxn(commit) as the task's producer; a success for one already committed."""
        self._request(ApiKey.END_TXN, {"transactional_id": m.transactional_id,
                                       "producer_id": m.producer_id,
                                       "producer_epoch": m.producer_epoch, "committed": True},
                      f"commit of {m.transactional_id}")

    def fence(self, tid: str) -> None:
        """Take the id with a new epoch (InitProducerId, as a new producer
        would): its open transaction is aborted and its producer, if it still
        runs, can write nothing more."""
        self._request(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": tid, "producer_id": -1, "producer_epoch": -1,
            "transaction_timeout_ms": int(self.options.client_config.get(
                "transaction.timeout.ms", opt.EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS))},
            f"fencing {tid}")

    def abort_open(self, tids) -> list:
        """Fence those of ``tids`` whose transaction is open; -> their ids."""
        open_ = [tid for tid, t in self.describe(tids).items()
                 if t["transaction_state"] == "Ongoing"]
        for tid in open_:
            self.fence(tid)
        return open_

    def wait_complete(self, tids, timeout: float) -> list:
        """Wait until every transaction of ``tids`` is CompleteCommit (its
        markers written: visible); -> the ids that are not by ``timeout``."""
        deadline = time.monotonic() + timeout
        while True:
            states = self.describe(tids)
            left = [tid for tid in tids
                    if states.get(tid, {}).get("transaction_state") != "CompleteCommit"]
            if not left or time.monotonic() >= deadline:
                return left
            time.sleep(DESCRIBE_POLL_S)


def _ours(entry: dict | None, m: TransactionCommitMessage) -> bool:
    """The coordinator's entry still describes the task's transaction,
    open or being (or already) committed."""
    return (entry is not None
            and (entry["producer_id"], entry["producer_epoch"]) == (m.producer_id,
                                                                    m.producer_epoch)
            and entry["transaction_state"] in ("Ongoing", "PrepareCommit", "CompleteCommit"))


def commit_transactions(o: opt.SinkOptions, messages) -> None:
    """Phase two: end every task's transaction with a commit, or none."""
    prepared = [m for m in messages if m is not None and m.open]
    if not prepared:
        return
    tids = [m.transactional_id for m in prepared]
    with _Transactions(o) as coordinator:
        states = coordinator.describe(tids)
        lost = [m for m in prepared if not _ours(states.get(m.transactional_id), m)]
        if lost:
            coordinator.abort_open(tids)
            raise TransactionLostError(
                f"the transaction of {lost[0].transactional_id} (and {len(lost) - 1} more) was "
                f"aborted before the job could commit: fenced by another attempt of the task "
                f"(speculative execution) or open longer than transaction.timeout.ms "
                f"({o.client_config.get('transaction.timeout.ms')} ms); every transaction of "
                f"the job is aborted")
        for m in prepared:
            coordinator.commit(m)
        left = coordinator.wait_complete(tids, VISIBLE_TIMEOUT_S)
        if left:
            # committed (durably prepared), the markers will follow
            log.warning("%d committed transaction(s), %s first, not yet visible after %.0f s",
                        len(left), left[0], VISIBLE_TIMEOUT_S)


def abort_transactions(o: opt.SinkOptions, run_id: str | None, messages) -> None:
    """Abort every open transaction of the job: its tasks' ids, the
    prepared ones and those of tasks that failed."""
    tids = {m.transactional_id for m in messages if m is not None}
    run_id = run_id or next((m.run_id for m in messages if m is not None), None)
    if run_id is not None:
        tids |= {transactional_id(o, run_id, p) for p in range(len(messages))}
    if tids:
        with _Transactions(o) as coordinator:
            # every id, open or not: a task still running (cancelled, not yet
            # stopped) that took its id but had not written is fenced too,
            # or it could open a transaction after this abort that would
            # hold read_committed readers until transaction.timeout.ms
            for tid in sorted(tids):
                coordinator.fence(tid)
            # a cancelled task that reached init_transactions after the fence
            # takes the id back and may begin a transaction, then dies with its
            # Python worker: fence again whatever is open until the cancelled
            # tasks are gone, or read_committed readers of its partitions wait
            # for transaction.timeout.ms (15 minutes)
            deadline = time.monotonic() + ABORT_SETTLE_S
            while time.monotonic() < deadline:
                time.sleep(ABORT_SETTLE_POLL_S)
                coordinator.abort_open(sorted(tids))


def _task():
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("exactlyOnce: write() runs in a Spark task")
    return ctx


def _stream_task() -> tuple[str, int, int]:
    """(query id, batch id, partition) of a streaming write task."""
    ctx = _task()
    query_id, batch_id = (ctx.getLocalProperty(QUERY_ID_PROPERTY),
                          ctx.getLocalProperty(BATCH_ID_PROPERTY))
    if query_id is None or batch_id is None:
        raise RuntimeError(f"exactlyOnce: the task has no {QUERY_ID_PROPERTY} / "
                           f"{BATCH_ID_PROPERTY} local property; this Spark version does not "
                           f"say which query and micro-batch it runs")
    return query_id, int(batch_id), ctx.partitionId()


# ---- the writers ----------------------------------------------------------------------------

class KafkaLiteBatchWriter(DataSourceArrowWriter):
    def __init__(self, o: opt.SinkOptions, schema: StructType):
        check_schema(schema, o)
        self.options = o
        # exactlyOnce: this write job's part of its tasks' transactional ids
        self.job_id = uuid.uuid4().hex if o.exactly_once else None

    def write(self, iterator):
        if self.options.exactly_once:
            return write_transactional(self.options, iterator, self.job_id,
                                       _task().partitionId())
        return write_batches(self.options, iterator)

    def commit(self, messages) -> None:
        # at-least-once: every record was acknowledged when its task's write() returned
        if self.options.exactly_once:
            commit_transactions(self.options, messages)

    def abort(self, messages) -> None:
        # at-least-once: records written by tasks that succeeded stay
        if self.options.exactly_once:
            abort_transactions(self.options, self.job_id, messages)


class KafkaLiteStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, o: opt.SinkOptions, schema: StructType):
        check_schema(schema, o)
        if o.exactly_once and o.topic is None:
            raise opt.OptionError("topic", "exactlyOnce on a streaming query needs the 'topic' "
                                           "option (rows may still name other topics): partition "
                                           "0 of that topic keys the consumer-group offsets that "
                                           "record which micro-batches are committed")
        self.options = o

    def write(self, iterator):
        if self.options.exactly_once:
            query_id, batch_id, partition = _stream_task()
            return write_transactional(self.options, iterator, query_id, partition, batch_id)
        return write_batches(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        if self.options.exactly_once:
            stray = [m for m in messages if m is not None and m.batch_id != batchId]
            if stray:
                raise RuntimeError(f"exactlyOnce: micro-batch {batchId} got the transaction "
                                   f"of micro-batch {stray[0].batch_id}")
            commit_transactions(self.options, messages)

    def abort(self, messages, batchId: int) -> None:
        if self.options.exactly_once:
            abort_transactions(self.options, None, messages)
