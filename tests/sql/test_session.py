"""SQL over topics (kafkalite/sql/session.py) against the shared server: every
query's answer is compared with a Python model of the same records.

The records: 3 partitions, 600 orders keyed by customer, their values in
Confluent's wire format with an Avro schema the registry holds (so the
table has the value's columns: ``item``, ``amount``, ``note`` and ``offset``,
which is a base column's name and becomes ``value_offset``), plus a
tombstone, a record whose value is not in the wire format, records with
headers, and an aborted transaction's records (read_committed leaves them
out). The model is the list of what was produced and committed; each
query's answer is checked against what the model says it must be: counts,
group-bys, filters on key and value columns, a point lookup by key, the
offsets' bounds per partition, a join of two topics.
"""
from __future__ import annotations

import io
import json
import threading
import time
import urllib.request
from collections import Counter, defaultdict

import fastavro
import pytest

from harness import wait_until
from kafkalite.client import AdminClient, Consumer, NewTopic, Producer, TopicPartition
from kafkalite.sql import QueryError, Session

SCHEMA = {"type": "record", "name": "Order", "fields": [
    {"name": "item", "type": "string"},
    {"name": "amount", "type": "double"},
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "offset", "type": "int", "default": 0}]}
ITEMS = ("pizza", "sushi", "salad", "ramen")
PARTITIONS = 3


