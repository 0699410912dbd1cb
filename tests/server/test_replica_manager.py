"""The replica manager in-process: real partition logs in a temporary
directory, requests through the real codec and the server's dispatcher,
answers (now or later) recorded through the request context.

End to end, with server processes and clients, the same paths are covered
by tests/server/test_broker.py; here the waits are driven step by step:
an acks=all produce held until the in-sync replicas have the records, a
long-poll fetch completed by an append, per-partition errors.
"""
from __future__ import annotations

import time

import pytest

from in_process_broker import Broker
from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder


def batch(n=3):
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(None, None, b"v%d" % i)
    return b.build()


def produce_body(acks, parts, timeout_ms=30_000):
    return {"transactional_id": None, "acks": acks, "timeout_ms": timeout_ms, "topic_data": [
        {"name": t, "partition_data": [{"index": p, "records": batch()}]} for t, p in parts]}


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data")
    yield b
    b.rm.shutdown()


def results(answer):
    return {(t["name"], p["index"]): (p["error_code"], p["base_offset"])
            for t in answer["responses"] for p in t["partition_responses"]}


def test_acks_all_waits_for_the_in_sync_replicas(broker):
    broker.lead("t", 0, replicas=[0, 1], isr=[0, 1])
    broker.lead("t", 1)                               # a single replica: committed at once
    cid = broker.send(ApiKey.PRODUCE, 9, produce_body(-1, [("t", 0), ("t", 1)]))
    assert cid not in broker.answers                  # t-0's follower has nothing yet
    part = broker.rm.partition("t", 0)
    assert part.log_end_offset == 3 and part.high_watermark == 0
    broker.rm.update_follower_end(part, 1, 2, time.monotonic())   # the follower has 2 of 3
    assert part.high_watermark == 2 and cid not in broker.answers
    broker.rm.update_follower_end(part, 1, 3, time.monotonic())
    assert results(broker.answers.pop(cid)) == {("t", 0): (0, 0), ("t", 1): (0, 0)}
    # acks=1 does not wait for the follower
    cid = broker.send(ApiKey.PRODUCE, 9, produce_body(1, [("t", 0)]))
    assert results(broker.answers.pop(cid)) == {("t", 0): (0, 3)}
    assert part.high_watermark == 3


def test_acks_all_times_out_with_request_timed_out(broker):
    broker.lead("t", 0, replicas=[0, 1], isr=[0, 1])
    cid = broker.send(ApiKey.PRODUCE, 9, produce_body(-1, [("t", 0)], timeout_ms=50))
    assert cid not in broker.answers
    time.sleep(0.06)                             # past the request's 50 ms timeout
    broker.rm.expire()
    assert results(broker.answers.pop(cid)) == {("t", 0): (errors.RequestTimedOutError.code, 0)}
    # the records are in the leader's log all the same, as in Kafka
    assert broker.rm.partition("t", 0).log_end_offset == 3


def test_acks_zero_gets_no_answer_and_errors_are_per_partition(broker):
    broker.lead("t", 0)
    cid = broker.send(ApiKey.PRODUCE, 9, produce_body(0, [("t", 0)]))
    assert broker.answers.pop(cid) is None
    cid = broker.send(ApiKey.PRODUCE, 9, produce_body(1, [("t", 0), ("t", 7), ("nope", 0)]))
    assert results(broker.answers.pop(cid)) == {
        ("t", 0): (0, 3),
        ("t", 7): (errors.NotLeaderOrFollowerError.code, -1),
        ("nope", 0): (errors.NotLeaderOrFollowerError.code, -1)}
    # acks Kafka does not define: each partition is told, nothing is appended
    end = broker.rm.partition("t", 0).log_end_offset
    cid = broker.send(ApiKey.PRODUCE, 9, produce_body(2, [("t", 0)]))
    assert results(broker.answers.pop(cid)) == {
        ("t", 0): (errors.InvalidRequiredAcksError.code, -1)}
    assert broker.rm.partition("t", 0).log_end_offset == end


def fetch_body(offset, max_wait_ms=0, min_bytes=1, epoch=-1):
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": min_bytes,
            "max_bytes": 1 << 20, "isolation_level": 0, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": "t", "partitions": [
                {"partition": 0, "current_leader_epoch": epoch, "fetch_offset": offset,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
            "forgotten_topics_data": [], "rack_id": ""}


def fetched(answer):
    p = answer["responses"][0]["partitions"][0]
    return p["error_code"], p["high_watermark"], bytes(p["records"] or b"")


def test_a_long_poll_fetch_is_completed_by_an_append(broker):
    broker.lead("t", 0, epoch=4)
    cid = broker.send(ApiKey.FETCH, 12, fetch_body(0, max_wait_ms=30_000))
    assert cid not in broker.answers
    written = batch()
    broker.send(ApiKey.PRODUCE, 9, produce_body(1, [("t", 0)]))
    code, hw, records = fetched(broker.answers.pop(cid))
    assert (code, hw) == (0, 3) and len(records) == len(written)
    # a fetch naming an old leader epoch is fenced; a newer one is unknown
    cid = broker.send(ApiKey.FETCH, 12, fetch_body(0, epoch=3))
    assert fetched(broker.answers.pop(cid))[0] == errors.FencedLeaderEpochError.code
    cid = broker.send(ApiKey.FETCH, 12, fetch_body(0, epoch=5))
    assert fetched(broker.answers.pop(cid))[0] == errors.UnknownLeaderEpochError.code
    # out of range: the answer still carries the partition's offsets
    cid = broker.send(ApiKey.FETCH, 12, fetch_body(99))
    assert fetched(broker.answers.pop(cid))[:2] == (errors.OffsetOutOfRangeError.code, 3)


