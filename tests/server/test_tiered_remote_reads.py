"""Remote reads off the worker's event loop (KIP-405's RemoteLogReader and
DelayedRemoteFetch): a fetch below a tiered partition's local log start
waits in the purgatory while a reader thread downloads the segment, and
the worker's other partitions are served meanwhile. And Kafka's
tiered-storage metrics on /metrics: the upload lag while the store takes
no uploads, the bytes copied and read, the reads that failed.

The remote store is moto's S3 server behind a TCP relay the test slows
down: once armed, every GET of a ``segment.log`` object waits DELAY_S
before it goes on to moto (a segment on a slow or far object store); PUTs
of them can be held (the store taking no uploads) and GETs refused (403).
One worker, so the tiered partition and the other one share its loop."""
import glob
import json
import os
import socket
import threading
import time
import urllib.request

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat.compat_helpers import KafkaWire
from harness import ServerProcess, stop_server, wait_until
from moto_s3 import moto_s3
from kafkalite.protocol import ApiKey

DELAY_S = 4.0
COUNT = 3000
EARLIEST_LOCAL = -4


class SlowRelay:
    """A TCP relay on 127.0.0.1 to ``upstream`` (host, port); with
    ``delay`` set, a request starting ``GET`` for a ``segment.log`` object
    is held that long before it is passed on (``held`` counts them); with
    ``refuse_gets``, such a GET is answered 403 and its connection closed;
    while ``uploads`` is clear, a ``PUT`` of one waits for it."""

    def __init__(self, upstream: tuple[str, int]):
        self.upstream = upstream
        self.delay = 0.0
        self.held = 0
        self.refuse_gets = False
        self.uploads = threading.Event()
        self.uploads.set()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket, requests: bool) -> None:
        try:
            while data := source.recv(1 << 16):
                segment = requests and b"/segment.log" in data.split(b"\r\n", 1)[0]
                if segment and data.startswith(b"GET ") and self.refuse_gets:
                    source.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n"
                                   b"Connection: close\r\n\r\n")
                    return
                if segment and data.startswith(b"GET ") and self.delay:
                    self.held += 1
                    time.sleep(self.delay)
                if segment and data.startswith(b"PUT "):
                    self.uploads.wait(60)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, target):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed = True
        self._listener.close()


@pytest.fixture(scope="module")
def slow_s3_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiered-slow")
    with moto_s3("slow") as endpoint:
        host, port = endpoint.removeprefix("http://").split(":")
        relay = SlowRelay((host, int(port)))
        config = root / "tiered.toml"
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          'remote_log_storage_s3_bucket = "slow"\n'
                          f'remote_log_storage_s3_endpoint = "http://127.0.0.1:{relay.port}"\n')
        srv = ServerProcess(str(root / "data"), workers=1,
                            extra_args=["--config", str(config)]).start()
        srv.relay = relay
        try:
            yield srv
        finally:
            relay.delay = 0.0
            relay.refuse_gets = False
            relay.uploads.set()
            stop_server(srv)
            relay.close()


def _earliest_local(server, topic) -> int:
    [broker] = server.info["kafka_brokers"]
    wire = KafkaWire(f"127.0.0.1:{broker['port']}")
    try:
        r = wire.request(ApiKey.LIST_OFFSETS, 9, {
            "replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
                {"partition_index": 0, "current_leader_epoch": -1,
                 "timestamp": EARLIEST_LOCAL}]}]})
    finally:
        wire.close()
    [answer] = r["topics"][0]["partitions"]
    assert answer["error_code"] == 0, answer
    return answer["offset"]


def test_a_slow_remote_read_does_not_hold_up_the_workers_other_partitions(slow_s3_server,
                                                                          topic_name):
    srv = slow_s3_server
    admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 1, config={
        "remote.storage.enable": "true", "segment.bytes": "16384",
        "local.retention.bytes": "32768"})])[topic_name].result(30)
    producer = ck.Producer({"bootstrap.servers": srv.kafka_bootstrap, "linger.ms": 5,
                            "batch.size": 4096, "acks": "all"})
    sent = [b"value-%05d-" % i + b"x" * 40 for i in range(COUNT)]
    for value in sent:
        producer.produce(topic_name, value, partition=0)
    producer.produce(topic_name, b"before", partition=1)
    assert producer.flush(30) == 0
    wait_until(lambda: _earliest_local(srv, topic_name) > COUNT // 2, 30,
               "local segments of partition 0 deleted")

    # a consumer of partition 1, caught up before the store slows down
    other = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap, "group.id": topic_name,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    other.assign([ck.TopicPartition(topic_name, 1, 0)])
    first = other.poll(10)
    assert first is not None and first.value() == b"before"

    srv.relay.delay = DELAY_S
    remote: dict = {}

    def read_remote() -> None:
        consumer = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap,
                                "group.id": topic_name + "-remote", "check.crcs": True,
                                "enable.auto.commit": False})
        try:
            consumer.assign([ck.TopicPartition(topic_name, 0, 0)])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < 100 and time.monotonic() < deadline:
                for m in consumer.consume(100, 1):
                    assert m.error() is None, m.error()
                    got.append((m.offset(), m.value()))
            remote["got"] = got
        except BaseException as exc:
            remote["error"] = exc
        finally:
            consumer.close()
    reader = threading.Thread(target=read_remote)
    reader.start()
    try:
        wait_until(lambda: srv.relay.held >= 1, 10, "the remote read reaching the store")
        # the worker serves partition 1 while the first remote segment downloads
        started = time.monotonic()
        producer.produce(topic_name, b"during", partition=1)
        assert producer.flush(10) == 0
        produced = time.monotonic() - started
        got = other.poll(10)
        answered = time.monotonic() - started
        assert got is not None and got.value() == b"during"
        assert produced < DELAY_S / 2 and answered < DELAY_S / 2, (
            f"produce took {produced:.2f} s and its fetch {answered:.2f} s while a remote "
            f"read of {DELAY_S} s was under way")
    finally:
        reader.join(40)
        other.close()
    assert "error" not in remote, remote.get("error")
    # the remote fetch, answered once its segment was there: CRCs checked, the records sent
    got = remote["got"]
    assert [o for o, _ in got[:100]] == list(range(100))
    assert [v for _, v in got[:100]] == sent[:100]


