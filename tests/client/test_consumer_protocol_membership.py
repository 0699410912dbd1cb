"""The native Consumer with ``group.protocol=consumer`` (KIP-848) against a
real server: members in their own processes (group_member.py, so one can be
killed with -9) join, leave and die while records flow; a native member and
a confluent-kafka ``group.protocol=consumer`` member share one group; bad
settings are refused.

Each member logs its on_assign / on_revoke / on_lost calls; ``owner_overlaps``
turns those logs into ownership intervals and reports any partition with
two owners at once (a planted overlapping timeline shows it is not
vacuous)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import confluent_kafka as ck
import pytest

from harness import ServerProcess, child_env, create, wait_until
from kafkalite import errors
from kafkalite.client import Consumer, Producer, TopicPartition
from kafkalite.errors import KafkaError

MEMBER = os.path.join(os.path.dirname(__file__), "group_member.py")
PARTITIONS = 6
SESSION_TIMEOUT_MS = 3000
MAX_GAP_S = 3.0        # a survivor's partition without a record while records flow


@pytest.fixture(scope="module")
def kip848_server(tmp_path_factory):
    """A server whose KIP-848 groups time members out after 3 s (the
    default 45 s is no subject here) and ask for heartbeats every 200 ms."""
    tmp = tmp_path_factory.mktemp("kip848")
    conf = tmp / "server.toml"
    conf.write_text(f"group_consumer_session_timeout_ms = {SESSION_TIMEOUT_MS}\n"
                    "group_consumer_heartbeat_interval_ms = 200\n")
    srv = ServerProcess(str(tmp / "data"), extra_args=["--config", str(conf)]).start()
    yield srv
    if srv.proc.poll() is None:
        assert srv.stop() == 0
    srv.kill()


def owner_overlaps(timelines: dict, ended: dict) -> list[str]:
    """Partitions owned by two members at once. ``timelines``: {member:
    [(time, "assign"|"revoke"|"lost", [partition, ...])]}; ``ended``:
    {member: when it closed or was killed} (an owner's interval runs from its
    assign to its revoke/lost, else to its end)."""
    intervals = []
    for member, events in timelines.items():
        start = {}
        for t, kind, parts in events:
            for p in parts:
                if kind == "assign":
                    start[p] = t
                elif p in start:
                    intervals.append((p, start.pop(p), t, member))
        intervals += [(p, t, ended.get(member, float("inf")), member) for p, t in start.items()]
    intervals.sort()
    return [f"partition {p} owned by {m1} and {m2} at once"
            for i, (p, s1, e1, m1) in enumerate(intervals)
            for p2, s2, e2, m2 in intervals[i + 1:]
            if p2 == p and m2 != m1 and s2 < e1 and s1 < e2]


def test_the_owner_checker_catches_an_overlap():
    handed_over = {"a": [(1.0, "assign", [0, 1]), (2.0, "revoke", [1])],
                   "b": [(2.5, "assign", [1])]}
    assert owner_overlaps(handed_over, {}) == []
    planted = {"a": [(1.0, "assign", [0, 1]), (3.0, "revoke", [1])],
               "b": [(2.5, "assign", [1])]}                      # b took 1 before a let go
    assert owner_overlaps(planted, {}) == ["partition 1 owned by a and b at once"]
    killed = {"a": [(1.0, "assign", [0])], "b": [(5.0, "assign", [0])]}
    assert owner_overlaps(killed, {"a": 4.0}) == []
    assert owner_overlaps(killed, {"a": 6.0}) == ["partition 0 owned by a and b at once"]


class Member:
    """A group_member.py process (group.protocol=consumer) and its events."""

    def __init__(self, server, group, topic):
        self.proc = subprocess.Popen(
            [sys.executable, MEMBER, server.bootstrap, group, topic, "consumer", "200"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env(), text=True)
        self.events = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def timeline(self) -> list:
        return [(e["t"], e["event"], [p for _, p in e["partitions"]]) for e in list(self.events)
                if e["event"] in ("assign", "revoke", "lost")]

    def owned(self) -> set:
        owned = set()
        for _, kind, parts in self.timeline():
            owned = owned | set(parts) if kind == "assign" else owned - set(parts)
        return owned

    def records(self) -> list:
        """(partition, offset, time) of every record it consumed."""
        return [(p, o, e["t"]) for e in list(self.events) if e["event"] == "records"
                for p, o in e["items"]]

    def consuming(self) -> bool:
        owned = self.owned()
        return bool(owned) and any(p in owned for p, _, _ in self.records())

    def stop(self) -> float:
        """Close it (commit, revoke, leave); when it had closed."""
        self.proc.stdin.close()
        assert self.proc.wait(30) == 0
        return time.time()

    def kill(self) -> float:
        self.proc.kill()
        self.proc.wait(10)
        return time.time()


class Producing(threading.Thread):
    """Records to every partition in turn until stopped; ``ends``: each
    partition's end offset, from the delivery reports."""

    def __init__(self, server, topic):
        super().__init__(daemon=True)
        self.producer = Producer(server.config(**{"linger.ms": 5}))
        self.topic, self.stop, self.ends, self.errors = topic, threading.Event(), {}, []

    def delivered(self, err, msg):
        if err is not None:
            self.errors.append(err)
        else:
            self.ends[msg.partition()] = max(self.ends.get(msg.partition(), 0), msg.offset() + 1)

    def run(self):
        i = 0
        while not self.stop.is_set():
            self.producer.produce(self.topic, value=b"%d" % i, partition=i % PARTITIONS,
                                  on_delivery=self.delivered)
            self.producer.poll(0)
            i += 1
            time.sleep(0.004)       # a steady trickle to every partition
        assert self.producer.flush(30) == 0

    def finish(self):
        self.stop.set()
        self.join(60)
        assert not self.errors and len(self.ends) == PARTITIONS


