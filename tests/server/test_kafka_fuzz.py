"""Fuzz the Kafka listeners: random and mutated request frames must never
crash or hang a broker process, and a real client is served afterwards.

KAFKALITE_FUZZ_FRAMES sets the number of frames (default 100,000); the
seed is printed, and KAFKALITE_FUZZ_SEED replays a run.

Mutated frames start from valid requests of most APIs (valid headers,
damaged bodies); random frames carry a known API key and random body
bytes; noise frames are bytes with arbitrary size prefixes. The inputs
are tests/fuzzing.py's, shared with the other fuzzes.
"""
from __future__ import annotations

import os
import random
import select
import socket
import struct
import time

import confluent_kafka as ck
import pytest

from fuzzing import base_frames, mutate, random_frame
from soak import setting

FRAMES = setting("KAFKALITE_FUZZ_FRAMES")
REPLY_WAIT_S = 5.0


@pytest.fixture(scope="module")
def server(module_server):
    """Fuzzed frames of every API may alter broker configs, quotas, ACLs
    and users, or create and delete topics, under any name."""
    return module_server


class Fuzzer:
    """Sends each frame on a fresh connection, then half-closes it, so the
    broker answers or closes at once; up to IN_FLIGHT connections at a time."""

    IN_FLIGHT = 48

    def __init__(self, addresses: list[str]):
        self.addresses = [(h, int(p)) for h, p in (a.rsplit(":", 1) for a in addresses)]
        self.open: dict[socket.socket, float] = {}
        self.answered = self.closed = self.timeouts = 0

    def send(self, i: int, raw: bytes) -> None:
        while len(self.open) >= self.IN_FLIGHT:
            self.reap(0.5)
        sock = socket.create_connection(self.addresses[i % len(self.addresses)], timeout=5)
        try:
            sock.sendall(raw)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass  # the broker may close before reading everything
        sock.setblocking(False)
        self.open[sock] = time.monotonic()

    def reap(self, wait: float) -> None:
        # poll, not select: an xdist worker that ran many tests before holds
        # descriptors past FD_SETSIZE (a CI run: "filedescriptor out of range")
        poller = select.poll()
        by_fd = {sock.fileno(): sock for sock in self.open}
        for fd in by_fd:
            poller.register(fd, select.POLLIN)
        ready = [by_fd[fd] for fd, _ in poller.poll(wait * 1000)]
        for sock in ready:
            got = False
            try:
                while True:
                    chunk = sock.recv(1 << 20)
                    if not chunk:
                        break
                    got = True
            except BlockingIOError:
                continue            # more reply to come
            except OSError:
                pass
            self.answered += got
            self.closed += not got
            del self.open[sock]
            sock.close()
        now = time.monotonic()
        for sock, since in list(self.open.items()):
            if now - since > REPLY_WAIT_S:  # acks=0 produce, a parked fetch: give up on it
                self.timeouts += 1
                del self.open[sock]
                sock.close()

    def drain(self) -> None:
        while self.open:
            self.reap(0.5)


@pytest.mark.slow
def test_fuzzed_frames_never_crash_or_hang_a_broker(server, topic_name, group_name):
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient(server.config())
    try:
        admin.create_topics([NewTopic(topic_name, 2)])[topic_name].result()
    finally:
        admin.close()
    pids_before = [server.proc.pid] + server.worker_pids()
    seed = int(os.environ.get("KAFKALITE_FUZZ_SEED", random.randrange(1 << 30)))
    print(f"fuzz seed {seed}, {FRAMES} frames")
    rng = random.Random(seed)
    bases = base_frames(topic_name)
    fuzzer = Fuzzer([server.kafka_bootstrap] + [
        f"127.0.0.1:{b['port']}" for b in server.refresh()["kafka_brokers"]
        if b["node_id"] != 1000])
    started = time.monotonic()
    for i in range(FRAMES):
        r = rng.random()
        if r < 0.5:
            frame = mutate(rng, rng.choice(bases))
            raw = struct.pack(">i", len(frame)) + frame
        elif r < 0.9:
            frame = random_frame(rng)
            raw = struct.pack(">i", len(frame)) + frame
        else:                                    # noise, with any size prefix
            raw = rng.randbytes(rng.randint(0, 64))
        fuzzer.send(i, raw)
    fuzzer.drain()
    elapsed = time.monotonic() - started
    print(f"{FRAMES} frames in {elapsed:.1f} s: answered {fuzzer.answered}, connection "
          f"closed {fuzzer.closed}, no reply within {REPLY_WAIT_S} s {fuzzer.timeouts}")

    assert [server.proc.pid] + server.worker_pids() == pids_before
    assert server.proc.poll() is None
    # A real client is served normally afterwards, by every broker.
    p = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "enable.idempotence": True})
    for i in range(100):
        p.produce(topic_name, value=b"after-%d" % i, partition=i % 2)
    assert p.flush(20) == 0
    c = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": group_name})
    try:
        c.assign([ck.TopicPartition(topic_name, q, ck.OFFSET_BEGINNING) for q in range(2)])
        values, deadline = set(), time.monotonic() + 20
        while len({v for v in values if v.startswith(b"after-")}) < 100 \
                and time.monotonic() < deadline:
            values |= {m.value() for m in c.consume(1000, 0.5) if m.error() is None}
        assert {b"after-%d" % i for i in range(100)} <= values
    finally:
        c.close()
