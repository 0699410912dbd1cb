"""An Iceberg topic's history read by Spark's own Parquet reader, the tail by the source.

``read_topic(spark, bootstrap, topic, catalog, **options)`` returns one
DataFrame in the ``kafkalite`` source's schema (same names, types, order;
``headers`` with ``includeHeaders=true``) for the batch options of that
source, of a topic with ``iceberg.mode=key_value``
(docs/iceberg-topics.md): the partition leaders keep its records in the
table ``kafkalite.<topic>``, and each snapshot's summary says, per
partition, the next offset the table holds (``kafkalite.next-offset.<p>``,
B below). The function reads ONE snapshot, the current one, so its data
files and its offsets belong together however the table moves meanwhile.
The table holds every offset of a partition from the first one its
leaders committed (F, the least lower bound of the partition's files'
offset column in the manifests) up to B, each once (the leaders'
exactly-once commits), so per partition, with the query's start S and end
E resolved once on the driver as the source resolves them:

    table   [max(S, F), min(B, E))   Parquet files, Spark's reader
    head    [S, min(F, E))           the topic: what the table never had
    tail    [max(S, B), E)           the topic: what is not committed yet

The files are chosen from the snapshot's manifests: a data file holds one
commit of one Kafka partition, and the manifest's column bounds on
``redpanda.partition`` and ``redpanda.offset`` say which; files of other
partitions or wholly outside the wanted offsets are never handed to Spark,
and a row filter on the offsets is added only where a chosen file reaches
past them (Spark pushes it into the Parquet reader's row groups).
Timestamp options (startingTimestamp...) are resolved to offsets by the
topic, as the source does, so they prune files the same way.

What the table holds is what a read_committed consumer reads (aborted
transactions' records and the markers never land), so the topic's parts
are read read_committed too (``kafkalite.isolation.level`` defaults to it;
read_uncommitted is refused: the two parts would disagree). The table
keeps no timestamp type: ``timestampType`` is the topic's current
``message.timestamp.type`` (0 CreateTime, 1 LogAppendTime).

With ``startingOffsets`` earliest the table is read from its first row,
so records the topic's retention already deleted come back too: the
topic's whole history, more than a plain read of the topic, never less.

Spark's Python data source API hands Spark rows from Python, never a
native scan, so this cannot be ``spark.read.format("kafkalite")`` itself:
it is a function that unions a native Parquet read with the source's.
Who calls: user code on the driver.
"""
from __future__ import annotations

import collections
import json
from functools import reduce

from kafkalite_spark import options as opt
from kafkalite_spark.history import (DRIVER_READ_MAX_BYTES, driver_read, read_parquet_files,
                                     split_ranges)
from kafkalite_spark.source import SCHEMA, SCHEMA_WITH_HEADERS, _consumer, batch_offsets

NAMESPACE = "kafkalite"                    # the namespace of the leaders' tables
NEXT_OFFSET = "kafkalite.next-offset."     # + partition: the snapshot summary's offsets
# The source's batch options read_topic takes (besides kafkalite.* client
# properties); subscribe is the topic, and streaming options are refused.
TAKEN = ("assign", "startingOffsets", "endingOffsets", "startingTimestamp", "endingTimestamp",
         "startingOffsetsByTimestamp", "endingOffsetsByTimestamp",
         "startingOffsetsByTimestampStrategy", "includeHeaders", "failOnDataLoss",
         "minPartitions", "maxRecordsPerPartition", "kafkaConsumer.pollTimeoutMs")


def _options(bootstrap: str, topic: str, options: dict) -> dict:
    """The source's options of the read: the topic subscribed (or its
    partitions assigned), read_committed; others refused by name."""
    known = {n.lower() for n in TAKEN}
    out = {opt.CLIENT_PREFIX + "bootstrap.servers": bootstrap,
           opt.CLIENT_PREFIX + "isolation.level": "read_committed"}
    for k, v in options.items():
        low = str(k).lower()
        if low not in known and not low.startswith(opt.CLIENT_PREFIX):
            raise opt.OptionError(str(k), "is not an option read_topic knows")
        if low == opt.CLIENT_PREFIX + "isolation.level" and \
                str(v).strip().lower() != "read_committed":
            raise opt.OptionError(str(k), "read_topic reads read_committed only: the table "
                                          "holds what a read_committed consumer reads")
        out[str(k)] = str(v)
    if not any(k.lower() == "assign" for k in out):
        out["subscribe"] = topic
    return out


