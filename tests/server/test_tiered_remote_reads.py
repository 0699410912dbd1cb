"""Remote reads off the worker's event loop (KIP-405's RemoteLogReader and
DelayedRemoteFetch): a fetch below a tiered partition's local log start
waits in the purgatory while a reader thread downloads the segment, and
the worker's other partitions are served meanwhile; the same for a
ListOffsets by timestamp that needs a remote segment (Kafka's
DelayedRemoteListOffsets: REQUEST_TIMED_OUT at its timeout,
KAFKA_STORAGE_ERROR when the read fails), for a ShareFetch of remote
records and for the share group's dead-letter copies of them. And Kafka's
tiered-storage metrics on /metrics: the upload lag while the store takes
no uploads, the bytes copied and read, the reads that failed.

The remote store is moto's S3 server behind a TCP relay the test slows
down: once armed, every GET of a ``segment.log`` object waits DELAY_S
before it goes on to moto (a segment on a slow or far object store); PUTs
of them can be held (the store taking no uploads) and GETs refused (403).
One worker, so the tiered partition and the other one share its loop; its
share groups start from the earliest offset."""
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
from harness import ServerProcess, TcpRelay, stop_server, wait_until
from moto_s3 import moto_s3
from kafkalite.client import AcknowledgeType, ShareConsumer
from kafkalite.errors import KafkaStorageError, RequestTimedOutError
from kafkalite.protocol import ApiKey

DELAY_S = 4.0
COUNT = 3000
EARLIEST_LOCAL = -4
LATEST = -1
# the shared server's share_dead_letter_topic (made by the test that uses it)
DEAD_LETTERS = "slow-dead-letters"
# the records' timestamps: an hour ago, 10 ms apart (record i at BASE_MS + 10 i)
BASE_MS = int(time.time() * 1000) - 3_600_000


class SlowRelay(TcpRelay):
    """A TCP relay to an S3 server: with ``delay`` set, a request starting
    ``GET`` for a ``segment.log`` object is held that long before it is
    passed on (``held`` counts them); with ``refuse_gets``, such a GET is
    answered 403 and its connection closed; while ``uploads`` is clear, a
    ``PUT`` of one waits for it."""

    def __init__(self, upstream: tuple[str, int]):
        self.delay = 0.0
        self.held = 0
        self.refuse_gets = False
        self.uploads = threading.Event()
        self.uploads.set()
        super().__init__(upstream)

    def forward(self, source: socket.socket, data: bytes, requests: bool) -> bool:
        segment = requests and b"/segment.log" in data.split(b"\r\n", 1)[0]
        if segment and data.startswith(b"GET ") and self.refuse_gets:
            source.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n"
                           b"Connection: close\r\n\r\n")
            return False
        if segment and data.startswith(b"GET ") and self.delay:
            self.held += 1
            time.sleep(self.delay)
        if segment and data.startswith(b"PUT "):
            self.uploads.wait(60)
        return True


@pytest.fixture(scope="module")
def slow_s3_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiered-slow")
    with moto_s3("slow") as endpoint:
        host, port = endpoint.removeprefix("http://").split(":")
        relay = SlowRelay((host, int(port)))
        config = root / "tiered.toml"
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          'remote_log_storage_s3_bucket = "slow"\n'
                          f'remote_log_storage_s3_endpoint = "http://127.0.0.1:{relay.port}"\n'
                          'share_auto_offset_reset = "earliest"\n'
                          f'share_dead_letter_topic = "{DEAD_LETTERS}"\n')
        srv = ServerProcess(str(root / "data"), workers=1,
                            extra_args=["--config", str(config)]).start()
        srv.relay = relay
        srv.s3_endpoint = endpoint
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


def _remote_segments(srv, topic) -> list[dict]:
    """Partition 0's remote segments (base_offset, end_offset, size, ...), by
    offset, from its metadata."""
    [directory] = glob.glob(os.path.join(srv.data_dir, "**", f"{topic}-0"), recursive=True)
    with open(os.path.join(directory, "remote-log-metadata")) as f:
        return json.load(f)["segments"]


def _remote_sizes(srv, topic) -> list[int]:
    """The sizes of partition 0's remote segments, by offset."""
    return [s["size"] for s in _remote_segments(srv, topic)]


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


