"""A standalone worker against a real server, driven through Kafka
Connect's REST API with a plain HTTP client: file source -> topic -> file
sink, the lifecycle (pause, resume, stop, restart, delete), KIP-875
offsets, config errors, and error tolerance with a dead-letter queue."""
from __future__ import annotations

import json
import time

from connect_helpers import Connect, lines_of, read_to_end
from harness import create, read_all, wait_until

from kafkalite.client import AdminClient, Producer
from kafkalite.connect.offsets import KafkaOffsetStore

SRC = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
STR = "org.apache.kafka.connect.storage.StringConverter"


def write(path, lines, mode="a"):
    with open(path, mode) as f:
        f.writelines(f"{x}\n" for x in lines)


def test_file_source_to_file_sink_through_the_rest_api(connect, server, topic_name, sink_name,
                                                       tmp_path):
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    lines = [f"line {i} ünïcode" for i in range(500)]
    write(src, lines, "w")
    info = connect.create("src", **{"connector.class": SRC, "file": str(src), "topic": topic_name,
                                    "value.converter": STR})
    assert info == {"name": "src", "config": {"connector.class": SRC, "file": str(src),
                                              "topic": topic_name, "value.converter": STR,
                                              "name": "src"},
                    "tasks": [{"connector": "src", "task": 0}], "type": "source"}
    connect.create(sink_name, **{"connector.class": "FileStreamSink", "file": str(out),
                              "topics": topic_name, "value.converter": STR})
    wait_until(lambda: len(lines_of(out)) >= 500, timeout=60, message="the sink file")
    write(src, ["tail 1", "tail 2"])          # tailing: appended lines follow
    wait_until(lambda: len(lines_of(out)) >= 502, timeout=60, message="the tailed lines")
    assert lines_of(out) == lines + ["tail 1", "tail 2"]

    assert connect.http("GET", "/connectors").json() == sorted([sink_name, "src"])
    expanded = connect.http("GET", "/connectors?expand=status&expand=info").json()
    assert expanded["src"]["status"]["connector"]["state"] == "RUNNING"
    assert expanded[sink_name]["info"]["type"] == "sink"
    st = connect.state("src")
    assert st["connector"]["state"] == "RUNNING" and st["type"] == "source"
    assert [(t["id"], t["state"]) for t in st["tasks"]] == [(0, "RUNNING")]
    assert connect.http("GET", "/connectors/src/tasks/0/status").json()["state"] == "RUNNING"
    tasks = connect.http("GET", "/connectors/src/tasks").json()
    assert tasks[0]["id"] == {"connector": "src", "task": 0} and \
        tasks[0]["config"]["file"] == str(src)
    assert connect.http("GET", "/connectors/src/config").json()["topic"] == topic_name
    assert connect.http("GET", "/connectors/src/topics").json() == {"src": {"topics": [topic_name]}}
    size = src.stat().st_size
    wait_until(lambda: connect.http("GET", "/connectors/src/offsets").json() == {"offsets": [
        {"partition": {"filename": str(src)}, "offset": {"position": size}}]}, timeout=60,
        message="the source offset at the file's end")
    # the sink's group connect-<name> committed after flush
    offsets = f"/connectors/{sink_name}/offsets"
    wait_until(lambda: connect.http("GET", offsets).json() == {"offsets": [
        {"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
         "offset": {"kafka_offset": 502}}]}, timeout=60, message="the sink's committed offset")
    admin = AdminClient(server.config())
    try:
        got = admin.list_consumer_group_offsets(f"connect-{sink_name}").result()
        assert [(tp.topic, tp.partition, tp.offset) for tp in got] == [(topic_name, 0, 502)]
    finally:
        admin.close()


def test_source_resumes_at_its_stored_position_after_a_restart(server, topic_name, tmp_path):
    src, offsets = tmp_path / "in.txt", tmp_path / "offsets.json"
    create(server, topic_name)
    write(src, [f"a{i}" for i in range(100)], "w")
    cfg = {"connector.class": SRC, "file": str(src), "topic": topic_name, "value.converter": STR}
    c = Connect(server, offset_file=offsets)
    try:
        c.create("src", **cfg)
        wait_until(lambda: c.http("GET", "/connectors/src/offsets").json()["offsets"], timeout=60,
                   message="a stored offset")
    finally:
        c.close()          # stopping commits the offsets of everything sent
    write(src, [f"b{i}" for i in range(50)])
    c = Connect(server, offset_file=offsets)
    try:
        c.create("src", **cfg)
        # a line sent again (not resumed at the stored position) would come before b49
        wait_until(lambda: any(m.value() == b"b49" for m in read_to_end(server, topic_name)),
                   timeout=60, message="the last line")
        got = read_to_end(server, topic_name)
    finally:
        c.close()
    assert [m.value().decode() for m in got] == [f"a{i}" for i in range(100)] + \
        [f"b{i}" for i in range(50)]


