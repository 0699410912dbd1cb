"""The supervisor's Prometheus endpoint and /health, and the server's log level.

Scraped over HTTP from real servers and parsed with prometheus_client's own
parser. Workers send their figures once a second and the supervisor
publishes every half second, so assertions poll (``wait_for_metrics``).
"""
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import ServerProcess, child_env, wait_until
from kafkalite.client import OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, Producer, \
    TopicPartition

VALUE = b"v" * 100


@pytest.fixture(scope="module")
def server(module_server):
    """Asserts node-wide gauges (offline and under-replicated partitions,
    the Produce purgatory, every worker up) that other modules' tests move."""
    return module_server


def scrape(srv) -> dict:
    """{(sample name, frozenset of label items): value} of one scrape."""
    text = urllib.request.urlopen(srv.info["metrics"], timeout=5).read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def value(metrics: dict, name: str, **labels) -> float | None:
    return metrics.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def wait_for_metrics(srv, check, timeout: float = 15.0) -> dict:
    """Scrape until ``check(metrics)`` is true; the last scrape either way
    (the caller's assertions then say what is missing)."""
    last = {}

    def scraped():
        last["metrics"] = scrape(srv)
        return check(last["metrics"])
    try:
        wait_until(scraped, timeout, interval=0.1)
    except AssertionError:
        pass
    return last["metrics"]


def health(srv) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(srv.info["health"], timeout=5) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def make_topic(srv, name: str, partitions: int) -> None:
    admin = AdminClient(srv.config())
    admin.create_topics([NewTopic(name, partitions)])[name].result()


def produce(srv, topic: str, counts: dict) -> None:
    """``counts[p]`` records of VALUE to partition p, one by one."""
    p = Producer(srv.config(**{"linger.ms": 5}))
    try:
        for partition, n in counts.items():
            for i in range(n):
                p.produce(topic, value=VALUE, key=b"k%d" % i, partition=partition)
        assert p.flush(30) == 0
    finally:
        p.close()


def test_bytes_messages_requests_and_offsets_match_what_was_produced_and_fetched(
        server, topic_name):
    counts = {0: 120, 1: 80}
    make_topic(server, topic_name, 2)
    before = scrape(server)
    produce(server, topic_name, counts)
    metrics = wait_for_metrics(server, lambda m: value(
        m, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == 200)
    # Every record appended is counted once: exactly what was produced.
    assert value(metrics, "kafka_server_brokertopicmetrics_messagesin_total",
                 topic=topic_name) == 200
    # Bytes in are the appended batches' bytes: exactly what the partitions
    # hold on disk (nothing else wrote to them), and at least the values.
    sizes = [value(metrics, "kafka_log_log_size", topic=topic_name, partition=p) for p in counts]
    bytes_in = value(metrics, "kafka_server_brokertopicmetrics_bytesin_total", topic=topic_name)
    assert bytes_in == sum(sizes) >= 200 * len(VALUE)
    for p, n in counts.items():
        assert value(metrics, "kafka_log_log_logendoffset", topic=topic_name, partition=p) == n
        assert value(metrics, "kafka_cluster_partition_highwatermark",
                     topic=topic_name, partition=p) == n

    c = Consumer(server.config(**{"group.id": topic_name + "-reader", "enable.auto.commit": False}))
    try:
        c.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in counts])
        got, deadline = 0, time.monotonic() + 20
        while got < 200 and time.monotonic() < deadline:
            got += len(c.consume(500, 0.5))
        assert got == 200
    finally:
        c.close()
    # Bytes out are at least bytes in: every batch reached the consumer, and
    # a consumer may be sent a batch more than once (a fetch sent again).
    metrics = wait_for_metrics(server, lambda m: (value(
        m, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic_name) or 0) >= bytes_in)
    assert value(metrics, "kafka_server_brokertopicmetrics_bytesout_total",
                 topic=topic_name) >= bytes_in
    for request in ("Produce", "Fetch", "Metadata"):
        grew = (value(metrics, "kafka_network_requestmetrics_requests_total", request=request)
                - (value(before, "kafka_network_requestmetrics_requests_total",
                         request=request) or 0))
        assert grew >= 1, request
        # the latency histogram counts the same requests
        assert value(metrics, "kafka_network_requestmetrics_totaltimems_count",
                     request=request) == value(
            metrics, "kafka_network_requestmetrics_requests_total", request=request)
        assert value(metrics, "kafka_network_requestmetrics_totaltimems_bucket",
                     request=request, le="+Inf") == value(
            metrics, "kafka_network_requestmetrics_requests_total", request=request)
    assert value(metrics, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0
    assert value(metrics, "kafka_server_replicamanager_underreplicatedpartitions") == 0
    assert value(metrics, "kafka_server_delayedoperationpurgatory_purgatorysize",
                 delayedOperation="Produce") == 0
    assert value(metrics, "process_resident_memory_bytes") > 0          # the supervisor's
    for broker in (0, 1):
        assert value(metrics, "kafkalite_worker_up", broker=broker) == 1
        assert value(metrics, "kafkalite_worker_process_resident_memory_bytes",
                     broker=broker) > 0


def test_a_consumer_polling_an_empty_topic_counts_idle_partitions(server, topic_name):
    """kafkalite_fetch_idle_partitions_total: the partitions the workers
    answered idle from their table in C, summed over the workers."""
    make_topic(server, topic_name, 4)
    before = value(scrape(server), "kafkalite_fetch_idle_partitions_total") or 0
    c = Consumer(server.config(**{"group.id": topic_name + "-idle", "fetch.wait.max.ms": 50}))
    try:
        c.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(4)])
        deadline = time.monotonic() + 20
        metrics = {}
        while time.monotonic() < deadline:
            assert c.consume(10, 0.2) == []
            metrics = scrape(server)
            if (value(metrics, "kafkalite_fetch_idle_partitions_total") or 0) >= before + 8:
                break
    finally:
        c.close()
    assert (value(metrics, "kafkalite_fetch_idle_partitions_total") or 0) >= before + 8


