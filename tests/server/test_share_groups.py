"""Share groups (KIP-932) end to end: members in their own processes, a real server.

Every record must be accepted exactly once however the members come and
go; ``exactly_once`` is the checker, and it is shown to catch a server that
hands a record out twice or never (KAFKALITE_SHARE_FAULT, a fault probe in
server/replica/share_partition.py). The size of the five-member run is
KAFKALITE_SHARE_RECORDS (tests/soak.py).

Tests that need no setting of their own share one server (``shared``),
each with its own topic and group.
"""
import collections
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from compat.compat_helpers import KafkaWire
from harness import ServerProcess, child_env, create, read_all, wait_until
from kafkalite.client import AcknowledgeType, AdminClient, Producer, ShareConsumer
from kafkalite.protocol import ApiKey
from soak import setting

MEMBER = os.path.join(os.path.dirname(__file__), "share_member.py")
RECORDS = setting("KAFKALITE_SHARE_RECORDS")


def share_server(tmp_path, name="data", env=None, workers=2, extra=(), **settings):
    """A server (2 workers) whose share groups start from the earliest offset."""
    config = tmp_path / f"{name}.toml"
    lines = ['share_auto_offset_reset = "earliest"']
    lines += [f"{k} = {v}" for k, v in settings.items()]
    config.write_text("\n".join(lines) + "\n")
    srv = ServerProcess(str(tmp_path / name), workers=workers,
                        extra_args=["--config", str(config), *extra])
    old = {k: os.environ.get(k) for k in env or {}}
    os.environ.update(env or {})
    try:
        return srv.start()
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k)
            else:
                os.environ[k] = v


class Member:
    """share_member.py in its own process; its events gathered by a thread."""

    def __init__(self, server, group, topic, mode="accept", **config):
        self.proc = subprocess.Popen([sys.executable, MEMBER, server.bootstrap, group, topic, mode,
                                      json.dumps(config)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=child_env(), text=True)
        self.events = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def delivered(self):
        return [tuple(i) for e in list(self.events) if e["event"] == "records" for i in e["items"]]

    def accepted(self):
        """(partition, offset) acknowledged with a successful answer."""
        return [(p, o) for e in list(self.events)
                if e["event"] == "acked" and e["error"] is None for p, o, t in e["items"] if t == 1]

    def assigned(self):
        return any(e["event"] == "assigned" for e in list(self.events))

    def ack_errors(self):
        return [e for e in list(self.events) if e["event"] == "acked" and e["error"]]

    def stop(self, timeout=30):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout)
        self._reader.join(5)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._reader.join(5)


def exactly_once(produced, accepted):
    """(lost, duplicated): produced (partition, offset)s never accepted, and
    those accepted more than once, each sorted."""
    counts = collections.Counter(accepted)
    lost = sorted(set(produced) - set(counts))
    duplicated = sorted(k for k, n in counts.items() if n > 1)
    return lost, duplicated


