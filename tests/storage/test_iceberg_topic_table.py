"""The leader's writer of an Iceberg topic (storage/iceberg/), on real logs
and a real SQLite catalog: what lands in the table is the log's committed
records (read_committed), each once, and a writer that starts over -- a
restarted worker, a new leader beside a deposed one -- resumes from the
table's snapshot summary."""
from __future__ import annotations

import time

import pytest

from kafkalite.record import RecordBatchBuilder, build_control_batch
from kafkalite.storage import AppendOrigin, LogConfig, PartitionLog
from storage_helpers import read_all

pytest.importorskip("pyiceberg")

from kafkalite.storage.iceberg.partition_writer import IcebergTopicWriter  # noqa: E402
from kafkalite.storage.iceberg.topic_table import TopicTable, committed_offsets  # noqa: E402

CONFIG = LogConfig.from_properties({"segment.bytes": 4096, "retention.ms": -1,
                                    "iceberg.mode": "key_value",
                                    "iceberg.target.lag.ms": 1})


def _append(plog, values, key=b"k", headers=None, ts=1_700_000_000_000):
    b = RecordBatchBuilder()
    for i, v in enumerate(values):
        b.append(ts + i, key, v, headers)
    plog.append(b.build())
    plog.high_watermark = plog.log_end_offset


def _transaction(plog, pid, values, commit):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=0, transactional=True)
    for v in values:
        b.append(1_700_000_000_000, b"t", v)
    plog.append(b.build())
    plog.append(build_control_batch(commit, pid, 0, 0), origin=AppendOrigin.COORDINATOR,
                allow_control=True)
    plog.high_watermark = plog.log_end_offset


def _drain(writer, key, plog, timeout=30.0):
    """Tick the writer until the table holds the log up to its LSO."""
    deadline = time.monotonic() + timeout
    while writer.maybe_commit(key, plog, 1):
        assert time.monotonic() < deadline, "the writer did not catch up"
        time.sleep(0.01)


def _rows(root, topic):
    table = TopicTable(root, topic).load()
    rows = table.scan().to_arrow().to_pylist()
    return sorted(((r["redpanda"]["partition"], r["redpanda"]["offset"],
                    int(r["redpanda"]["timestamp"].timestamp() * 1000), r["redpanda"]["key"],
                    r["value"], [(h["key"], h["value"]) for h in r["redpanda"]["headers"]])
                   for r in rows)), committed_offsets(table)


@pytest.fixture
def plog(tmp_path):
    log = PartitionLog.open(str(tmp_path / "logs" / "events-0"), CONFIG)
    yield log
    log.close()


def test_the_table_holds_the_committed_records_once_with_their_columns(plog, tmp_path):
    root = str(tmp_path / "iceberg")
    for n in range(4):                                                  # several segments
        _append(plog, [b"v%d-%d" % (n, i) for i in range(100)])
    _append(plog, [b"h"], key=None, headers=[("trace", b"1"), ("n", None)])
    _transaction(plog, 7, [b"aborted-1", b"aborted-2"], commit=False)
    _transaction(plog, 8, [b"committed"], commit=True)
    _append(plog, [None])                                               # a tombstone
    assert len(plog.segments) >= 3
    writer = IcebergTopicWriter(root)
    _drain(writer, ("events", 0), plog)

    rows, offsets = _rows(root, "events")
    expected = [(0, o, ts, k, v, [(hk, hv) for hk, hv in (h or [])])
                for o, ts, k, v, h in read_all(plog)
                if v not in (b"aborted-1", b"aborted-2")]
    # control batches hold no records read_all returns either
    assert rows == expected
    assert offsets == {0: plog.last_stable_offset}


def test_a_new_writer_resumes_from_the_snapshot_summary(plog, tmp_path):
    root = str(tmp_path / "iceberg")
    _append(plog, [b"a%d" % i for i in range(50)])
    _drain(IcebergTopicWriter(root), ("events", 0), plog)
    _append(plog, [b"b%d" % i for i in range(50)])
    # a restarted worker: nothing in memory, the table says where to go on
    _drain(IcebergTopicWriter(root), ("events", 0), plog)
    rows, offsets = _rows(root, "events")
    assert [r[1] for r in rows] == list(range(100))
    assert offsets == {0: 100}


