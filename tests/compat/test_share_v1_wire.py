"""Share groups' v1 requests (Kafka 4.1's stable versions, the only ones
librdkafka's ShareConsumer sends) at the wire, through the Kafka listener:
ShareFetch v1's MaxRecords caps what one request acquires (0: the request
only acknowledges, and answers at once), its answer carries the lock
duration (AcquisitionLockTimeoutMs) and an empty record set, never a null
one, where nothing was acquired (librdkafka rejects a null one); the
heartbeat, describe and acknowledge v1 are v0's shapes. Without
confluent-kafka: test_share_confluent.py runs the real client.
"""
from __future__ import annotations

import os
import sys
import time

import pytest

from compat_helpers import KafkaWire

from harness import create

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
from test_share_groups import produce, share_server, stopping  # noqa: E402,F401 (a fixture)

from kafkalite.protocol import ApiKey  # noqa: E402

LOCK_MS = 7000


@pytest.mark.processes
def test_share_requests_v1(tmp_path, stopping):
    srv = share_server(tmp_path, group_share_record_lock_duration_ms=LOCK_MS)
    stopping(srv)
    create(srv, "queue", 1)
    produce(srv, "queue", 10, 1)
    wire = KafkaWire(srv.kafka_bootstrap)
    versions = {k["api_key"]: (k["min_version"], k["max_version"])
                for k in wire.request(ApiKey.API_VERSIONS, 3, {
                    "client_software_name": "t", "client_software_version": "1"})["api_keys"]}
    for key in (ApiKey.SHARE_GROUP_HEARTBEAT, ApiKey.SHARE_GROUP_DESCRIBE, ApiKey.SHARE_FETCH,
                ApiKey.SHARE_ACKNOWLEDGE):
        assert versions[key] == (0, 1)
    md = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": "queue"}]})
    tid = md["topics"][0]["topic_id"]
    leader = {b["node_id"]: f"{b['host']}:{b['port']}" for b in md["brokers"]}[
        md["topics"][0]["partitions"][0]["leader_id"]]
    joined = wire.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
        "group_id": "g", "member_id": "m-1", "member_epoch": 0, "rack_id": None,
        "subscribed_topic_names": ["queue"]})
    assert joined["error_code"] == 0 and joined["member_epoch"] >= 1
    assert joined["assignment"]["topic_partitions"] == [{"topic_id": tid, "partitions": [0]}]
    data = KafkaWire(leader)
    try:
        def fetch(epoch, max_records, acks=(), wait_ms=0):
            return data.request(ApiKey.SHARE_FETCH, 1, {
                "group_id": "g", "member_id": "m-1", "share_session_epoch": epoch,
                "max_wait_ms": wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
                "max_records": max_records, "batch_size": 2,
                "topics": [{"topic_id": tid, "partitions": [{
                    "partition_index": 0, "acknowledgement_batches": list(acks)}]}],
                "forgotten_topics_data": []})

        def part(resp):
            assert resp["error_code"] == 0, resp
            return resp["responses"][0]["partitions"][0]

        got = fetch(0, 3)
        assert got["acquisition_lock_timeout_ms"] == LOCK_MS
        assert part(got)["acquired_records"] == [
            {"first_offset": 0, "last_offset": 2, "delivery_count": 1}]
        assert part(got)["records"]
        # MaxRecords 0: the acknowledgement is applied, nothing acquired, no
        # waiting for records that are there
        t0 = time.monotonic()
        got = part(fetch(1, 0, [{"first_offset": 0, "last_offset": 2, "acknowledge_types": [1]}],
                         wait_ms=5000))
        assert time.monotonic() - t0 < 4.0
        assert got["acknowledge_error_code"] == 0 and got["acquired_records"] == []
        assert part(fetch(2, 500))["acquired_records"] == [
            {"first_offset": 3, "last_offset": 9, "delivery_count": 1}]
        # nothing left: an empty record set, not null
        empty = part(fetch(3, 500))
        assert empty["acquired_records"] == [] and empty["records"] == b""
        acked = data.request(ApiKey.SHARE_ACKNOWLEDGE, 1, {
            "group_id": "g", "member_id": "m-1", "share_session_epoch": 4,
            "topics": [{"topic_id": tid, "partitions": [{"partition_index": 0,
                        "acknowledgement_batches": [{"first_offset": 3, "last_offset": 9,
                                                     "acknowledge_types": [1]}]}]}]})
        assert acked["error_code"] == 0
        assert acked["responses"][0]["partitions"][0]["error_code"] == 0
    finally:
        data.close()
    described = wire.request(ApiKey.SHARE_GROUP_DESCRIBE, 1, {
        "group_ids": ["g"], "include_authorized_operations": False})["groups"][0]
    assert described["error_code"] == 0
    assert [m["member_id"] for m in described["members"]] == ["m-1"]
    left = wire.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
        "group_id": "g", "member_id": "m-1", "member_epoch": -1, "rack_id": None,
        "subscribed_topic_names": None})
    assert left["error_code"] == 0
    wire.close()
