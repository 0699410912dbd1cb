"""The same SQL on Spark and on kafkalite's embedded engine (docs/sql.md,
"The same SQL on Spark"): each query's text, the docs' example's first, is
run by ``spark.sql`` over a temporary view of the kafkalite source and by
kafkalite.sql's Session over the topic, and the two answers, and a Python
model of the records, agree.

The queries keep to what both dialects read alike: ``CAST(key AS STRING)``
(DuckDB takes STRING for VARCHAR), unquoted ``partition``, no ``offset``
(DuckDB quotes it with ", Spark with `)."""
import re
from pathlib import Path

import pytest

from conftest import create, reader
from kafkalite.client import Producer
from kafkalite.sql import Session

DOCS = Path(__file__).resolve().parents[2] / "docs" / "sql.md"


def docs_query() -> str:
    """The query of docs/sql.md's Spark example, over the table ``{t}``."""
    page = DOCS.read_text()
    section = page.partition("\n## The same SQL on Spark\n")[2].partition("\n## ")[0]
    found = re.search(r'^QUERY = "(.+)"$', section, re.M)
    assert found, "docs/sql.md has no Spark example (## The same SQL on Spark, its QUERY)"
    return found[1].replace(" FROM orders ", " FROM {t} ")


QUERIES = [
    "SELECT partition, count(*) AS n FROM {t} GROUP BY partition ORDER BY partition",
    "SELECT CAST(value AS STRING) AS dish, count(*) AS n FROM {t} "
    "WHERE CAST(key AS STRING) = 'alice' GROUP BY dish ORDER BY dish",
    "SELECT count(*) AS n, sum(length(CAST(value AS STRING))) AS chars FROM {t} "
    "WHERE key IS NOT NULL",
]
CUSTOMERS, DISHES = ("alice", "bob", "carol"), ("pizza", "sushi", "salad", "ramen")


@pytest.fixture(scope="module")
def orders(server, module_topic):
    topic = module_topic.replace("-", "_").replace(".", "_")   # a plain name in both dialects
    create(server, topic, 3)
    producer, model = Producer(server.config()), []
    for i in range(500):
        key = None if i % 25 == 0 else CUSTOMERS[i % 3].encode()
        value = DISHES[(i // 3) % 4].encode()
        model.append((key, value, i % 3))
        producer.produce(topic, value, key=key, partition=i % 3)
    assert producer.flush(30) == 0
    return topic, model


def model_answers(model) -> list[list[tuple]]:
    per_customer, per_partition, alice = {}, {}, {}
    for key, value, partition in model:
        customer = key.decode() if key is not None else None
        per_customer[customer] = per_customer.get(customer, 0) + 1
        per_partition[partition] = per_partition.get(partition, 0) + 1
        if customer == "alice":
            alice[value.decode()] = alice.get(value.decode(), 0) + 1
    keyed = [v for k, v, _ in model if k is not None]
    # ORDER BY puts NULL first in Spark, last in DuckDB: the model's order is by name only
    return [sorted(per_customer.items(), key=lambda kv: (kv[0] is None, kv[0] or "")),
            sorted(per_partition.items()), sorted(alice.items()),
            [(len(keyed), sum(len(v) for v in keyed))]]


def test_each_query_answers_the_same_on_spark_and_kafkalite(spark, server, orders):
    topic, model = orders
    reader(spark, server, subscribe=topic).load().createOrReplaceTempView(topic)
    session = Session(server.config())
    try:
        for sql, expected in zip([docs_query(), *QUERIES], model_answers(model)):
            query = sql.format(t=topic)
            on_spark = [tuple(r) for r in spark.sql(query).collect()]
            on_kafkalite = [tuple(r.values()) for r in
                            session.query(query).read_all().to_pylist()]
            # NULLs sort first in Spark and last in DuckDB: compare as sets of rows
            # where an ORDER BY meets a NULL key, in order otherwise
            assert sorted(on_spark, key=repr) == sorted(on_kafkalite, key=repr) == \
                sorted(expected, key=repr), query
            if None not in {r[0] for r in expected}:
                assert on_spark == on_kafkalite == expected, query
    finally:
        session.close()
