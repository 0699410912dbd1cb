"""quixstreams (PyPI) running a stateful exactly-once application end to end
against kafkalite's Kafka listener.

The application (quixstreams_counter.py, run as its own process) keeps a
running count per key in RocksDB state backed by a compacted changelog topic
it creates through the admin API, and writes each count to an output topic;
with ``processing_guarantee="exactly-once"`` the output, the changelog and the
input offsets go in one transaction (send_offsets_to_transaction). One run
processes a first batch and commits; a second processes the next batch
inside a transaction and is killed with SIGKILL before it commits; a third,
with an empty state directory, fences it, restores the counts from the
changelog (read_committed) and processes that batch again. The committed
output must hold every input record exactly once with the right count, and
the group's committed input offsets must be the end of the input.
The read_uncommitted view of the same output holds the killed run's records
as well: the exact check is what a broker that let aborted records through
would fail.

quixstreams pins confluent-kafka below 2.13, so it is not in the test
environment: the application runs with the python of a virtualenv of its
own (tests/venvs.py), built on first use under the test cache and kept. It
needs nothing of kafkalite. The test skips only when this python cannot
make a virtualenv; a pip install that fails is a failure.
"""
from __future__ import annotations

import json
import select
import subprocess
import time
from pathlib import Path

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource
from compat_helpers import create_topic
from compat_helpers import read_values
from venvs import QUIXSTREAMS, VenvUnavailable, venv_python

APP = Path(__file__).parent / "quixstreams_counter.py"
USERS = 5
BATCH = 40


@pytest.fixture(scope="session")
def quix_python():
    """The python of the quixstreams virtualenv (built once per machine)."""
    try:
        return venv_python(QUIXSTREAMS)
    except VenvUnavailable as e:
        pytest.skip(str(e))


def produce_input(server, topic, start) -> None:
    p = ck.Producer({"bootstrap.servers": server.kafka_bootstrap})
    for i in range(start, start + BATCH):
        user = f"u{i % USERS}"
        p.produce(topic, json.dumps({"user": user, "i": i}).encode(), key=user.encode())
    assert p.flush(15) == 0


def app(python, server, source, sink, state_dir, mode, arg) -> subprocess.Popen:
    return subprocess.Popen([str(python), str(APP), server.kafka_bootstrap, source, sink,
                             str(state_dir), mode, str(arg)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float) -> None:
    try:
        _, err = proc.communicate(timeout=timeout)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == 0, err


def wait_for_line(proc: subprocess.Popen, line: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            got = proc.stdout.readline()
            if got.strip() == line:
                return
            assert got, f"the application exited: {proc.wait()} {proc.stderr.read()}"
    raise AssertionError(f"the application did not print {line!r} in {timeout} s")


def test_quixstreams_exactly_once_count_per_key_through_a_killed_run(server, topic_name,
                                                                     tmp_path, quix_python):
    source, sink = topic_name, topic_name + "-counts"
    create_topic(server, source, 2)
    produce_input(server, source, 0)
    finish(app(quix_python, server, source, sink, tmp_path / "state-1", "run", BATCH), timeout=40)

    produce_input(server, source, BATCH)
    held = app(quix_python, server, source, sink, tmp_path / "state-2", "hold", BATCH)
    try:
        wait_for_line(held, "processed", timeout=40)
        # the held transaction's output is in the log before the kill
        assert len(read_values(server, sink, 2, "read_uncommitted", expect=2 * BATCH)) \
            >= 2 * BATCH, "the held run's output never reached the log"
    finally:
        held.kill()
        held.wait()
        held.stdout.close()
        held.stderr.close()

    finish(app(quix_python, server, source, sink, tmp_path / "state-3", "run", BATCH), timeout=45)

    committed = [json.loads(v) for v in read_values(server, sink, 2, "read_committed",
                                                    expect=2 * BATCH)]
    for u in range(USERS):
        mine = [(r["i"], r["count"]) for r in committed if r["user"] == f"u{u}"]
        inputs = list(range(u, 2 * BATCH, USERS))
        assert mine == [(i, n + 1) for n, i in enumerate(inputs)], f"u{u}"
    assert len(committed) == 2 * BATCH
    # the killed run's records are in the log, aborted: the exact check above
    # is what keeps them out
    everything = [json.loads(v) for v in read_values(server, sink, 2, "read_uncommitted",
                                                     expect=3 * BATCH)]
    assert sorted(r["i"] for r in everything) == sorted([*range(2 * BATCH),
                                                         *range(BATCH, 2 * BATCH)])
    # the input offsets committed in the last transaction: all of the input
    c = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": f"{source}-counter"})
    try:
        parts = [ck.TopicPartition(source, p) for p in range(2)]
        assert [tp.offset for tp in c.committed(parts, 10)] == [
            c.get_watermark_offsets(tp, 10)[1] for tp in parts]
    finally:
        c.close()
    # the state store's changelog: a compacted topic created through the admin API
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    changelogs = [t for t in admin.list_topics(timeout=10).topics
                  if t.startswith("changelog__") and source in t]
    assert len(changelogs) == 1, changelogs
    resource = ConfigResource(ConfigResource.Type.TOPIC, changelogs[0])
    configs = admin.describe_configs([resource])[resource].result(10)
    assert configs["cleanup.policy"].value == "compact"
