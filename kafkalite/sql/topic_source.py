"""A topic as a table: its records as a stream of Arrow record batches.

Columns (``BASE_SCHEMA``; the value's fields follow when values.py
decodes them):
    partition  int32
    offset     int64
    timestamp  timestamp[ms, UTC]
    key        binary (null: no key)
    value      binary (null: tombstone)
    headers    list<struct<key: string, value: binary>>

``history`` reads the whole history a query covers: every partition from
its log start to its last stable offset asked when the read starts
(read_committed: aborted records are left out, and an open transaction's
records are past the bound), through one Consumer's ``consume_batch``
(the native fetch path, already Arrow). The bound is fixed first, so a
query answers the same rows however long it runs while producers write.
``tail`` reads what arrives from the end of each partition on, for
EMIT CHANGES. Both are generators: a batch is made when DuckDB asks for
it, and dropped once DuckDB has read it.

A history read asks for HISTORY_PARTITION_BYTES a partition per fetch
(the Consumer's default is 1 MiB): a fourth of the round trips, each of
which waits for a server worker to be scheduled on a busy host.

``input_table`` is a Streams topology's batch of a topic (a persistent
query's input) as the same table.

Who may call: session.py, on the thread that runs the query (a Consumer
is not thread-safe: one per topic per query, closed when the stream ends
or is dropped); ``input_table``: persistent.py and windowed.py.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
from kafkalite.client.arrow import HEADER_TYPE, TIMESTAMP_TYPE

BASE_SCHEMA = pa.schema([
    ("partition", pa.int32()),
    ("offset", pa.int64()),
    ("timestamp", TIMESTAMP_TYPE),
    ("key", pa.binary()),
    ("value", pa.binary()),
    ("headers", HEADER_TYPE),
])
BASE_COLUMNS = tuple(BASE_SCHEMA.names)
# how long one consume_batch waits for records before the read checks again
POLL_S = 0.5
# max.partition.fetch.bytes of a history read, unless the caller's config
# sets one: 1,500,000 records of 100 bytes over 4 partitions were read in
# 15-22 fetches at 4 MiB, 66-74 at the default 1 MiB (0.09-0.21 s against
# 0.14-0.31 s, load 4); 16 MiB was no faster. A group-by over them, 15
# turns each: 0.19 s of the client's CPU a query (median) against 0.23
HISTORY_PARTITION_BYTES = 4 << 20


def input_table(batch: pa.RecordBatch) -> pa.Table:
    """A Streams topology batch (streams/records.py: key, value, timestamp
    int64 ms, partition, offset, headers) as BASE_SCHEMA's table."""
    arrays = [batch.column("partition"), batch.column("offset"),
              batch.column("timestamp").cast(BASE_SCHEMA.field("timestamp").type),
              batch.column("key").cast(pa.binary()), batch.column("value").cast(pa.binary()),
              batch.column("headers")]
    return pa.Table.from_arrays(arrays, schema=BASE_SCHEMA)


def consumer_config(client_config: dict) -> dict:
    """The Consumer's properties for a query's read: no group (nothing is
    committed), read_committed, the caller's connection settings."""
    return {**client_config, "isolation.level": "read_committed", "enable.auto.commit": False,
            "auto.offset.reset": "earliest"}


def partitions(consumer: Consumer, topic: str, timeout: float) -> list[int]:
    """The topic's partitions; UnknownTopicOrPartitionError if it does not exist."""
    md = consumer.list_topics(topic, timeout)
    tm = md.topics.get(topic)
    if tm is None or tm.error is not None:
        from kafkalite import errors
        raise errors.UnknownTopicOrPartitionError(f"topic {topic!r} does not exist")
    return sorted(tm.partitions)


def _project(batch: pa.RecordBatch) -> pa.RecordBatch:
    """consume_batch's columns (client/arrow.py's SCHEMA) as BASE_SCHEMA's."""
    return pa.RecordBatch.from_arrays([batch.column(name) for name in BASE_COLUMNS],
                                      schema=BASE_SCHEMA)


