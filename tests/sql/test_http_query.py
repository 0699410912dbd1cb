"""``POST /query`` (kafkalite/sql/http_query.py) on the node's HTTP port:
answers as a ksqlDB-style JSON array checked against what was produced,
bad input answered 400 (405, 415) with one line, a query past its
``timeout_ms`` cancelled, EMIT CHANGES streamed; and, on a server with
security on, the login in front of it and the user's Read ACLs on every
topic a query names.
"""
from __future__ import annotations

import base64
import json
import threading
import time
import urllib.error
import urllib.request
from collections import Counter

import pytest

from harness import sasl_config, secured_server, stop_server, wait_until
from kafkalite.client import AdminClient, NewTopic, Producer


def post(url: str, body, user: tuple | None = None, ctype: str = "application/json",
         timeout: float = 60):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST",
                                     headers={"Content-Type": ctype})
    if user:
        token = base64.b64encode(f"{user[0]}:{user[1]}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        body = exc.read()
        return exc.code, json.loads(body) if exc.headers.get_content_type() == \
            "application/json" else body.decode()


def query_url(server) -> str:
    return server.info["query"].rstrip("/")


@pytest.fixture
def orders(server, topic_name):
    admin = AdminClient(server.config())
    admin.create_topics([NewTopic(topic_name, 3, 1)])[topic_name].result(30)
    admin.close()
    producer = Producer(server.config())
    model = [(f"k{i % 5}", i) for i in range(200)]
    for key, i in model:
        producer.produce(topic_name, json.dumps({"n": i}).encode(), key=key.encode())
    assert producer.flush(30) == 0
    return topic_name, model


def test_an_answer_is_a_header_then_rows(server, orders):
    topic, model = orders
    status, answer = post(query_url(server), {
        "sql": f'SELECT CAST(key AS VARCHAR) AS k, count(*) AS n, '
               f'CAST(sum(CAST(json_extract(decode(value), \'$.n\') AS INT)) AS BIGINT) AS total '
               f'FROM "{topic}" GROUP BY k ORDER BY k'})
    assert status == 200, answer
    assert answer[0] == {"header": {"columns": ["k", "n", "total"],
                                    "schema": "`k` string, `n` int64, `total` int64"}}
    expected = {}
    for key, i in model:
        n, total = expected.get(key, (0, 0))
        expected[key] = (n + 1, total + i)
    assert [r["row"]["columns"] for r in answer[1:]] == \
        [[k, n, total] for k, (n, total) in sorted(expected.items())]
    # a point lookup by key; ksqlDB's body name works too
    status, answer = post(query_url(server), {
        "ksql": f"SELECT \"offset\" FROM \"{topic}\" WHERE key = 'k3'::BLOB"})
    assert status == 200 and len(answer) == 1 + sum(1 for k, _ in model if k == "k3")


def test_statements_of_one_body_run_in_order_over_their_own_tables(server, orders):
    # the answer is the last statement's; the tables the first ones create
    # are the session's, not topics (an INSERT INTO one was "unknown topic")
    topic, model = orders
    status, answer = post(query_url(server), {"sql": (
        f"CREATE TABLE per_key (k VARCHAR, n BIGINT);\n"
        f'INSERT INTO per_key SELECT decode(key), count(*) FROM "{topic}" GROUP BY 1;\n'
        f"SELECT k, n FROM per_key ORDER BY k")})
    assert status == 200, answer
    assert [r["row"]["columns"] for r in answer[1:]] == \
        [[k, n] for k, n in sorted(Counter(k for k, _ in model).items())]
    # an error in a later statement names its line in the whole body
    status, answer = post(query_url(server), {"sql": "CREATE TABLE x (n INT);\nSELECT nope FROM x"})
    assert (status, answer["kind"]) == (400, "unknown_column"), answer
    assert answer["error"].endswith("at line 2, column 8"), answer


@pytest.mark.parametrize("body, status, kind, text", [
    ({"sql": "SELECT * FORM x"}, 400, "syntax", 'syntax error at or near "x" at line 1, column 15'),
    ({"sql": 'SELECT * FROM "no-such-topic-http"'}, 400, "unknown_topic",
     "unknown topic no-such-topic-http at line 1, column 15"),
    ({"sql": "SELECT CAST('x' AS INT)"}, 400, "invalid", "Could not convert string 'x' to INT32"),
    ({"sql": ""}, 400, None, 'the body needs "sql": the query'),
    ({"sql": "SELECT 1", "timeout_ms": -1}, 400, None, '"timeout_ms" must be a positive number'),
])
def test_bad_input_is_400_with_one_line(server, body, status, kind, text):
    got, answer = post(query_url(server), body)
    assert got == status and text in answer["error"] and "\n" not in answer["error"], answer
    assert answer.get("kind") == kind


def test_wrong_method_and_wrong_body_type(server):
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(query_url(server), timeout=30)
    assert caught.value.code == 405
    assert post(query_url(server), b"sql=SELECT 1", ctype="application/x-www-form-urlencoded") \
        == (415, {"error": "send the body as application/json"})


def test_a_query_past_its_timeout_is_cancelled(server):
    started = time.monotonic()
    status, answer = post(query_url(server), {
        "sql": "SELECT count(*) FROM range(1000000000000) a, range(10) b "
               "WHERE a.range % 7 = b.range", "timeout_ms": 1000})
    assert status == 400 and answer == {
        "error": "the query ran longer than its timeout (1 s: timeout_ms)", "kind": "timeout"}
    assert time.monotonic() - started < 30


def test_emit_changes_streams_the_rows_of_new_records(server, orders):
    topic, _ = orders
    request = urllib.request.Request(query_url(server), method="POST", data=json.dumps({
        "sql": f"SELECT CAST(value AS VARCHAR) AS v FROM \"{topic}\" WHERE key = 'k9' "
               f"EMIT CHANGES"}).encode(), headers={"Content-Type": "application/json"})
    resp = urllib.request.urlopen(request, timeout=60)
    lines: list[bytes] = []
    def read():
        try:
            lines.extend(iter(resp.readline, b""))
        except (AttributeError, OSError, ValueError):   # closed under it, at the test's end
            pass
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    producer = Producer(server.config())

    def a_row_came():
        producer.produce(topic, b"new", key=b"k9")
        producer.produce(topic, b"other", key=b"k1")
        producer.flush(30)
        return any(b'"row"' in line for line in lines)
    wait_until(a_row_came, 60, "a streamed row", interval=1.0)
    resp.close()
    assert lines[0].startswith(b'[{"header":{"columns":["v"]')
    rows = [line for line in lines if b'"row"' in line]
    assert all(json.loads(line.lstrip(b",")) == {"row": {"columns": ["new"]}} for line in rows)


PASSWORDS = {"admin": "admin-secret", "alice": "alice-secret"}


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("sql-acls"), PASSWORDS)
    try:
        from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                           ResourcePatternType, ResourceType)
        from confluent_kafka.admin import AdminClient as KafkaAdmin
        from confluent_kafka.admin import NewTopic as KafkaNewTopic
        admin = KafkaAdmin(sasl_config(srv, "admin", PASSWORDS["admin"]))
        for f in admin.create_topics([KafkaNewTopic(t, 1, 1) for t in ("open", "closed")]).values():
            f.result(30)
        for f in admin.create_acls([AclBinding(ResourceType.TOPIC, "open",
                                               ResourcePatternType.LITERAL, "User:alice", "*",
                                               AclOperation.READ, AclPermissionType.ALLOW)]).values():
            f.result(30)
        from confluent_kafka import Producer as KafkaProducer
        producer = KafkaProducer(sasl_config(srv, "admin", PASSWORDS["admin"]))
        for t in ("open", "closed"):
            producer.produce(t, b"v", b"k")
        assert producer.flush(30) == 0
        yield srv
    finally:
        stop_server(srv)


