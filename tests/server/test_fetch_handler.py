"""A consumer's fetch answers its idle partitions in C (ext/fetch_state.pyx,
server/replica/fetch_handler.py) with exactly the bytes the Python path
gives: random fetches -- every version, both isolation levels, offsets at
and around the high watermark and the last stable offset, current leader
epochs old, new and unset, unknown partitions and topics, followers,
small byte budgets -- over partitions with and without data, open and
aborted transactions, followers behind, moved log starts and leadership
changes, each sent twice to one in-process broker (the C path on, then
off) and compared on the wire. The replica manager's table of leader
states is checked against the partitions after every change.

A consumer's partitions with new records in the active segment's last
batches are read in C too (ext/tail_read.pyx): random fetches of them --
offsets in and before those batches, small partition and fetch byte
budgets, both isolation levels with open, committed and aborted
transactions, errors and idle partitions between them -- answer on the wire as
the Python path does, and a fetch of such partitions reads none of them in
Python.

Long polls: a fetch whose partitions are all idle waits without a
purgatory entry per partition and is woken by an append, a follower
moving the high watermark, and leadership leaving."""
from __future__ import annotations

import random
import time
import uuid

import pytest

from in_process_broker import Broker
from kafkalite import errors
from kafkalite._ext.produce_fetch import FetchedPartitions
from kafkalite.protocol import ApiKey, decode_response, encode_response_parts
from kafkalite.record import RecordBatchBuilder, build_control_batch
from kafkalite.storage import AppendOrigin

VERSIONS = [4, 5, 7, 9, 11, 12, 13, 15, 16, 17]
TOPICS = {"a": (6, uuid.UUID(int=0xA)), "b": (4, uuid.UUID(int=0xB))}
FOLLOWER = 1


class WireBroker(Broker):
    """Answers recorded as the TCP wire carries them (file regions read)."""

    def __init__(self, data_dir):
        super().__init__(data_dir)
        self.inline = 0                 # partitions answered inline so far

    def send_response(self, ctx, body):
        h = ctx.header
        for topic in body.get("responses") or ():
            if isinstance(topic["partitions"], FetchedPartitions):
                self.inline += topic["partitions"].inline_count()
        parts, _ = encode_response_parts(h.api_key, h.api_version, h.correlation_id, body)
        # header and body; the correlation id left out, which differs between sends
        self._answered(h.correlation_id, b"".join(
            p.read() if hasattr(p, "sendfile") else bytes(p) for p in parts)[4:])


def records(n=2, value=b"v"):
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(None, None, value + b"%d" % i)
    return b.build()


