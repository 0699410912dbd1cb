"""Transactions v2 (KIP-890 part 2) on Kafka's wire, as a Kafka 4 client
speaks it: the broker finalizes transaction.version=2 in ApiVersions; the
producer adds partitions by producing to them (Produce v12) and group
offsets by committing them (TxnOffsetCommit v5), never with
AddPartitionsToTxn / AddOffsetsToTxn; every EndTxn v5 bumps the epoch and
hands the next one back, so a late write of an ended transaction is refused
wherever it lands.

No Kafka 4 client is installable here (librdkafka has no KIP-890 part 2;
the Java client is not on PyPI), so these tests speak the protocol with the
project's codec over a real socket to the real server; the Kafka clients
that speak transactions v1 (confluent-kafka, aiokafka, kafka-python,
kafkajs) keep passing their own tests against the same broker.
"""
from __future__ import annotations

import os
import time

import confluent_kafka as ck
import pytest
from compat_helpers import KafkaWire, kafka_conf, read_values

from harness import create, wait_until
from kafkalite import errors
from kafkalite.client import AdminClient, TopicPartition
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder


def batch(pid, epoch, seq, values):
    b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                           transactional=True)
    for v in values:
        b.append(None, None, v)
    return bytes(b.build())


class Leaders:
    """A Kafka-wire connection per partition leader of a topic."""

    def __init__(self, server, topic):
        wire = KafkaWire(server.kafka_bootstrap)
        try:
            md = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}]})
        finally:
            wire.close()
        ports = {b["node_id"]: b["port"] for b in md["brokers"]}
        self.by_node = {}
        self.of = {}
        for p in md["topics"][0]["partitions"]:
            node = p["leader_id"]
            if node not in self.by_node:
                self.by_node[node] = KafkaWire(f"127.0.0.1:{ports[node]}")
            self.of[p["partition_index"]] = self.by_node[node]

    def produce(self, topic, partition, records, tid, version=12):
        resp = self.of[partition].request(ApiKey.PRODUCE, version, {
            "transactional_id": tid, "acks": -1, "timeout_ms": 5000, "topic_data": [
                {"name": topic, "partition_data": [{"index": partition, "records": records}]}]})
        return resp["responses"][0]["partition_responses"][0]["error_code"]

    def close(self):
        for w in self.by_node.values():
            w.close()


def init(coord, tid):
    r = coord.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": tid,
                                                   "transaction_timeout_ms": 60000,
                                                   "producer_id": -1, "producer_epoch": -1})
    assert r["error_code"] == 0
    return r["producer_id"], r["producer_epoch"]


def end(coord, tid, pid, epoch, commit, version=5):
    return coord.request(ApiKey.END_TXN, version, {"transactional_id": tid, "producer_id": pid,
                                                   "producer_epoch": epoch, "committed": commit})


def open_transactions(server, topic, partitions):
    admin = AdminClient(server.config())
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        found = admin.describe_producers(tps)
        return [s for tp in tps for s in found[tp].result() if s.current_transaction_start_offset >= 0]
    finally:
        admin.close()


def settled(server, topic, partitions, timeout=10.0):
    """True once no partition of ``topic`` has an open transaction (its
    markers are in); fails the test after ``timeout``."""
    return wait_until(lambda: not open_transactions(server, topic, partitions), timeout,
                      message=lambda: f"no open transaction on {topic}: "
                                      f"{open_transactions(server, topic, partitions)}")


@pytest.fixture
def v2(server, topic_name):
    """A topic of 2 partitions, a transactional id, a connection to the
    coordinator and one to each partition leader."""
    create(server, topic_name, 2)
    coord = KafkaWire(server.kafka_bootstrap)
    leaders = Leaders(server, topic_name)
    yield topic_name, topic_name + "-tx", coord, leaders
    coord.close()
    leaders.close()


def test_the_broker_finalizes_transaction_version_2(server):
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        # v4: the supported range starts at level 0, which v3 answers leave
        # out (KAFKA-17011); the finalized level is in both
        r = wire.request(ApiKey.API_VERSIONS, 4, {"client_software_name": "t",
                                                   "client_software_version": "1"})
    finally:
        wire.close()
    assert {"name": "transaction.version", "max_version_level": 2, "min_version_level": 2} in \
        r["finalized_features"]
    assert any(f["name"] == "transaction.version" and f["max_version"] == 2
               for f in r["supported_features"])
    ranges = {k["api_key"]: k["max_version"] for k in r["api_keys"]}
    assert ranges[ApiKey.PRODUCE] == 13 and ranges[ApiKey.END_TXN] == 5
    assert ranges[ApiKey.TXN_OFFSET_COMMIT] == 5 and ranges[ApiKey.ADD_PARTITIONS_TO_TXN] == 5


