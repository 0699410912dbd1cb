"""The Connect REST endpoints Kafka 4.x documents beyond connectors'
lifecycle, over real HTTP against a real worker and server: ``GET /`` with
the cluster's id, ``GET /health`` (KIP-1017), ``/admin/loggers`` (KIP-495, KIP-976's cluster scope),
``PATCH /connectors/{name}/config`` (KIP-477), ``GET
/connector-plugins/{plugin}/config`` (KIP-769), ``/connectors/{name}/topics``
and its reset (KIP-558), and Kafka's message for an unknown connector
class; the cluster scope and active topics also across a distributed
worker's config and status topics."""
from __future__ import annotations

import http.client
import logging
import threading

import pytest
import requests
from connect_helpers import Connect, lines_of, stop_all
from harness import create, wait_until

from kafkalite.client import AdminClient
from kafkalite.connect.api import SourceConnector, SourceTask

SRC = "org.apache.kafka.connect.file.FileStreamSourceConnector"
SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"
STR = "org.apache.kafka.connect.storage.StringConverter"


def test_root_names_the_kafka_cluster_it_works_for(connect, server):
    admin = AdminClient(server.config())
    try:
        cluster_id = admin.describe_cluster()["cluster_id"]
    finally:
        admin.close()
    root = connect.http("GET", "/").json()
    assert cluster_id and root["kafka_cluster_id"] == cluster_id


def test_requests_go_one_after_another_on_one_kept_alive_connection(connect):
    """Kafka Connect's REST server (Jetty) keeps connections alive; so does
    this one (kafkalite/http_server.py; werkzeug's answered each with
    ``Connection: close``)."""
    conn = http.client.HTTPConnection("127.0.0.1", connect.rest.port, timeout=60)
    try:
        ends = []
        for _ in range(3):
            conn.request("GET", "/connectors")
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200 and not resp.will_close, resp.getheaders()
            ends.append(conn.sock.getsockname())
        assert len(set(ends)) == 1              # the three went over one connection
    finally:
        conn.close()


def test_loggers_are_read_and_set_by_namespace(connect):
    name = "kafkalite.connect.test_rest_api"
    child = logging.getLogger(name + ".child")
    child.setLevel(logging.NOTSET)
    assert connect.http("GET", "/admin/loggers/no.such.logger").status_code == 404
    # a logger without a level of its own shows the level it inherits, never modified
    got = connect.http("GET", f"/admin/loggers/{name}.child").json()
    assert got["last_modified"] is None and got["level"] in ("INFO", "WARN", "DEBUG", "ERROR")
    assert "root" in connect.http("GET", "/admin/loggers").json()

    r = connect.http("PUT", f"/admin/loggers/{name}", json={"level": "debug"})
    assert r.status_code == 200, r.text
    assert r.json() == [name, name + ".child"]          # the namespace and what is under it
    assert child.getEffectiveLevel() == logging.DEBUG and child.isEnabledFor(logging.DEBUG)
    got = connect.http("GET", f"/admin/loggers/{name}.child").json()
    assert got["level"] == "DEBUG" and isinstance(got["last_modified"], int)
    listed = connect.http("GET", "/admin/loggers").json()
    assert listed[name]["level"] == "DEBUG" and listed[name + ".child"]["level"] == "DEBUG"

    # Kafka's answers to a bad level, a missing one; nothing changes
    r = connect.http("PUT", f"/admin/loggers/{name}", json={"level": "LOUD"})
    assert r.status_code == 404 and r.json() == {"error_code": 404,
                                                 "message": "invalid log level 'LOUD'."}
    r = connect.http("PUT", f"/admin/loggers/{name}", json={})
    assert r.status_code == 400 and "'level'" in r.json()["message"]
    # the cluster scope: no body (204); a standalone worker is the whole cluster
    r = connect.http("PUT", f"/admin/loggers/{name}?scope=cluster", json={"level": "WARN"})
    assert r.status_code == 204 and child.getEffectiveLevel() == logging.WARNING
    assert connect.http("GET", f"/admin/loggers/{name}").json()["level"] == "WARN"