class Cluster:
    """One broker's partitions and what the test does to them."""

    def __init__(self, broker: WireBroker):
        self.broker = broker
        self.rm = broker.rm
        self.epochs = {}
        self.sequences = {}             # producer id -> next base sequence
        for topic, (count, topic_id) in TOPICS.items():
            for p in range(count):
                self.lead(topic, p, 1 + p % 3, topic_id)

    def lead(self, topic, p, epoch, topic_id=None, replicas=None):
        spec = {"topic": topic, "partition": p, "topic_id": topic_id or TOPICS[topic][1],
                "leader_epoch": epoch, "configs": {}}
        if replicas:
            spec.update(replicas=replicas, isr=replicas)
        assert self.rm.become_leader(spec)["error"] == 0
        self.epochs[(topic, p)] = epoch

    def append(self, topic, p, n=2):
        self.rm.append(self.rm.partition(topic, p), records(n))

    def transactional(self, topic, p, n=2):
        pid = 1000 + p + (100 if topic == "b" else 0)
        seq = self.sequences.get(pid, 0)
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=0, base_sequence=seq,
                               transactional=True)
        for i in range(n):
            b.append(None, None, b"t%d" % i)
        self.sequences[pid] = seq + n
        self.rm.append(self.rm.partition(topic, p), b.build())
        return pid

    def end_transaction(self, topic, p, commit):
        pid = 1000 + p + (100 if topic == "b" else 0)
        part = self.rm.partition(topic, p)
        if pid in part.log.producer_state.ongoing:
            self.rm.append(part, bytearray(build_control_batch(commit, pid, 0, 0)),
                           AppendOrigin.COORDINATOR)

    def check_table(self):
        for (topic, p), part in self.rm.partitions.items():
            want = None
            if part.is_leader and not part.log.closed:
                want = (part.high_watermark, part.log.last_stable_offset,
                        part.log.log_start_offset, part.leader_epoch)
            assert self.rm.leader_states.state(topic, p) == want, (topic, p)

    def random_change(self, rng):
        topic = rng.choice(sorted(TOPICS))
        p = rng.randrange(TOPICS[topic][0])
        key = (topic, p)
        part = self.rm.partitions.get(key)
        what = rng.choice(["append", "append", "txn", "end", "end", "follower", "delete",
                           "epoch", "follow", "housekeeping"])
        if part is None or not part.is_leader:
            self.lead(topic, p, self.epochs[key] + 1)
        elif what == "append":
            self.append(topic, p, rng.randint(1, 3))
        elif what == "txn":
            self.transactional(topic, p)
        elif what == "end":
            self.end_transaction(topic, p, rng.random() < 0.5)
        elif what == "follower":
            if len(part.replicas) < 2:
                self.lead(topic, p, self.epochs[key], replicas=[0, FOLLOWER])
                self.append(topic, p)
            end = rng.randint(part.high_watermark, part.log_end_offset)
            self.rm.update_follower_end(part, FOLLOWER, end, time.monotonic())
        elif what == "delete" and part.log.high_watermark > part.log.log_start_offset:
            offset = rng.randint(part.log.log_start_offset, part.high_watermark)
            body = {"topics": [{"name": topic, "partitions": [
                {"partition_index": p, "offset": offset}]}], "timeout_ms": 0}
            self.broker.send(ApiKey.DELETE_RECORDS, 2, body)
        elif what == "epoch":
            self.lead(topic, p, self.epochs[key] + 1)
        elif what == "follow":
            self.epochs[key] += 1
            self.rm.fetcher = _NoFollow()
            assert self.rm.become_leader({
                "topic": topic, "partition": p, "topic_id": TOPICS[topic][1],
                "leader_epoch": self.epochs[key], "leader": 2, "replicas": [2, 0],
                "isr": [2, 0], "configs": {}})["error"] == 0
        else:
            self.rm.housekeeping()
        self.check_table()


class _NoFollow:
    def follow(self, part):
        pass

    def stop_following(self, key):
        pass


def random_fetch(rng, cluster: Cluster) -> tuple[int, dict]:
    version = rng.choice(VERSIONS)
    names = [t for t in sorted(TOPICS) + ["nope"] if rng.random() < 0.8] or ["a"]
    rng.shuffle(names)
    topics = []
    for name in names:
        count, topic_id = TOPICS.get(name, (2, uuid.UUID(int=0xDEAD)))
        indexes = [i for i in range(count + 2) if rng.random() < 0.7]
        rng.shuffle(indexes)
        if indexes and rng.random() < 0.1:
            indexes.append(indexes[0])             # named twice
        parts = []
        for i in indexes:
            part = cluster.rm.partitions.get((name, i))
            epoch = cluster.epochs.get((name, i), 1)
            if part is not None:
                plog = part.log
                offset = rng.choice([plog.high_watermark] * 3 + [plog.last_stable_offset] * 3 + [
                    plog.log_start_offset, plog.high_watermark - 1, plog.log_end_offset,
                    plog.log_end_offset + 1, 0, rng.randint(0, plog.log_end_offset)])
            else:
                offset = rng.randint(0, 3)
            parts.append({"partition": i, "fetch_offset": offset,
                          "current_leader_epoch": rng.choice([-1, -1, epoch, epoch, epoch - 1,
                                                              epoch + 1]),
                          "last_fetched_epoch": -1, "log_start_offset": -1,
                          "partition_max_bytes": rng.choice([1 << 20, 1 << 20, 60, 0])})
        topics.append({"topic": name, "topic_id": topic_id, "partitions": parts})
    replica = FOLLOWER if rng.random() < 0.1 else -1
    body = {"replica_id": replica, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": rng.choice([1 << 20, 1 << 20, 100, 1]),
            "isolation_level": rng.choice([0, 1]), "session_id": 0, "session_epoch": -1,
            "topics": topics, "forgotten_topics_data": [], "rack_id": ""}
    if version >= 15:
        body["replica_state"] = {"replica_id": replica, "replica_epoch": -1}
    return version, body


