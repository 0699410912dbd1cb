"""Persistent queries (kafkalite/sql/persistent.py) on the shared server:
a CREATE STREAM ... AS SELECT's output, read read_committed, equals a
Python model of its filter and projection over random input (the
history before it was created and the records after); SHOW QUERIES
lists it and TERMINATE stops it; bad statements are one line naming the
problem, from the API and over POST /query.

Restarts and kill -9: test_query_runner.py.
"""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from harness import create, wait_until
from kafkalite.client import AdminClient, OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafkalite.sql import QueryError, Session

COLORS = ("red", "green", "blue")
# the filter and projection, and the same in Python (model)
PROJECTION = ("decode(key) AS customer, json_extract(decode(value), '$.n')::INTEGER AS n, "
              "upper(json_extract_string(decode(value), '$.color')) AS color, "
              "partition AS p, \"offset\" AS o")
FILTER = ("json_extract_string(decode(value), '$.color') <> 'green' "
          "AND json_extract(decode(value), '$.n')::INTEGER % 3 <> 0")


def model(records: list) -> Counter:
    """The output the query must give: (key, value) of each input record
    (partition, offset, key, value) the filter keeps."""
    out = Counter()
    for partition, offset, key, value in records:
        doc = json.loads(value)
        if doc["color"] != "green" and doc["n"] % 3 != 0:
            out[(key, json.dumps({"customer": key.decode(), "n": doc["n"],
                                  "color": doc["color"].upper(), "p": partition, "o": offset},
                                 separators=(",", ":")).encode())] += 1
    return out


def produce_random(server, topic: str, rng: random.Random, count: int, start: int) -> list:
    """``count`` random records; their (partition, offset, key, value)."""
    delivered = []
    producer = Producer(server.config(**{"linger.ms": 5}))

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))
    for i in range(start, start + count):
        key = f"c{rng.randrange(7)}".encode()
        value = json.dumps({"n": i, "color": rng.choice(COLORS)}).encode()
        producer.produce(topic, value, key=key, on_delivery=on_delivery)
    assert producer.flush(30) == 0
    producer.close()
    return delivered


def read_committed(server, topic: str, partitions: int, isolation="read_committed") -> list:
    """(key, value) of every record of ``topic``, read read_committed (or
    ``isolation``) to the last stable offset (the end) of each partition."""
    c = Consumer(server.config(**{"isolation.level": isolation}))
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), 10)[1]
                for p in range(partitions)}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in ends if ends[p]])
        out = []
        while any(c.position([TopicPartition(topic, p)])[0].offset < end
                  for p, end in ends.items() if end):
            out += [(m.key(), m.value()) for m in c.consume(10_000, 0.5)]
        return out
    finally:
        c.close()


@pytest.fixture
def session(server):
    s = Session(server.config(), timeout=30)
    yield s
    s.close()


def queries(session) -> dict:
    rows = session.query("SHOW QUERIES").read_all().to_pylist()
    return {r["query_id"]: r for r in rows}


def group_members(server, group: str) -> int:
    admin = AdminClient(server.config())
    try:
        desc = admin.describe_consumer_groups([group])[group].result(10)
        return len(desc.members)
    finally:
        admin.close()


