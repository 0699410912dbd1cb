"""A topic read as its Iceberg copy up to the copy's offsets, then the topic.

``read_with_history(spark, table, catalog, **options)`` returns one
DataFrame in the ``kafkalite`` source's schema (same names, types, order)
for the batch options of that source. Where the Iceberg sink
(kafkalite.connect.connectors.iceberg, ``iceberg.tables.record-format=
kafka``) has copied a partition, the offsets below the copy's boundary come
from the copy's Parquet files through Spark's native Parquet reader, and
only the offsets from the boundary on come from the topic: read on the
driver into a local relation when they are few (``driver_read_max_bytes``),
else through the ``kafkalite`` source. Every offset exactly once, at the
speed of Parquet for the history.

The boundary is the snapshot property the sink commits with its rows
(``kafka.connect.offsets.<group>``, the next offset per topic partition):
the function reads ONE snapshot, the newest carrying that property, so the
Parquet files and the boundary belong together however the table moves
meanwhile. The copy holds every offset of a partition from the first one
the sink copied (F) up to the boundary (B) -- the sink's exactly-once
commits guarantee no hole and no duplicate there -- so, per partition with
the query's start S and end E resolved once on the driver:

    copy    [max(S, F), min(B, E))   Parquet, filtered to that range
    head    [S, min(F, E))           the topic: what the copy never had
    tail    [max(S, B), E)           the topic: what the copy does not have yet

F is found in the oldest snapshot of the group that names the partition:
the rows that snapshot added for it start at F (their files are read, the
three offset columns only). After snapshot expiry that is the oldest kept
one, so F may be later than the copy's first row: the copy is then
filtered from F and the offsets below come from the topic (exact, slower).
Partitions the copy lacks are all "tail".

Retention: with ``startingOffsets`` earliest (or -2 for a partition) the
copy is read from its first row, so records the topic has already deleted
but the copy kept are returned too -- more than a plain read of the topic,
never less. An explicit starting offset is honoured in the copy as well.
A tail starting below the topic's log start (the topic lost records the
copy never got) fails as the source does, unless failOnDataLoss=false.

Not exactly a plain read: the copy holds what the connector's consumer
read (its isolation level decides about aborted transactions) and no
headers, so ``includeHeaders`` and read_committed are refused, as are the
timestamp options (they would have to be resolved in the copy too).

Spark's Python data source API hands Spark rows from Python, never a
native scan, so this cannot be ``spark.read.format("kafkalite")`` itself:
it is a function that unions a native Parquet read with the source's.
Who calls: user code on the driver.
"""
from __future__ import annotations

import json
from functools import reduce

from kafkalite_spark import options as opt
from kafkalite_spark.source import (_COLUMNS, ALL_COLUMNS, SCHEMA, SCHEMA_WITH_HEADERS,
                                    OffsetRange, _consumer, batch_offsets, read_range)

PROPERTY = "kafka.connect.offsets."
# The options read_with_history passes on to the source's reads of the topic
# (besides kafkalite.* client properties); the query's own options
# (subscribe..., startingOffsets, endingOffsets) it resolves itself.
PASSED_ON = ("failOnDataLoss", "minPartitions", "maxRecordsPerPartition",
             "kafkaConsumer.pollTimeoutMs")
TAKEN = ("subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets")
REFUSED = {
    "startingtimestamp": "timestamps would have to be resolved in the copy too",
    "endingtimestamp": "timestamps would have to be resolved in the copy too",
    "startingoffsetsbytimestamp": "timestamps would have to be resolved in the copy too",
    "endingoffsetsbytimestamp": "timestamps would have to be resolved in the copy too",
    "startingoffsetsbytimestampstrategy": "timestamps would have to be resolved in the copy too",
    "includeheaders": "the copy keeps no headers",
    "maxoffsetspertrigger": "it is a streaming option; this is a batch read",
}


def _check_options(options: dict) -> dict:
    """The options as strings, the unsupported ones refused with their reason."""
    known = {n.lower() for n in PASSED_ON + TAKEN}
    out = {}
    for k, v in options.items():
        low = str(k).lower()
        if low in REFUSED and not (low == "includeheaders" and str(v).lower() == "false"):
            raise opt.OptionError(str(k), f"is not supported by read_with_history: "
                                          f"{REFUSED[low]}")
        if low not in known and not low.startswith(opt.CLIENT_PREFIX):
            raise opt.OptionError(str(k), "is not an option read_with_history knows")
        if low == opt.CLIENT_PREFIX + "isolation.level" and \
                str(v).strip().lower() == "read_committed":
            raise opt.OptionError(str(k), "read_committed is not supported by read_with_history: "
                                          "the copy holds what the connector's consumer read")
        out[str(k)] = str(v)
    return out


