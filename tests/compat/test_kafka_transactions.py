"""Transactions through Kafka's own clients, and the transaction APIs at the wire.

confluent-kafka (librdkafka), aiokafka and kafka-python transactional
producers against kafkalite's Kafka listener: commit and abort seen through
read_committed and read_uncommitted consumers, atomic visibility across
partitions, consume-transform-produce with offsets committed in the
transaction, zombie fencing, the transaction timeout, and bad input to each
transaction API answered with Kafka's error code.
"""
from __future__ import annotations

import asyncio
import time

import confluent_kafka as ck
import pytest
from compat_helpers import KafkaWire, create_topic, kafka_conf as conf, read_values

from harness import wait_until

from kafkalite import errors
from kafkalite.protocol import ApiKey


def test_confluent_commit_and_abort_seen_by_read_committed_and_read_uncommitted(server, topic_name):
    create_topic(server, topic_name, 3)
    p = ck.Producer(conf(server, **{"transactional.id": f"{topic_name}-tx"}))
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic_name, b"c1-%d" % i, partition=i % 3)
    p.commit_transaction(15)
    p.begin_transaction()
    for i in range(30):
        p.produce(topic_name, b"ab-%d" % i, partition=i % 3)
    p.flush(15)
    p.abort_transaction(15)
    p.begin_transaction()
    for i in range(6):
        p.produce(topic_name, b"c2-%d" % i, partition=i % 3)
    p.commit_transaction(15)
    committed = read_values(server, topic_name, 3, "read_committed", expect=36)
    everything = read_values(server, topic_name, 3, "read_uncommitted", expect=66)
    assert sorted(committed) == sorted([b"c1-%d" % i for i in range(30)] +
                                       [b"c2-%d" % i for i in range(6)])
    assert sorted(everything) == sorted(committed + [b"ab-%d" % i for i in range(30)])


def test_confluent_open_transaction_is_invisible_until_committed_on_every_partition(server, topic_name):
    create_topic(server, topic_name, 4)
    p = ck.Producer(conf(server, **{"transactional.id": f"{topic_name}-tx"}))
    p.init_transactions(15)
    p.begin_transaction()
    for i in range(40):
        p.produce(topic_name, b"v%d" % i, partition=i % 4)
    p.flush(15)                      # in the log, transaction still open
    # nothing of it shows for a while (what "invisible" can mean to a reader)
    assert read_values(server, topic_name, 4, "read_committed", settle=1.0) == []
    assert len(read_values(server, topic_name, 4, "read_uncommitted", expect=40)) == 40
    p.commit_transaction(15)
    assert sorted(read_values(server, topic_name, 4, "read_committed", expect=40)) == sorted(
        b"v%d" % i for i in range(40))


def test_confluent_consume_transform_produce_commits_offsets_with_the_output(server, topic_name,
                                                                            group_name):
    source, sink = topic_name, topic_name + "-out"
    create_topic(server, source, 2)
    create_topic(server, sink, 2)
    feeder = ck.Producer(conf(server))
    for i in range(100):
        feeder.produce(source, b"in-%d" % i, partition=i % 2)
    feeder.flush(15)

    def process(limit, commit):
        c = ck.Consumer(conf(server, **{"group.id": group_name, "enable.auto.commit": False,
                                       "isolation.level": "read_committed",
                                       "auto.offset.reset": "earliest"}))
        p = ck.Producer(conf(server, **{"transactional.id": f"{topic_name}-ctp"}))
        p.init_transactions(15)
        c.subscribe([source])
        seen, deadline = [], time.monotonic() + 20
        while len(seen) < limit and time.monotonic() < deadline:
            seen += [m for m in c.consume(limit - len(seen), 0.5) if m.error() is None]
        p.begin_transaction()
        for m in seen:
            p.produce(sink, m.value().replace(b"in", b"out"), partition=m.partition())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 15)
        (p.commit_transaction if commit else p.abort_transaction)(15)
        c.close()
        return len(seen)

    assert process(100, commit=False) == 100     # aborted: output and offsets both gone
    # (nothing of the aborted output shows for a while)
    assert read_values(server, sink, 2, "read_committed", settle=1.0) == []
    assert process(100, commit=True) == 100      # from the start again, committed this time
    out = read_values(server, sink, 2, "read_committed", expect=100)
    assert sorted(out) == sorted(b"out-%d" % i for i in range(100))
    c = ck.Consumer(conf(server, **{"group.id": group_name}))
    committed = c.committed([ck.TopicPartition(source, 0), ck.TopicPartition(source, 1)], 10)
    c.close()
    assert [tp.offset for tp in committed] == [50, 50]