def produce(server, topic, n, partitions, **config):
    """``n`` records round-robin over the partitions (of a topic written
    only this way); their (partition, offset)s."""
    p = Producer(server.config(**config))
    for i in range(n):
        p.produce(topic, value=b"%d" % i, partition=i % partitions)
    p.flush()
    p.close()
    return [(i % partitions, i // partitions) for i in range(n)]


def run_group(server, topic, produced, members, timeout=60.0, settle=None):
    """Wait until the members accepted as many records as were produced
    (or the time is up; with ``settle``, or once no record was accepted for
    ``settle`` seconds), stop them, and give every acceptance."""
    def done() -> bool:
        accepted = [a for m in members for a in m.accepted()]
        return len(set(accepted)) >= len(produced) and len(accepted) >= len(produced)
    try:
        deadline = time.monotonic() + timeout
        last, since = -1, time.monotonic()
        while not done() and time.monotonic() < deadline:
            count = sum(len(m.accepted()) for m in members)
            if count != last:
                last, since = count, time.monotonic()
            elif settle is not None and count and time.monotonic() - since >= settle:
                break
            time.sleep(0.1)
        # a little longer: a record accepted twice would show now
        time.sleep(0.5)
    finally:
        for m in members:
            m.stop()
    return [a for m in members for a in m.accepted()]


def redelivered_after_lock(srv, produced, held, acquired_at, others, lock_s):
    """``others`` accept every record exactly once, and got the records a
    killed member ``held`` (acquired at ``acquired_at``) as second
    deliveries, not before its lock of ``lock_s`` expired."""
    accepted = run_group(srv, "queue", produced, others)
    lost, duplicated = exactly_once(produced, accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    redelivered = {(p, o): (n, e["t"]) for m in others for e in m.events
                   if e["event"] == "records" for p, o, n in e["items"]}
    assert held and all(redelivered[k][0] == 2 for k in held)
    # not before the lock expired (a lower bound: a loaded machine only delays it)
    assert min(redelivered[k][1] for k in held) >= acquired_at + lock_s - 0.3


@pytest.fixture
def stopping():
    servers = []
    yield servers.append
    for srv in servers:
        if srv.proc.poll() is None:
            srv.stop()
        srv.kill()


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """A share server (default settings) for the module's tests that need
    none of their own; each has its own topic and group."""
    srv = share_server(tmp_path_factory.mktemp("share-groups"))
    yield srv
    if srv.proc.poll() is None:
        srv.stop()
    srv.kill()


@pytest.mark.processes
@pytest.mark.slow
def test_five_members_accept_every_record_exactly_once(shared, topic_name, group_name):
    srv = shared
    create(srv, topic_name, 2)
    # a fetch acquires whole batches up to its bytes: one small batch each,
    # so a partition's records go to whichever of its members fetch (one
    # fetch could otherwise take a partition's records at once)
    members = [Member(srv, group_name, topic_name, **{"max.partition.fetch.bytes": 1})
               for _ in range(5)]
    wait_until(lambda: all(m.assigned() for m in members), 30, "every member assigned")
    produced = produce(srv, topic_name, RECORDS, 2, **{"batch.size": 256})
    accepted = run_group(srv, topic_name, produced, members)
    lost, duplicated = exactly_once(produced, accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    # the records were shared out: members did work on each partition, and
    # more than one on a partition (the assignor gives partition 0 three
    # members, 1 two; both have more than one nearly always)
    workers = {p: sum(1 for m in members if any(a[0] == p for a in m.accepted())) for p in (0, 1)}
    assert all(n >= 1 for n in workers.values()) and sum(workers.values()) > 2, workers
    assert not any(m.ack_errors() for m in members)
    assert all(d[2] == 1 for m in members for d in m.delivered())


@pytest.mark.processes
@pytest.mark.parametrize("fault", ["duplicate", "skip"])
def test_checker_catches_a_server_that_breaks_exactly_once(tmp_path, stopping, fault):
    srv = share_server(tmp_path, env={"KAFKALITE_SHARE_FAULT": fault})
    stopping(srv)
    create(srv, "queue", 2)
    members = [Member(srv, "workers", "queue") for _ in range(2)]
    produced = produce(srv, "queue", 400, 2)
    # "skip" never hands some records out: that run ends when acceptances
    # stop; "duplicate" ends with every record accepted (a stall under load
    # must not end it early: it would count as a loss)
    accepted = run_group(srv, "queue", produced, members, timeout=10.0,
                         settle=2.0 if fault == "skip" else None)
    lost, duplicated = exactly_once(produced, accepted)
    if fault == "duplicate":
        assert duplicated and not lost
    else:
        assert lost and not duplicated


@pytest.mark.processes
def test_released_records_are_redelivered_to_another_member(tmp_path, stopping):
    # the releaser acquires more than the client hands it: those wait out
    # the lock, kept short here
    srv = share_server(tmp_path, group_share_record_lock_duration_ms=3000)
    stopping(srv)
    create(srv, "queue", 1)
    releaser = Member(srv, "workers", "queue", "release-then-idle")
    wait_until(releaser.assigned, 30, "the releaser assigned")
    # the releaser is alone first: it gets records, releases them and stays
    produced = produce(srv, "queue", 300, 1)
    wait_until(lambda: any(e["event"] == "acked" for e in releaser.events), 20,
               "the releaser's release answered")
    accepter = Member(srv, "workers", "queue")
    accepted = run_group(srv, "queue", produced, [accepter])
    releaser.stop()
    lost, duplicated = exactly_once(produced, accepted)
    assert not lost and not duplicated
    released = {(p, o) for p, o, _ in releaser.delivered()}
    redelivered = {(p, o): n for p, o, n in accepter.delivered()}
    # what the first member released, the second got as a second delivery
    assert released and all(redelivered[k] == 2 for k in released)


@pytest.mark.processes
def test_released_records_go_to_the_other_member_of_a_shared_partition(shared, topic_name,
                                                                      group_name):
    srv = shared
    create(srv, topic_name, 1)
    members = [Member(srv, group_name, topic_name, "release-once") for _ in range(2)]
    wait_until(lambda: all(m.assigned() for m in members), 30, "both members assigned")
    produced = produce(srv, topic_name, 1000, 1)
    accepted = run_group(srv, topic_name, produced, members)
    lost, duplicated = exactly_once(produced, accepted)
    assert not lost and not duplicated
    first = {(p, o): i for i, m in enumerate(members) for p, o, n in m.delivered() if n == 1}
    second = {(p, o): i for i, m in enumerate(members) for p, o, n in m.delivered() if n == 2}
    assert set(second) == set(produced)
    # a released record goes to the other member (which member got the first
    # deliveries is timing: under load one member may fetch them all)
    assert any(first[k] != second[k] for k in second)


@pytest.mark.processes
def test_records_of_a_killed_member_go_to_others_after_the_lock_duration(tmp_path, stopping):
    srv = share_server(tmp_path, group_share_record_lock_duration_ms=2000,
                       group_share_session_timeout_ms=3000)
    stopping(srv)
    create(srv, "queue", 2)
    holder = Member(srv, "workers", "queue", "hold")
    produced = produce(srv, "queue", 400, 2)
    wait_until(lambda: holder.delivered(), 20, "records delivered to the holder")
    held = {(p, o) for p, o, _ in holder.delivered()}
    acquired_at = min(e["t"] for e in holder.events if e["event"] == "records")
    holder.kill()
    others = [Member(srv, "workers", "queue") for _ in range(2)]
    redelivered_after_lock(srv, produced, held, acquired_at, others, 2.0)
    # the others left; the killed member is removed after its session timeout
    admin = AdminClient(srv.config())
    try:
        wait_until(lambda: admin.describe_share_groups(["workers"])["workers"]
                   .result()["members"] == [], 30, "the killed member removed", interval=0.5)
    finally:
        admin.close()


@pytest.mark.processes
def test_delivery_count_limit_and_reject_archive_records_to_the_dead_letter_topic(
        tmp_path, stopping):
    srv = share_server(tmp_path, group_share_delivery_count_limit=3,
                       share_dead_letter_topic='"dead-letters"')
    stopping(srv)
    create(srv, "released", 1)
    create(srv, "rejected", 2)
    # one partition: the two source partitions' leaders write it locally
    # and across workers
    create(srv, "dead-letters", 1)
    releaser = Member(srv, "g1", "released", "release")
    rejecter = Member(srv, "g2", "rejected", "reject")
    produce(srv, "released", 50, 1)
    produce(srv, "rejected", 50, 2)
    wait_until(lambda: len(releaser.delivered()) >= 150 and len(rejecter.delivered()) >= 50, 30,
               "every delivery of the releaser's and the rejecter's records")
    time.sleep(1.5)         # anything redelivered past the limit would arrive now
    releaser.stop()
    rejecter.stop()
    counts = collections.Counter((p, o) for p, o, _ in releaser.delivered())
    assert set(counts.values()) == {3} and len(counts) == 50
    assert max(n for _, _, n in releaser.delivered()) == 3
    assert collections.Counter((p, o) for p, o, _ in rejecter.delivered()) == \
        {(p, o): 1 for p in (0, 1) for o in range(25)}
    # archived records are copied to the dead-letter topic, saying where from and why
    letters = read_all(srv, "dead-letters", 1, 100, timeout=30)
    got = collections.Counter()
    for m in letters:
        h = {k: v.decode() for k, v in m.headers()}
        source = (h["__dlq.errors.topic"], int(h["__dlq.errors.partition"]),
                  int(h["__dlq.errors.offset"]))
        got[source] += 1
        if source[0] == "rejected":
            assert h["__dlq.errors.group.id"] == "g2" and h["__dlq.errors.reason"] == "rejected"
            assert h["__dlq.errors.delivery.count"] == "1"
            assert m.value() == b"%d" % (source[2] * 2 + source[1])
        else:
            assert h["__dlq.errors.group.id"] == "g1"
            assert h["__dlq.errors.reason"] == "delivery count limit reached (released)"
            assert h["__dlq.errors.delivery.count"] == "3"
            assert m.value() == b"%d" % source[2]
    assert got == {**{("released", 0, o): 1 for o in range(50)},
                   **{("rejected", p, o): 1 for p in (0, 1) for o in range(25)}}


class Acks:
    """What a test's in-process ShareConsumers were told about their
    acknowledgements: accepted (a successful answer) and in doubt (an error:
    the broker may or may not have applied them)."""

    def __init__(self):
        self.accepted, self.in_doubt = [], []

    def __call__(self, offsets, error):
        for (topic, p), got in offsets.items():
            for o, kind in got:
                if kind == AcknowledgeType.ACCEPT:
                    (self.accepted if error is None else self.in_doubt).append((p, o))


def consumers(server, acks, n, **config):
    out = [ShareConsumer(server.config(**{"group.id": "workers", "on_commit": acks,
                                          "fetch.max.wait.ms": 100, **config}))
           for _ in range(n)]
    for c in out:
        c.subscribe(["queue"])
    return out


@pytest.mark.processes
@pytest.mark.parametrize("fault", [None, "amnesia"])
def test_share_state_survives_a_killed_server(tmp_path, stopping, fault):
    """The share coordinator's state (``__share_group_state``) after kill -9
    of every process; with the planted fault "amnesia" (leaders ignore that
    state) the checker must see records accepted twice."""
    srv = share_server(tmp_path)
    stopping(srv)
    create(srv, "queue", 2)
    produced = produce(srv, "queue", 2000, 2)
    acks = Acks()
    before = consumers(srv, acks, 2, **{"request.timeout.ms": 2000})
    delivered_before = []
    deadline = time.monotonic() + 30
    while len(acks.accepted) < 800 and time.monotonic() < deadline:
        for c in before:
            delivered_before += [(m.partition(), m.offset()) for m in c.consume(50, 0.1)]
    assert len(acks.accepted) >= 800
    # kill -9 mid-stream: every process of the server at once
    for pid in srv.worker_pids():
        os.kill(pid, signal.SIGKILL)
    srv.kill()
    for c in before:
        # answers that came before the kill are reported now; what was
        # still to send is in doubt
        c.close()
    accepted_before = list(acks.accepted)
    # the same data directory and settings
    srv = share_server(tmp_path, env={"KAFKALITE_SHARE_FAULT": fault} if fault else None)
    stopping(srv)
    after = consumers(srv, acks, 2)
    delivered_after = []
    deadline = time.monotonic() + 60
    while (len(set(acks.accepted) | set(acks.in_doubt)) < len(produced)
           and time.monotonic() < deadline):
        for c in after:
            delivered_after += [(m.partition(), m.offset()) for m in c.consume(200, 0.1)]
    for c in after:
        c.close()
    lost, duplicated = exactly_once(set(produced) - set(acks.in_doubt), acks.accepted)
    if fault == "amnesia":
        assert duplicated and set(accepted_before) & set(delivered_after)
        return
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    # what was accepted before the kill is never handed out again
    assert not set(accepted_before) & set(delivered_after)
    # what was handed out but not accepted before the kill came back
    assert set(delivered_before) - set(accepted_before) - set(acks.in_doubt) \
        <= set(delivered_after)


def test_bad_share_requests_get_kafka_errors(shared, topic_name, group_name):
    """Over the wire with our codec: wrong epochs, records not held, absurd
    ranges and unknown ids are answered with Kafka's error codes."""
    from kafkalite.client.connection import Connection, parse_bootstrap
    from kafkalite.client.metadata import Metadata
    from kafkalite.errors import (GroupIdNotFoundError, InvalidRecordStateError,
                                  InvalidRequestError,
                                  InvalidShareSessionEpochError, ShareSessionNotFoundError,
                                  UnknownTopicIdError)
    from kafkalite.protocol import ApiKey
    srv, queue, g = shared, topic_name, group_name
    create(srv, queue, 1)
    produce(srv, queue, 10, 1)
    meta = Metadata(parse_bootstrap(srv.bootstrap), "hostile")
    meta.refresh([queue])
    tid = meta.topics[queue].topic_id
    sup = meta.connection()
    hb = {"group_id": g, "member_id": "", "member_epoch": 0, "rack_id": None,
          "subscribed_topic_names": [queue]}
    # a group that does not exist yet: only a join (epoch 0) makes it
    assert sup.request(ApiKey.SHARE_GROUP_HEARTBEAT, {**hb, "member_epoch": 3, "member_id": "x"},
                       version=0)["error_code"] == GroupIdNotFoundError.code
    assert sup.request(ApiKey.SHARE_GROUP_HEARTBEAT, {**hb, "group_id": ""},
                       version=0)["error_code"] == InvalidRequestError.code
    # one group id, one kind of group: a share group is no consumer group
    assert sup.request(ApiKey.SHARE_GROUP_HEARTBEAT, hb, version=0)["error_code"] == 0
    assert sup.request(ApiKey.CONSUMER_GROUP_HEARTBEAT, {
        "group_id": g, "member_id": "", "member_epoch": 0, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": 10000, "subscribed_topic_names": [queue],
        "server_assignor": None, "topic_partitions": []},
        version=0)["error_code"] == GroupIdNotFoundError.code
    worker = Connection(meta.brokers[meta.leader(queue, 0)], "hostile")
    try:
        def fetch(member, epoch, acks=(), topic_id=tid):
            return worker.request(ApiKey.SHARE_FETCH, {
                "group_id": g, "member_id": member, "share_session_epoch": epoch,
                "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
                "topics": [{"topic_id": topic_id, "partitions": [{
                    "partition_index": 0, "partition_max_bytes": 1 << 20,
                    "acknowledgement_batches": list(acks)}]}],
                "forgotten_topics_data": []}, version=0)

        first = fetch("a", 0)["responses"][0]["partitions"][0]
        assert first["acquired_records"] == [{"first_offset": 0, "last_offset": 9,
                                              "delivery_count": 1}]
        assert fetch("a", 5)["error_code"] == InvalidShareSessionEpochError.code
        assert fetch("b", 7)["error_code"] == ShareSessionNotFoundError.code
        assert fetch("", 0)["error_code"] == InvalidRequestError.code
        # b acknowledges what a holds; then absurd ranges and types
        fetch("b", 0)
        for epoch, acks in enumerate([
                [{"first_offset": 0, "last_offset": 3, "acknowledge_types": [1]}],
                [{"first_offset": 0, "last_offset": 2 ** 62, "acknowledge_types": [1]}],
                [{"first_offset": -5, "last_offset": -1, "acknowledge_types": [1]}]], 1):
            got = fetch("b", epoch, acks)["responses"][0]["partitions"][0]
            assert got["acknowledge_error_code"] == InvalidRecordStateError.code
        got = fetch("b", 4, [{"first_offset": 3, "last_offset": 1, "acknowledge_types": [1]}])
        assert got["responses"][0]["partitions"][0]["acknowledge_error_code"] == \
            InvalidRequestError.code
        got = fetch("a", 1, [{"first_offset": 0, "last_offset": 1, "acknowledge_types": [9]}])
        assert got["responses"][0]["partitions"][0]["acknowledge_error_code"] == \
            InvalidRequestError.code
        # nothing above changed a's hold: it accepts all ten
        got = fetch("a", 2, [{"first_offset": 0, "last_offset": 9, "acknowledge_types": [1]}])
        assert got["responses"][0]["partitions"][0]["acknowledge_error_code"] == 0
        import uuid
        got = fetch("a", 3, topic_id=uuid.uuid4())
        codes = {p["error_code"] for t in got["responses"] for p in t["partitions"]}
        assert UnknownTopicIdError.code in codes
        assert srv.proc.poll() is None and all(
            os.path.exists(f"/proc/{pid}") for pid in srv.worker_pids())
    finally:
        worker.close()
        meta.close()


@pytest.mark.processes
def test_share_consumers_carry_on_when_the_leading_worker_is_killed(tmp_path, stopping):
    """The worker leading the partition dies (kill -9) mid-stream and the
    supervisor restarts it: the same consumers carry on, nothing is lost and
    nothing confirmed accepted is accepted again."""
    srv = share_server(tmp_path)
    stopping(srv)
    create(srv, "queue", 1)
    produced = produce(srv, "queue", 2000, 1)
    acks = Acks()
    members = consumers(srv, acks, 2, **{"request.timeout.ms": 3000})
    delivered_after = []
    killed = None
    deadline = time.monotonic() + 90
    try:
        while (len(set(acks.accepted) | set(acks.in_doubt)) < len(produced)
               and time.monotonic() < deadline):
            for c in members:
                got = c.consume(50, 0.1)
                if killed is not None:
                    delivered_after += [(m.partition(), m.offset()) for m in got]
            if killed is None and len(acks.accepted) >= 600:
                accepted_before = set(acks.accepted)
                from kafkalite.client.connection import parse_bootstrap
                from kafkalite.client.metadata import Metadata
                meta = Metadata(parse_bootstrap(srv.bootstrap), "test")
                meta.refresh(["queue"])
                index = meta.leader("queue", 0)
                meta.close()
                killed = srv.worker_pid(index)
                os.kill(killed, signal.SIGKILL)
                srv.wait_for_worker_restart(index, killed)
    finally:
        for c in members:
            c.close()
    assert killed is not None
    lost, duplicated = exactly_once(set(produced) - set(acks.in_doubt), acks.accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    assert not accepted_before & set(delivered_after)


@pytest.mark.processes
def test_share_state_follows_a_leader_failover(tmp_path, stopping):
    """A partition with three replicas: its leader is killed -9 mid-stream
    and a follower takes over with the share-partition's state: it hands
    out again only what was not accepted."""
    from replicas import create as create_replicated
    from replicas import state, wait_for
    srv = share_server(tmp_path, workers=3, extra=["--broker-session-timeout-ms", "60000"])
    stopping(srv)
    create_replicated(srv, "queue", 1, rf=3)
    produced = produce(srv, "queue", 2000, 1)
    acks = Acks()
    members = consumers(srv, acks, 2, **{"request.timeout.ms": 3000})
    delivered_after, redelivered = [], []
    old_leader = None
    deadline = time.monotonic() + 120
    idle_since = time.monotonic()
    try:
        # on until every record is accounted for and, after the failover,
        # nothing more comes for 3 s (a new leader without the state would
        # hand everything out again)
        while time.monotonic() < deadline and not (
                old_leader is not None and time.monotonic() - idle_since > 3.0
                and len(set(acks.accepted) | set(acks.in_doubt)) >= len(produced)):
            for c in members:
                got = c.consume(50, 0.1)
                if got:
                    idle_since = time.monotonic()
                if old_leader is not None:
                    delivered_after += [(m.partition(), m.offset()) for m in got]
                    redelivered += [m.offset() for m in got if m.delivery_count() > 1]
            if old_leader is None and len(acks.accepted) >= 600:
                accepted_before = set(acks.accepted)
                old_leader = state(srv, "queue")[0][0]
                os.kill(srv.worker_pid(old_leader), signal.SIGKILL)
                wait_for(lambda: state(srv, "queue")[0][0] not in (old_leader, -1),
                         what="a new leader")
    finally:
        for c in members:
            c.close()
    assert old_leader is not None
    lost, duplicated = exactly_once(set(produced) - set(acks.in_doubt), acks.accepted)
    assert not lost and not duplicated, (lost[:20], duplicated[:20])
    assert not accepted_before & set(delivered_after)
    # the new leader handed out again what was held but not accepted at the kill
    assert redelivered


def test_a_share_fetch_that_waited_sends_the_records_it_acquired_first(shared, topic_name,
                                                                       group_name):
    """A ShareFetch that acquired records, fewer bytes than its min_bytes,
    waits for more; its answer carries the records it acquired first (the
    records acquired after the wait must not take their place in the
    answer: those would stay held by the member, never sent, until their
    lock expired), and the next ShareFetch goes on from there."""
    create(shared, topic_name, 1)
    produce(shared, topic_name, 1200, 1)
    wire = KafkaWire(shared.kafka_bootstrap)
    try:
        md = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic_name}]})
        tid = md["topics"][0]["topic_id"]
        joined = wire.request(ApiKey.SHARE_GROUP_HEARTBEAT, 1, {
            "group_id": group_name, "member_id": "m-1", "member_epoch": 0, "rack_id": None,
            "subscribed_topic_names": [topic_name]})
        assert joined["error_code"] == 0, joined
        leader = {b["node_id"]: f"{b['host']}:{b['port']}" for b in md["brokers"]}[
            md["topics"][0]["partitions"][0]["leader_id"]]
    finally:
        wire.close()
    data = KafkaWire(leader)
    try:
        def acquired(epoch: int) -> list:
            # at most 500 records a partition per pass (MAX_ACQUIRED_RECORDS):
            # 1200 records cannot meet 10 MiB, so the fetch waits its 300 ms
            answer = data.request(ApiKey.SHARE_FETCH, 1, {
                "group_id": group_name, "member_id": "m-1", "share_session_epoch": epoch,
                "max_wait_ms": 300, "min_bytes": 10 << 20, "max_bytes": 1 << 24,
                "max_records": 2000, "batch_size": 500,
                "topics": [{"topic_id": tid, "partitions": [{
                    "partition_index": 0, "acknowledgement_batches": []}]}],
                "forgotten_topics_data": []})
            assert answer["error_code"] == 0, answer
            [part] = answer["responses"][0]["partitions"]
            assert part["error_code"] == 0, part
            return [(r["first_offset"], r["last_offset"]) for r in part["acquired_records"]]

        first = wait_until(lambda: acquired(0) or None, 10, "the share-partition's records")
        assert first[0][0] == 0, f"the first records acquired were not sent: {first}"
        second = acquired(1)
        assert second and second[0][0] == first[-1][1] + 1, (first, second)
    finally:
        data.close()
