"""Incremental cooperative rebalancing of distributed mode (KIP-415,
distributed/assignor.py's IncrementalCooperativeAssignor): the assignor's
rounds on their own, then worker processes on a real server (connectors and their tasks are
the units): a fourth worker joining three restarts only the tasks that
move to it; kill -9 of a worker moves its connectors and tasks after
``scheduled.rebalance.max.delay.ms`` while the others' keep running, and
the counts end balanced.

Task starts are counted by the connector below (each task start appends a
line to a file), run by the worker processes from this module."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import requests
from connect_cluster import get
from harness import child_env, free_port, wait_until

from kafkalite.connect import SourceConnector, SourceRecord, SourceTask
from kafkalite.connect.data import Schema
from kafkalite.connect.distributed import (IncrementalCooperativeAssignor, connector_unit,
                                           task_unit, unit_connector)

HERE = os.path.dirname(os.path.abspath(__file__))


class CountingSourceConnector(SourceConnector):
    """One task that appends ``<connector> <pid>`` to ``starts.file`` when it
    starts, then sends a counter to ``topic`` every 50 ms."""

    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return CountingSourceTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]


class CountingSourceTask(SourceTask):
    def start(self, props):
        import threading
        self.topic, self.name = props["topic"], props["name"]
        with open(props["starts.file"], "a") as f:
            f.write(f"{self.name} {os.getpid()}\n")
        off = self.context.offset_storage_reader().offset({"c": self.name})
        self.n = off["n"] + 1 if off else 0
        self.stopped = threading.Event()

    def stop(self):
        self.stopped.set()

    def poll(self):
        if self.stopped.wait(0.05):
            return None
        self.n += 1
        return [SourceRecord(self.topic, None, None, None, Schema.STRING, str(self.n),
                             source_partition={"c": self.name}, source_offset={"n": self.n})]


# ---- the assignor's rounds -------------------------------------------------------------------

def members(owned: dict) -> list:
    return [(m, {"url": f"http://{m}", "owned": units}) for m, units in owned.items()]


def runs(a: dict) -> dict:
    return {m: x["units"] for m, x in a.items()}


def test_assignor_newcomer_gets_its_share_in_two_rounds_and_nothing_else_moves():
    asg = IncrementalCooperativeAssignor(max_delay_ms=1000)
    units = [f"c{i}" for i in range(6)]
    first = asg.assign(members({"a": [], "b": [], "c": []}), units, now=0)
    assert sorted(len(x) for x in runs(first).values()) == [2, 2, 2]
    owned = runs(first)
    # a fourth member: one member revokes one unit; no one gets it in the same round
    second = asg.assign(members({**owned, "d": []}), units, now=1)
    revoked = [u for x in second.values() for u in x["revoked"]]
    assert len(revoked) == 1 and second["d"]["units"] == []
    assert all(not x["assigned"] for x in second.values())
    for m in "abc":
        assert set(second[m]["units"]) <= set(owned[m])       # nothing added or moved
        assert set(owned[m]) - set(second[m]["units"]) <= set(revoked)
    # the revoking member rejoins without it: the freed unit goes to the newcomer
    third = asg.assign(members(runs(second)), units, now=2)
    assert third["d"]["units"] == third["d"]["assigned"] == revoked
    assert all(not x["revoked"] for x in third.values())
    assert sorted(len(x) for x in runs(third).values()) == [1, 1, 2, 2]
    assert {m: x for m, x in runs(third).items() if m != "d"} == \
        {m: x for m, x in runs(second).items() if m != "d"}


def test_assignor_holds_a_departed_members_units_for_the_delay():
    asg = IncrementalCooperativeAssignor(max_delay_ms=5000)
    units = ["c0", "c1", "c2", "c3"]
    owned = runs(asg.assign(members({"a": [], "b": []}), units, now=0))
    gone = owned.pop("b")
    held = asg.assign(members(owned), units, now=10)
    assert held["a"]["units"] == owned["a"] and held["a"]["delay"] == 5000
    # a member asking again within the delay: still held, with the time left
    again = asg.assign(members(owned), units, now=12)
    assert again["a"]["units"] == owned["a"] and again["a"]["delay"] == 3000
    after = asg.assign(members(owned), units, now=15)
    assert after["a"]["units"] == sorted(owned["a"] + gone) and after["a"]["delay"] == 0
    # the leader itself departed: the next leader remembers the round it was sent
    asg1 = IncrementalCooperativeAssignor(max_delay_ms=5000)
    first = asg1.assign(members({"a": [], "b": []}), units, now=0)
    successor = IncrementalCooperativeAssignor(max_delay_ms=5000)
    successor.remember(first["b"])
    left = successor.assign(members({"b": runs(first)["b"]}), units, now=1)
    assert left["b"]["units"] == runs(first)["b"] and left["b"]["delay"] == 5000
    # no delay configured: dealt out at once
    asg0 = IncrementalCooperativeAssignor(max_delay_ms=0)
    o = runs(asg0.assign(members({"a": [], "b": []}), units, now=0))
    o.pop("b")
    assert asg0.assign(members(o), units, now=1)["a"]["units"] == units


def test_assignor_revokes_deleted_and_doubly_claimed_units():
    asg = IncrementalCooperativeAssignor(max_delay_ms=0)
    a = asg.assign(members({"a": ["c0", "gone"], "b": ["c0", "c1"]}), ["c0", "c1", "c2"], now=0)
    assert a["a"]["revoked"] == ["gone"] and a["b"]["revoked"] == ["c0"]
    assert a["a"]["units"] == ["c0", "c2"] and a["b"]["units"] == ["c1"]
    assert a["a"]["owners"] == {"c0": "http://a", "c2": "http://a", "c1": "http://b"}


def test_assignor_spreads_a_connectors_tasks_over_the_members():
    asg = IncrementalCooperativeAssignor(max_delay_ms=0, group_of=unit_connector)
    units = [connector_unit("pg")] + [task_unit("pg", i) for i in range(3)]
    first = asg.assign(members({"a": [], "b": [], "c": []}), units, now=0)
    where = {u: m for m, x in first.items() for u in x["units"]}
    assert len({where[task_unit("pg", i)] for i in range(3)}) == 3     # one task each
    # equally loaded members: the next task goes to the one without a task of its connector
    units = [task_unit("pg", 0), task_unit("pg", 1), connector_unit("x"), connector_unit("y")]
    a = asg.assign(members({"a": [task_unit("pg", 0)], "b": [connector_unit("x")]}), units,
                   now=1)
    assert task_unit("pg", 1) in a["b"]["assigned"]
    assert a["a"]["assigned"] == [connector_unit("y")]


# ---- worker processes ------------------------------------------------------------------------

def test_a_config_write_before_the_internal_topics_are_ready_waits_for_them(server, topic_name):
    """The REST API serves before the herder has made its internal topics: a
    POST /connectors in that gap used to fail with a 500 (no producer yet)."""
    import threading

    from kafkalite.connect.distributed import InternalTopics
    t = InternalTopics(server.config(), f"{topic_name}-configs", f"{topic_name}-status",
                       lambda: None)
    errors = []

    def early():
        try:
            t.write(t.config_topic, "connector-x", {"properties": {"name": "x"}})
        except Exception as e:  # noqa: BLE001 -- the assertion shows it
            errors.append(e)
    w = threading.Thread(target=early)
    w.start()
    time.sleep(0.2)     # the write under way (waiting for the topics) before they start
    t.start()
    try:
        w.join(60)
        assert errors == []
        t.wait(lambda: t.configs.get("x") == {"name": "x"})
    finally:
        t.stop()


DELAY_MS = 2000


def start_worker(server, tmp_path, i, group):
    port = free_port()
    props = tmp_path / f"worker{i}.properties"
    props.write_text(
        f"bootstrap.servers={server.bootstrap}\ngroup.id={group}\n"
        f"config.storage.topic={group}-configs\nstatus.storage.topic={group}-status\n"
        f"offset.storage.topic={group}-offsets\noffset.storage.partitions=3\n"
        f"offset.flush.interval.ms=300\nsession.timeout.ms=3000\nheartbeat.interval.ms=300\n"
        f"scheduled.rebalance.max.delay.ms={DELAY_MS}\n"
        f"listeners=http://127.0.0.1:{port}\n")
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(HERE), env["PYTHONPATH"]])
    log = open(tmp_path / f"worker{i}.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "connect", "distributed",
                             str(props)], env=env, stdout=log, stderr=subprocess.STDOUT)
    return proc, f"http://127.0.0.1:{port}"


def starts(path) -> dict:
    out: dict = {}
    if path.exists():
        for line in path.read_text().splitlines():
            name, _ = line.split()
            out[name] = out.get(name, 0) + 1
    return out


def test_a_fourth_worker_and_a_kill_move_only_what_must_move(server, tmp_path, topic_name,
                                                             workers):
    group = f"coop-{os.getpid()}-{int(time.time())}"
    workers += [start_worker(server, tmp_path, i, group) for i in range(3)]
    urls = [u for _, u in workers]
    names = [f"n{i}" for i in range(6)]
    starts_file = tmp_path / "starts.txt"
    wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
               message="3 REST APIs")
    for i, name in enumerate(names):
        r = requests.post(urls[i % 3] + "/connectors", timeout=60, json={"name": name, "config": {
            "connector.class": "test_connect_cooperative:CountingSourceConnector",
            "topic": f"{topic_name}-c", "starts.file": str(starts_file)}})
        assert r.status_code == 201, r.text

    def placement(url):
        """{unit: worker}: each connector (its name) and its task (``<name>/0``)."""
        out = {}
        for name in names:
            st = get(url, f"/connectors/{name}/status")
            if not st or st["connector"]["state"] != "RUNNING" or not st["tasks"] or \
                    st["tasks"][0]["state"] != "RUNNING":
                return None
            out[name] = st["connector"]["worker_id"]
            out[f"{name}/0"] = st["tasks"][0]["worker_id"]
        return out

    def settled(url, n_workers):
        p = placement(url)
        if not p:
            return None
        counts = sorted([list(p.values()).count(w) for w in set(p.values())])
        return p if len(counts) == n_workers and counts[-1] - counts[0] <= 1 else None

    def restarted(moved_units):
        # a task starts again only where the task itself moved (a moved connector
        # computes the same task configs: its task runs on)
        want = {n: 1 for n in names}
        for u in moved_units:
            if u.endswith("/0"):
                want[u[:-2]] += 1
        return want
    before = wait_until(lambda: settled(urls[0], 3), timeout=60,
                        message="6 connectors, 6 tasks over 3 workers")
    wait_until(lambda: starts(starts_file) == {n: 1 for n in names}, timeout=60,
               message="one start each")

    # a fourth worker: only the units that move to it restart (3 of 12: its share)
    workers.append(start_worker(server, tmp_path, 3, group))
    urls.append(workers[3][1])
    new_id = urls[3].removeprefix("http://")
    after = wait_until(lambda: (p := settled(urls[0], 4)) and new_id in p.values() and p,
                       timeout=60, message="6 connectors, 6 tasks over 4 workers")
    moved = [u for u in after if after[u] != before[u]]
    assert moved == [u for u in after if after[u] == new_id] and len(moved) == 3, \
        (before, after)
    time.sleep(1.0)       # any late restart would show now
    assert starts(starts_file) == restarted(moved)

    # kill -9 of a worker: its units move after the delay; nothing else restarts
    victim_id = next(w for w in sorted(set(after.values())) if w != new_id)
    victim = next(p for p, u in workers if u == "http://" + victim_id)
    lost = [u for u in after if after[u] == victim_id]
    survivors = [u for u in urls if u != "http://" + victim_id]
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    killed = time.monotonic()
    final = wait_until(lambda: (p := settled(survivors[0], 3)) and victim_id not in p.values()
                       and p, timeout=60, message="the victim's units on the others")
    took = time.monotonic() - killed
    assert took >= DELAY_MS / 1000, took           # held for the delay first
    assert took < 3 + DELAY_MS / 1000 + 20, took   # session timeout + delay + slack
    assert sorted(list(final.values()).count(w) for w in set(final.values())) == [4, 4, 4]
    assert {u: w for u, w in final.items() if u not in lost} == \
        {u: w for u, w in after.items() if u not in lost}
    time.sleep(1.0)     # any late restart would show now
    assert starts(starts_file) == restarted(moved + lost)
    print(f"the killed worker's connectors and tasks ran again {took:.1f} s after the kill "
          f"(session.timeout.ms=3000, scheduled.rebalance.max.delay.ms={DELAY_MS})")


def test_a_worker_does_not_overwrite_a_newer_generations_status(server, tmp_path, topic_name,
                                                                workers):
    """Kafka's putSafe: once the status topic says another worker runs a
    task from a newer generation (as after a rebalance this worker has not
    seen yet), this worker's own status changes for that task are not
    written over it; its connector's status still is."""
    from kafkalite.client import Producer
    group = f"fence-{os.getpid()}-{int(time.time())}"
    workers.append(start_worker(server, tmp_path, 0, group))
    url = workers[0][1]
    wait_until(lambda: get(url, "/connectors") == [], timeout=60, message="the REST API")
    r = requests.post(url + "/connectors", timeout=60, json={"name": "cnt", "config": {
        "connector.class": "test_connect_cooperative:CountingSourceConnector",
        "topic": f"{topic_name}-c", "starts.file": str(tmp_path / "starts.txt")}})
    assert r.status_code == 201, r.text
    own = wait_until(lambda: (st := get(url, "/connectors/cnt/status")) and st["tasks"] and
                     st["tasks"][0]["state"] == "RUNNING" and st["tasks"][0]["worker_id"],
                     timeout=60, message="the task RUNNING")
    newer = {"state": "RUNNING", "trace": None, "worker_id": "127.0.0.1:9", "generation": 10**6}
    p = Producer(server.config())
    try:
        p.produce(f"{group}-status", key=b"status-task-cnt-0", value=json.dumps(newer).encode())
        assert p.flush(30) == 0
    finally:
        p.close()
    wait_until(lambda: get(url, "/connectors/cnt/status")["tasks"][0]["worker_id"] == "127.0.0.1:9",
               timeout=60, message="the newer status in the worker's view")
    assert requests.put(url + "/connectors/cnt/pause", timeout=30).status_code == 202
    wait_until(lambda: get(url, "/connectors/cnt/status")["connector"]["state"] == "PAUSED",
               timeout=60, message="the connector's own status PAUSED")
    time.sleep(1.0)     # the task's PAUSED would be published with the connector's
    task = get(url, "/connectors/cnt/status")["tasks"][0]
    assert (task["worker_id"], task["state"]) == ("127.0.0.1:9", "RUNNING"), (own, task)