def test_confluent_zombie_is_fenced_and_nothing_it_sends_after_becomes_visible(server, topic_name):
    create_topic(server, topic_name, 1)
    tid = f"{topic_name}-tx"
    zombie = ck.Producer(conf(server, **{"transactional.id": tid}))
    zombie.init_transactions(15)
    zombie.begin_transaction()
    zombie.produce(topic_name, b"zombie-before", partition=0)
    zombie.flush(15)
    fresh = ck.Producer(conf(server, **{"transactional.id": tid}))
    fresh.init_transactions(15)          # fences the zombie and aborts its transaction
    fresh.begin_transaction()
    fresh.produce(topic_name, b"fresh", partition=0)
    fresh.commit_transaction(15)
    zombie.produce(topic_name, b"zombie-after", partition=0)
    with pytest.raises(ck.KafkaException) as fenced:
        zombie.commit_transaction(10)
    # fenced is fatal: librdkafka takes INVALID_PRODUCER_EPOCH on Produce for it
    assert fenced.value.args[0].fatal(), fenced.value.args[0]
    assert fenced.value.args[0].code() in (
        ck.KafkaError._FENCED, ck.KafkaError.PRODUCER_FENCED, ck.KafkaError.INVALID_PRODUCER_EPOCH)
    assert read_values(server, topic_name, 1, "read_committed", expect=1) == [b"fresh"]


def test_a_producer_that_stops_mid_transaction_is_aborted_after_its_timeout(server, topic_name):
    create_topic(server, topic_name, 1)
    stuck = ck.Producer(conf(server, **{"transactional.id": f"{topic_name}-stuck",
                                       "transaction.timeout.ms": 1500,
                                       "socket.timeout.ms": 1500}))
    stuck.init_transactions(15)
    stuck.begin_transaction()
    stuck.produce(topic_name, b"never", partition=0)
    stuck.flush(15)
    other = ck.Producer(conf(server))
    other.produce(topic_name, b"plain", partition=0)
    other.flush(15)
    # held back by the open transaction (the LSO stays at its first offset)...
    assert read_values(server, topic_name, 1, "read_committed", settle=0.5) == []
    wire = KafkaWire(server.kafka_bootstrap)

    def state() -> str:
        return wire.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [
            f"{topic_name}-stuck"]})["transaction_states"][0]["transaction_state"]
    try:
        # ...until the coordinator aborts it, past its timeout
        wait_until(lambda: state() == "CompleteAbort", timeout=15,
                   message="the coordinator to abort the timed-out transaction")
    finally:
        wire.close()
    assert read_values(server, topic_name, 1, "read_committed", expect=1) == [b"plain"]


def test_aiokafka_transactional_producer_and_read_committed_consumer(server, topic_name):
    aiokafka = pytest.importorskip("aiokafka")
    create_topic(server, topic_name, 2)

    async def go():
        p = aiokafka.AIOKafkaProducer(bootstrap_servers=server.kafka_bootstrap,
                                      transactional_id=f"{topic_name}-aio")
        await p.start()
        try:
            async with p.transaction():
                for i in range(10):
                    await p.send(topic_name, b"ok-%d" % i, partition=i % 2)
            await p.begin_transaction()
            for i in range(10):
                await p.send(topic_name, b"no-%d" % i, partition=i % 2)
            await p.abort_transaction()
        finally:
            await p.stop()
        c = aiokafka.AIOKafkaConsumer(topic_name, bootstrap_servers=server.kafka_bootstrap,
                                      isolation_level="read_committed",
                                      auto_offset_reset="earliest", group_id=None)
        await c.start()
        try:
            got = []
            deadline = time.monotonic() + 15
            while len(got) < 10 and time.monotonic() < deadline:
                batches = await c.getmany(timeout_ms=500)
                for msgs in batches.values():
                    got += [m.value for m in msgs]
            await asyncio.sleep(0.5)     # an aborted record let through would come now
            for msgs in (await c.getmany(timeout_ms=500)).values():
                got += [m.value for m in msgs]
            return got
        finally:
            await c.stop()

    got = asyncio.run(go())
    assert sorted(got) == sorted(b"ok-%d" % i for i in range(10))
    assert sorted(read_values(server, topic_name, 2, "read_uncommitted", expect=20)) == sorted(
        [b"ok-%d" % i for i in range(10)] + [b"no-%d" % i for i in range(10)])


def test_kafka_python_transactional_producer(server, topic_name):
    kafka = pytest.importorskip("kafka")
    create_topic(server, topic_name, 1)
    p = kafka.KafkaProducer(bootstrap_servers=server.kafka_bootstrap,
                            transactional_id=f"{topic_name}-kp")
    try:
        p.init_transactions()
        p.begin_transaction()
        for i in range(5):
            p.send(topic_name, b"yes-%d" % i, partition=0)
        p.commit_transaction()
        p.begin_transaction()
        for i in range(5):
            p.send(topic_name, b"no-%d" % i, partition=0)
        p.flush()
        p.abort_transaction()
    finally:
        p.close()
    c = kafka.KafkaConsumer(bootstrap_servers=server.kafka_bootstrap,
                            isolation_level="read_committed", auto_offset_reset="earliest")
    tp = kafka.TopicPartition(topic_name, 0)
    c.assign([tp])
    c.seek_to_beginning()
    got = []
    try:
        # read to the last stable offset (past the abort marker): every
        # record a read_committed consumer may see, the aborted ones skipped
        end = c.end_offsets([tp])[tp]

        def at_end() -> bool:
            got.extend(m.value for ms in c.poll(200).values() for m in ms)
            return c.position(tp) >= end
        wait_until(at_end, timeout=15, message=lambda: f"the end offset {end}; read {got}")
    finally:
        c.close()
    assert got == [b"yes-%d" % i for i in range(5)]