def _tiered_with_timestamps(srv, topic: str) -> ck.Producer:
    """``topic``, 2 partitions: COUNT records in partition 0, record i
    with the timestamp BASE_MS + 10 i, its early segments remote only (the
    store not slowed), and one record in partition 1. Returns the producer."""
    admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1, config={
        "remote.storage.enable": "true", "segment.bytes": "16384",
        "local.retention.bytes": "32768"})])[topic].result(30)
    producer = ck.Producer({"bootstrap.servers": srv.kafka_bootstrap, "linger.ms": 5,
                            "batch.size": 4096, "acks": "all"})
    for i in range(COUNT):
        producer.produce(topic, b"value-%05d-" % i + b"x" * 40, partition=0,
                         timestamp=BASE_MS + 10 * i)
    producer.produce(topic, b"before", partition=1)
    assert producer.flush(30) == 0
    wait_until(lambda: _earliest_local(srv, topic) > COUNT // 2, 30,
               "local segments of partition 0 deleted")
    return producer


def _served_while_waiting(srv, topic: str, producer: ck.Producer, other: ck.Consumer,
                          value: bytes) -> None:
    """Partition 1 of ``topic`` takes a record and ``other`` (assigned to
    it, caught up) gets it, each well within DELAY_S."""
    started = time.monotonic()
    producer.produce(topic, value, partition=1)
    assert producer.flush(10) == 0
    produced = time.monotonic() - started
    got = other.poll(10)
    answered = time.monotonic() - started
    assert got is not None and got.value() == value
    assert produced < DELAY_S / 2 and answered < DELAY_S / 2, (
        f"produce took {produced:.2f} s and its fetch {answered:.2f} s while a remote "
        f"read of {DELAY_S} s was under way")


def _caught_up_consumer(srv, topic: str) -> ck.Consumer:
    other = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap, "group.id": topic,
                         "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    other.assign([ck.TopicPartition(topic, 1, 0)])
    first = other.poll(10)
    assert first is not None and first.value() == b"before"
    return other


def _list_offsets_v10(srv, topic: str, timestamps: dict, timeout_ms: int | None) -> dict:
    """ListOffsets of ``timestamps`` ({partition: timestamp}): v10 with
    ``timeout_ms``, or v9 (no timeout_ms) when it is None:
    {partition: (error code, offset, timestamp)}."""
    [broker] = srv.info["kafka_brokers"]
    wire = KafkaWire(f"127.0.0.1:{broker['port']}", timeout=60)
    body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic, "partitions": [
        {"partition_index": p, "current_leader_epoch": -1, "timestamp": ts}
        for p, ts in timestamps.items()]}]}
    if timeout_ms is not None:
        body["timeout_ms"] = timeout_ms
    try:
        r = wire.request(ApiKey.LIST_OFFSETS, 9 if timeout_ms is None else 10, body)
    finally:
        wire.close()
    return {a["partition_index"]: (a["error_code"], a["offset"], a["timestamp"])
            for a in r["topics"][0]["partitions"]}


def test_offsets_for_times_finds_a_timestamp_only_the_remote_store_holds(slow_s3_server,
                                                                         topic_name):
    """confluent-kafka's offsets_for_times (ListOffsets by timestamp) below
    the local log start: the first record at or after the timestamp, from
    the remote segment holding it, as for a timestamp in the local log."""
    srv = slow_s3_server
    _tiered_with_timestamps(srv, topic_name)
    local_start = _earliest_local(srv, topic_name)
    consumer = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap,
                            "group.id": topic_name, "enable.auto.commit": False})
    try:
        for offset in (0, 100, 1000, local_start - 1, local_start + 5):
            # a timestamp between two records' finds the later record
            [found] = consumer.offsets_for_times(
                [ck.TopicPartition(topic_name, 0, BASE_MS + 10 * offset - 5)], timeout=30)
            assert found.error is None and found.offset == offset, (offset, found)
    finally:
        consumer.close()


