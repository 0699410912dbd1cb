"""The partition leader's writer of an Iceberg topic's table.

``IcebergTopicWriter.maybe_commit(key, log, lag_ms)`` is called by the
partition log's owner at each housekeeping tick while it leads the
partition. It decides, on the owner's thread, whether a commit is due --
records below the last stable offset not in the table yet, and
``iceberg.target.lag.ms`` passed since the last commit or a segment rolled
since, or a backlog left by the last one -- and what to read: the file
regions of the log from the partition's next offset up to the LSO (at most
``MAX_COMMIT_BYTES``) with the aborted transactions they may hold, each
region's file descriptor duplicated so that retention closing the segment
cannot pull it from under the read. The reading, decoding
(``decode_columns``, read_committed: aborted records and control batches
left out) and commit run on the worker's Iceberg thread (background.py).

Where a partition resumes: on its first tick here the thread reads the
partition's next offset from the table's latest snapshot summary. Each
commit reads it again (topic_table.TopicTable.commit) and writes only the
records from it on; a commit that finds the table behind where this
writer read from (this writer's idea of the table was stale; it never
writes past a hole) writes nothing and the writer starts again from the
table's offset. Records below the log start offset (deleted by
retention before they were committed) cannot be written: the table starts
at the log start then. Records below a tiered log's local log start
are read from its remote segments: the owner calls ``maybe_commit``
reading in the background (remote_log.reading_in_background), so a segment
not in the remote cache is downloaded by the remote reader's threads, not
on the owner's loop; the commit is planned again at a later tick, once it
is there.

Decoded modes (``value_schema_id_prefix``, ``value_schema_latest``): each
value is decoded through its schema (registry_lookup.py, avro_values.py);
the records that decode go to the topic's table, the others (no magic
byte, an id the registry has not, a schema that cannot be columns, a body
that is not one datum, a tombstone, a schema the table's cannot be merged
with: a type Iceberg cannot promote -- appending them would fail every
retry and stop the partition) to the dead-letter table
``<topic>~dlq``, their value as it was. The two tables cannot be
committed in one transaction, so the dead-letter table is committed first
and the topic's table second, and the topic's table's summary is where the
partition resumes. Each table's summary says up to where it holds the
partition; where the dead-letter table is ahead (a commit that ended
between the two, or a deposed leader's), the records it already holds
from the topic table's offset on are read from it and left out of both
tables on the next commit: every offset lands in exactly one of the two.
With ``iceberg.invalid.record.action=drop`` (Redpanda's) there is no
dead-letter table: the records that would go there go nowhere (they stay
in the topic), and the topic's table alone is committed.
Each append is a compare-and-swap on its table; a lost one starts the
whole commit over from both summaries.

Contract: ``maybe_commit``, ``forget`` on the log owner's thread; the
commits on the Iceberg thread, one at a time per worker.
"""
from __future__ import annotations

import logging
import os
import time

from kafkalite.storage.background import BackgroundThread
from kafkalite.storage.remote.remote_log import RemoteReadPending
from kafkalite.storage.config import (ICEBERG_DROP, ICEBERG_KEY_VALUE,
                                      ICEBERG_VALUE_SCHEMA_ID_PREFIX, iceberg_mode_parts)
from kafkalite.storage.iceberg.partition_spec import DEFAULT_PARTITION_SPEC

log = logging.getLogger(__name__)

ICEBERG_DIR = "iceberg"          # the catalog's directory in the data directory
MAX_COMMIT_BYTES = 64 << 20     # bytes of the log read for one commit
READ_CHUNK = 16 << 20           # decoded at a time
# how long after a failed commit the writer tries again
RETRY_S = 1.0
DLQ_SUFFIX = "~dlq"             # the dead-letter table: <topic>~dlq (Redpanda's name)
MAGIC_BYTE = 0                  # the schema registry's wire format: 0, a 4-byte id, the body
PREFIX_BYTES = 5

_iceberg_thread = BackgroundThread("kafkalite-iceberg")


