"""The issue's failover test: three ``kafkalite connect distributed``
workers, a PostgreSQL query-based source (incrementing column) and the
Iceberg sink (two tasks committing to one table, its SQL catalog in the
same PostgreSQL) running; kill -9 of a worker running a sink task (and not
the source's, which would repeat rows: sink_victim) while
rows keep coming: the task moves to a survivor within the session timeout,
the table ends with every source row exactly once, and the topic has every
row (the source skipped none).

Size: ``ICEBERG_FAILOVER_ROWS`` rows per insert wave (default 200, three
waves); e.g. ICEBERG_FAILOVER_ROWS=20000 for a longer run."""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import time

import pytest
import requests
from connect_helpers import wait_for
from harness import create, read_all
from test_connect_distributed import get, post_pg_source, sink_victim, start_worker

from kafkalite.connect.connectors.iceberg import sql_catalog

pytest.importorskip("pyiceberg")


def test_postgres_source_and_iceberg_sink_survive_kill_9_of_a_worker(server, tmp_path,
                                                                     topic_name, postgres):
    import psycopg
    from pyiceberg.exceptions import NoSuchTableError
    wave = int(os.environ.get("ICEBERG_FAILOVER_ROWS", 200))
    table = f"ice_{int(time.time() * 1000) % 10**9}"
    with psycopg.connect(postgres, autocommit=True) as c:
        c.execute(f"CREATE TABLE {table} (id BIGSERIAL PRIMARY KEY, v TEXT)")
        c.execute(f"INSERT INTO {table} (v) SELECT 'v' || g FROM generate_series(1, %s) g",
                  (wave,))
    group = f"ci-{os.getpid()}-{int(time.time())}"
    topic = f"{topic_name[:40]}-{table}"
    create(server, topic, 2)
    workers = [start_worker(server, tmp_path, i, group) for i in range(3)]
    urls = [u for _, u in workers]
    uri = postgres.replace("postgresql://", "postgresql+psycopg://")
    catalog = sql_catalog("kafkalite", uri=uri, warehouse=f"file://{tmp_path}/warehouse")
    ident = f"lake.{table}"

    def ids_in_table():
        try:
            t = catalog.load_table(ident)
        except NoSuchTableError:
            return []
        return t.scan(selected_fields=("id",)).to_arrow().column("id").to_pylist()

    def sink_tasks(url):
        st = get(url, "/connectors/lake/status")
        if not st or len(st["tasks"]) != 2 or any(t["state"] != "RUNNING" for t in st["tasks"]):
            return None
        return {t["id"]: t["worker_id"] for t in st["tasks"]}
    try:
        wait_for(lambda: all(get(u, "/connectors") == [] for u in urls), what="3 REST APIs")
        json_conv = {"value.converter": "org.apache.kafka.connect.json.JsonConverter"}
        post_pg_source(urls[0], postgres, table, topic_name)
        r = requests.post(urls[1] + "/connectors", timeout=60, json={"name": "lake", "config": {
            "connector.class": "org.apache.iceberg.connect.IcebergSinkConnector",
            "topics": topic, "tasks.max": "2", "iceberg.tables": ident,
            "iceberg.catalog.uri": uri, "iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse",
            "flush.size": "60", **json_conv}})
        assert r.status_code == 201, r.text
        wait_for(lambda: len(ids_in_table()) >= wave, what=f"{wave} rows in the table")
        wait_for(lambda: sink_tasks(urls[2]), what="2 sink tasks RUNNING")
        victim_url = "http://" + sink_victim(urls[2], "lake", "pg")
        victim = next(p for p, u in workers if u == victim_url)
        with psycopg.connect(postgres, autocommit=True) as c:
            c.execute(f"INSERT INTO {table} (v) SELECT 'w' || g FROM generate_series(1, %s) g",
                      (wave,))
            victim.send_signal(signal.SIGKILL)
            victim.wait(30)
            killed = time.monotonic()
            c.execute(f"INSERT INTO {table} (v) SELECT 'x' || g FROM generate_series(1, %s) g",
                      (wave,))
        survivor = next(u for u in urls if u != victim_url)
        moved = wait_for(lambda: (t := sink_tasks(survivor)) and
                         victim_url[len("http://"):] not in t.values() and t, timeout=60,
                         what="the sink's tasks on the survivors")
        took = time.monotonic() - killed
        # Connect's session.timeout.ms=3000, then a rebalance; slack for a loaded machine
        assert took < 30, f"tasks moved {took:.1f} s after the kill"
        wait_for(lambda: len(set(ids_in_table())) >= 3 * wave, timeout=90,
                 what=f"{3 * wave} rows")
        time.sleep(1.5)     # a straggling commit would show as a duplicate
        ids = ids_in_table()
        dup = [i for i, n in collections.Counter(ids).items() if n > 1]
        # a row twice in the topic is the source's repeat, not the sink's: say which
        where: dict = collections.defaultdict(list)
        for m in read_all(server, topic, 2, 3 * wave, timeout=30):
            where[json.loads(m.value())["payload"]["id"]].append((m.partition(), m.offset()))
        twice = {i: w for i, w in where.items() if len(w) > 1}
        assert dup == [] and sorted(ids) == list(range(1, 3 * wave + 1)), \
            f"rows twice in the table: {dup[:5]}...; in the topic twice: {list(twice.items())[:5]}"
        assert set(where) == set(range(1, 3 * wave + 1))          # the source skipped none
        print(f"sink tasks moved {took:.1f} s after the kill: {moved}")
    finally:
        for p, _ in workers:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p, _ in workers:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
