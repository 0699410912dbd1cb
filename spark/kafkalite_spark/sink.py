"""The ``kafkalite`` Spark sink: DataFrame rows as records, batch and streaming.

Columns as Spark's Kafka sink: ``value`` (binary or string) is required;
``key`` (binary or string), ``topic`` (string; the ``topic`` option is the
default for rows without one), ``partition`` (int; null: by key) and
``headers`` (array<struct<key string, value binary>>) are optional.

Each Spark task gets Arrow batches (DataSourceArrowWriter), groups the rows
by (topic, partition) with vectorised Arrow kernels and hands each group to
``Producer.produce_batch`` (one Cython loop per batch). Rows with headers
go through ``Producer.produce``, which is the only path that carries
headers. A task finishes only when every record is acknowledged (acks=all
by default), and fails if any is not, so Spark retries it: at-least-once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (DataSourceArrowWriter, DataSourceStreamArrowWriter,
                                    WriterCommitMessage)
from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, LongType, ShortType,
                               StringType, StructType)

from kafkalite import errors
from kafkalite.client import AdminClient, Producer
from kafkalite_spark import options as opt

FLUSH_TIMEOUT_S = 300.0


@dataclass
class KafkaLiteCommitMessage(WriterCommitMessage):
    records: int


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

    def __init__(self, o: opt.SinkOptions):
        self.options = o
        self.producer = Producer(o.client_config)
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

    def finish(self) -> KafkaLiteCommitMessage:
        try:
            left = self.producer.flush(FLUSH_TIMEOUT_S)
        finally:
            self.producer.close(0)
        if self.failures:
            raise self.failures[0] if isinstance(self.failures[0], Exception) else \
                errors.KafkaError(f"{len(self.failures)} writes failed: {self.failures[0]}")
        if left:
            raise errors.RequestTimedOutError(f"{left} records were not acknowledged within "
                                              f"{FLUSH_TIMEOUT_S:.0f} s")
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


class KafkaLiteBatchWriter(DataSourceArrowWriter):
    def __init__(self, o: opt.SinkOptions, schema: StructType):
        check_schema(schema, o)
        self.options = o

    def write(self, iterator):
        return write_batches(self.options, iterator)

    def commit(self, messages) -> None:
        # Every record was acknowledged when its task's write() returned.
        pass

    def abort(self, messages) -> None:
        # Records written by tasks that succeeded stay (at-least-once).
        pass


class KafkaLiteStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, o: opt.SinkOptions, schema: StructType):
        check_schema(schema, o)
        self.options = o

    def write(self, iterator):
        return write_batches(self.options, iterator)

    def commit(self, messages, batchId: int) -> None:
        pass

    def abort(self, messages, batchId: int) -> None:
        pass
