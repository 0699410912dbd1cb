"""Exactly-once through Kafka's clients when transactions cross segment rolls.

A transaction's ABORT marker is indexed in the segment that holds it, which
can be hundreds of segments past the transaction's first record. Here a
confluent-kafka transactional producer writes transactions of 1 to 10,000
records over 4 KB segments (so most cross many rolls), on a topic that is
also compacted in one case, committing some and aborting others; every
read_committed reader (librdkafka, kafka-python, kafkalite's native
consumer) must see exactly the committed records, each once, in order per
partition, and none of an aborted or open transaction.

The checker is first shown to catch what it is for: a read_uncommitted
reader's view (every aborted record present) must fail it.
"""
from __future__ import annotations

import random
import time

import confluent_kafka as ck
import kafka
import pytest
from compat_helpers import kafka_conf as conf

from kafkalite.client import OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, TopicPartition

PARTITIONS = 2
SIZES = (1, 7, 150, 1000, 10_000)


def write_transactions(server, topic: str, seed: int) -> tuple[dict, int]:
    """Transactions of SIZES records each (shuffled, the 10,000 one aborted
    and committed once each), alternately spread over both partitions:
    partition -> the committed values in log order, and how many records
    were aborted."""
    rnd = random.Random(seed)
    plan = [(n, commit) for n in SIZES for commit in (True, False)]
    rnd.shuffle(plan)
    p = ck.Producer(conf(server, **{"transactional.id": f"{topic}-tx", "linger.ms": 5,
                                    "batch.size": 2000}))
    p.init_transactions(30)
    committed = {part: [] for part in range(PARTITIONS)}
    aborted = 0
    for t, (n, commit) in enumerate(plan):
        p.begin_transaction()
        values = {part: [] for part in range(PARTITIONS)}
        for i in range(n):
            part = i % PARTITIONS
            value = b"t%d-r%d-%s" % (t, i, b"c" if commit else b"a")
            values[part].append(value)
            p.produce(topic, value, key=b"k-%d-%d" % (t, i), partition=part)
            if i % 5000 == 4999:
                p.poll(0)
        if commit:
            p.commit_transaction(60)
            for part in committed:
                committed[part] += values[part]
        else:
            p.flush(60)                     # in the log before the abort
            p.abort_transaction(60)
            aborted += n
    return committed, aborted


def check(committed: dict, seen: dict) -> list[str]:
    """What a read_committed reader got wrong: per partition, a record of an
    aborted transaction, a duplicate, a committed record missing, or the
    committed records out of order."""
    problems = []
    for part, want in committed.items():
        got = seen.get(part, [])
        wanted = set(want)
        problems += [f"p{part}: aborted record {v!r}" for v in got if v not in wanted][:5]
        dups = len(got) - len(set(got))
        if dups:
            problems.append(f"p{part}: {dups} duplicate(s)")
        missing = wanted - set(got)
        if missing:
            problems.append(f"p{part}: {len(missing)} committed record(s) missing")
        if not problems and got != want:
            problems.append(f"p{part}: committed records out of order")
    return problems


def confluent_read(server, topic: str, isolation: str, expect: int) -> dict:
    c = ck.Consumer(conf(server, **{"group.id": f"{topic}-{isolation}",
                                   "isolation.level": isolation,
                                   "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
    seen = {part: [] for part in range(PARTITIONS)}
    try:
        c.assign([ck.TopicPartition(topic, part, ck.OFFSET_BEGINNING)
                  for part in range(PARTITIONS)])
        deadline = time.monotonic() + 60
        count = 0
        while count < expect and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                if m.error() is None:
                    seen[m.partition()].append(m.value())
                    count += 1
        # anything past what is expected comes within a second or is not coming
        for m in c.consume(5000, 1.0):
            if m.error() is None:
                seen[m.partition()].append(m.value())
    finally:
        c.close()
    return seen


def kafka_python_read(server, topic: str, expect: int) -> dict:
    c = kafka.KafkaConsumer(bootstrap_servers=server.kafka_bootstrap,
                            isolation_level="read_committed", enable_auto_commit=False)
    seen = {part: [] for part in range(PARTITIONS)}
    try:
        tps = [kafka.TopicPartition(topic, part) for part in range(PARTITIONS)]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        deadline, count = time.monotonic() + 60, 0
        while count < expect and time.monotonic() < deadline:
            for tp, records in c.poll(500, max_records=5000).items():
                seen[tp.partition] += [r.value for r in records]
                count += len(records)
        for tp, records in c.poll(1000).items():
            seen[tp.partition] += [r.value for r in records]
    finally:
        c.close()
    return seen


def native_read(server, topic: str, expect: int) -> dict:
    c = Consumer(server.config(**{"isolation.level": "read_committed"}))
    seen = {part: [] for part in range(PARTITIONS)}
    try:
        c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in range(PARTITIONS)])
        deadline, count = time.monotonic() + 60, 0
        while count < expect and time.monotonic() < deadline:
            for m in c.consume(10_000, 0.5):
                seen[m.partition()].append(m.value())
                count += 1
        for m in c.consume(10_000, 1.0):
            seen[m.partition()].append(m.value())
    finally:
        c.close()
    return seen


@pytest.mark.parametrize("policy", ["delete", "compact"])
def test_read_committed_readers_see_exactly_the_committed_transactions_across_rolls(
        server, topic_name, policy):
    admin = AdminClient(server.config())
    try:
        for f in admin.create_topics([NewTopic(topic_name, PARTITIONS, config={
                "segment.bytes": "4096", "cleanup.policy": policy,
                "min.cleanable.dirty.ratio": "0.01", "segment.ms": "100"})]).values():
            f.result()
    finally:
        admin.close()
    committed, aborted = write_transactions(server, topic_name, seed=len(policy))
    total = sum(len(v) for v in committed.values())
    assert aborted >= 10_000 and total >= 10_000
    if policy == "delete":
        # the checker catches aborted records: a read_uncommitted view has them
        # all (the cleaner of a compacted topic may already have removed them)
        uncommitted = confluent_read(server, topic_name, "read_uncommitted", total + aborted)
        planted = check(committed, uncommitted)
        assert any("aborted record" in p for p in planted), planted
    for name, seen in (("confluent-kafka", confluent_read(server, topic_name, "read_committed",
                                                          total)),
                       ("kafka-python", kafka_python_read(server, topic_name, total)),
                       ("kafkalite", native_read(server, topic_name, total))):
        problems = check(committed, seen)
        assert not problems, f"{name}: {problems}"
