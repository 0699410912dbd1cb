"""The Kafka listener at the wire: ApiVersions rules, framing errors, node
ids, and idempotent producer state (duplicates, sequences, epochs, restart)."""
from __future__ import annotations

import struct

import pytest
from compat_helpers import KafkaWire, create_topic, native_read

from harness import wait_until

from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey, encode_request
from kafkalite.record import RecordBatchBuilder


def leader_address(server, topic: str, partition: int = 0) -> str:
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        md = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}]})
    finally:
        wire.close()
    leader = md["topics"][0]["partitions"][partition]["leader_id"]
    broker = next(b for b in md["brokers"] if b["node_id"] == leader)
    return f"{broker['host']}:{broker['port']}"


def batch(values, producer_id=-1, epoch=-1, sequence=-1) -> bytes:
    b = RecordBatchBuilder(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence)
    for v in values:
        b.append(1_700_000_000_000, None, v)
    return bytes(b.build())


def produce(wire, topic, records, version=9) -> dict:
    resp = wire.request(ApiKey.PRODUCE, version, {"acks": -1, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return resp["responses"][0]["partition_responses"][0]


def test_api_versions_same_ranges_everywhere_and_v0_answer_to_a_newer_version(server):
    addresses = [server.kafka_bootstrap] + [
        f"127.0.0.1:{b['port']}" for b in server.refresh()["kafka_brokers"]]
    seen = []
    for address in addresses:
        wire = KafkaWire(address)
        try:
            resp = wire.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                        "client_software_version": "1"})
            assert resp["error_code"] == 0
            seen.append({k["api_key"]: (k["min_version"], k["max_version"])
                         for k in resp["api_keys"]})
            # ApiVersions v9 does not exist: a v0 response with UNSUPPORTED_VERSION and the list.
            frame = struct.pack(">hhih", ApiKey.API_VERSIONS, 9, 77, 1) + b"x" + b"\x00" * 5
            wire.send_frame(frame)
            reply = wire.recv_frame()
            correlation, error = struct.unpack_from(">ih", reply)
            assert (correlation, error) == (77, 35)
        finally:
            wire.close()
    assert all(s == seen[0] for s in seen)
    for key in (ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.METADATA, ApiKey.INIT_PRODUCER_ID,
                ApiKey.CREATE_TOPICS, ApiKey.OFFSET_FOR_LEADER_EPOCH, ApiKey.FIND_COORDINATOR):
        assert seen[0][key] == SUPPORTED_VERSIONS[key]


def test_oversized_and_malformed_frames_close_only_that_connection(server):
    healthy = KafkaWire(server.kafka_bootstrap)
    try:
        for frame_prefix in (struct.pack(">i", 200 * 1024 * 1024), struct.pack(">i", -5)):
            bad = KafkaWire(server.kafka_bootstrap)
            bad.sock.sendall(frame_prefix + b"\x00" * 16)
            with pytest.raises((ConnectionError, OSError)):
                bad.recv_frame()
            bad.close()
        bad = KafkaWire(server.kafka_bootstrap)
        bad.send_frame(encode_request(ApiKey.METADATA, 12, 1, "x", {"topics": None})[:-3])
        with pytest.raises((ConnectionError, OSError)):
            bad.recv_frame()
        bad.close()
        assert healthy.request(ApiKey.METADATA, 12, {"topics": None})["controller_id"] in (0, 1)
    finally:
        healthy.close()


def test_metadata_names_the_workers_as_brokers_and_they_relay_to_the_supervisor(server,
                                                                                topic_name):
    """Every broker Metadata lists can hold replicas: the workers. The
    supervisor, which holds none, answers at the bootstrap address but is
    not listed; the controller and the coordinators named are workers, and
    a request only the supervisor serves, sent to one, is relayed."""
    create_topic(server, topic_name, partitions=4)
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        md = wire.request(ApiKey.METADATA, 12, {"topics": [
            {"name": topic_name}, {"name": "__consumer_offsets"}]})
        keys = [f"g{i}" for i in range(8)]
        coordinators = wire.request(ApiKey.FIND_COORDINATOR, 4, {"key_type": 0,
                                                                 "coordinator_keys": keys})
        cluster = wire.request(ApiKey.DESCRIBE_CLUSTER, 0, {
            "include_cluster_authorized_operations": False})
    finally:
        wire.close()
    brokers = {b["node_id"]: f"{b['host']}:{b['port']}" for b in md["brokers"]}
    assert set(brokers) == {0, 1}
    assert md["controller_id"] in brokers
    assert {b["broker_id"] for b in cluster["brokers"]} == {0, 1}
    assert cluster["controller_id"] in brokers
    topic, offsets = md["topics"]
    assert {p["leader_id"] for p in topic["partitions"]} == {0, 1}
    assert offsets["is_internal"] and {p["leader_id"] for p in offsets["partitions"]} <= {0, 1}
    named = {c["node_id"] for c in coordinators["coordinators"]}
    assert named <= {0, 1} and len(named) == 2        # spread over the brokers by key
    for c in coordinators["coordinators"]:
        assert c["error_code"] == 0 and f"{c['host']}:{c['port']}" == brokers[c["node_id"]]
    # the coordinator named is a worker: it relays a group request to the supervisor
    c = coordinators["coordinators"][0]
    worker = KafkaWire(brokers[c["node_id"]])
    try:
        r = worker.request(ApiKey.OFFSET_FETCH, 8, {"groups": [
            {"group_id": c["key"], "topics": None}], "require_stable": False})
        assert r["groups"][0]["error_code"] == 0
        created = worker.request(ApiKey.CREATE_TOPICS, 7, {"topics": [
            {"name": topic_name + "-via-worker", "num_partitions": 2, "replication_factor": 1,
             "assignments": [], "configs": []}], "timeout_ms": 10000, "validate_only": False})
        assert created["topics"][0]["error_code"] == 0
    finally:
        worker.close()