def _group_snapshot(table, connector: str | None):
    """(snapshot, group property, {(topic, partition): next offset}) of the
    newest snapshot carrying the connector group's offsets; None without one."""
    from pyiceberg.table.snapshots import ancestors_of
    current = table.current_snapshot()
    if current is None:
        return None
    want = None if connector is None else PROPERTY + f"connect-{connector}"
    for snap in ancestors_of(current, table.metadata):
        props = snap.summary.additional_properties if snap.summary else {}
        keys = [k for k in props if k.startswith(PROPERTY)] if want is None else \
            [want] if want in props else []
        if len(keys) > 1:
            raise ValueError(f"table snapshot {snap.snapshot_id} carries the offsets of several "
                             f"connectors ({sorted(k[len(PROPERTY):] for k in keys)}); name "
                             f"the connector")
        if keys:
            offsets = {(t, int(p)): off for t, parts in json.loads(props[keys[0]]).items()
                       for p, off in parts.items()}
            return snap, keys[0], offsets
    return None


def _first_copied(table, snap, key: str, wanted: set) -> tuple[dict, bool]:
    """({(topic, partition): first offset in the copy} for ``wanted``, and
    whether every snapshot from ``snap`` back carries ``key`` (the group
    wrote every row of the table))."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq
    from pyiceberg.manifest import ManifestEntryStatus
    from pyiceberg.table.snapshots import ancestors_of
    oldest: dict = {}          # tp -> the oldest snapshot of the group naming it
    ours = set()               # the group's snapshots still in the table's history
    for s in ancestors_of(snap, table.metadata):
        props = s.summary.additional_properties if s.summary else {}
        if key not in props:
            continue
        ours.add(s.snapshot_id)
        for t, parts in json.loads(props[key]).items():
            for p in parts:
                if (t, int(p)) in wanted:
                    oldest[(t, int(p))] = s
    # every live file added by a snapshot of the group seen here; not so when
    # another writer added files, or snapshots expired (their files live on,
    # older than the oldest snapshot seen): then the copy is never taken whole
    only_ours = all(entry.snapshot_id in ours
                    for manifest in snap.manifests(table.io)
                    for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True))
    first: dict = {}
    by_snapshot: dict = {}
    for tp, s in oldest.items():
        by_snapshot.setdefault(s.snapshot_id, (s, []))[1].append(tp)
    uuid = str(table.metadata.table_uuid)
    for s, tps in by_snapshot.values():
        key_of = {tp: (uuid, s.snapshot_id, tp) for tp in tps}
        if any(k not in _FIRST_ADDED for k in key_of.values()):
            if len(_FIRST_ADDED) > 4096:
                _FIRST_ADDED.clear()
            lows: dict = {}
            for manifest in s.manifests(table.io):
                for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
                    if entry.status != ManifestEntryStatus.ADDED or \
                            entry.snapshot_id != s.snapshot_id:
                        continue
                    with table.io.new_input(entry.data_file.file_path).open() as f:
                        rows = pq.read_table(f, columns=["topic", "partition", "offset"])
                    for t, p in tps:
                        mask = pc.and_(pc.equal(rows["topic"], t), pc.equal(rows["partition"], p))
                        low = pc.min(rows["offset"].filter(mask)).as_py()
                        if low is not None:
                            lows[(t, p)] = min(low, lows.get((t, p), low))
            for tp, k in key_of.items():
                _FIRST_ADDED[k] = lows.get(tp)
        for tp, k in key_of.items():
            if _FIRST_ADDED[k] is not None:
                first[tp] = _FIRST_ADDED[k]
    return first, only_ours


# (table uuid, snapshot id, (topic, partition)) -> the first offset of the rows
# that snapshot added for the partition, or None: what _first_copied reads from
# the snapshot's data files. A snapshot's added files never change, so the
# answer holds for good; which snapshot is asked (the oldest of the group
# still in the history) is worked out afresh each time, so expiry is seen.
_FIRST_ADDED: dict = {}


# The most bytes of records read_with_history reads on the driver (below);
# a topic part larger than this goes to the source. Measured on 2 cores: a
# 20,000-record tail (about 3 MB as Arrow) counted 0.2 s sooner read here
# than through the source's planning and Python workers; at 100,000 (16 MB)
# the Python read and the copy to the JVM cost as much as they save.
DRIVER_READ_MAX_BYTES = 8 << 20


# Spark lists more paths than this setting says (32 by default) with a
# Spark job of its own
LISTING_THRESHOLD_KEY = "spark.sql.sources.parallelPartitionDiscovery.threshold"


def read_parquet_files(spark, schema, paths: list):
    """Spark's Parquet reader over the data files ``paths`` (their schema
    given: no footer read to infer one). Local files are listed on the
    driver whatever their number: the manifests named each one already,
    and above the setting (32 paths by default) Spark lists them with a
    job of its own, which took 0.5-0.6 s of a 185-file table's 0.7 s of
    planning (a count() of its 100,000,000 rows takes 0.3 s), against
    0.1 s for the driver's stat() of each. Files on a remote store keep
    Spark's parallel listing."""
    conf = spark.conf
    before = conf.get(LISTING_THRESHOLD_KEY, None)
    if len(paths) <= int(before or 32) or any(
            "://" in p and not p.startswith("file:") for p in paths):
        return spark.read.schema(schema).parquet(*paths)
    conf.set(LISTING_THRESHOLD_KEY, str(len(paths)))
    try:
        # the listing is made here, as the DataFrame is: the setting is back
        # before any query runs
        return spark.read.schema(schema).parquet(*paths)
    finally:
        if before is None:
            conf.unset(LISTING_THRESHOLD_KEY)
        else:
            conf.set(LISTING_THRESHOLD_KEY, before)