def test_a_v2_transaction_adds_by_producing_bumps_its_epoch_and_fences_its_late_writes(server, v2):
    topic_name, tid, coord, leaders = v2
    group = topic_name + "-g"
    pid, epoch = init(coord, tid)
    # no AddPartitionsToTxn: Produce v12 adds each partition
    assert leaders.produce(topic_name, 0, batch(pid, epoch, 0, [b"a0", b"a1"]), tid) == 0
    assert leaders.produce(topic_name, 1, batch(pid, epoch, 0, [b"b0"]), tid) == 0
    assert len(open_transactions(server, topic_name, 2)) == 2
    # no AddOffsetsToTxn: TxnOffsetCommit v5 adds the group's offsets
    toc = coord.request(ApiKey.TXN_OFFSET_COMMIT, 5, {
        "transactional_id": tid, "group_id": group, "producer_id": pid,
        "producer_epoch": epoch, "generation_id": -1, "member_id": "",
        "group_instance_id": None, "topics": [{"name": topic_name, "partitions": [
            {"partition_index": 0, "committed_offset": 42, "committed_leader_epoch": -1,
             "committed_metadata": None}]}]})
    assert toc["topics"][0]["partitions"][0]["error_code"] == 0
    r = end(coord, tid, pid, epoch, True)
    assert r["error_code"] == 0
    assert (r["producer_id"], r["producer_epoch"]) == (pid, epoch + 1)
    # EndTxn retried with the epoch it was sent with: the same answer
    again = end(coord, tid, pid, epoch, True)
    assert again["error_code"] == 0
    assert (again["producer_id"], again["producer_epoch"]) == (pid, epoch + 1)
    assert settled(server, topic_name, 2)
    # the ended transaction's late write, with the epoch it had: refused,
    # and nothing opens
    late = batch(pid, epoch, 1, [b"late"])
    assert leaders.produce(topic_name, 1, late, tid) == (
        errors.InvalidProducerEpochError.code)     # Produce never answers PRODUCER_FENCED
    assert settled(server, topic_name, 2)
    assert sorted(read_values(server, topic_name, 2, "read_committed", expect=3)) == [
        b"a0", b"a1", b"b0"]
    admin = AdminClient(server.config())
    try:
        committed = admin.list_consumer_group_offsets(group).result()
    finally:
        admin.close()
    assert {(tp.topic, tp.partition): tp.offset for tp in committed} == {(topic_name, 0): 42}


def test_the_next_v2_transaction_starts_at_once_and_aborts_cleanly(server, v2):
    topic_name, tid, coord, leaders = v2
    pid, epoch = init(coord, tid)
    values = []
    for i in range(20):
        # each transaction starts right after the last EndTxn: its first
        # write waits at the coordinator for the last markers, never fails
        assert leaders.produce(topic_name, 0, batch(pid, epoch, 0, [b"t%d" % i]), tid) == 0
        commit = i % 3 != 2
        r = end(coord, tid, pid, epoch, commit)
        assert r["error_code"] == 0 and r["producer_id"] == pid
        assert r["producer_epoch"] == epoch + 1
        epoch = r["producer_epoch"]
        if commit:
            values.append(b"t%d" % i)
    assert settled(server, topic_name, 1)
    assert read_values(server, topic_name, 1, "read_committed", expect=len(values)) == values
    # an abort with nothing written still moves the epoch on; a commit
    # with nothing written is not a transaction
    r = end(coord, tid, pid, epoch, False)
    assert r["error_code"] == 0 and r["producer_epoch"] == epoch + 1
    epoch = r["producer_epoch"]
    assert end(coord, tid, pid, epoch, True)["error_code"] == errors.InvalidTxnStateError.code
    # a v1 EndTxn of the same producer: no bump, nothing handed back
    assert leaders.produce(topic_name, 0, batch(pid, epoch, 0, [b"v1"]), tid) == 0
    r = end(coord, tid, pid, epoch, True, version=3)
    assert r["error_code"] == 0
    assert leaders.produce(topic_name, 0, batch(pid, epoch, 1, [b"v1-again"]), tid) == 0
    # (v1: no epoch bump, so while the last commit's marker is not in the
    # partition, this write is the same transaction's; its EndTxn is then
    # told CONCURRENT_TRANSACTIONS until the markers are written, and
    # retried as Kafka's clients do -- seen on a loaded machine)
    code = wait_until(lambda: (lambda c: None if c == errors.ConcurrentTransactionsError.code
                               else (c,))(end(coord, tid, pid, epoch, True,
                                              version=4)["error_code"]),
                      message="an EndTxn v4 without CONCURRENT_TRANSACTIONS")[0]
    assert code == 0
    assert settled(server, topic_name, 1)
    assert read_values(server, topic_name, 1, "read_committed",
                       expect=len(values) + 2)[-2:] == [b"v1", b"v1-again"]


