"""The Iceberg table of a topic: catalog, schema, Arrow columns, commit.

Layout (Redpanda's ``key_value`` mode), table ``kafkalite.<topic>``:

    redpanda  struct
      partition  int          the Kafka partition
      offset     long         the record's offset
      timestamp  timestamptz  the record's timestamp (microseconds, UTC)
      headers    list<struct<key string, value binary>>
      key        binary       null: no key
    value     binary          null: a tombstone

partitioned by ``hour(redpanda.timestamp)``.

With ``value_schema_id_prefix`` and ``value_schema_latest`` (``decoded``
tables) there is no ``value`` column: the value's fields are columns beside
``redpanda`` (avro_values.py), added by the commit that first writes a
record with them (``update_schema().union_by_name`` in the same
transaction as the append: no data file is rewritten, older rows read the
new column as null). The dead-letter table ``<topic>~dlq`` (Redpanda's
name) has the key_value layout: the records that did not decode, their
value as it was.

Snapshot summary: every commit's summary carries
``kafkalite.next-offset.<partition>`` for every partition the table has
records of (the commit copies the others from the snapshot before it), so
the latest snapshot alone says where each partition's leader resumes.

Catalog: pyiceberg's SqlCatalog on ``<root>/catalog.db`` (SQLite), data
and metadata under ``<root>/warehouse`` unless a warehouse is given (a
directory, or ``s3://<bucket>/iceberg`` in the tiered store's bucket,
written through pyiceberg's PyArrowFileIO); on a cluster, the catalog is
in the cluster's PostgreSQL (``uri``, storage/iceberg/__init__.py's
cluster_catalog_uri) and the warehouse one every node reaches (a shared
directory or the bucket), so that a partition's leader on any node
commits to the one table. The
workers (of a node, or of every node) share it; the catalog's update of
the metadata location is a compare-and-swap (SQLite serializes it, and
PostgreSQL's UPDATE of the row re-checks the old location after waiting
for a concurrent one), so two leaders of a partition (one deposed, one
new, perhaps on different nodes) cannot both commit the same offsets.

Who may call: any one thread at a time per ``TopicTable`` (the worker's
Iceberg thread).
"""
from __future__ import annotations

import os
import threading

import numpy as np

from kafkalite.storage.iceberg import CATALOG_FILE, NAMESPACE  # noqa: F401 (its names too)
from kafkalite.storage.iceberg.partition_spec import DEFAULT_PARTITION_SPEC, partition_spec
WAREHOUSE_DIR = "warehouse"
NEXT_OFFSET = "kafkalite.next-offset."      # + partition, in the snapshot summary
COMMIT_ATTEMPTS = 5                          # a commit that lost a race is redone this often
# pyiceberg retries a failed append by itself, onto whatever the table has
# become, with the snapshot summary it was given: the records another
# leader committed meanwhile would be written again, and the summary's
# offsets go stale. The table's commits are never retried by pyiceberg:
# TopicTable.commit starts over from the new summary instead.
NO_RETRIES = {"commit.retry.num-retries": "0"}


def _arrow():
    import pyarrow as pa
    return pa


def arrow_schema():
    """The Arrow schema of the records appended (field names and types as
    the table's, which pyiceberg maps by name)."""
    pa = _arrow()
    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    return pa.schema([
        ("redpanda", pa.struct([
            ("partition", pa.int32()), ("offset", pa.int64()),
            ("timestamp", pa.timestamp("us", tz="UTC")), ("headers", pa.list_(header)),
            ("key", pa.binary())])),
        ("value", pa.binary()),
    ])


def iceberg_schema():
    from pyiceberg.schema import Schema
    from pyiceberg.types import (BinaryType, IntegerType, ListType, LongType, NestedField,
                                 StringType, StructType, TimestamptzType)
    header = StructType(NestedField(9, "key", StringType(), required=False),
                        NestedField(10, "value", BinaryType(), required=False))
    return Schema(
        NestedField(1, "redpanda", StructType(
            NestedField(3, "partition", IntegerType(), required=False),
            NestedField(4, "offset", LongType(), required=False),
            NestedField(5, "timestamp", TimestamptzType(), required=False),
            NestedField(6, "headers", ListType(8, header, element_required=False),
                        required=False),
            NestedField(7, "key", BinaryType(), required=False)), required=False),
        NestedField(2, "value", BinaryType(), required=False))


