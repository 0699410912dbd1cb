"""The config offset in the Connect group's assignment (connect/distributed/, as
Kafka's configOffset): a worker whose view of the config topic lags starts
nothing of an assignment before it has read the topic up to the offset
the leader had read; one that cannot within ``worker.sync.timeout.ms``
leaves the group and rejoins later, and never runs a task from the task
configs its stale view still has.

Two ``kafkalite connect distributed`` workers on a real server: the
leader W0 (started first) and W1, whose tail thread the fault hook
``KAFKALITE_CONNECT_FAULT=tail-paused-by:<file>`` holds while the file
exists. The source ``s`` (connector on W0, its task on W1) writes to topic
T1. With W1's view held: ``s`` is stopped, its offsets reset, its config
changed to write to T2, and resumed. The task, dealt out again, must write
to T2 only: W1's stale view still says T1 (the records would arrive there
again, from the reset offset).
"""
from __future__ import annotations

import time

from connect_cluster import (call, free_ports, get, group_name, running, start_worker,
                             stopped)
from connect_helpers import read_to_end
from harness import create, wait_until

SHARDED = "connect_plugins:ShardedSourceConnector"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


def values(server, topic):
    return [m.value().decode() for m in read_to_end(server, topic)]


def test_a_lagging_worker_never_starts_a_task_from_stale_configs(server, tmp_path, topic_name,
                                                                 workers):
    t1, t2 = f"{topic_name}-1", f"{topic_name}-2"
    create(server, t1)
    create(server, t2)
    group = group_name("co")
    ports = free_ports(2)
    pause = tmp_path / "pause-w1"
    workers.append(start_worker(server, tmp_path, 0, group, ports[0]))
    w0 = workers[0][1]
    wait_until(lambda: get(w0, "/connectors") == [], timeout=60, message="W0's REST API")
    # a connector created through W0 alone: it joined first and leads (while it stays)
    r = call("POST", w0, "/connectors", json={"name": f"probe-{group}", "config": {
        "connector.class": SINK, "file": str(tmp_path / "probe.txt"), "topics": t2}})
    assert r.status_code == 201, r.text
    assert call("DELETE", w0, f"/connectors/probe-{group}").status_code == 204
    workers.append(start_worker(server, tmp_path, 1, group, ports[1],
                                fault=f"tail-paused-by:{pause}",
                                # gives up reading to the config offset after 1 s (Kafka's
                                # default: 3 s), then stays out of the group longer than the
                                # 1 s its units are held for it, so they go to W0 meanwhile
                                # (Kafka's default: 5 min)
                                **{"worker.sync.timeout.ms": 1000,
                                   "worker.unsync.backoff.ms": 3000}))
    w1 = workers[1][1]
    wait_until(lambda: get(w1, "/connectors") == [], timeout=60, message="W1's REST API")

    config = {"connector.class": SHARDED, "topic": t1, "records.per.shard": "3"}
    r = call("POST", w0, "/connectors", json={"name": "s", "config": config})
    assert r.status_code == 201, r.text
    st = wait_until(lambda: running(w0, "s", 1), timeout=60, message="s running")
    # the assignor deals the connector to the member with the smaller id (W0's URL sorts
    # first) and the task to the other
    assert st["connector"]["worker_id"] == w0[len("http://"):], st
    assert st["tasks"][0]["worker_id"] == w1[len("http://"):], st
    first = [f"s0-{n}" for n in range(3)]
    wait_until(lambda: values(server, t1) == first, timeout=60, message="s's records in T1")
    wait_until(lambda: get(w0, "/connectors/s/offsets") == {
        "offsets": [{"partition": {"shard": "s0"}, "offset": {"n": 2}}]}, timeout=60,
               message="s's offset")

    # W1's view of the config topic stops here
    pause.write_text("")
    # its tail's consume in flight (at most 0.2 s) returns; nothing shows when it has
    time.sleep(1.0)
    assert call("PUT", w0, "/connectors/s/stop").status_code == 204
    wait_until(lambda: stopped(w0, "s"), timeout=60, message="s STOPPED without tasks")
    r = wait_until(lambda: (r := call("DELETE", w0, "/connectors/s/offsets")).status_code == 200
                   and r, timeout=30, message="s's offsets reset")
    assert get(w0, "/connectors/s/offsets") == {"offsets": []}
    r = call("PUT", w0, "/connectors/s/config", json={**config, "topic": t2})
    assert r.status_code == 200, r.text
    assert call("PUT", w0, "/connectors/s/resume").status_code == 202

    # the task runs again, from the new config (wherever it was dealt), while W1 lags
    wait_until(lambda: values(server, t2) == first, timeout=60,
               message=lambda: f"s's records in T2 (T1: {values(server, t1)})")
    assert get(w1, "/connectors/s/config")["topic"] == t1        # W1's view: still stale
    assert values(server, t1) == first
    log1 = (tmp_path / "worker1.log").read_text(errors="replace")
    assert "not to its assignment's config offset" in log1

    # W1 catches up and rejoins; still nothing more in T1, nothing twice in T2
    pause.unlink()
    wait_until(lambda: (get(w1, "/connectors/s/config") or {}).get("topic") == t2, timeout=60,
               message="W1's view caught up")
    wait_until(lambda: running(w1, "s", 1), timeout=60, message="s running after W1 rejoined")
    wait_until(lambda: (st := running(w0, "s", 1)) and
               w1[len("http://"):] in {st["connector"]["worker_id"], st["tasks"][0]["worker_id"]},
               timeout=60, message="W1 running a unit of s again")
    time.sleep(1.0)     # a task started from stale configs would have written to T1 by now
    assert values(server, t1) == first
    assert values(server, t2) == first