def test_bad_configs_answer_400_naming_the_field(connect, tmp_path):
    r = connect.http("POST", "/connectors", json={"name": "x", "config": {
        "connector.class": SRC, "file": str(tmp_path / "f")}})
    assert r.status_code == 400
    body = r.json()
    assert set(body) == {"error_code", "message"} and body["error_code"] == 400
    assert 'Missing required configuration "topic"' in body["message"]
    r = connect.http("POST", "/connectors", json={"name": "x", "config": {
        "connector.class": SRC, "topic": "t", "batch.size": "many"}})
    assert r.status_code == 400 and "batch.size" in r.json()["message"]
    r = connect.http("POST", "/connectors", json={"name": "x", "config": {
        "connector.class": SINK, "topics": "a", "transforms": "c", "transforms.c.type": "Cast$Value",
        "transforms.c.spec": "f:nonsense"}})
    assert r.status_code == 400 and "transforms.c.spec" in r.json()["message"]
    r = connect.http("POST", "/connectors", json={"name": "x", "config": {
        "connector.class": "com.example.Nope"}})
    assert r.status_code == 400 and "com.example.Nope" in r.json()["message"]
    r = connect.http("POST", "/connectors", data=b"{nope", headers={
        "Content-Type": "application/json"})
    assert r.status_code == 400
    r = connect.http("POST", "/connectors", data=b"[" + b"1," * (5 << 20) + b"1]", headers={
        "Content-Type": "application/json"})
    assert r.status_code == 413 and r.json()["error_code"] == 413
    # validate: every key answered, the bad ones with their errors
    r = connect.http("PUT", "/connector-plugins/FileStreamSinkConnector/config/validate",
                     json={"connector.class": SINK, "name": "v", "topics": "a", "topics.regex": "b.*",
                           "errors.tolerance": "some"})
    assert r.status_code == 200
    v = r.json()
    errs = {c["value"]["name"]: c["value"]["errors"] for c in v["configs"] if c["value"]["errors"]}
    assert v["name"] == SINK and v["error_count"] == 2 and set(errs) == {"topics",
                                                                         "errors.tolerance"}
    assert "Common" in v["groups"]
    tol = next(c for c in v["configs"] if c["definition"]["name"] == "errors.tolerance")
    assert tol["value"]["recommended_values"] == ["none", "all"]
    assert connect.http("GET", "/connectors/nope").json() == {
        "error_code": 404, "message": "Connector nope not found"}
    assert connect.http("GET", "/connectors/nope/status").status_code == 404
    plugins = connect.http("GET", "/connector-plugins").json()
    assert {p["class"] for p in plugins} >= {SRC, SINK, "io.confluent.connect.jdbc.JdbcSourceConnector"}
    every = connect.http("GET", "/connector-plugins?connectorsOnly=false").json()
    assert {"class": "org.apache.kafka.connect.transforms.Filter", "type": "transformation",
            "version": every[0]["version"]} in every
    spec = connect.http("GET", "/openapi.json").json()
    assert spec["openapi"].startswith("3.") and "/connectors/{name}/offsets" in spec["paths"]


