"""An Iceberg topic's table in a cluster's catalog (storage/iceberg/ with
``uri``: pyiceberg's SQL catalog in a real PostgreSQL, tests/postgres.py)
and a shared warehouse, written by writers of two nodes (each its own data
directory): the catalog's compare-and-swap of the metadata location, in
PostgreSQL, makes a commit that lost a race to the other node start over
from the table's recorded offsets, and a deposed leader on one node and a
new one on another write each record once."""
from __future__ import annotations

import time

import pytest

from kafkalite.record import RecordBatchBuilder
from kafkalite.storage import LogConfig, PartitionLog
from postgres import find_binaries, new_database

pytest.importorskip("pyiceberg")
pytest.importorskip("psycopg")

from kafkalite.storage.iceberg import cluster_catalog_uri  # noqa: E402
from kafkalite.storage.iceberg.partition_writer import IcebergTopicWriter  # noqa: E402
from kafkalite.storage.iceberg.topic_table import TopicTable, committed_offsets  # noqa: E402

pytestmark = pytest.mark.skipif(find_binaries() is None,
                                reason="PostgreSQL is not installed: run tools/install-system-deps")

CONFIG = LogConfig.from_properties({"segment.bytes": 4096, "retention.ms": -1,
                                    "iceberg.mode": "key_value", "iceberg.target.lag.ms": 1})


@pytest.fixture
def cluster(pg_server, tmp_path):
    """(the catalog's URL, the shared warehouse, the two nodes' Iceberg directories)."""
    uri = cluster_catalog_uri(new_database(pg_server).dsn)
    return uri, str(tmp_path / "warehouse"), [str(tmp_path / f"node{n}" / "iceberg")
                                              for n in (1, 2)]


def _records(partition, start, stop):
    from kafkalite.record import decode_columns
    from kafkalite.storage.iceberg.topic_table import columns_to_table
    b = RecordBatchBuilder(base_offset=start)
    for o in range(start, stop):
        b.append(1_700_000_000_000, b"k", b"v%d" % o)
    return columns_to_table(decode_columns(b.build()), partition)


def _append(plog, start, stop):
    b = RecordBatchBuilder()
    for i in range(start, stop):
        b.append(1_700_000_000_000 + i, b"k", b"x%d" % i)
    plog.append(b.build())
    plog.high_watermark = plog.log_end_offset


def _drain(writer, key, plog, timeout=30.0):
    """Tick the writer until the table holds the log up to its LSO."""
    deadline = time.monotonic() + timeout
    while writer.maybe_commit(key, plog, 1):
        assert time.monotonic() < deadline, "the writer did not catch up"
        time.sleep(0.01)


def _offsets(uri, warehouse, root):
    """(sorted (partition, offset) of the table's rows, its recorded offsets)."""
    table = TopicTable(root, "events", warehouse, uri=uri).load()
    rows = table.scan(selected_fields=("redpanda",)).to_arrow().column("redpanda").to_pylist()
    return sorted((r["partition"], r["offset"]) for r in rows), committed_offsets(table)


def test_a_commit_that_loses_a_race_to_another_node_starts_over_from_the_new_summary(cluster):
    uri, warehouse, (root1, root2) = cluster
    ours = TopicTable(root1, "events", warehouse, uri=uri)
    theirs = TopicTable(root2, "events", warehouse, uri=uri)
    raced = []

    def records_from(committed, schema):
        if not raced:   # node 2's leader of partition 1 commits between our read and append
            raced.append(theirs.commit(1, lambda c, _: _records(1, c, 10), lambda c: 10))
        return _records(0, committed, 5)
    assert ours.commit(0, records_from, lambda committed: 5) == 5
    rows, offsets = _offsets(uri, warehouse, root1)
    assert offsets == {0: 5, 1: 10}
    assert rows == [(0, o) for o in range(5)] + [(1, o) for o in range(10)]


def test_a_deposed_leader_and_a_new_one_on_another_node_write_each_record_once(cluster,
                                                                              tmp_path):
    uri, warehouse, (root1, root2) = cluster
    old = IcebergTopicWriter(root1, warehouse, uri)
    new = IcebergTopicWriter(root2, warehouse, uri)
    key = ("events", 0)
    plog = PartitionLog.open(str(tmp_path / "logs" / "events-0"), CONFIG)
    try:
        # both learn where the table is (nothing yet) before either commits
        for writer in (old, new):
            while writer.committed_offset(key) is None:
                writer.maybe_commit(key, plog, 1)
                time.sleep(0.01)
        _append(plog, 0, 80)
        _drain(old, key, plog)
        _append(plog, 80, 100)
        _drain(new, key, plog)      # read from 0: commits from the table's 80 on
    finally:
        plog.close()
    rows, offsets = _offsets(uri, warehouse, root2)
    assert rows == [(0, o) for o in range(100)]
    assert offsets == {0: 100}
