"""The native ShareConsumer's API against a real server: acknowledgement modes,
delivery counts, commit results, bad calls; membership kept by the heartbeat
thread (slow processing) and given up when the application stops polling."""
import time

import pytest

from harness import ServerProcess, create, wait_until
from kafkalite.client import AcknowledgeType, AdminClient, Producer, ShareConsumer


def joined(server, group, topic, **config):
    c = ShareConsumer(server.config(**{"group.id": group, "fetch.max.wait.ms": 100, **config}))
    c.subscribe([topic])
    # joins (a new group starts at the log end)
    wait_until(lambda: c.consume(1, 0.05) is not None and c.assignment(), 20, "an assignment")
    c.consume(1, 0.2)               # the share-partition starts here, before the records
    return c


def fill(server, topic, n):
    p = Producer(server.config())
    for i in range(n):
        p.produce(topic, b"%d" % i)
    p.flush()


def take(c, n, timeout=20):
    got, deadline = [], time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += c.consume(n - len(got), 0.2)
    return got


def test_config_and_bad_calls():
    with pytest.raises(ValueError, match="group.id"):
        ShareConsumer({"bootstrap.servers": "127.0.0.1:1"})
    with pytest.raises(ValueError, match="share.acknowledgement.mode"):
        ShareConsumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g",
                       "share.acknowledgement.mode": "sometimes"})


def test_release_redelivers_with_a_higher_count_and_commit_answers(server, topic_name,
                                                                   group_name):
    create(server, topic_name)
    acked = []
    c = joined(server, group_name, topic_name,
               on_commit=lambda offsets, error: acked.append((offsets, error)))
    try:
        fill(server, topic_name, 5)
        first = take(c, 5)
        assert [m.delivery_count() for m in first] == [1] * 5
        c.acknowledge(first[0], AcknowledgeType.RELEASE)
        with pytest.raises(ValueError):
            c.acknowledge(first[0])           # acknowledged already
        results = c.commit_sync()             # the other four: accepted implicitly
        assert [(r.topic, r.partition, r.error) for r in results] == [(topic_name, 0, None)]
        assert sorted(o for offsets, err in acked for tp, got in offsets.items()
                      for o, t in got if t == AcknowledgeType.ACCEPT) == [1, 2, 3, 4]
        again = take(c, 1)
        assert [(m.offset(), m.delivery_count()) for m in again] == [(0, 2)]
        assert c.consume(10, 0.5) == []       # nothing else comes back
    finally:
        c.close()


def test_explicit_mode_leaves_unacknowledged_records_to_the_close(server, topic_name,
                                                                  group_name):
    create(server, topic_name)
    c = joined(server, group_name, topic_name, **{"share.acknowledgement.mode": "explicit"})
    fill(server, topic_name, 3)
    got = take(c, 3)
    c.acknowledge(got[1])                   # only offset 1 accepted
    c.close()                               # the others are released, not accepted
    d = ShareConsumer(server.config(**{"group.id": group_name}))
    d.subscribe([topic_name])
    try:
        again = take(d, 2)
        assert sorted((m.offset(), m.delivery_count()) for m in again) == [(0, 2), (2, 2)]
    finally:
        d.close()


@pytest.fixture(scope="module")
def short_sessions(tmp_path_factory):
    """A server whose share-group members are expelled after 1.5 s without
    a heartbeat (heartbeats every 0.3 s), starting at the earliest offset."""
    tmp_path = tmp_path_factory.mktemp("short")
    config = tmp_path / "short.toml"
    config.write_text('share_auto_offset_reset = "earliest"\n'
                      "group_share_session_timeout_ms = 1500\n"
                      "group_share_heartbeat_interval_ms = 300\n")
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(config)]).start()
    yield srv
    srv.stop()
    srv.kill()


def members(server, group) -> list:
    admin = AdminClient(server.config())
    try:
        return [(m["member_id"], m["member_epoch"])
                for m in admin.describe_share_groups([group])[group].result()["members"]]
    finally:
        admin.close()


def test_a_member_that_processes_slowly_stays_in_the_group(short_sessions, topic_name):
    """Heartbeats go from a thread: a member busy longer than the session
    timeout between two polls is not expelled, and its acknowledgements
    are answered."""
    srv = short_sessions
    create(srv, topic_name)
    fill(srv, topic_name, 3)
    acked = []
    c = ShareConsumer(srv.config(**{"group.id": "slow", "fetch.max.wait.ms": 100,
                                    "share.acknowledgement.mode": "explicit",
                                    "on_commit": lambda offsets, error: acked.append(error)}))
    c.subscribe([topic_name])
    try:
        got = take(c, 3)
        assert len(got) == 3
        before = members(srv, "slow")
        assert [m for m, _ in before] == [c.member_id]
        time.sleep(4.0)                     # "processing": no poll, > 2 session timeouts
        assert [m for m, _ in members(srv, "slow")] == [c.member_id]
        for m in got:
            c.acknowledge(m)
        assert [r.error for r in c.commit_sync()] == [None] and acked == [None]
    finally:
        c.close()
    assert members(srv, "slow") == []       # close left the group


def test_a_member_that_stops_polling_leaves_and_rejoins_at_its_next_poll(short_sessions,
                                                                        topic_name):
    srv = short_sessions
    create(srv, topic_name)
    c = ShareConsumer(srv.config(**{"group.id": "stalled", "fetch.max.wait.ms": 100,
                                    "max.poll.interval.ms": 1000}))
    c.subscribe([topic_name])
    try:
        wait_until(lambda: c.consume(1, 0.05) is not None and c.assignment(), 20,
                   "an assignment")
        assert [m for m, _ in members(srv, "stalled")] == [c.member_id]
        # no poll: past max.poll.interval.ms the member leaves
        wait_until(lambda: members(srv, "stalled") == [], 10, "the member to leave",
                   interval=0.2)
        fill(srv, topic_name, 2)
        assert sorted(m.offset() for m in take(c, 2)) == [0, 1]
        assert [m for m, _ in members(srv, "stalled")] == [c.member_id]
    finally:
        c.close()