class _Gap(Exception):
    """The table holds the partition up to below where this commit read from."""

    def __init__(self, committed: int):
        self.committed = committed


class _PartitionState:
    __slots__ = ("next_offset", "last_commit", "active_base", "future", "backlog",
                 "failed_at")

    def __init__(self):
        self.next_offset: int | None = None      # None: not read from the table yet
        self.last_commit = time.monotonic()
        self.active_base = -1
        self.future = None
        self.backlog = False
        self.failed_at = 0.0


class IcebergTopicWriter:
    """The Iceberg commits of the partitions a worker leads, into the
    catalog at ``uri`` (a cluster's PostgreSQL; default the SQLite catalog
    under ``root``) and the warehouse (default: under ``root`` too; a
    directory, or an ``s3://`` location read and written with the FileIO
    properties ``file_io``). ``refused``: why this worker cannot keep
    tables (a cluster with no warehouse every node reaches): no commit is
    made, and the partitions it leads say why in the log, once each."""

    def __init__(self, root: str, warehouse: str | None = None, uri: str | None = None,
                 refused: str | None = None, file_io: dict | None = None):
        self.root = root
        self.warehouse = warehouse
        self.uri = uri
        self.file_io = dict(file_io or {})
        self.refused = refused
        self._partitions: dict[tuple[str, int], _PartitionState] = {}
        self._tables: dict = {}
        self._lookup = None
        self._told: set[tuple[str, int]] = set()    # partitions told of ``refused``

    def _table(self, topic: str, mode: str, config=None):
        """The topic's TopicTable (key_value), or its _DecodedTables;
        ``config``: the topic's LogConfig (its partition spec, what becomes
        of a value that does not decode), None: the defaults."""
        from kafkalite.storage.iceberg.topic_table import TopicTable
        spec = getattr(config, "iceberg_partition_spec", DEFAULT_PARTITION_SPEC)
        drop = getattr(config, "iceberg_invalid_record_action", None) == ICEBERG_DROP
        table = self._tables.get((topic, mode, spec, drop))
        if table is None:
            name, options = iceberg_mode_parts(mode)
            if name == ICEBERG_KEY_VALUE:
                table = TopicTable(self.root, topic, self.warehouse, uri=self.uri,
                                   file_io=self.file_io, partition_spec=spec)
            else:
                if self._lookup is None:
                    from kafkalite.storage.iceberg.registry_lookup import RegistryLookup
                    self._lookup = RegistryLookup(os.path.dirname(os.path.abspath(self.root)))
                table = _DecodedTables(
                    TopicTable(self.root, topic, self.warehouse, decoded=True, uri=self.uri,
                               file_io=self.file_io, partition_spec=spec),
                    None if drop else TopicTable(self.root, topic, self.warehouse,
                                                 name=topic + DLQ_SUFFIX, uri=self.uri,
                                                 file_io=self.file_io),
                    self._lookup, name == ICEBERG_VALUE_SCHEMA_ID_PREFIX,
                    options.get("subject", f"{topic}-value"))
            self._tables[(topic, mode, spec, drop)] = table
        return table

    def committed_offset(self, key: tuple[str, int]) -> int | None:
        """The partition's next offset as this writer last knew it to be committed."""
        state = self._partitions.get(key)
        return None if state is None else state.next_offset

    def maybe_commit(self, key: tuple[str, int], plog, lag_ms: int,
                     mode: str = ICEBERG_KEY_VALUE) -> bool:
        """Start the partition's commit if one is due; True while the
        partition has records not in the table or a commit under way (the
        caller keeps calling)."""
        if self.refused is not None:
            if key not in self._told:
                self._told.add(key)
                log.error("%s-%d: no Iceberg commit: %s", *key, self.refused)
            return False
        state = self._partitions.get(key)
        if state is None:
            state = self._partitions[key] = _PartitionState()
        now = time.monotonic()
        if state.future is not None:
            if not state.future.done():
                return True
            future, state.future = state.future, None
            try:
                state.next_offset, state.backlog = future.result()
                state.last_commit = now
            except Exception as exc:    # the store or catalog failed: keep the records, retry
                log.error("Iceberg commit of %s-%d failed: %s", *key, exc)
                state.next_offset, state.failed_at = None, now
                return True
        if now - state.failed_at < RETRY_S:
            return True
        table = self._table(key[0], mode, plog.config)
        if state.next_offset is None:
            state.future = _iceberg_thread.submit(_learn, table, key[1])
            return True
        lso = plog.last_stable_offset
        log_start = plog.log_start_offset
        start = max(state.next_offset, log_start)
        active_base = plog.active_segment.base_offset
        if start >= lso:
            state.active_base = active_base
            return False
        rolled = active_base != state.active_base
        if not (state.backlog or rolled or (now - state.last_commit) * 1000 >= lag_ms):
            return True
        try:
            regions = _plan(plog, start, lso)
        except RemoteReadPending:
            # a remote segment is being downloaded for it: planned again at
            # the next tick (state.active_base left, so a roll still counts)
            return True
        state.active_base = active_base
        if not regions:
            return True
        commit = _commit_decoded if isinstance(table, _DecodedTables) else _commit
        state.future = _iceberg_thread.submit(commit, table, key[1], regions, start,
                                              start <= log_start, lso)
        return True

    def forget(self, key: tuple[str, int]) -> None:
        """The partition is no longer led here (a commit under way may still
        end: the table's compare-and-swap keeps it from writing twice)."""
        self._partitions.pop(key, None)


