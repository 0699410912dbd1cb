"""Tiered storage (KIP-405) on a replicated topic: the remote log metadata
every replica reads (storage/remote/metadata_store.py), on a 3-worker
server whose remote store is a directory or a bucket on moto's S3 server.

- Followers take the highest remote offset from the shared metadata and
  their local retention deletes what is remote: every replica's local
  disk drops to about ``local.retention.bytes``.
- The leader's worker killed -9: the new leader continues from the shared
  metadata, copying nothing its predecessor copied (at most the one
  segment straddling the last offset copied, whose boundaries are its own
  log's); DeleteRecords through it deletes its predecessor's copies; the
  store holds no copy the metadata does not name; every record reads back
  from offset 0, byte for byte, through confluent-kafka."""
import glob
import json
import os
import signal
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic)

from harness import (ServerProcess, kafka_read_from_zero, kafka_send_numbered, local_segments,
                     stop_server, wait_until)
from moto_s3 import tiered_store_config
from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage

SEGMENT_BYTES = 16384
LOCAL_RETENTION_BYTES = 32768
COUNT = 3000


def _kafka(srv) -> dict:
    """Every worker's Kafka listener: a client starts from one that is up."""
    return {"bootstrap.servers": ",".join(f"127.0.0.1:{b['port']}"
                                          for b in srv.info["kafka_brokers"])}




def _shared_metadata(store) -> list[dict]:
    """The entries of the newest shared metadata version of the topic's
    partition 0 (the server's only partition), read from the store."""
    if isinstance(store, LocalDirectoryRemoteStorage):
        names = [os.path.relpath(p, store.root) for p in glob.glob(
            os.path.join(store.root, "__remote_log_metadata", "*", "*.json"))]
    else:
        names = store.list_metadata("__remote_log_metadata/")
    if not names:
        return []
    data = store.fetch_metadata(max(names, key=os.path.basename))
    return _shared_metadata(store) if data is None else json.loads(data)["segments"]


def _produce(srv, topic, start, count) -> list[bytes]:
    producer = ck.Producer({**_kafka(srv), "acks": "all",
                            "linger.ms": 5, "batch.size": 4096})
    return kafka_send_numbered(producer, topic, start, count)


def _leader(srv, topic) -> int:
    admin = AdminClient(_kafka(srv))     # fresh metadata, from a worker alive
    try:
        return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader
    except ck.KafkaException:
        return -1




@pytest.fixture(params=["directory", "s3"])
def store_config(request, tmp_path):
    """(the server's config file, the store as a client sees it)."""
    with tiered_store_config(request.param, tmp_path, "replicas") as both:
        yield both


