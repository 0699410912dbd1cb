"""KIP-875 offsets changes in distributed mode go through the Connect
group's leader (connect/distributed/, as Kafka's DistributedHerder): two
``kafkalite connect distributed`` workers on a real server, the first one
started the leader, every change sent to the other (the follower).

- A source connector: PATCH to the follower while it runs is a 400 naming
  ``/stop``; an unknown connector a 404; once STOPPED, the altered offset
  is what GET shows on both workers, the follower's request reached the
  leader marked ``forward=false``, and after ``/resume`` the task starts
  from it (its records from there on arrive again); DELETE resets them.
- A sink connector: PATCH moves its consumer group's (``connect-<name>``)
  committed offset as confluent-kafka's AdminClient reads it; DELETE
  removes the group's offsets.
- Exactly-once support: before the leader writes a source connector's
  offsets it fences its tasks' producers: a producer still holding task
  0's transactional id (a zombie) cannot commit afterwards, and the offsets
  were written in a committed transaction (read_committed sees them).
"""
from __future__ import annotations

import json
import re
import time
import uuid

from connect_cluster import (call, free_ports, get, group_name, running, start_worker,
                             stopped)
from connect_helpers import read_to_end
from harness import create, wait_until

SHARDED = "connect_plugins:ShardedSourceConnector"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
ALTERED = "The offsets for this connector have been altered successfully"
RESET = "The offsets for this connector have been reset successfully"
FRAMEWORK_ALTERED = ("The Connect framework-managed offsets for this connector have been "
                     "altered successfully. However, if this connector manages offsets "
                     "externally, they will need to be manually altered in the system that "
                     "the connector uses.")
FRAMEWORK_RESET = FRAMEWORK_ALTERED.replace("altered", "reset")


def leader_and_follower(server, tmp_path, workers, tag, **extra):
    """Two workers; the first joins alone (the group's leader: it stays so
    while it is a member), the second once the first leads."""
    group = group_name(tag)
    ports = free_ports(2)
    workers.append(start_worker(server, tmp_path, 0, group, ports[0], **extra))
    leader = workers[0][1]
    # a connector created through it proves it joined and leads; deleted at once
    wait_until(lambda: get(leader, "/connectors") == [], timeout=60,
               message="the first worker's REST API")
    r = call("POST", leader, "/connectors", json={"name": f"probe-{group}", "config": {
        "connector.class": SINK, "file": str(tmp_path / "probe.txt"), "topics": f"{group}-probe"}})
    assert r.status_code == 201, r.text
    assert call("DELETE", leader, f"/connectors/probe-{group}").status_code == 204
    workers.append(start_worker(server, tmp_path, 1, group, ports[1], **extra))
    follower = workers[1][1]
    wait_until(lambda: get(follower, "/connectors") == [], timeout=60,
               message="the second worker's REST API")
    return group, leader, follower


def forwarded(tmp_path, i, method):
    text = (tmp_path / f"worker{i}.log").read_text(errors="replace")
    return re.findall(rf'"{method} (/connectors/\S+/offsets\?forward=false) HTTP', text)


def values(server, topic):
    return [m.value().decode() for m in read_to_end(server, topic)]


def stop(url, name):
    assert call("PUT", url, f"/connectors/{name}/stop").status_code == 204
    wait_until(lambda: stopped(url, name), timeout=60, message=f"{name} STOPPED without tasks")


