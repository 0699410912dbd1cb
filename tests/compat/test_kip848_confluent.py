"""A KIP-848 consumer group of confluent-kafka consumers
(``group.protocol=consumer``) against kafkalite while records flow: three
members join one by one on a 6-partition topic, one leaves (close), one is
killed with SIGKILL (its partitions move after the group's session
timeout), the last one reads to the end. Each member is its own process
(kip848_member.py) logging its assignments, revocations, records and
commits.

The checker (``check_group_run``) asks of those logs:

- every partition has at most one owner at any time (an owner's interval
  runs from its assignment to its revocation, its close or its kill);
- no record is lost: every record produced was consumed by some member;
- at least once, no more: a member that takes a partition over starts at or
  after the offset committed before its assignment, and never goes back
  within it (duplicates only in the uncommitted window of a killed member);
- members not affected by a rebalance never stop fetching: while records
  flow, no owner's partition goes more than ``MAX_GAP_S`` without a record.

With three members in, confluent-kafka's AdminClient describes the group
(ConsumerGroupDescribe): members, assignments, target assignments.

The planted fault (``KIP848_PLANTED_DROP=1`` for the first member) forgets
one consumed record but commits past it: the same run must then report
exactly that record lost (the second parametrization).
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import confluent_kafka as ck
import pytest
from compat_helpers import create_topic
from harness import ServerProcess, child_env, wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
PARTITIONS = 6
SESSION_TIMEOUT_MS = 4000
MAX_GAP_S = 3.0

# one server for the module's runs: they go to one xdist worker
pytestmark = pytest.mark.xdist_group("kip848_confluent")


def parse(path) -> list[tuple]:
    events = []
    with open(path) as f:
        for line in f:
            kind, t, *rest = line.split()
            events.append((kind, float(t), *rest))
    return events


def owned(events) -> set:
    """The partitions a member's log says it owns at its end."""
    now: set = set()
    for kind, _, *rest in events:
        if kind == "A":
            now |= {int(p) for p in rest[0].split(",") if p != "-"}
        elif kind in ("R", "L"):
            now -= {int(p) for p in rest[0].split(",") if p != "-"}
    return now


def check_group_run(logs: dict, ended: dict, produced: dict, flow_end: float) -> list[str]:
    """What is wrong with a run: ``logs`` {member: events}, ``ended``
    {member: time it closed or was killed}, ``produced`` {partition: end
    offset}; records flowed until ``flow_end``."""
    problems = []
    intervals = []                                   # (partition, start, end, member)
    consumed: dict = {}                              # (member, partition) -> [(time, offset)]
    commits = []                                     # (time, partition, offset)
    for member, events in logs.items():
        start: dict = {}
        for kind, t, *rest in events:
            if kind == "A":
                for p in rest[0].split(","):
                    if p != "-":
                        start[int(p)] = t
            elif kind in ("R", "L"):
                for p in rest[0].split(","):
                    if p != "-" and int(p) in start:
                        intervals.append((int(p), start.pop(int(p)), t, member))
            elif kind == "M":
                consumed.setdefault((member, int(rest[0])), []).append((t, int(rest[1])))
            elif kind == "C":
                commits.append((t, int(rest[0]), int(rest[1])))
        for p, t in start.items():
            intervals.append((p, t, ended.get(member, float("inf")), member))
    intervals.sort()
    for i, (p, s1, e1, m1) in enumerate(intervals):
        for p2, s2, e2, m2 in intervals[i + 1:]:
            if p2 == p and m2 != m1 and s2 < e1 and s1 < e2:
                problems.append(f"partition {p} owned by {m1} and {m2} at once")
    seen = {(p, o) for (_, p), recs in consumed.items() for _, o in recs}
    problems += [f"lost partition {p} offset {o}" for p, end in sorted(produced.items())
                 for o in range(end) if (p, o) not in seen]
    for p, s, e, member in intervals:
        recs = [(t, o) for t, o in consumed.get((member, p), ()) if s <= t <= e]
        if not recs:
            continue
        committed = max((o for t, pp, o in commits if pp == p and t < s), default=0)
        offsets = [o for _, o in recs]
        if offsets[0] < committed:
            problems.append(f"{member} re-read partition {p} from {offsets[0]}, below its "
                            f"commit {committed}")
        if any(b <= a for a, b in zip(offsets, offsets[1:])):
            problems.append(f"{member} went back on partition {p}")
        times = [t for t, _ in recs if t <= flow_end]
        gaps = [b - a for a, b in zip(times, times[1:])]
        if gaps and max(gaps) > MAX_GAP_S:
            problems.append(f"{member} stopped fetching partition {p} for {max(gaps):.1f} s")
    return problems


