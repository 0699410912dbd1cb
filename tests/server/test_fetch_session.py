"""Incremental fetch sessions (KIP-227, server/replica/fetch_session.py) by
Kafka's rules: a full fetch at epoch 0 opens one; incremental fetches add,
update and forget partitions and are answered with only the partitions
that have something new; wrong epochs, unknown sessions and a change of
topic naming are refused; the cache is bounded and evicts as Kafka's
does. Driven through a broker's dispatcher in this process."""
from __future__ import annotations

import random
import time
import uuid

import pytest

from in_process_broker import Broker
from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.replica.fetch_session import (EVICTION_MS, FetchSessionCache, MAX_EPOCH,
                                                    next_epoch)
from kafkalite._ext.fetch_session_state import SessionPartitions

TOPIC_ID = uuid.UUID(int=0x72)


def batch(n=2):
    b = RecordBatchBuilder()
    for i in range(n):
        b.append(None, None, b"v%d" % i)
    return b.build()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path / "data")
    for p in range(6):
        assert b.rm.become_leader({"topic": "t", "partition": p, "topic_id": TOPIC_ID,
                                   "leader_epoch": 1, "configs": {}})["error"] == 0
    yield b
    b.rm.shutdown()


def fetch(session_id, epoch, offsets: dict, forgotten=(), max_wait_ms=0, version=12,
          isolation=0) -> dict:
    """A consumer's fetch of topic t: {partition: fetch offset}."""
    by_id = version >= 13
    return {"replica_id": -1, "max_wait_ms": max_wait_ms, "min_bytes": 1, "max_bytes": 1 << 20,
            "isolation_level": isolation, "session_id": session_id, "session_epoch": epoch,
            "topics": [{"topic": "" if by_id else "t", "topic_id": TOPIC_ID, "partitions": [
                {"partition": p, "current_leader_epoch": -1, "fetch_offset": o,
                 "last_fetched_epoch": -1, "log_start_offset": -1,
                 "partition_max_bytes": 1 << 20} for p, o in offsets.items()]}] if offsets else [],
            "forgotten_topics_data": [{"topic": "" if by_id else "t", "topic_id": TOPIC_ID,
                                       "partitions": list(forgotten)}] if forgotten else [],
            "rack_id": ""}


def ask(broker, body, version=12) -> dict:
    return broker.answers.pop(broker.send(ApiKey.FETCH, version, body))


def listed(answer) -> dict:
    """{partition: (error, high watermark, log start, record bytes)} of an answer."""
    return {p["partition_index"]: (p["error_code"], p["high_watermark"], p["log_start_offset"],
                                   len(bytes(p["records"] or b"")))
            for t in answer["responses"] for p in t["partitions"]}


def produce(broker, partition, n=2):
    broker.rm.append(broker.rm.partition("t", partition), batch(n))


def open_session(broker, offsets=None, version=12):
    offsets = offsets if offsets is not None else {p: 0 for p in range(6)}
    answer = ask(broker, fetch(0, 0, offsets, version=version), version)
    assert answer["error_code"] == 0 and answer["session_id"] > 0
    assert set(listed(answer)) == set(offsets)
    return answer["session_id"]


def test_an_incremental_fetch_lists_only_what_changed(broker):
    sid = open_session(broker)
    # nothing new anywhere: an empty answer, the session kept
    answer = ask(broker, fetch(sid, 1, {}))
    assert answer["error_code"] == 0 and answer["session_id"] == sid
    assert listed(answer) == {}
    # records on one partition: that partition alone, with them
    produce(broker, 3)
    got = listed(ask(broker, fetch(sid, 2, {})))
    assert list(got) == [3] and got[3][:2] == (0, 2) and got[3][3] > 0
    # the client moves its offset there (an update): nothing to say again
    assert listed(ask(broker, fetch(sid, 3, {3: 2}))) == {}
    # the offset not moved: the same records again (they are new to it)
    produce(broker, 1)
    assert listed(ask(broker, fetch(sid, 4, {})))[1][3] > 0
    assert listed(ask(broker, fetch(sid, 5, {})))[1][3] > 0
    assert listed(ask(broker, fetch(sid, 6, {1: 2}))) == {}