def read_with_history(spark, table: str, catalog: dict, connector: str | None = None,
                      driver_read_max_bytes: int = DRIVER_READ_MAX_BYTES, **options):
    """The DataFrame of a batch read of the topics ``options`` name (the
    ``kafkalite`` source's options: subscribe/subscribePattern/assign,
    startingOffsets, endingOffsets, failOnDataLoss, minPartitions,
    maxRecordsPerPartition, kafkaConsumer.pollTimeoutMs, kafkalite.*),
    the copied offsets read from the Iceberg table ``table`` (namespace.name)
    of the SQL catalog ``catalog`` (pyiceberg SqlCatalog properties: uri,
    warehouse, and name, "kafkalite" by default), the rest from the topic.

    ``connector``: the Iceberg sink connector's name, whose offsets
    (group ``connect-<name>``) bound the copy; None takes the only one the
    table's newest offsets-carrying snapshot has. Unsupported options raise
    a ValueError naming the option.

    ``driver_read_max_bytes``: the records the copy lacks (the tail, and a
    head) are read right here on the driver when they come to at most this
    many bytes, and handed to Spark as Arrow, which the JVM decodes: no
    Python data source to plan and no Python worker to start (0.2 s less
    for a 20,000-record tail, measured). Larger ones (the read stops at
    the limit), and all with 0, go through the ``kafkalite`` source."""
    from kafkalite.iceberg_catalog import sql_catalog
    from kafkalite_spark.source import register
    given = _check_options(options)
    o = opt.parse_source(given, streaming=False)
    with _consumer(o) as consumer:
        tps, starts, ends = batch_offsets(o, consumer)
    # from the copy's first row where the query starts at the earliest offset
    from_start = {tp: o.starting.kind == "earliest" or
                  (o.starting.kind == "offsets" and o.starting.offsets[tp] == opt.EARLIEST)
                  for tp in tps}

    from pyiceberg.exceptions import NoSuchTableError
    props = dict(catalog)
    ice = sql_catalog(props.pop("name", "kafkalite"), **props)
    try:
        iceberg_table = ice.load_table(table)
    except NoSuchTableError:
        # a misspelt name must not turn into a silent read of the whole topic
        raise ValueError(f"read_with_history: no Iceberg table {table!r} in the catalog "
                         f"{props.get('uri')}") from None
    found = _group_snapshot(iceberg_table, connector)
    if found is None:
        snap, boundary, first, only_ours = None, {}, {}, False
    else:
        snap, key, boundary = found
        first, only_ours = _first_copied(iceberg_table, snap, key,
                                         {tp for tp in tps if tp in boundary})

    copy, head, tail = split_ranges(tps, starts, ends, from_start, boundary, first)

    register(spark)
    frames = []
    if copy:
        files = [t.file.file_path for t in
                 iceberg_table.scan(snapshot_id=snap.snapshot_id).plan_files()]
        # the source's schema given: columns in its order and types, and no
        # footer read to infer one
        df = read_parquet_files(spark, SCHEMA, files)
        # the whole copy wanted, and nobody else's rows in it: no filter, so that
        # Spark can answer count() from the Parquet footers
        whole = only_ours and set(copy) == set(first) == set(boundary) and all(
            copy[tp] == (first[tp], boundary[tp]) for tp in copy)
        if not whole:
            df = df.where(" OR ".join(
                f"(topic = {_sql_string(t)} AND partition = {p} AND offset >= {lo} AND "
                f"offset < {hi})" for (t, p), (lo, hi) in sorted(copy.items())))
        frames.append(df)
    for ranges in (tail, head):
        if ranges:
            local = driver_read(spark, o, ranges, driver_read_max_bytes)
            frames.append(_topic_read(spark, given, ranges) if local is None else local)
    if not frames:
        return spark.createDataFrame([], SCHEMA)
    return reduce(lambda a, b: a.unionByName(b), frames)