def history(client_config: dict, topic: str, timeout: float = 30.0):
    """Batches (BASE_SCHEMA) of ``topic`` from each partition's log start to
    its last stable offset when this is first advanced."""
    consumer = Consumer({"max.partition.fetch.bytes": HISTORY_PARTITION_BYTES,
                         **consumer_config(client_config)})
    try:
        ranges = {p: (OFFSET_BEGINNING, high) for p, (low, high) in
                  watermarks(consumer, topic, timeout).items() if high > low}
        yield from _read(consumer, topic, ranges)
    finally:
        consumer.close()


def watermarks(consumer: Consumer, topic: str, timeout: float) -> dict[int, tuple[int, int]]:
    """{partition: (log start, last stable offset)} of ``topic`` now."""
    return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout)
            for p in partitions(consumer, topic, timeout)}


def offset_ranges(client_config: dict, topic: str, ranges: dict[int, tuple[int, int]]):
    """Batches (BASE_SCHEMA) of ``topic``'s records in ``ranges`` ({partition:
    (from, to)}, ``to`` excluded; empty ranges skipped): the parts of an
    Iceberg topic's history its table does not hold (iceberg_source.py)."""
    ranges = {p: (lo, hi) for p, (lo, hi) in ranges.items() if hi > lo}
    if not ranges:
        return
    consumer = Consumer({"max.partition.fetch.bytes": HISTORY_PARTITION_BYTES,
                         **consumer_config(client_config)})
    try:
        # a fetch from an offset inside a record batch may bring the batch's
        # records before it: masked as the bound's are
        starts = pa.array([ranges.get(p, (0, 0))[0] for p in range(max(ranges) + 1)],
                          pa.int64())
        for batch in _read(consumer, topic, ranges):
            early = pc.less(batch.column("offset"), pc.take(starts, batch.column("partition")))
            if pc.any(early).as_py():
                batch = batch.filter(pc.invert(early))
            if batch.num_rows:
                yield batch
    finally:
        consumer.close()


def _read(consumer: Consumer, topic: str, ranges: dict[int, tuple[int, int]]):
    """Batches (BASE_SCHEMA) of ``ranges`` ({partition: (from, to)}; from may
    be OFFSET_BEGINNING), read by ``consumer`` until each partition's
    position reaches its ``to``."""
    ends = {p: hi for p, (_, hi) in ranges.items()}
    if not ends:
        return
    consumer.assign([TopicPartition(topic, p, lo) for p, (lo, _) in ranges.items()])
    # a partition's end offset by partition number, for the mask of
    # records past the bound (a fetch brings what arrived since)
    bound = pa.array([ends.get(p, 0) for p in range(max(ends) + 1)], pa.int64())
    while ends:
        batch = consumer.consume_batch(POLL_S)
        positions = consumer.position([TopicPartition(topic, p) for p in ends])
        if batch.num_rows:
            batch = _project(batch)
            # a batch's records are below their partition's position: only
            # one past a bound (a partition's last) is masked, the mask a
            # gather a record (5% of a group-by's samples when every batch had it)
            if any(tp.offset > ends[tp.partition] for tp in positions):
                past = pc.less(batch.column("offset"),
                               pc.take(bound, batch.column("partition")))
                if not pc.all(past).as_py():
                    batch = batch.filter(past)
            if batch.num_rows:
                yield batch
        for tp in positions:
            # control records and aborted ones move the position without a row
            if tp.offset >= ends[tp.partition]:
                del ends[tp.partition]
                consumer.incremental_unassign([TopicPartition(topic, tp.partition)])


def tail(client_config: dict, topic: str, timeout: float = 30.0):
    """Batches (BASE_SCHEMA) of the records ``topic`` gets from now on, for
    ever (the caller stops by closing the generator); an empty batch after
    each wait of POLL_S without records, so the caller can check a stop."""
    consumer = Consumer(consumer_config(client_config))
    try:
        parts = partitions(consumer, topic, timeout)
        # the end of each partition now: records produced after the query
        # starts are its rows (OFFSET_END would be resolved at the first fetch)
        consumer.assign([TopicPartition(topic, p, consumer.get_watermark_offsets(
            TopicPartition(topic, p), timeout)[1]) for p in parts])
        while True:
            yield _project(consumer.consume_batch(POLL_S))
    finally:
        consumer.close()