def test_the_output_is_the_model_of_the_filter_and_projection(server, session, topic_name):
    rng = random.Random(76)
    source, out = topic_name, topic_name + "-out"
    create(server, source, 3)
    records = produce_random(server, source, rng, 400, 0)       # history before the query
    answer = session.query(f'CREATE STREAM "{out}" AS SELECT {PROJECTION} FROM "{source}" '
                           f'WHERE {FILTER} EMIT CHANGES').read_all().to_pylist()
    query_id = answer[0]["query_id"]
    try:
        assert query_id.startswith("CSAS_") and "Created query" in answer[0]["message"]
        shown = wait_until(lambda: queries(session).get(query_id, {}).get("state") == "RUNNING"
                           and queries(session)[query_id], 60, "the query to run")
        assert (shown["input"], shown["output"]) == (source, out)
        assert shown["statement"].startswith(f'CREATE STREAM "{out}" AS SELECT')
        records += produce_random(server, source, rng, 400, 400)     # and while it runs
        expected = model(records)
        assert sum(expected.values()) > 200
        got = wait_until(lambda: (lambda o: o if len(o) >= sum(expected.values()) else None)(
            read_committed(server, out, 3)), 90, "the output to catch up")
        assert Counter(got) == expected
        explained = {r["step"]: r["detail"] for r in
                     session.query(f"EXPLAIN {query_id}").read_all().to_pylist()}
        assert explained["source"] == source and "!= 'green'" in explained["filter"]
    finally:
        session.query(f"TERMINATE {query_id}").read_all()
    assert query_id not in queries(session)
    # stopped: its instance leaves the group at once (a static member, removed
    # by the runner, not after its 45 s session timeout), and input after that
    # is not read
    group = explained["application.id"]
    wait_until(lambda: group_members(server, group) == 0, 10, "the query's instance to leave")
    before = len(read_committed(server, out, 3))
    produce_random(server, source, rng, 100, 800)
    assert len(read_committed(server, out, 3)) == before


@pytest.mark.parametrize("statement, kind, text", [
    ('CREATE STREAM o AS SELECT count(*) FROM "{t}"', "invalid",
     "CREATE STREAM o: CREATE STREAM ... AS SELECT takes a SELECT ... WHERE over one topic; "
     "an aggregate (count, sum, ...) is not supported with it"),
    ('CREATE STREAM o AS SELECT nope FROM "{t}"', "unknown_column",
     'CREATE STREAM o: unknown column "nope" (candidates: '),
    ('CREATE STREAM o AS SELECT * FROM "{t}x"', "unknown_topic",
     "CREATE STREAM o: unknown topic {t}x (did you mean '{t}'?)"),
    ('CREATE STREAM o AS SELEC * FROM "{t}"', "syntax",
     'CREATE STREAM o: syntax error at or near "SELEC" at line 1, column 1 of its SELECT'),
    ('CREATE STREAM o AS SELECT key FROM "{t}" ORDER BY key', "invalid",
     "ORDER BY is not supported with it"),
    ('CREATE STREAM "{t}" AS SELECT key FROM "{t}"', "invalid",
     "the output topic is the query's input"),
    ("TERMINATE CSAS_NO_SUCH_9", "unknown_query", "no query CSAS_NO_SUCH_9 (running: "),
], ids=["aggregate", "column", "topic", "syntax", "order-by", "into-itself", "terminate"])
def test_a_bad_statement_is_one_line_naming_the_problem(server, session, topic_name, statement,
                                                         kind, text):
    create(server, topic_name, 1)
    with pytest.raises(QueryError) as caught:
        session.query(statement.format(t=topic_name))
    assert caught.value.kind == kind
    assert text.format(t=topic_name) in str(caught.value) and "\n" not in str(caught.value)


def test_a_record_the_projection_fails_on_is_skipped_and_the_query_goes_on(server, session,
                                                                          topic_name):
    source, out = topic_name, topic_name + "-out"
    create(server, source, 1)
    producer = Producer(server.config())
    values = [json.dumps({"n": i}).encode() if i % 4 else b"not json" for i in range(40)]
    for value in values:
        producer.produce(source, value, key=b"k")
    assert producer.flush(30) == 0
    producer.close()
    query_id = session.query(f'CREATE STREAM "{out}" AS SELECT json_extract(decode(value), '
                             f'\'$.n\')::INTEGER AS n FROM "{source}"').read_all()[0][0].as_py()
    try:
        want = Counter((b"k", json.dumps({"n": i}, separators=(",", ":")).encode())
                       for i in range(40) if i % 4)
        got = wait_until(lambda: (lambda o: o if len(o) >= sum(want.values()) else None)(
            read_committed(server, out, 1)), 90, "the good records' output")
        assert Counter(got) == want
        # going on, not failed: RUNNING (told a moment after it starts)
        wait_until(lambda: queries(session)[query_id]["state"] == "RUNNING", 30, "RUNNING")
    finally:
        session.query(f"TERMINATE {query_id}").read_all()
