"""An Iceberg topic as a table: the offsets its Iceberg table holds read
from the table's Parquet files, the others from the log.

A topic with ``iceberg.mode=key_value`` (docs/iceberg-topics.md) is kept
by its partition leaders as the table ``kafkalite.<topic>``; each
snapshot's summary says, per partition, the next offset the table holds
(``kafkalite.next-offset.<p>``, B), and the table holds every offset of
a partition from the first its leaders committed (F) up to B, each once,
as a read_committed consumer reads them. ``history`` reads ONE snapshot,
the current one, so its files and its offsets belong together however
the table moves meanwhile, and, per partition, with the log's start L
and last stable offset E fixed first (as topic_source.history fixes
them):

    table   [F, min(B, E))    the snapshot's data files (pyarrow's Parquet reader)
    head    [L, min(F, E))    the log: what the table never had
    tail    [max(L, B), E)    the log: what is not committed to the table yet

so every record of the topic below E is a row once (no gap, no duplicate
at B). F is the least offset the files give of a partition, known once
they are read: the files come first, the log after. Rows the topic's
retention deleted but the table keeps (below L) are rows too: the
topic's whole history, more than its log, never less (as the Spark
connector's read_topic).

Only the columns the query reads are read from the files (``columns``:
DuckDB's plan's projection; ``partition`` and ``offset`` always, for the
bounds above), the others are null: a count reads two columns of each
file, not its values. The files are read through the table's FileIO (a
local warehouse, or the tiered store's S3 bucket), not by DuckDB, whose
session cannot reach files (session.py): the Parquet reader hands DuckDB
Arrow batches as the log read does.

The table is found through the server's REST catalog (the ``iceberg_rest``
endpoint; the user's credentials, so the catalog's ACL check is the
user's too); the user's Read on the topic is checked before (session.py)
as for a log read. A decoded table (``value_schema_*`` modes) is not read:
its rows have no raw value.

Who may call: session.py, on the thread that runs the query.
"""
from __future__ import annotations

import base64
import collections
import threading

import pyarrow as pa
import pyarrow.compute as pc

from kafkalite.sql import topic_source
from kafkalite.sql.topic_source import BASE_SCHEMA

NAMESPACE = "kafkalite"                   # the namespace of the leaders' tables
NEXT_OFFSET = "kafkalite.next-offset."    # + partition: the snapshot summary's offsets
BATCH_ROWS = 65536                        # rows of a Parquet batch handed to DuckDB
# the table's column of each base column (headers' and key's element
# names differ from the log read's types only by name: cast)
_FILE_COLUMNS = {"partition": "redpanda.partition", "offset": "redpanda.offset",
                 "timestamp": "redpanda.timestamp", "key": "redpanda.key",
                 "value": "value", "headers": "redpanda.headers"}


class Counts:
    """What a query read from table files: ``rows`` (after the offset
    bounds), ``files``; and ``log_rows`` from the log beside them."""

    def __init__(self):
        self.rows = self.files = self.log_rows = 0


def open_catalog(uri: str, user_info: str | None = None):
    """pyiceberg's client of kafkalite's REST catalog at ``uri``, as the
    user ``user_info`` (``name:password``; None: anonymous)."""
    from pyiceberg.catalog import load_catalog
    props = {"type": "rest", "uri": uri}
    if user_info:
        props["header.Authorization"] = "Basic " + base64.b64encode(
            user_info.encode()).decode()
    return load_catalog(NAMESPACE, **props)


def current(catalog, topic: str):
    """(table, its current snapshot) of ``topic``'s key_value table; None
    when there is no table yet, no snapshot, or a decoded table."""
    from pyiceberg.exceptions import NoSuchTableError
    try:
        table = catalog.load_table((NAMESPACE, topic))
    except NoSuchTableError:
        return None
    snapshot = table.current_snapshot()
    if snapshot is None or table.schema().find_column_name(2) != "value":
        return None
    return table, snapshot


def boundary(snapshot) -> dict[int, int]:
    """{partition: the next offset the snapshot holds} (its summary's)."""
    props = snapshot.summary.additional_properties if snapshot.summary else {}
    return {int(k[len(NEXT_OFFSET):]): int(v) for k, v in props.items()
            if k.startswith(NEXT_OFFSET)}