def open_catalog(catalog):
    """pyiceberg's catalog: a URL is kafkalite's REST catalog, a dict
    pyiceberg's properties (``uri``/``warehouse`` of the SQL catalog file
    ``<data dir>/iceberg/catalog.db``, or ``type``/``uri``)."""
    from pyiceberg.catalog import load_catalog
    if isinstance(catalog, str):
        return load_catalog(NAMESPACE, type="rest", uri=catalog)
    props = dict(catalog)
    name = props.pop("name", NAMESPACE)
    if props.get("type", "sql") == "sql":
        from kafkalite.iceberg_catalog import sql_catalog
        props.pop("type", None)
        return sql_catalog(name, **props)
    return load_catalog(name, **props)


def _field_ids(table) -> dict:
    schema = table.schema()
    return {name: schema.find_field(f"redpanda.{name}").field_id
            for name in ("partition", "offset")}


def committed_files(table, snapshot) -> tuple[dict, list]:
    """({partition: next offset} of ``snapshot``'s summary, [(file path,
    partition or None, lowest offset or None, highest offset or None)] of
    its data files: from the manifest's column bounds where it has them,
    else from the file's Parquet footer (its row groups' statistics, read
    once per file: a data file never changes); None where neither says)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import IntegerType, LongType
    props = snapshot.summary.additional_properties if snapshot.summary else {}
    boundary = {int(k[len(NEXT_OFFSET):]): int(v) for k, v in props.items()
                if k.startswith(NEXT_OFFSET)}
    ids = _field_ids(table)
    files = []
    for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files():
        f = task.file
        low, high = f.lower_bounds or {}, f.upper_bounds or {}
        bounds = [low.get(ids["partition"]), high.get(ids["partition"]),
                  low.get(ids["offset"]), high.get(ids["offset"])]
        if None in bounds:
            found = _FOOTER_BOUNDS.get(f.file_path)
            if found is None:
                found = _footer_bounds(table, f.file_path)
                if len(_FOOTER_BOUNDS) > 65536:
                    _FOOTER_BOUNDS.clear()
                _FOOTER_BOUNDS[f.file_path] = found
            p_lo, p_hi, o_lo, o_hi = found
        else:
            p_lo, p_hi = (from_bytes(IntegerType(), b) for b in bounds[:2])
            o_lo, o_hi = (from_bytes(LongType(), b) for b in bounds[2:])
        files.append((f.file_path, p_lo if p_lo is not None and p_lo == p_hi else None,
                      o_lo, o_hi))
    return boundary, files


# (table uuid, snapshot id) -> committed_files' answer, the last PLANS_KEPT
# planned: a snapshot never changes, and planning one reads its manifests
# (0.23 s for a 185-file table, most of a read_topic's planning once Spark
# no longer lists the files with a job)
_PLANS: collections.OrderedDict = collections.OrderedDict()
PLANS_KEPT = 16


def _planned(table, snapshot) -> tuple[dict, list]:
    """committed_files(table, snapshot), planned once per snapshot."""
    key = (str(table.metadata.table_uuid), snapshot.snapshot_id)
    found = _PLANS.get(key)
    if found is None:
        found = committed_files(table, snapshot)
        _PLANS[key] = found
        while len(_PLANS) > PLANS_KEPT:
            _PLANS.popitem(last=False)
    else:
        _PLANS.move_to_end(key)
    boundary, files = found
    return dict(boundary), list(files)


# data file path -> (partition low, high, offset low, high) from its footer
_FOOTER_BOUNDS: dict = {}


def _footer_bounds(table, path: str) -> tuple:
    """The least and greatest redpanda.partition and redpanda.offset of a
    data file by its row groups' statistics (Nones where one lacks them):
    files written before the manifests carried these bounds."""
    from kafkalite.iceberg_catalog import footer_bounds
    found = footer_bounds(table.io, path, ("redpanda.partition", "redpanda.offset"))
    if len(found) < 2:
        return None, None, None, None
    return (*found["redpanda.partition"], *found["redpanda.offset"])


def _timestamp_type(o: opt.SourceOptions, topic: str) -> int:
    """1 where the topic's message.timestamp.type is LogAppendTime, else 0."""
    from kafkalite.client import AdminClient
    from kafkalite.client.admin import ConfigResource
    from kafkalite.client.config import ADMIN
    admin = AdminClient({k: v for k, v in o.client_config.items() if k in ADMIN})
    try:
        resource = ConfigResource("topic", topic)
        entries = admin.describe_configs([resource])[resource].result()
        entry = entries.get("message.timestamp.type")
        return 1 if entry is not None and entry.value == "LogAppendTime" else 0
    finally:
        admin.close()


