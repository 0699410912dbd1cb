"""Distributed mode assigns tasks, not only connectors (KIP-415 with
ConnectorTaskId units, connect/distributed/): three ``kafkalite connect
distributed`` workers and a PostgreSQL source with ``tasks.max=3`` over
three tables (one table per task). Each worker runs one task; kill -9 of a
worker moves only its units (its task and, here, the connector itself),
the other two tasks keep running on their workers, and every source row
reaches its topic (``missing_rows`` compares the tables with the topics,
and is shown catching a row the source cannot see). A task restart asked
of a worker that does not run the task restarts it on its owner; a
connector reconfigured from 3 tasks to 2 ends with exactly 2 tasks
running."""
from __future__ import annotations

import json
import os
import signal
import time

import requests
from connect_helpers import read_to_end
from harness import create, wait_until
from test_connect_distributed import get, start_worker

ROWS = 50       # per table and insert wave


def pg_tables(postgres, n):
    import psycopg
    stamp = int(time.time() * 1000) % 10**9
    tables = [f"dt{stamp}_{i}" for i in range(n)]
    with psycopg.connect(postgres, autocommit=True) as c:
        for t in tables:
            c.execute(f"CREATE TABLE {t} (id BIGSERIAL PRIMARY KEY, v TEXT)")
    insert(postgres, tables)
    return tables


def insert(postgres, tables, rows=ROWS):
    import psycopg
    with psycopg.connect(postgres, autocommit=True) as c:
        for t in tables:
            c.execute(f"INSERT INTO {t} (v) SELECT 'v' || g FROM generate_series(1, %s) g",
                      (rows,))


def table_ids(postgres, table) -> set:
    import psycopg
    with psycopg.connect(postgres, autocommit=True) as c:
        return {r[0] for r in c.execute(f"SELECT id FROM {table}")}


def topic_ids(server, topic) -> list:
    return [json.loads(m.value())["payload"]["id"] for m in read_to_end(server, topic)]


def missing_rows(postgres, server, topic_prefix, tables) -> dict:
    """The checker: {table: ids in the table that are not in its topic}."""
    out = {}
    for t in tables:
        gone = table_ids(postgres, t) - set(topic_ids(server, topic_prefix + t))
        if gone:
            out[t] = sorted(gone)
    return out


def post_source(url, name, postgres, tables, prefix, tasks_max, method="POST"):
    config = {"connector.class": "io.confluent.connect.jdbc.JdbcSourceConnector",
              "connection.url": "jdbc:" + postgres, "mode": "incrementing",
              "incrementing.column.name": "id", "table.whitelist": ",".join(tables),
              "topic.prefix": prefix, "poll.interval.ms": "200", "batch.max.rows": "50",
              "tasks.max": str(tasks_max),
              "value.converter": "org.apache.kafka.connect.json.JsonConverter"}
    if method == "POST":
        r = requests.post(url + "/connectors", timeout=60, json={"name": name, "config": config})
        assert r.status_code == 201, r.text
    else:
        r = requests.put(url + f"/connectors/{name}/config", timeout=60, json=config)
        assert r.status_code == 200, r.text


def running_tasks(url, name, n):
    """{task id: worker_id} once the connector and exactly ``n`` tasks are RUNNING."""
    st = get(url, f"/connectors/{name}/status")
    if not st or st["connector"]["state"] != "RUNNING" or len(st["tasks"]) != n or \
            any(t["state"] != "RUNNING" for t in st["tasks"]):
        return None
    return {t["id"]: t["worker_id"] for t in st["tasks"]}


def status_records(server, group, key) -> list:
    """The values written to the status topic under ``key``, in order (None:
    a tombstone)."""
    return [None if m.value() is None else json.loads(m.value())
            for m in read_to_end(server, f"{group}-status") if m.key() == key.encode()]


def start_cluster(server, tmp_path, workers, tag):
    group = f"{tag}-{os.getpid()}-{int(time.time())}"
    workers += [start_worker(server, tmp_path, i, group) for i in range(3)]
    urls = [u for _, u in workers]
    wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
               message="3 REST APIs")
    return group, urls