def test_partitions_are_added_updated_and_forgotten(broker):
    sid = open_session(broker, {0: 0, 1: 0})
    # a partition added is answered (its offsets were never told)
    assert set(listed(ask(broker, fetch(sid, 1, {4: 0})))) == {4}
    produce(broker, 4)
    assert set(listed(ask(broker, fetch(sid, 2, {})))) == {4}
    # forgotten: its records are not the session's any more
    produce(broker, 0)
    assert listed(ask(broker, fetch(sid, 3, {4: 2}, forgotten=[0]))) == {}
    session = broker.rm.fetches.sessions.get(sid)
    assert [p for _, p, _ in session.partitions.partitions()] == [1, 4]
    # forgetting the rest closes the session: answered outside one
    answer = ask(broker, fetch(sid, 4, {}, forgotten=[1, 4]))
    assert answer["error_code"] == 0 and answer["session_id"] == 0
    assert broker.rm.fetches.sessions.get(sid) is None


def test_moved_offsets_and_errors_are_always_answered(broker):
    sid = open_session(broker)
    produce(broker, 2, n=4)
    assert set(listed(ask(broker, fetch(sid, 1, {2: 4})))) == {2}
    # the log start moves (DeleteRecords): the partition is answered with it
    broker.send(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": "t", "partitions": [
        {"partition_index": 2, "offset": 3}]}], "timeout_ms": 0})
    assert listed(ask(broker, fetch(sid, 2, {}))) == {2: (0, 4, 3, 0)}
    assert listed(ask(broker, fetch(sid, 3, {}))) == {}
    # leadership leaves: the error is in every answer until the client acts
    broker.rm.fetcher = _NoFollow()
    assert broker.rm.become_leader({"topic": "t", "partition": 5, "topic_id": TOPIC_ID,
                                    "leader_epoch": 2, "leader": 1, "replicas": [1, 0],
                                    "isr": [1, 0], "configs": {}})["error"] == 0
    for epoch in (4, 5):
        got = listed(ask(broker, fetch(sid, epoch, {})))
        assert list(got) == [5] and got[5][0] == errors.NotLeaderOrFollowerError.code
    # back as leader: answered once more (its high watermark was never told)
    assert broker.rm.become_leader({"topic": "t", "partition": 5, "topic_id": TOPIC_ID,
                                    "leader_epoch": 3, "configs": {}})["error"] == 0
    assert listed(ask(broker, fetch(sid, 6, {}))) == {5: (0, 0, 0, 0)}
    assert listed(ask(broker, fetch(sid, 7, {}))) == {}


class _NoFollow:
    def follow(self, part):
        pass

    def stop_following(self, key):
        pass


def test_session_metadata_errors(broker):
    sid = open_session(broker)
    # a repeated epoch (a duplicate or lost request) is refused, the session kept
    assert ask(broker, fetch(sid, 1, {}))["error_code"] == 0
    answer = ask(broker, fetch(sid, 1, {}))
    assert answer["error_code"] == errors.InvalidFetchSessionEpochError.code
    assert answer["responses"] == [] and answer["session_id"] == 0
    assert ask(broker, fetch(sid, 2, {}))["error_code"] == 0
    # a session this broker does not have
    assert ask(broker, fetch(sid + 1, 1, {}))["error_code"] == \
        errors.FetchSessionIdNotFoundError.code
    # a session of topic names used by a version that names topics by id
    assert ask(broker, fetch(sid, 3, {}, version=13), 13)["error_code"] == \
        errors.FetchSessionTopicIdError.code
    # epoch -1 closes it (a full fetch, no new session)
    answer = ask(broker, fetch(sid, -1, {0: 0}))
    assert answer["session_id"] == 0 and set(listed(answer)) == {0}
    assert ask(broker, fetch(sid, 3, {}))["error_code"] == errors.FetchSessionIdNotFoundError.code
    # epoch 0 with a session id: that session closed, a new one opened
    sid = open_session(broker)
    new = ask(broker, fetch(sid, 0, {0: 0}))["session_id"]
    assert new not in (0, sid) and broker.rm.fetches.sessions.get(sid) is None


def test_a_session_of_topic_ids(broker):
    sid = open_session(broker, version=13)
    produce(broker, 0)
    answer = ask(broker, fetch(sid, 1, {}, version=13), 13)
    assert answer["responses"][0]["topic_id"] == TOPIC_ID
    assert set(listed(answer)) == {0}
    assert ask(broker, fetch(sid, 2, {}, version=12))["error_code"] == \
        errors.FetchSessionTopicIdError.code


