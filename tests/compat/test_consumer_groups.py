"""Consumer groups of Kafka's own clients against kafkalite's group
coordinator (the supervisor, broker 1000): two members share a topic, commit,
stop, and a later member resumes after the committed offsets."""
from __future__ import annotations

import asyncio
import time

import pytest
from compat_helpers import create_topic, native_produce

from harness import wait_until

PARTITIONS = 4
POLL_MS = 5000


def records(tag: str, n: int) -> list:
    return [(b"k%d" % i, b"%s-%d" % (tag.encode(), i), []) for i in range(n)]


def produce_spread(server, topic, tag, n):
    for p in range(PARTITIONS):
        native_produce(server, topic, records(f"{tag}{p}", n), partition=p)


# ---- one driver per client:
# run(server, topic, group, members, want, ends) -> (values, assignments)
# A driver reads until it has seen `want` distinct values, every member has
# partitions (together all of them), and each member has read its partitions
# to their end offsets (`ends`, {partition: end}), keeping what it reads
# meanwhile; then every member commits. Members commit nothing until the
# end, so after a rebalance a member rightly re-reads (at least once) what
# another member read before it: counting those duplicates towards `want`
# once stopped a run before one partition had been read, and dropping the
# last reads lost that partition's values from the result while the commit
# covered them.

def confluent_group(server, topic, group, members, want, ends, timeout=30.0):
    import confluent_kafka as ck
    cs = [ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": group,
                       "auto.offset.reset": "earliest", "enable.auto.commit": False,
                       "session.timeout.ms": 6000, "heartbeat.interval.ms": 500})
          for _ in range(members)]
    for c in cs:
        c.subscribe([topic])
    values = []

    def read_to_the_end() -> bool:
        for c in cs:
            for m in c.consume(1000, 0.1):
                if m.error() is None:
                    values.append(m.value())
        owned = [c.assignment() for c in cs]
        if len(set(values)) < want or not all(owned) or \
                sorted(tp.partition for o in owned for tp in o) != sorted(ends):
            return False
        # each member at the end of what it owns: what it commits is its whole share
        return all(tp.offset >= ends[tp.partition] for c, o in zip(cs, owned)
                   for tp in c.position(o))
    wait_until(read_to_the_end, timeout, lambda: f"the members to read {want} values to the "
               f"ends {ends}: {len(set(values))} read", interval=0)
    assignments = [sorted(tp.partition for tp in c.assignment()) for c in cs]
    # every member commits before any leaves: a leaving member starts a
    # rebalance, and a commit during one may rightly get REBALANCE_IN_PROGRESS
    for c in cs:
        c.commit(asynchronous=False)
    for c in cs:
        c.close()
    return values, assignments


def kafka_python_group(server, topic, group, members, want, ends, timeout=30.0):
    # One thread per member with long polls while the group forms, as
    # kafka-python applications run. Short polls then trip a kafka-python
    # 3.0 race (seen in its own debug log): a JoinGroup/SyncGroup that
    # outlives poll()'s timeout completes in the background, its assignment
    # is dropped and the member never re-enables its heartbeat, so the
    # coordinator rightly expires it after session.timeout.ms. A poll of
    # POLL_MS outlasts any join here. Once the members' partitions cover the
    # topic nobody joins or leaves until all have committed: short polls
    # then (a long one would hold the end of the run for POLL_MS).
    import threading
    from kafka import KafkaConsumer
    from kafka.errors import CommitFailedError, RebalanceInProgressError
    cs = [KafkaConsumer(topic, bootstrap_servers=server.kafka_bootstrap, group_id=group,
                        auto_offset_reset="earliest", enable_auto_commit=False,
                        session_timeout_ms=6000, heartbeat_interval_ms=500)
          for _ in range(members)]
    values, lock = [], threading.Lock()
    stop_reading, all_committed = threading.Event(), threading.Event()
    committed, errors = [threading.Event() for _ in cs], []
    # per member, after each of its polls: (its partitions, all read to their ends)
    reached = [((), False) for _ in cs]

    def formed() -> bool:
        got = list(reached)
        return all(owned for owned, _ in got) and \
            sorted(p for owned, _ in got for p in owned) == sorted(ends)

    def member(i, c):
        try:
            while not stop_reading.is_set():
                polled = c.poll(timeout_ms=200 if formed() else POLL_MS)
                with lock:
                    values.extend(m.value for msgs in polled.values() for m in msgs)
                owned = c.assignment()
                reached[i] = (tuple(sorted(tp.partition for tp in owned)),
                              bool(owned) and all(c.position(tp) >= ends[tp.partition]
                                                  for tp in owned))
            for attempt in range(10):    # all commit before any leaves (see above)
                try:
                    c.commit()
                    break
                except (RebalanceInProgressError, CommitFailedError):
                    if attempt == 9:
                        raise
                    for msgs in c.poll(timeout_ms=POLL_MS).values():
                        with lock:
                            values.extend(m.value for m in msgs)
            committed[i].set()
            all_committed.wait(timeout + 30)
        except Exception as e:           # surfaced to the test below
            errors.append(e)
            committed[i].set()

    threads = [threading.Thread(target=member, args=(i, c), daemon=True)
               for i, c in enumerate(cs)]
    for t in threads:
        t.start()

    def read_to_the_end() -> bool:
        if errors:
            return True
        with lock:
            enough = len(set(values)) >= want
        return enough and formed() and all(done for _, done in reached)
    try:
        wait_until(read_to_the_end, timeout, lambda: f"the members to read {want} values to "
                   f"the ends {ends}: {reached}", interval=0.05)
    finally:
        stop_reading.set()
        for e in committed:
            e.wait(timeout + 30)
        assignments = [sorted(tp.partition for tp in c.assignment()) for c in cs]
        all_committed.set()
        for t in threads:
            t.join(timeout + 30)
        for c in cs:
            c.close()
    if errors:
        raise errors[0]
    return values, assignments