def test_source_offsets_altered_and_reset_through_the_leader(server, tmp_path, topic_name,
                                                              workers):
    create(server, topic_name)
    group, leader, follower = leader_and_follower(server, tmp_path, workers, "ol")
    hook_log = tmp_path / "alter.log"
    r = call("POST", follower, "/connectors", json={"name": "src", "config": {
        "connector.class": SHARDED, "topic": topic_name, "records.per.shard": "5",
        "alter.log": str(hook_log)}})
    assert r.status_code == 201, r.text
    wait_until(lambda: running(leader, "src", 1), timeout=60, message="src running")
    wait_until(lambda: len(values(server, topic_name)) == 5, timeout=60, message="src's 5 records")
    done = {"offsets": [{"partition": {"shard": "s0"}, "offset": {"n": 4}}]}
    for url in (leader, follower):
        wait_until(lambda: get(url, "/connectors/src/offsets") == done, timeout=60,
                   message="the stored offset")

    # running: refused with Kafka's message naming /stop; an unknown connector: 404
    body = {"offsets": [{"partition": {"shard": "s0"}, "offset": {"n": 1}}]}
    r = call("PATCH", follower, "/connectors/src/offsets", json=body)
    assert r.status_code == 400, r.text
    assert "'/connectors/src/stop'" in r.json()["message"]
    assert "STOPPED state" in r.json()["message"]
    assert call("DELETE", follower, "/connectors/src/offsets").status_code == 400
    r = call("PATCH", follower, "/connectors/nope/offsets", json=body)
    assert r.status_code == 404 and r.json()["error_code"] == 404, r.text
    assert call("DELETE", follower, "/connectors/nope/offsets").status_code == 404

    stop(follower, "src")
    assert not hook_log.exists()          # the connector's hook is asked only when STOPPED
    # the connector's alter_offsets hook refuses: 500 with its reason, nothing written
    refused = {"offsets": [{"partition": {"shard": "refuse-me"}, "offset": {"n": 0}}]}
    r = call("PATCH", follower, "/connectors/src/offsets", json=refused)
    assert r.status_code == 500 and "shard refuse-me cannot be moved" in r.json()["message"], \
        r.text
    assert get(leader, "/connectors/src/offsets") == done
    r = call("PATCH", follower, "/connectors/src/offsets", json=body)
    assert r.status_code == 200, r.text
    # the hook said False (Kafka's default): the framework's offsets only
    assert r.json() == {"message": FRAMEWORK_ALTERED}
    # the follower forwarded the three PATCHes (the leader refused the first, the hook the
    # second); the unknown connector's 404 it answered itself
    assert forwarded(tmp_path, 0, "PATCH") == ["/connectors/src/offsets?forward=false"] * 3
    assert forwarded(tmp_path, 1, "PATCH") == []
    for url in (leader, follower):
        assert get(url, "/connectors/src/offsets") == {
            "offsets": [{"partition": {"shard": "s0"}, "offset": {"n": 1}}]}

    # resumed, the task starts after the altered offset: s0-2..s0-4 arrive again
    assert call("PUT", follower, "/connectors/src/resume").status_code == 202
    want = [f"s0-{n}" for n in range(5)] + ["s0-2", "s0-3", "s0-4"]
    wait_until(lambda: values(server, topic_name) == want, timeout=60,
               message=lambda: f"the records from the altered offset: {values(server, topic_name)}")

    stop(leader, "src")
    r = call("DELETE", follower, "/connectors/src/offsets")
    assert r.status_code == 200 and r.json() == {"message": FRAMEWORK_RESET}, r.text
    assert forwarded(tmp_path, 0, "DELETE") == ["/connectors/src/offsets?forward=false"] * 2
    # the hook saw each change before it was written, on the leader: [partition, offset]
    assert [json.loads(line) for line in hook_log.read_text().splitlines()] == [
        [[{"shard": "refuse-me"}, {"n": 0}]], [[{"shard": "s0"}, {"n": 1}]],
        [[{"shard": "s0"}, None]]]
    for url in (leader, follower):
        assert get(url, "/connectors/src/offsets") == {"offsets": []}
    # and from the start again once resumed
    assert call("PUT", leader, "/connectors/src/resume").status_code == 202
    wait_until(lambda: values(server, topic_name) == want + [f"s0-{n}" for n in range(5)],
               timeout=60,
               message=lambda: f"the records from the start: {values(server, topic_name)}")


