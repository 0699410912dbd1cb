"""The Iceberg REST catalog served by ``kafkalite server`` (iceberg_rest_port),
read by real clients on the shared server: pyiceberg's RestCatalog finds the
namespace and an Iceberg topic's table and reads the rows the topic holds;
DuckDB reads the same rows from the data files the catalog's metadata
lists (its iceberg extension cannot be installed here: the PyPI build is
for another DuckDB release, and DuckDB downloads it from no other place we
reach); the spec's error bodies for what is not there; every write refused.
Spark is not tested: the iceberg-spark-runtime jar is not on this machine
and no registry we reach serves it."""
from __future__ import annotations

import json
import urllib.error
import urllib.request

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from harness import wait_until

pytest.importorskip("pyiceberg")

from pyiceberg.catalog import load_catalog  # noqa: E402
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError  # noqa: E402
from server.iceberg_tables import check_exactly_once, topic_rows  # noqa: E402

NEXT_OFFSET = "kafkalite.next-offset."


def call(url: str, method: str = "GET", body: dict | None = None, headers=None):
    """(status, JSON body or None, headers) of one request."""
    request = urllib.request.Request(url, method=method, headers=dict(headers or {}),
                                     data=None if body is None else json.dumps(body).encode())
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            raw, status, got = answer.read(), answer.status, answer.headers
    except urllib.error.HTTPError as exc:
        raw, status, got = exc.read(), exc.code, exc.headers
    return status, (json.loads(raw) if raw else None), got