def test_patch_merges_into_the_config_and_null_removes_a_key(connect, topic_name, tmp_path):
    src = tmp_path / "in.txt"
    src.write_text("a\nb\n")
    connect.create("src", **{"connector.class": SRC, "file": str(src), "topic": topic_name,
                             "value.converter": STR, "batch.size": "10"})
    r = connect.http("PATCH", "/connectors/src/config",
                     json={"batch.size": "20", "value.converter": None})
    assert r.status_code == 200, r.text
    assert r.json()["config"] == {"connector.class": SRC, "file": str(src), "topic": topic_name,
                                  "batch.size": "20", "name": "src"}
    assert connect.http("GET", "/connectors/src/config").json() == r.json()["config"]
    wait_until(lambda: connect.state("src")["tasks"] and
               connect.state("src")["tasks"][0]["state"] == "RUNNING", timeout=30,
               message="the task restarted with the patched config")
    # validated as a PUT is; a connector that does not exist is 404, a wrong name 400
    r = connect.http("PATCH", "/connectors/src/config", json={"batch.size": "0"})
    assert r.status_code == 400 and "batch.size" in r.json()["message"]
    assert connect.http("GET", "/connectors/src/config").json()["batch.size"] == "20"
    r = connect.http("PATCH", "/connectors/nope/config", json={"batch.size": "1"})
    assert r.status_code == 404 and r.json()["message"] == "Connector nope not found"
    r = connect.http("PATCH", "/connectors/src/config", json={"name": "other"})
    assert r.status_code == 400 and "doesn't match" in r.json()["message"]


def test_plugin_config_lists_the_definitions_of_its_keys(connect):
    r = connect.http("GET", f"/connector-plugins/{SRC}/config")
    assert r.status_code == 200, r.text
    by_name = {d["name"]: d for d in r.json()}
    assert set(by_name) == {"file", "topic", "batch.size"}
    assert by_name["batch.size"]["type"] == "INT" and by_name["batch.size"]["default_value"] == \
        "2000" and not by_name["batch.size"]["required"]
    assert by_name["topic"]["required"] and by_name["topic"]["documentation"]
    # short names, transformations and converters too
    assert {d["name"] for d in connect.http("GET", "/connector-plugins/FileStreamSink/config")
            .json()} == {"file"}
    assert {d["name"] for d in connect.http(
        "GET", "/connector-plugins/org.apache.kafka.connect.transforms.RegexRouter/config")
        .json()} == {"regex", "replacement"}
    assert [d["name"] for d in connect.http(
        "GET", "/connector-plugins/org.apache.kafka.connect.json.JsonConverter/config")
        .json()] == ["schemas.enable"]
    r = connect.http("GET", "/connector-plugins/com.example.Nope/config")
    assert r.status_code == 404 and r.json()["message"] == "Unknown plugin com.example.Nope."


def test_an_unknown_connector_class_is_answered_with_the_connectors_there_are(connect):
    r = connect.http("POST", "/connectors", json={"name": "x", "config": {
        "connector.class": "com.example.NoSuchConnector", "topic": "t"}})
    assert r.status_code == 400
    message = r.json()["message"]
    assert message.startswith("Failed to find any class that implements Connector and which "
                              "name matches com.example.NoSuchConnector, available connectors "
                              "are: PluginDesc{klass=class ")
    assert "No module named" not in message
    assert f"name='{SRC}'" in message and "type=sink" in message
    r = connect.http("PUT", "/connector-plugins/com.example.NoSuchConnector/config/validate",
                     json={"topic": "t"})
    assert r.status_code == 400 and "available connectors are" in r.json()["message"]


def test_a_config_names_only_classes_of_the_kind_it_asks_for(connect):
    """Any importable class by its Python path was built and started as a
    connector, transform or converter (issue 67): a connector config may
    name only a Connector, Transformation, Predicate or Converter."""
    r = connect.http("POST", "/connectors", json={"name": "x", "config": {
        "connector.class": "subprocess.Popen", "topic": "t"}})
    assert r.status_code == 400 and r.json()["message"].startswith(
        "Failed to find any class that implements Connector and which name matches "
        "subprocess.Popen")
    for key, value in (("transforms.a.type", "threading:Thread"),
                       ("value.converter", "collections:OrderedDict")):
        config = {"connector.class": SRC, "topic": "t", key: value}
        if key.startswith("transforms"):
            config["transforms"] = "a"
        r = connect.http("POST", "/connectors", json={"name": "x", "config": config})
        assert r.status_code == 400 and "does not implement" in r.json()["message"], r.text
    r = connect.http("GET", "/connector-plugins/threading.Thread/config")
    assert r.status_code == 404
    # one of the kind, by its Python path, still loads
    r = connect.http("GET", "/connector-plugins/kafkalite.connect.transforms:Filter/config")
    assert r.status_code == 200, r.text