def _plan(plog, start: int, lso: int) -> list[tuple]:
    """(fd, position, length, aborted) of the log's regions from ``start``
    up to ``lso``, the fds duplicated (the caller's thread owns the log)."""
    regions, offset, total = [], start, 0
    segments = plog.segments
    while offset < lso and total < MAX_COMMIT_BYTES:
        data = plog.read(offset, MAX_COMMIT_BYTES - total, max_offset=lso,
                         min_one_message=True, collect_aborted=True)
        region = data.region
        if region is None:
            break
        aborted = [(t.producer_id, t.first_offset) for t in data.aborted_transactions or ()]
        regions.append((os.dup(region.fd), region.position, region.length, aborted))
        total += region.length
        seg = next((s for s in segments if s.file is region.file), None)
        if seg is None or region.position + region.length < seg.size:
            break       # cut by the LSO or the byte limit: the thread finds where
        offset = seg.next_offset
    return regions


def _learn(table, partition: int) -> tuple[int, bool]:
    if isinstance(table, _DecodedTables):
        table = table.main
    committed = table.committed_offset(partition)
    return (0 if committed is None else committed), False


def _decode(regions) -> tuple[list, int]:
    """The records of ``regions`` as Arrow tables, and the offset after the
    last whole batch read (-1: none)."""
    from kafkalite._ext.batch_scan import batch_header
    from kafkalite.record import decode_columns
    tables, next_offset = [], -1
    for fd, position, length, aborted in regions:
        pos, end = position, position + length
        while pos < end:
            chunk = os.pread(fd, min(READ_CHUNK, end - pos), pos)
            cols = decode_columns(chunk, verify_crc=True, aborted_transactions=aborted)
            if cols.bytes_consumed == 0:
                whole = batch_header(chunk)[2]
                if pos + whole > end:
                    break       # the region ends inside this batch
                chunk = os.pread(fd, whole, pos)
                cols = decode_columns(chunk, verify_crc=True, aborted_transactions=aborted)
                if cols.bytes_consumed == 0:
                    break
            tables.append(cols)
            next_offset = max(next_offset, cols.next_offset)
            pos += cols.bytes_consumed
    return tables, next_offset