def test_sink_group_offsets_altered_and_reset_through_the_leader(server, tmp_path, topic_name,
                                                                  workers):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    from kafkalite.client import Producer
    create(server, topic_name)
    p = Producer(server.config())
    for i in range(6):
        p.produce(topic_name, value=f"line{i}".encode())
    p.flush(30)
    p.close()
    group, leader, follower = leader_and_follower(server, tmp_path, workers, "os")
    snk = f"snk-{group}"        # its consumer group connect-<snk> is this test's alone
    out = tmp_path / "out.txt"
    r = call("POST", follower, "/connectors", json={"name": snk, "config": {
        "connector.class": SINK, "file": str(out), "topics": topic_name}})
    assert r.status_code == 201, r.text
    committed = {"offsets": [{"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
                              "offset": {"kafka_offset": 6}}]}
    for url in (leader, follower):
        wait_until(lambda: get(url, f"/connectors/{snk}/offsets") == committed, timeout=60,
                   message="the sink's committed offsets")

    body = {"offsets": [{"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
                         "offset": {"kafka_offset": 2}}]}
    r = call("PATCH", follower, f"/connectors/{snk}/offsets", json=body)
    assert r.status_code == 400 and f"'/connectors/{snk}/stop'" in r.json()["message"], r.text
    assert call("PUT", follower, f"/connectors/{snk}/stop").status_code == 204
    wait_until(lambda: get(follower, f"/connectors/{snk}/status")["connector"]["state"] ==
               "STOPPED", timeout=60, message=f"{snk} STOPPED")
    # STOPPED means stopped: the first change as soon as the connector shows it is taken
    # (issue 75: Kafka's "tasks haven't stopped completely yet" 400 in 2 of 3 runs, the
    # tasks' consumers still in the group)
    r = call("PATCH", follower, f"/connectors/{snk}/offsets", json=body)
    assert r.status_code == 200 and r.json() == {"message": ALTERED}, r.text
    assert set(forwarded(tmp_path, 0, "PATCH")) == {f"/connectors/{snk}/offsets?forward=false"}

    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})

    def group_offsets():
        fut = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(f"connect-{snk}", [TopicPartition(topic_name, 0)])])
        got = fut[f"connect-{snk}"].result(timeout=30)
        return [(tp.topic, tp.partition, tp.offset) for tp in got.topic_partitions]
    assert group_offsets() == [(topic_name, 0, 2)]
    for url in (leader, follower):
        assert get(url, f"/connectors/{snk}/offsets") == body

    r = call("DELETE", follower, f"/connectors/{snk}/offsets")
    assert r.status_code == 200 and r.json() == {"message": RESET}, r.text
    assert [o for _, _, o in group_offsets()] == [-1001]      # no committed offset
    for url in (leader, follower):
        assert get(url, f"/connectors/{snk}/offsets") == {"offsets": []}


def test_a_sink_stopped_in_the_middle_of_a_put_takes_the_first_offsets_change(
        server, tmp_path, topic_name, workers):
    """STOPPED means stopped (issue 75): a sink stopped while its task is
    in a put (4 s) shows STOPPED at once, its consumer still in the group;
    the first PATCH of its offsets is taken. Kafka answers the 400 "tasks
    haven't stopped completely yet" while the group has members; the issue
    saw it in 2 of 3 runs. Here the old code passed too (the leader waits
    for the task's status, removed once its thread ended): the test holds
    the answer to what a user does, whichever wait gives it."""
    from kafkalite.client import Producer
    create(server, topic_name)
    p = Producer(server.config())
    for i in range(3):
        p.produce(topic_name, value=f"line{i}".encode())
    p.flush(30)
    p.close()
    group, leader, follower = leader_and_follower(server, tmp_path, workers, "st")
    snk = f"stall-{group}"
    events = tmp_path / "events.txt"
    r = call("POST", follower, "/connectors", json={"name": snk, "config": {
        "connector.class": "connect_plugins:StallingSinkConnector", "topics": topic_name,
        "events.file": str(events), "stall.ms": "4000"}})
    assert r.status_code == 201, r.text
    wait_until(lambda: events.exists() and "put 0" in events.read_text(), timeout=60,
               message="the task's first put")
    assert call("PUT", follower, f"/connectors/{snk}/stop").status_code == 204
    wait_until(lambda: get(follower, f"/connectors/{snk}/status")["connector"]["state"] ==
               "STOPPED", timeout=30, message=f"{snk} STOPPED")
    body = {"offsets": [{"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
                         "offset": {"kafka_offset": 1}}]}
    r = call("PATCH", follower, f"/connectors/{snk}/offsets", json=body)
    # the plugin has no alter_offsets hook: Kafka's framework-managed answer
    assert r.status_code == 200 and r.json()["message"].startswith(
        "The Connect framework-managed offsets for this connector have been altered"), r.text
    wait_until(lambda: get(follower, f"/connectors/{snk}/offsets") == body, timeout=30,
               message="the altered offsets")