def test_lifecycle_pause_resume_stop_offsets_restart_delete(connect, server, topic_name, tmp_path):
    src = tmp_path / "in.txt"
    write(src, ["one", "two"], "w")
    cfg = {"connector.class": SRC, "file": str(src), "topic": topic_name, "value.converter": STR}
    connect.create("src", **cfg)
    assert connect.http("POST", "/connectors", json={"name": "src", "config": cfg}).status_code \
        == 409
    wait_until(lambda: len(read_all(server, topic_name, 1, 2, timeout=2)) == 2, timeout=60,
               message="2 records")

    assert connect.http("PUT", "/connectors/src/pause").status_code == 202
    st = connect.state("src")
    assert st["connector"]["state"] == "PAUSED" and st["tasks"][0]["state"] == "PAUSED"
    write(src, ["three"])
    time.sleep(1.5)     # paused: nothing is read, however long (a running task would by now)
    assert len(read_all(server, topic_name, 1, 3, timeout=1)) == 2
    assert connect.http("PUT", "/connectors/src/resume").status_code == 202
    wait_until(lambda: len(read_all(server, topic_name, 1, 3, timeout=2)) == 3, timeout=60,
               message="resumed")
    assert connect.state("src")["tasks"][0]["state"] == "RUNNING"

    # KIP-875: offsets change only while STOPPED
    r = connect.http("DELETE", "/connectors/src/offsets")
    assert r.status_code == 400 and "STOPPED" in r.json()["message"]
    assert connect.http("PUT", "/connectors/src/stop").status_code == 204
    st = connect.state("src")
    assert st["connector"]["state"] == "STOPPED" and st["tasks"] == []
    assert connect.http("GET", "/connectors/src").json()["tasks"] == []
    # the file source's alter_offsets hook checks the offsets as Kafka's does: refused
    # with its reason (500), nothing written
    before = connect.http("GET", "/connectors/src/offsets").json()
    assert before["offsets"], before
    for bad, why in (({"filename": str(src)}, {"position": -1}), ({"file": str(src)}, None)):
        r = connect.http("PATCH", "/connectors/src/offsets",
                         json={"offsets": [{"partition": bad, "offset": why}]})
        assert r.status_code == 500 and "refused" in r.json()["message"], r.text
        assert ("position" if why else "filename") in r.json()["message"], r.text
    assert connect.http("GET", "/connectors/src/offsets").json() == before
    r = connect.http("PATCH", "/connectors/src/offsets", json={"offsets": [
        {"partition": {"filename": str(src)}, "offset": {"position": 4}}]})
    assert r.status_code == 200, r.text
    assert r.json() == {"message": "The offsets for this connector have been altered successfully"}
    assert connect.http("GET", "/connectors/src/offsets").json()["offsets"][0]["offset"] == \
        {"position": 4}
    assert connect.http("PUT", "/connectors/src/resume").status_code == 202
    # from byte 4 ("two\n" onwards) again: two, three once more
    wait_until(lambda: len(read_all(server, topic_name, 1, 5, timeout=2)) == 5, timeout=60,
               message="re-read")
    assert [m.value() for m in read_all(server, topic_name, 1, 5)] == \
        [b"one", b"two", b"three", b"two", b"three"]
    connect.http("PUT", "/connectors/src/stop")
    r = connect.http("DELETE", "/connectors/src/offsets")
    assert r.json() == {"message": "The offsets for this connector have been reset successfully"}
    assert connect.http("GET", "/connectors/src/offsets").json() == {"offsets": []}
    connect.http("PUT", "/connectors/src/resume")
    wait_until(lambda: connect.state("src")["tasks"], timeout=60, message="tasks again")

    r = connect.http("POST", "/connectors/src/restart?includeTasks=true")
    assert r.status_code == 202
    body = r.json()
    assert body["connector"]["state"] == "RESTARTING" and body["tasks"][0]["state"] == "RESTARTING"
    r = connect.http("POST", "/connectors/src/restart?includeTasks=true&onlyFailed=true")
    assert r.status_code == 202 and r.json()["connector"]["state"] == "RUNNING"  # none failed
    assert connect.http("POST", "/connectors/src/restart").status_code == 204
    assert connect.http("POST", "/connectors/src/tasks/0/restart").status_code == 204
    assert connect.http("POST", "/connectors/src/tasks/7/restart").status_code == 404
    wait_until(lambda: connect.state("src")["tasks"][0]["state"] == "RUNNING", timeout=60,
               message="RUNNING")
    # PUT config: update (200) keeps the name; a new name creates (201)
    r = connect.http("PUT", "/connectors/src/config", json={**cfg, "batch.size": "10"})
    assert r.status_code == 200 and r.json()["config"]["batch.size"] == "10"
    r = connect.http("PUT", "/connectors/src2/config", json=cfg)
    assert r.status_code == 201
    assert connect.http("DELETE", "/connectors/src2").status_code == 204
    assert connect.http("DELETE", "/connectors/src").status_code == 204
    assert connect.http("GET", "/connectors").json() == []


