"""A query's rows read by ``COPY (query) TO STDOUT`` at libpq's level
(psycopg's ``pgconn``): the CDC snapshot's reader (cdc.py). A row's
columns come as their output function's text -- what a query's result and
pgoutput carry -- with the COPY text format's escapes undone by
kafkalite._ext.copy_text, a batch of rows at a time.

Why not psycopg's ``cursor.copy()``: its ``read()`` runs a generator through
the connection's wait loop for every row; ``get_copy_data`` of libpq is one
call. Why not a cursor's ``FETCH``: the result's values are read one call a
column (``get_value``), several times COPY's cost a row.

Who calls: the thread that owns the connection, which runs nothing else on
it until the rows end (``read`` returns None) or it is closed.
"""
from __future__ import annotations

import math
import select

from kafkalite._ext.copy_text import copy_text_rows
from kafkalite.connect.errors import ConnectException


def wait_readable(fd: int, timeout_s: float | None = None) -> None:
    """Until libpq's socket ``fd`` has input (or ``timeout_s`` passed), by
    poll(2): select(2) refuses a descriptor past 1,023 (FD_SETSIZE), which a
    worker holding many connections and files reaches (ValueError:
    filedescriptor out of range). Also the replication stream's wait."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    # rounded up: a wait of under a millisecond must not be a busy loop
    poller.poll(None if timeout_s is None else max(0, math.ceil(timeout_s * 1000)))


class CopyOut:
    """The rows of ``query`` (bytes: a ``COPY ... TO STDOUT``) over ``conn``
    (a psycopg connection in the transaction to read them in), ``ncols``
    columns each."""

    def __init__(self, conn, query: bytes, ncols: int):
        from psycopg import pq
        self.pg, self.ncols, self.done = conn.pgconn, ncols, False
        self.pg.send_query(query)
        res = self.pg.get_result()
        if res is None or res.status != pq.ExecStatus.COPY_OUT:
            msg = res.error_message if res is not None else self.pg.error_message
            raise ConnectException(f"COPY of the snapshot: "
                                   f"{msg.decode(errors='replace').strip()}")

    def read(self, limit: int) -> list | None:
        """Up to ``limit`` rows (tuples of None or bytes, each column's text),
        waiting for the first; None once every row was read."""
        from psycopg import pq
        if self.done:
            return None
        lines: list = []
        get, pg = self.pg.get_copy_data, self.pg
        while len(lines) < limit:
            n, data = get(1)
            if n > 0:
                lines.append(data)
                continue
            if n == 0:
                if lines:
                    break
                wait_readable(pg.socket)
                pg.consume_input()
                continue
            # the end of the rows: the COPY's own result, then none
            self.done = True
            res = pg.get_result()
            while pg.get_result() is not None:
                pass
            if res is None or res.status != pq.ExecStatus.COMMAND_OK:
                msg = res.error_message if res is not None else pg.error_message
                raise ConnectException(f"COPY of the snapshot: "
                                       f"{msg.decode(errors='replace').strip()}")
            break
        return copy_text_rows(lines, self.ncols) if lines else None
