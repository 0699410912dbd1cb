"""The CDC source's reads of its slot while changes wait for the worker's
offset commit: a backlog of transactions already in the slot streams out
without a read coming back empty (each empty read waits
``poll.interval.ms``), without decoding the backlog more than once (the
SQL reads of ``pg_logical_slot_peek_binary_changes`` this source made
before it streamed the slot decoded it again at each read), nor stalling
after an offset commit that confirmed part of what was handed over.
Against a real PostgreSQL (``wal_level=logical``) and the shared broker;
the decoding is counted by PostgreSQL itself
(``pg_stat_replication_slots``)."""
from __future__ import annotations

import psycopg
from harness import create, wait_until

from kafkalite.client import Consumer, TopicPartition

CDC = "io.debezium.connector.postgresql.PostgresConnector"
TXNS, CHANGES_PER_TXN = 100, 50


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


def stream_backlog(server, dsn, tmp_path, name: str, flush_ms: int, poll_ms: int,
                   timeout: float) -> None:
    """A CDC connector created paused (its slot made, the snapshot of the
    empty table not yet read), TXNS transactions of CHANGES_PER_TXN inserts
    committed, the connector resumed: waits ``timeout`` s for every change
    in the topic."""
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    table, slot, prefix = name, name + "_slot", name + "_p"
    pg(dsn, f"CREATE TABLE {table} (id INT PRIMARY KEY, v INT)")
    topic = f"{prefix}.public.{table}"
    create(server, topic)
    worker = Worker({"bootstrap.servers": server.bootstrap, "offset.flush.interval.ms": flush_ms},
                    FileOffsetStore(str(tmp_path / "offsets.json")))
    worker.start()
    herder = Herder(worker)
    cons = Consumer(server.config())
    try:
        herder.put_connector_config("cdc", {
            "connector.class": CDC, "connection.url": "jdbc:" + dsn,
            "topic.prefix": prefix, "slot.name": slot, "publication.name": slot + "_pub",
            "max.batch.size": str(CHANGES_PER_TXN),
            # a read coming back with nothing new waits this long
            "poll.interval.ms": str(poll_ms)}, False, "PAUSED")
        wait_until(lambda: pg(dsn, "SELECT 1 FROM pg_replication_slots WHERE slot_name = %s",
                              (slot,)), timeout=60, message="the task's slot")
        with psycopg.connect(dsn) as c:
            for t in range(TXNS):
                c.execute(f"INSERT INTO {table} SELECT g, g FROM generate_series("
                          f"{t * CHANGES_PER_TXN}, {(t + 1) * CHANGES_PER_TXN - 1}) g")
                c.commit()
        herder.resume("cdc")
        tp = TopicPartition(topic, 0)
        wait_until(lambda: cons.get_watermark_offsets(tp)[1] >= TXNS * CHANGES_PER_TXN,
                   timeout=timeout, message=lambda: f"every change in the topic: "
                                                    f"{cons.get_watermark_offsets(tp)[1]} of "
                                                    f"{TXNS * CHANGES_PER_TXN}")
    finally:
        cons.close()
        herder.stop()
        worker.stop()


def test_cdc_backlog_awaiting_the_offset_commit_streams_without_stalls_or_redecoding(
        server, pglogical, tmp_path):
    # no offset commit while the backlog streams: every read decodes what came before;
    # a read with nothing new every other transaction (as before) took 5 s * TXNS / 2
    stream_backlog(server, pglogical, tmp_path, "backlog", flush_ms=600_000, poll_ms=5000,
                   timeout=30)
    # the task's session reports its decoding when it ends
    pg(pglogical, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                  "current_database() AND pid <> pg_backend_pid() AND backend_type = "
                  "'client backend'")
    slot = "backlog_slot"
    wait_until(lambda: decoded_txns(pglogical, slot) >= TXNS, timeout=30,
               message=lambda: f"the slot's decoding reported: {decoded_txns(pglogical, slot)}")
    # the slot streamed: each transaction decoded once (SQL reads that asked for as much
    # again as the backlog decoded it about 2 * TXNS times in all, one read per
    # max.batch.size TXNS * TXNS / 2)
    got = decoded_txns(pglogical, slot)
    assert got <= TXNS + TXNS // 4, got


def test_cdc_offset_commits_while_the_backlog_streams_stall_nothing(server, pglogical,
                                                                   tmp_path):
    # offsets committed every 50 ms: each commit advances the slot past what was
    # acknowledged while the rest of a read still waits in the buffer; a read asking
    # for max.batch.size past the advanced slot found only changes handed over already,
    # and waited poll.interval.ms (20 s) before reading on
    stream_backlog(server, pglogical, tmp_path, "commits", flush_ms=50, poll_ms=20_000,
                   timeout=15)