def register(server, subject: str, schema: dict) -> int:
    request = urllib.request.Request(
        f"{server.info['schema_registry']}/subjects/{subject}/versions", method="POST",
        data=json.dumps({"schema": json.dumps(schema)}).encode(),
        headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
    with urllib.request.urlopen(request, timeout=30) as resp:
        return json.loads(resp.read())["id"]


def wire(schema_id: int, value: dict, schema: dict = SCHEMA) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return b"\0" + schema_id.to_bytes(4, "big") + out.getvalue()


@pytest.fixture(scope="module")
def orders(server, tmp_path_factory):
    """(topic, the model: one dict a committed record with a key)."""
    topic = "sql.orders-" + str(int(time.time() * 1000) % 10**9)
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    admin.close()
    schema_id = register(server, f"{topic}-value", SCHEMA)
    model = []
    producer = Producer(server.config(**{"linger.ms": 5}))
    for i in range(600):
        row = {"key": f"customer-{i % 17}", "item": ITEMS[i % 4], "amount": float(i % 50) / 4,
               "note": None if i % 3 else f"note {i}", "value_offset": i}
        model.append(row)
        producer.produce(topic, wire(schema_id, {"item": row["item"], "amount": row["amount"],
                                                 "note": row["note"], "offset": i}),
                         key=row["key"].encode(),
                         headers=[("source", b"web")] if i % 10 == 0 else None)
    producer.produce(topic, None, key=b"customer-gone")             # a tombstone
    producer.produce(topic, b"not avro", key=b"customer-raw")       # not in the wire format
    assert producer.flush(30) == 0
    txn = Producer(server.config(**{"transactional.id": topic + "-txn"}))
    txn.init_transactions(30)
    txn.begin_transaction()
    for _ in range(5):
        txn.produce(topic, wire(schema_id, {"item": "aborted", "amount": 1e6, "note": None,
                                            "offset": -1}), key=b"customer-aborted")
    txn.flush(30)
    txn.abort_transaction(30)
    return topic, model


@pytest.fixture
def session(server):
    s = Session(server.config(), server.info["schema_registry"])
    yield s
    s.close()


def rows(session, sql: str) -> list[tuple]:
    return [tuple(r.values()) for r in session.query(sql).read_all().to_pylist()]


def test_every_query_answers_as_the_model(session, orders):
    topic, model = orders
    t = f'"{topic}"'
    # the tombstone and the raw value are records too; the aborted ones are not
    assert rows(session, f"SELECT count(*) FROM {t}") == [(len(model) + 2,)]
    per_key = Counter(r["key"] for r in model)
    assert rows(session, f"SELECT CAST(key AS VARCHAR) k, count(*) FROM {t} "
                         f"WHERE item IS NOT NULL GROUP BY k ORDER BY k") == sorted(per_key.items())
    per_item = defaultdict(float)
    for r in model:
        per_item[r["item"]] += r["amount"]
    assert rows(session, f"SELECT item, sum(amount) FROM {t} WHERE item IS NOT NULL "
                         f"GROUP BY item ORDER BY item") == sorted(per_item.items())
    big = sorted(r["value_offset"] for r in model if r["amount"] > 10 and r["item"] == "sushi")
    assert rows(session, f"SELECT value_offset FROM {t} WHERE amount > 10 AND item = 'sushi' "
                         f"ORDER BY value_offset") == [(o,) for o in big]
    # a point lookup by key, and the key's records in their produced order
    seven = [r["value_offset"] for r in model if r["key"] == "customer-7"]
    assert rows(session, f"SELECT value_offset FROM {t} WHERE key = 'customer-7'::BLOB "
                         f"ORDER BY \"timestamp\", \"offset\"") == [(o,) for o in seven]
    noted = sum(1 for r in model if r["note"] is not None)
    assert rows(session, f"SELECT count(note) FROM {t}") == [(noted,)]
    with_headers = sum(1 for r in model if r["value_offset"] % 10 == 0)
    assert rows(session, f"SELECT count(*) FROM {t} WHERE len(headers) = 1 "
                         f"AND headers[1].key = 'source'") == [(with_headers,)]
    assert rows(session, f"SELECT count(*) FROM {t} WHERE value IS NULL") == [(1,)]
    assert rows(session, f"SELECT count(*) FROM {t} WHERE value IS NOT NULL AND item IS NULL") \
        == [(1,)]
    assert rows(session, f"SELECT count(*) FROM {t} WHERE key = 'customer-aborted'::BLOB") \
        == [(0,)]


def test_each_partition_is_read_from_its_log_start_to_its_end(session, orders, server):
    topic, model = orders
    c = Consumer(server.config(**{"isolation.level": "read_committed"}))
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    c.close()
    got = rows(session, f'SELECT "partition", min("offset"), count(*) FROM "{topic}" '
                        f'GROUP BY ALL ORDER BY 1')
    assert [p for p, _, _ in got] == list(range(PARTITIONS))
    assert sum(n for _, _, n in got) == len(model) + 2
    for p, low, _ in got:
        assert low == ends[p][0] == 0


def test_a_query_decodes_only_the_value_columns_it_reads(session, orders):
    # the value's columns are decoded (a registry's Avro, record by record)
    # only for a query that reads one of them: a count or a group-by of the
    # keys decoded every value before
    topic, model = orders
    t = f'"{topic}"'
    assert rows(session, f"SELECT count(*) FROM {t}") == [(len(model) + 2,)]
    assert session.values_decoded == 0
    per_key = Counter(r["key"] for r in model)
    assert rows(session, f"SELECT CAST(key AS VARCHAR) k, count(*) FROM {t} WHERE key IS NOT "
                         f"NULL AND value IS NOT NULL AND key <> 'customer-raw'::BLOB "
                         f"GROUP BY k ORDER BY k") == sorted(per_key.items())
    assert session.values_decoded == 0
    # a value column named in a filter only, or through *: decoded, and the answers exact
    assert rows(session, f"SELECT count(*) FROM {t} WHERE item = 'sushi'") == \
        [(sum(1 for r in model if r["item"] == "sushi"),)]
    assert session.values_decoded == len(model) + 2
    assert len(session.query(f"SELECT * FROM {t} WHERE note IS NOT NULL").read_all()) == \
        sum(1 for r in model if r["note"] is not None)
    assert session.values_decoded == len(model) + 2


@pytest.mark.parametrize("corrupt", [False, True], ids=["versions", "versions-and-corrupt"])
def test_values_of_every_schema_version_read_as_the_model(session, server, topic_name, corrupt):
    # the latest version's values are read in C (values.FlatAvro), the
    # others record by record, one batch of the two put back in order; a
    # corrupt value of the latest version (a payload cut short, a string
    # that is not UTF-8) sends the batch record by record: nulls for it
    old = {"type": "record", "name": "Order", "fields": SCHEMA["fields"][:2]}
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    admin.close()
    old_id = register(server, f"{topic_name}-value", old)
    new_id = register(server, f"{topic_name}-value", SCHEMA)
    producer = Producer(server.config(**{"linger.ms": 50}))
    model = []
    for i in range(300):
        row = {"item": ITEMS[i % 4], "amount": i / 8, "note": None if i % 3 else f"n{i}",
               "value_offset": i}
        if i % 5 == 0:
            value = wire(old_id, {"item": row["item"], "amount": row["amount"]}, old)
            row.update(note=None, value_offset=0)       # the latest version's defaults
        else:
            value = wire(new_id, {**row, "offset": i})
        model.append(row)
        producer.produce(topic_name, value)
        if i == 150:
            nulls = {"item": None, "amount": None, "note": None, "value_offset": None}
            producer.produce(topic_name, None)                          # a tombstone
            producer.produce(topic_name, b"\0\0\0\0\0not avro")           # no such schema id
            model += [nulls, nulls]
            if corrupt:
                header = b"\0" + new_id.to_bytes(4, "big")
                producer.produce(topic_name, header + b"\x04")           # cut short
                producer.produce(topic_name, header + b"\x04\xff\xfe")   # not UTF-8
                model += [nulls, nulls]
    assert producer.flush(30) == 0
    got = session.query(f'SELECT item, amount, note, value_offset FROM "{topic_name}" '
                        f'ORDER BY "offset"').read_all().to_pylist()
    assert got == model


def test_a_session_fills_its_own_tables_from_a_topic(session, orders):
    # the session's tables are not topics: a query naming one and a topic
    # registers the topic alone, and an INSERT INTO one is no "unknown topic"
    topic, model = orders
    session.query("CREATE TABLE wanted (item VARCHAR)")
    session.query("INSERT INTO wanted VALUES ('pizza'), ('ramen')")
    session.query("CREATE TABLE totals (item VARCHAR, total DOUBLE)")
    session.query(f'INSERT INTO totals SELECT o.item, sum(o.amount) FROM "{topic}" o '
                  f"JOIN wanted USING (item) GROUP BY o.item")
    totals = defaultdict(float)
    for r in model:
        if r["item"] in ("pizza", "ramen"):
            totals[r["item"]] += r["amount"]
    assert rows(session, "SELECT item, total FROM totals ORDER BY item") == sorted(totals.items())
    # an UPDATE's names: DuckDB binds them from neither the catalog nor a parse tree
    session.query(f'UPDATE totals SET total = (SELECT count(*) FROM "{topic}" o '
                  f"WHERE o.item = totals.item)")
    assert rows(session, "SELECT item, total FROM totals ORDER BY item") == sorted(
        Counter(r["item"] for r in model if r["item"] in totals).items())


def test_every_query_of_a_session_finds_the_configuration_locked(session, orders):
    # the lock is set once, on the session's one database, not by each
    # query on a database of its own: the second query and later too
    topic, model = orders
    for _ in range(2):
        assert rows(session, f'SELECT count(*) FROM "{topic}"') == [(len(model) + 2,)]
        for sql in ("SET enable_external_access = true", "SET memory_limit = '64GB'",
                    "RESET threads"):
            with pytest.raises(QueryError, match="configuration has been locked"):
                session.query(sql)


def test_a_join_of_two_topics_and_a_topic_without_a_schema(session, orders, server, topic_name):
    topic, model = orders
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    admin.close()
    producer = Producer(server.config())
    vip = ["customer-1", "customer-2"]
    for k in vip:
        producer.produce(topic_name, b"vip", key=k.encode())
    assert producer.flush(30) == 0
    got = rows(session, f'SELECT CAST(o.key AS VARCHAR), count(*) FROM "{topic}" o '
                        f'JOIN "{topic_name}" v ON o.key = v.key GROUP BY 1 ORDER BY 1')
    per_key = Counter(r["key"] for r in model)
    assert got == [(k, per_key[k]) for k in vip]
    # no subject: the base columns only
    names = session.query(f'SELECT * FROM "{topic_name}"').schema.names
    assert names == ["partition", "offset", "timestamp", "key", "value", "headers"]


def test_records_produced_after_the_query_started_are_not_in_its_answer(server, topic_name):
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic_name, 1, 1)])[topic_name].result(30)
    admin.close()
    producer = Producer(server.config())
    producer.produce_batch(topic_name, [b"x" * 100] * 50_000)
    assert producer.flush(30) == 0
    session = Session(server.config())
    reader = session.query(f'SELECT "offset" FROM "{topic_name}"')
    first = reader.read_next_batch()
    producer.produce_batch(topic_name, [b"late"] * 1000)
    assert producer.flush(30) == 0
    total = first.num_rows + sum(b.num_rows for b in reader)
    assert total == 50_000
    session.close()


