"""Tiered storage (KIP-405) end to end: a server with
``remote.log.storage.system.enable`` and a remote store (a directory, or a
bucket on moto's S3 server, which the module starts), a
topic with ``remote.storage.enable=true`` and small segments whose local
copies are deleted past ``local.retention.bytes``, read from offset 0 by
confluent-kafka across the remote/local boundary; ListOffsets' earliest-local
(-4) and latest-tiered (-5); Kafka's refusals. The module starts its own
server (the shared one has no tiered storage)."""
import contextlib
import glob
import os
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from compat.compat_helpers import KafkaWire
from harness import ServerProcess, read_all, run_cli, stop_server, wait_until
from moto_s3 import moto_s3_server
from replicas import create, state
from kafkalite.protocol import ApiKey
from kafkalite.storage.remote.s3_storage import S3RemoteStorage
from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage

LATEST, EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -4, -5, -6
UNSUPPORTED_VERSION = 35
COUNT = 3000


@pytest.fixture(scope="module", params=["directory", "s3"])
def tiered_server(request, tmp_path_factory):
    """A 2-worker server whose remote store is a directory or an S3 bucket;
    ``srv.remote_segments(partition)`` lists the copies the store holds,
    ``srv.s3`` is the MotoS3Server (None with a directory)."""
    root = tmp_path_factory.mktemp("tiered")
    config = root / "tiered.toml"
    s3 = None
    with contextlib.ExitStack() as stack:
        if request.param == "s3":
            s3 = stack.enter_context(moto_s3_server("tiered"))
            endpoint = s3.endpoint
            config.write_text('"remote.log.storage.system.enable" = true\n'
                              'remote_log_storage_s3_bucket = "tiered"\n'
                              f'remote_log_storage_s3_endpoint = "{endpoint}"\n')
            store = S3RemoteStorage("tiered", endpoint_url=endpoint)
        else:
            config.write_text('"remote.log.storage.system.enable" = true\n'
                              f'remote_log_storage_dir = "{root / "remote"}"\n')
            store = LocalDirectoryRemoteStorage(str(root / "remote"))
        srv = ServerProcess(str(root / "data"), extra_args=["--config", str(config)]).start()
        srv.remote_segments = store.list_segments
        srv.s3 = s3
        try:
            yield srv
        finally:
            stop_server(srv)


def _read_from_zero(server, topic) -> list:
    """COUNT records of partition 0 from offset 0, read by confluent-kafka."""
    consumer = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap,
                            "group.id": topic, "enable.auto.commit": False})
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        got = []
        while len(got) < COUNT:
            batch = consumer.consume(1000, 10)
            assert batch, f"no records after {len(got)}"
            for m in batch:
                assert m.error() is None, m.error()
                got.append(m)
        return got
    finally:
        consumer.close()


def _create(server, topic, replication_factor=1, **configs):
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    futures = admin.create_topics([NewTopic(topic, 1, replication_factor, config=configs)])
    return futures[topic].result(30)


def _list_offsets(server, topic, *specs, version=9, answers=False):
    """Partition 0's offsets for each ListOffsets spec, from its leader (its
    whole answers, with ``answers``)."""
    for broker in server.info["kafka_brokers"]:
        wire = KafkaWire(f"127.0.0.1:{broker['port']}")
        try:
            body = {"replica_id": -1, "isolation_level": 0, "topics": [{"name": topic,
                    "partitions": [{"partition_index": 0, "current_leader_epoch": -1,
                                    "timestamp": ts} for ts in specs]}]}
            if version >= 10:
                body["timeout_ms"] = 30_000
            r = wire.request(ApiKey.LIST_OFFSETS, version, body)
        finally:
            wire.close()
        got = r["topics"][0]["partitions"]
        if any(p["error_code"] == 6 for p in got):      # NOT_LEADER_OR_FOLLOWER
            continue
        if answers:
            return got
        assert all(p["error_code"] == 0 for p in got), got
        return [p["offset"] for p in got]
    raise AssertionError(f"no broker leads {topic}-0")