def test_a_deposed_leader_and_a_new_one_do_not_write_a_record_twice(plog, tmp_path):
    root = str(tmp_path / "iceberg")
    old, new = IcebergTopicWriter(root), IcebergTopicWriter(root)
    key = ("events", 0)
    # both learn where the table is (nothing yet) before either commits
    for writer in (old, new):
        while writer.committed_offset(key) is None:
            writer.maybe_commit(key, plog, 1)
            time.sleep(0.01)
    _append(plog, [b"x%d" % i for i in range(80)])
    _drain(old, key, plog)
    _drain(new, key, plog)          # read from offset 0, commits from the table's 80
    _append(plog, [b"y%d" % i for i in range(20)])
    _drain(new, key, plog)
    rows, offsets = _rows(root, "events")
    assert [r[1] for r in rows] == list(range(100))
    assert offsets == {0: 100}


def test_partitions_of_a_topic_keep_each_others_offsets_in_the_summary(tmp_path):
    root = str(tmp_path / "iceberg")
    writer = IcebergTopicWriter(root)
    logs = [PartitionLog.open(str(tmp_path / "logs" / f"events-{p}"), CONFIG) for p in range(3)]
    try:
        for p, plog in enumerate(logs):
            _append(plog, [b"p%d-%d" % (p, i) for i in range(10 * (p + 1))])
            _drain(writer, ("events", p), plog)
        rows, offsets = _rows(root, "events")
    finally:
        for plog in logs:
            plog.close()
    assert offsets == {0: 10, 1: 20, 2: 30}
    assert sorted((r[0], r[1]) for r in rows) == [(p, o) for p in range(3)
                                                   for o in range(10 * (p + 1))]


def _records(partition, start, stop):
    from kafkalite.record import decode_columns
    from kafkalite.storage.iceberg.topic_table import columns_to_table
    b = RecordBatchBuilder(base_offset=start)
    for o in range(start, stop):
        b.append(1_700_000_000_000, b"k", b"v%d" % o)
    return columns_to_table(decode_columns(b.build()), partition)


def test_a_commit_that_loses_a_race_starts_over_from_the_new_summary(tmp_path):
    """Partition 1's leader (another worker) commits between partition 0's
    read of the summary and its append: partition 0's commit is refused by
    the catalog and redone on the new summary, keeping partition 1's
    offset (pyiceberg's own retry would append with the stale summary)."""
    root = str(tmp_path / "iceberg")
    ours, theirs = TopicTable(root, "events"), TopicTable(root, "events")
    raced = []

    def records_from(committed, schema):
        if not raced:
            raced.append(theirs.commit(1, lambda c, _: _records(1, c, 10), lambda c: 10))
        return _records(0, committed, 5)
    assert ours.commit(0, records_from, lambda committed: 5) == 5
    rows, offsets = _rows(root, "events")
    assert offsets == {0: 5, 1: 10}
    assert sorted((r[0], r[1]) for r in rows) == [(0, o) for o in range(5)] + \
        [(1, o) for o in range(10)]


def test_a_commit_waits_for_the_target_lag_or_a_segment_roll(plog, tmp_path):
    root = str(tmp_path / "iceberg")
    writer, key, hour = IcebergTopicWriter(root), ("events", 0), 3_600_000
    _append(plog, [b"first"])
    _drain(writer, key, plog)                   # the first records go at once
    _append(plog, [b"second"])
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:          # an hour's target lag: nothing due
        assert writer.maybe_commit(key, plog, hour)
        time.sleep(0.01)
    assert writer.committed_offset(key) == 1
    plog.roll()                                 # a roll is due at once
    deadline = time.monotonic() + 30
    while writer.maybe_commit(key, plog, hour):
        assert time.monotonic() < deadline, "the roll did not commit"
        time.sleep(0.01)
    assert _rows(root, "events")[1] == {0: 2}