def test_a_request_for_a_killed_workers_connector_answers_409_until_it_moves(
        server, tmp_path, topic_name, workers):
    """A restart asked of a survivor while the connector's owner is dead
    (the group has not moved its units yet) is Kafka's 409, which a client
    retries, not a 500; once the connector runs on the survivor it restarts."""
    group = f"gone-{os.getpid()}-{int(time.time())}"
    workers += [start_worker(server, tmp_path, i, group) for i in range(2)]
    urls = [u for _, u in workers]
    wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
               message="2 REST APIs")
    r = requests.post(urls[0] + "/connectors", timeout=60, json={"name": "cnt", "config": {
        "connector.class": "test_connect_cooperative:CountingSourceConnector",
        "topic": f"{topic_name}-c", "starts.file": str(tmp_path / "starts.txt")}})
    assert r.status_code == 201, r.text
    owner = wait_until(lambda: (st := get(urls[0], "/connectors/cnt/status")) and
                       st["connector"]["state"] == "RUNNING" and st["connector"]["worker_id"],
                       timeout=60, message="the connector RUNNING")
    victim = next(p for p, u in workers if u == "http://" + owner)
    survivor = next(u for u in urls if u != "http://" + owner)
    victim.send_signal(signal.SIGKILL)
    victim.wait(30)
    r = requests.post(survivor + "/connectors/cnt/restart", timeout=60)
    assert r.status_code == 409, (r.status_code, r.text)
    assert r.json()["error_code"] == 409 and "rebalance" in r.json()["message"], r.text
    wait_until(lambda: (st := get(survivor, "/connectors/cnt/status")) and
               st["connector"]["worker_id"] == survivor[len("http://"):] and
               st["connector"]["state"] == "RUNNING", timeout=60, message="the connector moved")
    assert requests.post(survivor + "/connectors/cnt/restart", timeout=60).status_code in (200, 204)