def _produce_tiered(server, topic_name, replication_factor=1):
    """A tiered topic of 16 KiB segments with COUNT records, 32 KiB of them
    kept local: what was sent, once the leader's local segments below the
    first half are gone, and the (earliest, earliest-local, latest-tiered)
    offsets."""
    _create(server, topic_name, replication_factor, **{
        "remote.storage.enable": "true", "segment.bytes": "16384",
        "local.retention.bytes": "32768"})
    tiered_server = server
    producer = ck.Producer({"bootstrap.servers": tiered_server.kafka_bootstrap,
                            "linger.ms": 5, "compression.type": "lz4", "batch.size": 4096})
    sent, failed = [], []
    now = int(time.time() * 1000)       # within retention.ms, which applies to the remote copies
    for i in range(COUNT):
        key, value = b"k%d" % (i % 7), b"value-%05d-" % i + os.urandom(40)
        headers = [("h", b"%d" % i)]
        producer.produce(topic_name, value, key, headers=headers, timestamp=now + i,
                         on_delivery=lambda err, msg: err and failed.append(err))
        sent.append((key, value, headers, now + i))
    assert producer.flush(30) == 0
    assert failed == []

    # the leader copies rolled segments and deletes the local ones past 32 KiB
    def tiered_offsets():
        earliest, local, tiered = _list_offsets(tiered_server, topic_name, EARLIEST,
                                                EARLIEST_LOCAL, LATEST_TIERED)
        return (earliest, local, tiered) if local > COUNT // 2 else None
    return sent, wait_until(tiered_offsets, 30, "local segments deleted")


def test_confluent_kafka_reads_from_offset_0_across_the_remote_boundary(tiered_server,
                                                                          topic_name):
    sent, (earliest, local, tiered) = _produce_tiered(tiered_server, topic_name)
    assert earliest == 0, "the log start stays the remote start"
    assert local - 1 <= tiered < COUNT
    [partition_dir] = glob.glob(os.path.join(tiered_server.data_dir, f"{topic_name}-0"))
    assert "00000000000000000000.log" not in os.listdir(partition_dir)
    copies = tiered_server.remote_segments(os.path.basename(partition_dir))
    # the local start is past the first half, and only copied segments go: 5 or more copies
    assert copies[0].startswith("00000000000000000000-") and len(copies) >= 5

    got = [(m.offset(), m.key(), m.value(), m.headers(), m.timestamp()[1])
           for m in _read_from_zero(tiered_server, topic_name)]
    assert [g[0] for g in got] == list(range(COUNT))
    assert [(k, v, h, ts) for _, k, v, h, ts in got] == sent
    # and kafkalite's own client, over the native protocol
    native = read_all(tiered_server, topic_name, 1, COUNT)
    assert [(m.offset(), m.value()) for m in native] == [
        (i, v) for i, (_, v, _, _) in enumerate(sent)]


def test_a_read_committed_rewind_asks_for_no_transaction_index_of_a_topic_without_aborts(
        tiered_server, topic_name):
    """KIP-1058: a topic with no transactions and 30 or more remote
    segments, read by confluent-kafka (read_committed, librdkafka's
    default) from offset 0: the first records come without a single
    request for a transaction index (there was one or more per remote segment,
    each a 404, before the first answer). The S3 store keeps a segment's
    indexes in one object (``indexes``): only the segments the read
    fetches (the first, and those read ahead) are asked for theirs."""
    if tiered_server.s3 is None:
        pytest.skip("counts the requests S3 is sent")
    _create(tiered_server, topic_name, **{
        "remote.storage.enable": "true", "segment.bytes": "16384",
        "local.retention.bytes": "32768"})
    producer = ck.Producer({"bootstrap.servers": tiered_server.kafka_bootstrap,
                            "linger.ms": 5, "batch.size": 4096})
    for i in range(8000):
        producer.produce(topic_name, b"value-%05d-" % i + b"x" * 50, partition=0)
    assert producer.flush(30) == 0
    [partition_dir] = glob.glob(os.path.join(tiered_server.data_dir, f"{topic_name}-0"))
    wait_until(lambda: len(tiered_server.remote_segments(os.path.basename(partition_dir))) >= 30
               and _list_offsets(tiered_server, topic_name, EARLIEST_LOCAL)[0] > 4000, 60,
               "30 segments copied and the local ones deleted")

    asked = []
    tiered_server.s3.on_request = lambda method, path: (
        asked.append(path) if path.endswith(("/transaction.index", "/indexes")) else None)
    consumer = ck.Consumer({"bootstrap.servers": tiered_server.kafka_bootstrap,
                            "group.id": topic_name, "enable.auto.commit": False,
                            "isolation.level": "read_committed"})
    try:
        consumer.assign([ck.TopicPartition(topic_name, 0, 0)])
        first = consumer.poll(30)
        assert first is not None and first.error() is None, first and first.error()
        assert first.offset() == 0
        assert len(asked) <= 4, f"the indexes of {len(asked)} remote segments asked for"
    finally:
        tiered_server.s3.on_request = None
        consumer.close()