def test_retried_batch_is_acknowledged_once_and_sequences_are_checked(server, topic_name):
    create_topic(server, topic_name)
    boot = KafkaWire(server.kafka_bootstrap)
    try:
        ids = [boot.request(ApiKey.INIT_PRODUCER_ID, 4, {"transactional_id": None,
                                                         "transaction_timeout_ms": 60000,
                                                         "producer_id": -1,
                                                         "producer_epoch": -1})
               for _ in range(2)]
    finally:
        boot.close()
    assert [r["error_code"] for r in ids] == [0, 0]
    pid = ids[0]["producer_id"]
    assert ids[1]["producer_id"] != pid
    wire = KafkaWire(leader_address(server, topic_name))
    try:
        first = batch([b"a", b"b", b"c"], pid, 0, 0)
        assert produce(wire, topic_name, first)["base_offset"] == 0
        assert produce(wire, topic_name, batch([b"d"], pid, 0, 3))["base_offset"] == 3
        retry = produce(wire, topic_name, first)           # a retry of an acknowledged batch
        assert (retry["error_code"], retry["base_offset"]) == (0, 0)
        gap = produce(wire, topic_name, batch([b"x"], pid, 0, 9))
        assert gap["error_code"] == 45                      # OUT_OF_ORDER_SEQUENCE_NUMBER
        bump = produce(wire, topic_name, batch([b"e"], pid, 1, 0))
        assert (bump["error_code"], bump["base_offset"]) == (0, 4)
        stale = produce(wire, topic_name, batch([b"y"], pid, 0, 4))
        assert stale["error_code"] == 47                    # INVALID_PRODUCER_EPOCH
        plain = produce(wire, topic_name, batch([b"f"]))
        assert (plain["error_code"], plain["base_offset"]) == (0, 5)
    finally:
        wire.close()
    assert [r[3] for r in native_read(server, topic_name, 1, 6)] == [
        b"a", b"b", b"c", b"d", b"e", b"f"]


def test_producer_state_survives_a_worker_restart(own_server, topic_name):
    """(A server of the test's own: it kills a worker.)"""
    import os
    import signal
    server = own_server
    create_topic(server, topic_name)
    wire = KafkaWire(leader_address(server, topic_name))
    pid = 424242
    try:
        assert produce(wire, topic_name, batch([b"1", b"2"], pid, 3, 0))["base_offset"] == 0
    finally:
        wire.close()
    boot = KafkaWire(server.kafka_bootstrap)
    md = boot.request(ApiKey.METADATA, 12, {"topics": [{"name": topic_name}]})
    boot.close()
    index = md["topics"][0]["partitions"][0]["leader_id"]
    old = server.worker_pid(index)
    os.kill(old, signal.SIGKILL)
    server.wait_for_worker_restart(index, old)

    def retried():
        """The batch sent again to the partition's leader, once it serves."""
        try:
            w = KafkaWire(leader_address(server, topic_name))
        except (ConnectionError, OSError, StopIteration, AssertionError):
            return None
        try:
            return w, produce(w, topic_name, batch([b"1", b"2"], pid, 3, 0))
        except (ConnectionError, OSError, StopIteration, AssertionError):
            w.close()
            return None
    wire, retry = wait_until(retried, 20, "the restarted leader to answer", interval=0.2)
    try:
        assert (retry["error_code"], retry["base_offset"]) == (0, 0)
        assert produce(wire, topic_name, batch([b"3"], pid, 3, 5))["error_code"] == 45
        assert produce(wire, topic_name, batch([b"3"], pid, 3, 2))["base_offset"] == 2
    finally:
        wire.close()
