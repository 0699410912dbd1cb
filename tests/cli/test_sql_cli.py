"""``kafkalite sql`` (kafkalite/cli/sql.py) against the shared server: one
query as a table, JSON lines and CSV; the prompt's statements from stdin;
a bad query one line and exit 1; Ctrl-C of a running query exit 130; EMIT
CHANGES printing new records' rows until Ctrl-C.
"""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from harness import child_env, run_cli, wait_until
from kafkalite.client import AdminClient, NewTopic, Producer

pytestmark = pytest.mark.processes


@pytest.fixture
def orders(server, topic_name):
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    admin.close()
    producer = Producer(server.config())
    for key, value in [(b"alice", b"pizza"), (b"bob", b"sushi"), (b"alice", b"salad")]:
        producer.produce(topic_name, value, key=key)
    assert producer.flush(30) == 0
    return topic_name


def sql(server, *args, stdin: bytes = b""):
    return run_cli("sql", "--bootstrap-server", server.bootstrap, "--schema-registry", "none",
                   *args, stdin=stdin)


def test_one_query_as_a_table_json_lines_and_csv(server, orders):
    q = f'SELECT key, count(*) AS n FROM "{orders}" GROUP BY key ORDER BY key'
    table = sql(server, q)
    assert table.returncode == 0, table.stderr
    assert table.stdout.decode().splitlines() == ["key    n", "alice  2", "bob    1", "(2 rows)"]
    lines = sql(server, "--format", "json", q).stdout.decode().splitlines()
    assert [json.loads(line) for line in lines] == [{"key": "alice", "n": 2},
                                                    {"key": "bob", "n": 1}]
    assert sql(server, "--format", "csv", q).stdout.decode() == "key,n\nalice,2\nbob,1\n"


def test_the_prompt_reads_statements_from_stdin(server, orders):
    script = (f'SELECT count(*) AS n\n  FROM "{orders}";\nSELECT nope FROM "{orders}";\n'
              f"SELECT value FROM \"{orders}\" WHERE key = 'bob';\nquit\n")
    r = sql(server, "--format", "csv", stdin=script.encode())
    assert r.stdout.decode() == "n\n3\nvalue\nsushi\n"
    # DuckDB's candidates: the columns whose names are nearest
    assert re.fullmatch(r'kafkalite sql: unknown column "nope" \(candidates: "\w+".*\) at line 1, '
                        r"column 8\n", r.stderr.decode())
    assert r.returncode == 1


def test_the_prompt_inserts_into_a_table_an_earlier_statement_created(server, orders):
    # the session's own tables are DuckDB's, not topics: an INSERT INTO one
    # was "unknown topic" when names were resolved against DuckDB's default
    # connection rather than the session's database
    script = (f"CREATE TABLE per_customer (customer VARCHAR, n BIGINT);\n"
              f'INSERT INTO per_customer SELECT decode(key), count(*) FROM "{orders}" GROUP BY 1;\n'
              f"SELECT customer, n FROM per_customer ORDER BY customer;\n")
    r = sql(server, "--format", "csv", stdin=script.encode())
    assert (r.returncode, r.stderr.decode()) == (0, "")
    assert r.stdout.decode() == "Count\n2\ncustomer,n\nalice,2\nbob,1\n"


@pytest.mark.parametrize("query, line", [
    ("SELECT * FORM t", 'kafkalite sql: syntax error at or near "t" at line 1, column 15\n'),
    ('SELECT * FROM "no-such-topic-sql"', "kafkalite sql: unknown topic no-such-topic-sql at line "
                                          "1, column 15\n"),
    ("SELECT 'a' + 1", "kafkalite sql: Could not choose a best candidate function for the "
                       "function call \"+(STRING_LITERAL, INTEGER_LITERAL)\". In order to "
                       "select one, please add explicit type casts at line 1, column 12\n"),
])
def test_a_bad_query_is_one_line_and_exit_1(server, query, line):
    r = sql(server, query)
    assert (r.returncode, r.stdout, r.stderr.decode()) == (1, b"", line)


def _start(server, *args):
    return subprocess.Popen([sys.executable, "-m", "kafkalite.cli", "sql", "--bootstrap-server",
                             server.bootstrap, "--schema-registry", "none", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_env())


def _cpu_seconds(proc) -> float:
    """The CPU time ``proc`` has used (user + system, /proc)."""
    with open(f"/proc/{proc.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _running_a_query(proc) -> None:
    """Until ``proc`` has used more CPU than its start-up takes (about 1.5 s of
    imports): the query is running (it prints nothing until it ends)."""
    wait_until(lambda: _cpu_seconds(proc) > 4.0, 120, "the query running")


def test_ctrl_c_cancels_a_running_query(server):
    proc = _start(server, "SELECT count(*) FROM range(1000000000000) a, range(10) b "
                          "WHERE a.range % 7 = b.range")
    _running_a_query(proc)
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and err.decode() == "kafkalite sql: interrupted\n", err
    assert time.monotonic() - started < 30


def test_emit_changes_prints_new_records_until_ctrl_c(server, orders):
    proc = _start(server, "--format", "json",
                  f"SELECT key, value FROM \"{orders}\" WHERE key = 'alice' EMIT CHANGES")
    os.set_blocking(proc.stdout.fileno(), False)
    producer = Producer(server.config())
    seen = []

    def a_row_came():
        producer.produce(orders, b"ramen", key=b"alice")
        producer.produce(orders, b"tea", key=b"bob")
        producer.flush(30)
        chunk = proc.stdout.read()
        seen.extend(chunk.decode().splitlines() if chunk else [])
        return bool(seen)
    # the tail starts at each partition's end once the command runs: a record
    # a second until one is printed
    wait_until(a_row_came, 60, "a row of a new record", interval=1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    seen.extend(out.decode().splitlines())
    assert proc.returncode == 130, err
    assert {json.dumps(json.loads(line)) for line in seen} == {
        json.dumps({"key": "alice", "value": "ramen"})}


def test_ctrl_c_at_the_prompt_cancels_the_query_and_reads_the_next(server, orders):
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite.cli", "sql", "--bootstrap-server",
                             server.bootstrap, "--schema-registry", "none", "--format", "csv"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=child_env())
    proc.stdin.write(b"SELECT count(*) FROM range(1000000000000) a, range(10) b "
                     b"WHERE a.range % 7 = b.range;\n")
    proc.stdin.flush()
    _running_a_query(proc)
    proc.send_signal(signal.SIGINT)
    proc.stdin.write(f'SELECT count(*) AS n FROM "{orders}";\n'.encode())
    proc.stdin.close()
    proc.stdin = None
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (0, b"n\n3\n", b"kafkalite sql: cancelled\n")