def _parquet_schema(include_headers: bool):
    """The table's columns the read needs, as Spark reads them from its files
    (given, so that Spark reads no footer to infer it)."""
    from pyspark.sql.types import (BinaryType, IntegerType, LongType, StructField, StructType,
                                   TimestampType)
    from kafkalite_spark.source import HEADERS_TYPE
    meta = [StructField("partition", IntegerType()), StructField("offset", LongType()),
            StructField("timestamp", TimestampType()), StructField("key", BinaryType())]
    if include_headers:
        meta.append(StructField("headers", HEADERS_TYPE))
    return StructType([StructField("redpanda", StructType(meta)),
                       StructField("value", BinaryType())])


def read_topic(spark, bootstrap: str, topic: str, catalog,
               driver_read_max_bytes: int = DRIVER_READ_MAX_BYTES, **options):
    """The DataFrame of a batch read of ``topic`` on the server at
    ``bootstrap`` (its native address), the ``kafkalite`` source's batch
    options in ``options`` (assign, startingOffsets, endingOffsets, the
    timestamp options, includeHeaders, failOnDataLoss, minPartitions,
    maxRecordsPerPartition, kafkaConsumer.pollTimeoutMs, kafkalite.*): the
    offsets the topic's Iceberg table holds read by Spark's Parquet reader
    from the table's data files, the rest from the topic.

    ``catalog``: kafkalite's REST catalog URL (``iceberg_rest`` in the
    server's server.json; http://127.0.0.1:8181 by default) or pyiceberg
    catalog properties (the SQL catalog: ``{"uri": "sqlite:///<data
    dir>/iceberg/catalog.db", "warehouse": "file://<data dir>/iceberg/
    warehouse"}``). A topic without a table yet is read from the topic.
    A table whose files this Spark cannot open (``s3://``, the tiered
    store's bucket, without hadoop-aws) is refused with ValueError before
    any read.

    ``driver_read_max_bytes``: the records the table lacks (the tail, a
    head) are read on the driver when they come to at most this many
    bytes (no Python data source to plan, no Python worker), larger ones
    through the ``kafkalite`` source (as read_with_history)."""
    from pyiceberg.exceptions import NoSuchTableError
    from pyspark.sql import functions as F

    from kafkalite_spark.source import register
    given = _options(bootstrap, topic, options)
    o = opt.parse_source(given, streaming=False)
    if o.strategy == "assign" and any(t != topic for t, _ in o.assigned):
        raise opt.OptionError("assign", f"read_topic reads {topic!r} only")
    with _consumer(o) as consumer:
        tps, starts, ends = batch_offsets(o, consumer)
    from_start = {tp: o.starting.kind == "earliest" or
                  (o.starting.kind == "offsets" and o.starting.offsets[tp] == opt.EARLIEST)
                  for tp in tps}

    try:
        table = open_catalog(catalog).load_table((NAMESPACE, topic))
        snapshot = table.current_snapshot()
    except NoSuchTableError:
        table = snapshot = None        # no commit yet: the topic alone
    if table is not None and table.schema().find_column_name(2) != "value":
        raise ValueError(f"read_topic: the table of {topic!r} is a decoded one (iceberg.mode "
                         f"value_schema_*); only key_value tables are read")
    boundary, files = _planned(table, snapshot) if snapshot is not None else ({}, [])
    first: dict = {}
    for _, partition, lo, _ in files:
        if partition in boundary and lo is not None:
            first[partition] = min(lo, first.get(partition, lo))

    # copy by partition (the table's), head and tail by topic partition
    copy, head, tail = split_ranges(tps, starts, ends, from_start, boundary, first,
                                    key=lambda tp: tp[1])

    register(spark)
    frames = []
    chosen, filtered = [], False
    for path, partition, lo, hi in files:
        if partition is None or lo is None or hi is None:
            # bounds the manifest lacks: the file is read, the rows filtered
            chosen.append(path)
            filtered = True
        elif partition in copy and lo < copy[partition][1] and hi >= copy[partition][0]:
            chosen.append(path)
            filtered |= lo < copy[partition][0] or hi >= copy[partition][1]
    if chosen and copy:
        _check_readable(spark, topic, chosen)
        ts_type = _timestamp_type(o, topic)
        df = read_parquet_files(spark, _parquet_schema(o.include_headers), chosen)
        if filtered and copy:
            df = df.where(" OR ".join(
                f"(redpanda.partition = {p} AND redpanda.offset >= {lo} AND "
                f"redpanda.offset < {hi})" for p, (lo, hi) in sorted(copy.items())))
        columns = [F.col("redpanda.key").alias("key"), F.col("value"),
                   F.lit(topic).alias("topic"), F.col("redpanda.partition").alias("partition"),
                   F.col("redpanda.offset").alias("offset"),
                   F.col("redpanda.timestamp").alias("timestamp"),
                   F.lit(ts_type).cast("int").alias("timestampType")]
        if o.include_headers:
            columns.append(F.col("redpanda.headers").alias("headers"))
        frames.append(df.select(*columns))
    for ranges in (tail, head):
        if ranges:
            local = driver_read(spark, o, ranges, driver_read_max_bytes)
            frames.append(_topic_read(spark, given, topic, ranges) if local is None else local)
    if not frames:
        return spark.createDataFrame([], SCHEMA_WITH_HEADERS if o.include_headers else SCHEMA)
    return reduce(lambda a, b: a.unionByName(b), frames)