def test_exactly_once_offsets_change_fences_the_tasks_producers(server, tmp_path, topic_name,
                                                                 workers):
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    create(server, topic_name)
    group, leader, follower = leader_and_follower(server, tmp_path, workers, "oe",
                                                  **{"exactly.once.source.support": "enabled"})
    r = call("POST", follower, "/connectors", json={"name": "src", "config": {
        "connector.class": SHARDED, "topic": topic_name, "records.per.shard": "3",
        "alter.handled": "true"}})          # its hook says it has handled the change
    assert r.status_code == 201, r.text
    wait_until(lambda: running(leader, "src", 1), timeout=60, message="src running")
    wait_until(lambda: get(leader, "/connectors/src/offsets") == {
        "offsets": [{"partition": {"shard": "s0"}, "offset": {"n": 2}}]}, timeout=60,
               message="src's offset")
    stop(follower, "src")

    # a zombie of task 0: a producer that claimed its transactional id, a transaction open.
    # The stop's own generation change makes the leader fence the tasks' ids too, at a
    # moment of its own: a zombie it fenced is replaced, so that only the offsets change
    # can fence the one left
    deadline = time.monotonic() + 30
    while True:
        zombie = Producer({"bootstrap.servers": server.kafka_bootstrap,
                           "transactional.id": f"{group}-src-0"})
        zombie.init_transactions(30)
        zombie.begin_transaction()
        zombie.produce(topic_name, value=b"zombie")
        try:
            zombie.flush(10)
            time.sleep(1.0)             # an earlier fencing still on its way shows now
            zombie.produce(topic_name, value=b"zombie")
            zombie.flush(10)
            break
        except KafkaException:
            assert time.monotonic() < deadline, "every zombie was fenced before the change"
    r = call("PATCH", follower, "/connectors/src/offsets", json={
        "offsets": [{"partition": {"shard": "s0"}, "offset": {"n": 0}}]})
    assert r.status_code == 200 and r.json() == {"message": ALTERED}, r.text
    try:
        zombie.commit_transaction(30)
        raise AssertionError("the zombie's transaction committed after the offsets change")
    except KafkaException as e:
        assert e.args[0].fatal() or "fenc" in str(e).lower(), e
    # the zombie's record never shows; the offsets record does, read_committed
    assert b"zombie" not in [m.value() for m in read_to_end(
        server, topic_name, **{"isolation.level": "read_committed"})]
    c = Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": str(uuid.uuid4()),
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        seen = {}
        c.assign([TopicPartition(f"{group}-offsets", p, 0) for p in range(3)])
        deadline_polls = 50
        while deadline_polls and seen.get(b'["src",{"shard":"s0"}]') != {"n": 0}:
            m = c.poll(0.2)
            deadline_polls -= 1
            if m is not None and not m.error() and m.value() is not None:
                seen[m.key()] = json.loads(m.value())
        assert seen.get(b'["src",{"shard":"s0"}]') == {"n": 0}, seen
    finally:
        c.close()
    for url in (leader, follower):
        assert get(url, "/connectors/src/offsets") == {
            "offsets": [{"partition": {"shard": "s0"}, "offset": {"n": 0}}]}