def test_a_waiting_fetch_is_answered_when_its_partition_goes(broker):
    broker.lead("t", 0)
    cid = broker.send(ApiKey.FETCH, 12, fetch_body(0, max_wait_ms=30_000))
    assert cid not in broker.answers
    broker.rm.stop_replica("t", 0, delete=True)
    # answered at once, telling the client to look for the new leader
    assert fetched(broker.answers.pop(cid))[0] == errors.NotLeaderOrFollowerError.code
    broker.rm.expire()
    # nothing waits any more, so the worker's loop may sleep until housekeeping
    assert len(broker.rm.purgatory) == 0 and broker.rm.next_deadline() is None


def test_a_fetch_waiting_on_two_partitions_gets_both_appends_of_one_produce(broker):
    """One produce request writing two partitions a fetch waits on answers
    the fetch once, with both partitions' records -- not with the first
    partition's alone, leaving the second to the next fetch (Kafka completes
    delayed fetches after the whole request, not after each append)."""
    broker.lead("t", 0)
    broker.lead("t", 1)
    body = fetch_body(0, max_wait_ms=30_000)
    body["topics"][0]["partitions"].append(dict(body["topics"][0]["partitions"][0], partition=1))
    cid = broker.send(ApiKey.FETCH, 12, body)
    assert cid not in broker.answers
    broker.send(ApiKey.PRODUCE, 9, produce_body(1, [("t", 0), ("t", 1)]))
    answer = broker.answers.pop(cid)
    got = {p["partition_index"]: len(bytes(p["records"] or b""))
           for p in answer["responses"][0]["partitions"]}
    assert got == {0: len(batch()), 1: len(batch())}


def test_becoming_leader_writes_the_epoch_so_the_first_append_does_not(broker):
    """The leader-epoch checkpoint (a file and a directory fsync) is written
    when the partition becomes leader, as Kafka's makeLeader does, not by
    its first append on the event loop, where it held up every request
    behind it once per partition (about 20 ms each on this machine's disk:
    2 s for a 100-partition topic's first appends)."""
    import os
    broker.lead("t", 0, epoch=3)
    part = broker.rm.partition("t", 0)
    path = os.path.join(part.log.directory, "leader-epoch-checkpoint")
    before = os.stat(path).st_ino
    broker.send(ApiKey.PRODUCE, 9, produce_body(1, [("t", 0)]))
    assert part.log_end_offset == 3
    assert os.stat(path).st_ino == before            # not rewritten by the append
    assert part.log.leader_epoch_cache.entries == [(3, 0)]
    # a later leadership starts its epoch at the log end then
    broker.lead("t", 0, epoch=5)
    assert part.log.leader_epoch_cache.entries == [(3, 0), (5, 3)]
    broker.send(ApiKey.PRODUCE, 9, produce_body(1, [("t", 0)]))
    assert part.log.leader_epoch_cache.entries == [(3, 0), (5, 3)]
    # and the batches carry it, so a restart rebuilds the same epochs
    code, _, records = fetched(broker.answers.pop(broker.send(ApiKey.FETCH, 12, fetch_body(3))))
    assert code == 0 and records


def test_acks_all_follows_the_isr_and_min_insync_replicas_as_they_change(broker):
    """``Partition.under_min_isr`` is a field the C Produce path reads (not a
    property, a Python call per acks=all request), set again where the ISR
    or min.insync.replicas changes: acks=all is refused NOT_ENOUGH_REPLICAS
    exactly while the ISR is below it."""
    from kafkalite.server.replica.partition import Partition
    assert not isinstance(Partition.__dict__.get("under_min_isr"), property)
    broker.rm.become_leader({"topic": "t", "partition": 0, "topic_id": None, "leader_epoch": 1,
                             "configs": {"min.insync.replicas": "2"}})
    part = broker.rm.partition("t", 0)
    refused = errors.NotEnoughReplicasError.code

    def acks_all() -> int:
        cid = broker.send(ApiKey.PRODUCE, 9, produce_body(-1, [("t", 0)]))
        if cid not in broker.answers:        # waiting on the follower: taken
            broker.rm.update_follower_end(part, 1, part.log_end_offset, time.monotonic())
        return results(broker.answers.pop(cid))[("t", 0)][0]
    assert part.under_min_isr and acks_all() == refused          # ISR [0] < 2
    part.make_leader(1, [0, 1], [0, 1])
    assert not part.under_min_isr and acks_all() == 0
    part.make_leader(1, [0, 1], [0])                              # the follower fell out
    assert part.under_min_isr and acks_all() == refused
    broker.rm.become_leader({"topic": "t", "partition": 0, "topic_id": None, "leader_epoch": 1,
                             "replicas": [0, 1], "isr": [0], "configs": {"min.insync.replicas": "1"}})
    assert not part.under_min_isr and acks_all() == 0
    part.make_follower(2, 1, [0, 1], [1])
    assert not part.under_min_isr