def test_topics_are_those_used_and_a_reset_forgets_them(connect, topic_name, sink_name,
                                                         tmp_path):
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    src.write_text("".join(f"{i}\n" for i in range(10)))
    connect.create("src", **{"connector.class": SRC, "file": str(src), "topic": topic_name,
                             "value.converter": STR})
    connect.create(sink_name, **{"connector.class": SINK, "file": str(out),
                                 "topics": topic_name, "value.converter": STR})
    wait_until(lambda: len(lines_of(out)) == 10, timeout=60, message="the sink's lines")
    for name in ("src", sink_name):
        assert connect.http("GET", f"/connectors/{name}/topics").json() == \
            {name: {"topics": [topic_name]}}
    r = connect.http("PUT", "/connectors/src/topics/reset")
    assert r.status_code == 202 and r.text == ""
    assert connect.http("GET", "/connectors/src/topics").json() == {"src": {"topics": []}}
    # a topic used again is active again
    with open(src, "a") as f:
        f.write("10\n")
    wait_until(lambda: connect.http("GET", "/connectors/src/topics").json() ==
               {"src": {"topics": [topic_name]}}, timeout=60, message="the topic recorded again")
    assert connect.http("PUT", "/connectors/nope/topics/reset").status_code == 404


def test_topic_tracking_and_its_reset_can_be_disabled(server, tmp_path, topic_name):
    create(server, topic_name)
    c = Connect(server, offset_file=tmp_path / "o.json", **{"topic.tracking.allow.reset":
                                                            "false"})
    try:
        c.create("src", **{"connector.class": SRC, "file": str(tmp_path / "in"),
                           "topic": topic_name})
        r = c.http("PUT", "/connectors/src/topics/reset")
        assert r.status_code == 403 and r.json()["message"] == \
            "Topic tracking reset is disabled."
    finally:
        c.close()
    c = Connect(server, offset_file=tmp_path / "o2.json", **{"topic.tracking.enable": "false"})
    try:
        c.create("src", **{"connector.class": SRC, "file": str(tmp_path / "in"),
                           "topic": topic_name})
        r = c.http("GET", "/connectors/src/topics")
        assert r.status_code == 403 and r.json()["message"] == "Topic tracking is disabled."
    finally:
        c.close()


@pytest.fixture
def distributed(server, tmp_path, workers):
    """Two distributed workers of one group: their REST urls."""
    from connect_cluster import free_ports, group_name, start_worker
    group = group_name("rest-api")
    for i, port in enumerate(free_ports(2)):
        workers.append(start_worker(server, tmp_path, i, group, port))
    urls = [u for _, u in workers]
    from connect_cluster import get
    wait_until(lambda: all(get(u, "/connectors") == [] for u in urls), timeout=60,
               message="both workers serving")
    yield urls
    stop_all(workers)


