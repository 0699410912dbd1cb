"""Aggregates in persistent queries (kafkalite/sql/windowed.py):
``CREATE TABLE ... AS SELECT ... WINDOW ... GROUP BY ... EMIT CHANGES``.

On the shared server: the output, read read_committed, holds for each
(key, window) a latest value equal to a Python model of the aggregates
over the input records (history before the query and records after);
bad statements are one line naming the problem. On a server of the
test's own: kill -9 of the runner mid-stream loses and doubles nothing
(the window store is restored from its changelog), and the checker is
shown to catch a count planted one off. The model test groups by an
expression (through a repartition topic), the kill test by the record
key (without one).
"""
from __future__ import annotations

import json
import os
import random
import signal
import struct
import threading
import time
from collections import defaultdict

import pytest

from harness import child_pids, create, wait_until
from kafkalite.client import Producer
from kafkalite.sql import QueryError, Session
from test_persistent import read_committed

COLORS = ("red", "green", "blue")
X = "json_extract(decode(value), '$.x')::BIGINT"
COLOR = "json_extract_string(decode(value), '$.color')"
RUNNER = "kafkalite.sql.query_runner"


def produce(server, topic: str, records: list) -> None:
    """``records``: (key, value dict, timestamp ms)."""
    producer = Producer(server.config(**{"linger.ms": 5}))
    errors = []
    for key, value, ts in records:
        producer.produce(topic, json.dumps(value).encode(), key=key.encode(), timestamp=ts,
                         on_delivery=lambda err, msg: err and errors.append(err))
    assert producer.flush(30) == 0 and not errors, errors
    producer.close()


def random_records(rng: random.Random, base_ms: int, start: int, count: int) -> list:
    """Time moves on 97 ms a record, one in 9 records 3 s late (within grace)."""
    out = []
    for i in range(start, start + count):
        ts = base_ms + 97 * i - (3000 if i % 9 == 0 else 0)
        out.append((f"c{rng.randrange(5)}", {"n": i, "color": rng.choice(COLORS),
                                              "x": None if i % 7 == 0 else rng.randrange(-50, 100)},
                    ts))
    return out


def model(records: list, size: int, advance: int) -> dict:
    """(key, window start) -> the SELECT's value of HOPPING (size, advance)
    windows over the records whose colour is not green."""
    acc = defaultdict(lambda: {"n": 0, "xs": []})
    for key, value, ts in records:
        if value["color"] == "green":
            continue
        start = max(0, ts - size + advance) // advance * advance
        while start <= ts:
            a = acc[(key, start)]
            a["n"] += 1
            a["top"] = max(a.get("top", value["color"]), value["color"])
            if value["x"] is not None:
                a["xs"].append(value["x"])
            start += advance
    out = {}
    for (key, start), a in acc.items():
        xs = a["xs"]
        out[(key, start)] = {
            "customer": key, "n": a["n"], "total": sum(xs) if xs else None,
            "lo": min(xs) if xs else None, "top": a["top"],
            "mean": sum(xs) / len(xs) if xs else None, "WINDOWSTART": start,
            "WINDOWEND": start + size}
    return out


def latest(output: list) -> dict:
    """(key, window start) -> the latest value; the windowed key's start
    (its last 8 bytes) checked against the value's WINDOWSTART."""
    out = {}
    for key, value in output:
        doc = json.loads(value)
        start = struct.unpack(">q", key[-8:])[0]
        assert start == doc["WINDOWSTART"] and key[:-8].decode() == doc["customer"], (key, doc)
        out[(doc["customer"], start)] = doc
    return out


@pytest.fixture
def session(server):
    s = Session(server.config(), timeout=30)
    yield s
    s.close()


def running(session, query_id: str) -> None:
    def shown():
        return [r for r in session.query("SHOW QUERIES").read_all().to_pylist()
                if r["query_id"] == query_id]
    wait_until(lambda: [r for r in shown() if r["state"] == "RUNNING"], 90,
               lambda: f"the query to run (SHOW QUERIES: {shown()})")


