"""Exactly-once consume-transform-produce through kill -9s (the transactions
issue's checker).

A feeder writes input records to 4 partitions while a processor
(eos_processor.py) copies each one, transactionally, to the same partition
of an output topic and commits its input offsets in the same transaction,
aborting some transactions on purpose. Meanwhile the processor, the
partition workers and the supervisor (the transaction and group
coordinator's process) are killed with SIGKILL at random moments,
``KAFKALITE_EOS_KILLS`` times (tests/soak.py: 5 by default, one round of
processor, worker, processor, worker, supervisor; 200 for a soak;
``KAFKALITE_EOS_SEED`` picks the sequence). The first supervisor kill
leaves the workers running, for the restarted supervisor to adopt; every
second one kills the node's workers with it, as a machine's crash would.

``check`` then reads the output as a read_committed consumer would and
reports every violation of:

- exactly once: each input record's output appears exactly once;
- no aborted read (G1a): no record of a transaction the processor aborted;
- atomic visibility: every transaction is seen whole, on all partitions;
- order: per partition, outputs follow their inputs' order;
- offsets: the group's committed offsets are the input's end offsets.

The same check over a read_uncommitted view of the same output must find
violations (aborted and repeated transactions are in the log): that is the
planted fault showing the checker can fail.
"""
from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

import pytest

from harness import ServerProcess, child_env, free_port, pid_alive, wait_until
from kafkalite.client import (OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, Producer,
                              TopicPartition)
from kafkalite.errors import KafkaError
from soak import setting

HERE = os.path.dirname(os.path.abspath(__file__))
PARTITIONS = 4
SOURCE, SINK = "eos-in", "eos-out"


def read_all(bootstrap: str, topic: str, isolation: str, timeout: float = 60.0):
    """(partition, offset, value) of every record below the end offsets."""
    c = Consumer({"bootstrap.servers": bootstrap, "isolation.level": isolation,
                  "request.timeout.ms": 10_000})
    try:
        tps = [TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(PARTITIONS)}
        c.assign(tps)
        out, done, deadline = [], set(), time.monotonic() + timeout
        while len(done) < PARTITIONS and time.monotonic() < deadline:
            for m in c.consume(5000, 0.3):
                out.append((m.partition(), m.offset(), m.value()))
            for p in range(PARTITIONS):
                if c.position([TopicPartition(topic, p)])[0].offset >= ends[p]:
                    done.add(p)
        return out
    finally:
        c.close()


def check(inputs, outputs, aborted_tags: set, committed: dict, ends: dict) -> list[str]:
    """Every violation of the exactly-once properties (module docstring)."""
    problems = []
    seen = Counter()
    by_tag: dict[str, list] = defaultdict(list)
    last_input = {}
    for partition, offset, value in outputs:
        source_id, tag, size = value.decode().split("|")
        in_part, in_off = (int(x) for x in source_id.split(":"))
        seen[(in_part, in_off)] += 1
        by_tag[tag].append(int(size))
        if in_part != partition:
            problems.append(f"input {source_id} went to partition {partition}")
        if last_input.get(partition, -1) >= in_off:
            problems.append(f"order: partition {partition} has input {in_off} after "
                            f"{last_input[partition]}")
        last_input[partition] = max(last_input.get(partition, -1), in_off)
    for record in inputs:
        if seen[record] == 0:
            problems.append(f"lost: input {record[0]}:{record[1]} has no output")
    for record, n in seen.items():
        if n > 1:
            problems.append(f"duplicate: input {record[0]}:{record[1]} has {n} outputs")
    for tag, sizes in by_tag.items():
        if tag in aborted_tags:
            problems.append(f"G1a: read a record of aborted transaction {tag}")
        if len(sizes) != sizes[0]:
            problems.append(f"partial: transaction {tag} shows {len(sizes)} of {sizes[0]} records")
    for p, end in ends.items():
        if committed.get(p) != end:
            problems.append(f"offsets: group committed {committed.get(p)} for {SOURCE}-{p}, "
                            f"the input ends at {end}")
    return problems


class Feeder(threading.Thread):
    """Writes ``total`` input records round-robin, surviving server kills."""

    def __init__(self, bootstrap: str, total: int):
        super().__init__(daemon=True)
        self.bootstrap, self.total = bootstrap, total
        self.errors = []

    def run(self):
        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5,
                      "request.timeout.ms": 10_000})
        try:
            for i in range(self.total):
                p.produce(SOURCE, b"in-%d" % i, partition=i % PARTITIONS,
                          on_delivery=lambda err, msg: err and self.errors.append(err))
                if i % 100 == 99:
                    p.poll(0)
                    time.sleep(0.04)        # paced: the input goes on through the kills
            p.flush(120)
        finally:
            p.close(5)