def test_a_slow_remote_offset_lookup_does_not_hold_up_the_workers_other_partitions(
        slow_s3_server, topic_name):
    """offsets_for_times of a remote-only timestamp while the store takes
    DELAY_S to serve the segment: the worker serves partition 1 (produce,
    fetch) meanwhile, and the lookup is answered, right, once the segment
    is there."""
    srv = slow_s3_server
    producer = _tiered_with_timestamps(srv, topic_name)
    other = _caught_up_consumer(srv, topic_name)
    srv.relay.delay = DELAY_S
    held = srv.relay.held
    lookup: dict = {}

    def look_up() -> None:
        consumer = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap,
                                "group.id": topic_name + "-lookup", "enable.auto.commit": False})
        try:
            started = time.monotonic()
            [found] = consumer.offsets_for_times(
                [ck.TopicPartition(topic_name, 0, BASE_MS + 10 * 200)], timeout=30)
            lookup["found"], lookup["took"] = found, time.monotonic() - started
        except BaseException as exc:
            lookup["error"] = exc
        finally:
            consumer.close()
    thread = threading.Thread(target=look_up)
    thread.start()
    try:
        wait_until(lambda: srv.relay.held > held, 10, "the lookup's read reaching the store")
        _served_while_waiting(srv, topic_name, producer, other, b"during")
    finally:
        srv.relay.delay = 0.0
        thread.join(40)
        other.close()
    assert "error" not in lookup, lookup.get("error")
    assert lookup["found"].error is None and lookup["found"].offset == 200, lookup["found"]
    assert lookup["took"] >= DELAY_S * 0.9, "answered once the segment was downloaded"


def test_a_remote_offset_lookup_past_its_timeout_is_request_timed_out(slow_s3_server,
                                                                      topic_name):
    """ListOffsets v10 with timeout_ms shorter than the store's read: the
    remote partition is answered REQUEST_TIMED_OUT at the timeout, the
    local one with its offset in the same answer; the download goes on,
    and a lookup after it finds the offset. A read the store refuses is
    KAFKA_STORAGE_ERROR for that partition."""
    srv = slow_s3_server
    _tiered_with_timestamps(srv, topic_name)
    remote_ts = BASE_MS + 10 * 300
    srv.relay.delay = DELAY_S
    try:
        started = time.monotonic()
        answer = _list_offsets_v10(srv, topic_name, {0: remote_ts, 1: LATEST}, 1000)
        took = time.monotonic() - started
    finally:
        srv.relay.delay = 0.0
    assert answer[0] == (RequestTimedOutError.code, -1, -1), answer
    assert answer[1] == (0, 1, -1), answer
    assert 0.9 <= took < DELAY_S * 0.75, f"answered after {took:.2f} s"
    assert wait_until(lambda: _list_offsets_v10(srv, topic_name, {0: remote_ts}, 1000)[0]
                      == (0, 300, remote_ts), 20, "the lookup once the segment is there")

    srv.relay.refuse_gets = True
    try:
        # another remote segment (the earlier one is cached now)
        answer = _list_offsets_v10(srv, topic_name, {0: BASE_MS + 10 * 5, 1: LATEST}, 10_000)
    finally:
        srv.relay.refuse_gets = False
    assert answer[0][0] == KafkaStorageError.code, answer
    assert answer[1] == (0, 1, -1), answer
    assert _list_offsets_v10(srv, topic_name, {0: BASE_MS + 10 * 5}, 10_000)[0] == \
        (0, 5, BASE_MS + 50), "the lookup after the failed one reads again"


@pytest.fixture
def short_lookup_server(slow_s3_server, tmp_path):
    """A second server on the slow store (a bucket of its own behind the
    same relay) with ``remote.list.offsets.request.timeout.ms = 500`` and
    ``remote.fetch.max.wait.ms = 10000`` in its config file."""
    import boto3
    boto3.client("s3", endpoint_url=slow_s3_server.s3_endpoint).create_bucket(
        Bucket="short-lookups")
    config = tmp_path / "tiered.toml"
    config.write_text('"remote.log.storage.system.enable" = true\n'
                      'remote_log_storage_s3_bucket = "short-lookups"\n'
                      'remote_log_storage_s3_endpoint = '
                      f'"http://127.0.0.1:{slow_s3_server.relay.port}"\n'
                      '"remote.list.offsets.request.timeout.ms" = 500\n'
                      '"remote.fetch.max.wait.ms" = 10000\n')
    srv = ServerProcess(str(tmp_path / "data"), workers=1,
                        extra_args=["--config", str(config)]).start()
    srv.relay = slow_s3_server.relay
    try:
        yield srv
    finally:
        srv.relay.delay = 0.0
        stop_server(srv)