def test_an_incremental_long_poll_is_woken_by_an_append(broker):
    sid = open_session(broker)
    cid = broker.send(ApiKey.FETCH, 12, fetch(sid, 1, {}, max_wait_ms=30_000))
    assert cid not in broker.answers
    assert broker.rm.leader_states.watching == 6
    produce(broker, 4)
    got = listed(broker.answers.pop(cid))
    assert list(got) == [4] and got[4][3] > 0
    assert broker.rm.leader_states.watching == 0


def test_a_waiting_fetch_overtaken_in_its_session_is_refused(broker):
    """Kafka's check when the answer is made: another fetch of the same
    session (on another connection) moved the epoch on meanwhile."""
    sid = open_session(broker)
    cid = broker.send(ApiKey.FETCH, 12, fetch(sid, 1, {}, max_wait_ms=30_000))
    assert ask(broker, fetch(sid, 2, {}))["error_code"] == 0
    produce(broker, 0)
    answer = broker.answers.pop(cid)
    assert answer["error_code"] == errors.InvalidFetchSessionEpochError.code
    assert answer["session_id"] == sid


def test_partitions_with_records_go_to_the_end_of_the_session(broker):
    sid = open_session(broker)
    produce(broker, 1)
    produce(broker, 4)
    assert list(listed(ask(broker, fetch(sid, 1, {})))) == [1, 4]
    session = broker.rm.fetches.sessions.get(sid)
    assert [p for _, p, _ in session.partitions.partitions()] == [0, 2, 3, 5, 1, 4]
    # so with a budget for one partition the others are read first next time
    produce(broker, 0)
    body = fetch(sid, 2, {1: 2, 4: 2})
    body["max_bytes"] = 1
    produce(broker, 1)
    got = listed(ask(broker, body))
    assert got[0][3] > 0 and got[1][3] == 0


def test_incremental_answers_are_the_python_paths(broker):
    """Two sessions over the same partitions, one answered with idle
    partitions and new records in C and one in Python, get the same
    answers to the same random fetches."""
    fetches = broker.rm.fetches
    rng = random.Random(227)
    offsets = {p: 0 for p in range(6)}
    fast, slow = open_session(broker), open_session(broker)
    epochs = {fast: 1, slow: 1}
    known = dict(offsets)
    for step in range(200):
        change = rng.random()
        if change < 0.3:
            produce(broker, rng.randrange(6), rng.randint(1, 3))
        elif change < 0.4:
            p = rng.randrange(6)
            part = broker.rm.partition("t", p)
            if part.high_watermark > part.log.log_start_offset:
                broker.send(ApiKey.DELETE_RECORDS, 2, {"topics": [{"name": "t", "partitions": [
                    {"partition_index": p, "offset": part.high_watermark}]}], "timeout_ms": 0})
        sent = {p: broker.rm.partition("t", p).high_watermark
                for p in range(6) if rng.random() < 0.3}
        forgotten = [p for p in range(6) if p not in sent and rng.random() < 0.05]
        answers = []
        for sid, in_c in ((fast, True), (slow, False)):
            fetches.idle_in_c = in_c
            answer = ask(broker, fetch(sid, epochs[sid], sent, forgotten,
                                       isolation=step % 2))
            epochs[sid] += 1
            answers.append(answer)
        fetches.idle_in_c = True
        assert answers[0]["session_id"] == fast and answers[1]["session_id"] == slow, step
        answers[1]["session_id"] = fast
        assert answers[0] == answers[1], step
        known.update(sent)
        for p in forgotten:
            known.pop(p, None)
        if not known:
            break
    # partitions with new records were read in C too, in the session's order
    assert fetches.tail_reads > 50