def test_poison_record_goes_to_the_dlq_with_error_headers(connect, server, topic_name, sink_name,
                                                          tmp_path):
    create(server, topic_name)
    p = Producer(server.config())
    good = [json.dumps({"n": i}).encode() for i in range(20)]
    for i, v in enumerate(good):
        p.produce(topic_name, value=v, key=b"k%d" % i)
        if i == 9:
            p.produce(topic_name, value=b"{poison", key=b"bad", headers=[("h", b"1")])
    p.flush(30)
    p.close()
    out = tmp_path / "out.txt"
    connect.create(sink_name, **{
        "connector.class": SINK, "file": str(out), "topics": topic_name,
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter.schemas.enable": "false",
        "key.converter": "org.apache.kafka.connect.converters.ByteArrayConverter",
        "errors.tolerance": "all", "errors.deadletterqueue.topic.name": f"{topic_name}-dlq",
        "errors.deadletterqueue.context.headers.enable": "true", "errors.log.enable": "true"})
    wait_until(lambda: len(lines_of(out)) >= 20, timeout=60, message="the good records")
    assert lines_of(out) == [str({"n": i}) for i in range(20)]
    dlq = read_all(server, f"{topic_name}-dlq", 1, 1, timeout=30)
    assert len(dlq) == 1 and dlq[0].value() == b"{poison" and dlq[0].key() == b"bad"
    h = {k: v.decode() for k, v in dlq[0].headers()}
    assert h["h"] == "1"
    assert h["__connect.errors.topic"] == topic_name
    assert h["__connect.errors.partition"] == "0" and h["__connect.errors.offset"] == "10"
    assert h["__connect.errors.connector.name"] == sink_name
    assert h["__connect.errors.task.id"] == "0"
    assert h["__connect.errors.stage"] == "VALUE_CONVERTER"
    assert h["__connect.errors.class.name"].endswith("JsonConverter")
    assert h["__connect.errors.exception.class.name"].endswith("DataException")
    assert "serialization error" in h["__connect.errors.exception.message"]
    assert "Traceback" in h["__connect.errors.exception.stacktrace"]
    assert connect.state(sink_name)["tasks"][0]["state"] == "RUNNING"
    # the poison record counts as consumed: the committed offset passes it
    offsets = f"/connectors/{sink_name}/offsets"
    wait_until(lambda: connect.http("GET", offsets).json()["offsets"] == [
        {"partition": {"kafka_topic": topic_name, "kafka_partition": 0},
         "offset": {"kafka_offset": 21}}], timeout=60, message="offset past the poison record")


def test_without_tolerance_a_poison_record_fails_the_task(connect, server, topic_name, tmp_path):
    create(server, topic_name)
    p = Producer(server.config())
    p.produce(topic_name, value=b'{"ok": 1}')
    p.produce(topic_name, value=b"{poison")
    p.flush(30)
    p.close()
    connect.create("fail-sink", **{"connector.class": SINK, "file": str(tmp_path / "o"),
                              "topics": topic_name,
                              "value.converter": "org.apache.kafka.connect.json.JsonConverter",
                              "value.converter.schemas.enable": "false"})
    st = wait_until(lambda: (s := connect.state("fail-sink"))["tasks"][0]["state"] == "FAILED"
                    and s, timeout=60, message="FAILED")
    assert "Tolerance exceeded" in st["tasks"][0]["trace"]
    r = connect.http("POST", "/connectors/fail-sink/restart?includeTasks=true&onlyFailed=true")
    assert r.status_code == 202
    assert r.json()["tasks"][0]["state"] == "RESTARTING" and \
        r.json()["connector"]["state"] == "RUNNING"