def test_the_latest_value_of_each_window_is_the_model(server, session, topic_name):
    rng = random.Random(76)
    source, out = topic_name, topic_name + "-out"
    create(server, source, 3)
    base = (int(time.time() * 1000) - 600_000) // 1000 * 1000
    records = random_records(rng, base, 0, 300)
    produce(server, source, records)            # history before the query
    answer = session.query(
        f'CREATE TABLE "{out}" AS SELECT decode(key) AS customer, COUNT(*) AS n, '
        f'SUM({X}) AS total, MIN({X}) AS lo, MAX({COLOR}) AS top, AVG({X}) AS mean '
        f'FROM "{source}" WHERE {COLOR} <> \'green\' '
        f'WINDOW HOPPING (SIZE 10 SECONDS, ADVANCE BY 5 SECONDS) '
        f'GROUP BY decode(key) EMIT CHANGES').read_all().to_pylist()
    query_id = answer[0]["query_id"]
    try:
        assert query_id.startswith("CTAS_")
        running(session, query_id)
        more = random_records(rng, base, 300, 300)
        produce(server, source, more)           # and while it runs
        records += more
        expected = model(records, 10_000, 5_000)
        got = wait_until(lambda: (lambda o: o if o == expected else None)(
            latest(read_committed(server, out, 3))), 120, "the output to equal the model")
        assert got == expected
        explained = {r["step"]: r["detail"] for r in
                     session.query(f"EXPLAIN {query_id}").read_all().to_pylist()}
        assert explained["window"].startswith("HOPPING (SIZE 10000 MILLISECONDS, ADVANCE BY "
                                              "5000 MILLISECONDS, GRACE PERIOD 86400000")
    finally:
        session.query(f"TERMINATE {query_id}").read_all()


@pytest.mark.parametrize("statement, kind, text", [
    ('CREATE TABLE o AS SELECT key, COUNT(*) FROM "{t}" WINDOW TUMBLING (SIZE 1 MINUTE)',
     "invalid", "CREATE TABLE o: a WINDOW needs a GROUP BY"),
    ('CREATE TABLE o AS SELECT key, frobnicate(value) FROM "{t}" GROUP BY key', "invalid",
     "CREATE TABLE o: Scalar Function with name frobnicate does not exist"),
    ('CREATE TABLE o AS SELECT key, MEDIAN(octet_length(value)) FROM "{t}" GROUP BY key',
     "invalid", "CREATE TABLE o: MEDIAN is not supported in a persistent query (aggregates: "
     "COUNT, SUM, MIN, MAX, AVG) at line 1, column 13 of its SELECT"),
    ('CREATE TABLE o AS SELECT key, COUNT(*) FROM "{t}" WINDOW TUMBLING (SIZE 1 FORTNIGHT) '
     'GROUP BY key', "syntax", "CREATE TABLE o: WINDOW TUMBLING takes (SIZE <n> <unit> "
     "[, GRACE PERIOD <n> <unit>]), not (SIZE 1 FORTNIGHT) at line 1, column "),
    ('CREATE TABLE o AS SELECT key, SUM(decode(value)) FROM "{t}" GROUP BY key', "invalid",
     "CREATE TABLE o: No function matches the given name and argument types 'sum(VARCHAR)'"),
    ('CREATE TABLE o AS SELECT key, COUNT(*) FROM "{t}" WINDOW SESSION (SIZE 5 SECONDS) '
     'GROUP BY key', "syntax", "CREATE TABLE o: WINDOW SESSION takes (<n> <unit> [, GRACE "
     "PERIOD <n> <unit>]), not (SIZE 5 SECONDS) at line 1, column "),
    ('CREATE TABLE o AS SELECT key, decode(value), COUNT(*) FROM "{t}" GROUP BY key',
     "invalid", "CREATE TABLE o: column \"value\" must appear in the GROUP BY clause"),
], ids=["window-without-group-by", "unknown-function", "unsupported-aggregate", "window-unit",
        "type-mismatch", "session", "not-grouped"])
def test_a_bad_statement_is_one_line_naming_the_problem(server, session, topic_name, statement,
                                                         kind, text):
    create(server, topic_name, 1)
    with pytest.raises(QueryError) as caught:
        session.query(statement.format(t=topic_name))
    assert caught.value.kind == kind, str(caught.value)
    assert text.format(t=topic_name) in str(caught.value) and "\n" not in str(caught.value)