@pytest.mark.processes
def test_replicas_share_the_remote_log_metadata_across_a_leader_kill(tmp_path, store_config):
    config, store = store_config
    srv = ServerProcess(str(tmp_path / "data"), workers=3,
                        extra_args=["--config", str(config), "--no-auto-leader-rebalance"]).start()
    try:
        topic = "tiered-rf3"
        admin = AdminClient(_kafka(srv))
        admin.create_topics([NewTopic(topic, 1, 3, config={
            "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
            "local.retention.bytes": str(LOCAL_RETENTION_BYTES),
            "min.insync.replicas": "2"})])[topic].result(30)
        sent = _produce(srv, topic, 0, COUNT)
        replicas = glob.glob(os.path.join(srv.data_dir, "broker-*", f"{topic}-0"))
        assert len(replicas) == 3

        # every replica's local log drops to its local retention (plus the
        # active segment and the one rolling): followers too
        bound = LOCAL_RETENTION_BYTES + 2 * SEGMENT_BYTES
        wait_until(lambda: all(sum(n for _, n in local_segments(d)) <= bound and
                               local_segments(d)[0][0] > 0 for d in replicas), 60,
                   lambda: "every replica's local log within local retention: " + str(
                       {d.split(os.sep)[-2]: sum(n for _, n in local_segments(d))
                        for d in replicas}))
        partition = f"{topic}-0"
        before = {name.split("-", 1)[1]: int(name.split("-", 1)[0])
                  for name in store.list_segments(partition)}
        entries = {e["id"]: e for e in _shared_metadata(store)}
        highest = max(e["end_offset"] for e in entries.values()
                      if e["state"] == "COPY_SEGMENT_FINISHED")
        assert highest > COUNT // 2

        # the leader's worker killed -9: another replica leads
        old = _leader(srv, topic)
        victim = srv.worker_pid(old)
        os.kill(victim, signal.SIGKILL)
        [new] = wait_until(lambda: (lead := _leader(srv, topic)) not in (old, -1) and [lead],
                           60, "a new leader")
        sent += _produce(srv, topic, COUNT, COUNT)
        srv.wait_for_worker_restart(old, victim, 60)

        # the new leader copies on from the shared metadata: the rolled
        # segments of the new records, not again what was copied
        wait_until(lambda: max((e["end_offset"] for e in _shared_metadata(store)
                                if e["state"] == "COPY_SEGMENT_FINISHED"), default=-1)
                   > COUNT + COUNT // 2, 60, "the new leader's copies")
        after = {name.split("-", 1)[1]: int(name.split("-", 1)[0])
                 for name in store.list_segments(partition)}
        recopied = sorted(base for i, base in after.items() if i not in before and base <= highest)
        assert len(recopied) <= 1, \
            f"the new leader copied again segments at {recopied} (copied up to {highest})"
        bases = sorted(after.values())
        assert len(bases) == len(set(bases)), f"a segment copied twice: {bases}"

        # every record from offset 0, the part its predecessor copied included
        got = kafka_read_from_zero(_kafka(srv), topic, len(sent))
        assert [o for o, _ in got] == list(range(len(sent)))
        assert [v for _, v in got] == sent

        # DeleteRecords through the new leader deletes its predecessor's copies
        cut = COUNT // 2
        done = admin.delete_records([ck.TopicPartition(topic, 0, cut)])
        list(done.values())[0].result(30)
        shared = _shared_metadata(store)
        # (every version also lists the leader's next copy ahead, copier.reserve:
        # an entry of size 0 that names no object until that copy starts)
        wait_until(lambda: (names := store.list_segments(partition)) and set(
            n.split("-", 1)[1] for n in names) == {e["id"] for e in _shared_metadata(store)
                                                   if e["size"] > 0}
            and all(e["end_offset"] >= cut for e in _shared_metadata(store)), 60,
            lambda: f"the store holds what the metadata lists, none wholly below {cut}: "
                    f"{store.list_segments(partition)} "
                    f"{[(e['base_offset'], e['end_offset'], e['state']) for e in shared]}")
        gone = [i for i, base in before.items() if i not in
                {n.split("-", 1)[1] for n in store.list_segments(partition)}]
        assert gone, "the old leader's copies below the cut are deleted by the new leader"

    finally:
        stop_server(srv)


def _set_segment_bytes(admin, topic: str, size: int) -> None:
    resource = ConfigResource("topic", topic, incremental_configs=[
        ConfigEntry("segment.bytes", str(size), incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([resource])[resource].result(30)


@pytest.mark.processes
def test_a_follower_lists_the_store_only_while_it_waits_for_copies(tmp_path):
    """A follower reads the shared metadata (a LIST and a GET of the store)
    for its local retention: once the leader's copies cover the follower's
    rolled segments, records going on into the active segment make no LIST
    for a while (before: one a second), and segments rolled after that
    still leave the follower's disk, at the next copies."""
    from moto_s3 import moto_s3_server
    with moto_s3_server("follower") as s3:
        config = tmp_path / "tiered.toml"
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          'remote_log_storage_s3_bucket = "follower"\n'
                          f'remote_log_storage_s3_endpoint = "{s3.endpoint}"\n')
        srv = ServerProcess(str(tmp_path / "data"), workers=2,
                            extra_args=["--config", str(config)]).start()
        try:
            topic = "tiered-rf2"
            admin = AdminClient(_kafka(srv))
            admin.create_topics([NewTopic(topic, 1, 2, config={
                "remote.storage.enable": "true", "segment.bytes": str(SEGMENT_BYTES),
                "local.retention.bytes": str(LOCAL_RETENTION_BYTES)})])[topic].result(30)
            replicas = glob.glob(os.path.join(srv.data_dir, "broker-*", f"{topic}-0"))
            assert len(replicas) == 2
            bound = LOCAL_RETENTION_BYTES + 2 * SEGMENT_BYTES

            def within_local_retention(after: int):
                return lambda: all(sum(n for _, n in local_segments(d)) <= bound
                                   and local_segments(d)[0][0] > after for d in replicas)
            _produce(srv, topic, 0, COUNT)
            wait_until(within_local_retention(0), 60, "both replicas within local retention")

            # no segment rolls from here: the follower's rolled ones are copied
            _set_segment_bytes(admin, topic, 1 << 30)
            lists = []
            s3.stop_before = lambda method, path: bool(
                method == "GET" and path.rstrip("/") == "/follower" and lists.append(path))
            producer = ck.Producer({**_kafka(srv), "acks": "all", "linger.ms": 0})
            # 6 s: the old refresh (each second) LISTed 5-6 times, the idle
            # one (each 30 s) at most once
            window_s, started = 6.0, time.monotonic()
            sent = 0
            while time.monotonic() - started < window_s:
                producer.produce(topic, b"%06d:" % (COUNT + sent), partition=0)
                assert producer.flush(10) == 0
                sent += 1
                time.sleep(0.2)     # a record every 200 ms: the replicas active each tick
            listed = len(lists)
            print(f"\nLISTs of the store in {window_s:.0f} s of records into the active "
                  f"segment: {listed}")
            assert listed <= 2, f"{listed} LISTs in {window_s:.0f} s"

            # segments rolled again: the follower reads the copies and drops them
            _set_segment_bytes(admin, topic, SEGMENT_BYTES)
            start = min(local_segments(d)[0][0] for d in replicas)
            _produce(srv, topic, COUNT + sent, COUNT)
            wait_until(within_local_retention(start + COUNT // 2), 60,
                       lambda: "both replicas within local retention again: " + str(
                           [local_segments(d) for d in replicas]))
        finally:
            s3.stop_before = None
            stop_server(srv)
