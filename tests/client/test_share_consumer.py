"""The native ShareConsumer's API against a real server: acknowledgement modes,
delivery counts, commit results, bad calls."""
import time

import pytest

from harness import create
from kafkalite.client import AcknowledgeType, Producer, ShareConsumer


def joined(server, group, topic, **config):
    c = ShareConsumer(server.config(**{"group.id": group, "fetch.max.wait.ms": 100, **config}))
    c.subscribe([topic])
    deadline = time.monotonic() + 20
    while not c.assignment() and time.monotonic() < deadline:
        c.consume(1, 0.05)          # joins (a new group starts at the log end)
    assert c.assignment()
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


def test_release_redelivers_with_a_higher_count_and_commit_answers(server, topic_name):
    create(server, topic_name)
    acked = []
    c = joined(server, "g-release", topic_name,
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


def test_explicit_mode_leaves_unacknowledged_records_to_the_close(server, topic_name):
    create(server, topic_name)
    c = joined(server, "g-explicit", topic_name, **{"share.acknowledgement.mode": "explicit"})
    fill(server, topic_name, 3)
    got = take(c, 3)
    c.acknowledge(got[1])                   # only offset 1 accepted
    c.close()                               # the others are released, not accepted
    d = ShareConsumer(server.config(**{"group.id": "g-explicit"}))
    d.subscribe([topic_name])
    try:
        again = take(d, 2)
        assert sorted((m.offset(), m.delivery_count()) for m in again) == [(0, 2), (2, 2)]
    finally:
        d.close()