class Producing(threading.Thread):
    """Records to every partition in turn until stopped; ``ends`` holds each
    partition's end offset from the delivery reports."""

    def __init__(self, server, topic):
        super().__init__(daemon=True)
        self.producer = ck.Producer({"bootstrap.servers": server.kafka_bootstrap,
                                     "linger.ms": 5})
        self.topic, self.stop, self.ends, self.errors = topic, threading.Event(), {}, []

    def delivered(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.ends[msg.partition()] = max(self.ends.get(msg.partition(), 0), msg.offset() + 1)

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.producer.produce(self.topic, b"%d" % i, partition=i % PARTITIONS,
                                  on_delivery=self.delivered)
            self.producer.poll(0)
            i += 1
            time.sleep(0.004)        # a steady flow, not a flood: ~250 records/s
        self.producer.flush(30)


def check_described(server, group, members):
    """confluent-kafka's AdminClient describes the group (ConsumerGroupDescribe
    through the Kafka listener): its type, members, their assignments and
    targets, each partition in one target and in at most one assignment."""
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    desc = admin.describe_consumer_groups([group])[group].result(10)
    assert desc.type == ck.ConsumerGroupType.CONSUMER and desc.partition_assignor == "uniform"
    assert len(desc.members) == members
    targets = [tp.partition for m in desc.members for tp in m.target_assignment.topic_partitions]
    assert sorted(targets) == list(range(PARTITIONS))
    current = [tp.partition for m in desc.members for tp in m.assignment.topic_partitions]
    assert len(current) == len(set(current))


@pytest.fixture(scope="module")
def kip848_server(tmp_path_factory):
    """A server whose KIP-848 groups time members out after 4 s (heartbeats
    every 300 ms), for a module (each run on a topic and group of its own)."""
    root = tmp_path_factory.mktemp("kip848")
    conf = root / "server.toml"
    conf.write_text(f"group_consumer_session_timeout_ms = {SESSION_TIMEOUT_MS}\n"
                    "group_consumer_heartbeat_interval_ms = 300\n")
    srv = ServerProcess(str(root / "data"), extra_args=["--config", str(conf)]).start()
    yield srv
    if srv.proc.poll() is None:
        srv.stop()
    srv.kill()


class Members:
    """The member processes of one group run (kip848_member.py) and their logs."""

    def __init__(self, server, topic, group, log_dir):
        self.server, self.topic, self.group, self.log_dir = server, topic, group, log_dir
        self.procs, self.paths, self.ended = {}, {}, {}

    def start(self, name, **env) -> None:
        self.paths[name] = self.log_dir / f"{name}.log"
        self.procs[name] = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "kip848_member.py"),
             self.server.kafka_bootstrap, self.topic, self.group, str(self.paths[name])],
            env=child_env(**env))

    def events(self, name) -> list:
        return parse(self.paths[name]) if self.paths[name].exists() else []

    def consuming(self, name) -> bool:
        return bool(owned(self.events(name))) and any(e[0] == "M" for e in self.events(name))

    def owners(self) -> dict:
        return {p: name for name in self.procs if name not in self.ended
                for p in owned(self.events(name))}


@pytest.mark.parametrize("fault", [False, True], ids=["group", "planted-fault"])
def test_kip848_members_join_leave_and_die_while_records_flow(kip848_server, tmp_path,
                                                               topic_name, fault):
    server = kip848_server
    create_topic(server, topic_name, PARTITIONS)
    group = f"kip848-{uuid.uuid4().hex[:8]}"
    producing = Producing(server, topic_name)
    members = Members(server, topic_name, group, tmp_path)
    procs, ended = members.procs, members.ended
    start, events, consuming, owners = (members.start, members.events, members.consuming,
                                        members.owners)

    try:
        producing.start()
        start("m0", **({"KIP848_PLANTED_DROP": "1"} if fault else {}))
        wait_until(lambda: len(owned(events("m0"))) == PARTITIONS and consuming("m0"), 20,
                 "the first member to own every partition")
        for name in ("m1", "m2"):
            start(name)
            wait_until(lambda: consuming(name) and len(owners()) == PARTITIONS, 20,
                     f"{name} to get partitions")
        check_described(server, group, members=3)
        time.sleep(0.5)        # (each change with records flowing to every member a while)
        procs["m1"].send_signal(signal.SIGTERM)                 # leaves the group
        assert procs["m1"].wait(20) == 0
        ended["m1"] = time.time()
        wait_until(lambda: len(owners()) == PARTITIONS, 20, "m1's partitions to move")
        time.sleep(0.5)
        procs["m2"].kill()                                     # kill -9: no goodbye
        procs["m2"].wait(10)
        ended["m2"] = time.time()
        wait_until(lambda: owned(events("m0")) == set(range(PARTITIONS)),
                 SESSION_TIMEOUT_MS / 1000 + 15, "m2's partitions to move after its session")
        time.sleep(0.5)
        producing.stop.set()
        producing.join(30)
        flow_end = time.time()
        assert not producing.errors and len(producing.ends) == PARTITIONS

        wait_until(lambda: committed_to_the_end(events("m0"), producing.ends), 20,
                 "m0 to read and commit to the end")
        procs["m0"].send_signal(signal.SIGTERM)
        assert procs["m0"].wait(20) == 0
        ended["m0"] = time.time()
    finally:
        end_run(producing, procs)

    logs = {name: events(name) for name in procs}
    problems = check_group_run(logs, ended, producing.ends, flow_end)
    if fault:
        assert problems == ["lost partition 0 offset 5"]
        return
    assert problems == []
    # every member took part, and the group's committed offsets are the end offsets
    assert all(any(e[0] == "M" for e in evs) for evs in logs.values())
    assert committed_offsets(server, group, topic_name, protocol="consumer") == producing.ends


