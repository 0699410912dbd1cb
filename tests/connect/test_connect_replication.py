"""The CDC source's slot reader (connectors/replication.py) over a real
walsender: one read takes every message the socket already holds, not only
what libpq's buffer took from it in one go (issue 75)."""
from __future__ import annotations

import array
import fcntl
import termios

import psycopg
from harness import wait_until


def _socket_bytes(fd: int) -> int:
    """Bytes waiting in the socket's receive buffer (FIONREAD)."""
    n = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, n)
    return n[0]


def test_a_read_takes_everything_the_socket_holds(pglogical):
    """A backlog of 5,000 inserts streamed: once the socket holds more than
    libpq reads at once (16 kB), one read hands all of it over. The code
    before took one libpq buffer a read (~150 changes), so a poll -- a
    produce_batch, a wake of the producer -- came every ~150 changes."""
    from kafkalite.connect.connectors.replication import ReplicationStream
    with psycopg.connect(pglogical, autocommit=True) as c:
        c.execute("SET synchronous_commit = on")   # decoding reads flushed WAL only
        c.execute("DROP TABLE IF EXISTS repl_read")
        c.execute("CREATE TABLE repl_read (id int PRIMARY KEY, t text)")
        c.execute("DROP PUBLICATION IF EXISTS repl_read_pub")
        c.execute("CREATE PUBLICATION repl_read_pub FOR TABLE repl_read")
        c.execute("SELECT pg_create_logical_replication_slot('repl_read_slot', 'pgoutput')")
        c.execute("INSERT INTO repl_read SELECT g, repeat('x', 80) FROM generate_series(1, 5000) g")
        try:
            stream = ReplicationStream(psycopg.connect(pglogical, replication="database"),
                                       "repl_read_slot", "repl_read_pub", 0)
            try:
                waiting = 96 * 1024
                wait_until(lambda: _socket_bytes(stream.pg.socket) >= waiting, timeout=30,
                           message=f"{waiting} bytes of the stream in the socket")
                got = stream.read(100_000, 5.0)
                assert sum(len(m) for _, m in got) >= waiting - 16 * 1024, \
                    f"one read took {len(got)} messages, {sum(len(m) for _, m in got)} bytes"
            finally:
                stream.close()
        finally:
            wait_until(lambda: c.execute("SELECT active FROM pg_replication_slots WHERE "
                                         "slot_name = 'repl_read_slot'").fetchone() == (False,),
                       timeout=30, message="the slot released")
            c.execute("SELECT pg_drop_replication_slot('repl_read_slot')")