def test_a_fenced_v2_producer_cannot_end_or_write_and_a_v1_client_still_works(server, v2):
    topic_name, tid, coord, leaders = v2
    pid, epoch = init(coord, tid)
    assert leaders.produce(topic_name, 0, batch(pid, epoch, 0, [b"zombie"]), tid) == 0
    # a new producer takes the id: the open transaction is aborted (retried
    # while the coordinator answers CONCURRENT_TRANSACTIONS, as clients do)
    def init_again():
        r = coord.request(ApiKey.INIT_PRODUCER_ID, 5, {
            "transactional_id": tid, "transaction_timeout_ms": 60000,
            "producer_id": -1, "producer_epoch": -1})
        return r if r["error_code"] != errors.ConcurrentTransactionsError.code else None
    r = wait_until(init_again, message="InitProducerId without CONCURRENT_TRANSACTIONS")
    assert r["error_code"] == 0 and r["producer_epoch"] > epoch + 1
    assert end(coord, tid, pid, epoch, True)["error_code"] == errors.ProducerFencedError.code
    assert leaders.produce(topic_name, 0, batch(pid, epoch, 1, [b"zombie2"]), tid) == (
        errors.InvalidProducerEpochError.code)     # Produce never answers PRODUCER_FENCED
    assert settled(server, topic_name, 1)
    # confluent-kafka (transactions v1) on the same broker, same topic
    p = ck.Producer(kafka_conf(server, **{"transactional.id": tid + "-ck"}))
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic_name, b"ck", partition=0)
    p.commit_transaction(15)
    p.flush(5)
    assert read_values(server, topic_name, 1, "read_committed", expect=1) == [b"ck"]


def test_a_v2_producers_first_write_to_a_partition_must_start_at_sequence_0(server, v2):
    """Kafka's rule for a transactions v2 write the leader just verified
    (added) with the coordinator: with no state of the producer in the
    partition it must start at sequence 0 (OUT_OF_ORDER_SEQUENCE_NUMBER
    otherwise). Accepted, a first write at sequence 5 tells the client its
    batches 0-4 -- which the partition never saw -- were delivered."""
    topic_name, tid, coord, leaders = v2
    pid, epoch = init(coord, tid)
    assert leaders.produce(topic_name, 0, batch(pid, epoch, 5, [b"gap"]), tid) == (
        errors.OutOfOrderSequenceNumberError.code)
    assert leaders.produce(topic_name, 0, batch(pid, epoch, 0, [b"s0"]), tid) == 0
    assert leaders.produce(topic_name, 0, batch(pid, epoch, 1, [b"s1"]), tid) == 0
    assert end(coord, tid, pid, epoch, True)["error_code"] == 0
    assert settled(server, topic_name, 2)
    assert read_values(server, topic_name, 2, "read_committed", expect=2) == [b"s0", b"s1"]
    # an idempotent producer (no transaction) new to a partition still
    # starts where it likes: its state may have gone with retention
    idem = coord.request(ApiKey.INIT_PRODUCER_ID, 5, {
        "transactional_id": None, "transaction_timeout_ms": 60000,
        "producer_id": -1, "producer_epoch": -1})
    b = RecordBatchBuilder(producer_id=idem["producer_id"],
                           producer_epoch=idem["producer_epoch"], base_sequence=5)
    b.append(None, None, b"idempotent")
    assert leaders.produce(topic_name, 1, bytes(b.build()), None) == 0


