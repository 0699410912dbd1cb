"""The Parquet sink on a real server: a topic's records read back with
pyarrow, the same rows; files named by their offsets, so that a restart
with the group's offsets gone writes nothing twice (exactly once)."""
from __future__ import annotations

import datetime as dt
import json
import os
import time

import pyarrow.dataset as ds
from harness import create, wait_until

from kafkalite.client import Producer

PARQUET = "kafkalite.connect.ParquetSinkConnector"


def rows_in(directory, topic):
    path = os.path.join(directory, topic)
    if not os.path.isdir(path):
        return []
    t = ds.dataset(path, format="parquet", partitioning="hive").to_table()
    return sorted(t.to_pylist(), key=lambda r: (r["partition"], r["__kafka_offset"]))


def test_parquet_sink_exactly_once_across_a_restart(connect, server, topic_name, tmp_path):
    create(server, topic_name, 2)
    schema = {"type": "struct", "optional": False, "fields": [
        {"field": "id", "type": "int64", "optional": False},
        {"field": "name", "type": "string", "optional": True},
        {"field": "at", "type": "int64", "optional": True,
         "name": "org.apache.kafka.connect.data.Timestamp", "version": 1}]}
    p = Producer(server.config())
    for i in range(300):
        p.produce(topic_name, partition=i % 2, value=json.dumps({"schema": schema, "payload": {
            "id": i, "name": f"n{i}", "at": 1_700_000_000_000 + i}}).encode())
    p.flush(30)
    out = tmp_path / "lake"
    cfg = {"connector.class": PARQUET, "topics": topic_name, "directory": str(out),
           "flush.size": "64"}
    connect.create("pq", **cfg)
    wait_until(lambda: len(rows_in(out, topic_name)) == 300, timeout=60,
               message="300 rows in Parquet")
    rows = rows_in(out, topic_name)
    assert sorted(r["id"] for r in rows) == list(range(300))
    r7 = next(r for r in rows if r["id"] == 7)
    assert r7["name"] == "n7" and r7["partition"] == 1 and r7["__kafka_offset"] == 3
    assert r7["at"] == dt.datetime.fromtimestamp(1_700_000_000.007, dt.timezone.utc)
    names = sorted(os.listdir(out / topic_name / "partition=0"))
    assert names[0] == f"{topic_name}+0+{0:020d}+{63:020d}.parquet"
    # stop, forget the group's offsets, start again: the files say where to go on
    wait_until(lambda: connect.http("GET", "/connectors/pq/offsets").json()["offsets"], timeout=60,
               message="committed offsets")
    connect.http("PUT", "/connectors/pq/stop")
    assert connect.http("DELETE", "/connectors/pq/offsets").status_code == 200
    assert connect.http("GET", "/connectors/pq/offsets").json() == {"offsets": []}
    for i in range(300, 320):
        p.produce(topic_name, partition=i % 2, value=json.dumps({"schema": schema, "payload": {
            "id": i, "name": f"n{i}", "at": None}}).encode())
    p.flush(30)
    p.close()
    connect.http("PUT", "/connectors/pq/resume")
    wait_until(lambda: len(rows_in(out, topic_name)) >= 320, timeout=60, message="320 rows")
    wait_until(lambda: sorted(o["offset"]["kafka_offset"] for o in connect.http(
        "GET", "/connectors/pq/offsets").json()["offsets"]) == [160, 160], timeout=60,
               message="commits")
    assert sorted(r["id"] for r in rows_in(out, topic_name)) == list(range(320))


def test_sink_offsets_altered_through_the_rest_api_skip_records(connect, server, topic_name,
                                                                 tmp_path):
    """A sink created STOPPED (KIP-980's initial_state); PATCH /offsets sets
    its group's offsets (KIP-875):
    records before the new offset are not written; a paused sink writes
    nothing until resumed."""
    create(server, topic_name)
    p = Producer(server.config())
    for i in range(10):
        p.produce(topic_name, value=json.dumps({"i": i}).encode())
    p.flush(30)
    out = tmp_path / "lake"
    r = connect.http("POST", "/connectors", json={"name": "pq2", "initial_state": "STOPPED",
                                                  "config": {
        "connector.class": PARQUET, "topics": topic_name, "directory": str(out),
        "value.converter.schemas.enable": "false"}})
    assert r.status_code == 201 and connect.state("pq2")["connector"]["state"] == "STOPPED"
    r = connect.http("PATCH", "/connectors/pq2/offsets", json={"offsets": [
        {"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
         "offset": {"kafka_offset": 4}}]})
    assert r.status_code == 200, r.text
    assert connect.http("GET", "/connectors/pq2/offsets").json()["offsets"] == [
        {"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
         "offset": {"kafka_offset": 4}}]
    r = connect.http("PATCH", "/connectors/pq2/offsets", json={"offsets": [
        {"partition": {"kafka_topic": topic_name}, "offset": {"kafka_offset": 1}}]})
    assert r.status_code == 400 and "kafka_partition" in r.json()["message"]
    connect.http("PUT", "/connectors/pq2/pause")      # from STOPPED: started, tasks paused
    wait_until(lambda: [t["state"] for t in connect.state("pq2")["tasks"]] == ["PAUSED"],
               timeout=60, message="PAUSED task")
    time.sleep(1.5)     # paused: nothing is written, however long (a flush would by now)
    assert rows_in(out, topic_name) == []
    connect.http("PUT", "/connectors/pq2/resume")
    wait_until(lambda: len(rows_in(out, topic_name)) == 6, timeout=60, message="6 rows")
    assert [r["i"] for r in rows_in(out, topic_name)] == list(range(4, 10))
    p.close()


def test_schemaless_values_keep_every_key_not_only_the_first_records():
    """The Parquet and Iceberg sinks' table of schemaless values (dicts): a
    key the first value lacks is a column too (pyarrow's from_pylist, used
    before, took the first value's keys and dropped the rest unseen), keys
    in the order they first appear, nested keys as well."""
    from kafkalite.connect.api import SinkRecord
    from kafkalite.connect.connectors.parquet import arrow_table
    values = [{"id": 1, "meta": {"a": 1}}, {"id": 2, "name": "x", "meta": {"b": "y"}},
              {"name": "z"}]
    recs = [SinkRecord("t", 0, None, None, None, v, 1_700_000_000_000 + i, kafka_offset=i)
            for i, v in enumerate(values)]
    table = arrow_table(recs, "t-0", "the Parquet sink")
    assert table.column_names == ["id", "meta", "name", "__kafka_offset", "__kafka_timestamp"]
    assert table.column("name").to_pylist() == [None, "x", "z"]
    assert table.column("meta").to_pylist() == [{"a": 1, "b": None}, {"a": None, "b": "y"}, None]