def owners(members: dict, ended: dict) -> dict:
    return {p: name for name, m in members.items() if name not in ended for p in m.owned()}


def records_flow(members: dict, ended: dict) -> None:
    """Until every member still in the group consumed records after now."""
    since = time.time()
    wait_until(lambda: all(any(t > since for _, _, t in m.records())
                           for name, m in members.items() if name not in ended), 30,
               "records to reach every member")


def consumed_everything(members: dict, ends: dict) -> list:
    seen = {(p, o) for m in members.values() for p, o, _ in m.records()}
    return [(p, o) for p, end in sorted(ends.items()) for o in range(end) if (p, o) not in seen]


def join_three(server, group, topic, members: dict, ended: dict) -> None:
    """Members m0, m1, m2 join one by one, each consuming its share before the next."""
    for name in ("m0", "m1", "m2"):
        members[name] = Member(server, group, topic)
        wait_until(lambda: members[name].consuming()
                   and len(owners(members, ended)) == PARTITIONS, 30,
                   f"{name} to consume its share")


def native(server, group, **extra) -> Consumer:
    return Consumer(server.config(**{"group.id": group, "group.protocol": "consumer",
                                     "auto.offset.reset": "earliest", **extra}))


def test_members_join_and_leave_while_records_flow(kip848_server, topic_name):
    server = kip848_server
    create(server, topic_name, PARTITIONS)
    group = f"native848-{uuid.uuid4().hex[:8]}"
    producing = Producing(server, topic_name)
    members, ended = {}, {}
    try:
        producing.start()
        join_three(server, group, topic_name, members, ended)
        assert sorted(len(m.owned()) for m in members.values()) == [2, 2, 2]
        for name in ("m1", "m0"):
            records_flow(members, ended)
            ended[name] = members[name].stop()
            wait_until(lambda: len(owners(members, ended)) == PARTITIONS, 30,
                       f"{name}'s partitions to move")
        assert members["m2"].owned() == set(range(PARTITIONS))
        records_flow(members, ended)
        producing.finish()
        wait_until(lambda: not consumed_everything(members, producing.ends), 30,
                   "m2 to read to the end")
        ended["m2"] = members["m2"].stop()
    finally:
        producing.stop.set()
        for m in members.values():
            if m.proc.poll() is None:
                m.kill()
    assert owner_overlaps({n: m.timeline() for n, m in members.items()}, ended) == []
    assert all(m.records() for m in members.values())
    assert consumed_everything(members, producing.ends) == []

    # a new member starts exactly at the committed offsets: the group's ends
    late = native(server, group)
    try:
        committed = late.committed([TopicPartition(topic_name, p) for p in range(PARTITIONS)])
        assert {tp.partition: tp.offset for tp in committed} == producing.ends
        assigned = []
        late.subscribe([topic_name], on_assign=lambda c, tps: assigned.extend(tps))
        wait_until(lambda: late.consume(10, 0.1) == [] and len(assigned) == PARTITIONS, 30,
                   "the late member to be assigned every partition")
        p = Producer(server.config())
        for part in range(PARTITIONS):
            p.produce(topic_name, value=b"after", partition=part)
        assert p.flush(30) == 0
        got = []
        wait_until(lambda: got.extend(late.consume(100, 0.2)) or len(got) >= PARTITIONS, 30,
                   "the records produced after everyone left")
        assert sorted((m.partition(), m.offset()) for m in got) == sorted(producing.ends.items())
    finally:
        late.close()