@pytest.mark.processes
def test_the_next_transactions_first_write_waits_for_the_last_markers(tmp_path):
    """Transaction n ended (EndTxn answered) but its marker in partition 0
    cannot be written yet (that worker is stopped): the first write of
    transaction n+1 to partition 1, on the other worker, waits at the
    coordinator until the marker is in, then goes through."""
    import signal
    import threading

    from harness import ServerProcess
    srv = ServerProcess(str(tmp_path / "data"), workers=2).start()
    coord = leaders = None
    stopped = None
    try:
        topic = "deferred"
        create(srv, topic, 2)
        tid = "deferred-tx"
        coord = KafkaWire(srv.kafka_bootstrap)
        leaders = Leaders(srv, topic)
        assert leaders.of[0] is not leaders.of[1]
        pid, epoch = init(coord, tid)
        assert leaders.produce(topic, 0, batch(pid, epoch, 0, [b"n"]), tid) == 0
        # the worker leading partition 0 stops: its marker cannot be written
        wire = KafkaWire(srv.kafka_bootstrap)
        try:
            md = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}]})
        finally:
            wire.close()
        lead0 = next(p["leader_id"] for p in md["topics"][0]["partitions"]
                     if p["partition_index"] == 0)
        stopped = srv.worker_pid(lead0)
        os.kill(stopped, signal.SIGSTOP)
        r = end(coord, tid, pid, epoch, True)
        assert r["error_code"] == 0
        epoch = r["producer_epoch"]
        result = {}
        t = threading.Thread(target=lambda: result.setdefault(
            "code", leaders.produce(topic, 1, batch(pid, epoch, 0, [b"n+1"]), tid)))
        t.start()
        t.join(1.5)          # the time it is seen waiting (the marker cannot come)
        assert t.is_alive(), "the write did not wait for the last transaction's markers"
        os.kill(stopped, signal.SIGCONT)
        stopped = None
        t.join(15)
        assert result.get("code") == 0
        assert end(coord, tid, pid, epoch, True)["error_code"] == 0
        assert settled(srv, topic, 2)
        assert sorted(read_values(srv, topic, 2, "read_committed", expect=2)) == [b"n", b"n+1"]
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        for c in (coord, leaders):
            if c is not None:
                c.close()
        srv.stop()


@pytest.mark.processes
def test_when_epochs_run_out_a_v2_producer_moves_to_a_new_producer_id(tmp_path):
    """A transactional id whose epoch is one short of the last usable one
    (32766; stored as the coordinator would have after 32,765 transactions):
    the EndTxn v5 that ends its next transaction writes the markers with the
    old producer id at epoch 32767 and hands the producer a new id at epoch
    0, with which it carries on -- also after the server restarts."""
    from harness import ServerProcess
    from kafkalite.server.txn.txn_coordinator import TxnState
    from kafkalite.server.txn.txn_log import TransactionStateLog

    data = str(tmp_path / "data")
    os.makedirs(data)
    tid, old_pid = "worn-out", 10**12
    store = TransactionStateLog(data, 4)       # the server's transaction_state_num_partitions
    store.write(tid, {"producer_id": old_pid, "producer_epoch": 32765,
                      "transaction_timeout_ms": 60000, "transaction_status": int(TxnState.EMPTY),
                      "transaction_partitions": [], "transaction_last_update_timestamp_ms":
                      int(time.time() * 1000), "transaction_start_timestamp_ms": -1},
                int(time.time() * 1000))
    store.close()
    srv = ServerProcess(data, workers=1).start()
    coord = leaders = None
    try:
        topic = "worn"
        create(srv, topic, 1)
        coord = KafkaWire(srv.kafka_bootstrap)
        leaders = Leaders(srv, topic)
        pid, epoch = init(coord, tid)
        assert (pid, epoch) == (old_pid, 32766)
        assert leaders.produce(topic, 0, batch(pid, epoch, 0, [b"last of the old id"]), tid) == 0
        r = end(coord, tid, pid, epoch, True)
        assert r["error_code"] == 0
        new_pid, new_epoch = r["producer_id"], r["producer_epoch"]
        assert new_pid != old_pid and new_epoch == 0
        # the retry of that EndTxn gets the same answer
        again = end(coord, tid, pid, epoch, True)
        assert (again["error_code"], again["producer_id"], again["producer_epoch"]) == \
            (0, new_pid, 0)
        assert settled(srv, topic, 1)
        admin = AdminClient(srv.config())
        try:
            tp = TopicPartition(topic, 0)
            old_state = {p.producer_id: p for p in admin.describe_producers([tp])[tp].result()}
        finally:
            admin.close()
        assert old_state[old_pid].producer_epoch == 32767       # the marker's epoch
        # the old id is done: its late writes are refused
        assert leaders.produce(topic, 0, batch(old_pid, 32766, 1, [b"late"]), tid) != 0
        # the new id carries on
        assert leaders.produce(topic, 0, batch(new_pid, 0, 0, [b"first of the new id"]), tid) == 0
        r = end(coord, tid, new_pid, 0, True)
        assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, new_pid, 1)
        assert settled(srv, topic, 1)
        coord.close()
        leaders.close()
        coord = leaders = None
        srv.stop()
        srv.start()
        admin = AdminClient(srv.config())
        try:
            described = admin.describe_transactions([tid])[tid].result()
        finally:
            admin.close()
        assert (described.producer_id, described.producer_epoch) == (new_pid, 1)
        assert read_values(srv, topic, 1, "read_committed", expect=2) == [b"last of the old id",
                                                                 b"first of the new id"]
    finally:
        for c in (coord, leaders):
            if c is not None:
                c.close()
        srv.stop()