def test_a_query_reads_only_the_topics_the_user_may_read(secured):
    url, alice = query_url(secured), ("alice", PASSWORDS["alice"])
    assert post(url, {"sql": "SELECT count(*) AS n FROM open"}, alice) == \
        (200, [{"header": {"columns": ["n"], "schema": "`n` int64"}}, {"row": {"columns": [1]}}])
    for sql in ("SELECT * FROM closed", "SELECT * FROM open JOIN closed USING (key)",
                "SELECT * FROM nonexistent"):
        assert post(url, {"sql": sql}, alice) == (403, {
            "error": f"not authorized to read topic {sql.split()[-1] if 'JOIN' not in sql else 'closed'!r}",
            "kind": "denied"}), sql
    assert post(url, {"sql": "SELECT count(*) AS n FROM closed"},
                ("admin", PASSWORDS["admin"]))[0] == 200
    status, _ = post(url, {"sql": "SELECT 1"}, None)
    assert status == 401
    assert post(url, {"sql": "SELECT 1"}, ("alice", "wrong"))[0] == 401


def test_a_persistent_query_needs_its_creators_read_and_write(secured):
    """CREATE STREAM over HTTP as alice: refused (403) without Read on the
    input or Write on the output; with both, created, run by the node's
    query runner (with the owner's key pair, security on) and terminated."""
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    from confluent_kafka.admin import AdminClient as KafkaAdmin
    url, alice = query_url(secured), ("alice", PASSWORDS["alice"])
    create = "CREATE STREAM {out} AS SELECT decode(key) AS k FROM {source}"
    assert post(url, {"sql": create.format(out="open_copy", source="closed")}, alice) == \
        (403, {"error": "CREATE STREAM open_copy: not authorized to read topic 'closed'",
               "kind": "denied"})
    assert post(url, {"sql": create.format(out="open_copy", source="open")}, alice) == \
        (403, {"error": "not authorized to write topic 'open_copy'", "kind": "denied"})
    admin = KafkaAdmin(sasl_config(secured, "admin", PASSWORDS["admin"]))
    for f in admin.create_acls([AclBinding(ResourceType.TOPIC, "open_copy",
                                           ResourcePatternType.LITERAL, "User:alice", "*",
                                           AclOperation.WRITE, AclPermissionType.ALLOW)]).values():
        f.result(30)
    status, answer = post(url, {"sql": create.format(out="open_copy", source="open")}, alice)
    assert status == 200, answer
    query_id = answer[1]["row"]["columns"][0]
    from confluent_kafka import Consumer as KafkaConsumer
    reader = KafkaConsumer({**sasl_config(secured, "admin", PASSWORDS["admin"]),
                            "group.id": "open-copy-reader", "auto.offset.reset": "earliest",
                            "isolation.level": "read_committed"})
    reader.subscribe(["open_copy"])
    try:
        copied = wait_until(lambda: reader.poll(1.0), 90, "the query's output")
        assert copied.error() is None and copied.value() == b'{"k":"k"}'
    finally:
        reader.close()
    wait_until(lambda: [r["row"]["columns"][:4] for r in post(
        url, {"sql": "SHOW QUERIES"}, alice)[1][1:]] == [[query_id, "RUNNING", "open",
                                                          "open_copy"]],
        30, "SHOW QUERIES to list it RUNNING")
    assert post(url, {"sql": f"TERMINATE {query_id}"}, alice)[0] == 200
    assert post(url, {"sql": "SHOW QUERIES"}, alice) == (200, [{"header": {
        "columns": ["query_id", "state", "input", "output", "statement"],
        "schema": "`query_id` string, `state` string, `input` string, `output` string, "
                  "`statement` string"}}])


