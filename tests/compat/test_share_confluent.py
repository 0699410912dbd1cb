"""Share groups (KIP-932) with a third-party client: confluent-kafka's
ShareConsumer (librdkafka's, which speaks ShareGroupHeartbeat, ShareFetch
and ShareAcknowledge v1 only, Kafka 4.1's stable versions) against a real
server.

The members run as their own processes (share_confluent_member.py), with
this python: the test environment's confluent-kafka (2.16 or later,
pyproject.toml's test extra) has the ShareConsumer; an older one fails the
``ck_python`` fixture, naming the install that brings it. They print what
they got and what the broker acknowledged.

The checks are those of tests/server/test_share_groups.py, whose member
harness, exactly-once checker and fault probe (KAFKALITE_SHARE_FAULT) they
reuse: the checker is shown to catch a broker that hands a record out twice
or never with these members too. A run ends when the broker is done with
every record (the group's share-partition start offsets at the log ends:
each record accepted or archived, a planted fault's included) and the
members have the answers to their acknowledgements, not after a fixed wait.
Tests that need no server of their own share the module's ``shared`` one,
each on its own topics and groups.
"""
from __future__ import annotations

import collections
import importlib.metadata
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from harness import child_env, create, read_all, wait_until

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "server"))
from test_share_groups import (Member, exactly_once, produce, share_server,  # noqa: E402
                               stopping)  # noqa: F401 (a fixture)

from kafkalite.client import AdminClient, TopicPartition  # noqa: E402

pytestmark = pytest.mark.xdist_group("share_confluent")    # one module server

# librdkafka's ShareConsumer came in 2.15 (preview); these members are
# written against 2.16's
CK_SHARE_VERSION = (2, 16)
MEMBER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "share_confluent_member.py")


@pytest.fixture(scope="session")
def ck_python() -> str:
    """The python the confluent members run in: this one, whose
    confluent-kafka must have the ShareConsumer."""
    import confluent_kafka
    version = importlib.metadata.version("confluent-kafka")
    have = tuple(int(n) for n in version.split(".")[:2])
    assert have >= CK_SHARE_VERSION and hasattr(confluent_kafka, "ShareConsumer"), (
        f"confluent-kafka {version} has no ShareConsumer (2.16 or later): "
        f"pip install -e '.[test]'")
    return sys.executable