def _read(regions, partition: int):
    """Runs on the Iceberg thread: ``regions`` decoded (read_committed, their
    descriptors closed) as (one Arrow table of the partition's records, the
    decoded columns, the offset the scan reached); None when it stopped short
    of them."""
    import pyarrow as pa

    from kafkalite.storage.iceberg.topic_table import arrow_schema, columns_to_table
    try:
        decoded, scanned = _decode(regions)
    finally:
        for fd, *_ in regions:
            os.close(fd)
    if scanned < 0:
        return None
    parts = [columns_to_table(cols, partition) for cols in decoded if len(cols)]
    records = pa.concat_tables(parts) if parts else arrow_schema().empty_table()
    return records, decoded, scanned


def _commit(table, partition: int, regions, start: int, from_log_start: bool,
            lso: int) -> tuple[int, bool]:
    """Runs on the Iceberg thread: decode ``regions`` and commit them from
    the partition's committed offset; returns (the next offset, whether
    records below ``lso`` are left for another commit)."""
    import numpy as np
    import pyarrow as pa

    read = _read(regions, partition)
    if read is None:
        return start, True
    records, decoded, scanned = read
    offsets = np.concatenate([cols.offsets for cols in decoded if len(cols)]) \
        if records.num_rows else np.empty(0, dtype=np.int64)

    def records_from(committed: int, schema=None):
        if committed < start and not from_log_start:
            raise _Gap(committed)
        lowest = max(committed, start)
        if not len(offsets) or offsets[0] >= lowest:
            return records
        return records.filter(pa.array(offsets >= lowest))

    try:
        next_offset = table.commit(partition, records_from, lambda committed: scanned)
    except _Gap as gap:
        return gap.committed, True
    return next_offset, next_offset < lso


class _DecodedTables:
    """A decoded topic's two tables and how its values are decoded."""

    def __init__(self, main, dlq, lookup, id_prefix: bool, subject: str):
        # dlq: the dead-letter table, None with iceberg.invalid.record.action=drop
        self.main = main
        self.dlq = dlq
        self.lookup = lookup
        self.id_prefix = id_prefix      # value_schema_id_prefix; else value_schema_latest
        self.subject = subject
        self._refused: set[int] = set()     # schema ids logged as not mergeable

    def _codec(self, schema):
        """The AvroValues of a registry schema, or None: it cannot be columns."""
        if schema is None or schema.schema_type != "AVRO":
            return None
        if schema.codec is None:
            from kafkalite.storage.iceberg.avro_values import AvroValues
            try:
                schema.codec = AvroValues(schema.text)
            except Exception as exc:        # Unsupported, or fastavro refusing it
                log.warning("schema id %d cannot be Iceberg columns: %s", schema.id, exc)
                schema.codec = False
        return schema.codec or None

    def mergeable(self, main, value_schemas: dict) -> tuple[list, set]:
        """Of ``value_schemas`` (schema id -> Arrow schema), the ones the
        topic's table as loaded (``main``) can take, in id order, each
        merged onto the ones before it, and the ids of those it cannot:
        their records go to the dead-letter table (a type Iceberg cannot
        promote, say long to string, registered under compatibility NONE)."""
        from kafkalite.storage.iceberg.topic_table import SchemaMismatch, merged_schema
        schema, taken, refused = main.schema(), [], set()
        for sid, arrow in value_schemas.items():
            try:
                schema = merged_schema(main, schema, arrow)
            except SchemaMismatch as exc:
                refused.add(sid)
                if sid not in self._refused:
                    self._refused.add(sid)
                    log.warning("%s: schema id %d cannot be merged into the table's "
                                "schema, its records go to %s: %s", self.main.topic, sid,
                                "no table (dropped)" if self.dlq is None
                                else self.dlq.identifier[1], exc)
                continue
            taken.append(arrow)
        return taken, refused

    def decode(self, values: list) -> tuple[list, list, dict]:
        """Each value's columns (None: it does not decode), each value's
        schema id (None: it does not decode) and the codecs used, by schema
        id. RegistryUnavailable propagates (the commit is tried again,
        nothing goes to the dead-letter table for it)."""
        rows, ids, used = [], [], {}
        latest = None if self.id_prefix else self.lookup.latest(self.subject)
        for value in values:
            ids.append(None)
            if value is None:
                rows.append(None)
                continue
            if self.id_prefix:
                if len(value) < PREFIX_BYTES or value[0] != MAGIC_BYTE:
                    rows.append(None)
                    continue
                schema = self.lookup.by_id(int.from_bytes(value[1:PREFIX_BYTES], "big"))
                body = value[PREFIX_BYTES:]
            else:
                schema, body = latest, value
            codec = self._codec(schema)
            if codec is None:
                rows.append(None)
                continue
            try:
                rows.append(codec.decode(body))
            except Exception:       # not one datum of the schema
                rows.append(None)
                continue
            ids[-1] = schema.id
            used[schema.id] = codec
        return rows, ids, used