def test_a_killed_members_partitions_move_after_the_session_timeout(kip848_server, topic_name):
    server = kip848_server
    create(server, topic_name, PARTITIONS)
    group = f"native848-{uuid.uuid4().hex[:8]}"
    producing = Producing(server, topic_name)
    members, ended = {}, {}
    try:
        producing.start()
        join_three(server, group, topic_name, members, ended)
        survivors_had = {n: members[n].owned() for n in ("m0", "m1")}
        killed_had = members["m2"].owned()
        records_flow(members, ended)
        ended["m2"] = members["m2"].kill()
        wait_until(lambda: len(owners(members, ended)) == PARTITIONS,
                   SESSION_TIMEOUT_MS / 1000 + 30, "m2's partitions to move")
        moved_at = time.time()
        assert moved_at - ended["m2"] >= SESSION_TIMEOUT_MS / 1000 * 0.8
        time.sleep(1.0)         # a second of records after the move, for the gaps below
        flow_end = time.time()
        producing.finish()
        wait_until(lambda: not consumed_everything(members, producing.ends), 30,
                   "the survivors to read to the end")
        for name in ("m0", "m1"):
            ended[name] = members[name].stop()
    finally:
        producing.stop.set()
        for m in members.values():
            if m.proc.poll() is None:
                m.kill()
    assert owner_overlaps({n: m.timeline() for n, m in members.items()}, ended) == []
    assert consumed_everything(members, producing.ends) == []
    # the killed member's partitions went to the survivors, whose own never paused
    taken = {p for n in ("m0", "m1") for _, kind, parts in members[n].timeline()
             if kind == "assign" for p in parts} - set().union(*survivors_had.values())
    assert taken == killed_had
    for name, had in survivors_had.items():
        assert not [e for e in members[name].timeline() if e[1] in ("revoke", "lost")
                    and set(e[2]) & had and e[0] < flow_end]
        for p in had:
            times = sorted(t for pp, _, t in members[name].records()
                           if pp == p and ended["m2"] - 1 <= t <= flow_end)
            gaps = [b - a for a, b in zip(times, times[1:])]
            assert times and max(gaps, default=0) < MAX_GAP_S, (name, p, max(gaps, default=0))


def test_a_native_and_a_confluent_kafka_member_split_the_partitions(kip848_server, topic_name):
    server = kip848_server
    create(server, topic_name, PARTITIONS)
    group = f"native848-{uuid.uuid4().hex[:8]}"
    p = Producer(server.config())

    def produce(start):
        for i in range(start, start + 60):
            p.produce(topic_name, value=b"%d" % i, partition=i % PARTITIONS)
        assert p.flush(30) == 0
    produce(0)
    ours, theirs = native(server, group), ck.Consumer({
        "bootstrap.servers": server.kafka_bootstrap, "group.id": group,
        "group.protocol": "consumer", "auto.offset.reset": "earliest"})
    ours_seen, theirs_seen = set(), set()

    def both_read():
        ours_seen.update((m.partition(), m.offset()) for m in ours.consume(100, 0.05))
        theirs_seen.update((m.partition(), m.offset()) for m in theirs.consume(100, 0.05)
                           if m.error() is None)
        return {tp.partition for tp in ours.assignment()}, {
            tp.partition for tp in theirs.assignment()}
    try:
        ours.subscribe([topic_name])
        theirs.subscribe([topic_name])

        def split():
            mine, other = both_read()
            return len(mine) == len(other) == PARTITIONS // 2 and not mine & other
        wait_until(split, 40, "the two members to split the partitions")
        mine, other = both_read()
        produce(60)
        wait_until(lambda: both_read() and len(ours_seen | theirs_seen) == 120, 40,
                   "every record to be read")
        assert both_read() == (mine, other)
        assert {p for p, o in ours_seen if o >= 10} == mine
        assert {p for p, o in theirs_seen if o >= 10} == other
    finally:
        ours.close()
        theirs.close()