def test_a_history_of_many_partitions_is_read_exactly(server, topic_name):
    # the history is read 4 MiB a partition a fetch: the answer over 12
    # partitions, an aborted transaction among them, counts every
    # committed record once, no aborted one, the tombstones too (a guard:
    # the code before answered so as well)
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic_name, 12, 1)])[topic_name].result(30)
    admin.close()
    producer = Producer(server.config(**{"linger.ms": 20}))
    model = Counter()
    for i in range(60_000):
        key = b"k%d" % (i % 97)
        producer.produce(topic_name, None if i % 1000 == 0 else b"v" * (i % 300), key=key)
        model[key] += 1
    assert producer.flush(30) == 0
    txn = Producer(server.config(**{"transactional.id": topic_name + "-txn"}))
    txn.init_transactions(30)
    txn.begin_transaction()
    for i in range(3000):
        txn.produce(topic_name, b"aborted", key=b"k%d" % (i % 97))
    txn.flush(30)
    txn.abort_transaction(30)
    producer.produce(topic_name, b"after", key=b"k0")
    model[b"k0"] += 1
    assert producer.flush(30) == 0
    session = Session(server.config())
    got = rows(session, f'SELECT key, count(*), count(value) FROM "{topic_name}" '
                        f'GROUP BY key ORDER BY key')
    assert got == [(k, n, n - sum(1 for i in range(0, 60_000, 1000) if b"k%d" % (i % 97) == k))
                   for k, n in sorted(model.items())]
    session.close()


