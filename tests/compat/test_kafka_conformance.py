"""Where Kafka's documented answer is the spec: the byte limits of Fetch,
checked at the wire with exact requests (issue 48's conformance items)."""
from __future__ import annotations

from compat_helpers import KafkaWire, create_topic

from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder


def metadata(server, topic: str) -> dict:
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        return wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}]})
    finally:
        wire.close()


def test_a_fetch_whose_first_batch_overruns_max_bytes_answers_it_alone_and_the_rest_empty(
        server, topic_name):
    """KIP-74: the response holds at least the first partition's first batch
    even when it is larger than the request's max_bytes; the partitions
    after it come back empty and error-free, never INVALID_REQUEST."""
    create_topic(server, topic_name, partitions=4)
    md = metadata(server, topic_name)
    by_leader: dict = {}
    for p in md["topics"][0]["partitions"]:
        by_leader.setdefault(p["leader_id"], []).append(p["partition_index"])
    leader, partitions = max(by_leader.items(), key=lambda kv: len(kv[1]))
    assert len(partitions) >= 2, by_leader
    broker = next(b for b in md["brokers"] if b["node_id"] == leader)
    wire = KafkaWire(f"{broker['host']}:{broker['port']}")
    try:
        for index in partitions:
            b = RecordBatchBuilder()
            b.append(1_700_000_000_000, None, bytes([index]) * 5000)
            resp = wire.request(ApiKey.PRODUCE, 9, {"acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic_name, "partition_data": [
                    {"index": index, "records": bytes(b.build())}]}]})
            assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
        r = wire.request(ApiKey.FETCH, 12, {
            "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1000,
            "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": topic_name, "partitions": [
                {"partition": index, "fetch_offset": 0, "current_leader_epoch": -1,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                for index in partitions]}],
            "forgotten_topics_data": [], "rack_id": ""})
    finally:
        wire.close()
    assert r["error_code"] == 0
    answered = r["responses"][0]["partitions"]
    assert [p["partition_index"] for p in answered] == partitions
    assert [p["error_code"] for p in answered] == [0] * len(partitions)
    first, rest = answered[0], answered[1:]
    assert len(first["records"]) > 5000            # the whole batch, over max_bytes
    assert all(len(p["records"] or b"") == 0 for p in rest)
    assert all(p["high_watermark"] == 1 for p in answered)