def test_bad_settings_are_refused_with_the_reason(kip848_server):
    base = {"bootstrap.servers": kip848_server.bootstrap, "group.id": "g"}
    with pytest.raises(KafkaError, match="'group.protocol'"):
        Consumer({**base, "group.protocol": "next-gen"})
    for key, value, hint in [("session.timeout.ms", 6000, "broker side"),
                             ("heartbeat.interval.ms", 500, "broker side"),
                             ("partition.assignment.strategy", "range", "group.remote.assignor")]:
        with pytest.raises(errors.InvalidConfigurationError,
                           match=f"`{key}` is not supported for `group.protocol=consumer`.*{hint}"):
            Consumer({**base, "group.protocol": "consumer", key: value})


def test_an_unknown_remote_assignor_is_raised_from_poll(kip848_server, topic_name):
    create(kip848_server, topic_name, 1)
    c = native(kip848_server, f"native848-{uuid.uuid4().hex[:8]}",
               **{"group.remote.assignor": "sticky"})
    try:
        c.subscribe([topic_name])
        deadline = time.monotonic() + 20
        with pytest.raises(errors.UnsupportedAssignorError, match="sticky is not supported"):
            while time.monotonic() < deadline:
                c.poll(0.1)
        with pytest.raises(errors.UnsupportedAssignorError):      # and stays raised
            c.poll(0.1)
    finally:
        c.close()


def test_a_member_that_stops_polling_leaves_and_rejoins_after_losing_its_partitions(
        kip848_server, topic_name):
    server = kip848_server
    create(server, topic_name, PARTITIONS)
    group = f"native848-{uuid.uuid4().hex[:8]}"
    events = []
    slow = native(server, group, **{"max.poll.interval.ms": 1500})
    other = native(server, group)
    try:
        slow.subscribe([topic_name],
                       on_assign=lambda c, tps: events.append(("assign", len(tps))),
                       on_revoke=lambda c, tps: events.append(("revoke", len(tps))),
                       on_lost=lambda c, tps: events.append(("lost", len(tps))))
        wait_until(lambda: slow.consume(10, 0.05) is not None and len(slow.assignment()) == 6,
                   20, "the first member to own every partition")
        other.subscribe([topic_name])
        # slow does not poll: past max.poll.interval.ms it leaves, and other gets everything
        wait_until(lambda: other.consume(10, 0.05) is not None
                   and len(other.assignment()) == PARTITIONS, 20,
                   "the other member to take every partition")
        assert events == [("assign", 6)]
        wait_until(lambda: slow.consume(10, 0.05) is not None and other.consume(10, 0.05)
                   is not None and len(slow.assignment()) == len(other.assignment()) == 3, 20,
                   "the slow member to rejoin and get its share")
        assert events[:2] == [("assign", 6), ("lost", 6)] and events[2] == ("assign", 3)
    finally:
        slow.close()
        other.close()


def test_a_static_member_leaves_with_its_partitions_kept_for_its_return(kip848_server,
                                                                       topic_name):
    server = kip848_server
    create(server, topic_name, PARTITIONS)
    group = f"native848-{uuid.uuid4().hex[:8]}"
    a = native(server, group, **{"group.instance.id": "a"})
    b = native(server, group, **{"group.instance.id": "b"})
    a.subscribe([topic_name])
    b.subscribe([topic_name])
    try:
        wait_until(lambda: a.consume(10, 0.05) is not None and b.consume(10, 0.05) is not None
                   and len(a.assignment()) == len(b.assignment()) == 3, 20,
                   "two static members to split the partitions")
        had = a.assignment()
        a.close()                       # epoch -2: its partitions wait for it
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:      # 1.5 s in which nothing may move to b
            b.consume(10, 0.05)
        assert len(b.assignment()) == 3
        a = native(server, group, **{"group.instance.id": "a"})
        a.subscribe([topic_name])
        wait_until(lambda: a.consume(10, 0.05) is not None and b.consume(10, 0.05) is not None
                   and len(a.assignment()) == 3, 20, "the static member to come back")
        assert a.assignment() == had and len(b.assignment()) == 3
    finally:
        a.close()
        b.close()