def test_earliest_pending_upload_is_kafka_4_2s_and_refused(tiered_server, topic_name):
    """KIP-1023's earliest-pending-upload (-6) comes with ListOffsets v11,
    Kafka 4.2's; kafkalite claims Kafka 4.1 (its ApiVersions stop at v10),
    so a tiered topic's -6 is UNSUPPORTED_VERSION for that partition alone,
    as Kafka 4.1 answers a spec newer than the request's version."""
    _create(tiered_server, topic_name, **{"remote.storage.enable": "true"})
    producer = ck.Producer({"bootstrap.servers": tiered_server.kafka_bootstrap})
    producer.produce(topic_name, b"not copied")
    assert producer.flush(30) == 0
    [refused, latest] = _list_offsets(tiered_server, topic_name, EARLIEST_PENDING_UPLOAD,
                                      LATEST, version=10, answers=True)
    assert refused["error_code"] == UNSUPPORTED_VERSION
    assert (latest["error_code"], latest["offset"]) == (0, 1)


def test_list_offsets_answer_the_epoch_each_offset_was_written_in(tiered_server, topic_name):
    """The leader epoch beside a ListOffsets offset, as Kafka's UnifiedLog
    gives it: for the earliest, earliest-local and latest-tiered offsets
    and a timestamp's, the epoch that offset was written in (a consumer
    seeking there validates its position against it, KIP-320); for the
    latest, the current one. Half the records are written under broker
    0's leadership, the rest after broker 1 is elected; the first half is
    remote only by then."""
    srv, half = tiered_server, COUNT // 2
    create(srv, topic_name, assignments=[[0, 1]], **{
        "remote.storage.enable": "true", "segment.bytes": "16384",
        "local.retention.bytes": "32768"})
    wait_until(lambda: state(srv, topic_name)[0] == (0, [0, 1], [0, 1]), 30,
               lambda: f"broker 0 leading, both in sync: {state(srv, topic_name)}")
    producer = ck.Producer({"bootstrap.servers": srv.kafka_bootstrap, "linger.ms": 5,
                            "batch.size": 4096, "acks": "all"})
    now = int(time.time() * 1000)

    def send(first, count):
        for i in range(first, first + count):
            producer.produce(topic_name, b"value-%05d-" % i + os.urandom(40), timestamp=now + i)
        assert producer.flush(30) == 0
    send(0, half)
    for args in (("reassign", topic_name, "--partition", "0", "--replicas", "1,0"),
                 ("elect-leaders", topic_name)):
        out = run_cli("topics", *args, "--bootstrap-server", srv.bootstrap)
        assert out.returncode == 0, out.stderr
    wait_until(lambda: state(srv, topic_name)[0][0] == 1, 30,
               lambda: f"broker 1 leading: {state(srv, topic_name)}")
    send(half, COUNT - half)
    wait_until(lambda: min(_list_offsets(srv, topic_name, EARLIEST_LOCAL, LATEST_TIERED)) > half,
               30, "the first half remote only, a copy of the second half made")

    consumer = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap, "group.id": topic_name,
                            "enable.auto.commit": False})
    try:
        epochs = {}
        for offset in (0, half - 1, half, COUNT - 1):
            consumer.assign([ck.TopicPartition(topic_name, 0, offset)])
            [m] = consumer.consume(1, 30)
            assert m.error() is None and m.offset() == offset, m.error()
            epochs[offset] = m.leader_epoch()
    finally:
        consumer.close()
    before, after = epochs[0], epochs[half]
    assert epochs[half - 1] == before < after == epochs[COUNT - 1], epochs

    answers = _list_offsets(srv, topic_name, EARLIEST, EARLIEST_LOCAL, LATEST_TIERED, LATEST,
                            now + 10, version=9, answers=True)
    got = [(a["error_code"], a["offset"], a["leader_epoch"]) for a in answers]
    earliest, local, tiered, latest, at = got
    assert earliest == (0, 0, before), got
    assert local[:2] == (0, local[1]) and local[1] > half and local[2] == after, got
    assert tiered[1] >= half and tiered[2] == after, got
    assert latest == (0, COUNT, after), got
    assert at == (0, 10, before), got