def test_the_leader_reads_the_config_topic_to_its_end_before_a_write(server, tmp_path,
                                                                     topic_name, workers):
    """A leader whose view lags does not write from it: a create answers
    409 (Kafka's rebalance conflict: try again) once it could not read the
    config topic to its end within worker.sync.timeout.ms, and nothing
    lands; caught up, the same create answers 201."""
    from confluent_kafka import Producer
    pause = tmp_path / "pause-w0"
    group = group_name("cw")
    workers.append(start_worker(server, tmp_path, 0, group, free_ports(1)[0],
                                fault=f"tail-paused-by:{pause}",
                                **{"worker.sync.timeout.ms": 1000}))
    w0 = workers[0][1]
    wait_until(lambda: get(w0, "/connectors") == [], timeout=60, message="W0's REST API")
    sink = {"connector.class": SINK, "file": str(tmp_path / "out.txt"), "topics": topic_name}
    r = call("POST", w0, "/connectors", json={"name": "a", "config": sink})
    assert r.status_code == 201, r.text
    wait_until(lambda: (get(w0, "/connectors/a/status") or {}).get("tasks"), timeout=60,
               message="a's task")
    pause.write_text("")
    # its tail's consume in flight (at most 0.2 s) returns; nothing shows when it has
    time.sleep(1.0)
    # a config record the leader's view has not read (as an earlier leader's write)
    p = Producer({"bootstrap.servers": server.kafka_bootstrap})
    p.produce(f"{group}-configs", key=b"target-state-a", value=b'{"state": "PAUSED"}')
    assert p.flush(30) == 0
    r = call("POST", w0, "/connectors", json={"name": "b", "config": sink})
    assert r.status_code == 409, r.text
    assert "could not read the config topic to its end within 1000 ms" in r.json()["message"]
    assert get(w0, "/connectors") == ["a"]
    pause.unlink()
    r = call("POST", w0, "/connectors", json={"name": "b", "config": sink})
    assert r.status_code == 201, r.text
    wait_until(lambda: (get(w0, "/connectors/a/status") or {}).get("connector", {}).get(
        "state") == "PAUSED", timeout=60,
               message="a PAUSED, as the record the leader had not read says")
    assert get(w0, "/connectors") == ["a", "b"]