def _scrape(srv) -> dict:
    """{(sample name, topic label or None): value} of one scrape of /metrics."""
    from prometheus_client.parser import text_string_to_metric_families
    text = urllib.request.urlopen(srv.info["metrics"], timeout=5).read().decode()
    return {(s.name, s.labels.get("topic")): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _remote_sizes(srv, topic) -> list[int]:
    """The sizes of partition 0's remote segments, by offset, from its metadata."""
    [directory] = glob.glob(os.path.join(srv.data_dir, "**", f"{topic}-0"), recursive=True)
    with open(os.path.join(directory, "remote-log-metadata")) as f:
        return [s["size"] for s in json.load(f)["segments"]]


def test_upload_lag_copies_and_remote_reads_are_on_the_metrics_port(slow_s3_server, topic_name):
    """Kafka's BrokerTopicMetrics for tiered storage, scraped from /metrics:
    while the store takes no uploads, RemoteCopyLagSegments/Bytes count the
    rolled segments waiting on the local disk and nothing is copied; once it
    does, the lag goes to 0 and RemoteCopyBytes is every remote segment's
    size; a read the store refuses counts in RemoteFetchErrors, and one it
    serves in RemoteFetchBytes (whole segments, from the first)."""
    srv = slow_s3_server
    srv.relay.uploads.clear()
    try:
        admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
        admin.create_topics([NewTopic(
            topic_name, 1, 1, config={"remote.storage.enable": "true", "segment.bytes": "16384",
                                      "local.retention.bytes": "32768"})])[topic_name].result(30)
        producer = ck.Producer({"bootstrap.servers": srv.kafka_bootstrap, "linger.ms": 5,
                                "batch.size": 4096})
        for i in range(COUNT):
            producer.produce(topic_name, b"value-%05d-" % i + b"x" * 40)
        assert producer.flush(30) == 0
        lag = wait_until(lambda: (m := _scrape(srv)).get(
            ("kafka_server_brokertopicmetrics_remotecopylagsegments", topic_name), 0) >= 5
            and m, 20, "the upload lag to show the rolled segments")
        assert lag[("kafka_server_brokertopicmetrics_remotecopylagbytes", topic_name)] \
            >= 5 * 16384 * 0.9
        assert lag.get(("kafka_server_brokertopicmetrics_remotecopybytes_total", topic_name),
                       0) == 0
    finally:
        srv.relay.uploads.set()
    copied = wait_until(lambda: (m := _scrape(srv)).get(
        ("kafka_server_brokertopicmetrics_remotecopylagsegments", topic_name)) == 0
        and _earliest_local(srv, topic_name) > COUNT // 2 and m, 30, "the uploads to catch up")
    assert copied[("kafka_server_brokertopicmetrics_remotecopylagbytes", topic_name)] == 0
    sizes = _remote_sizes(srv, topic_name)
    assert copied[("kafka_server_brokertopicmetrics_remotecopybytes_total", topic_name)] \
        == sum(sizes)
    assert copied[("kafka_server_brokertopicmetrics_remotecopyerrors_total", topic_name)] == 0

    def read_from_zero(want: int) -> list:
        consumer = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap, "group.id": topic_name,
                                "enable.auto.commit": False})
        try:
            consumer.assign([ck.TopicPartition(topic_name, 0, 0)])
            got, deadline = [], time.monotonic() + 10
            while len(got) < want and time.monotonic() < deadline:
                got += [m.offset() for m in consumer.consume(100, 0.5) if m.error() is None]
            return got
        finally:
            consumer.close()
    srv.relay.refuse_gets = True
    try:
        assert read_from_zero(1) == [], "the store refuses every read"
        failed = wait_until(lambda: (m := _scrape(srv)).get(
            ("kafka_server_brokertopicmetrics_remotefetcherrors_total", topic_name), 0) >= 1
            and m, 10, "the failed reads to be counted")
        assert failed.get(("kafka_server_brokertopicmetrics_remotefetchbytes_total",
                           topic_name), 0) == 0
    finally:
        srv.relay.refuse_gets = False
    assert read_from_zero(100) == list(range(100))
    prefixes = [sum(sizes[:n]) for n in range(1, len(sizes) + 1)]
    read = wait_until(lambda: (m := _scrape(srv)).get(
        ("kafka_server_brokertopicmetrics_remotefetchbytes_total", topic_name), 0) > 0
        and m, 10, "the remote read to be counted")
    assert read[("kafka_server_brokertopicmetrics_remotefetchbytes_total", topic_name)] \
        in prefixes, "whole segments, from the first on"