def test_a_replicated_tiered_topic_is_read_whole_from_offset_0(tiered_server, topic_name):
    """Replication factor 2: the leader copies and deletes its local
    segments; the follower, reading the remote log metadata the leader
    writes in the store, deletes its local copies of them too; a consumer
    reads every record from 0."""
    sent, (earliest, local, _) = _produce_tiered(tiered_server, topic_name, 2)
    assert earliest == 0 and local > 0
    replicas = glob.glob(os.path.join(tiered_server.data_dir, "broker-*", f"{topic_name}-0"))
    assert len(replicas) == 2
    wait_until(lambda: all("00000000000000000000.log" not in os.listdir(d) for d in replicas),
               30, "both replicas' first local segment deleted")
    got = [(m.offset(), m.value()) for m in _read_from_zero(tiered_server, topic_name)]
    assert got == [(i, v) for i, (_, v, _, _) in enumerate(sent)]


def test_a_group_resumes_in_the_remote_part_after_a_restart_with_kafka_python(tiered_server,
                                                                              topic_name):
    """A group's committed offset below the local log start, the server
    restarted (the log start comes back from the broker's checkpoint and
    the remote metadata, not from the first local segment), and
    kafka-python resuming the group there."""
    from kafka import KafkaConsumer
    sent, (_, local, _) = _produce_tiered(tiered_server, topic_name)
    committed = local // 3
    consumer = ck.Consumer({"bootstrap.servers": tiered_server.kafka_bootstrap,
                            "group.id": topic_name, "enable.auto.commit": False})
    try:
        consumer.commit(offsets=[ck.TopicPartition(topic_name, 0, committed)], asynchronous=False)
    finally:
        consumer.close()
    assert tiered_server.stop() == 0
    tiered_server.start()
    earliest, local_after = _list_offsets(tiered_server, topic_name, EARLIEST, EARLIEST_LOCAL)
    assert earliest == 0 and local_after >= local       # copies may have gone on meanwhile
    kp = KafkaConsumer(bootstrap_servers=tiered_server.kafka_bootstrap, group_id=topic_name,
                       enable_auto_commit=False, consumer_timeout_ms=10_000)
    try:
        kp.subscribe([topic_name])
        got = []
        for m in kp:
            got.append((m.offset, m.key, m.value, m.timestamp))
            if len(got) == COUNT - committed:
                break
    finally:
        kp.close()
    assert [g[0] for g in got] == list(range(committed, COUNT))
    assert [(k, v, ts) for _, k, v, ts in got] == [(k, v, ts) for k, v, _, ts in sent[committed:]]


def test_tiering_turned_on_for_a_topic_with_records_and_refused_off(tiered_server,
                                                                     topic_name):
    """remote.storage.enable set on an existing topic (kafka-configs --alter):
    its rolled segments are copied and the local ones trimmed from then on;
    turning it off again is refused (Kafka asks for the remote data's deletion
    with it, which kafkalite does not do yet)."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource
    _create(tiered_server, topic_name, **{"segment.bytes": "16384"})
    producer = ck.Producer({"bootstrap.servers": tiered_server.kafka_bootstrap,
                            "batch.size": 4096})
    for i in range(COUNT):
        producer.produce(topic_name, b"value-%05d" % i + b"." * 40)
    assert producer.flush(30) == 0
    assert _list_offsets(tiered_server, topic_name, EARLIEST_LOCAL, LATEST_TIERED) == [0, -1]
    admin = AdminClient({"bootstrap.servers": tiered_server.kafka_bootstrap})

    def alter(**configs):
        resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
            ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
            for k, v in configs.items()])
        admin.incremental_alter_configs([resource])[resource].result(30)
    alter(remote_storage_enable="true", local_retention_bytes="32768")
    wait_until(lambda: _list_offsets(tiered_server, topic_name, EARLIEST_LOCAL)[0] > COUNT // 2,
               30, "local segments deleted once the topic is tiered")
    assert _list_offsets(tiered_server, topic_name, EARLIEST)[0] == 0
    with pytest.raises(ck.KafkaException) as exc:
        alter(remote_storage_enable="false")
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG


def test_a_tiered_compacted_topic_is_refused_as_kafka_refuses_it(tiered_server, topic_name):
    with pytest.raises(ck.KafkaException) as exc:
        _create(tiered_server, topic_name, **{"remote.storage.enable": "true",
                                              "cleanup.policy": "compact"})
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    assert "unsupported for the compacted topics" in exc.value.args[0].str()


def test_without_tiered_storage_on_the_broker_the_topic_is_refused(server, topic_name):
    with pytest.raises(ck.KafkaException) as exc:
        _create(server, topic_name, **{"remote.storage.enable": "true"})
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
    assert "Tiered Storage functionality is disabled in the broker" in exc.value.args[0].str()