def test_a_member_fenced_while_stopped_loses_its_partitions_and_rejoins(kip848_server,
                                                                        topic_name):
    """SIGSTOP a member past the session timeout: the coordinator removes it
    and its partitions move; once it runs again its heartbeat is refused
    (UNKNOWN_MEMBER_ID), it calls on_lost and rejoins with epoch 0."""
    server = kip848_server
    create(server, topic_name, PARTITIONS)
    group = f"native848-{uuid.uuid4().hex[:8]}"
    producing = Producing(server, topic_name)
    members = {}
    try:
        producing.start()
        for name in ("m0", "m1"):
            members[name] = Member(server, group, topic_name)
            wait_until(lambda: members[name].consuming() and len(owners(members, {}))
                       == PARTITIONS, 30, f"{name} to consume its share")
        had = members["m1"].owned()
        members["m1"].proc.send_signal(signal.SIGSTOP)
        wait_until(lambda: members["m0"].owned() == set(range(PARTITIONS)),
                   SESSION_TIMEOUT_MS / 1000 + 30, "m1's partitions to move to m0")
        members["m1"].proc.send_signal(signal.SIGCONT)
        wait_until(lambda: len(members["m1"].owned()) == len(members["m0"].owned()) == 3
                   and members["m1"].consuming(), 30, "m1 to rejoin and get its share")
        kinds = [kind for _, kind, _ in members["m1"].timeline()]
        assert kinds[-2:] == ["lost", "assign"]
        assert [parts for _, kind, parts in members["m1"].timeline() if kind == "lost"] == [
            sorted(had)]
        producing.finish()
        wait_until(lambda: not consumed_everything(members, producing.ends), 30,
                   "the group to read to the end")
        for m in members.values():
            m.stop()
    finally:
        producing.stop.set()
        for m in members.values():
            if m.proc.poll() is None:
                m.proc.send_signal(signal.SIGCONT)
                m.kill()


def test_a_regex_subscription_is_matched_by_the_coordinator(kip848_server, topic_name):
    """A '^' subscription goes as SubscribedTopicRegex (v1): the coordinator
    matches it, and a topic created later that matches is assigned too."""
    server = kip848_server
    create(server, topic_name + "-a", 2)
    create(server, "other-" + topic_name, 2)
    c = native(server, f"native848-{uuid.uuid4().hex[:8]}")
    try:
        c.subscribe(["^" + topic_name + "-.*"])
        wait_until(lambda: c.consume(10, 0.05) is not None and len(c.assignment()) == 2, 20,
                   "the matching topic's partitions")
        create(server, topic_name + "-b", 3)
        wait_until(lambda: c.consume(10, 0.05) is not None and len(c.assignment()) == 5, 30,
                   "the topic created later to be assigned")
        assert {tp.topic for tp in c.assignment()} == {topic_name + "-a", topic_name + "-b"}
    finally:
        c.close()


@pytest.mark.processes
def test_after_a_server_restart_the_member_carries_on_with_its_partitions(tmp_path,
                                                                          topic_name):
    """The coordinator writes KIP-848 groups to __consumer_offsets
    (consumer_group_log.py): after a restart the member's heartbeats fail
    while the server is down, then are answered at its epoch again; it keeps
    its partitions (no on_lost, no new assignment) and reads on from where
    it was."""
    conf = tmp_path / "server.toml"
    conf.write_text("group_consumer_heartbeat_interval_ms = 200\n")
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(conf)]).start()
    port = srv.bootstrap.rsplit(":", 1)[1]
    events = []
    c = None
    try:
        create(srv, topic_name, 2)
        p = Producer(srv.config())
        for i in range(20):
            p.produce(topic_name, value=b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        c = native(srv, f"native848-{uuid.uuid4().hex[:8]}", **{"enable.auto.commit": False})
        after = []

        def assigned(_, tps):
            events.append(("assign", len(tps)))
            after.clear()       # read before the member knew it was gone: read again, uncommitted
        c.subscribe([topic_name], on_assign=assigned,
                    on_lost=lambda _, tps: events.append(("lost", len(tps))))
        got = []
        wait_until(lambda: got.extend(c.consume(100, 0.1)) or len(got) == 20, 20,
                   "the first 20 records")
        c.commit(asynchronous=False)
        assert srv.stop() == 0
        srv = ServerProcess(str(tmp_path / "data"),
                            extra_args=["--config", str(conf), "--port", port]).start()
        p = Producer(srv.config())
        for i in range(20, 30):
            p.produce(topic_name, value=b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        wait_until(lambda: after.extend(c.consume(100, 0.1)) or len(after) >= 10, 40,
                   "the member to read on")
        after.extend(c.consume(100, 1.0))   # nothing more, and time for a late on_lost
        assert events == [("assign", 2)]
        assert sorted((m.partition(), m.offset()) for m in after) == [
            (part, o) for part in range(2) for o in range(10, 15)]
    finally:
        if c is not None:
            c.close()
        srv.stop()
        srv.kill()