def test_the_cache_is_bounded_and_evicts_as_kafkas():
    clock = [0]
    cache = FetchSessionCache(max_entries=3, eviction_ms=EVICTION_MS, clock=lambda: clock[0])

    def session(size, privileged=False):
        return cache.maybe_create(clock[0], privileged, size,
                                  lambda: partitions(size))

    a, b, c = session(10), session(20), session(30)
    assert 0 not in (a, b, c) and len(cache) == 3
    # full, every session young: a consumer's new session waits its turn
    clock[0] = 10
    assert session(40) == 0
    # a follower's session evicts a consumer's, the smallest first
    f = session(5, privileged=True)
    assert f and cache.get(a) is None and len(cache) == 3
    # unused for EVICTION_MS: stale, evicted by anyone, the least recently used first
    clock[0] = 20
    cache.touch(cache.get(b), clock[0])
    cache.touch(cache.get(f), clock[0])
    clock[0] = 10 + EVICTION_MS + 1
    d = session(1)
    assert d and cache.get(c) is None
    # once old, a session is evictable by a larger consumer session
    clock[0] += EVICTION_MS + 1
    for sid in (b, f, d):
        cache.touch(cache.get(sid), clock[0])
    clock[0] += 1
    assert session(1) == 0                      # not larger than any
    e = session(25)
    assert e and cache.get(d) is None           # the smallest consumer's went
    assert cache.get(f) is not None             # a follower's is worth more
    assert cache.evictions == 3


def partitions(n):
    sp = SessionPartitions(False)
    sp.update([{"topic": "t", "topic_id": None, "partitions": [
        {"partition": p, "fetch_offset": 0, "partition_max_bytes": 1} for p in range(n)]}], [])
    return sp


def test_a_full_cache_answers_full_fetches_without_a_session(broker):
    broker.rm.fetches.sessions.max_entries = 1
    assert open_session(broker)
    answer = ask(broker, fetch(0, 0, {0: 0}))
    assert answer["session_id"] == 0 and set(listed(answer)) == {0}


def test_epochs_wrap_past_the_largest_to_one():
    assert next_epoch(0) == 1 and next_epoch(41) == 42
    assert next_epoch(MAX_EPOCH) == 1 and next_epoch(-1) == -1


def test_the_session_index_survives_many_adds_and_removes():
    sp = SessionPartitions(False)
    rng = random.Random(1)
    present = set()
    for _ in range(3000):
        p = rng.randrange(500)
        if rng.random() < 0.6:
            sp.update([{"topic": "t", "topic_id": None, "partitions": [
                {"partition": p, "fetch_offset": p, "partition_max_bytes": 1}]}], [])
            present.add(p)
        else:
            sp.update([], [{"topic": "t", "partitions": [p]}])
            present.discard(p)
        assert len(sp) == len(present)
    assert sorted(p for _, p, _ in sp.partitions()) == sorted(present)
    assert all(o == p for _, p, o in sp.partitions())


def test_a_sessions_partitions_are_authorized_at_every_fetch(broker):
    """As Kafka's handleFetch: a session's partitions are checked against
    the ACLs at every fetch, those the request does not name too; a topic
    denied when the session opened stays in it, answered once allowed."""
    from kafkalite.protocol.enums import AclOperation, AclPermissionType, PatternType, ResourceType
    from kafkalite.server.auth.authorizer import AclBinding, Authorizer
    from kafkalite.server.auth.request_authorization import RequestGate
    read_t = AclBinding(ResourceType.TOPIC, "t", PatternType.LITERAL, "User:ANONYMOUS", "*",
                        AclOperation.READ, AclPermissionType.ALLOW)
    authorizer = Authorizer()
    broker.dispatcher.gate = RequestGate(authorizer)
    broker.dispatcher.check_native = True
    denied = errors.TopicAuthorizationFailedError.code
    # denied from the start: the gate answers, the session keeps the partitions
    answer = ask(broker, fetch(0, 0, {p: 0 for p in range(6)}))
    sid = answer["session_id"]
    assert sid and {v[0] for v in listed(answer).values()} == {denied}
    produce(broker, 2)
    authorizer.replace([read_t])
    got = listed(ask(broker, fetch(sid, 1, {})))
    assert set(got) == set(range(6)) and {v[0] for v in got.values()} == {0}
    assert got[2][3] > 0
    # revoked: every partition of the session is refused, none named
    authorizer.replace([])
    produce(broker, 4)
    got = listed(ask(broker, fetch(sid, 2, {})))
    assert set(got) == set(range(6)) and all(v[0] == denied and v[3] == 0 for v in got.values())
    authorizer.replace([read_t])
    got = listed(ask(broker, fetch(sid, 3, {2: 2})))
    assert got[4][0] == 0 and got[4][3] > 0