class CkMember(Member):
    """share_confluent_member.py in its own process; the same
    events as share_member.py's (Member), read by the same thread."""

    def __init__(self, python, server, group, topic, mode="accept"):
        self.proc = subprocess.Popen([str(python), MEMBER, server.kafka_bootstrap, group, topic,
                                      mode], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=child_env(), text=True)
        self.events = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def errors(self):
        return [e for e in list(self.events) if e["event"] == "error"]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A share server for the tests that only need records from the
    earliest offset (each on its own topics and groups): the dead-letter
    topic and the delivery count limit of 3 are the dead-letter test's, and
    the others never reject a record nor release one past a first delivery."""
    srv = share_server(tmp_path_factory.mktemp("share"), share_dead_letter_topic='"dead-letters"',
                       group_share_delivery_count_limit=3)
    try:
        create(srv, "dead-letters", 1)
        yield srv
    finally:
        if srv.proc.poll() is None:
            srv.stop()
        srv.kill()


def members_of(server, group) -> list:
    admin = AdminClient(server.config())
    try:
        return admin.describe_share_groups([group])[group].result()["members"]
    except Exception:          # noqa: BLE001 (the group does not exist yet)
        return []
    finally:
        admin.close()


def joined(server, group, n, timeout=30):
    """``n`` members in ``group``, each with partitions assigned."""
    return wait_until(lambda: len([m for m in members_of(server, group)
                                   if m["assignment"]["topic_partitions"]]) >= n, timeout,
                      message=lambda: f"{n} members of {group} with partitions: "
                                      f"{members_of(server, group)}", interval=0.3)


def accepting_members(python, server, n, group, topic):
    members = [CkMember(python, server, group, topic) for _ in range(n)]
    joined(server, group, n)
    return members


def start_offsets(server, group, topic, partitions) -> dict:
    """{partition: the group's share-partition start offset} (-1: no state yet)."""
    admin = AdminClient(server.config())
    try:
        got = admin.list_share_group_offsets(
            {group: [TopicPartition(topic, p) for p in partitions]})[group].result()
    except Exception:          # noqa: BLE001 (the group has no state yet)
        return {}
    finally:
        admin.close()
    return {tp.partition: offset for tp, offset in got.items()}


def answered(member) -> bool:
    """Whether the member has the broker's answer to every acknowledgement
    of what it was handed (each delivery is acknowledged once)."""
    delivered = collections.Counter((p, o) for p, o, _ in member.delivered())
    acked = collections.Counter((p, o) for e in list(member.events) if e["event"] == "acked"
                                for p, o, _ in e["items"])
    return delivered == acked


def run_group(server, group, topic, produced, members, timeout=60.0):
    """Wait until the broker is done with every record produced (the group's
    share-partition start offsets are at the ends: each record accepted or
    archived, a fault's included) and every member has the answers to what
    it acknowledged, stop the members, and give every acceptance."""
    ends = collections.Counter()
    for p, o in produced:
        ends[p] = max(ends[p], o + 1)
    try:
        wait_until(lambda: start_offsets(server, group, topic, ends) == ends, timeout,
                   message=lambda: f"{group}'s start offsets "
                                   f"{start_offsets(server, group, topic, ends)} at {dict(ends)}")
        wait_until(lambda: all(answered(m) for m in members), 30,
                   message="the members' answers to their acknowledgements")
    finally:
        for m in members:
            m.stop()
    return [a for m in members for a in m.accepted()]


def redelivered_after_lock(srv, group, topic, produced, held, acquired_at, others, lock_s):
    """``others`` accept every record exactly once, and got the records a
    killed member ``held`` (acquired at ``acquired_at``) as second
    deliveries, not before its lock of ``lock_s`` expired."""
    accepted = run_group(srv, group, topic, produced, others)
    lost, duplicated = exactly_once(produced, accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    redelivered = {(p, o): (n, e["t"]) for m in others for e in m.events
                   if e["event"] == "records" for p, o, n in e["items"]}
    assert held and all(redelivered[k][0] == 2 for k in held)
    # not before the lock expired (a lower bound: a loaded machine only delays it)
    assert min(redelivered[k][1] for k in held) >= acquired_at + lock_s - 0.3


@pytest.mark.processes
def test_confluent_share_consumers_accept_every_record_exactly_once(shared, ck_python, topic_name,
                                                                    group_name):
    srv = shared
    create(srv, topic_name, 2)
    members = accepting_members(ck_python, srv, 5, group_name, topic_name)
    produced = produce(srv, topic_name, 2000, 2)
    accepted = run_group(srv, group_name, topic_name, produced, members)
    lost, duplicated = exactly_once(produced, accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    # the work was shared out, every record delivered once, no error on the way
    assert sum(1 for m in members if m.accepted()) >= 2
    assert all(n == 1 for m in members for _, _, n in m.delivered())
    assert not any(m.ack_errors() or m.errors() for m in members)
    assert all(any(e["event"] == "closed" for e in m.events) for m in members)
    # the members left the group when they closed
    wait_until(lambda: members_of(srv, group_name) == [], 10, "the members to leave",
               interval=0.3)


@pytest.mark.processes
@pytest.mark.parametrize("fault", ["duplicate", "skip"])
def test_checker_catches_a_broker_that_breaks_exactly_once(tmp_path, stopping, ck_python, fault):
    srv = share_server(tmp_path, env={"KAFKALITE_SHARE_FAULT": fault})
    stopping(srv)
    create(srv, "queue", 2)
    members = accepting_members(ck_python, srv, 2, "workers", "queue")
    produced = produce(srv, "queue", 400, 2)
    accepted = run_group(srv, "workers", "queue", produced, members)
    lost, duplicated = exactly_once(produced, accepted)
    if fault == "duplicate":
        assert duplicated and not lost
    else:
        assert lost and not duplicated


@pytest.mark.processes
def test_released_records_are_redelivered_and_rejected_ones_dead_lettered(
        shared, ck_python, topic_name, group_name):
    srv = shared
    queue, rejected, released = topic_name, topic_name + "-rejected", topic_name + "-released"
    workers, g2, g3 = group_name, group_name + "-2", group_name + "-3"
    create(srv, queue, 1)
    create(srv, rejected, 2)
    create(srv, released, 1)
    # explicit acknowledgement: each record released on its first delivery,
    # accepted on its second (by whichever member gets it)
    releasers = [CkMember(ck_python, srv, workers, queue, "release-once") for _ in range(2)]
    rejecter = CkMember(ck_python, srv, g2, rejected, "reject")
    # and one that releases everything: delivered 3 times (the limit), then archived
    always = CkMember(ck_python, srv, g3, released, "release")
    joined(srv, workers, 2)
    joined(srv, g2, 1)
    joined(srv, g3, 1)
    produced = produce(srv, queue, 300, 1)
    produce(srv, rejected, 50, 2)
    produce(srv, released, 30, 1)
    accepted = run_group(srv, workers, queue, produced, releasers)
    lost, duplicated = exactly_once(produced, accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    deliveries = collections.defaultdict(list)
    for m in releasers:
        for p, o, n in m.delivered():
            deliveries[(p, o)].append(n)
    assert {k: sorted(v) for k, v in deliveries.items()} == {k: [1, 2] for k in produced}
    released_items = [(p, o) for m in releasers for e in m.events if e["event"] == "acked"
                      and e["error"] is None for p, o, t in e["items"] if t == 2]
    assert sorted(released_items) == sorted(produced)
    # rejected records are archived (never redelivered), released ones after
    # their third delivery, and both copied to the dead-letter topic
    wait_until(lambda: len(rejecter.delivered()) >= 50 and len(always.delivered()) >= 90, 30,
               "the rejected and released records' deliveries")
    time.sleep(1.0)              # an archived record redelivered would arrive now
    rejecter.stop()
    always.stop()
    assert collections.Counter((p, o) for p, o, _ in rejecter.delivered()) == \
        {(p, o): 1 for p in (0, 1) for o in range(25)}
    assert sorted(always.delivered()) == [(0, o, n) for o in range(30) for n in (1, 2, 3)]
    # the dead-letter topic is the module server's: this test's letters are
    # those of its groups (the others' tests archive nothing)
    letters = [m for m in read_all(srv, "dead-letters", 1, 80, timeout=30)
               if dict(m.headers())["__dlq.errors.group.id"].decode() in (g2, g3)]
    headers = [{k: v.decode() for k, v in m.headers()} for m in letters]
    reasons = collections.Counter((h["__dlq.errors.group.id"], h["__dlq.errors.reason"])
                                  for h in headers)
    assert reasons == {(g2, "rejected"): 50,
                       (g3, "delivery count limit reached (released)"): 30}
    sources = sorted((int(h["__dlq.errors.partition"]), int(h["__dlq.errors.offset"]))
                     for h in headers if h["__dlq.errors.group.id"] == g2)
    assert sources == [(p, o) for p in (0, 1) for o in range(25)]


@pytest.mark.processes
def test_records_of_a_killed_member_are_redelivered_after_the_lock_duration(
        tmp_path, stopping, ck_python):
    srv = share_server(tmp_path, group_share_record_lock_duration_ms=2000,
                       group_share_session_timeout_ms=3000)
    stopping(srv)
    create(srv, "queue", 2)
    holder = CkMember(ck_python, srv, "workers", "queue", "hold")
    joined(srv, "workers", 1)
    produced = produce(srv, "queue", 400, 2)
    wait_until(holder.delivered, 20, "the holder's first records")
    held = {(p, o) for p, o, _ in holder.delivered()}
    acquired_at = min(e["t"] for e in holder.events if e["event"] == "records")
    holder.proc.send_signal(signal.SIGKILL)
    holder.proc.wait(10)
    others = [CkMember(ck_python, srv, "workers", "queue") for _ in range(2)]
    redelivered_after_lock(srv, "workers", "queue", produced, held, acquired_at, others, 2.0)
    # the killed member is expelled after its session timeout
    wait_until(lambda: members_of(srv, "workers") == [], 30, "the killed member's expulsion",
               interval=0.5)


@pytest.mark.processes
def test_a_group_mixing_native_and_confluent_share_consumers(shared, ck_python, topic_name,
                                                             group_name):
    srv = shared
    create(srv, topic_name, 2)
    native = [Member(srv, group_name, topic_name) for _ in range(2)]
    confluent = [CkMember(ck_python, srv, group_name, topic_name) for _ in range(2)]
    joined(srv, group_name, 4)
    members = native + confluent
    # Whoever fetches first may take a whole wave (the native members
    # sometimes did, in about 1 run of 6): more waves until both kinds of
    # member have accepted some, for the check below that both took part.
    produced = []
    for wave in range(10):
        produced += [(p, o + wave * 1000) for p, o in produce(srv, topic_name, 2000, 2)]
        wait_until(lambda: len({a for m in members for a in m.accepted()}) >= len(produced), 30,
                   lambda: f"wave {wave}'s {len(produced)} records accepted; each member's "
                           f"delivered / accepted: "
                           f"{[(len(m.delivered()), len(m.accepted())) for m in members]}, "
                           f"acknowledgement errors {[m.ack_errors()[-2:] for m in members]}, the "
                           f"confluent members' exit codes {[m.proc.poll() for m in confluent]} "
                           f"and errors {[m.errors()[-2:] for m in confluent]}")
        if any(m.accepted() for m in native) and any(m.accepted() for m in confluent):
            break
    accepted = run_group(srv, group_name, topic_name, produced, members)
    lost, duplicated = exactly_once(produced, accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    # both clients did work, every record once, no error on either side
    assert any(m.accepted() for m in native) and any(m.accepted() for m in confluent)
    assert all(n == 1 for m in native + confluent for _, _, n in m.delivered())
    assert not any(m.ack_errors() for m in native + confluent)
    assert not any(m.errors() for m in confluent)


@pytest.mark.processes
@pytest.mark.parametrize("fault", [None, "amnesia"])
def test_confluent_members_resume_after_a_killed_server(tmp_path, stopping, ck_python, fault):
    """kill -9 of every server process mid-stream: the share coordinator's
    state (``__share_group_state``) brings back what was accepted, and
    confluent members after the restart accept the rest, none twice. With
    the planted fault "amnesia" (leaders ignore that state) the checker must
    see records accepted twice."""
    srv = share_server(tmp_path)
    stopping(srv)
    create(srv, "queue", 2)
    before = accepting_members(ck_python, srv, 2, "workers", "queue")
    produced = produce(srv, "queue", 3000, 2)
    wait_until(lambda: sum(len(m.accepted()) for m in before) >= 600, 30,
               "600 records accepted before the kill")
    for pid in srv.worker_pids():
        os.kill(pid, signal.SIGKILL)
    srv.kill()
    for m in before:
        m.kill()
    accepted_before = [a for m in before for a in m.accepted()]
    # handed out, but the member was not told the broker took its
    # acknowledgement before the kill: accepted or not, either is right
    in_doubt = {(p, o) for m in before for p, o, _ in m.delivered()} - set(accepted_before)
    # the same data directory
    srv = share_server(tmp_path, env={"KAFKALITE_SHARE_FAULT": fault} if fault else None)
    stopping(srv)
    after = accepting_members(ck_python, srv, 2, "workers", "queue")
    accepted_after = run_group(srv, "workers", "queue", produced, after)
    lost, duplicated = exactly_once(set(produced) - in_doubt, accepted_before + accepted_after)
    if fault:
        assert duplicated
        return
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    # what a member was told was accepted before the kill is never delivered again
    delivered_after = {(p, o) for m in after for p, o, _ in m.delivered()}
    assert accepted_before and not set(accepted_before) & delivered_after
