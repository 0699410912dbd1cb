"""ParquetSinkConnector: records of ``topics`` as Parquet files, one file per
topic partition per commit, named as Confluent's HDFS connector names them
so that the files themselves record what was written.

Layout under ``directory``: ``<topic>/partition=<p>/<topic>+<p>+<start>+<end>.parquet``
(``start``/``end``: the first and last Kafka offsets in the file, 20
digits). A file is written to a temporary name, fsync'ed and renamed, when
the worker commits (``pre_commit``) or when a partition has buffered
``flush.size`` records; the offsets returned for the group are those of the
records in files. Exactly once: when a partition is assigned the task
seeks it to the offset after the highest ``end`` among its files, so
records already in a file are never written again, whatever the group's
committed offset says (a crash between the rename and the commit).

Columns: the value's struct fields (Connect schema -> Arrow type:
integers, floats, boolean, string, bytes -> binary, Timestamp ->
timestamp[ms, UTC], Date -> date32; schemaless dict values: types inferred
by pyarrow), plus ``__kafka_offset`` (int64) and ``__kafka_timestamp``.
Tombstones are skipped.
"""
from __future__ import annotations

import os
import re

from kafkalite.connect import data as cdata
from kafkalite.connect.api import SinkConnector, SinkTask
from kafkalite.connect.config import INT, STRING, ConfigDef, at_least
from kafkalite.connect.errors import DataException

CONFIG = (ConfigDef()
          .define("directory", STRING, doc="where the topic directories go")
          .define("flush.size", INT, 10_000, at_least(1),
                  doc="records of one partition per file at most"))

_FILE = re.compile(r"^(?P<topic>.+)\+(?P<partition>\d+)\+(?P<start>\d+)\+(?P<end>\d+)\.parquet$")


def arrow_type(s):
    import pyarrow as pa
    if s.name == cdata.TIMESTAMP:
        return pa.timestamp("ms", tz="UTC")
    if s.name == cdata.DATE:
        return pa.date32()
    # the converters decode these logical types to datetime.time and decimal.Decimal
    if s.name == cdata.TIME:
        return pa.time32("ms")
    if s.name == cdata.DECIMAL:
        scale = cdata.decimal_scale(s)
        # Connect's precision parameter (Avro's and Debezium's) where there is one, else
        # the widest 128-bit decimal, which is also Iceberg's bound
        precision = int((s.parameters or {}).get("connect.decimal.precision", 38))
        if 0 <= scale <= 38:
            return pa.decimal128(min(max(precision, scale, 1), 38), scale)
    return {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
            "float32": pa.float32(), "float64": pa.float64(), "boolean": pa.bool_(),
            "string": pa.string(), "bytes": pa.binary()}.get(s.type) or pa.string()


def schemaless_table(values: list):
    """The Arrow table of schemaless struct values (dicts): a column per key
    any of them has, in the order keys first appear, of the type Arrow
    infers from all the values (what the converters' batch readers give,
    batch_readers.schemaless_columns). ``Table.from_pylist`` would take the
    first value's keys alone and drop the others' without a word."""
    import pyarrow as pa
    return pa.Table.from_struct_array(pa.array(values))


def arrow_table(recs, where: str, who: str):
    """The Arrow table of sink records (one batch): the value's columns,
    then ``__kafka_offset`` and ``__kafka_timestamp``. Shared by the Parquet
    and Iceberg sinks; ``where``/``who`` name the batch and the sink in errors."""
    import pyarrow as pa
    schema = recs[0].value_schema
    offsets = pa.array([r.kafka_offset for r in recs], pa.int64())
    stamps = pa.array([r.timestamp for r in recs], pa.timestamp("ms", tz="UTC"))
    if schema is not None and schema.type == "struct":
        cols = {f.name: pa.array([r.value.get(f.name) if isinstance(r.value, dict) else None
                                  for r in recs], arrow_type(f.schema)) for f in schema.fields}
        table = pa.table(cols)
    else:
        if not all(isinstance(r.value, dict) for r in recs):
            raise DataException(f"{where}: {who} writes struct or map values")
        table = schemaless_table([r.value for r in recs])
    return table.append_column("__kafka_offset", offsets) \
        .append_column("__kafka_timestamp", stamps)


def partition_dir(directory, topic, partition):
    return os.path.join(directory, topic, f"partition={partition}")


def last_written(directory, topic, partition) -> int | None:
    """The highest Kafka offset in a file of this partition, or None."""
    d = partition_dir(directory, topic, partition)
    best = None
    try:
        names = os.listdir(d)
    except FileNotFoundError:
        return None
    for n in names:
        m = _FILE.match(n)
        if m and m["topic"] == topic and int(m["partition"]) == partition:
            best = max(best or -1, int(m["end"]))
    return best


class ParquetSinkConnector(SinkConnector):
    def config_def(self):
        return CONFIG

    def start(self, props):
        self.props = dict(props)
        CONFIG.parse(props)

    def task_class(self):
        return ParquetSinkTask

    def task_configs(self, max_tasks):
        return [dict(self.props) for _ in range(max_tasks)]


class ParquetSinkTask(SinkTask):
    def start(self, props):
        c = CONFIG.parse(props)
        self.directory, self.flush_size = c["directory"], c["flush.size"]
        self.buffers: dict = {}        # (topic, partition) -> [records]
        self.written: dict = {}        # (topic, partition) -> next offset after the files

    def open(self, partitions):
        seek = {}
        for tp in partitions:
            end = last_written(self.directory, tp.topic, tp.partition)
            if end is not None:
                self.written[(tp.topic, tp.partition)] = end + 1
                seek[(tp.topic, tp.partition)] = end + 1
        if seek:
            self.context.offset(seek)

    def close(self, partitions):
        for tp in partitions:
            self.buffers.pop((tp.topic, tp.partition), None)

    def put(self, records):
        for r in records:
            key = (r.topic, r.kafka_partition)
            if r.kafka_offset < self.written.get(key, 0):
                continue        # already in a file (redelivered before the seek took effect)
            if r.value is None:
                continue
            buf = self.buffers.setdefault(key, [])
            buf.append(r)
            if len(buf) >= self.flush_size:
                self._write(key)

    def _write(self, key):
        import pyarrow.parquet as pq
        recs = self.buffers.pop(key, [])
        if not recs:
            return
        topic, partition = key
        table = arrow_table(recs, f"{topic}-{partition}", "the Parquet sink")
        d = partition_dir(self.directory, topic, partition)
        os.makedirs(d, exist_ok=True)
        start, end = recs[0].kafka_offset, recs[-1].kafka_offset
        final = os.path.join(d, f"{topic}+{partition}+{start:020d}+{end:020d}.parquet")
        tmp = os.path.join(d, f".{os.path.basename(final)}.tmp")
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)
        self.written[key] = end + 1

    def pre_commit(self, current_offsets):
        for key in list(self.buffers):
            self._write(key)
        # commit only what is in files
        return {k: v for k, v in self.written.items() if k in current_offsets}