def aiokafka_group(server, topic, group, members, want, ends, timeout=30.0):
    from aiokafka import AIOKafkaConsumer

    async def go():
        cs = [AIOKafkaConsumer(topic, bootstrap_servers=server.kafka_bootstrap, group_id=group,
                               auto_offset_reset="earliest", enable_auto_commit=False,
                               session_timeout_ms=6000, heartbeat_interval_ms=500)
              for _ in range(members)]
        for c in cs:
            await c.start()
        values, deadline = [], time.monotonic() + timeout

        async def read_to_the_end() -> bool:
            for c in cs:
                for msgs in (await c.getmany(timeout_ms=100)).values():
                    values.extend(m.value for m in msgs)
            owned = [c.assignment() for c in cs]
            if len(set(values)) < want or not all(owned) or \
                    sorted(tp.partition for o in owned for tp in o) != sorted(ends):
                return False
            # each member at the end of what it owns: its commit is its whole share
            return all([await c.position(tp) >= ends[tp.partition]
                        for c, o in zip(cs, owned) for tp in o])
        while not await read_to_the_end():
            assert time.monotonic() < deadline, \
                f"the members to read {want} values to the ends {ends}: {len(set(values))} read"
        assignments = [sorted(tp.partition for tp in c.assignment()) for c in cs]
        for c in cs:                     # all commit before any leaves (see above)
            await c.commit()
        for c in cs:
            await c.stop()
        return values, assignments
    return asyncio.run(asyncio.wait_for(go(), timeout + 30))


DRIVERS = {"confluent-kafka": confluent_group, "kafka-python": kafka_python_group,
           "aiokafka": aiokafka_group}


@pytest.mark.parametrize("client", list(DRIVERS))
def test_two_members_share_commit_and_a_later_member_resumes(server, topic_name, client):
    run = DRIVERS[client]
    create_topic(server, topic_name, partitions=PARTITIONS)
    produce_spread(server, topic_name, "first", 10)
    group = f"group-{topic_name}"
    values, assignments = run(server, topic_name, group, 2, 40,
                              dict.fromkeys(range(PARTITIONS), 10))
    assert set(values) == {b"first%d-%d" % (p, i) for p in range(PARTITIONS) for i in range(10)}
    assert all(assignments) and sorted(sum(assignments, [])) == list(range(PARTITIONS))
    produce_spread(server, topic_name, "second", 5)
    values, _ = run(server, topic_name, group, 1, 20, dict.fromkeys(range(PARTITIONS), 15))
    assert sorted(values) == sorted(b"second%d-%d" % (p, i) for p in range(PARTITIONS)
                                    for i in range(5))


def test_kcat_balanced_consumer_resumes_after_its_commit(server, topic_name):
    import shutil
    import subprocess
    kcat = shutil.which("kcat")
    if kcat is None:
        pytest.skip("kcat is not installed")
    create_topic(server, topic_name, partitions=2)
    for p in range(2):
        native_produce(server, topic_name, records(f"a{p}", 5), partition=p)
    group = f"kcat-{topic_name}"

    def consume(count):
        r = subprocess.run([kcat, "-b", server.kafka_bootstrap, "-G", group, topic_name,
                            "-c", str(count), "-q", "-f", "%s\\n", "-X",
                            "auto.offset.reset=earliest", "-X", "enable.auto.commit=true",
                            "-X", "auto.commit.interval.ms=100"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        return sorted(r.stdout.split())
    assert consume(10) == sorted(f"a{p}-{i}" for p in range(2) for i in range(5))
    for p in range(2):
        native_produce(server, topic_name, records(f"b{p}", 3), partition=p)
    assert consume(6) == sorted(f"b{p}-{i}" for p in range(2) for i in range(3))
