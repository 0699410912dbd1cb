"""The ``kafkalite`` Spark source: topics as DataFrames, batch and streaming.

Planning (driver-side Python): ``partitions()`` / ``latestOffset()`` ask
the server which partitions the query reads and where their offsets are,
with a short-lived Consumer, and plan one ``OffsetRange`` per partition, or
several when ``minPartitions`` / ``maxRecordsPerPartition`` ask for more.
Reading (executor-side Python): ``read()`` borrows the Python worker's
Consumer (task_consumers.py: one per worker process, kept from task to
task), fetches the range as planned (the log's bounds are asked only when
a fetch shows the range is no longer there) and yields pyarrow
RecordBatches in Spark's Kafka schema; the records are decoded batch-wise
in Cython (Consumer.consume_batch, see kafkalite.client.arrow), never one
Python object per record. Readers and partitions hold only plain data, so
Spark can pickle them.

Streaming offsets are Spark's Kafka JSON, ``{"topic": {"0": 42}}``: the
next offset to read per partition. A partition that appears after the
query started is read from its earliest offset, as Spark's Kafka source does.

Isolation (``kafkalite.isolation.level``): with read_committed every
Consumer here is a read_committed one, so "latest" is the last stable
offset (ListOffsets with the isolation level: the first offset of the
oldest open transaction, or the high watermark), a range never reaches
past it, and the records of aborted transactions are dropped while the
batch is decoded (the Consumer's aborted-transaction filter); the control
records (commit and abort markers) are never rows either. A read_committed
query therefore never returns a record of an aborted or still open
transaction, and a record that follows an open transaction waits for it
to end, as with Kafka.
"""
from __future__ import annotations

import datetime
import os
import time
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import (DataSource, DataSourceReader, DataSourceStreamReader,
                                    EqualNullSafe, EqualTo, GreaterThan, GreaterThanOrEqual, In,
                                    InputPartition, IsNotNull, LessThan, LessThanOrEqual)
from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, StringType,
                               StructField, StructType, TimestampType)

from kafkalite import errors
from kafkalite.client import Consumer, TopicPartition
from kafkalite.client.types import OFFSET_END
from kafkalite_spark import options as opt
from kafkalite_spark import task_consumers

HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()),
                                     StructField("value", BinaryType())]))
# Spark's Kafka source schema (KafkaRecordToRowConverter), column for column.
SCHEMA = StructType([
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])
SCHEMA_WITH_HEADERS = StructType(SCHEMA.fields + [StructField("headers", HEADERS_TYPE)])

# Arrow types Spark checks the yielded batches against (to_arrow_schema of
# the schemas above, timezone UTC): the list child is named "element".
_ARROW_TS = pa.timestamp("us", tz="UTC")
_ARROW_HEADERS = pa.list_(pa.field("element", pa.struct([("key", pa.string()),
                                                          ("value", pa.binary())])))
ARROW_SCHEMA = pa.schema([("key", pa.binary()), ("value", pa.binary()), ("topic", pa.string()),
                          ("partition", pa.int32()), ("offset", pa.int64()),
                          ("timestamp", _ARROW_TS), ("timestampType", pa.int32())])


class DataLossError(errors.OffsetOutOfRangeError):
    """Records a query should read are gone (deleted by retention, or the
    partition was deleted); raised unless failOnDataLoss is false."""


def _data_loss(message: str) -> DataLossError:
    return DataLossError(message + ". Some data may have been lost, because it is no longer "
                                   "available in kafkalite (retention, or a deleted topic). If "
                                   "you want the query to go on, set failOnDataLoss to false.")


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Offsets [start, end) of one partition; start EARLIEST (-2) means the
    partition's log start (a partition new to a streaming query)."""
    topic: str
    partition: int
    start: int
    end: int


# ---- planning (driver) ------------------------------------------------------------------------

def _consumer(o: opt.SourceOptions) -> Consumer:
    return Consumer(o.client_config)