def test_a_key_that_is_not_text_is_written_with_escapes():
    """The output's values are made by DuckDB, whose decode() refuses bytes
    that are not UTF-8: such a batch is written row by row, its key with
    \\x escapes, as POST /query prints bytes (the Streams test driver, no server)."""
    from kafkalite.sql.windowed import AggregatePlan
    from kafkalite.streams import Serdes, TopologyTestDriver
    plan = AggregatePlan("SELECT key AS k, COUNT(*) AS n FROM t WINDOW TUMBLING "
                         "(SIZE 1 SECOND) GROUP BY key", "t")
    with TopologyTestDriver(plan.topology("out"), {"application.id": "app"}) as d:
        d.create_input_topic("t", Serdes.bytes(), Serdes.bytes()).pipe_record_list(
            [(b"\xffa", b"1", 5), (b"ok", b"2", 6), (b"\xffa", b"3", 1500)])
        out = [json.loads(v) for _, v in d.create_output_topic(
            "out", Serdes.bytes(), Serdes.string()).read_key_values_to_list()]
    assert sorted(out, key=lambda v: (v["WINDOWSTART"], v["k"])) == [
        {"k": "\\xffa", "n": 1, "WINDOWSTART": 0, "WINDOWEND": 1000},
        {"k": "ok", "n": 1, "WINDOWSTART": 0, "WINDOWEND": 1000},
        {"k": "\\xffa", "n": 1, "WINDOWSTART": 1000, "WINDOWEND": 2000}]