def decoded_iceberg_schema():
    """The schema a decoded table starts with: ``redpanda`` alone, the
    value's columns come with the records."""
    from pyiceberg.schema import Schema
    return Schema(iceberg_schema().find_field("redpanda"))


_catalogs: dict = {}
_catalogs_lock = threading.Lock()


def open_catalog(root: str, warehouse: str | None = None, uri: str | None = None,
                 file_io: dict | None = None):
    """The SQL catalog at ``uri`` (a cluster's PostgreSQL), default the
    SQLite file under ``root``; tables' files under ``warehouse`` (default
    ``<root>/warehouse``): a directory, or a location pyiceberg's FileIO
    reaches (``s3://<bucket>/<prefix>``, the tiered store's bucket), with
    the FileIO properties ``file_io`` (``s3.endpoint``, ``s3.region``;
    credentials come from the AWS environment). Made through
    iceberg_catalog.sql_catalog: the workers share the catalog and open it
    at once when they lead partitions of Iceberg topics, and pyiceberg's
    first use of a new catalog races another process's."""
    from kafkalite.iceberg_catalog import sql_catalog
    warehouse = warehouse or os.path.join(root, WAREHOUSE_DIR)
    directory = None if "://" in warehouse else os.path.abspath(warehouse)
    if directory is not None:
        warehouse = f"file://{directory}"
    sqlite = uri is None
    uri = uri or f"sqlite:///{os.path.abspath(os.path.join(root, CATALOG_FILE))}"
    # one catalog (one SQLAlchemy engine and its connection pool) per
    # catalog and warehouse in a process, however many topics' tables it
    # writes: a catalog per table held a pool per table, on a cluster as
    # many PostgreSQL connections (its sessions are per call, so the
    # tables' threads share it as they share the database)
    with _catalogs_lock:
        catalog = _catalogs.get((uri, warehouse))
        if catalog is None:
            if sqlite:      # its directory: with an S3 warehouse, nothing else is on this disk
                os.makedirs(root, exist_ok=True)
            if directory is not None:
                os.makedirs(directory, exist_ok=True)
            catalog = _catalogs[(uri, warehouse)] = sql_catalog(
                NAMESPACE, uri=uri, warehouse=warehouse, **(file_io or {}))
        return catalog


def committed_offsets(table) -> dict[int, int]:
    """partition -> next offset, from the table's latest snapshot summary."""
    snapshot = table.current_snapshot()
    if snapshot is None or snapshot.summary is None:
        return {}
    out = {}
    for name, value in snapshot.summary.additional_properties.items():
        if name.startswith(NEXT_OFFSET):
            out[int(name[len(NEXT_OFFSET):])] = int(value)
    return out


