"""Share groups' start offsets: DescribeShareGroupOffsets and
AlterShareGroupOffsets (APIs 90, 91) through the AdminClient and the CLI,
against a real server, with real share consumers reading what a reset
hands them."""
import time

import pytest

from harness import create
from kafkalite import errors
from kafkalite.client import AdminClient, Producer, ShareConsumer
from kafkalite.client.types import TopicPartition
from kafkalite.protocol import ApiKey
from test_requests import kafka_call
from test_share_groups import share_server, stopping  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server whose share groups start at the earliest offset (a setting
    of the server's), for the module's tests, each with its own topic and
    group."""
    srv = share_server(tmp_path_factory.mktemp("share-offsets"), workers=2)
    yield srv
    if srv.proc.poll() is None:
        srv.stop()
    srv.kill()


@pytest.fixture
def queue(server, topic_name):
    """The test's one-partition topic."""
    create(server, topic_name, 1)
    return topic_name


def produce(server, topic, values):
    p = Producer(server.config())
    for v in values:
        p.produce(topic, value=v, partition=0)
    p.flush()


def consume(server, topic, group, want, timeout=15.0):
    """A share consumer of ``group`` accepts records until it has ``want``
    of them or ``timeout`` passes (then a little longer, to catch extras),
    and leaves: the values it got, in order."""
    c = ShareConsumer(server.config(**{"group.id": group, "fetch.max.wait.ms": 100}))
    c.subscribe([topic])
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += [m.value() for m in c.consume(100, 0.2)]
    extra_until = time.monotonic() + 0.5        # nothing more may come
    while time.monotonic() < extra_until:
        got += [m.value() for m in c.consume(100, 0.1)]
    c.commit_sync()
    c.close()
    return got


def offsets(admin, group, partitions=None):
    return admin.list_share_group_offsets({group: partitions})[group].result()


def alter(admin, group, tp, offset):
    return admin.alter_share_group_offsets(group, {tp: offset})[tp].result()


def values(a, b):
    return [b"%d" % i for i in range(a, b)]


def test_describe_then_reset_to_earliest_and_latest(server, queue, group_name):
    g, tp = group_name, TopicPartition(queue, 0)
    produce(server, queue, values(0, 10))
    assert consume(server, queue, g, 10) == values(0, 10)
    admin = AdminClient(server.config())
    assert offsets(admin, g) == {tp: 10}
    assert offsets(admin, g, [tp]) == {tp: 10}
    # earliest: a new member gets every record again
    alter(admin, g, tp, 0)
    assert offsets(admin, g) == {tp: 0}
    assert consume(server, queue, g, 10) == values(0, 10)
    # latest: only what comes after
    produce(server, queue, values(10, 15))
    alter(admin, g, tp, 15)
    produce(server, queue, values(15, 18))
    assert consume(server, queue, g, 3) == values(15, 18)
    assert offsets(admin, g) == {tp: 18}


def test_reset_refused_while_a_member_is_active(server, queue, group_name):
    g, tp = group_name, TopicPartition(queue, 0)
    produce(server, queue, values(0, 5))
    assert consume(server, queue, g, 5) == values(0, 5)
    c = ShareConsumer(server.config(**{"group.id": g, "fetch.max.wait.ms": 100}))
    c.subscribe([queue])
    try:
        c.consume(1, 1.0)          # joined: the group has a member
        admin = AdminClient(server.config())
        with pytest.raises(errors.NonEmptyGroupError):
            alter(admin, g, tp, 0)
        assert offsets(admin, g) == {tp: 5}
    finally:
        c.close()


@pytest.mark.processes
def test_offsets_survive_a_restart(tmp_path, stopping):  # noqa: F811
    srv = share_server(tmp_path, workers=1)
    stopping(srv)
    create(srv, "queue", 1)
    tp = TopicPartition("queue", 0)
    produce(srv, "queue", values(0, 6))
    assert consume(srv, "queue", "g", 6) == values(0, 6)
    admin = AdminClient(srv.config())
    alter(admin, "g", tp, 2)
    srv.stop()
    srv = share_server(tmp_path, workers=1)
    stopping(srv)
    admin = AdminClient(srv.config())
    # the coordinator forgot the group (membership is in memory); the
    # partition leader's snapshot file still has its start offset
    assert offsets(admin, "g") == {tp: 2}
    assert consume(srv, "queue", "g", 4) == values(2, 6)


def test_bad_input_gets_kafka_errors(server, queue, group_name):
    g, tp = group_name, TopicPartition(queue, 0)
    missing = TopicPartition(queue + "-missing", 0)
    admin = AdminClient(server.config())
    with pytest.raises(errors.GroupIdNotFoundError):
        offsets(admin, g + "-nobody")
    produce(server, queue, values(0, 2))
    consume(server, queue, g, 2)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        offsets(admin, g, [missing])
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        offsets(admin, g, [TopicPartition(queue, 7)])
    with pytest.raises(errors.InvalidRequestError):
        alter(admin, g, tp, -3)
    with pytest.raises(errors.UnknownTopicOrPartitionError):
        admin.alter_share_group_offsets(g, {missing: 0})[missing].result()
    with pytest.raises(errors.InvalidRequestError):
        offsets(admin, "")
    assert offsets(admin, g) == {tp: 2}


def test_offsets_of_partitions_led_by_different_workers(server, topic_name, group_name):
    """Every worker leading some of the topic is asked, and each resets its own."""
    srv, spread, g = server, topic_name, group_name
    create(srv, spread, 4)
    p = Producer(srv.config())
    for i in range(8):
        p.produce(spread, value=b"%d" % i, partition=i % 4)
    p.flush()
    c = ShareConsumer(srv.config(**{"group.id": g, "fetch.max.wait.ms": 100}))
    c.subscribe([spread])
    got = []
    deadline = time.monotonic() + 15
    while len(got) < 8 and time.monotonic() < deadline:
        got += c.consume(100, 0.2)
    c.commit_sync()
    c.close()
    assert len(got) == 8
    admin = AdminClient(srv.config())
    parts = [TopicPartition(spread, i) for i in range(4)]
    leaders = {md.leader for md in admin.list_topics(spread).topics[spread].partitions.values()}
    assert len(leaders) == 2
    assert offsets(admin, g) == {tp: 2 for tp in parts}
    results = admin.alter_share_group_offsets(g, {tp: 1 for tp in parts})
    assert all(f.result() is None for f in results.values())
    assert offsets(admin, g, parts) == {tp: 1 for tp in parts}


def _delete_offsets(server, group, topic) -> dict:
    """DeleteShareGroupOffsets (API 92, Kafka 4.1) on the wire."""
    port = int(server.kafka_bootstrap.rsplit(":", 1)[1])
    return kafka_call(port, ApiKey.DELETE_SHARE_GROUP_OFFSETS, 0, {
        "group_id": group, "topics": [{"topic_name": topic}]})


def test_delete_offsets_forgets_a_topic_only_while_the_group_is_empty(server, queue,
                                                                    group_name):
    """Kafka 4.1's DeleteShareGroupOffsets: refused NON_EMPTY_GROUP while a
    member is active; then the group's state of the topic is gone (a new
    member starts afresh, at the server's earliest) and a second delete
    finds none (UNKNOWN_TOPIC_OR_PARTITION)."""
    g, tp = group_name, TopicPartition(queue, 0)
    produce(server, queue, values(0, 5))
    assert consume(server, queue, g, 5) == values(0, 5)
    c = ShareConsumer(server.config(**{"group.id": g, "fetch.max.wait.ms": 100}))
    c.subscribe([queue])
    try:
        c.consume(1, 1.0)
        r = _delete_offsets(server, g, queue)
        assert r["error_code"] == errors.NonEmptyGroupError.code and r["responses"] == []
    finally:
        c.close()
    admin = AdminClient(server.config())
    assert offsets(admin, g) == {tp: 5}
    r = _delete_offsets(server, g, queue)
    assert r["error_code"] == 0
    assert [(x["topic_name"], x["error_code"]) for x in r["responses"]] == [(queue, 0)]
    assert consume(server, queue, g, 5) == values(0, 5)         # from the start again
    assert [x["error_code"] for x in _delete_offsets(server, g, queue)["responses"]] == [0]
    assert [x["error_code"] for x in _delete_offsets(server, g, queue)["responses"]] == [
        errors.UnknownTopicOrPartitionError.code]