def both_paths(broker: WireBroker, version: int, body: dict) -> tuple[bytes, bytes]:
    """The answer with idle partitions answered in C, then in Python."""
    fetches = broker.rm.fetches
    fetches.idle_in_c = True
    fast = broker.answers.pop(broker.send(ApiKey.FETCH, version, body))
    fetches.idle_in_c = False
    try:
        slow = broker.answers.pop(broker.send(ApiKey.FETCH, version, body))
    finally:
        fetches.idle_in_c = True
    return fast, slow


@pytest.fixture
def cluster(tmp_path):
    broker = WireBroker(tmp_path / "data")
    yield Cluster(broker)
    broker.rm.shutdown()


def test_random_fetches_answer_idle_partitions_as_the_python_path(cluster):
    rng = random.Random(72)
    for topic, (count, _) in TOPICS.items():
        for p in range(0, count, 2):
            cluster.append(topic, p)
    cluster.check_table()
    for step in range(300):
        if step % 2:
            cluster.random_change(rng)
        version, body = random_fetch(rng, cluster)
        fast, slow = both_paths(cluster.broker, version, body)
        assert fast == slow, (step, version, body)
    # not a test that compares the Python path with itself
    assert cluster.broker.inline > 500


def test_every_version_and_isolation_of_an_idle_fetch_answers_as_the_python_path(cluster):
    cluster.append("a", 0)
    cluster.transactional("a", 1)           # open: the LSO stays below the high watermark
    cluster.transactional("b", 2)
    cluster.end_transaction("b", 2, commit=False)     # aborted
    for version in VERSIONS:
        for isolation in (0, 1):
            for target in ("high_watermark", "last_stable_offset"):
                topics = [{"topic": t, "topic_id": TOPICS[t][1], "partitions": [
                    {"partition": p, "current_leader_epoch": -1, "last_fetched_epoch": -1,
                     "fetch_offset": getattr(cluster.rm.partition(t, p).log, target),
                     "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                    for p in range(TOPICS[t][0])]} for t in sorted(TOPICS)]
                body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                        "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                        "topics": topics, "forgotten_topics_data": [], "rack_id": ""}
                fast, slow = both_paths(cluster.broker, version, body)
                assert fast == slow, (version, isolation, target)
    assert cluster.broker.inline > 100


def random_read(rng, cluster: Cluster) -> tuple[int, dict]:
    """A consumer's fetch of records near the high watermark, for reads in C."""
    version = rng.choice(VERSIONS)
    topics = []
    for name in sorted(TOPICS, key=lambda _: rng.random()):
        count, topic_id = TOPICS[name]
        parts = []
        for i in sorted(range(count), key=lambda _: rng.random()):
            part = cluster.rm.partitions.get((name, i))
            hw = part.high_watermark if part is not None else 0
            start = part.log.log_start_offset if part is not None else 0
            parts.append({"partition": i, "fetch_offset": rng.choice(
                              [hw, hw - 1, hw - 1, hw - 2, hw - 5, rng.randint(start, hw), -1]),
                          "current_leader_epoch": rng.choice(
                              [-1, -1, cluster.epochs[(name, i)], cluster.epochs[(name, i)] - 1]),
                          "last_fetched_epoch": -1, "log_start_offset": -1,
                          "partition_max_bytes": rng.choice([1 << 20, 1 << 20, 100, 60, 0])})
        topics.append({"topic": name, "topic_id": topic_id, "partitions": parts})
    body = {"replica_id": -1, "max_wait_ms": 0, "min_bytes": 1,
            "max_bytes": rng.choice([1 << 20, 1 << 20, 300, 100, 1]),
            "isolation_level": rng.choice([0, 0, 0, 1]), "session_id": 0, "session_epoch": -1,
            "topics": topics, "forgotten_topics_data": [], "rack_id": ""}
    if version >= 15:
        body["replica_state"] = {"replica_id": -1, "replica_epoch": -1}
    return version, body


def test_random_reads_of_new_records_answer_as_the_python_path(cluster):
    rng = random.Random(7272)
    for topic, (count, _) in TOPICS.items():
        for p in range(count):
            for _ in range(3):
                cluster.append(topic, p, rng.randint(1, 4))
    for step in range(300):
        topic = rng.choice(sorted(TOPICS))
        p = rng.randrange(TOPICS[topic][0])
        leads = cluster.rm.partitions[(topic, p)].is_leader
        if step % 3 == 0 and leads:
            cluster.append(topic, p, rng.randint(1, 4))
        elif step % 17 == 0:
            cluster.random_change(rng)
        elif step % 7 == 0 and leads:     # transactions: open ones hold the LSO back, aborts
            if rng.random() < 0.5:
                cluster.transactional(topic, p)
            else:
                cluster.end_transaction(topic, p, rng.random() < 0.5)
        version, body = random_read(rng, cluster)
        fast, slow = both_paths(cluster.broker, version, body)
        assert fast == slow, (step, version, body)
    # not a test that compares the Python path with itself
    assert cluster.rm.fetches.tail_reads > 200


def test_a_fetch_of_new_records_reads_them_in_c(cluster):
    """Each partition with new records is read by the plan (tail_reads),
    none by the Python read, and the answer holds what was appended."""
    appended = {}
    for topic, (count, _) in TOPICS.items():
        for p in range(count):
            batch = records(2)
            appended[(topic, p)] = bytes(batch)
            cluster.rm.append(cluster.rm.partition(topic, p), batch)
    body = fetch_all(cluster, 0)
    for topic in body["topics"]:
        for fp in topic["partitions"]:
            fp["fetch_offset"] = 0
    fetches = cluster.rm.fetches
    before = fetches.tail_reads
    got = cluster.broker.answers.pop(cluster.broker.send(ApiKey.FETCH, 12, body))
    _, answer = decode_response(ApiKey.FETCH, 12, b"\0\0\0\0" + got)
    for t in answer["responses"]:
        for p in t["partitions"]:
            assert p["error_code"] == 0 and p["high_watermark"] == 2
            # the batch as appended, past the leader epoch and CRC the broker sets
            assert bytes(p["records"])[21:] == appended[(t["topic"], p["partition_index"])][21:]
    assert fetches.tail_reads - before == len(appended)
    assert fetches.figures()["tail_reads"] == fetches.tail_reads


def fetch_all(cluster, max_wait_ms, version=12, isolation=0):
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
            "topics": [{"topic": t, "topic_id": TOPICS[t][1], "partitions": [
                {"partition": p, "current_leader_epoch": -1, "last_fetched_epoch": -1,
                 "fetch_offset": cluster.rm.hosted(t, p).high_watermark,
                 "log_start_offset": -1, "partition_max_bytes": 1 << 20}
                for p in range(TOPICS[t][0])]} for t in sorted(TOPICS)],
            "forgotten_topics_data": [], "rack_id": ""}


def answered(wire: bytes, version: int = 12) -> dict:
    """{(topic, partition): (error, high watermark, record bytes)}."""
    _, body = decode_response(ApiKey.FETCH, version, b"\0\0\0\0" + wire)
    return {(t["topic"], p["partition_index"]): (p["error_code"], p["high_watermark"],
                                                  len(p["records"] or b""))
            for t in body["responses"] for p in t["partitions"]}


def test_an_idle_long_poll_waits_on_one_key_and_an_append_wakes_it(cluster):
    rm = cluster.rm
    cid = cluster.broker.send(ApiKey.FETCH, 12, fetch_all(cluster, 30_000))
    assert cid not in cluster.broker.answers
    # one purgatory key for ten idle partitions, their states list its id
    assert len(rm.purgatory._watchers) == 1 and rm.leader_states.watching == 10
    cluster.append("b", 3, n=4)
    got = answered(cluster.broker.answers.pop(cid))
    assert got[("b", 3)][0] == 0 and got[("b", 3)][2] > 0
    assert sum(1 for v in got.values() if v[2]) == 1 and len(got) == 10
    # nothing left watching
    assert rm.leader_states.watching == 0 and not rm.purgatory._watchers


def test_a_long_poll_short_of_min_bytes_watches_the_partitions_read_in_c(cluster):
    """A fetch whose new records (read in C) are fewer than its min_bytes
    waits; its read partitions are watched through the table as its idle
    ones are, and more records there complete it (as the Python read's
    purgatory key per read partition did)."""
    rm = cluster.rm
    cluster.append("a", 2)
    body = fetch_all(cluster, 30_000)
    body["min_bytes"] = len(records(2)) + 1         # a byte more than the batch read
    for topic in body["topics"]:
        if topic["topic"] == "a":
            topic["partitions"][2]["fetch_offset"] -= 2       # the batch behind
    before = rm.fetches.tail_reads
    cid = cluster.broker.send(ApiKey.FETCH, 12, body)
    assert cid not in cluster.broker.answers
    assert len(rm.purgatory._watchers) == 1 and rm.leader_states.watching == 10
    assert rm.leader_states.waiters("a", 2)
    cluster.append("a", 2, n=3)
    got = answered(cluster.broker.answers.pop(cid))
    assert got[("a", 2)][0] == 0 and got[("a", 2)][2] > 0
    assert rm.fetches.tail_reads - before == 1           # the answer sent: its read
    assert rm.leader_states.watching == 0 and not rm.purgatory._watchers


def test_an_idle_long_poll_is_woken_by_a_follower_moving_the_high_watermark(cluster):
    rm = cluster.rm
    cluster.lead("a", 2, 3, replicas=[0, FOLLOWER])
    part = rm.partition("a", 2)
    cluster.append("a", 2)                  # not committed: the follower has nothing
    assert part.high_watermark == 0
    cid = cluster.broker.send(ApiKey.FETCH, 12, fetch_all(cluster, 30_000))
    assert cid not in cluster.broker.answers
    rm.update_follower_end(part, FOLLOWER, part.log_end_offset, time.monotonic())
    got = answered(cluster.broker.answers.pop(cid))
    assert got[("a", 2)] == (0, 2, len(records(2)))
    cluster.check_table()


def test_an_idle_long_poll_is_answered_when_leadership_leaves(cluster):
    rm = cluster.rm
    rm.fetcher = _NoFollow()
    cid = cluster.broker.send(ApiKey.FETCH, 12, fetch_all(cluster, 30_000))
    assert rm.become_leader({"topic": "b", "partition": 1, "topic_id": TOPICS["b"][1],
                             "leader_epoch": 9, "leader": 2, "replicas": [2, 0],
                             "isr": [2, 0], "configs": {}})["error"] == 0
    got = answered(cluster.broker.answers.pop(cid))
    assert got[("b", 1)][0] == errors.NotLeaderOrFollowerError.code
    assert rm.leader_states.watching == 0
    cid = cluster.broker.send(ApiKey.FETCH, 12, fetch_all(cluster, 30_000, version=12) | {
        "topics": [{"topic": "a", "topic_id": TOPICS["a"][1], "partitions": [
            {"partition": 0, "current_leader_epoch": -1, "last_fetched_epoch": -1,
             "fetch_offset": 0, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}]})
    rm.stop_replica("a", 0, delete=True)
    assert answered(cluster.broker.answers.pop(cid))[("a", 0)][0] == \
        errors.NotLeaderOrFollowerError.code
    rm.expire()
    assert rm.leader_states.watching == 0 and len(rm.purgatory) == 0


def test_an_idle_long_poll_expires_with_the_idle_answer(cluster):
    rm = cluster.rm
    body = fetch_all(cluster, 20, isolation=1)
    cid = cluster.broker.send(ApiKey.FETCH, 12, body)
    assert cid not in cluster.broker.answers
    time.sleep(0.03)
    rm.expire()
    fast = cluster.broker.answers.pop(cid)
    rm.fetches.idle_in_c = False
    cid = cluster.broker.send(ApiKey.FETCH, 12, dict(body, max_wait_ms=0))
    slow = cluster.broker.answers.pop(cid)
    assert fast == slow
    assert rm.leader_states.watching == 0