@pytest.mark.parametrize("sql, kind, line", [
    ('SELECT * FORM "{t}"', "syntax", 'syntax error at or near ""{t}"" at line 1, column 15'),
    ('SELECT nope FROM "{t}"', "unknown_column", 'unknown column "nope"'),
    ('SELECT * FROM "{t}x"', "unknown_topic", "unknown topic {t}x (did you mean '{t}'?) at line "
                                              "1, column 15"),
    ("SELECT amount + 'x' FROM \"{t}\"", "invalid", "Could not convert string 'x' to DOUBLE"),
    ("SELECT * FROM read_csv('/etc/passwd')", "invalid", "file system operations are disabled"),
])
def test_bad_input_is_one_line_naming_the_problem(session, orders, sql, kind, line):
    topic, _ = orders
    with pytest.raises(QueryError) as caught:
        session.fetch(session.query(sql.format(t=topic)), sql).__next__()
    message = str(caught.value)
    assert "\n" not in message and caught.value.kind == kind, message
    assert line.format(t=topic) in message


def test_a_query_is_cancelled_from_another_thread(server):
    session = Session(server.config(), memory_limit="64MB")
    # an aggregate runs to its end before its reader is returned: the timer first
    threading.Timer(1.0, session.interrupt).start()
    started = time.monotonic()
    with pytest.raises(QueryError, match="the query was cancelled") as caught:
        list(session.fetch(session.query("SELECT count(*) FROM range(1000000000000) a, "
                                         "range(10) b WHERE a.range % 7 = b.range")))
    assert caught.value.kind == "cancelled" and time.monotonic() - started < 30


def test_memory_is_bounded_by_the_limit(server):
    session = Session(server.config(), memory_limit="32MB", threads=1)
    with pytest.raises(QueryError, match="more memory than its limit") as caught:
        list(session.fetch(session.query(
            "SELECT list(range) FROM range(50000000) GROUP BY range % 3")))
    assert "\n" not in str(caught.value)


def test_emit_changes_follows_new_records_through_a_filter(server, topic_name):
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic_name, 2, 1)])[topic_name].result(30)
    admin.close()
    producer = Producer(server.config())
    producer.produce(topic_name, b"old", key=b"a")      # before the query: not a row
    assert producer.flush(30) == 0
    session = Session(server.config())
    got, done = [], threading.Event()

    def follow():
        for batch in session.emit_changes(f"SELECT CAST(value AS VARCHAR) v FROM \"{topic_name}\""
                                          f" WHERE key = 'a' EMIT CHANGES"):
            got.extend(r["v"] for r in batch.to_pylist())
        done.set()
    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    # the tail starts at each partition's end once the thread has begun: a
    # record is produced each second until one arrives as a row
    def produce_more():
        producer.produce(topic_name, b"new", key=b"a")
        producer.produce(topic_name, b"other", key=b"b")
        assert producer.flush(30) == 0
        return "new" in got
    wait_until(produce_more, 30, "the new record as a row", interval=1.0)
    session.interrupt()
    assert done.wait(30)
    assert "old" not in got and "other" not in got


@pytest.mark.parametrize("sql, message", [
    ("SELECT count(*) FROM \"{t}\" EMIT CHANGES", "an aggregate"),
    ("SELECT * FROM \"{t}\" ORDER BY key EMIT CHANGES", "ORDER BY is not supported"),
    ("SELECT 1 EMIT CHANGES", "exactly one topic"),
])
def test_emit_changes_refuses_what_per_batch_would_answer_wrongly(session, orders, sql, message):
    topic, _ = orders
    with pytest.raises(QueryError, match=message):
        next(session.emit_changes(sql.format(t=topic)))


def test_emit_changes_takes_a_clause_word_in_a_name_or_a_string_as_text(session, server,
                                                                        topic_name):
    # the clause check read "late-over-limit" as OVER and LIMIT and refused the query
    topic = f"{topic_name}-late-over-limit"
    AdminClient(server.config()).create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    follower = session.emit_changes(f"SELECT key FROM \"{topic}\" WHERE decode(value) <> "
                                    f"'order by' EMIT CHANGES")
    try:
        assert next(follower).num_rows == 0         # a wait without records, not a refusal
    finally:
        follower.close()