def test_cluster_scope_and_active_topics_across_distributed_workers(distributed, topic_name,
                                                                   tmp_path):
    from connect_cluster import call, get, running
    a, b = distributed
    name = "kafkalite.connect.test_rest_api_cluster"
    # set through one worker, applied by both as they read the config topic
    r = call("PUT", a, f"/admin/loggers/{name}?scope=cluster", json={"level": "TRACE"})
    assert r.status_code == 204, r.text
    wait_until(lambda: all((get(u, f"/admin/loggers/{name}") or {}).get("level") == "TRACE"
                           for u in (a, b)), timeout=30, message="the level on both workers")

    src = tmp_path / "in.txt"
    src.write_text("x\ny\n")
    r = call("POST", b, "/connectors", json={"name": "src", "config": {
        "connector.class": SRC, "file": str(src), "topic": topic_name}})
    assert r.status_code == 201, r.text
    wait_until(lambda: running(a, "src", 1), timeout=60, message="the source running")
    # recorded in the status topic: every worker shows it
    for u in (a, b):
        wait_until(lambda u=u: get(u, "/connectors/src/topics") ==
                   {"src": {"topics": [topic_name]}}, timeout=30, message=f"topics on {u}")
    assert call("PUT", b, "/connectors/src/topics/reset").status_code == 202
    for u in (a, b):
        wait_until(lambda u=u: get(u, "/connectors/src/topics") == {"src": {"topics": []}},
                   timeout=30, message=f"the reset on {u}")
    with open(src, "a") as f:
        f.write("z\n")
    wait_until(lambda: get(a, "/connectors/src/topics") == {"src": {"topics": [topic_name]}},
               timeout=60, message="the topic recorded again after the reset")


def test_health_of_a_standalone_worker(connect):
    r = connect.http("GET", "/health")
    assert r.status_code == 200 and r.json() == {
        "status": "healthy",
        "message": "Worker has completed startup and is ready to handle requests."}


# what a SlowStartConnector's start() waits for: the test holds it to block the
# distributed worker's membership thread (Kafka's tick thread), as a connector
# whose start() hangs on an unreachable system does
RELEASE = threading.Event()


class SlowStartConnector(SourceConnector):
    def start(self, props):
        RELEASE.wait(30)
        self.props = dict(props)

    def task_class(self):
        return SlowStartTask

    def task_configs(self, max_tasks):
        return []


class SlowStartTask(SourceTask):
    def start(self, props):
        pass

    def poll(self):
        return []

    def stop(self):
        pass


def test_health_of_a_distributed_worker_starting_healthy_and_stuck(server, topic_name):
    """KIP-1017: 503 "starting" between the REST API's start and the
    worker's first assignment (the CLI starts the REST API first, as Kafka's
    worker does), 200 once it runs, 500 "unhealthy" naming the step while a
    connector's start() holds the membership thread past the health check's
    bound, and 200 again once it returns."""
    from kafkalite.connect import Worker
    from kafkalite.connect.distributed import DistributedHerder
    from kafkalite.connect.offsets import KafkaOffsetStore
    from kafkalite.connect.rest import RestServer
    group = f"health-{topic_name[:30]}"
    cfg = {**server.config(), "group.id": group}
    worker = Worker(cfg, KafkaOffsetStore(server.config(), f"{group}-offsets", 1))
    worker.start()
    herder = DistributedHerder(worker, group, f"{group}-configs", f"{group}-status",
                               3000, 300)
    rest = RestServer(herder, port=0)
    worker.worker_id = f"127.0.0.1:{rest.port}"
    rest.start()
    url = rest.url
    RELEASE.clear()
    try:
        r = requests.get(url + "/health", timeout=30)
        assert r.status_code == 503 and r.json()["status"] == "starting", r.text
        assert r.json()["message"].startswith("Worker is still starting up. The worker is "
                                              "currently starting, which began at ")
        herder.start()
        wait_until(lambda: requests.get(url + "/health", timeout=30).status_code == 200,
                   timeout=60, message="the worker healthy after its first assignment")
        assert requests.get(url + "/health", timeout=30).json()["status"] == "healthy"

        herder.health_check_timeout_s = 1.0
        r = requests.post(url + "/connectors", timeout=60, json={"name": "slow", "config": {
            "connector.class": "test_connect_rest_api:SlowStartConnector"}})
        assert r.status_code == 201, r.text
        stuck = wait_until(lambda: (r := requests.get(url + "/health", timeout=30)).status_code
                           == 500 and r.json(), timeout=30,
                           message="the worker unhealthy while the connector's start() blocks")
        assert stuck["status"] == "unhealthy"
        assert stuck["message"].startswith(
            "Worker was unable to handle this request and may be unable to handle other "
            "requests. The worker is currently "), stuck
        RELEASE.set()
        wait_until(lambda: requests.get(url + "/health", timeout=30).status_code == 200,
                   timeout=30, message="the worker healthy again once start() returned")
    finally:
        RELEASE.set()
        rest.stop()
        herder.stop()
        worker.stop()