def split_ranges(tps, starts: dict, ends: dict, from_start: dict, boundary: dict, first: dict,
                 key=lambda tp: tp) -> tuple[dict, dict, dict]:
    """Each topic partition's wanted offsets [start, end) split by what its
    copy holds, [first, boundary) of ``key(tp)``: (the part read from the
    copy, by ``key(tp)``; the part before the copy's first offset; the part
    past its boundary), each {.. : (from, to)} with non-empty ranges only.
    A read from the start takes the copy from its first offset. Shared by
    read_with_history (a sink's copy, by topic partition) and read_topic
    (an Iceberg topic's table, by partition)."""
    copy, head, tail = {}, {}, {}
    for tp in tps:
        k, s, e = key(tp), starts[tp], ends[tp]
        if k in first:
            b, f = boundary[k], first[k]
            lo = f if from_start[tp] else max(s, f)
            if min(b, e) > lo:
                copy[k] = (lo, min(b, e))
            if min(f, e) > s:
                head[tp] = (s, min(f, e))
            if e > max(s, b):
                tail[tp] = (max(s, b), e)
        elif e > s:
            tail[tp] = (s, e)
    return copy, head, tail


def _sql_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def driver_read(spark, o: opt.SourceOptions, ranges: dict, max_bytes: int):
    """The records of ``ranges`` ({tp: (from, to)}) read on the driver, as
    the DataFrame of one Arrow table (the source's own reads, batch for
    batch: the same rows and errors; the headers column with
    ``includeHeaders``); None once they pass ``max_bytes``."""
    import pyarrow as pa
    if max_bytes <= 0:
        return None
    columns = ALL_COLUMNS + (("headers",) if o.include_headers else ())
    batches, size = [], 0
    for (t, p), (lo, hi) in sorted(ranges.items()):
        records = read_range(o, OffsetRange(t, p, lo, hi), columns)
        try:
            for batch in records:
                size += batch.nbytes
                if size > max_bytes:
                    return None
                batches.append(batch)
        finally:
            records.close()      # the consumer in it, when the limit stopped the read
    arrow = pa.schema([(c, _COLUMNS[c][1]) for c in columns])
    return spark.createDataFrame(pa.Table.from_batches(batches, arrow),
                                 SCHEMA_WITH_HEADERS if o.include_headers else SCHEMA)


def _topic_read(spark, given: dict, ranges: dict):
    """The ``kafkalite`` source over ``ranges`` ({tp: (from, to)})."""
    assign, start, end = {}, {}, {}
    for (t, p), (lo, hi) in sorted(ranges.items()):
        assign.setdefault(t, []).append(p)
        start.setdefault(t, {})[str(p)] = lo
        end.setdefault(t, {})[str(p)] = hi
    passed = {n.lower() for n in PASSED_ON}
    r = spark.read.format("kafkalite")
    for k, v in given.items():
        if k.lower() in passed or k.lower().startswith(opt.CLIENT_PREFIX):
            r = r.option(k, v)
    return (r.option("assign", json.dumps(assign)).option("startingOffsets", json.dumps(start))
            .option("endingOffsets", json.dumps(end)).load())