def topic_partitions(o: opt.SourceOptions, consumer: Consumer, *, must_exist: bool) -> list:
    """The (topic, partition)s the query reads now, sorted."""
    if o.strategy == "assign":
        meta = consumer.list_topics(timeout=o.poll_timeout_ms / 1000)
        missing = [(t, p) for t, p in o.assigned
                   if t not in meta.topics or p not in meta.topics[t].partitions]
        if missing and must_exist:
            raise opt.OptionError("assign", "no such partitions: " + ", ".join(
                f"{t}-{p}" for t, p in missing))
        return [tp for tp in o.assigned if tp not in missing]
    meta = consumer.list_topics(timeout=o.poll_timeout_ms / 1000)
    if o.strategy == "subscribe" and must_exist:
        missing = [t for t in o.topics if t not in meta.topics]
        if missing:
            raise opt.OptionError("subscribe", f"topics {missing} do not exist")
    return sorted((t, p) for t, tm in meta.topics.items() if o.matches(t)
                  for p in tm.partitions)


def watermarks(consumer: Consumer, tps) -> dict:
    """{(topic, partition): (log start, end)} -- the end being the last
    stable offset with read_committed -- in one ListOffsets a leader for
    the starts and one for the ends (the protocol's timestamps -2, earliest,
    and -1, latest), not two round trips a partition."""
    if not tps:
        return {}
    starts = consumer.offsets_for_times([TopicPartition(t, p, opt.EARLIEST) for t, p in tps])
    ends = consumer.offsets_for_times([TopicPartition(t, p, opt.LATEST) for t, p in tps])
    return {(s.topic, s.partition): (s.offset, e.offset) for s, e in zip(starts, ends)}


def resolve(spec: opt.OffsetSpec, tps, consumer: Consumer, marks: dict, *,
            starting: bool) -> dict:
    """{(topic, partition): offset} for ``spec`` over ``tps`` (marks: low, high)."""
    if spec.kind == "earliest":
        return {tp: marks[tp][0] for tp in tps}
    if spec.kind == "latest":
        return {tp: marks[tp][1] for tp in tps}
    if spec.kind == "offsets":
        missing = [tp for tp in tps if tp not in spec.offsets]
        if missing:
            raise opt.OptionError(spec.option, "per-partition offsets must name every partition "
                                               "the query reads; missing " + ", ".join(
                                                   f"{t}-{p}" for t, p in missing))
        return {tp: marks[tp][0] if spec.offsets[tp] == opt.EARLIEST else
                marks[tp][1] if spec.offsets[tp] == opt.LATEST else spec.offsets[tp]
                for tp in tps}
    if spec.kind == "timestamps":
        missing = [tp for tp in tps if tp not in spec.offsets]
        if missing:
            raise opt.OptionError(spec.option, "per-partition timestamps must name every "
                                               "partition the query reads; missing " + ", ".join(
                                                   f"{t}-{p}" for t, p in missing))
        stamps = {tp: spec.offsets[tp] for tp in tps}
    else:
        stamps = {tp: spec.timestamp for tp in tps}
    found = consumer.offsets_for_times([TopicPartition(t, p, ts) for (t, p), ts in stamps.items()])
    out = {}
    for r in found:
        tp = (r.topic, r.partition)
        if r.offset == OFFSET_END or r.offset < 0:
            # No record at or after the timestamp: an end is the log end; a
            # start follows startingOffsetsByTimestampStrategy.
            if starting and spec.no_match == "error":
                raise opt.OptionError(spec.option, f"{tp[0]}-{tp[1]} has no record with a "
                                                   f"timestamp >= {stamps[tp]} (set "
                                                   f"startingOffsetsByTimestampStrategy to latest "
                                                   f"to start at the log end instead)")
            out[tp] = marks[tp][1]
        else:
            out[tp] = r.offset
    return out


# Default planning: ranges are split so that every core of the machine
# planning the query has work (Spark tasks of about equal size), but no task
# gets fewer records than this: a task costs a Consumer, a fetch session and
# Spark's per-task overhead, which below ~a second of reading shows.
MIN_TASK_RECORDS = 1_000_000


def batch_offsets(o: opt.SourceOptions, consumer: Consumer) -> tuple[list, dict, dict]:
    """The topic partitions of a batch read, with their start and end
    offsets resolved; a start after its end is refused (OptionError)."""
    tps = topic_partitions(o, consumer, must_exist=True)
    marks = watermarks(consumer, tps)
    starts = resolve(o.starting, tps, consumer, marks, starting=True)
    ends = resolve(o.ending, tps, consumer, marks, starting=False)
    for tp in tps:
        if starts[tp] > ends[tp]:
            raise opt.OptionError(o.starting.option, f"{tp[0]}-{tp[1]}: starting offset "
                                                     f"{starts[tp]} is after the ending offset "
                                                     f"{ends[tp]}")
    return tps, starts, ends