def _check_readable(spark, topic: str, paths: list) -> None:
    """Refuses, before any read, a table whose files are where this Spark
    has no Hadoop FileSystem to open them: an Iceberg topic whose tables
    are in the tiered store's S3 bucket (``s3://``) needs the hadoop-aws
    jar (and its ``fs.s3.impl``), which kafkalite does not ship. Not read
    from the topic instead: the table keeps records the topic's retention
    may have deleted, so the rows would silently differ."""
    jvm = getattr(spark, "_jvm", None)
    if jvm is None:         # Spark Connect: its server opens the files, or says why
        return
    from py4j.protocol import Py4JJavaError
    conf = spark._jsc.hadoopConfiguration()
    schemes = sorted({path.split("://", 1)[0] for path in paths if "://" in path})
    for scheme in schemes:
        try:
            jvm.org.apache.hadoop.fs.FileSystem.getFileSystemClass(scheme, conf)
        except Py4JJavaError:
            example = next(path for path in paths if path.startswith(scheme + "://"))
            raise ValueError(
                f"read_topic: the table of {topic!r} keeps its files in {scheme}:// "
                f"({example}), and this Spark has no Hadoop FileSystem for {scheme}:// "
                f"(S3 needs the hadoop-aws jar and fs.{scheme}.impl set, which kafkalite does "
                f"not ship). Read the table with pyiceberg through the REST catalog, or the "
                f"topic with spark.read.format(\"kafkalite\")") from None


def _topic_read(spark, given: dict, topic: str, ranges: dict):
    """The ``kafkalite`` source over ``ranges`` ({tp: (from, to)}), with the
    read's other options (includeHeaders, kafkalite.*, ...)."""
    start, end = {}, {}
    for (_, p), (lo, hi) in sorted(ranges.items()):
        start[str(p)] = lo
        end[str(p)] = hi
    resolved = {"assign", "subscribe", "startingoffsets", "endingoffsets"}
    r = spark.read.format("kafkalite")
    for k, v in given.items():
        low = k.lower()
        if low not in resolved and "timestamp" not in low:
            r = r.option(k, v)
    return (r.option("assign", json.dumps({topic: sorted(int(p) for p in start)}))
            .option("startingOffsets", json.dumps({topic: start}))
            .option("endingOffsets", json.dumps({topic: end})).load())
