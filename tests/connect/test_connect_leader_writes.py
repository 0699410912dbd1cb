"""Config writes go through the Connect group's leader (connect/distributed/, as
Kafka's DistributedHerder): ``kafkalite connect distributed`` workers on a
real server, driven over their REST APIs, the config topic read back with
Kafka's own client (confluent-kafka, read_committed).

- A create, config update, pause and delete sent to followers land once,
  are visible from every worker, and every config record was written by
  the leader (the ``kafkalite.connect.writer`` header; the leader's REST
  log shows the followers' forwarded calls).
- kill -9 of the leader: a create sent to a survivor answers 409 (Kafka's
  rebalance message) until the new leader is elected, then 201; never a
  500, and the connector lands once, written by the new leader.
- Exactly-once support: once another producer claimed the leader's
  transactional id (``connect-cluster-<group.id>``, as a new leader does),
  the deposed leader's write is fenced: 409, nothing lands, on any
  worker; it then rejoins, claims again, and the write goes through.
"""
from __future__ import annotations

import json
import os
import re
import signal
import time
import uuid

import requests
from harness import wait_until
from test_connect_distributed import get, start_worker, stop_all

from kafkalite.connect.errors import REBALANCE_CONFLICT

WRITER = "kafkalite.connect.writer"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


def config_records(server, topic):
    """The config topic as Kafka's client reads it (read_committed) up to its
    end now: [(key, value or None, writer header)], in order; [] before the
    topic exists."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition
    c = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": f"check-{uuid.uuid4()}",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    out = []
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while True:
            assert time.monotonic() < deadline, f"{topic} not read to its end: {out}"
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    return out
                if m.error().code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return []
                continue
            headers = dict(m.headers() or [])
            out.append((m.key().decode(), None if m.value() is None else json.loads(m.value()),
                        (headers.get(WRITER) or b"").decode()))
    finally:
        c.close()


def records_of(records, key):
    return [r for r in records if r[0] == key]


def sink_config(tmp_path, topic, **extra):
    return {"connector.class": SINK, "file": str(tmp_path / "out.txt"), "topics": topic, **extra}


def group_name(tag):
    return f"{tag}-{os.getpid()}-{int(time.time() * 1000) % 10**8}"


def forwarded_calls(tmp_path, i):
    """The forwarded calls worker ``i``'s REST API served (werkzeug's log)."""
    try:
        text = (tmp_path / f"worker{i}.log").read_text(errors="replace")
    except FileNotFoundError:
        return []
    return re.findall(r'"(\w+ \S+forward=false) HTTP', text)


def test_writes_sent_to_followers_are_written_once_by_the_leader(server, tmp_path, topic_name):
    group = group_name("lw")
    workers = [start_worker(server, tmp_path, i, group) for i in range(3)]
    urls = [u for _, u in workers]
    topic = f"{group}-configs"
    try:
        wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
                   message="3 REST APIs")
        # one create through each worker: whoever took the call, one worker wrote them all
        for i, u in enumerate(urls):
            r = requests.post(u + "/connectors", timeout=60, json={
                "name": f"c{i}", "config": sink_config(tmp_path, topic_name)})
            assert r.status_code == 201, r.text
            assert r.json()["name"] == f"c{i}"
        recs = config_records(server, topic)
        writers = {w for k, _, w in recs if k.startswith("connector-")}
        assert len(writers) == 1, recs
        leader = writers.pop()
        li = urls.index("http://" + leader)
        followers = [u for u in urls if u != urls[li]]
        # every config record, task configs included, is the leader's; the two creates sent
        # to followers reached it marked as forwarded, and no follower was forwarded to
        assert {w for _, _, w in recs} == {leader}, recs
        assert [c for c in forwarded_calls(tmp_path, li) if c.startswith("POST /connectors?")] \
            == ["POST /connectors?forward=false"] * 2
        assert all(not forwarded_calls(tmp_path, i) for i in range(3) if i != li)
        for i in range(3):
            assert len(records_of(recs, f"connector-c{i}")) == 1
        for u in urls:
            wait_until(lambda: get(u, "/connectors") == ["c0", "c1", "c2"], timeout=60,
                       message=f"{u} sees all")

        # a config update, a pause and a delete, each sent to a follower
        new = sink_config(tmp_path, topic_name, **{"tasks.max": "1", "batch.size": "7"})
        r = requests.put(followers[0] + "/connectors/c0/config", timeout=60, json=new)
        assert r.status_code == 200, r.text
        assert r.json()["config"]["batch.size"] == "7"
        # the follower that took the call answers from its own view at once
        assert get(followers[0], "/connectors/c0/config")["batch.size"] == "7"
        r = requests.put(followers[1] + "/connectors/c1/pause", timeout=60)
        assert r.status_code == 202, r.text
        r = requests.delete(followers[0] + "/connectors/c2", timeout=60)
        assert r.status_code == 204, r.text
        for u in urls:
            wait_until(lambda: (get(u, "/connectors/c0/config") or {}).get("batch.size") == "7",
                       timeout=60, message=f"{u} sees c0's new config")
            wait_until(lambda: (get(u, "/connectors/c1/status") or {}).get("connector", {}).get(
                "state") == "PAUSED", timeout=60, message=f"{u} sees c1 PAUSED")
            wait_until(lambda: get(u, "/connectors") == ["c0", "c1"], timeout=60,
                       message=f"{u} without c2")

        recs = config_records(server, topic)
        assert [v["properties"].get("batch.size") for _, v, _ in
                records_of(recs, "connector-c0")] == [None, "7"]
        assert [v for _, v, _ in records_of(recs, "target-state-c1")] == [{"state": "PAUSED"}]
        assert [v for _, v, _ in records_of(recs, "connector-c2")][1:] == [None]
        assert {w for _, _, w in recs} == {leader}, recs

        # validation answers the same from a follower as from the leader: 400 naming the field
        bad = {"name": "bad", "config": {"connector.class": SINK, "tasks.max": "zero"}}
        answers = [requests.post(u + "/connectors", timeout=60, json=bad) for u in urls]
        assert {a.status_code for a in answers} == {400}
        assert len({a.text for a in answers}) == 1 and "tasks.max" in answers[0].text
        # a create of a name in use: 409 from a follower too
        r = requests.post(followers[1] + "/connectors", timeout=60, json={
            "name": "c0", "config": sink_config(tmp_path, topic_name)})
        assert r.status_code == 409 and "already exists" in r.json()["message"]
        # a call marked as forwarded that reaches a follower is not forwarded again
        r = requests.put(followers[1] + "/connectors/c1/resume?forward=false", timeout=60)
        assert r.status_code == 409 and r.json() == {"error_code": 409,
                                                     "message": REBALANCE_CONFLICT}
        assert get(urls[li], "/connectors/c1/status")["connector"]["state"] == "PAUSED"
        # the owners' internal call (Kafka's POST /connectors/{name}/tasks): a body that is
        # no list of task configs is a 400 anywhere, and so is an unsigned one (KIP-507:
        # test_connect_signed_requests.py)
        for u in urls:
            r = requests.post(u + "/connectors/c0/tasks", timeout=60, json={"file": "x"})
            assert r.status_code == 400 and "list of task configs" in r.json()["message"]
            r = requests.post(u + "/connectors/nope/tasks", timeout=60, json=[])
            assert r.status_code == 400 and "missing required signature" in r.text, r.text
    finally:
        stop_all(workers)


def test_a_write_during_the_leaders_failover_answers_409_or_lands_once(server, tmp_path,
                                                                       topic_name):
    group = group_name("lf")
    workers = [start_worker(server, tmp_path, i, group) for i in range(3)]
    urls = [u for _, u in workers]
    topic = f"{group}-configs"
    try:
        wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
                   message="3 REST APIs")
        r = requests.post(urls[0] + "/connectors", timeout=60, json={
            "name": "before", "config": sink_config(tmp_path, topic_name)})
        assert r.status_code == 201, r.text
        leader = records_of(config_records(server, topic), "connector-before")[0][2]
        victim = next(p for p, u in workers if u == "http://" + leader)
        survivors = [u for u in urls if u != "http://" + leader]
        victim.send_signal(signal.SIGKILL)
        victim.wait(30)
        killed = time.monotonic()
        answers = []

        def created():
            r = requests.post(survivors[0] + "/connectors", timeout=60, json={
                "name": "after", "config": sink_config(tmp_path, topic_name)})
            answers.append(r.status_code)
            assert r.status_code in (201, 409), (r.status_code, r.text)
            if r.status_code == 409:
                assert r.json()["message"].startswith(REBALANCE_CONFLICT), r.text
            return r.status_code == 201
        wait_until(created, timeout=90, interval=0.2,
                   message=lambda: f"a 201 from the new leader: {answers}")
        took = time.monotonic() - killed
        for u in survivors:
            wait_until(lambda: get(u, "/connectors") == ["after", "before"], timeout=60,
                       message=f"{u} sees both")
        recs = config_records(server, topic)
        after = records_of(recs, "connector-after")
        assert len(after) == 1, recs
        assert "http://" + after[0][2] in survivors      # the new leader wrote it
        print(f"answers during the failover: {answers}; 201 after {took:.1f} s "
              f"(session.timeout.ms=3000)")
    finally:
        stop_all(workers)


def test_a_deposed_leader_cannot_write_under_exactly_once_support(server, tmp_path, topic_name):
    from confluent_kafka import Producer
    group = group_name("lx")
    eos = {"exactly.once.source.support": "enabled"}
    workers = [start_worker(server, tmp_path, i, group, **eos) for i in range(2)]
    urls = [u for _, u in workers]
    topic = f"{group}-configs"
    try:
        wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
                   message="2 REST APIs")
        r = requests.post(urls[0] + "/connectors", timeout=60, json={
            "name": "first", "config": sink_config(tmp_path, topic_name)})
        assert r.status_code == 201, r.text
        leader = "http://" + records_of(config_records(server, topic), "connector-first")[0][2]
        follower = next(u for u in urls if u != leader)

        # another producer takes the leader's transactional id, as a newly elected leader
        # does: the worker that still believes it leads is now a zombie for the config topic
        claimant = Producer({"bootstrap.servers": server.kafka_bootstrap,
                             "transactional.id": f"connect-cluster-{group}"})
        claimant.init_transactions(30)
        # sent to the follower, forwarded to the leader, whose fenced write is refused: the
        # leader's 409 passes through the follower unchanged
        r = requests.post(follower + "/connectors", timeout=60, json={
            "name": "zombie", "config": sink_config(tmp_path, topic_name)})
        assert r.status_code == 409, r.text
        assert r.json()["message"].startswith(REBALANCE_CONFLICT) and "fenced" in r.text
        # (a fenced write landing later would make the create below answer "already
        # exists", and leave two records of it)
        assert not records_of(config_records(server, topic), "connector-zombie")
        assert all(get(u, "/connectors") == ["first"] for u in urls)

        # the fenced worker rejoins; the group's leader (it, or the other) claims the id
        # back, fencing the claimant, and the write goes through: once, by the leader
        def create_via_follower():
            r = requests.post(urls[0] + "/connectors", timeout=60, json={
                "name": "zombie", "config": sink_config(tmp_path, topic_name)})
            assert r.status_code in (201, 409), r.text
            return r.status_code == 201
        wait_until(create_via_follower, timeout=60, message="the create after the leader rejoined")
        recs = config_records(server, topic)
        writers = [w for _, _, w in records_of(recs, "connector-zombie")]
        assert len(writers) == 1 and "http://" + writers[0] in urls, recs
        for u in urls:
            wait_until(lambda: get(u, "/connectors") == ["first", "zombie"], timeout=60,
                       message=f"{u} sees it")
        claimant.begin_transaction()
        claimant.produce(topic, key=b"connector-late", value=b'{"properties": {}}')
        try:
            claimant.commit_transaction(30)
            fenced = False
        except Exception:       # noqa: BLE001 -- confluent-kafka's KafkaException (fatal)
            fenced = True
        assert fenced, "the leader's new claim fenced the earlier claimant"
    finally:
        stop_all(workers)