# ---- the transaction APIs at the wire -------------------------------------------------------

def init_producer_id(wire, tid, timeout_ms=60000, version=4):
    return wire.request(ApiKey.INIT_PRODUCER_ID, version, {
        "transactional_id": tid, "transaction_timeout_ms": timeout_ms,
        "producer_id": -1, "producer_epoch": -1})


def test_bad_transaction_requests_get_kafkas_error_codes_and_change_nothing(server, topic_name,
                                                                          group_name):
    create_topic(server, topic_name, 1)
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        tid = f"{topic_name}-wire"
        unknown, missing = f"{group_name}-unknown", f"{topic_name}-missing"
        assert init_producer_id(wire, "x" * 5000)["error_code"] == errors.InvalidRequestError.code
        assert init_producer_id(wire, "")["error_code"] == errors.InvalidRequestError.code
        assert init_producer_id(wire, tid, timeout_ms=10**9)["error_code"] == \
            errors.InvalidTransactionTimeoutError.code
        ok = init_producer_id(wire, tid)
        assert ok["error_code"] == 0
        pid, epoch = ok["producer_id"], ok["producer_epoch"]
        # EndTxn with no transaction open
        end = wire.request(ApiKey.END_TXN, 3, {"transactional_id": tid, "producer_id": pid,
                                               "producer_epoch": epoch, "committed": True})
        assert end["error_code"] == errors.InvalidTxnStateError.code
        # AddPartitionsToTxn naming an unknown topic: nothing is added
        added = wire.request(ApiKey.ADD_PARTITIONS_TO_TXN, 3, {
            "v3_and_below_transactional_id": tid, "v3_and_below_producer_id": pid,
            "v3_and_below_producer_epoch": epoch, "v3_and_below_topics": [
                {"name": missing, "partitions": [0]},
                {"name": topic_name, "partitions": [0]}]})
        codes = {(t["name"], p["partition_index"]): p["partition_error_code"]
                 for t in added["results_by_topic_v3_and_below"] for p in t["results_by_partition"]}
        assert codes == {(missing, 0): errors.UnknownTopicOrPartitionError.code,
                         (topic_name, 0): errors.OperationNotAttemptedError.code}
        described = wire.request(ApiKey.DESCRIBE_TRANSACTIONS, 0, {"transactional_ids": [tid]})
        assert described["transaction_states"][0]["transaction_state"] == "Empty"
        # a wrong producer id, an old epoch
        bad_pid = wire.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": tid, "producer_id": pid + 1000, "producer_epoch": epoch,
            "group_id": group_name})
        assert bad_pid["error_code"] == errors.InvalidProducerIdMappingError.code
        assert init_producer_id(wire, tid)["producer_epoch"] == epoch + 1
        stale = wire.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
            "group_id": group_name})
        assert stale["error_code"] == errors.ProducerFencedError.code
        # TxnOffsetCommit for a group the transaction did not add, and for an
        # unknown group with a generation
        commit = wire.request(ApiKey.TXN_OFFSET_COMMIT, 3, {
            "transactional_id": tid, "group_id": unknown, "producer_id": pid,
            "producer_epoch": epoch + 1, "generation_id": 5, "member_id": "m",
            "group_instance_id": None, "topics": [{"name": topic_name, "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        assert commit["topics"][0]["partitions"][0]["error_code"] == errors.InvalidTxnStateError.code
        wire.request(ApiKey.ADD_OFFSETS_TO_TXN, 3, {
            "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch + 1,
            "group_id": unknown})
        commit = wire.request(ApiKey.TXN_OFFSET_COMMIT, 3, {
            "transactional_id": tid, "group_id": unknown, "producer_id": pid,
            "producer_epoch": epoch + 1, "generation_id": 5, "member_id": "m",
            "group_instance_id": None, "topics": [{"name": topic_name, "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        assert commit["topics"][0]["partitions"][0]["error_code"] == errors.IllegalGenerationError.code
        # (this producer's only: the server's other transactions are other tests')
        listed = wire.request(ApiKey.LIST_TRANSACTIONS, 1, {
            "state_filters": ["Ongoing", "Bogus"], "producer_id_filters": [pid],
            "duration_filter": -1})
        assert listed["unknown_state_filters"] == ["Bogus"]
        assert [t["transactional_id"] for t in listed["transaction_states"]] == [tid]
        # nothing was committed for the group
        fetched = wire.request(ApiKey.OFFSET_FETCH, 7, {"group_id": unknown, "topics": [
            {"name": topic_name, "partition_indexes": [0]}], "require_stable": False})
        assert fetched["topics"][0]["partitions"][0]["committed_offset"] == -1
    finally:
        wire.close()
