"""A logical replication slot read through PostgreSQL's streaming
replication protocol (the walsender's ``START_REPLICATION ... LOGICAL``),
over a psycopg replication connection: the CDC source's reader
(cdc.py).

Why not the SQL functions: ``pg_logical_slot_peek_binary_changes`` decodes
the WAL from the slot's confirmed position on every call, so a reader that
keeps changes in the slot until Connect committed their offsets decodes
its backlog again at each read, and learns of new changes only by polling.
The walsender decodes each change once, pushes it as it is committed, and
keeps the slot where the reader's last status update put it.

Wire (PostgreSQL's "Streaming Replication Protocol", in CopyBoth mode):

    XLogData         => 'w', start LSN int64, end of WAL int64, send time int64,
                        one pgoutput message (the rest)
    Keepalive        => 'k', end of WAL int64, send time int64, reply requested int8
    Status update    => 'r', written LSN int64, flushed LSN int64, applied LSN int64,
                        client time int64 (µs since 2000-01-01), reply requested int8

The start LSN of an XLogData message is the LSN ``pg_logical_slot_*_changes``
shows for the same message. The flushed LSN the reader reports becomes the
slot's ``confirmed_flush_lsn``: the server keeps the WAL after it, and a new
``START_REPLICATION`` streams every transaction committed after it again.

Who calls: one task thread owns a stream (libpq connections are not for two
threads at once); ``close()`` from that thread too.
"""
from __future__ import annotations

import struct
import time

from kafkalite.connect.connectors.copy_out import wait_readable
from kafkalite.connect.errors import ConnectException

XLOG_DATA_HEADER = struct.Struct("!QQQ")      # after the 'w': start LSN, WAL end, send time
KEEPALIVE = struct.Struct("!QQB")             # after the 'k': WAL end, send time, reply?
STATUS_UPDATE = struct.Struct("!cQQQQB")
PG_EPOCH_S = 946_684_800                      # 2000-01-01 in seconds since the Unix epoch
# a status update at least this often while reading (the server's wal_sender_timeout is
# 60 s by default; it also asks for one by a keepalive when half of it has passed)
STATUS_INTERVAL_S = 10.0


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class ReplicationStream:
    """The pgoutput messages of one slot, as ``[(start LSN, message bytes)]``
    reads. ``conn`` is a psycopg connection opened with
    ``replication="database"``; the stream owns it from here on.
    ``flushed``: the slot's confirmed_flush_lsn, reported until the reader
    confirms more (a status update never moves the slot back)."""

    def __init__(self, conn, slot: str, publication: str, flushed: int):
        from psycopg import pq
        self.conn, self.pg = conn, conn.pgconn
        self.flushed = flushed      # the LSN last reported flushed
        self.received = 0           # the end of the last message received
        self._last_status = time.monotonic()
        cmd = (f"START_REPLICATION SLOT {slot} LOGICAL 0/0 (proto_version '1', "
               f"publication_names {_literal(publication)})")
        self.pg.send_query(cmd.encode())
        res = self.pg.get_result()
        if res is None or res.status != pq.ExecStatus.COPY_BOTH:
            msg = (res.error_message if res is not None else self.pg.error_message)
            self.close()
            raise ConnectException(f"START_REPLICATION of slot {slot}: "
                                   f"{msg.decode(errors='replace').strip()}")
        self.pg.nonblocking = 1

    def read(self, max_messages: int, timeout: float) -> list[tuple[int, bytes]]:
        """The messages that have come, up to ``max_messages``; waits up to
        ``timeout`` seconds for the first one. Raises ConnectException when
        the server ends the stream (the caller opens a new one)."""
        out: list = []
        deadline = None
        get, pg = self.pg.get_copy_data, self.pg
        # whether libpq's buffer was refilled from the socket since it last gave a message
        refilled = False
        while len(out) < max_messages:
            n, data = get(1)
            if n > 0:
                refilled = False
                kind = data[0]
                if kind == 0x77:        # 'w'
                    start, end, _ = XLOG_DATA_HEADER.unpack_from(data, 1)
                    out.append((start, bytes(data[25:])))
                    if end > self.received:
                        self.received = end
                elif kind == 0x6B:      # 'k'
                    _, _, reply = KEEPALIVE.unpack_from(data, 1)
                    if reply:
                        self.send_status()
                continue
            if n == -1:
                res = pg.get_result()
                msg = res.error_message.decode(errors="replace").strip() if res else ""
                raise ConnectException(f"the replication stream ended: {msg or 'by the server'}")
            # n == 0: libpq's buffer (one socket read, ~150 changes) is empty. What the
            # socket holds already is taken too, without waiting: a read handed over per
            # buffer made a poll -- a produce_batch, a wake of the producer, an offset --
            # of every ~150 changes of a backlog, not of max.batch.size (issue 75)
            if not refilled:
                pg.consume_input()
                refilled = True
                continue
            # nothing in the socket either: wait once for the first message, never after it
            if out:
                break
            now = time.monotonic()
            if deadline is None:
                deadline = now + timeout
            if now >= deadline:
                break
            wait_readable(pg.socket, deadline - now)
            pg.consume_input()
            refilled = True
        if time.monotonic() - self._last_status >= STATUS_INTERVAL_S:
            self.send_status()
        return out

    def confirm(self, lsn: int) -> None:
        """Report everything up to ``lsn`` flushed: the slot releases the WAL
        before it, and a new stream starts after it."""
        if lsn > self.flushed:
            self.flushed = lsn
            self.send_status()

    def send_status(self) -> None:
        now_us = int((time.time() - PG_EPOCH_S) * 1_000_000)
        flushed = self.flushed
        self.pg.put_copy_data(STATUS_UPDATE.pack(b"r", flushed, flushed, flushed, now_us, 0))
        # nonblocking: the update goes out now or with the next read's flush
        self.pg.flush()
        self._last_status = time.monotonic()

    def close(self) -> None:
        try:
            self.conn.close()
        except Exception:       # noqa: BLE001 -- closing a broken connection
            pass