def test_a_count_per_record_key_is_the_streams_dsl_count_and_the_model():
    """COUNT(*)s alone, GROUP BY key, no WHERE: EXPLAIN names the DSL's
    count (no SQL per record), and the latest value of each hopping window
    is the model's, a record of null value counted as SQL counts it (the
    DSL's count alone would drop it; the Streams test driver, no server)."""
    from kafkalite.sql.windowed import AggregatePlan
    from kafkalite.streams import Serdes, TopologyTestDriver
    plan = AggregatePlan("SELECT key AS k, COUNT(*) AS n, COUNT(*) AS m FROM t WINDOW HOPPING "
                         "(SIZE 2 SECONDS, ADVANCE BY 1 SECOND) GROUP BY key", "t")
    assert dict(plan.explain())["aggregate"] == "count(*) (the Streams DSL's count)"
    rng = random.Random(76)
    records = [(rng.choice([b"a", b"b", b"c"]), None if i % 5 == 0 else b"%d" % i,
                i * 37 - (900 if i % 7 == 0 else 0)) for i in range(1, 300)]
    want = defaultdict(int)
    for key, _, ts in records:
        for start in (ts // 1000 * 1000 - 1000, ts // 1000 * 1000):
            if start >= 0:
                want[(key.decode(), start)] += 1
    with TopologyTestDriver(plan.topology("out"), {"application.id": "app"}) as d:
        d.create_input_topic("t", Serdes.bytes(), Serdes.bytes()).pipe_record_list(records)
        out = [json.loads(v) for _, v in d.create_output_topic(
            "out", Serdes.bytes(), Serdes.string()).read_key_values_to_list()]
    got = {}
    for doc in out:
        assert doc["n"] == doc["m"] and doc["WINDOWEND"] == doc["WINDOWSTART"] + 2000, doc
        got[(doc["k"], doc["WINDOWSTART"])] = doc["n"]
    assert got == dict(want)


def session_model(records: list, gap: int) -> dict:
    """(key, session start, session end) -> n, total, lo, hi of the
    records whose x is not negative: a key's records sorted by time, a new
    session where the next one is more than ``gap`` later."""
    times = defaultdict(list)
    for key, x, ts in records:
        if x >= 0:
            times[key].append((ts, x))
    out = {}
    for key, rows in times.items():
        rows.sort()
        sessions = [[rows[0]]]
        for row in rows[1:]:
            if row[0] - sessions[-1][-1][0] > gap:
                sessions.append([])
            sessions[-1].append(row)
        for rs in sessions:
            xs = [x for _, x in rs]
            out[(key, rs[0][0], rs[-1][0])] = {"n": len(rs), "total": sum(xs), "lo": min(xs),
                                               "hi": max(xs)}
    return out


def test_session_windows_end_as_the_model():
    """WINDOW SESSION (gap): out of order records in several batches;
    replaying the output (a merged-away session's tombstone deletes it)
    leaves the model's sessions, each with its aggregates and WINDOWSTART /
    WINDOWEND its first and last record times (the Streams test driver)."""
    from kafkalite.sql.windowed import AggregatePlan
    from kafkalite.streams import Serdes, TopologyTestDriver
    plan = AggregatePlan("SELECT decode(key) AS k, COUNT(*) AS n, "
                         "SUM(CAST(decode(value) AS BIGINT)) AS total, "
                         "MIN(CAST(decode(value) AS BIGINT)) AS lo, "
                         "MAX(CAST(decode(value) AS BIGINT)) AS hi FROM t "
                         "WHERE CAST(decode(value) AS BIGINT) >= 0 "
                         "WINDOW SESSION (300 MILLISECONDS) GROUP BY decode(key)", "t")
    rng = random.Random(76)
    records = [(rng.choice("abc"), rng.randrange(-20, 100), rng.randrange(0, 20_000))
               for _ in range(400)]
    with TopologyTestDriver(plan.topology("out"), {"application.id": "app"}) as d:
        source = d.create_input_topic("t", Serdes.bytes(), Serdes.bytes())
        for i in range(0, len(records), 50):
            source.pipe_record_list([(k.encode(), str(x).encode(), ts)
                                     for k, x, ts in records[i:i + 50]])
        output = d.create_output_topic("out", Serdes.bytes(), Serdes.string()) \
            .read_key_values_to_list()
    assert replay_sessions(output) == session_model(records, 300)


def replay_sessions(output: list) -> dict:
    """(key, start, end) -> the latest value of each session not merged
    away (its tombstone deletes it), the session-windowed key (key bytes,
    end, start) checked against the value."""
    live = {}
    for key, value in output:
        end, start = struct.unpack(">qq", key[-16:])
        at = (key[:-16].decode(), start, end)
        if value is None:
            live.pop(at, None)
            continue
        doc = json.loads(value)
        assert (doc["k"], doc["WINDOWSTART"], doc["WINDOWEND"]) == at, (key, doc)
        live[at] = {f: doc[f] for f in ("n", "total", "lo", "hi")}
    return live


def test_a_session_query_on_the_server_ends_as_the_model(server, session, topic_name):
    """CREATE TABLE ... WINDOW SESSION run by the query runner: its output,
    read read_committed and replayed, is the model's sessions (records
    before the query and while it runs)."""
    source, out = topic_name, topic_name + "-out"
    create(server, source, 2)
    rng = random.Random(77)
    base = (int(time.time() * 1000) - 600_000) // 1000 * 1000
    records = [(rng.choice("abc"), rng.randrange(-20, 100), base + rng.randrange(0, 20_000))
               for _ in range(300)]
    produce(server, source, [(k, {"x": x}, ts) for k, x, ts in records[:150]])
    x = "json_extract(decode(value), '$.x')::BIGINT"
    query_id = session.query(
        f'CREATE TABLE "{out}" AS SELECT decode(key) AS k, COUNT(*) AS n, SUM({x}) AS total, '
        f'MIN({x}) AS lo, MAX({x}) AS hi FROM "{source}" WHERE {x} >= 0 '
        f'WINDOW SESSION (300 MILLISECONDS) GROUP BY decode(key) EMIT CHANGES'
    ).read_all().to_pylist()[0]["query_id"]
    try:
        running(session, query_id)
        produce(server, source, [(k, {"x": x}, ts) for k, x, ts in records[150:]])
        expected = session_model(records, 300)
        got = wait_until(lambda: (lambda live: live if live == expected else None)(
            replay_sessions(read_committed(server, out, 2))), 120,
            "the output's sessions to equal the model")
        assert got == expected
    finally:
        session.query(f"TERMINATE {query_id}").read_all()


# ---- kill -9 of the runner (a server of the test's own) -----------------------------------------

# GROUP BY key: the path without a repartition (the model test's takes one);
# COUNT(*) alone: the Streams DSL's count
KILL_STATEMENTS = {
    "count-and-sum": "CREATE TABLE counts AS SELECT key AS customer, COUNT(*) AS n, "
                     "SUM(json_extract(decode(value), '$.n')::BIGINT) AS total FROM numbers "
                     "WINDOW TUMBLING (SIZE 1 SECOND) GROUP BY key EMIT CHANGES",
    "count": "CREATE TABLE counts AS SELECT key AS customer, COUNT(*) AS n FROM numbers "
             "WINDOW TUMBLING (SIZE 1 SECOND) GROUP BY key EMIT CHANGES"}


def check_counts(output: list, inputs: list) -> None:
    """Exactly once: per (key, window) the committed updates grow, and the
    latest is the model's count and (when the query has it) sum of n (a
    record lost or taken twice changes both)."""
    want = defaultdict(lambda: {"n": 0, "total": 0})
    for key, n, ts in inputs:
        w = want[(key, ts // 1000 * 1000)]
        w["n"] += 1
        w["total"] += n
    seen = defaultdict(list)
    for key, value in output:
        doc = json.loads(value)
        seen[(doc["customer"], doc["WINDOWSTART"])].append(doc)
    shrinking = [k for k, docs in seen.items()
                 if any(a["n"] >= b["n"] for a, b in zip(docs, docs[1:]))]
    assert not shrinking, f"updates that do not grow: {shrinking[:5]}"
    got = {k: docs[-1] for k, docs in seen.items()}
    wrong = {k: (got.get(k), w) for k, w in want.items() if got.get(k) is None or
             any(got[k].get(f, w[f]) != w[f] for f in w)}
    assert not wrong, f"{len(wrong)} windows unlike the model (got, want): " \
                      f"{list(wrong.items())[:3]}"
    extra = sorted(set(got) - set(want))
    assert not extra, f"windows of no input record: {extra[:5]}"


def produce_numbered(server, start: int, count: int, base_ms: int) -> list:
    """n = start.. with key n % 10, 2 ms apart; (key, n, timestamp) each."""
    records = [(str(n % 10), {"n": n}, base_ms + 2 * n) for n in range(start, start + count)]
    produce(server, "numbers", records)
    return [(k, v["n"], ts) for k, v, ts in records]


@pytest.mark.parametrize("statement", list(KILL_STATEMENTS.values()), ids=list(KILL_STATEMENTS))
def test_kill_9_of_the_runner_loses_and_doubles_nothing(own_server, statement):
    create(own_server, "numbers", 2)
    base = int(time.time() * 1000) // 1000 * 1000
    session = Session(own_server.config(), timeout=30)
    try:
        query_id = session.query(statement).read_all().to_pylist()[0]["query_id"]
        running(session, query_id)
    finally:
        session.close()
    inputs, stop = [], threading.Event()

    def keep_producing():
        n = 0
        while not stop.is_set():
            inputs.extend(produce_numbered(own_server, n, 50, base))
            n += 50
    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        for _ in range(2):
            pid = wait_until(lambda: child_pids(own_server.proc.pid, RUNNER), 30, "the runner")[0]
            before = len(read_committed(own_server, "counts", 2, "read_uncommitted"))
            wait_until(lambda: len(read_committed(own_server, "counts", 2, "read_uncommitted"))
                       > before + 20, 90, "the runner to write output")
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: (child_pids(own_server.proc.pid, RUNNER) or [pid])[0] != pid, 30,
                       "a new runner")
    finally:
        stop.set()
        producer.join(60)

    def caught_up():
        output = read_committed(own_server, "counts", 2)
        try:
            check_counts(output, inputs)
        except AssertionError:
            return None
        return output
    try:
        output = wait_until(caught_up, 180, "the output to catch up")
    except AssertionError:
        check_counts(read_committed(own_server, "counts", 2), inputs)     # its message
        raise
    check_counts(output, inputs)
    # the checker catches one count off: an update planted after the latest
    key, value = output[-1]
    doc = json.loads(value)
    producer = Producer(own_server.config())
    # (by key: the partition of the updates it follows)
    producer.produce("counts", json.dumps({**doc, "n": doc["n"] + 1}).encode(), key=key)
    assert producer.flush(30) == 0
    producer.close()
    with pytest.raises(AssertionError, match="windows unlike the model"):
        check_counts(read_committed(own_server, "counts", 2), inputs)