def test_a_remote_offset_lookup_without_a_timeout_waits_the_servers_setting(
        short_lookup_server, topic_name):
    """remote.list.offsets.request.timeout.ms = 500 in the server's config:
    a ListOffsets v9 (no timeout_ms) and a v10 with timeout_ms 0, of
    timestamps only slow remote segments hold, are answered
    REQUEST_TIMED_OUT after about 500 ms (not Kafka's default 30 s, nor the
    store's DELAY_S), the local partition with its offset."""
    srv = short_lookup_server
    _tiered_with_timestamps(srv, topic_name)
    srv.relay.delay = DELAY_S
    try:
        # two remote segments: the first's download goes on after its answer
        for offset, timeout_ms in ((300, None), (5, 0)):
            started = time.monotonic()
            answer = _list_offsets_v10(srv, topic_name, {0: BASE_MS + 10 * offset, 1: LATEST},
                                       timeout_ms)
            took = time.monotonic() - started
            assert answer[0] == (RequestTimedOutError.code, -1, -1), (timeout_ms, answer)
            assert answer[1] == (0, 1, -1), answer
            assert 0.45 <= took < DELAY_S * 0.75, f"answered after {took:.2f} s"
    finally:
        srv.relay.delay = 0.0


def test_a_remote_fetch_waits_the_servers_setting(short_lookup_server, topic_name):
    """remote.fetch.max.wait.ms = 10000 in the server's config: a Fetch of
    records only a slow remote segment holds (the store answering after
    DELAY_S) waits for the download and is answered with them, where
    Kafka's default 500 ms answers it at once without records."""
    srv = short_lookup_server
    _tiered_with_timestamps(srv, topic_name)
    [broker] = srv.info["kafka_brokers"]
    wire = KafkaWire(f"127.0.0.1:{broker['port']}", timeout=60)
    srv.relay.delay = DELAY_S
    try:
        started = time.monotonic()
        r = wire.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 100, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic_name, "partitions": [
                {"partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""})
        took = time.monotonic() - started
    finally:
        srv.relay.delay = 0.0
        wire.close()
    [p] = r["responses"][0]["partitions"]
    assert p["error_code"] == 0, p
    assert p["records"], f"answered after {took:.2f} s without the remote records"
    assert took >= DELAY_S * 0.75, f"answered after {took:.2f} s"


def test_a_share_fetch_of_remote_records_does_not_hold_up_the_workers_other_partitions(
        slow_s3_server, topic_name):
    """A share group reading a tiered partition from offset 0 (the store
    taking DELAY_S per segment): the worker serves partition 1 meanwhile,
    and the share consumer gets the remote records, in order."""
    srv = slow_s3_server
    producer = _tiered_with_timestamps(srv, topic_name)
    other = _caught_up_consumer(srv, topic_name)
    srv.relay.delay = DELAY_S
    held = srv.relay.held
    shared: dict = {"got": []}

    def share_read() -> None:
        consumer = ShareConsumer(srv.config(**{"group.id": topic_name + "-share",
                                               "fetch.max.wait.ms": 100}))
        try:
            consumer.subscribe([topic_name])
            deadline = time.monotonic() + 30
            while len(shared["got"]) < 100 and time.monotonic() < deadline:
                for m in consumer.consume(100, 0.5):
                    if m.error() is None and m.partition() == 0:
                        shared["got"].append(m.offset())
        except BaseException as exc:
            shared["error"] = exc
        finally:
            consumer.close()
    thread = threading.Thread(target=share_read)
    thread.start()
    try:
        wait_until(lambda: srv.relay.held > held, 20, "the share fetch's read reaching the store")
        _served_while_waiting(srv, topic_name, producer, other, b"during")
    finally:
        srv.relay.delay = 0.0
        thread.join(40)
        other.close()
    assert "error" not in shared, shared.get("error")
    assert shared["got"][:100] == list(range(100))


def test_dead_letters_of_remote_records_do_not_hold_up_the_workers_other_partitions(
        slow_s3_server, topic_name):
    """A share group rejects records of a tiered partition's first remote
    segment once that segment has left the remote read cache, the store
    taking DELAY_S per segment: their copies for the dead-letter topic wait
    for the download on the reader's threads, the worker serves partition 1
    meanwhile, and the dead letters arrive, in order, saying where from."""
    from harness import read_all
    srv = slow_s3_server
    producer = _tiered_with_timestamps(srv, topic_name)
    admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
    admin.create_topics([NewTopic(DEAD_LETTERS, 1, 1)])[DEAD_LETTERS].result(30)
    other = _caught_up_consumer(srv, topic_name)
    consumer = ShareConsumer(srv.config(**{"group.id": topic_name + "-share",
                                           "fetch.max.wait.ms": 100,
                                           "share.acknowledgement.mode": "explicit"}))
    try:
        consumer.subscribe([topic_name])
        first = _remote_segments(srv, topic_name)[0]
        got: list = []
        deadline = time.monotonic() + 30
        while not got and time.monotonic() < deadline:
            got = [m for m in consumer.consume(100, 0.5)
                   if m.error() is None and m.partition() == 0]
        rejected = [m for m in got if m.offset() <= first["end_offset"]][:50]
        assert [m.offset() for m in rejected] == list(range(len(rejected))) and rejected
        # five later segments read from the store push the first out of the
        # cache; remote only (below the local log start): a copied segment
        # still on the local disk is read from there, not through the cache
        def remote_only_later():
            local_start = _earliest_local(srv, topic_name)
            return [s for s in _remote_segments(srv, topic_name)
                    if s["base_offset"] > got[-1].offset() and s["end_offset"] < local_start]
        later = wait_until(lambda: len(segs := remote_only_later()) >= 5 and segs, 30,
                           lambda: f"five remote-only segments: {remote_only_later()}")
        reader = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap,
                              "group.id": topic_name + "-later", "enable.auto.commit": False})
        try:
            reader.assign([ck.TopicPartition(topic_name, 0, later[-5]["base_offset"])])
            last, deadline = -1, time.monotonic() + 30
            while last < later[-1]["end_offset"] and time.monotonic() < deadline:
                for m in reader.consume(1000, 0.5):
                    if m.error() is None:
                        last = max(last, m.offset())
            assert last >= later[-1]["end_offset"], last
        finally:
            reader.close()

        srv.relay.delay = DELAY_S
        held = srv.relay.held
        try:
            for m in rejected:
                consumer.acknowledge(m, AcknowledgeType.REJECT)
            consumer.commit_async()
            wait_until(lambda: srv.relay.held > held, 20,
                       "the dead letters' read reaching the store")
            _served_while_waiting(srv, topic_name, producer, other, b"during")
        finally:
            srv.relay.delay = 0.0
    finally:
        consumer.close()
        other.close()
    letters = read_all(srv, DEAD_LETTERS, 1, len(rejected), timeout=30)
    offsets = []
    for m in letters:
        h = {k: v.decode() for k, v in m.headers()}
        assert (h["__dlq.errors.topic"], h["__dlq.errors.partition"],
                h["__dlq.errors.reason"]) == (topic_name, "0", "rejected"), h
        offset = int(h["__dlq.errors.offset"])
        assert m.value() == b"value-%05d-" % offset + b"x" * 40
        offsets.append(offset)
    assert offsets == [m.offset() for m in rejected]


