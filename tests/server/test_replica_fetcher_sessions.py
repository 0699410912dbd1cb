"""A follower fetches from its leader in an incremental fetch session
(KIP-227), as Kafka's do: after the first, full, fetch each one names only
the partitions whose log end moved, the leader still counts the follower's
place in every partition of the session (ISR, high watermark), and a lost
session is opened again. In-process: two real replica managers and the
real replica fetcher (in_process_broker.py)."""
from __future__ import annotations

import time

import pytest

from in_process_broker import Broker, Peers
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.replica.replica_fetcher import ReplicaFetcher

PARTITIONS = 20


def batch(n=3):
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(None, None, b"r%d" % i)
    return b.build()


def produce(broker, p):
    broker.send(ApiKey.PRODUCE, 9, {"transactional_id": None, "acks": 1, "timeout_ms": 5_000,
                                   "topic_data": [{"name": "t", "partition_data": [
                                       {"index": p, "records": batch()}]}]})


@pytest.fixture
def replicas(tmp_path):
    leader = Broker(tmp_path / "leader", broker_id=0)
    follower = Broker(tmp_path / "follower", broker_id=1)
    peers = Peers({0: leader})
    fetcher = ReplicaFetcher(1, peers, wait_max_ms=0, local_reads=False)
    follower.rm.fetcher = fetcher
    leader.rm.fetcher = ReplicaFetcher(0, Peers({}), wait_max_ms=0)
    for p in range(PARTITIONS):
        leader.lead("t", p, epoch=1, replicas=[0, 1], isr=[0, 1])
        follower.follow("t", p, leader=0, epoch=1, replicas=[0, 1])
    yield leader, follower, peers, fetcher
    fetcher.close()
    leader.rm.fetcher.close()
    leader.rm.shutdown()
    follower.rm.shutdown()


def fetches(peers) -> list[dict]:
    """The Fetch bodies sent so far, and forget them."""
    out = [body for _, api, body in peers.sent if api == ApiKey.FETCH]
    peers.sent.clear()
    return out


def named(body) -> list[int]:
    return sorted(p["partition"] for t in body["topics"] for p in t["partitions"])


def test_a_follower_names_only_the_partitions_that_moved(replicas):
    leader, follower, peers, fetcher = replicas
    for p in range(PARTITIONS):
        produce(leader, p)
    fetcher.tick(now=1e12)                  # truncating: nothing to cut
    fetcher.tick(now=1e12)                  # the full fetch opening the session
    first = fetches(peers)
    assert len(first) == 1 and first[0]["session_epoch"] == 0
    assert named(first[0]) == list(range(PARTITIONS))
    [session_id] = leader.rm.fetches.sessions.sessions
    fetcher.tick(now=1e12)                  # every log end moved: all named again
    assert named(fetches(peers)[0]) == list(range(PARTITIONS))
    # caught up; records on two partitions only
    fetcher.tick(now=1e12)
    assert fetches(peers)[0]["topics"] == []
    produce(leader, 4)
    produce(leader, 17)
    fetcher.tick(now=1e12)                  # the answer brings 4 and 17's records
    body = fetches(peers)[0]
    assert body["session_id"] == session_id and body["session_epoch"] > 1 and named(body) == []
    fetcher.tick(now=1e12)                  # their log ends moved: named, the rest not
    assert named(fetches(peers)[0]) == [4, 17]
    for p in range(PARTITIONS):
        assert follower.rm.hosted("t", p).log_end_offset == \
            leader.rm.partition("t", p).log_end_offset, p
    # the leader counted the follower in every partition of the session:
    # the high watermarks are the log ends, the follower seen caught up now
    before = time.monotonic()
    fetcher.tick(now=1e12)
    for p in range(PARTITIONS):
        part = leader.rm.partition("t", p)
        assert part.high_watermark == part.log_end_offset
        assert part._caught_up[1] >= before


def test_a_lost_session_is_opened_again(replicas):
    leader, follower, peers, fetcher = replicas
    fetcher.tick(now=1e12)
    fetcher.tick(now=1e12)
    fetcher.tick(now=1e12)
    sessions = leader.rm.fetches.sessions
    assert len(sessions) == 1
    sessions.remove(next(iter(sessions.sessions)))         # evicted, or the leader restarted
    fetcher.tick(now=1e12)                  # FETCH_SESSION_ID_NOT_FOUND
    fetcher.tick(now=1e12)                  # a full fetch at epoch 0, a new session
    bodies = fetches(peers)
    assert bodies[-1]["session_id"] == 0 and bodies[-1]["session_epoch"] == 0
    assert named(bodies[-1]) == list(range(PARTITIONS)) and len(sessions) == 1
    produce(leader, 9)
    fetcher.tick(now=1e12)
    fetcher.tick(now=1e12)
    assert follower.rm.hosted("t", 9).log_end_offset == 3


def test_a_partition_followed_while_the_session_fetch_is_out_does_not_wait(replicas):
    leader, follower, peers, fetcher = replicas
    fetcher.tick(now=1e12)
    fetcher.tick(now=1e12)
    peers.hold = True                        # the session's fetch stays out
    fetcher.tick(now=1e12)
    leader.lead("u", 0, epoch=1, replicas=[0, 1], isr=[0, 1])
    follower.follow("u", 0, leader=0, epoch=1, replicas=[0, 1])
    produce_u = {"transactional_id": None, "acks": 1, "timeout_ms": 5_000, "topic_data": [
        {"name": "u", "partition_data": [{"index": 0, "records": batch()}]}]}
    leader.send(ApiKey.PRODUCE, 9, produce_u)
    fetcher.tick(now=1e12)                  # truncating
    fetcher.tick(now=1e12)                  # fetched outside the session
    side = fetches(peers)[-1]
    assert side["session_id"] == 0 and side["session_epoch"] == -1
    assert [t["topic"] for t in side["topics"]] == ["u"]
    peers.hold = False
    peers.deliver()
    assert follower.rm.hosted("u", 0).log_end_offset == 3
    fetcher.tick(now=1e12)                  # it joins the session
    body = fetches(peers)[-1]
    assert body["session_epoch"] > 0 and [t["topic"] for t in body["topics"]] == ["u"]
