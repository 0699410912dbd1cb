"""Distributed mode: three worker processes (``kafkalite connect
distributed``) in one Connect group on a real server. Connectors created
through any worker's REST API are dealt out over the workers; every REST
API shows every connector; a pause sent to a non-owner pauses it; after
kill -9 of a worker its connectors run on the others within the session
timeout plus ``scheduled.rebalance.max.delay.ms``, and their sources
resume at the offsets in the offsets topic: every line arrives, and none
twice (their offsets were stored before the kill)."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import requests
from connect_cluster import get
from connect_helpers import FILES, read_to_end, stop_all  # noqa: F401 (imported from here too)
from harness import child_env, create, free_port, read_all, wait_until

SRC = "org.apache.kafka.connect.file.FileStreamSourceConnector"


def start_worker(server, tmp_path, i, group, **extra):
    """A ``kafkalite connect distributed`` worker of ``group``; ``extra``:
    more worker properties."""
    port = free_port()
    props = tmp_path / f"worker{i}.properties"
    props.write_text(
        f"bootstrap.servers={server.bootstrap}\ngroup.id={group}\n"
        f"config.storage.topic={group}-configs\nstatus.storage.topic={group}-status\n"
        f"offset.storage.topic={group}-offsets\noffset.storage.partitions=3\n"
        f"offset.flush.interval.ms=300\nsession.timeout.ms=3000\nheartbeat.interval.ms=300\n"
        f"consumer.session.timeout.ms=3000\nconsumer.heartbeat.interval.ms=300\n"
        f"scheduled.rebalance.max.delay.ms=1000\n"
        f"value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"listeners=http://127.0.0.1:{port}\n" +
        "".join(f"{k}={v}\n" for k, v in {**FILES, **extra}.items()))
    log = open(tmp_path / f"worker{i}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "connect", "distributed",
                             str(props)], env=child_env(), stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def post_pg_source(url, postgres, table, topic_name):
    """The tests' PostgreSQL source: an incrementing JDBC source on ``table``
    (JSON values), created through ``url``'s REST API."""
    r = requests.post(url + "/connectors", timeout=60, json={"name": "pg", "config": {
        "connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
        "connection.url": "jdbc:" + postgres, "mode": "incrementing",
        "incrementing.column.name": "id", "table.whitelist": table,
        "topic.prefix": f"{topic_name[:40]}-", "poll.interval.ms": "200",
        "batch.max.rows": "50",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter"}})
    assert r.status_code == 201, r.text

def sink_victim(url, sink, source):
    """The worker to kill: one running a task of ``sink`` and none of
    ``source``'s (a killed at-least-once source repeats the records it sent
    after its last offset commit: an exactly-once sink then has those rows
    twice, as the topic does)."""
    def pick():
        sts = [get(url, f"/connectors/{n}/status") for n in (sink, source)]
        if not all(st and st["tasks"] and all(t["state"] == "RUNNING" for t in st["tasks"])
                   for st in sts):
            return None
        busy = {t["worker_id"] for t in sts[1]["tasks"]}
        return next((t["worker_id"] for t in sts[0]["tasks"] if t["worker_id"] not in busy),
                    None)
    return wait_until(pick, timeout=60, message=f"a worker running {sink} and not {source}")


def test_three_workers_share_connectors_and_take_over_a_killed_one(server, tmp_path, topic_name):
    group = f"cc-{os.getpid()}-{int(time.time())}"
    workers = [start_worker(server, tmp_path, i, group) for i in range(3)]
    urls = [u for _, u in workers]
    try:
        wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
                   message="3 REST APIs")
        files = [tmp_path / f"in{i}.txt" for i in range(3)]
        for i, f in enumerate(files):
            f.write_text("".join(f"f{i}-{n}\n" for n in range(20)))
            create(server, f"{topic_name}-{i}")
            r = requests.post(urls[i % 3] + "/connectors", timeout=60, json={
                "name": f"f{i}", "config": {"connector.class": SRC, "file": str(f),
                                            "topic": f"{topic_name}-{i}"}})
            assert r.status_code == 201, r.text

        def running_on():
            out = {}
            for i in range(3):
                st = get(urls[2], f"/connectors/f{i}/status")
                if not st or st["connector"]["state"] != "RUNNING" or not st["tasks"] or \
                        st["tasks"][0]["state"] != "RUNNING":
                    return None
                out[f"f{i}"] = st["connector"]["worker_id"]
            return out
        owners = wait_until(running_on, timeout=60, message="3 connectors RUNNING")
        # connectors and tasks are the units (3 + 3): two on each worker, and so
        # the connectors are not all on one
        tasks_on = {f"f{i}": get(urls[2], f"/connectors/f{i}/status")["tasks"][0]["worker_id"]
                    for i in range(3)}
        units = list(owners.values()) + list(tasks_on.values())
        assert sorted(units.count(w) for w in set(units)) == [2, 2, 2], (owners, tasks_on)
        assert get(urls[0], "/connectors") == get(urls[1], "/connectors") == ["f0", "f1", "f2"]
        assert get(urls[1], "/connectors/f2/config")["file"] == str(files[2])
        for i in range(3):
            got = read_all(server, f"{topic_name}-{i}", 1, 20, timeout=30)
            assert [m.value() for m in got] == [b"f%d-%d" % (i, n) for n in range(20)]

        # a pause sent to a worker that does not own f0 reaches its owner
        victim_url = "http://" + owners["f0"]
        other = next(u for u in urls if u != victim_url)
        assert requests.put(other + "/connectors/f0/pause", timeout=30).status_code == 202
        wait_until(lambda: (get(other, "/connectors/f0/status") or {}).get("connector", {}).get(
            "state") == "PAUSED", timeout=60, message="f0 PAUSED")
        assert requests.put(other + "/connectors/f0/resume", timeout=30).status_code == 202
        wait_until(lambda: (get(other, "/connectors/f0/status") or {}).get("connector", {}).get(
            "state") == "RUNNING", timeout=60, message="f0 RUNNING again")
        # offsets of f0 asked of a non-owner: read there, from the offsets topic
        wait_until(lambda: get(other, "/connectors/f0/offsets") == {"offsets": [
            {"partition": {"filename": str(files[0])},
             "offset": {"position": files[0].stat().st_size}}]}, timeout=60, message="f0's offsets")

        # a restart asked of a non-owner is the owner's (KIP-745 body)
        r = requests.post(other + "/connectors/f0/restart?includeTasks=true", timeout=60)
        assert r.status_code == 202 and r.json()["tasks"][0]["state"] == "RESTARTING"
        assert get(other, "/connectors/f0/tasks")[0]["config"]["file"] == str(files[0])
        wait_until(lambda: (get(other, "/connectors/f0/status") or {}).get("tasks", [{}])[0].get(
            "state") == "RUNNING", timeout=60, message="f0's task RUNNING after the restart")

        victim = next(p for p, u in workers if u == victim_url)
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        for i, f in enumerate(files):
            with open(f, "a") as out:
                out.writelines(f"f{i}-{n}\n" for n in range(20, 30))
        survivors = [u for u in urls if u != victim_url]

        def moved():
            st = get(survivors[0], "/connectors/f0/status")
            return st and st["connector"]["state"] == "RUNNING" and \
                st["connector"]["worker_id"] != owners["f0"] and st["tasks"] and \
                st["tasks"][0]["state"] == "RUNNING" and st["tasks"][0]["worker_id"]
        started = time.monotonic()
        wait_until(moved, timeout=60, message="f0 on a surviving worker")
        took = time.monotonic() - started
        for i in range(3):
            want = [b"f%d-%d" % (i, n) for n in range(30)]
            # a task sends its file in order: a line sent again (a restart before the
            # offset stored) would come before the last new line
            got = wait_until(lambda: (m := read_to_end(server, f"{topic_name}-{i}")) and
                             {x.value() for x in m} >= set(want) and m, timeout=60,
                             message=f"topic {i} complete")
            # every offset was stored before the kill (checked above for f0; f1 and f2
            # kept running through the rebalance): nothing lost and nothing repeated
            assert [m.value() for m in got] == want
        print(f"f0 moved {took:.1f} s after the kill (session.timeout.ms=3000)")
    finally:
        stop_all(workers)


def test_postgres_source_and_parquet_sink_survive_kill_9_of_a_worker(server, tmp_path,
                                                                     topic_name, postgres):
    """The issue's failover test with the Parquet sink standing in for
    Iceberg: a PostgreSQL source and an exactly-once Parquet sink on three
    workers; the sink's worker is killed while rows keep coming: the files
    end with every source row exactly once, and the topic has every row."""
    import psycopg
    import pyarrow.dataset as ds
    table = f"fo_{int(time.time() * 1000) % 10**9}"
    with psycopg.connect(postgres, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, v TEXT)")
        c.execute(f"INSERT INTO {table} (v) SELECT 'v' || g FROM generate_series(1, 300) g")
    group = f"fo-{os.getpid()}-{int(time.time())}"
    topic = f"{topic_name[:40]}-{table}"
    create(server, topic, 2)
    workers = [start_worker(server, tmp_path, i, group) for i in range(3)]
    urls = [u for _, u in workers]
    lake = tmp_path / "lake"
    sink = f"lake-{table}"      # its consumer group connect-<sink> is this test's alone

    def rows_in_lake():
        if not (lake / topic).is_dir():
            return []
        dataset = ds.dataset(str(lake / topic), format="parquet", partitioning="hive")
        if "id" not in dataset.schema.names:
            return []           # the sink made the directory; no file is in it yet
        return dataset.to_table(columns=["id"]).column("id").to_pylist()
    try:
        wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
                   message="3 REST APIs")
        json_conv = {"value.converter": "org.apache.kafka.connect.json.JsonConverter"}
        post_pg_source(urls[0], postgres, table, topic_name)
        r = requests.post(urls[1] + "/connectors", timeout=60, json={"name": sink, "config": {
            "connector.class": "kafkalite.connect.ParquetSinkConnector", "topics": topic,
            "directory": str(lake), "flush.size": "40", **json_conv}})
        assert r.status_code == 201, r.text
        wait_until(lambda: len(rows_in_lake()) >= 300, timeout=60, message="300 rows in the lake")
        owner = sink_victim(urls[2], sink, "pg")
        victim = next(p for p, u in workers if u == "http://" + owner)
        with psycopg.connect(postgres, autocommit=True) as c:
            c.execute(f"INSERT INTO {table} (v) SELECT 'w' || g FROM generate_series(1, 100) g")
            victim.send_signal(signal.SIGKILL)
            victim.wait(30)
            c.execute(f"INSERT INTO {table} (v) SELECT 'x' || g FROM generate_series(1, 100) g")
        survivor = next(u for u in urls if u != "http://" + owner)
        wait_until(lambda: (st := get(survivor, f"/connectors/{sink}/status")) and
                   st["tasks"] and st["tasks"][0]["worker_id"] not in (owner, None) and
                   st["tasks"][0]["state"] == "RUNNING", timeout=60,
                   message="the sink on a survivor")
        wait_until(lambda: len(set(rows_in_lake())) >= 500, timeout=90, message="500 rows")
        # stopped before the files are read: no file can come after the check
        stop_all(workers)
        ids = rows_in_lake()
        assert sorted(ids) == list(range(1, 501))        # every row, exactly once
        in_topic = {json.loads(m.value())["payload"]["id"]
                    for m in read_all(server, topic, 2, 500, timeout=30)}
        assert in_topic == set(range(1, 501))            # the source skipped none
    finally:
        stop_all(workers)