def test_an_iceberg_backfill_of_remote_records_does_not_hold_up_the_workers_other_partitions(
        slow_s3_server, topic_name):
    """A tiered topic made an Iceberg topic once its early segments are
    remote only: its leader's writer reads them from the store (DELAY_S a
    segment) for the table, the worker serves partition 1 meanwhile, and
    the table ends up holding every offset of partition 0 once."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError
    from kafkalite.storage.iceberg.topic_table import committed_offsets
    srv = slow_s3_server
    producer = _tiered_with_timestamps(srv, topic_name)
    other = _caught_up_consumer(srv, topic_name)
    srv.relay.delay = DELAY_S
    held = srv.relay.held
    admin = AdminClient({"bootstrap.servers": srv.kafka_bootstrap})
    resource = ConfigResource("topic", topic_name, incremental_configs=[
        ConfigEntry("iceberg.mode", "key_value",
                    incremental_operation=AlterConfigOpType.SET),
        ConfigEntry("iceberg.target.lag.ms", "100",
                    incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)
    try:
        wait_until(lambda: srv.relay.held > held, 20, "the Iceberg writer's read reaching the store")
        _served_while_waiting(srv, topic_name, producer, other, b"during")
    finally:
        srv.relay.delay = 0.0
        other.close()
    catalog = load_catalog("kafkalite", type="rest", uri=srv.info["iceberg_rest"])

    def committed():
        try:
            table = catalog.load_table(("kafkalite", topic_name))
        except NoSuchTableError:
            return None
        return table if committed_offsets(table).get(0) == COUNT else None
    wait_until(committed, 60, f"the table holding partition 0's {COUNT} records")
    rows = committed().scan().to_arrow().column("redpanda").to_pylist()
    assert sorted(r["offset"] for r in rows if r["partition"] == 0) == list(range(COUNT))
