"""Partition leaders verify transactional writes with the coordinator
(KIP-890 part 1): the first batch of a producer's transaction in a
partition is appended only if the coordinator has that partition in the
producer's open transaction, so no stray or late write opens a transaction
that nothing will end (a hanging transaction holding back the LSO)."""
from __future__ import annotations

from compat_helpers import KafkaWire

from harness import create, wait_until
from kafkalite import errors
from kafkalite.client import AdminClient, TopicPartition
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder


def leader(server, topic):
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        md = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}]})
    finally:
        wire.close()
    node = md["topics"][0]["partitions"][0]["leader_id"]
    port = next(b["port"] for b in md["brokers"] if b["node_id"] == node)
    return KafkaWire(f"127.0.0.1:{port}")


def txn_batch(pid, epoch, seq, value=b"v"):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           transactional=True)
    b.append(None, None, value)
    return bytes(b.build())


def produce(wire, topic, records, tid):
    resp = wire.request(ApiKey.PRODUCE, 9, {"transactional_id": tid, "acks": -1,
                                            "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]})
    return resp["responses"][0]["partition_responses"][0]["error_code"]


def open_transactions(server, topic):
    admin = AdminClient(server.config())
    try:
        tp = TopicPartition(topic, 0)
        return [p for p in admin.describe_producers([tp])[tp].result()
                if p.current_transaction_start_offset >= 0]
    finally:
        admin.close()


def test_a_write_outside_the_transaction_is_refused_and_opens_nothing(server, topic_name):
    create(server, topic_name, 1)
    coord = KafkaWire(server.kafka_bootstrap)
    data = leader(server, topic_name)
    try:
        tid = topic_name + "-tx"
        init = coord.request(ApiKey.INIT_PRODUCER_ID, 4, {
            "transactional_id": tid, "transaction_timeout_ms": 60000,
            "producer_id": -1, "producer_epoch": -1})
        pid, epoch = init["producer_id"], init["producer_epoch"]
        # never added: refused, nothing opened
        assert produce(data, topic_name, txn_batch(pid, epoch, 0), tid) == \
            errors.InvalidTxnStateError.code
        assert open_transactions(server, topic_name) == []
        # added: accepted
        coord.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch,
            "v3_and_below_topics": [{"name": topic_name, "partitions": [0]}]})
        assert produce(data, topic_name, txn_batch(pid, epoch, 0), tid) == 0
        assert len(open_transactions(server, topic_name)) == 1
        end = coord.request(ApiKey.END_TXN, 3, {"transactional_id": tid, "producer_id": pid,
                                                "producer_epoch": epoch, "committed": False})
        assert end["error_code"] == 0
        # a late write of the same producer after the abort: refused, no hang
        wait_until(lambda: not open_transactions(server, topic_name), 10,
                   "the aborted transaction's marker")
        assert produce(data, topic_name, txn_batch(pid, epoch, 1, b"late"), tid) == \
            errors.InvalidTxnStateError.code
        assert open_transactions(server, topic_name) == []
        # transactional records without a transactional id in the request
        assert produce(data, topic_name, txn_batch(pid, epoch, 1), None) == \
            errors.InvalidRecordError.code
    finally:
        coord.close()
        data.close()