@pytest.mark.processes
def test_a_v2_endtxn_retried_across_a_coordinator_restart_gets_the_same_answer(tmp_path):
    """The producer's EndTxn was answered, the answer lost, the server
    restarted: the retry, with the epoch it was first sent with, is told
    the same next epoch instead of PRODUCER_FENCED (rebuilt from the
    transaction log's previous producer id and the markers' epoch)."""
    from harness import ServerProcess
    srv = ServerProcess(str(tmp_path / "data"), workers=1).start()
    try:
        create(srv, "again", 1)
        tid = "again-tx"
        coord = KafkaWire(srv.kafka_bootstrap)
        leaders = Leaders(srv, "again")
        try:
            pid, epoch = init(coord, tid)
            assert leaders.produce("again", 0, batch(pid, epoch, 0, [b"once"]), tid) == 0
            r = end(coord, tid, pid, epoch, True)
            assert (r["error_code"], r["producer_epoch"]) == (0, epoch + 1)
            assert settled(srv, "again", 1)
        finally:
            coord.close()
            leaders.close()
        srv.stop()
        srv.start()
        coord = KafkaWire(srv.kafka_bootstrap)
        leaders = Leaders(srv, "again")
        try:
            again = end(coord, tid, pid, epoch, True)
            assert (again["error_code"], again["producer_id"], again["producer_epoch"]) == \
                (0, pid, epoch + 1)
            # an abort retried as if it had been a commit is not the same request
            assert end(coord, tid, pid, epoch, False)["error_code"] != 0
            assert leaders.produce("again", 0, batch(pid, epoch + 1, 0, [b"next"]), tid) == 0
            assert end(coord, tid, pid, epoch + 1, True)["error_code"] == 0
        finally:
            coord.close()
            leaders.close()
        assert settled(srv, "again", 1)
        assert read_values(srv, "again", 1, "read_committed", expect=2) == [b"once", b"next"]
    finally:
        srv.stop()


def test_a_v2_producer_whose_transaction_timed_out_aborts_with_its_old_epoch_and_goes_on(
        server, v2):
    """The coordinator aborted the transaction past its timeout, bumping the
    epoch; the producer's own abort, with the epoch it had, is taken as the
    retry of that abort and hands it the new epoch, as Kafka 4 does."""
    topic_name, tid, coord, leaders = v2
    r = coord.request(ApiKey.INIT_PRODUCER_ID, 5, {"transactional_id": tid,
                                                   "transaction_timeout_ms": 1000,
                                                   "producer_id": -1, "producer_epoch": -1})
    pid, epoch = r["producer_id"], r["producer_epoch"]
    assert leaders.produce(topic_name, 0, batch(pid, epoch, 0, [b"too slow"]), tid) == 0
    admin = AdminClient(server.config())
    try:
        wait_until(lambda: admin.describe_transactions([tid])[tid].result().state in (
            "PrepareAbort", "CompleteAbort"), timeout=15,
            message="the coordinator to abort the timed-out transaction")
    finally:
        admin.close()
    assert end(coord, tid, pid, epoch, True)["error_code"] != 0      # too late to commit
    r = end(coord, tid, pid, epoch, False)
    assert (r["error_code"], r["producer_id"], r["producer_epoch"]) == (0, pid, epoch + 1)
    assert settled(server, topic_name, 2)
    assert leaders.produce(topic_name, 0, batch(pid, epoch + 1, 0, [b"on time"]), tid) == 0
    assert end(coord, tid, pid, epoch + 1, True)["error_code"] == 0
    assert settled(server, topic_name, 2)
    assert read_values(server, topic_name, 1, "read_committed", expect=1) == [b"on time"]