def history(client_config: dict, topic: str, table, snapshot, columns: set[str] | None = None,
            timeout: float = 30.0, counts: Counts | None = None):
    """Batches (BASE_SCHEMA) of ``topic``'s whole history: the offsets
    ``snapshot`` of ``table`` holds from its files, the rest from the log
    (the module's doc). Base columns not in ``columns`` (None: all) are
    null; ``value`` is read when a column not of the base is named (a
    value column decodes it)."""
    counts = counts if counts is not None else Counts()
    consumer = topic_source.Consumer(topic_source.consumer_config(client_config))
    try:
        marks = topic_source.watermarks(consumer, topic, timeout)
    finally:
        consumer.close()
    held = boundary(snapshot)
    # the table's rows of a partition end where its log's do now, or before
    stop = {p: min(held.get(p, 0), high) for p, (_, high) in marks.items()}
    first: dict[int, int] = {}
    for batch in _table_rows(table, snapshot, stop, _wanted(columns), counts):
        for p, lo in _least_offsets(batch).items():
            first[p] = min(lo, first.get(p, lo))
        yield batch
    ranges = {}
    for p, (low, high) in marks.items():
        ranges[(p, "head")] = (low, min(first.get(p, stop[p]), high))
        ranges[(p, "tail")] = (max(low, stop[p]), high)
    for part in ("head", "tail"):
        for batch in topic_source.offset_ranges(
                client_config, topic, {p: r for (p, which), r in ranges.items() if which == part}):
            counts.log_rows += batch.num_rows
            yield batch


def _wanted(columns: set[str] | None) -> set[str]:
    if columns is None:
        return set(BASE_SCHEMA.names)
    wanted = {"partition", "offset"} | (columns & set(BASE_SCHEMA.names))
    if columns - set(BASE_SCHEMA.names):
        wanted.add("value")         # a value column: decoded from the value
    return wanted


def _table_rows(table, snapshot, stop: dict[int, int], wanted: set[str], counts: Counts):
    """The rows of ``snapshot``'s data files below ``stop`` ({partition:
    offset}; partitions not in it: none), as BASE_SCHEMA batches."""
    import pyarrow.parquet as pq
    if not any(stop.values()):
        return
    bound = pa.array([stop.get(p, 0) for p in range(max(stop) + 1)], pa.int64())
    names = [name for name in BASE_SCHEMA.names if name in wanted]
    for path in data_files(table, snapshot):
        counts.files += 1
        with _open(table, path) as f:
            parquet = pq.ParquetFile(f)
            for batch in parquet.iter_batches(BATCH_ROWS, columns=[
                    _FILE_COLUMNS[name] for name in names], use_threads=False):
                batch = _as_base(batch, names)
                parts = batch.column("partition")
                # partitions past the topic's (none, but a file is not trusted to index)
                known = pc.less(parts, len(bound))
                keep = pc.and_(known, pc.less(batch.column("offset"), pc.take(
                    bound, pc.if_else(known, parts, 0))))
                if not pc.all(keep).as_py():
                    batch = batch.filter(keep)
                if batch.num_rows:
                    counts.rows += batch.num_rows
                    yield batch


# (table uuid, snapshot id) -> its data files' paths, the last PLANS_KEPT
# planned: a snapshot never changes, and planning one reads its manifests
# (0.23 s for a 185-file table, the Spark connector's read_topic measured)
_PLANS: collections.OrderedDict = collections.OrderedDict()
_PLANS_LOCK = threading.Lock()        # the HTTP app's sessions run on threads
PLANS_KEPT = 16


def data_files(table, snapshot) -> list[str]:
    """The paths of ``snapshot``'s data files, planned once per snapshot."""
    key = (str(table.metadata.table_uuid), snapshot.snapshot_id)
    with _PLANS_LOCK:
        found = _PLANS.get(key)
        if found is not None:
            _PLANS.move_to_end(key)
            return found
    found = [task.file.file_path
             for task in table.scan(snapshot_id=snapshot.snapshot_id).plan_files()]
    with _PLANS_LOCK:
        _PLANS[key] = found
        while len(_PLANS) > PLANS_KEPT:
            _PLANS.popitem(last=False)
    return found


def _open(table, path: str):
    """A data file: a local one memory-mapped (0.044-0.055 s against
    0.058-0.065 s through the FileIO's stream for 500,000 rows' key and
    value, warm), any other through the table's FileIO (S3)."""
    if path.startswith("file://"):
        return pa.memory_map(path[len("file://"):])
    return table.io.new_input(path).open()


def _as_base(batch: pa.RecordBatch, names: list[str]) -> pa.RecordBatch:
    """A batch of the table's columns ``names`` (base names) as BASE_SCHEMA's,
    the columns not read null."""
    redpanda = batch.column("redpanda") if "redpanda" in batch.schema.names else None
    arrays = []
    for field in BASE_SCHEMA:
        if field.name not in names:
            arrays.append(pa.nulls(batch.num_rows, field.type))
        elif field.name == "value":
            arrays.append(batch.column("value").cast(field.type))
        else:
            arrays.append(pc.struct_field(redpanda, field.name).cast(field.type))
    return pa.RecordBatch.from_arrays(arrays, schema=BASE_SCHEMA)


def _least_offsets(batch: pa.RecordBatch) -> dict[int, int]:
    """{partition: least offset} of a batch's rows."""
    grouped = pa.table({"p": batch.column("partition"), "o": batch.column("offset")}) \
        .group_by("p").aggregate([("o", "min")])
    return dict(zip(grouped.column("p").to_pylist(), grouped.column("o_min").to_pylist()))