def test_a_consumer_reading_new_records_counts_reads_in_c(server, topic_name):
    """kafkalite_fetch_tail_reads_total: partitions whose new records the
    workers' fetch plan read in C (the segment's last batches), summed over
    the workers; the consumer gets every record all the same."""
    make_topic(server, topic_name, 2)
    produce(server, topic_name, {0: 5, 1: 5})
    before = value(scrape(server), "kafkalite_fetch_tail_reads_total") or 0
    c = Consumer(server.config(**{"group.id": topic_name + "-tail", "fetch.wait.max.ms": 50}))
    got = []
    try:
        c.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(2)])
        wait_until(lambda: got.extend(m for m in c.consume(10, 0.2) if not m.error())
                   or len(got) >= 10, timeout=30, message="the 10 records consumed")
    finally:
        c.close()
    assert sorted(m.partition() for m in got) == [0] * 5 + [1] * 5
    assert wait_until(lambda: (value(scrape(server), "kafkalite_fetch_tail_reads_total")
                               or 0) >= before + 2, timeout=20,
                      message="kafkalite_fetch_tail_reads_total to count the two partitions' reads")


def test_consumer_lag_is_what_remains_after_the_committed_offset(server, topic_name):
    make_topic(server, topic_name, 2)
    produce(server, topic_name, {0: 50, 1: 30})
    group = topic_name + "-g"
    c = Consumer(server.config(**{"group.id": group, "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(topic_name, 0, 20), TopicPartition(topic_name, 1, 30)],
                 asynchronous=False)
    finally:
        c.close()
    labels = {"consumergroup": group, "topic": topic_name}
    # the two partitions' end offsets come from two workers' reports: wait for both
    metrics = wait_for_metrics(server, lambda m: value(
        m, "kafka_consumergroup_lag", partition=0, **labels) == 30 and value(
        m, "kafka_consumergroup_lag", partition=1, **labels) is not None)
    assert value(metrics, "kafka_consumergroup_lag", partition=0, **labels) == 30
    assert value(metrics, "kafka_consumergroup_current_offset", partition=0, **labels) == 20
    assert value(metrics, "kafka_consumergroup_lag", partition=1, **labels) == 0


def test_a_killed_worker_makes_health_503_until_it_is_back_and_its_metrics_recover(
        own_server, topic_name):
    srv = own_server
    make_topic(srv, topic_name, 4)           # partitions on both workers
    counts = {p: 10 * (p + 1) for p in range(4)}
    produce(srv, topic_name, counts)
    wait_for_metrics(srv, lambda m: value(
        m, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic_name) == 100)
    assert health(srv)[0] == 200

    old = srv.worker_pid(1)
    os.kill(old, signal.SIGKILL)
    code, body = wait_until(lambda: (lambda answer: answer if answer[0] != 200 else None)(
        health(srv)), 10, "/health to say a worker is down", interval=0.02)
    assert code == 503 and b'"workers_down": [1]' in body, body

    srv.wait_for_worker_restart(1, old)
    wait_until(lambda: health(srv)[0] == 200, 20, lambda: f"/health back at 200: {health(srv)}")

    # The restarted worker's partitions report their offsets again, and node
    # totals did not go down with the process that counted them.
    metrics = wait_for_metrics(srv, lambda m: all(
        value(m, "kafka_log_log_logendoffset", topic=topic_name, partition=p) == n
        for p, n in counts.items()) and value(m, "kafkalite_worker_restarts_total", broker=1) == 1)
    for p, n in counts.items():
        assert value(metrics, "kafka_log_log_logendoffset", topic=topic_name, partition=p) == n
    assert value(metrics, "kafka_server_brokertopicmetrics_messagesin_total",
                 topic=topic_name) == 100
    assert value(metrics, "kafkalite_worker_restarts_total", broker=1) == 1
    assert value(metrics, "kafka_controller_kafkacontroller_offlinepartitionscount") == 0


@pytest.mark.processes
def test_log_level_info_logs_a_created_topic(tmp_path, topic_name):
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--log-level", "INFO"]).start()
    try:
        make_topic(srv, topic_name, 3)
        wait_until(lambda: f"topic {topic_name} created: 3 partition(s)" in srv.output(), 10,
                   lambda: f"the INFO line of the created topic in {srv.output()[-2000:]}")
        assert srv.output().count(f"topic {topic_name} created") == 1     # once per event
    finally:
        srv.stop()


@pytest.mark.processes
def test_a_bogus_log_level_is_one_readable_line_and_a_failed_exit(tmp_path):
    run = subprocess.run(
        [sys.executable, "-m", "kafkalite", "server", "--data-dir", str(tmp_path / "data"),
         "--port", "0", "--kafka-port", "0", "--log-level", "bogus"],
        env=child_env(), capture_output=True, text=True, timeout=30)
    assert run.returncode != 0
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "log_level" in lines[0] and "'bogus'" in lines[0], run.stderr
    assert "INFO" in lines[0]                           # says what it may be
    assert not (tmp_path / "data" / "server.json").exists()


def test_a_mistyped_path_is_404_naming_the_paths_served_not_the_metrics(server):
    base = server.info["metrics"].rsplit("/metrics", 1)[0]
    for path in ("/metrics", "/"):
        with urllib.request.urlopen(base + path, timeout=5) as answer:
            assert answer.status == 200
            assert b"# TYPE process_cpu_seconds" in answer.read()
    try:
        urllib.request.urlopen(base + "/metrix", timeout=5)
    except urllib.error.HTTPError as exc:
        code, body = exc.code, exc.read().decode()
    else:
        code, body = 200, ""
    assert code == 404
    assert "'/metrix'" in body and "/metrics" in body and "/health" in body


def test_the_ready_line_names_every_endpoint(server):
    """A first-time user finds the console and the metrics from the line the
    server prints when it is ready, as they find the Kafka and native ports."""
    ready = next(line for line in server.output().splitlines()
                 if line.startswith("kafkalite server ready:"))
    info = server.info
    for url in (info["native"], info["kafka.bootstrap.servers"], info["console"],
                info["metrics"], info["data_dir"]):
        assert url in ready, (url, ready)
