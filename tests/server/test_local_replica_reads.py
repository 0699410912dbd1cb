"""A follower on its leader's host reads fetched records from the leader's
segment file (replica_local_reads), step by step in-process: two real
replica managers with their logs in a temporary directory, the real
replica fetcher, requests through the real codec and dispatcher
(in_process_broker.py).

The race the follower guards against is played out: the leader answers a
fetch with a region of its file, then loses its leadership and rewrites
that region (truncated, refilled from a new leader) before the follower
reads it. The follower must not append what it then finds; with the
check planted off, it appends records the leader never answered about.

End to end (worker processes, kill -9, truncation by leader epoch, fetches
cut mid-batch) the local path is what tests/server/test_replication.py
exercises, since its workers share a host.
"""
from __future__ import annotations

import logging

import pytest

from in_process_broker import Broker, Peers
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.replica import replica_fetcher
from kafkalite.server.replica.replica_fetcher import ReplicaFetcher


def batch(base_offset, epoch, tag, n=10):
    b = RecordBatchBuilder(base_offset=base_offset, partition_leader_epoch=epoch)
    for i in range(n):
        b.append(1_700_000_000_000, None, b"%s-%03d" % (tag, i) + b"x" * 100)
    return b.build()


def produce(broker, values_tag):
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 5_000, "topic_data": [
        {"name": "t", "partition_data": [{"index": 0, "records": batch(0, -1, values_tag)}]}]}
    broker.send(ApiKey.PRODUCE, 9, body)


def log_bytes(plog) -> bytes:
    region = plog.read(plog.log_start_offset, 1 << 30, min_one_message=True).region
    return region.read() if region is not None else b""


@pytest.fixture
def pair(tmp_path):
    leader = Broker(tmp_path / "leader", broker_id=0)
    follower = Broker(tmp_path / "follower", broker_id=1)
    peers = Peers({0: leader})
    made = []

    def make(local_reads=True):
        fetcher = ReplicaFetcher(1, peers, wait_max_ms=0, local_reads=local_reads)
        follower.rm.fetcher = fetcher
        # the leader's own, for when it follows a new leader (never ticked)
        leader.rm.fetcher = ReplicaFetcher(0, Peers({}), wait_max_ms=0)
        made.extend((fetcher, leader.rm.fetcher))
        leader.lead("t", 0, epoch=1, replicas=[0, 1], isr=[0, 1])
        follower.follow("t", 0, leader=0, epoch=1, replicas=[0, 1])
        return leader, follower, peers, fetcher
    yield make
    for f in made:
        f.close()
    leader.rm.shutdown()
    follower.rm.shutdown()


def fetch_round(fetcher):
    fetcher.tick(now=1e12)       # truncating (nothing to cut) -> fetching
    fetcher.tick(now=1e12)


@pytest.mark.parametrize("local_reads", [True, False], ids=["local", "network"])
def test_the_follower_copies_the_leader_by_the_way_asked(pair, local_reads):
    leader, follower, peers, fetcher = pair(local_reads)
    produce(leader, b"a")
    produce(leader, b"b")
    fetch_round(fetcher)
    lpart, fpart = leader.rm.hosted("t", 0), follower.rm.hosted("t", 0)
    assert fpart.log.log_end_offset == lpart.log.log_end_offset == 20
    assert log_bytes(fpart.log) == log_bytes(lpart.log)
    fetch = [body for _, key, body in peers.sent if key == ApiKey.FETCH][0]
    assert bool(fetch["local_host"]) == local_reads
    way, other = ("local", "network") if local_reads else ("network", "local")
    assert fetcher.fetched_bytes[way] == len(log_bytes(lpart.log))
    assert fetcher.fetched_bytes[other] == 0
    assert fetcher.local.open_count == (1 if local_reads else 0)


def test_a_leader_on_another_host_sends_the_records(pair, monkeypatch):
    leader, follower, peers, fetcher = pair(True)
    produce(leader, b"a")
    monkeypatch.setattr(replica_fetcher, "host_identity", lambda: "another-boot/1")
    fetch_round(fetcher)
    assert follower.rm.hosted("t", 0).log.log_end_offset == 10
    assert fetcher.fetched_bytes == {"local": 0, "network": len(log_bytes(
        leader.rm.hosted("t", 0).log))}


def _stale_answer_race(pair):
    """The follower has 0-9; its fetch at 10 is answered with the region of
    10-19 (epoch 1), held back; the leader then loses its leadership to
    broker 2 at epoch 2, truncates to 0 and takes broker 2's log: the same
    sizes, other records, so the answered region now holds batch 10-19 of
    epoch 2."""
    leader, follower, peers, fetcher = pair(True)
    produce(leader, b"a")
    fetch_round(fetcher)
    fplog = follower.rm.hosted("t", 0).log
    assert fplog.log_end_offset == 10
    produce(leader, b"b")
    peers.hold = True
    fetcher.tick(now=1e12)
    assert len(peers.held) == 1
    lplog = leader.rm.hosted("t", 0).log
    before = log_bytes(lplog)
    leader.follow("t", 0, leader=2, epoch=2, replicas=[2, 0, 1])
    lplog.truncate_to(0)
    lplog.append_as_follower(batch(0, 2, b"c") + batch(10, 2, b"d"))
    after = log_bytes(lplog)
    assert len(after) == len(before) and after != before
    peers.hold = False
    peers.deliver()
    return fplog, fetcher


def test_a_region_rewritten_after_the_answer_is_not_appended(pair, caplog):
    caplog.set_level(logging.WARNING, "kafkalite.replica_fetcher")
    fplog, fetcher = _stale_answer_race(pair)
    assert fplog.log_end_offset == 10                   # nothing of epoch 2 taken
    assert "fetching from it over the network" in caplog.text
    assert 0 in fetcher._network_until
    fetcher.followed[("t", 0)].retry_at = 0.0
    fetcher.requests.sent.clear()
    fetcher.tick(now=1e12)                              # asked again, over the network
    body = [b for _, key, b in fetcher.requests.sent if key == ApiKey.FETCH][0]
    assert body["local_host"] is None


def test_planted_without_the_epoch_check_the_follower_takes_records_never_answered(
        pair, monkeypatch):
    # the same race with the check planted off: the follower's log gets the
    # epoch-2 batch 10-19 while it follows at epoch 1, after epoch 1's 0-9,
    # a log no leader ever had
    from kafkalite.storage.log import PartitionLog
    append = PartitionLog.append_as_follower
    monkeypatch.setattr(PartitionLog, "append_as_follower",
                        lambda self, records, max_leader_epoch=None: append(self, records))
    fplog, _ = _stale_answer_race(pair)
    assert fplog.log_end_offset == 20
    assert fplog.leader_epoch_cache.latest_epoch == 2