def three_tasks(server, tmp_path, topic_name, postgres, workers, tag):
    """Three tables, a topic each, three workers and the source ``pg`` with
    tasks.max=3: (tables, topic prefix, group, REST urls, {task: worker_id})
    once each worker runs one task."""
    tables = pg_tables(postgres, 3)
    prefix = f"{topic_name[:30]}-"
    for t in tables:
        create(server, prefix + t)
    group, urls = start_cluster(server, tmp_path, workers, tag)
    post_source(urls[0], "pg", postgres, tables, prefix, 3)
    placed = wait_until(lambda: (p := running_tasks(urls[1], "pg", 3)) and
                        len(set(p.values())) == 3 and p, timeout=60, message="3 tasks on 3 workers")
    return tables, prefix, group, urls, placed


def test_three_tasks_on_three_workers_and_kill_9_moves_only_the_dead_workers_task(
        server, tmp_path, topic_name, postgres, workers):
    tables, prefix, group, urls, placed = three_tasks(server, tmp_path, topic_name, postgres,
                                                      workers, "dt")
    tasks = get(urls[2], "/connectors/pg/tasks")
    assert sorted(t["config"]["tables"] for t in tasks) == sorted(tables)
    wait_until(lambda: not missing_rows(postgres, server, prefix, tables), timeout=60,
               message="the first rows")

    # the victim: the worker that also runs the connector (its task configs are then
    # computed again by the connector's next owner: the same, so no task restarts)
    conn_owner = get(urls[0], "/connectors/pg/status")["connector"]["worker_id"]
    victim_task = next(i for i, w in placed.items() if w == conn_owner)
    survivors = {i: w for i, w in placed.items() if i != victim_task}
    victim = next(p for p, u in workers if u == "http://" + conn_owner)
    alive = [u for u in urls if u != "http://" + conn_owner]
    before = {i: status_records(server, group, f"status-task-pg-{i}") for i in survivors}

    insert(postgres, tables)
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    killed = time.monotonic()
    insert(postgres, tables)

    # the survivors' output goes on through the failover
    surviving_tables = [tasks[i]["config"]["tables"] for i in survivors]
    wait_until(lambda: not missing_rows(postgres, server, prefix, surviving_tables), timeout=60,
               message="the surviving tasks' rows")
    survivors_done = time.monotonic() - killed

    def moved():
        p = running_tasks(alive[0], "pg", 3)
        return p and p[victim_task] != conn_owner and p
    after = wait_until(moved, timeout=90, message="the dead worker's task on a survivor")
    took = time.monotonic() - killed
    assert {i: after[i] for i in survivors} == survivors      # only the dead worker's task moved
    assert len(set(after.values())) == 2
    wait_until(lambda: get(alive[1], "/connectors/pg/status")["connector"]["worker_id"]
               not in (None, conn_owner), timeout=60, message="the connector on a survivor")

    # every row of every table arrives (at least once: the dead task's last rows may repeat)
    wait_until(lambda: not missing_rows(postgres, server, prefix, tables), timeout=90,
               message=lambda: f"all rows: missing "
                               f"{missing_rows(postgres, server, prefix, tables)}")
    for t in tables:
        assert set(topic_ids(server, prefix + t)) == table_ids(postgres, t)

    # the surviving tasks never restarted: one status record RUNNING, one worker, one generation
    for i, w in survivors.items():
        recs = status_records(server, group, f"status-task-pg-{i}")
        assert recs[:len(before[i])] == before[i]
        assert {(r["worker_id"], r["generation"]) for r in recs} == \
            {(w, before[i][-1]["generation"])}, recs
        assert [r["state"] for r in recs].count("RUNNING") == 1, recs

    # the checker catches a planted fault: a row below the stored incrementing offset
    # (the source never reads it), proven past by a later row that does arrive
    import psycopg
    with psycopg.connect(postgres, autocommit=True) as c:
        c.execute(f"INSERT INTO {tables[0]} (id, v) VALUES (0, 'planted')")
        later = c.execute(f"INSERT INTO {tables[0]} (v) VALUES ('later') RETURNING id"
                          ).fetchone()[0]
    wait_until(lambda: later in topic_ids(server, prefix + tables[0]), timeout=60,
               message="the later row")
    assert missing_rows(postgres, server, prefix, tables) == {tables[0]: [0]}
    print(f"the killed worker's task ran on another worker {took:.1f} s after the kill "
          f"(session.timeout.ms=3000, scheduled.rebalance.max.delay.ms=1000); the surviving "
          f"tasks' rows inserted after the kill were all in their topics {survivors_done:.1f} s "
          f"after it")