def split_ranges(ranges: list[OffsetRange], min_partitions: int | None,
                 max_records: int | None, cores: int | None = None) -> list[OffsetRange]:
    """Spark's KafkaOffsetRangeCalculator: with more Spark partitions wanted
    than Kafka partitions, split big ranges in proportion to their size; and
    no range larger than ``max_records``. Without ``min_partitions``, a
    range larger than both ``MIN_TASK_RECORDS`` and the ``cores``-th part
    of all records is split into pieces no larger than that part, so that a
    one-partition topic keeps every core busy and a big partition does not
    leave the cores idle while it alone is read."""
    ranges = [r for r in ranges if r.end > r.start or r.start == opt.EARLIEST]
    sized = [r for r in ranges if r.start >= 0]
    total = sum(r.end - r.start for r in sized)
    pieces = {}
    if min_partitions and total and len(ranges) < min_partitions:
        for r in sized:
            pieces[r] = max(1, round((r.end - r.start) / total * min_partitions))
    elif not min_partitions and total:
        share = max(MIN_TASK_RECORDS, -(-total // (cores or os.cpu_count() or 1)))
        for r in sized:
            pieces[r] = -(-(r.end - r.start) // share)
    if max_records:
        for r in sized:
            pieces[r] = max(pieces.get(r, 1), -(-(r.end - r.start) // max_records))
    out = []
    for r in ranges:
        n = pieces.get(r, 1)
        if n <= 1:
            out.append(r)
            continue
        bounds = np.linspace(r.start, r.end, n + 1).round().astype(np.int64).tolist()
        out += [OffsetRange(r.topic, r.partition, a, b) for a, b in zip(bounds, bounds[1:])
                if b > a]
    return out


# ---- filter pushdown (driver) ------------------------------------------------------------------

@dataclass
class Pushed:
    """What the pushed filters leave of the log, ANDed: the topics and
    partitions (None: all), the offsets [offset_from, offset_to) and the
    earliest timestamp (epoch ms) a row may have."""
    topics: set | None = None
    partitions: set | None = None
    partition_from: int = 0
    partition_to: int | None = None
    offset_from: int = 0
    offset_to: int | None = None
    timestamp_from: int | None = None
    filters: list = field(default_factory=list)   # the pushed filters, for describing

    def keeps(self, topic: str, partition: int) -> bool:
        return ((self.topics is None or topic in self.topics)
                and (self.partitions is None or partition in self.partitions)
                and partition >= self.partition_from
                and (self.partition_to is None or partition < self.partition_to))


def _int_value(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _bounds(f) -> tuple | None:
    """[low, high) of the integers an EqualTo / comparison filter keeps, or None."""
    v = f.value
    if not _int_value(v):
        return None
    if isinstance(f, (EqualTo, EqualNullSafe)):
        return v, v + 1
    if isinstance(f, GreaterThan):
        return v + 1, None
    if isinstance(f, GreaterThanOrEqual):
        return v, None
    if isinstance(f, LessThan):
        return None, v
    if isinstance(f, LessThanOrEqual):
        return None, v + 1
    return None


def _intersect(low: int, high: int | None, bounds: tuple) -> tuple:
    """[low, high) (high None: unbounded) narrowed by ``bounds`` (either end None: open)."""
    if bounds[0] is not None:
        low = max(low, bounds[0])
    if bounds[1] is not None:
        high = bounds[1] if high is None else min(high, bounds[1])
    return low, high


def _epoch_ms_at_least(value: datetime.datetime, strict: bool) -> int | None:
    """The smallest epoch ms a Kafka timestamp needs to be >= (``strict``:
    >) ``value``, a Spark timestamp (microseconds)."""
    if not isinstance(value, datetime.datetime) or value.tzinfo is None:
        return None
    us = (value - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)) \
        // datetime.timedelta(microseconds=1)
    # ts_ms * 1000 >= us  <=>  ts_ms >= ceil(us / 1000); > us: ts_ms >= floor(us / 1000) + 1
    return us // 1000 + 1 if strict else -(-us // 1000)


def push_filter(pushed: Pushed, f) -> bool:
    """Narrow ``pushed`` by filter ``f``; True when the planned ranges alone
    apply ``f`` exactly (Spark need not evaluate it again). Partitions,
    offsets and topics are exact; a lower bound on the timestamp only moves
    each range's start (offsets_for_times), and Spark still checks every row,
    as Kafka timestamps need not grow with offsets."""
    attribute = getattr(f, "attribute", None)   # Not(...) has none: left to Spark
    if attribute is None or len(attribute) != 1:
        return False
    column = attribute[0]
    if isinstance(f, IsNotNull):
        return column in ("topic", "partition", "offset")   # never null
    if column == "topic":
        if isinstance(f, (EqualTo, EqualNullSafe)) and isinstance(f.value, str):
            names = {f.value}
        elif isinstance(f, In) and all(isinstance(v, str) for v in f.value):
            names = set(f.value)
        else:
            return False
        pushed.topics = names if pushed.topics is None else pushed.topics & names
        pushed.filters.append(f)
        return True
    if column == "partition":
        if isinstance(f, In) and all(_int_value(v) for v in f.value):
            parts = set(f.value)
            pushed.partitions = parts if pushed.partitions is None else pushed.partitions & parts
            pushed.filters.append(f)
            return True
        b = _bounds(f)
        if b is None:
            return False
        pushed.partition_from, pushed.partition_to = _intersect(
            pushed.partition_from, pushed.partition_to, b)
        pushed.filters.append(f)
        return True
    if column == "offset":
        exact = True
        if isinstance(f, In) and f.value and all(_int_value(v) for v in f.value):
            b, exact = (min(f.value), max(f.value) + 1), False   # the span; Spark picks
        else:
            b = _bounds(f)
        if b is None:
            return False
        pushed.offset_from, pushed.offset_to = _intersect(pushed.offset_from, pushed.offset_to, b)
        pushed.filters.append(f)
        return exact
    if column == "timestamp" and isinstance(f, (EqualTo, GreaterThan, GreaterThanOrEqual)):
        ms = _epoch_ms_at_least(f.value, strict=isinstance(f, GreaterThan))
        if ms is not None:
            pushed.timestamp_from = ms if pushed.timestamp_from is None else max(
                pushed.timestamp_from, ms)
            pushed.filters.append(f)
    return False


def _timestamp_starts(consumer: Consumer, tps, ms: int, ends: dict) -> dict:
    """{tp: an offset before which no record of ``tp`` has a timestamp >= ``ms``}:
    offsets_for_times, whose answer is the first record with a timestamp >=
    ``ms`` (the time index is searched strictly below ``ms`` and scanned from
    there, storage/index.py). No record that new: the range is empty (its end)."""
    found = consumer.offsets_for_times([TopicPartition(t, p, ms) for t, p in tps])
    return {(r.topic, r.partition): ends[(r.topic, r.partition)]
            if r.offset == OFFSET_END or r.offset < 0 else r.offset for r in found}


# ---- reading (executor) ---------------------------------------------------------------------

# How often a read_committed task asks again for the last stable offset
# while a transaction holds it below the end of its range.
LSO_POLL_S = 0.2

# column -> (its Arrow array from a Consumer.consume_batch batch, its Arrow type);
# vectorised casts only (topic dictionary -> string, ms -> us, int8 -> int32)
_COLUMNS = {
    "key": (lambda b: b.column(5), pa.binary()),
    "value": (lambda b: b.column(6), pa.binary()),
    "topic": (lambda b: _topic_column(b), pa.string()),
    "partition": (lambda b: b.column(1), pa.int32()),
    "offset": (lambda b: b.column(2), pa.int64()),
    "timestamp": (lambda b: b.column(3).cast(_ARROW_TS), _ARROW_TS),
    "timestampType": (lambda b: b.column(4).cast(pa.int32()), pa.int32()),
    "headers": (lambda b: b.column(7).cast(_ARROW_HEADERS), _ARROW_HEADERS),
}
ALL_COLUMNS = tuple(f.name for f in SCHEMA.fields)


def columns_of(schema: StructType, value_type=None) -> tuple:
    """The Kafka columns a schema asks for. A user-given schema
    (``spark.read.schema(...)``) may select some of the columns of Spark's
    Kafka schema, with their types; only those are built and sent to Spark.
    ``value_type``: the value column's, with ``value.format`` (registry.py)."""
    kafka = {f.name: f.dataType for f in SCHEMA_WITH_HEADERS.fields}
    if value_type is not None:
        kafka["value"] = value_type
    names = []
    for f in schema.fields:
        if f.name not in kafka or f.dataType != kafka[f.name]:
            raise opt.OptionError("schema", f"column {f.name} {f.dataType.simpleString()} is not "
                                            f"one of the Kafka columns: " + ", ".join(
                                                f"{n} {t.simpleString()}"
                                                for n, t in kafka.items()))
        if f.name in names:
            raise opt.OptionError("schema", f"column {f.name} appears twice")
        names.append(f.name)
    return tuple(names)


# topic name -> (rows, offsets buffer, data buffer) of a string column holding
# the name that many times: a batch's topic column is a zero-copy slice of
# it, where casting the decoder's dictionary column costs ~10 ns a row (a
# tenth of what reading a record costs in all).
_TOPIC_BUFFERS: dict = {}


def _topic_column(batch: pa.RecordBatch) -> pa.Array:
    n, topic = batch.num_rows, batch.column(0)
    if not n:
        return pa.array([], pa.string())
    name = topic.dictionary[topic.indices[0].as_py()].as_py()
    if topic.null_count or len(topic.dictionary) != 1:   # never from one partition's fetch
        return topic.cast(pa.string())
    rows, offsets, data = _TOPIC_BUFFERS.get(name, (0, None, None))
    raw = name.encode()
    if rows < n:
        if len(_TOPIC_BUFFERS) > 64:
            _TOPIC_BUFFERS.clear()
        rows = max(n, 2 * rows)
        offsets = pa.py_buffer(np.arange(0, (rows + 1) * len(raw), len(raw), dtype=np.int32)
                               if len(raw) else np.zeros(rows + 1, dtype=np.int32))
        data = pa.py_buffer(raw * rows)
        _TOPIC_BUFFERS[name] = rows, offsets, data
    return pa.Array.from_buffers(pa.string(), n, [None, offsets.slice(0, 4 * (n + 1)),
                                                  data.slice(0, len(raw) * n)])


def to_spark(batch: pa.RecordBatch, columns=ALL_COLUMNS) -> pa.RecordBatch:
    """A Consumer.consume_batch RecordBatch as the Spark Arrow batch of ``columns``."""
    return pa.RecordBatch.from_arrays(
        [_COLUMNS[c][0](batch) for c in columns],
        schema=pa.schema([(c, _COLUMNS[c][1]) for c in columns]))


def read_range(o: opt.SourceOptions, r: OffsetRange, columns=ALL_COLUMNS, value_type=None):
    """Yield the records of ``r`` as Spark Arrow batches of ``columns``
    with the Python worker's Consumer (task_consumers.py); with
    ``value.format``, the value column decoded into ``value_type``
    (registry.py)."""
    decoder = None
    if o.value_format is not None and "value" in columns:
        from kafkalite_spark import registry
        decoder = registry.Decoder(o.value_format, value_type)
    # A fetch at a start the log no longer holds must fail, not move to the
    # log end (the default auto.offset.reset): failOnDataLoss decides.
    config = {**o.client_config, "auto.offset.reset": "error"}
    consumer = task_consumers.borrow(config)
    try:
        yield from _read(consumer, o, r, columns, decoder)
    except BaseException:
        consumer.close()    # failed or stopped part-way: not known to be clean
        raise
    task_consumers.give_back(config, consumer)


def _read(consumer: Consumer, o: opt.SourceOptions, r: OffsetRange, columns, decoder):
    """read_range's loop. A planned range is read as planned, without asking
    for the log's bounds first (two ListOffsets round trips a task): a start
    the log no longer holds comes back as OFFSET_OUT_OF_RANGE, an end past
    the log (or, read_committed, past the last stable offset) as fetches
    that bring nothing, and only then are the bounds asked (_range_left), as
    Spark's Kafka consumer does."""
    start, end = r.start, r.end
    if start == opt.EARLIEST:   # a partition new to a streaming query: from its log start
        bounds = _range_left(consumer, o, r, start, end)
        if bounds is None:
            return
        start, end = bounds
    tp = TopicPartition(r.topic, r.partition)
    consumer.assign([TopicPartition(r.topic, r.partition, start)])
    timeout = o.poll_timeout_ms / 1000
    position, progress_at = start, time.monotonic()
    while position < end:
        try:
            batch = consumer.consume_batch(timeout=min(timeout, 1.0))
        except (errors.OffsetOutOfRangeError, errors.UnknownTopicOrPartitionError):
            batch = None
        if batch is None or not batch.num_rows:
            bounds = _range_left(consumer, o, r, position, end)
            if bounds is None:
                return
            if bounds[0] != position:   # records gone, failOnDataLoss off: on from the log start
                consumer.assign([TopicPartition(r.topic, r.partition, bounds[0])])
                progress_at = time.monotonic()
            position, end = bounds
        now_at = consumer.position([tp])[0].offset
        if now_at > position:
            position, progress_at = now_at, time.monotonic()
        elif time.monotonic() - progress_at > timeout:
            raise errors.RequestTimedOutError(
                f"{r.topic}-{r.partition}: no records past offset {position} within "
                f"{timeout:.0f} s (kafkaConsumer.pollTimeoutMs) though the log ends at {end}")
        if batch is None or not batch.num_rows:
            continue
        offsets = batch.column(2)
        if offsets[batch.num_rows - 1].as_py() >= end:
            batch = batch.slice(0, int(np.searchsorted(offsets.to_numpy(), end)))
            if not batch.num_rows:
                break
        out = to_spark(batch, columns)
        if decoder is not None:
            i = columns.index("value")
            out = out.set_column(i, pa.field("value", decoder.arrow_type), decoder.column(
                out.column(i), batch.column(2), f"{r.topic}-{r.partition}"))
        yield out


def _range_left(consumer: Consumer, o: opt.SourceOptions, r: OffsetRange, start: int,
                end: int) -> tuple[int, int] | None:
    """(start, end) of what is left to read of ``r`` from ``start`` as the
    log stands now (ListOffsets), or None when nothing is; DataLossError
    where records to read are gone and failOnDataLoss is on."""
    tp = TopicPartition(r.topic, r.partition)
    try:
        try:
            low, high = consumer.get_watermark_offsets(tp)
        except errors.UnknownTopicOrPartitionError:
            # the worker's Consumer may have learned the topic in an earlier
            # task, before this partition was added: learn it again
            consumer.list_topics(r.topic, o.poll_timeout_ms / 1000)
            low, high = consumer.get_watermark_offsets(tp)
    except errors.UnknownTopicOrPartitionError:
        if o.fail_on_data_loss:
            raise _data_loss(f"{r.topic}-{r.partition} no longer exists") from None
        return None
    if start == opt.EARLIEST:
        start = low
    elif start < low:
        if o.fail_on_data_loss:
            raise _data_loss(f"{r.topic}-{r.partition}: offsets {start}..{low - 1} were "
                             f"to be read but the log now starts at {low}")
        start = low
    if end > high and o.read_committed:
        # A range planned by a batch query's endingOffsets may reach past the
        # last stable offset: wait for the open transaction there to end.
        high = _wait_for_stable(consumer, tp, end, o.poll_timeout_ms / 1000)
        if end > high:
            raise errors.RequestTimedOutError(
                f"{r.topic}-{r.partition}: offsets up to {end - 1} were to be read but the "
                f"last stable offset stayed at {high} for {o.poll_timeout_ms / 1000:.0f} s "
                f"(kafkaConsumer.pollTimeoutMs): a transaction is open there, or the log "
                f"ends there")
    if end > high:
        if o.fail_on_data_loss:
            raise _data_loss(f"{r.topic}-{r.partition}: offsets up to {end - 1} were to be "
                             f"read but the log now ends at {high}")
        end = high
    return (start, end) if start < end else None


def _wait_for_stable(consumer: Consumer, tp: TopicPartition, end: int, timeout: float) -> int:
    """The last stable offset of ``tp`` once it reaches ``end``, or as it
    is when ``timeout`` s have passed."""
    deadline = time.monotonic() + timeout
    while True:
        stable = consumer.get_watermark_offsets(tp)[1]
        if stable >= end or time.monotonic() >= deadline:
            return stable
        time.sleep(LSO_POLL_S)


# ---- batch --------------------------------------------------------------------------------------

class KafkaLiteBatchReader(DataSourceReader):
    def __init__(self, o: opt.SourceOptions, columns=ALL_COLUMNS, value_type=None):
        self.options = o
        self.columns = columns
        self.value_type = value_type
        self.pushed = Pushed()

    def pushFilters(self, filters):
        """Spark's filters on topic, partition and offset become the planned
        ranges (exact: Spark does not evaluate them again); a lower bound on
        the timestamp moves each range's start to the first record that new
        (Spark still checks the rows). Needs spark.sql.python.filterPushdown
        .enabled, which register() sets."""
        for f in filters:
            if not push_filter(self.pushed, f):
                yield f

    def partitions(self):
        o, pushed = self.options, self.pushed
        with _consumer(o) as consumer:
            tps, starts, ends = batch_offsets(o, consumer)
            # the options checked, the pushed filters narrow what is read
            tps = [tp for tp in tps if pushed.keeps(*tp)]
            if pushed.timestamp_from is not None and pushed.timestamp_from > 0 and tps:
                for tp, off in _timestamp_starts(consumer, tps, pushed.timestamp_from,
                                                 ends).items():
                    starts[tp] = max(starts[tp], off)
        ranges = []
        for t, p in tps:
            start = max(starts[(t, p)], pushed.offset_from)
            end = ends[(t, p)] if pushed.offset_to is None else min(ends[(t, p)],
                                                                    pushed.offset_to)
            if end > start:
                ranges.append(OffsetRange(t, p, start, end))
        return split_ranges(ranges, o.min_partitions, o.max_records_per_partition) or [
            OffsetRange("", -1, 0, 0)]

    def read(self, partition: OffsetRange):
        if partition.partition < 0:
            return iter(())   # the placeholder of an empty plan (Spark wants one partition)
        return read_range(self.options, partition, self.columns, self.value_type)


# ---- streaming ------------------------------------------------------------------------------

def _to_json(offsets: dict) -> dict:
    out: dict = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def _from_json(doc: dict) -> dict:
    return {(t, int(p)): int(off) for t, parts in (doc or {}).items() for p, off in parts.items()}


class KafkaLiteStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, o: opt.SourceOptions, columns=ALL_COLUMNS, value_type=None):
        self.options = o
        self.columns = columns
        self.value_type = value_type
        self._target: dict | None = None   # Trigger.AvailableNow: the log ends when it began

    def initialOffset(self) -> dict:
        o = self.options
        with _consumer(o) as consumer:
            tps = topic_partitions(o, consumer, must_exist=False)
            marks = watermarks(consumer, tps)
            return _to_json(resolve(o.starting, tps, consumer, marks, starting=True))

    def _latest(self) -> tuple[dict, dict]:
        """(high watermarks -- last stable offsets with read_committed --, log
        starts) of every partition the query reads now."""
        o = self.options
        with _consumer(o) as consumer:
            tps = topic_partitions(o, consumer, must_exist=False)
            marks = watermarks(consumer, tps)
        return {tp: m[1] for tp, m in marks.items()}, {tp: m[0] for tp, m in marks.items()}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()[0]

    def getDefaultReadLimit(self):
        from pyspark.sql.streaming.datasource import ReadAllAvailable
        n = self.options.max_offsets_per_trigger
        return ReadMaxRows(n) if n else ReadAllAvailable()

    def latestOffset(self, start: dict, limit) -> dict:
        starts = _from_json(start)
        latest, log_starts = self._latest()
        if self._target is not None:
            latest = {tp: min(off, self._target[tp]) for tp, off in latest.items()
                      if tp in self._target}
        gone = sorted(set(starts) - set(latest))
        if gone and self._target is None and self.options.fail_on_data_loss:
            raise _data_loss("partitions " + ", ".join(f"{t}-{p}" for t, p in gone)
                             + " were read by this query and no longer exist")
        for tp, off in latest.items():
            if tp in starts and off < starts[tp] and self.options.fail_on_data_loss:
                raise _data_loss(f"{tp[0]}-{tp[1]}: the log ends at {off}, before offset "
                                 f"{starts[tp]} this query already read up to")
        # where each partition's next batch starts (new partitions: log start)
        begin = {tp: starts.get(tp, log_starts.get(tp, 0)) for tp in latest}
        end = {tp: max(off, begin[tp]) for tp, off in latest.items()}
        if isinstance(limit, ReadMaxRows):
            end = _rate_limit(begin, end, limit.max_rows)
        end.update({tp: off for tp, off in starts.items() if tp not in end})
        return _to_json(end)

    def partitions(self, start: dict, end: dict):
        starts, ends = _from_json(start), _from_json(end)
        ranges = [OffsetRange(t, p, starts.get((t, p), opt.EARLIEST), off)
                  for (t, p), off in sorted(ends.items())
                  if off > starts.get((t, p), opt.EARLIEST) or (t, p) not in starts]
        return split_ranges(ranges, self.options.min_partitions,
                            self.options.max_records_per_partition)

    def read(self, partition: OffsetRange):
        return read_range(self.options, partition, self.columns, self.value_type)

    def commit(self, end: dict) -> None:
        # Spark's checkpoint is the record of progress; kafkalite has no
        # consumer groups to commit offsets to yet.
        pass


def _rate_limit(begin: dict, end: dict, max_rows: int) -> dict:
    """At most ``max_rows`` offsets in total, shared in proportion to each
    partition's backlog (Spark's Kafka rate limit); every partition with a
    backlog moves by at least one offset, so a query never stalls."""
    backlog = {tp: end[tp] - begin[tp] for tp in end}
    total = sum(backlog.values())
    if total <= max_rows:
        return dict(end)
    out = {}
    for tp, lag in backlog.items():
        share = int(max_rows * lag / total)
        out[tp] = begin[tp] + (min(lag, max(share, 1)) if lag else 0)
    return out


# ---- the data source ------------------------------------------------------------------------

def _value_type(o: opt.SourceOptions, schema: StructType):
    """The value column's type with ``value.format`` (the schema's, as
    schema() gave it), None without."""
    if o.value_format is None or "value" not in schema.fieldNames():
        return None
    return schema["value"].dataType


class KafkaLiteDataSource(DataSource):
    """``spark.read.format("kafkalite")`` / ``readStream`` / ``write`` /
    ``writeStream``; Spark reserves the name ``kafka``."""

    @classmethod
    def name(cls) -> str:
        return "kafkalite"

    def schema(self):
        # Called at load(): bad options fail there, for readStream too (the
        # stream reader itself is made only when the query runs).
        o = opt.parse_source(self.options, streaming=None)
        include = str(self.options.get("includeHeaders", "false")).strip().lower() == "true"
        schema = SCHEMA_WITH_HEADERS if include else SCHEMA
        if o.value_format is not None:
            from kafkalite_spark import registry
            try:
                value_type = registry.value_type(o.value_format)
            except registry.RegistryOptionError as exc:
                raise opt.OptionError("value.format", str(exc)) from None
            schema = StructType([StructField("value", value_type) if f.name == "value" else f
                                 for f in schema.fields])
        return schema

    def reader(self, schema):
        o = opt.parse_source(self.options, streaming=False)
        value_type = _value_type(o, schema)
        return KafkaLiteBatchReader(o, columns_of(schema, value_type), value_type)

    def streamReader(self, schema):
        o = opt.parse_source(self.options, streaming=True)
        value_type = _value_type(o, schema)
        return KafkaLiteStreamReader(o, columns_of(schema, value_type), value_type)

    def writer(self, schema, overwrite):
        from kafkalite_spark.sink import KafkaLiteBatchWriter
        return KafkaLiteBatchWriter(opt.parse_sink(self.options), schema)

    def streamWriter(self, schema, overwrite):
        from kafkalite_spark.sink import KafkaLiteStreamWriter
        return KafkaLiteStreamWriter(opt.parse_sink(self.options), schema)


def register(spark) -> None:
    """Make ``format("kafkalite")`` available in this SparkSession, with
    filter pushdown: Spark hands a Python source its filters only with
    spark.sql.python.filterPushdown.enabled (off by default), and refuses to
    read from a source that takes filters while it is off."""
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    spark.dataSource.register(KafkaLiteDataSource)