class TopicTable:
    """The table of one topic, created at first use."""

    def __init__(self, root: str, topic: str, warehouse: str | None = None,
                 name: str | None = None, decoded: bool = False, uri: str | None = None,
                 file_io: dict | None = None, partition_spec: str = DEFAULT_PARTITION_SPEC):
        self.root = root
        self.warehouse = warehouse
        self.uri = uri
        self.file_io = file_io
        self.topic = topic
        self.identifier = (NAMESPACE, name or topic)
        self.decoded = decoded
        self.partition_spec = partition_spec    # iceberg.partition.spec, taken at creation
        self._catalog = None
        self._table = None

    def load(self):
        """The table as the catalog has it now (created if it is not there)."""
        from pyiceberg.exceptions import TableAlreadyExistsError

        from kafkalite.iceberg_catalog import create_namespace
        if self._catalog is None:
            self._catalog = open_catalog(self.root, self.warehouse, self.uri, self.file_io)
        if self._table is None:
            create_namespace(self._catalog, NAMESPACE)    # the workers make it at once
            try:
                self._table = self._catalog.create_table(
                    self.identifier,
                    schema=decoded_iceberg_schema() if self.decoded else iceberg_schema(),
                    partition_spec=partition_spec(self.partition_spec,
                                                  key_value=not self.decoded),
                    properties=NO_RETRIES)
            except TableAlreadyExistsError:
                self._table = self._catalog.load_table(self.identifier)
            if any(self._table.properties.get(k) != v for k, v in NO_RETRIES.items()):
                with self._table.transaction() as tx:
                    tx.set_properties(NO_RETRIES)
        else:
            self._table = self._table.refresh()
        return self._table

    def reload(self) -> None:
        """Load the table from the catalog again at the next ``load``
        (after a lost compare-and-swap)."""
        self._table = None

    def committed_offset(self, partition: int) -> int | None:
        """The next offset of ``partition`` the table holds up to (None: none of it)."""
        return committed_offsets(self.load()).get(partition)

    def commit(self, partition: int, records_from, next_offset_of) -> int:
        """Append what ``records_from(committed, arrow_schema)`` gives (an
        Arrow table of the partition's records from the committed offset on,
        in the table's ``arrow_schema``) and record
        ``next_offset_of(committed)`` as the partition's next offset, in one
        snapshot; redone from the new committed offset when another commit
        came first. Returns the partition's next offset as committed."""
        from pyiceberg.exceptions import CommitFailedException
        for attempt in range(COMMIT_ATTEMPTS):
            table = self.load()
            committed = committed_offsets(table).get(partition, 0)
            next_offset = next_offset_of(committed)
            if next_offset <= committed:
                return committed
            try:
                self.append(table, partition, next_offset,
                            lambda schema: records_from(committed, schema))
                return next_offset
            except CommitFailedException:
                self._table = None
                if attempt == COMMIT_ATTEMPTS - 1:
                    raise
        return committed

    def append(self, table, partition: int, next_offset: int, records_of,
               evolve=()) -> None:
        """One snapshot on ``table`` as loaded: the table's schema merged
        with the Arrow schemas ``evolve``, in their order (columns added,
        types promoted), the records ``records_of(arrow_schema)`` gives (in
        the table's schema after that) appended, and ``next_offset``
        recorded as the partition's (the others' copied). Raises
        CommitFailedException when the table changed since it was loaded."""
        offsets = committed_offsets(table)
        offsets[partition] = max(next_offset, offsets.get(partition, 0))
        summary = {f"{NEXT_OFFSET}{p}": str(o) for p, o in sorted(offsets.items())}
        with table.transaction() as tx:
            current = tx.table_metadata.schema()
            # one schema the table becomes, unioned once: pyiceberg's
            # union_by_name matches names against the schema its update
            # started from, not its own pending changes, so a second value
            # schema unioned into the same update would add its columns
            # again under new field ids (two ``user`` columns, 10 and 12:
            # a schema the commit refuses, every time it is tried)
            target = current
            for schema in evolve:
                target = merged_schema(table, target, schema)
            if target.as_struct() != current.as_struct():
                with tx.update_schema() as update:
                    update.union_by_name(target)
            records = records_of(tx.table_metadata.schema().as_arrow())
            with tx.update_snapshot(snapshot_properties=summary).fast_append() as files:
                # no records (only aborted ones or markers): a snapshot of no
                # files still moves the offset
                if records.num_rows:
                    _append_with_record_bounds(tx, table.io, files, records)

    def offsets_between(self, partition: int, low: int, high: int) -> set[int]:
        """The offsets of ``partition`` in [low, high) the table holds."""
        from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan
        rows = self.load().scan(
            row_filter=And(EqualTo("redpanda.partition", partition),
                           And(GreaterThanOrEqual("redpanda.offset", low),
                               LessThan("redpanda.offset", high))),
            selected_fields=("redpanda.partition", "redpanda.offset")).to_arrow()
        out = set()
        for r in rows.column("redpanda").to_pylist():
            if r["partition"] == partition and low <= r["offset"] < high:
                out.add(r["offset"])
        return out


# The record columns whose bounds each data file's manifest entry carries.
# pyiceberg's writer keeps only counts for a struct's fields, so a reader
# (Spark's Iceberg reader, Trino, DuckDB, pyiceberg, kafkalite_spark's
# read_topic) could not skip a file by partition, offset or time without
# opening its footer.
BOUNDED = ("redpanda.partition", "redpanda.offset", "redpanda.timestamp")