def test_task_restart_through_a_non_owner_and_reconfiguration_to_two_tasks(
        server, tmp_path, topic_name, postgres, workers):
    tables, prefix, group, urls, placed = three_tasks(server, tmp_path, topic_name, postgres,
                                                      workers, "dr")

    # restart task 1 through a worker that does not run it: its owner restarts it
    owner = placed[1]
    other = next(u for u in urls if u != "http://" + owner)
    key = "status-task-pg-1"
    wait_until(lambda: [r["state"] for r in status_records(server, group, key)].count(
        "RUNNING") == 1, timeout=60, message="task 1's RUNNING record")
    r = requests.post(other + "/connectors/pg/tasks/1/restart", timeout=60)
    assert r.status_code == 204, r.text
    recs = wait_until(lambda: (rs := status_records(server, group, key)) and
                      [x["state"] for x in rs].count("RUNNING") == 2 and rs, timeout=60,
                      message="task 1 RUNNING again")
    assert {x["worker_id"] for x in recs} == {owner}         # restarted where it runs
    assert running_tasks(urls[2], "pg", 3) == placed           # nothing moved
    r = requests.post(other + "/connectors/pg/tasks/7/restart", timeout=60)
    assert r.status_code == 404, r.text

    # tasks.max 3 -> 2: exactly two tasks run
    post_source(urls[2], "pg", postgres, tables, prefix, 2, method="PUT")
    wait_until(lambda: running_tasks(urls[0], "pg", 2) and
               len(get(urls[1], "/connectors/pg/tasks")) == 2, timeout=60,
               message="2 tasks RUNNING")
    assert sorted(t["config"]["tables"] for t in get(urls[1], "/connectors/pg/tasks")) == \
        sorted([f"{tables[0]},{tables[2]}", tables[1]])
    # the third task stopped where it ran (its status removed by that worker)
    wait_until(lambda: status_records(server, group, "status-task-pg-2")[-1:] == [None], timeout=60,
               message="task 2's status removed")
    # no third task left reading a table: rows inserted now arrive once each
    wait_until(lambda: not missing_rows(postgres, server, prefix, tables), timeout=60,
               message="the old rows")
    counts = {t: len(topic_ids(server, prefix + t)) for t in tables}
    insert(postgres, tables, 20)
    wait_until(lambda: not missing_rows(postgres, server, prefix, tables), timeout=60,
               message="the new rows")
    time.sleep(1.0)     # a leftover task would be sending its copies by now
    for t in tables:
        ids = topic_ids(server, prefix + t)
        assert len(ids) == counts[t] + 20 and len(set(ids[-20:])) == 20, (t, ids[-25:])

    # pause and resume reach every task on its own worker; stop removes the tasks
    # (KIP-875: no task configs) and resume brings them back
    def states(url):
        st = get(url, "/connectors/pg/status") or {"connector": {}, "tasks": []}
        return st["connector"].get("state"), [(t["state"], t["worker_id"]) for t in st["tasks"]]
    placed = running_tasks(urls[0], "pg", 2)
    assert requests.put(urls[1] + "/connectors/pg/pause", timeout=30).status_code == 202
    paused = ("PAUSED", [("PAUSED", placed[0]), ("PAUSED", placed[1])])
    wait_until(lambda: states(urls[2]) == paused, timeout=60,
               message=lambda: f"connector and tasks PAUSED: {states(urls[2])}")
    assert requests.put(urls[2] + "/connectors/pg/resume", timeout=30).status_code == 202
    wait_until(lambda: running_tasks(urls[0], "pg", 2) == placed, timeout=60,
               message="RUNNING again")
    assert requests.put(urls[0] + "/connectors/pg/stop", timeout=30).status_code == 204
    wait_until(lambda: states(urls[1]) == ("STOPPED", []) and
               get(urls[2], "/connectors/pg/tasks") == [], timeout=60,
               message="STOPPED without tasks")
    assert requests.put(urls[1] + "/connectors/pg/resume", timeout=30).status_code == 202
    wait_until(lambda: running_tasks(urls[2], "pg", 2), timeout=60,
               message="2 tasks RUNNING after the stop")