def committed_to_the_end(events, ends: dict) -> bool:
    """Whether a member's log shows commits of every partition's end offset."""
    committed = {int(e[2]): int(e[3]) for e in events if e[0] == "C"}
    return all(committed.get(p) == end for p, end in ends.items())


def end_run(producing: Producing, procs: dict) -> None:
    """Stop the producer and kill whichever member process is still alive."""
    producing.stop.set()
    if producing.is_alive():
        producing.join(30)
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()


def committed_offsets(server, group, topic, protocol="classic") -> dict:
    """{partition: the group's committed offset}, asked by a new consumer."""
    c = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": group,
                     "group.protocol": protocol})
    try:
        committed = c.committed([ck.TopicPartition(topic, p) for p in range(PARTITIONS)],
                                timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in committed}


class Member:
    """A confluent-kafka KIP-848 member in this process, polled by the test,
    recording its rebalance callbacks as (kind, [partitions])."""

    def __init__(self, server, group, **conf):
        self.events: list = []
        self.errors: list = []
        self.consumer = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap,
                                     "group.id": group, "group.protocol": "consumer", **conf})

    def subscribe(self, topic) -> None:
        def record(kind):
            return lambda c, parts: self.events.append((kind, [tp.partition for tp in parts]))
        self.consumer.subscribe([topic], on_assign=record("A"), on_revoke=record("R"),
                                on_lost=record("L"))

    def poll(self, timeout=0.1) -> None:
        m = self.consumer.poll(timeout)
        if m is not None and m.error() is not None:
            self.errors.append(m.error().code())

    def owned(self) -> set:
        return {tp.partition for tp in self.consumer.assignment()}


def test_a_member_that_subscribes_and_unsubscribes_rapidly_gets_its_partitions(kip848_server,
                                                                              topic_name):
    """Issue 48's first KIP-848 edge case: a member that subscribes and
    unsubscribes several times in quick succession (each unsubscribe a leave
    heartbeat, each subscribe a join with the same member id, KIP-1082)
    while another member holds the partitions still gets its share, within
    30 s, and the two own every partition once."""
    create_topic(kip848_server, topic_name, 4)
    group = f"kip848-rapid-{uuid.uuid4().hex[:8]}"
    steady, rapid = Member(kip848_server, group), Member(kip848_server, group)
    try:
        steady.subscribe(topic_name)
        wait_until(lambda: steady.poll() or steady.owned() == {0, 1, 2, 3}, 20,
                   "the first member to own every partition")
        for _ in range(5):
            rapid.subscribe(topic_name)
            rapid.poll(0.05)
            rapid.consumer.unsubscribe()
            rapid.poll(0.05)
        rapid.subscribe(topic_name)

        def shared():
            steady.poll(0.05)
            rapid.poll(0.05)
            mine, theirs = rapid.owned(), steady.owned()
            return mine and not mine & theirs and mine | theirs == {0, 1, 2, 3}
        wait_until(shared, 30, lambda: f"the rapid member's partitions: it owns {rapid.owned()}, "
                   f"the other {steady.owned()}; its callbacks {rapid.events}")
    finally:
        rapid.consumer.close()
        steady.consumer.close()


def test_a_member_past_max_poll_interval_loses_its_partitions(kip848_server, topic_name):
    """Issue 48's second KIP-848 edge case: a member that does not poll for
    longer than max.poll.interval.ms leaves the group (librdkafka's leave
    heartbeat); the other member gets its partitions, and its next polls
    give the application _MAX_POLL_EXCEEDED and the "partitions lost"
    callback for what it held, then it joins again and gets a share back."""
    create_topic(kip848_server, topic_name, 2)
    group = f"kip848-maxpoll-{uuid.uuid4().hex[:8]}"
    slow = Member(kip848_server, group, **{"max.poll.interval.ms": 2000})
    other = Member(kip848_server, group)
    try:
        slow.subscribe(topic_name)
        other.subscribe(topic_name)

        def split():
            slow.poll(0.05)
            other.poll(0.05)
            return len(slow.owned()) == 1 and len(other.owned()) == 1
        wait_until(split, 30, "each member to own one partition")
        held = sorted(slow.owned())
        # the slow member stops polling; the group hands its partition over
        wait_until(lambda: other.poll() or other.owned() == {0, 1}, 30,
                   "the other member to take the slow member's partition")
        wait_until(lambda: slow.poll() or ("L", held) in slow.events, 10,
                   lambda: f"the slow member's partitions-lost callback: {slow.events}")
        assert ck.KafkaError._MAX_POLL_EXCEEDED in slow.errors
        assert ("R", held) not in slow.events          # lost, not revoked: it was not asked

        def rejoined():
            slow.poll(0.05)
            other.poll(0.05)
            return slow.owned() and not slow.owned() & other.owned()
        wait_until(rejoined, 30, "the slow member to get a partition again")
    finally:
        slow.consumer.close()
        other.consumer.close()