def _append_with_record_bounds(tx, io, files, records) -> None:
    """``records`` written as data files (pyiceberg's writer: its
    partitioning by the table's spec, its file sizes, its column metrics)
    and added to the snapshot ``files`` makes, each with the lower and upper
    bounds of BOUNDED read from its own Parquet footer."""
    import uuid

    from pyiceberg.io.pyarrow import _dataframe_to_data_files
    schema = tx.table_metadata.schema()
    for data_file in _dataframe_to_data_files(
            table_metadata=tx.table_metadata, df=records, io=io,
            write_uuid=getattr(files, "commit_uuid", None) or uuid.uuid4()):
        _add_record_bounds(io, schema, data_file)
        files.append_data_file(data_file)


def _add_record_bounds(io, schema, data_file) -> None:
    """Set ``data_file``'s bounds of BOUNDED from its row groups' statistics
    (a column without them keeps none: a reader then opens the file)."""
    import datetime

    from pyiceberg.conversions import to_bytes
    # the DataFile's own dicts, filled in place (its fields have no setters)
    lower, upper = data_file.lower_bounds, data_file.upper_bounds
    if lower is None or upper is None:
        return
    from kafkalite.iceberg_catalog import footer_bounds
    for name, (low, high) in footer_bounds(io, data_file.file_path, BOUNDED).items():
        if isinstance(low, datetime.datetime):     # timestamptz: microseconds since the epoch
            epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
            low, high = ((v - epoch) // datetime.timedelta(microseconds=1) for v in (low, high))
        field = schema.find_field(name)
        lower[field.field_id] = to_bytes(field.field_type, low)
        upper[field.field_id] = to_bytes(field.field_type, high)


class SchemaMismatch(Exception):
    """A value schema the table's schema cannot take (a column's type
    changed to one Iceberg cannot promote to, a struct become a list...)."""


def merged_schema(table, current, schema):
    """The Iceberg schema ``current`` (a schema of ``table``) becomes with
    the Arrow ``schema``'s columns unioned by name, worked out without
    committing anything; SchemaMismatch when Iceberg refuses the change.
    Why ask before appending: a refused ``union_by_name`` (or a value that
    does not fit the column's old type) fails the whole commit, and the
    same records would fail every retry of it: the partition would stop."""
    from pyiceberg.exceptions import ResolveError, ValidationError
    from pyiceberg.table.update.schema import UpdateSchema
    update = UpdateSchema(table.transaction(), schema=current)
    try:
        update.union_by_name(schema)
        return update._apply()
    except (ValidationError, ResolveError, ValueError, TypeError) as exc:
        raise SchemaMismatch(str(exc)) from None


def columns_to_table(cols, partition: int, keep: np.ndarray | None = None):
    """A RecordColumns (``decode_columns``) as an Arrow table of the layout
    above; ``keep``: a boolean mask of the records to take."""
    pa = _arrow()
    n = len(cols)
    schema = arrow_schema()
    rp = schema.field("redpanda").type
    header_type = rp.field("headers").type

    def binary(offsets, data, valid, stop):
        bitmap = None if valid.all() else pa.py_buffer(np.packbits(valid, bitorder="little"))
        return pa.Array.from_buffers(pa.binary(), stop, [bitmap, pa.py_buffer(offsets),
                                                         pa.py_buffer(data)])
    h = int(cols.header_offsets[n]) if n else 0
    entries = pa.StructArray.from_arrays([
        binary(cols.header_key_offsets[:h + 1], cols.header_key_data,
               np.ones(h, dtype=bool), h).cast(pa.string()),
        binary(cols.header_value_offsets[:h + 1], cols.header_value_data,
               cols.header_value_valid[:h], h)], names=["key", "value"])
    headers = pa.ListArray.from_arrays(pa.array(cols.header_offsets, pa.int32()), entries,
                                       type=header_type)
    micros = cols.timestamps.astype(np.int64) * 1000
    struct = pa.StructArray.from_arrays([
        pa.array(np.full(n, partition, dtype=np.int32)),
        pa.array(cols.offsets, pa.int64()),
        pa.array(micros, rp.field("timestamp").type),
        headers,
        binary(cols.key_offsets, cols.key_data, cols.key_valid, n),
    ], fields=list(rp))
    table = pa.Table.from_arrays(
        [struct, binary(cols.value_offsets, cols.value_data, cols.value_valid, n)],
        schema=schema)
    return table if keep is None or keep.all() else table.filter(pa.array(keep))
