"""The node's query runner (kafkalite/sql/query_runner.py) on a server of
the test's own: a persistent query resumes after a restart of the server,
and keeps exactly-once output (read read_committed) through kill -9s of
the runner process while input keeps arriving.

The checker: the output carries each input record's partition and offset;
every input record the filter keeps is there exactly once with the
model's value, nothing else is. It is shown to catch a duplicate planted
in the output, and the killed runs' aborted transactions (the same output
read read_uncommitted) before its passing run counts.
"""
from __future__ import annotations

import json
import os
import signal
import threading
from collections import Counter

import pytest

from harness import child_pids, create, wait_until
from kafkalite.client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafkalite.sql import Session

PARTITIONS = 2
RUNNER = "kafkalite.sql.query_runner"
STATEMENT = ("CREATE STREAM evens AS SELECT json_extract(decode(value), '$.n')::BIGINT AS n, "
             "partition AS p, \"offset\" AS o FROM numbers "
             "WHERE json_extract(decode(value), '$.n')::BIGINT % 2 = 0")


def produce(server, start: int, count: int) -> list:
    """Records n = start..start+count-1; their (partition, offset, n)."""
    delivered = []
    producer = Producer(server.config(**{"linger.ms": 5}))

    def on_delivery(err, msg):
        assert err is None, err
        delivered.append((msg.partition(), msg.offset(), json.loads(msg.value())["n"]))
    for n in range(start, start + count):
        producer.produce("numbers", json.dumps({"n": n}).encode(), key=str(n % 10).encode(),
                         on_delivery=on_delivery)
    assert producer.flush(30) == 0
    producer.close()
    return delivered


def read_output(server, isolation: str = "read_committed") -> list:
    """The values of every record of ``evens`` to each partition's end
    (read_committed: its last stable offset)."""
    c = Consumer(server.config(**{"isolation.level": isolation}))
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition("evens", p), 10)[1]
                for p in range(PARTITIONS)}
        c.assign([TopicPartition("evens", p, OFFSET_BEGINNING) for p in ends if ends[p]])
        out = []
        while any(c.position([TopicPartition("evens", p)])[0].offset < end
                  for p, end in ends.items() if end):
            out += [json.loads(m.value()) for m in c.consume(10_000, 0.5)]
        return out
    finally:
        c.close()


def check(output: list, inputs: list) -> None:
    """Exactly once: each kept input record once, with its value; nothing else."""
    want = {(p, o): {"n": n, "p": p, "o": o} for p, o, n in inputs if n % 2 == 0}
    seen = Counter((r["p"], r["o"]) for r in output)
    twice = [k for k, c in seen.items() if c > 1]
    assert not twice, f"duplicates in the output: {twice[:5]}"
    lost = sorted(set(want) - set(seen))
    assert not lost, f"{len(lost)} input records missing from the output: {lost[:5]}"
    extra = sorted(set(seen) - set(want))
    assert not extra, f"output from no kept input record: {extra[:5]}"
    wrong = [r for r in output if r != want[(r["p"], r["o"])]]
    assert not wrong, f"values unlike the model: {wrong[:5]}"


def caught_up(server, inputs: list, timeout: float = 120.0) -> list:
    expected = sum(1 for _, _, n in inputs if n % 2 == 0)
    return wait_until(lambda: (lambda o: o if len(o) >= expected else None)(read_output(server)),
                      timeout, f"{expected} output records")


def create_query(server) -> str:
    session = Session(server.config(), timeout=30)
    try:
        query_id = session.query(STATEMENT).read_all().to_pylist()[0]["query_id"]
        wait_until(lambda: {r["query_id"]: r["state"] for r in session.query(
            "SHOW QUERIES").read_all().to_pylist()}.get(query_id) == "RUNNING", 90,
            "the query to run")
        return query_id
    finally:
        session.close()


def runner_pid(server) -> int:
    return wait_until(lambda: child_pids(server.proc.pid, RUNNER), 30, "the runner")[0]


def test_a_server_starts_its_runner_at_the_first_create_stream_only(own_server):
    # the runner's process and its 32 MB come with the first persistent
    # query (its topic), not with every server that serves /query
    create(own_server, "numbers", PARTITIONS)
    session = Session(own_server.config(), timeout=30)
    try:
        assert session.query("SHOW QUERIES").read_all().num_rows == 0
        assert session.query("SELECT count(*) AS n FROM numbers").read_all().to_pylist() == \
            [{"n": 0}]
    finally:
        session.close()
    assert child_pids(own_server.proc.pid, RUNNER) == [], "a runner before any CREATE STREAM"
    create_query(own_server)
    assert len(child_pids(own_server.proc.pid, RUNNER)) == 1


def test_a_restarted_server_resumes_the_query(own_server):
    create(own_server, "numbers", PARTITIONS)
    inputs = produce(own_server, 0, 300)
    create_query(own_server)
    caught_up(own_server, inputs)
    own_server.stop()
    own_server.start()
    inputs += produce(own_server, 300, 300)
    output = caught_up(own_server, inputs)
    check(output, inputs)
    # the checker catches a duplicate: one output record written again
    producer = Producer(own_server.config())
    producer.produce("evens", json.dumps(output[0]).encode(), partition=0)
    assert producer.flush(30) == 0
    producer.close()
    with pytest.raises(AssertionError, match="duplicates in the output"):
        check(read_output(own_server), inputs)


def test_kill_9_of_the_runner_loses_and_repeats_nothing(own_server):
    create(own_server, "numbers", PARTITIONS)
    create_query(own_server)
    inputs, stop = [], threading.Event()

    def keep_producing():
        n = 0
        while not stop.is_set():
            inputs.extend(produce(own_server, n, 50))
            n += 50
    producer = threading.Thread(target=keep_producing)
    producer.start()
    try:
        for kill in range(2):
            pid = runner_pid(own_server)
            # mid-stream: while the runner writes output
            before = len(read_output(own_server, "read_uncommitted"))
            wait_until(lambda: len(read_output(own_server, "read_uncommitted")) > before + 20,
                       90, "the runner to write output")
            os.kill(pid, signal.SIGKILL)
            wait_until(lambda: runner_pid(own_server) != pid, 30, "a new runner")
    finally:
        stop.set()
        producer.join(60)
    output = caught_up(own_server, inputs, 180)
    # the killed runs' aborted transactions are in the log: read_uncommitted sees them
    uncommitted = read_output(own_server, "read_uncommitted")
    if len(uncommitted) > len(output):
        with pytest.raises(AssertionError, match="duplicates in the output"):
            check(uncommitted, inputs)
    check(output, inputs)