def kill_a_worker(srv, rnd) -> None:
    """SIGKILL a live worker (one killed a moment ago may not be back yet)."""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            os.kill(rnd.choice(srv.worker_pids()), signal.SIGKILL)
            return
        except (ProcessLookupError, OSError, ValueError):
            time.sleep(0.1)
    raise AssertionError("no live worker to kill for 20 s")


@pytest.mark.processes
def test_exactly_once_through_kills_of_processor_workers_and_coordinator(tmp_path):
    kills = setting("KAFKALITE_EOS_KILLS")
    rnd = random.Random(int(os.environ.get("KAFKALITE_EOS_SEED", "7")))
    port = free_port()
    srv = ServerProcess(str(tmp_path / "data"), workers=2, extra_args=["--port", str(port)])
    srv.start()
    bootstrap = srv.bootstrap
    aborted_log = str(tmp_path / "aborted.txt")
    processor_log = open(tmp_path / "processor.log", "ab")
    procs: list[subprocess.Popen] = []

    def start_processor() -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "eos_processor.py"), bootstrap,
                                 SOURCE, SINK, aborted_log],
                                env=child_env(), stdout=processor_log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    def restart_server(whole_node: bool) -> None:
        """kill -9 of the supervisor, which the next one adopts the workers
        of, or of every process of the node (a machine's crash)."""
        pids = srv.worker_pids()
        srv.kill()
        if whole_node:
            for p in pids:
                os.kill(p, signal.SIGKILL)
            wait_until(lambda: not any(pid_alive(p) for p in pids), 15, "the workers to die")
        srv.start()

    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for f in admin.create_topics([NewTopic(SOURCE, PARTITIONS),
                                      NewTopic(SINK, PARTITIONS)]).values():
            f.result()
        admin.close()
        feeder = Feeder(bootstrap, total=400 * kills)
        feeder.start()
        processor = start_processor()
        done = Counter()
        victims = (["processor", "worker", "processor", "worker", "supervisor"] * kills)[:kills]
        rnd.shuffle(victims)
        for victim in victims:
            time.sleep(rnd.uniform(0.2, 1.2))
            if victim == "processor":
                processor.kill()
                processor.wait()
            elif victim == "worker":
                kill_a_worker(srv, rnd)
            else:
                restart_server(whole_node=done[victim] % 2 == 1)
            done[victim] += 1
            if processor.poll() is not None:
                processor = start_processor()
        feeder.join(240)
        assert not feeder.is_alive(), "the feeder did not finish"
        # let the processor catch up with every input record
        seen = {}

        def caught_up() -> bool:
            nonlocal processor
            if processor.poll() is not None:
                processor = start_processor()
            try:
                c = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos"})
                try:
                    seen["ends"] = {p: c.get_watermark_offsets(TopicPartition(SOURCE, p))[1]
                                    for p in range(PARTITIONS)}
                    seen["committed"] = {tp.partition: tp.offset for tp in c.committed(
                        [TopicPartition(SOURCE, p) for p in range(PARTITIONS)])}
                finally:
                    c.close()
            except KafkaError:
                return False
            return seen["committed"] == seen["ends"]
        wait_until(caught_up, 180, lambda: f"the group's commits to reach the input's ends "
                   f"({seen})", interval=0.3)
        ends, committed = seen["ends"], seen["committed"]
        processor.kill()
        processor.wait()

        inputs = [(p, o) for p, o, _ in read_all(bootstrap, SOURCE, "read_uncommitted")]
        aborted = set(open(aborted_log).read().split()) if os.path.exists(aborted_log) else set()
        committed_view = read_all(bootstrap, SINK, "read_committed")
        problems = check(inputs, committed_view, aborted, committed, ends)
        assert not problems, (f"{len(problems)} violation(s) after {dict(done)} kills, e.g. "
                              f"{problems[:10]}")
        assert len(inputs) == len(committed_view) > 0
        assert sum(done.values()) >= kills and done["supervisor"] and done["worker"]
        assert aborted, "no transaction was aborted: the G1a check would be vacuous"

        # the planted fault: the same output read uncommitted must fail the check
        dirty = read_all(bootstrap, SINK, "read_uncommitted")
        planted = check(inputs, dirty, aborted, committed, ends)
        assert any(p.startswith(("G1a", "duplicate")) for p in planted), planted[:5]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        processor_log.close()
        srv.stop()