def test_the_tables_of_a_catalog_share_one_catalog_in_a_process(tmp_path):
    """One SQLAlchemy engine (one connection pool) per catalog in a worker,
    not one per topic's table: on a cluster each pool held PostgreSQL
    connections."""
    root = str(tmp_path / "iceberg")
    a, b = TopicTable(root, "orders"), TopicTable(root, "payments")
    a.load(), b.load()
    assert a._catalog is b._catalog
    other = TopicTable(str(tmp_path / "elsewhere"), "orders")
    other.load()
    assert other._catalog is not a._catalog


def test_a_namespace_created_between_the_check_and_the_insert_is_no_error(tmp_path,
                                                                           monkeypatch):
    """Two workers that lead partitions of Iceberg topics at once both find
    no namespace and both insert it: the second insert's IntegrityError
    means it exists (pyiceberg raises it, not NamespaceAlreadyExistsError)."""
    from pyiceberg.catalog.sql import SqlCatalog
    root = str(tmp_path / "iceberg")
    TopicTable(root, "first").load()                  # the namespace is there now
    real, calls = SqlCatalog.namespace_exists, []

    def not_yet(self, namespace):                     # the check, made before the other's insert
        calls.append(namespace)
        return False if len(calls) == 1 else real(self, namespace)
    monkeypatch.setattr(SqlCatalog, "namespace_exists", not_yet)
    table = TopicTable(root, "second").load()        # as the process that lost the race sees it
    assert table.name() == ("kafkalite", "second")


def test_each_data_file_carries_its_partition_offset_and_time_bounds(tmp_path):
    """The manifests bound redpanda.partition, .offset and .timestamp of
    every data file (pyiceberg's writer keeps counts only for a struct's
    fields): a scan filtered on them skips the other files unopened."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.expressions import And, EqualTo, GreaterThanOrEqual, LessThan
    root = str(tmp_path / "iceberg")
    writer = IcebergTopicWriter(root)
    logs = [PartitionLog.open(str(tmp_path / "logs" / f"events-{p}"), CONFIG) for p in range(2)]
    try:
        for commit in range(3):                 # three commits of 50 records a partition
            for p, plog in enumerate(logs):
                _append(plog, [b"v"] * 50, ts=1_700_000_000_000 + commit * 1000)
                _drain(writer, ("events", p), plog)
    finally:
        for plog in logs:
            plog.close()
    table = TopicTable(root, "events").load()
    schema = table.schema()
    ids = {name: schema.find_field(f"redpanda.{name}") for name in ("partition", "offset",
                                                                      "timestamp")}
    seen = []
    for task in table.scan().plan_files():
        f = task.file
        bounds = {name: (from_bytes(field.field_type, f.lower_bounds[field.field_id]),
                         from_bytes(field.field_type, f.upper_bounds[field.field_id]))
                  for name, field in ids.items()}
        seen.append(bounds)
        p_lo, p_hi = bounds["partition"]
        o_lo, o_hi = bounds["offset"]
        t_lo, t_hi = bounds["timestamp"]
        commit = o_lo // 50
        assert p_lo == p_hi and (o_lo, o_hi) == (commit * 50, commit * 50 + 49), bounds
        assert t_lo == (1_700_000_000_000 + commit * 1000) * 1000 and t_hi == t_lo + 49_000
    assert len(seen) == 6
    # pruned by the bounds alone: the files of one commit of one partition
    wanted = And(EqualTo("redpanda.partition", 1),
                 And(GreaterThanOrEqual("redpanda.offset", 60), LessThan("redpanda.offset", 90)))
    assert [t.file.record_count for t in table.scan(row_filter=wanted).plan_files()] == [50]
    late = GreaterThanOrEqual("redpanda.timestamp", "2023-11-14T22:13:22+00:00")
    assert len(list(table.scan(row_filter=late).plan_files())) == 2