def make_iceberg_topic(bootstrap: str, topic: str, records: int, admin_config=None,
                       producer_config=None) -> dict[int, int]:
    """An Iceberg topic of two partitions committed every 200 ms, ``records``
    records produced to it (keys, headers, a tombstone); its end offsets."""
    admin = AdminClient({"bootstrap.servers": bootstrap, **(admin_config or {})})
    admin.create_topics([NewTopic(topic, 2, 1, config={
        "iceberg.mode": "key_value", "iceberg.target.lag.ms": "200"})])[topic].result(30)
    producer = ck.Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True,
                            "linger.ms": 5, **(producer_config or {})})
    for i in range(records):
        producer.produce(topic, b"value-%d" % i if i != 7 else None, key=b"key-%d" % (i % 9),
                         partition=i % 2, headers=[("n", b"%d" % i)] if i % 4 == 0 else None)
    assert producer.flush(30) == 0
    return {0: (records + 1) // 2, 1: records // 2}


def committed_table(catalog, topic: str, ends: dict[int, int]):
    """The table as the REST catalog loads it once its snapshot covers ``ends``."""
    found = []

    def covered():
        try:
            table = catalog.load_table(("kafkalite", topic))
        except NoSuchTableError:
            return False
        summary = table.current_snapshot().summary.additional_properties \
            if table.current_snapshot() else {}
        offsets = {int(k[len(NEXT_OFFSET):]): int(v) for k, v in summary.items()
                   if k.startswith(NEXT_OFFSET)}
        found[:] = [table]
        return all(offsets.get(p, 0) >= end for p, end in ends.items())
    wait_until(covered, 60, f"the table of {topic} through the REST catalog to cover {ends}",
               interval=0.2)
    return found[0]


def rows_of(arrow_rows) -> list[tuple]:
    """The (partition, offset, timestamp ms, key, value, headers) rows
    iceberg_tables compares, from the table's Arrow rows."""
    out = []
    for r in arrow_rows:
        rp = r["redpanda"]
        out.append((rp["partition"], rp["offset"], int(rp["timestamp"].timestamp() * 1000),
                    rp["key"], r["value"], tuple((h["key"], h["value"]) for h in rp["headers"])))
    return out


def test_pyiceberg_finds_and_reads_an_iceberg_topic(server, topic_name):
    url = server.info["iceberg_rest"]
    ends = make_iceberg_topic(server.kafka_bootstrap, topic_name, 300)
    catalog = load_catalog("kafkalite", type="rest", uri=url)
    table = committed_table(catalog, topic_name, ends)
    assert ("kafkalite",) in catalog.list_namespaces()
    assert ("kafkalite", topic_name) in catalog.list_tables("kafkalite")
    assert catalog.table_exists(("kafkalite", topic_name))
    assert table.metadata_location.startswith("file://")
    rows = rows_of(table.scan().to_arrow().to_pylist())
    expected = topic_rows(server.kafka_bootstrap, topic_name, ends)
    assert len(rows) == 300
    assert check_exactly_once(rows, expected) == []


def test_duckdb_reads_the_files_the_loaded_metadata_lists(server, topic_name):
    duckdb = pytest.importorskip("duckdb")
    ends = make_iceberg_topic(server.kafka_bootstrap, topic_name, 120)
    catalog = load_catalog("kafkalite", type="rest", uri=server.info["iceberg_rest"])
    table = committed_table(catalog, topic_name, ends)
    files = [task.file.file_path.removeprefix("file://") for task in table.scan().plan_files()]
    got = duckdb.sql("SELECT redpanda.partition, redpanda.offset, epoch_ms(redpanda.timestamp), "
                     "redpanda.key, value, redpanda.headers FROM read_parquet($files)",
                     params={"files": files}).fetchall()
    rows = [(p, o, ts, k, v, tuple((h["key"], h["value"]) for h in hs))
            for p, o, ts, k, v, hs in got]
    assert check_exactly_once(rows, topic_rows(server.kafka_bootstrap, topic_name, ends)) == []


def test_load_table_answers_the_current_metadata_and_its_etag(server, topic_name):
    url = server.info["iceberg_rest"]
    ends = make_iceberg_topic(server.kafka_bootstrap, topic_name, 10)
    committed_table(load_catalog("kafkalite", type="rest", uri=url), topic_name, ends)
    path = f"{url}/v1/namespaces/kafkalite/tables/{topic_name}"
    status, body, headers = call(path)
    assert status == 200
    metadata = body["metadata"]
    assert body["metadata-location"].endswith(".metadata.json")
    assert metadata["current-snapshot-id"] in {s["snapshot-id"] for s in metadata["snapshots"]}
    assert metadata["properties"]["commit.retry.num-retries"] == "0"
    # the same metadata: 304 to a client that has it; refs keeps the snapshot main names
    assert call(path, headers={"If-None-Match": headers["ETag"]})[0] == 304
    refs = call(path + "?snapshots=refs")[1]["metadata"]
    assert [s["snapshot-id"] for s in refs["snapshots"]] == [metadata["current-snapshot-id"]]
    assert call(path + "?snapshots=some")[0] == 400


def error(answer, code: int, type_: str) -> str:
    """The message of the spec's error body, once its code and type are checked."""
    status, body, _ = answer
    assert (status, body["error"]["code"], body["error"]["type"]) == (code, code, type_), body
    return body["error"]["message"]


def test_unknown_namespaces_and_tables_get_the_specs_errors(server, topic_name):
    url = server.info["iceberg_rest"]
    assert "no-such-ns" in error(call(f"{url}/v1/namespaces/no-such-ns"), 404,
                                 "NoSuchNamespaceException")
    error(call(f"{url}/v1/namespaces/no-such-ns/tables"), 404, "NoSuchNamespaceException")
    assert call(f"{url}/v1/namespaces/no-such-ns", "HEAD")[:2] == (404, None)
    error(call(f"{url}/v1/namespaces?parent=no-such-ns"), 404, "NoSuchNamespaceException")
    # the namespace exists once any Iceberg topic has committed
    ends = make_iceberg_topic(server.kafka_bootstrap, topic_name, 4)
    catalog = load_catalog("kafkalite", type="rest", uri=url)
    committed_table(catalog, topic_name, ends)
    assert call(f"{url}/v1/namespaces/kafkalite", "HEAD")[:2] == (204, None)
    assert call(f"{url}/v1/namespaces/kafkalite")[1]["namespace"] == ["kafkalite"]
    assert "kafkalite.no-such-table" in error(
        call(f"{url}/v1/namespaces/kafkalite/tables/no-such-table"), 404, "NoSuchTableException")
    assert call(f"{url}/v1/namespaces/kafkalite/tables/no-such-table", "HEAD")[:2] == (404, None)
    with pytest.raises(NoSuchTableError):
        catalog.load_table("kafkalite.no-such-table")
    with pytest.raises(NoSuchNamespaceError):
        catalog.list_tables("no-such-ns")
    assert not catalog.table_exists("kafkalite.no-such-table")
    error(call(f"{url}/v1/namespaces/kafkalite/views"), 406, "UnsupportedOperationException")
    error(call(f"{url}/v1/namespaces/kafkalite/tables/{topic_name}", "PUT", {}), 405,
          "MethodNotAllowedException")
    error(call(f"{url}/v2/namespaces"), 404, "NotFoundException")


def test_writes_are_refused_and_the_table_stays(server, topic_name):
    url = server.info["iceberg_rest"]
    ends = make_iceberg_topic(server.kafka_bootstrap, topic_name, 6)
    catalog = load_catalog("kafkalite", type="rest", uri=url)
    before = committed_table(catalog, topic_name, ends).metadata_location
    table = f"{url}/v1/namespaces/kafkalite/tables/{topic_name}"
    writes = [("POST", f"{url}/v1/namespaces", {"namespace": ["other"]}),
              ("DELETE", f"{url}/v1/namespaces/kafkalite", None),
              ("POST", f"{url}/v1/namespaces/kafkalite/properties", {"updates": {"a": "b"}}),
              ("POST", f"{url}/v1/namespaces/kafkalite/tables", {"name": "t", "schema": {}}),
              ("POST", f"{url}/v1/namespaces/kafkalite/register",
               {"name": "t", "metadata-location": "file:///tmp/x"}),
              ("POST", table, {"requirements": [], "updates": []}),
              ("DELETE", table + "?purgeRequested=true", None),
              ("POST", f"{url}/v1/tables/rename",
               {"source": {"namespace": ["kafkalite"], "name": topic_name},
                "destination": {"namespace": ["kafkalite"], "name": "renamed"}}),
              ("POST", f"{url}/v1/transactions/commit", {"table-changes": []})]
    for method, path, body in writes:
        assert "written by the partition leaders" in error(call(path, method, body), 403,
                                                           "ForbiddenException"), path
    # the config does not offer them: pyiceberg refuses before it asks
    assert not [e for e in call(f"{url}/v1/config")[1]["endpoints"]
                if e.split()[0] not in ("GET", "HEAD")]
    with pytest.raises(NotImplementedError):
        catalog.drop_table(("kafkalite", topic_name))
    assert catalog.load_table(("kafkalite", topic_name)).metadata_location == before
    assert ("other",) not in catalog.list_namespaces()