def _commit_decoded(tables: _DecodedTables, partition: int, regions, start: int,
                    from_log_start: bool, lso: int) -> tuple[int, bool]:
    """_commit for a decoded topic: the records that decode into the topic's
    table, the others into its dead-letter table (the module's docstring
    says in which order and why every offset lands once)."""
    import numpy as np
    import pyarrow as pa
    from pyiceberg.exceptions import CommitFailedException

    from kafkalite.storage.iceberg.topic_table import COMMIT_ATTEMPTS, committed_offsets
    read = _read(regions, partition)
    if read is None:
        return start, True
    records, _, scanned = read
    offsets = records.column("redpanda").combine_chunks().field("offset").to_numpy() \
        if records.num_rows else np.empty(0, dtype=np.int64)
    rows, ids, used = tables.decode(records.column("value").to_pylist())
    decodes = np.array([r is not None for r in rows], dtype=bool)
    ids = np.array([-1 if i is None else i for i in ids], dtype=np.int64)
    value_schemas = {sid: pa.schema(used[sid].fields) for sid in sorted(used)}

    def main_records(mask):
        def build(schema):
            taken = np.flatnonzero(mask)
            columns = [records.column("redpanda").take(pa.array(taken))
                       .cast(schema.field("redpanda").type)]
            names = [f.name for f in schema if f.name != "redpanda"]
            if names:
                values = pa.Table.from_pylist([rows[i] for i in taken],
                                              schema=pa.schema([schema.field(n) for n in names]))
                columns += values.columns
            return pa.Table.from_arrays(columns, schema=schema)
        return build

    for attempt in range(COMMIT_ATTEMPTS):
        main = tables.main.load()
        committed = committed_offsets(main).get(partition, 0)
        if committed < start and not from_log_start:
            return committed, True
        if committed >= scanned:
            return committed, committed < lso
        evolve, refused = tables.mergeable(main, value_schemas)
        fits = decodes & ~np.isin(ids, np.fromiter(refused, dtype=np.int64)) if refused \
            else decodes
        lowest = max(committed, start)
        fresh = offsets >= lowest
        dlq = None if tables.dlq is None else tables.dlq.load()
        if dlq is not None:
            dlq_committed = committed_offsets(dlq).get(partition, 0)
            held = tables.dlq.offsets_between(partition, lowest, dlq_committed) \
                if dlq_committed > lowest else set()
            if held:
                fresh &= ~np.isin(offsets, np.fromiter(held, dtype=np.int64))
        try:
            # with iceberg.invalid.record.action=drop, those that do not fit go nowhere
            if dlq is not None and (fresh & ~fits).any():
                tables.dlq.append(dlq, partition, max(dlq_committed, scanned),
                                  lambda schema: records.filter(pa.array(fresh & ~fits)))
            tables.main.append(main, partition, scanned, main_records(fresh & fits), evolve)
            return scanned, scanned < lso
        except CommitFailedException:
            tables.main.reload()
            if tables.dlq is not None:
                tables.dlq.reload()
            if attempt == COMMIT_ATTEMPTS - 1:
                raise
    return start, True