def test_source_offsets_in_a_compacted_topic(server, topic_name, tmp_path):
    """Outside standalone mode source offsets live in the compacted
    connect-offsets topic: a second worker reading it resumes where the
    first stopped."""
    src = tmp_path / "in.txt"
    write(src, [f"x{i}" for i in range(30)], "w")
    store_topic = f"{topic_name}-offsets"
    create(server, topic_name)
    cfg = {"connector.class": SRC, "file": str(src), "topic": topic_name, "value.converter": STR}
    c = Connect(server, offsets=KafkaOffsetStore(server.config(), store_topic, 3))
    try:
        c.create("src", **cfg)
        read_all(server, topic_name, 1, 30, timeout=30)
    finally:
        c.close()
    write(src, ["y"])
    c = Connect(server, offsets=KafkaOffsetStore(server.config(), store_topic, 3))
    try:
        assert c.worker.offsets.offsets_of("src") == [({"filename": str(src)},
                                                       {"position": src.stat().st_size - 2})]
        c.create("src", **cfg)
        got = read_all(server, topic_name, 1, 31, timeout=30)
    finally:
        c.close()
    assert [m.value() for m in got] == [b"x%d" % i for i in range(30)] + [b"y"]
    from kafkalite.client import ConfigResource, ResourceType
    admin = AdminClient(server.config())
    try:
        res = ConfigResource(ResourceType.TOPIC, store_topic)
        conf = admin.describe_configs([res])[res].result()
        assert conf["cleanup.policy"].value == "compact"
    finally:
        admin.close()


def test_source_offsets_never_run_ahead_of_acknowledged_records(own_server, topic_name,
                                                                tmp_path):
    """Lines read while the broker is down are not acknowledged: their
    offsets must not be stored (the task fails instead), so a worker started
    after the broker is back sends them; none is lost."""
    create(own_server, topic_name)
    src, offsets = tmp_path / "in.txt", tmp_path / "offsets.json"
    write(src, [f"a{i}" for i in range(10)], "w")
    cfg = {"connector.class": SRC, "file": str(src), "topic": topic_name, "value.converter": STR}
    c = Connect(own_server, offset_file=offsets, **{"producer.delivery.timeout.ms": 3000,
                                                    "producer.request.timeout.ms": 1000})
    try:
        c.create("src", **cfg)
        read_all(own_server, topic_name, 1, 10, timeout=30)
        wait_until(lambda: c.http("GET", "/connectors/src/offsets").json()["offsets"], timeout=60,
                   message="the first offsets")
        own_server.stop()
        write(src, [f"b{i}" for i in range(10)])
        wait_until(lambda: c.state("src")["tasks"][0]["state"] == "FAILED", timeout=60,
                   message="FAILED")
        stored = c.worker.offsets.offsets_of("src")
        assert stored == [({"filename": str(src)}, {"position": len(
            "".join(f"a{i}\n" for i in range(10)))})]
    finally:
        c.close()
    own_server.start()
    c = Connect(own_server, offset_file=offsets)
    try:
        c.create("src", **cfg)
        got = read_all(own_server, topic_name, 1, 20, timeout=30)
    finally:
        c.close()
    assert [m.value().decode() for m in got] == [f"a{i}" for i in range(10)] + \
        [f"b{i}" for i in range(10)]


def test_task_reconfiguration_restarts_tasks_only_when_their_configs_change(connect, server,
                                                                            topic_name):
    import connect_plugins
    create(server, topic_name)
    connect_plugins.SHARDS["value"] = ["s0"]
    connect.create("sharded", **{"connector.class": "connect_plugins:ShardedSourceConnector",
                                 "tasks.max": "4", "topic": topic_name,
                                 "value.converter": STR})
    read_all(server, topic_name, 1, 5, timeout=30)
    herder = connect.herder
    first = list(herder._connectors["sharded"].tasks)
    herder._connectors["sharded"].instance.context.request_task_reconfiguration()
    time.sleep(1.0)     # a restart of the tasks would have happened by now
    assert herder._connectors["sharded"].tasks == first        # same configs: same tasks
    connect_plugins.SHARDS["value"] = ["s0", "s1", "s2"]
    herder._connectors["sharded"].instance.context.request_task_reconfiguration()
    tasks = wait_until(lambda: len(t := connect.http("GET", "/connectors/sharded/tasks").json())
                       == 3 and t, timeout=60, message="3 tasks")
    assert [t["config"]["shards"] for t in tasks] == ["s0", "s1", "s2"]
    wait_until(lambda: [t["state"] for t in connect.state("sharded")["tasks"]] == ["RUNNING"] * 3,
               timeout=60, message="3 RUNNING")
    got = sorted(m.value().decode() for m in read_all(server, topic_name, 1, 15, timeout=30))
    # s0 resumed at its stored offset: no repeats
    assert got == sorted(f"{s}-{n}" for s in ("s0", "s1", "s2") for n in range(5))


