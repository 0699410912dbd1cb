"""The CDC source's reads of its slot while changes wait for the worker's
offset commit (connectors/cdc.py reads with
``pg_logical_slot_peek_binary_changes``, which decodes again everything
not yet committed to Connect): a backlog of transactions already in the
slot streams out without a read coming back empty (each empty read waits
``poll.interval.ms``), and without decoding the backlog once per
``max.batch.size`` (the decoding then grew with its square). Against a
real PostgreSQL (``wal_level=logical``) and the shared broker; the
decoding is counted by PostgreSQL itself (``pg_stat_replication_slots``)."""
from __future__ import annotations

import psycopg
import pytest
from harness import create, wait_until

from kafkalite.client import Consumer, TopicPartition
from postgres import PostgresServer, find_binaries

CDC = "io.debezium.connector.postgresql.PostgresConnector"
TXNS, CHANGES_PER_TXN = 100, 50


@pytest.fixture(scope="module")
def pglogical():
    """A PostgreSQL server with wal_level=logical, for this module: its DSN."""
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    srv = PostgresServer(wal_level="logical").start()
    yield srv.dsn
    srv.stop()


def pg(dsn, sql, params=None):
    with psycopg.connect(dsn, autocommit=True) as c:
        cur = c.execute(sql, params)
        return cur.fetchall() if cur.description else None


def decoded_txns(dsn: str, slot: str) -> int:
    """Transactions PostgreSQL decoded from ``slot``, as its sessions have
    reported them."""
    rows = pg(dsn, "SELECT total_txns FROM pg_stat_replication_slots WHERE slot_name = %s",
              (slot,))
    return rows[0][0] if rows else 0


def test_cdc_backlog_awaiting_the_offset_commit_streams_without_stalls_or_redecoding(
        server, pglogical, tmp_path):
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    table, slot, prefix = "backlog", "backlog_slot", "bk"
    pg(pglogical, f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT)")
    topic = f"{prefix}.public.{table}"
    create(server, topic)
    # no offset commit while the backlog streams: every read decodes what came before
    worker = Worker({"bootstrap.servers": server.bootstrap,
                     "offset.flush.interval.ms": 600_000},
                    FileOffsetStore(str(tmp_path / "offsets.json")))
    worker.start()
    herder = Herder(worker)
    cons = Consumer(server.config())
    try:
        herder.put_connector_config("cdc", {
            "connector.class": CDC, "connection.url": "jdbc:" + pglogical,
            "topic.prefix": prefix, "slot.name": slot, "publication.name": slot + "_pub",
            "max.batch.size": str(CHANGES_PER_TXN),
            # a read coming back with nothing new waits this long
            "poll.interval.ms": "5000"}, False)
        # the slot made (the snapshot of the empty table under way or done), the task
        # paused: the transactions wait in the slot, then stream out at once
        wait_until(lambda: pg(pglogical, "SELECT 1 FROM pg_replication_slots WHERE "
                                         "slot_name = %s", (slot,)), timeout=60,
                   message="the task's slot")
        herder.pause("cdc")
        with psycopg.connect(pglogical) as c:
            for t in range(TXNS):
                c.execute(f"INSERT INTO {table} SELECT g, g FROM generate_series("
                          f"{t * CHANGES_PER_TXN}, {(t + 1) * CHANGES_PER_TXN - 1}) g")
                c.commit()
        herder.resume("cdc")
        tp = TopicPartition(topic, 0)
        # a read with nothing new every other transaction (as before) takes 5 s * TXNS / 2
        wait_until(lambda: cons.get_watermark_offsets(tp)[1] >= TXNS * CHANGES_PER_TXN,
                   timeout=30, message=lambda: f"every change in the topic: "
                                               f"{cons.get_watermark_offsets(tp)[1]} of "
                                               f"{TXNS * CHANGES_PER_TXN}")
    finally:
        cons.close()
        herder.stop()
        worker.stop()
    # the task's session reports its decoding when it ends
    pg(pglogical, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                  "current_database() AND pid <> pg_backend_pid() AND backend_type = "
                  "'client backend'")
    wait_until(lambda: decoded_txns(pglogical, slot) >= TXNS, timeout=30,
               message=lambda: f"the slot's decoding reported: {decoded_txns(pglogical, slot)}")
    # reads that ask for as much again as the backlog: the backlog decoded about
    # 2 * TXNS times in all (reads of 1, 2, 4, ... transactions), and once more by a
    # read finding nothing new; one read per max.batch.size decodes TXNS * TXNS / 2
    got = decoded_txns(pglogical, slot)
    assert got <= 5 * TXNS, got
