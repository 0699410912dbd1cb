"""The CDC snapshot's table reader (connectors/copy_out.py, COPY's text
format unescaped by kafkalite._ext.copy_text): every column's text as a
query's result carries it (libpq's ``get_value``, what the snapshot read
before and what pgoutput sends), over random rows of many PostgreSQL types
(test_connect_cdc_values' values: NULLs, text with tabs, newlines,
backslashes and a literal ``\\N``, unicode, bytea, arrays, json), read a
few rows at a time; a line of the wrong number of columns refused."""
from __future__ import annotations

import os
import random
import resource

import psycopg
import pytest
from test_connect_cdc_values import COLUMNS, random_row


def fill(dsn: str, table: str, rng: random.Random, n: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute(f"DROP TABLE IF EXISTS {table}")
        c.execute(f"CREATE TABLE {table} (" + ", ".join(f"{name} {kind}" for name, kind, _
                                                       in COLUMNS) + ")")
        c.execute(f"INSERT INTO {table} (t) VALUES ('\\N'), (E'a\\tb\\\\c\\nd\\re\\x01f\\x7f')")
        for _ in range(n):
            exprs, params = random_row(rng)
            c.execute(f"INSERT INTO {table} SELECT {', '.join(exprs)}", params)


def test_copy_rows_are_the_results_texts(postgres):
    from kafkalite.connect.connectors.copy_out import CopyOut
    seed = random.randrange(2**32)
    fill(postgres, "copy_out_rows", random.Random(seed), 200)
    with psycopg.connect(postgres) as c:
        c.execute("SET TIME ZONE 'Asia/Kolkata'")
        res = c.execute("SELECT * FROM copy_out_rows").pgresult
        want = [tuple(res.get_value(i, j) for j in range(res.nfields)) for i in range(res.ntuples)]
        rows = CopyOut(c, b"COPY (SELECT * FROM copy_out_rows) TO STDOUT", len(COLUMNS))
        got = []
        while (batch := rows.read(7)) is not None:
            assert 0 < len(batch) <= 7
            got += batch
        # the connection is free for the next statement of the transaction
        assert c.execute("SELECT count(*) FROM copy_out_rows").fetchone()[0] == len(want)
    assert len(got) == len(want) == 202
    bad = [(i, a, b) for i, (a, b) in enumerate(zip(got, want)) if a != b]
    assert not bad, f"seed {seed}: {bad[:3]}"


def test_copy_reads_over_a_descriptor_past_select_s_limit(postgres):
    """A worker holding many files and connections gets descriptors past
    1,023, where select(2) raises (ValueError: filedescriptor out of range;
    seen in CI beside other tests): the COPY waits for rows by poll(2)."""
    from kafkalite.connect.connectors.copy_out import CopyOut
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1100:
        pytest.skip(f"the descriptor limit ({hard}) is below select's")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1100), hard))
    filler = []
    try:
        while not filler or filler[-1] < 1030:
            filler.append(os.open(os.devnull, os.O_RDONLY))
        with psycopg.connect(postgres) as c:
            assert c.pgconn.socket > 1023
            c.execute("SELECT pg_sleep(0)")
            # 300 kB made over ~0.3 s: the server sends it as its 8 kB
            # buffer fills, and the reader waits between
            rows = CopyOut(c, b"COPY (SELECT g, repeat('x', 1000), pg_sleep(0.001) "
                              b"FROM generate_series(1, 300) g) TO STDOUT", 3)
            got = []
            while (batch := rows.read(20)) is not None:
                got += batch
        assert got == [(str(i).encode(), b"x" * 1000, b"") for i in range(1, 301)]
    finally:
        for fd in filler:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_row_of_the_wrong_width_is_refused():
    from kafkalite._ext.copy_text import copy_text_rows
    assert copy_text_rows([b"1\t\\N\tx\\ty\n"], 3) == [(b"1", None, b"x\ty")]
    for line in (b"1\t2\n", b"1\t2\t3\t4\n"):
        with pytest.raises(ValueError, match="COPY row"):
            copy_text_rows([line], 3)


def test_rows_are_not_tracked_by_the_collector():
    """The CDC snapshot's rows wait for the offset commit: a row of bytes and
    None is made untracked, so no collection walks them (issue 75)."""
    import gc

    from kafkalite._ext.copy_text import copy_text_rows
    rows = copy_text_rows([b"1\t\\N\tx\n", b"2\tb\tc\n"], 3)
    assert [list(r) for r in rows] == [[b"1", None, b"x"], [b"2", b"b", b"c"]]
    assert not [r for r in rows if gc.is_tracked(r)], "rows tracked by the collector"