def test_a_query_record_written_around_the_doors_is_not_run(secured):
    """Whoever is given Write on the queries topic can write a query's
    record naming any creator; the runner (the owner's rights) must not
    run it: alice, with Write on ``_kafkalite_queries`` and on her own
    ``stolen`` but no Read on ``closed``, records a copy of ``closed``
    into ``stolen`` "created by User:admin". It is listed ERROR, not
    sealed by the owner, and ``stolen`` stays empty."""
    from confluent_kafka import Producer as KafkaProducer
    from confluent_kafka import TopicPartition as KafkaTopicPartition
    from confluent_kafka import Consumer as KafkaConsumer
    from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType,
                                       ResourcePatternType, ResourceType)
    from confluent_kafka.admin import AdminClient as KafkaAdmin
    from confluent_kafka.admin import NewTopic as KafkaNewTopic
    admin_auth = ("admin", PASSWORDS["admin"])
    admin = KafkaAdmin(sasl_config(secured, *admin_auth))
    for name, config in (("_kafkalite_queries", {"cleanup.policy": "compact"}), ("stolen", {})):
        if name not in admin.list_topics(timeout=30).topics:
            admin.create_topics([KafkaNewTopic(name, 1, 1, config=config)])[name].result(30)
    for f in admin.create_acls([AclBinding(ResourceType.TOPIC, name, ResourcePatternType.LITERAL,
                                           "User:alice", "*", AclOperation.WRITE,
                                           AclPermissionType.ALLOW)
                                for name in ("_kafkalite_queries", "stolen")]).values():
        f.result(30)
    forged = {"id": "CSAS_STOLEN_9", "sql": "CREATE STREAM stolen AS SELECT decode(value) AS v "
              "FROM closed", "select": "SELECT decode(value) AS v FROM closed",
              "input": "closed", "output": "stolen", "partitions": 1,
              "principal": "User:admin", "created_ms": int(time.time() * 1000)}
    producer = KafkaProducer(sasl_config(secured, "alice", PASSWORDS["alice"]))
    producer.produce("_kafkalite_queries", json.dumps(forged).encode(), b"query/CSAS_STOLEN_9")
    assert producer.flush(30) == 0

    def state():
        rows = {r["row"]["columns"][0]: r["row"]["columns"][1]
                for r in post(query_url(secured), {"sql": "SHOW QUERIES"}, admin_auth)[1][1:]}
        return rows.get("CSAS_STOLEN_9") if rows.get("CSAS_STOLEN_9") != "PENDING" else None
    try:
        assert wait_until(state, 90, "the runner to take the record") == "ERROR"
        reader = KafkaConsumer({**sasl_config(secured, *admin_auth), "group.id": "stolen-check"})
        try:
            assert reader.get_watermark_offsets(KafkaTopicPartition("stolen", 0), 30) == (0, 0)
        finally:
            reader.close()
    finally:
        producer.produce("_kafkalite_queries", None, b"query/CSAS_STOLEN_9")
        producer.flush(30)