def test_two_sink_tasks_share_the_partitions_of_their_group(connect, server, topic_name,
                                                            sink_name, tmp_path):
    create(server, topic_name, 4)
    p = Producer(server.config())
    for i in range(400):
        p.produce(topic_name, value=b"v%d" % i, partition=i % 4)
    p.flush(30)
    p.close()
    out = tmp_path / "out.txt"
    connect.create(sink_name, **{"connector.class": SINK, "file": str(out), "topics": topic_name,
                             "tasks.max": "2", "value.converter": STR})
    wait_until(lambda: len(lines_of(out)) >= 400, timeout=60, message="400 lines")
    assert sorted(lines_of(out)) == sorted(f"v{i}" for i in range(400))
    assert [t["state"] for t in connect.state(sink_name)["tasks"]] == ["RUNNING", "RUNNING"]
    admin = AdminClient(server.config())

    def shared():
        group = f"connect-{sink_name}"
        g = admin.describe_consumer_groups([group])[group].result()
        owned = sorted((tp.topic, tp.partition) for m in g.members for tp in m.assignment)
        return g.state == "Stable" and len(g.members) == 2 and all(
            m.assignment for m in g.members) and owned == [(topic_name, i) for i in range(4)]
    try:
        # the second task may join after the first took (and drained) every partition
        wait_until(shared, timeout=60, message="both tasks owning partitions")
    finally:
        admin.close()
    wait_until(lambda: sorted(o["offset"]["kafka_offset"] for o in connect.http(
        "GET", f"/connectors/{sink_name}/offsets").json()["offsets"]) == [100] * 4, timeout=60,
               message="commits")


def test_a_sink_task_whose_partitions_are_lost_closes_them_before_they_open_again(
        connect, server, topic_name, tmp_path):
    """Kafka's onPartitionsLost: a sink task that stalls past
    max.poll.interval.ms loses its partitions (the group dropped it); they
    are closed (without a commit) before it is given them again, so a task
    that buffers (the Iceberg sink) drops what it held and rereads from its
    own stored offsets instead of writing those records twice."""
    create(server, topic_name, 1)
    p = Producer(server.config())
    for i in range(10):
        p.produce(topic_name, value=b"v%d" % i)
    p.flush(30)
    p.close()
    events = tmp_path / "events.txt"
    connect.create("stall", **{
        "connector.class": "connect_plugins:StallingSinkConnector", "topics": topic_name,
        "events.file": str(events), "stall.ms": "2500", "value.converter": STR,
        "consumer.override.max.poll.interval.ms": "800",
        "consumer.override.heartbeat.interval.ms": "200"})
    def calls():      # open/close of partitions (a rejoin may first assign none)
        return [e for e in lines_of(events) if e in ("open 0", "close 0")]
    wait_until(lambda: calls().count("open 0") >= 2, timeout=60,
               message=lambda: f"the partition opened again: {lines_of(events)}, "
                          f"{connect.state('stall')}")
    assert calls()[:3] == ["open 0", "close 0", "open 0"], lines_of(events)
    # a commit the group refused (it had dropped the task) did not fail the task
    assert connect.state("stall")["tasks"][0]["state"] == "RUNNING"


def test_a_sink_task_seeking_in_open_gets_no_record_from_before_the_seek(
        connect, server, topic_name, sink_name, tmp_path):
    """A sink task that keeps its own offsets (Iceberg's) seeks in open()
    to an offset behind the group's committed one: its first put starts at
    that offset and no record is put twice. (Seeking only after the consume
    that ran the assignment returned, the worker once put the records from
    the committed offset first, then again after the seek.)"""
    from kafkalite.client import Consumer, TopicPartition
    create(server, topic_name, 1)
    p = Producer(server.config())
    for i in range(20):
        p.produce(topic_name, value=b"v%d" % i)
    p.flush(30)
    p.close()
    c = Consumer(server.config(**{"group.id": f"connect-{sink_name}"}))
    try:
        c.commit(offsets=[TopicPartition(topic_name, 0, 10)], asynchronous=False)
    finally:
        c.close()
    events = tmp_path / "events.txt"
    connect.create(sink_name, **{
        "connector.class": "connect_plugins:SeekingSinkConnector", "topics": topic_name,
        "events.file": str(events), "seek.offset": "0", "value.converter": STR})
    wait_until(lambda: len(set(lines_of(events))) >= 20, timeout=60,
               message=lambda: lines_of(events))
    time.sleep(0.5)     # a repeat would follow the first delivery closely
    assert [int(o) for o in lines_of(events)] == list(range(20))
