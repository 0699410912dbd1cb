"""Internal topics are the broker's alone (issue 12, finding 1).

``__consumer_offsets`` holds the group coordinator's committed offsets. No
client may create, write, delete, grow or alter it, by any path: Metadata
auto-creation, CreateTopics, DeleteTopics, CreatePartitions, AlterConfigs,
IncrementalAlterConfigs, Produce (to the node Metadata names its leader, or
to any worker), over Kafka's wire (kcat, confluent-kafka, raw requests) and
the native protocol. A group's committed offset survives every attempt and
a restart, and SIGTERM exits 0. A data directory in which an older version
let a client create ``__consumer_offsets`` as a user topic starts without
it, and the coordinator's offsets are intact.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import uuid
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
from compat_helpers import KafkaWire  # noqa: E402

from kafkalite import errors  # noqa: E402
from kafkalite.client import (AdminClient, AlterConfigOpType, ConfigEntry,  # noqa: E402
                              ConfigResource, NewPartitions, NewTopic, Producer, TopicPartition)
from kafkalite.client.connection import Connection  # noqa: E402
from kafkalite.protocol import ApiKey  # noqa: E402
from kafkalite.record import RecordBatchBuilder  # noqa: E402

OFFSETS = "__consumer_offsets"
TXN = "__transaction_state"
GROUP = "g-internal"
KCAT = shutil.which("kcat") or shutil.which("kafkacat")
INVALID_TOPIC = errors.InvalidTopicError.code
NOT_ALLOWED = errors.TopicAuthorizationFailedError.code


@pytest.fixture
def srv(own_server):
    return own_server


def commit(server, topic: str, offset: int) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        admin.create_topics([NewTopic(topic, 1)])[topic].result()
        admin.alter_consumer_group_offsets(GROUP, [TopicPartition(topic, 0, offset)]).result()
    finally:
        admin.close()


def committed(server, topic: str) -> int:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        return admin.list_consumer_group_offsets(
            GROUP, [TopicPartition(topic, 0)]).result()[0].offset
    finally:
        admin.close()


def records() -> bytes:
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, b"not a group key", b"junk")
    return bytes(b.build())


def produce_body(topic: str) -> dict:
    return {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records()}]}]}


def metadata(wire: KafkaWire, names, auto_create=True) -> dict:
    return wire.request(ApiKey.METADATA, 12, {
        "topics": None if names is None else [{"name": n, "topic_id": uuid.UUID(int=0)} for n in names],
        "allow_auto_topic_creation": auto_create, "include_topic_authorized_operations": False})


def kafka_wire_attempts(server) -> None:
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        # Metadata names it only when asked for by name, internal, led (as
        # Kafka's clients are told) by the workers in turn, which relay to
        # the coordinator; auto-creation never makes one.
        md = metadata(wire, [OFFSETS, TXN])
        by_name = {t["name"]: t for t in md["topics"]}
        assert by_name[OFFSETS]["error_code"] == 0 and by_name[OFFSETS]["is_internal"]
        assert len(by_name[OFFSETS]["partitions"]) == 16
        assert {p["leader_id"] for p in by_name[OFFSETS]["partitions"]} == {0, 1}
        assert by_name[TXN]["error_code"] == 0 and by_name[TXN]["is_internal"]
        assert len(by_name[TXN]["partitions"]) == 4          # transaction_state_num_partitions
        assert {p["leader_id"] for p in by_name[TXN]["partitions"]} == {0, 1}
        assert not [t for t in metadata(wire, None)["topics"] if t["name"] in (OFFSETS, TXN)]
        # Produce to the leader Metadata named, and to every worker
        assert (wire.request(ApiKey.PRODUCE, 9, produce_body(OFFSETS))
                ["responses"][0]["partition_responses"][0]["error_code"]) == INVALID_TOPIC
    finally:
        wire.close()
    for broker in server.refresh()["kafka_brokers"]:
        w = KafkaWire(f"127.0.0.1:{broker['port']}")
        try:
            assert (w.request(ApiKey.PRODUCE, 9, produce_body(OFFSETS))
                    ["responses"][0]["partition_responses"][0]["error_code"]) == INVALID_TOPIC
        finally:
            w.close()


def confluent_attempts(server) -> None:
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient as CkAdmin
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry
    from confluent_kafka.admin import ConfigResource as CkResource
    from confluent_kafka.admin import NewPartitions as CkNewPartitions
    from confluent_kafka.admin import NewTopic as CkNewTopic
    conf = {"bootstrap.servers": server.kafka_bootstrap}
    reports = []
    p = ck.Producer({**conf, "message.timeout.ms": 10_000, "retries": 0})
    p.produce(OFFSETS, b"junk", key=b"junk", partition=0,
              on_delivery=lambda err, msg: reports.append(err))
    assert p.flush(15) == 0
    assert reports and reports[0] is not None and reports[0].code() == INVALID_TOPIC, reports

    admin = CkAdmin(conf)

    def code(futures) -> int:
        (f,) = futures.values()
        with pytest.raises(ck.KafkaException) as exc:
            f.result(15)
        return exc.value.args[0].code()

    assert code(admin.create_topics([CkNewTopic(OFFSETS, 1, 1)])) == errors.InvalidRequestError.code
    assert code(admin.create_topics([CkNewTopic(TXN, 1, 1)])) == errors.InvalidRequestError.code
    assert code(admin.delete_topics([OFFSETS])) == NOT_ALLOWED
    assert code(admin.create_partitions([CkNewPartitions(OFFSETS, 64)])) == NOT_ALLOWED
    resource = CkResource(CkResource.Type.TOPIC, OFFSETS, incremental_configs=[
        ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
    assert code(admin.incremental_alter_configs([resource])) == NOT_ALLOWED


def kcat_attempt(server) -> None:
    if KCAT is None:
        return
    r = subprocess.run([KCAT, "-b", server.kafka_bootstrap, "-P", "-t", OFFSETS, "-p", "0",
                        "-X", "message.timeout.ms=10000"],
                       input="junk\n", capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "invalid topic" in r.stderr.lower(), (r.returncode, r.stderr)


def native_attempts(server) -> None:
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        with pytest.raises(errors.InvalidRequestError):
            admin.create_topics([NewTopic(OFFSETS, 1)])[OFFSETS].result()
        with pytest.raises(errors.TopicAuthorizationFailedError):
            admin.delete_topics([OFFSETS])[OFFSETS].result()
        with pytest.raises(errors.TopicAuthorizationFailedError):
            admin.create_partitions([NewPartitions(OFFSETS, 64)])[OFFSETS].result()
        res = ConfigResource("topic", OFFSETS, set_config={"cleanup.policy": "delete"})
        with pytest.raises(errors.TopicAuthorizationFailedError):
            admin.alter_configs([res])[res].result()
        res = ConfigResource("topic", OFFSETS, incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.SET)])
        with pytest.raises(errors.TopicAuthorizationFailedError):
            admin.incremental_alter_configs([res])[res].result()
    finally:
        admin.close()
    p = Producer({"bootstrap.servers": server.bootstrap})
    try:
        with pytest.raises(errors.InvalidTopicError):
            p.produce(OFFSETS, b"junk", partition=0)
    finally:
        p.close()
    # the native wire, straight to every worker
    for w in server.refresh()["workers"]:
        conn = Connection(w["endpoint"])
        try:
            resp = conn.request(ApiKey.PRODUCE, produce_body(OFFSETS), 10)
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == INVALID_TOPIC
        finally:
            conn.close()


def test_no_client_can_create_write_delete_or_alter_the_offsets_log(srv):
    commit(srv, "orders", 43)
    kcat_attempt(srv)
    kafka_wire_attempts(srv)
    confluent_attempts(srv)
    native_attempts(srv)
    assert committed(srv, "orders") == 43
    assert srv.stop() == 0
    output = srv.output()
    srv.start()
    assert committed(srv, "orders") == 43
    assert srv.stop() == 0
    output += srv.output()
    assert "unreadable __consumer_offsets record" not in output
    assert "cannot write" not in output
    assert not [d for d in os.listdir(srv.data_dir)
                if d.startswith(OFFSETS) and int(d.rsplit("-", 1)[1]) >= 16]


def test_an_offsets_topic_created_by_an_older_version_is_not_a_user_topic(srv):
    commit(srv, "orders", 43)
    assert srv.stop() == 0
    # What an older version wrote after `kcat -P -t __consumer_offsets` auto-created it.
    path = os.path.join(srv.data_dir, "cluster-metadata.json")
    with open(path) as f:
        raw = json.load(f)
    raw["topics"][OFFSETS] = {"topic_id": "1b4e28ba-2fa1-11d2-883f-0016d3cca427", "configs": {},
                              "partitions": [{"replicas": [0], "leader": 0, "isr": [0],
                                              "leader_epoch": 1}]}
    with open(path, "w") as f:
        json.dump(raw, f)
    srv.start()
    assert f"lists '{OFFSETS}' as a user topic" in srv.output()
    with open(path) as f:
        assert OFFSETS not in json.load(f)["topics"]
    assert committed(srv, "orders") == 43
    wire = KafkaWire(srv.kafka_bootstrap)
    try:
        md = metadata(wire, [OFFSETS])["topics"][0]
        assert md["is_internal"] and {p["leader_id"] for p in md["partitions"]} == {0, 1}
    finally:
        wire.close()
    native_attempts(srv)                  # in particular: no worker hosts its partition 0
    assert committed(srv, "orders") == 43
    assert srv.stop() == 0


def test_internal_topic_checkpoints_are_written_off_the_coordinator_thread(tmp_path):
    """The coordinators' housekeeping hands checkpoint writes (two fsyncs
    each) to a thread of their own: the file is not written on the calling
    thread, but is written, in order, by the time the log is closed."""
    import threading
    import time

    from kafkalite.server.internal_topic import InternalTopicLog
    from kafkalite.storage import checkpoint as checkpoint_module
    from kafkalite.storage.checkpoint import PartitionCheckpoint

    writers = []
    real_write = checkpoint_module.write_atomically

    def spying_write(path, data):
        if path.endswith(checkpoint_module.PARTITION_CHECKPOINT):
            writers.append(threading.current_thread().name)
            time.sleep(0.2)             # a slow disk
        real_write(path, data)

    topic = InternalTopicLog(str(tmp_path), "__transaction_state", 2,
                             {"cleanup.policy": "compact"})
    checkpoint_module.write_atomically = spying_write
    try:
        for i in range(3):
            topic.append(1, [(b"k%d" % i, b"v%d" % i)], 1_000 + i)
            started = time.monotonic()
            topic.housekeeping()
            assert time.monotonic() - started < 0.15, "housekeeping waited for a checkpoint write"
        directory = topic.logs[1].directory
        end = topic.logs[1].log_end_offset
    finally:
        topic._checkpoint_writer.shutdown(wait=True)
        checkpoint_module.write_atomically = real_write
        topic.close()
    assert writers and all(name.startswith("__transaction_state-checkpoints") for name in writers)
    assert topic.logs[1].take_checkpoint() is None      # nothing changed since the last one
    assert PartitionCheckpoint.read(directory).high_watermark == end == 3


def test_an_internal_topic_opened_after_a_crash_waits_on_no_fsync(tmp_path, monkeypatch):
    """After a crash (a copy of the directories of a topic still open: no
    clean-shutdown marker), the next coordinator's open of its internal
    topic recovers every record without an fsync: the page cache outlives
    a killed process, the active segment is scanned at every unclean open
    whatever the recovery point, and Kafka's LogLoader moves the recovery
    point only with a flush. Before, each partition that held records cost
    four fsyncs at the open, and a restart under load waited on a disk
    other processes kept busy (issue 68)."""
    from kafkalite.server.internal_topic import InternalTopicLog

    live = tmp_path / "live"
    topic = InternalTopicLog(str(live), "__transaction_state", 4, {"cleanup.policy": "compact"})
    written = {}
    for i in range(40):
        key, value = b"k%d" % i, b"v%d" % i
        topic.append(i % 4, [(key, value)], 1_000 + i)
        written[key] = value
    crashed = tmp_path / "crashed"
    shutil.copytree(live, crashed)
    topic.close()
    fsyncs = []
    real_fsync = os.fsync

    def counting_fsync(fd):
        fsyncs.append(fd)
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", counting_fsync)
    for n in range(2):           # and a crash of the reopened topic: all still there
        reopened = InternalTopicLog(str(crashed), "__transaction_state", 4,
                                    {"cleanup.policy": "compact"})
        assert not fsyncs, f"{len(fsyncs)} fsync(s) in the open of an internal topic after a crash"
        replayed = {}
        reopened.replay(lambda index, pid, txn, key, value: replayed.update(
            {bytes(key): bytes(value)}))
        assert replayed == written
        assert [plog.log_end_offset for plog in reopened.logs] == [10] * 4
        crashed = tmp_path / f"crashed-{n}"
        shutil.copytree(reopened.logs[0].directory.rsplit("/", 1)[0], crashed)
        reopened._checkpoint_writer.shutdown(wait=True)
