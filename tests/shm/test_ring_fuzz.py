"""Fuzz a worker's shared-memory rings: entries with random, mutated and
truncated batches, bad topics and partitions, and now and then a ring
broken outright (a malformed entry, an impossible head, the file truncated
while the worker drains it). The worker must never die, never grow its
memory for good, close exactly the rings that were broken, and keep every
record a well-behaved shared-memory producer had acknowledged.

KAFKALITE_FUZZ_INPUTS sets the number of entries (tests/soak.py: 20,000 by
default, 1,000,000 under tools/soak); KAFKALITE_FUZZ_SEED replays a run.
"""
import os
import struct
import time

import pytest

from fuzzing import INPUTS, AckedRecords, Survival, fuzz_rng, mutate, record_batch
from harness import create, shm_entries, wait_until
from kafkalite._ext import shm_ring as core
from kafkalite.client.connection import Connection
from kafkalite.shm import ProducerRing, RingPoisoned

CAPACITY = 256 << 10
BROKEN_RING_EVERY = 200         # on average: 0.5% of the inputs break their ring
GOOD_EVERY = 100


class Fuzzer:
    def __init__(self, endpoint: str):
        self.conn = Connection(endpoint)
        self.ring = None
        self.rings = self.broken = self.closed_by_worker = self.poisoned = 0
        self.acks: dict[int, int] = {}
        self.new_ring()

    def new_ring(self) -> None:
        self.ring = ProducerRing.create(CAPACITY)
        self.conn.extension({"op": "shm_attach", "ring": self.ring.name,
                             "secret": self.ring.attach_secret.hex()}, 10)
        self.rings += 1

    def collect(self, acks) -> None:
        for _, code, _ in acks:
            self.acks[code] = self.acks.get(code, 0) + 1

    def append(self, topic: str, partition: int, batch: bytes) -> None:
        while True:
            try:
                if self.ring.try_append(topic, partition, batch) >= 0:
                    return
                self.collect(self.ring.wait_acks(10))
            except RingPoisoned:        # never for an entry the ring protocol allows
                self.poisoned += 1
                self.ring.close()
                self.new_ring()

    def break_ring(self, rng) -> None:
        """One of the faults of issue 12, then a new ring."""
        self.collect(self.ring.poll_acks())
        path = os.path.join(core.SHM_DIR, self.ring.name)
        fd = os.open(path, os.O_RDWR)
        try:
            head = struct.unpack("<Q", os.pread(fd, 8, core.OFF_DATA_HEAD))[0]
            fault = rng.randrange(3)
            if fault == 0:          # a malformed entry (any kind but a padding marker)
                kind = rng.choice([k for k in range(256) if k != ord("P")])
                os.pwrite(fd, struct.pack("<IBBH", 32, kind, 0, 0) +
                          rng.randbytes(24), core.HEADER_SIZE + head % CAPACITY)
                os.pwrite(fd, struct.pack("<Q", head + 32), core.OFF_DATA_HEAD)
            elif fault == 1:        # an impossible data head
                os.pwrite(fd, struct.pack("<Q", head + CAPACITY + rng.randrange(1, 1 << 40)),
                          core.OFF_DATA_HEAD)
            else:                   # truncated while the worker drains a burst
                total = os.fstat(fd).st_size
                for _ in range(16):
                    if self.ring.try_append("t", 0, b"\0" * 8000) < 0:
                        break
                os.ftruncate(fd, rng.randrange(total))
                time.sleep(0.002)
                os.ftruncate(fd, total)      # so this process may touch the header again
            with open(path + ".w", "wb", buffering=0) as bell:
                bell.write(b"\1")
        finally:
            os.close(fd)
        self.broken += 1
        # The worker gives the ring up at once -- unless the truncation missed
        # what it reads (zeros in the ack region are no news to it).
        deadline = time.monotonic() + 0.2
        while self.ring.worker_alive() and time.monotonic() < deadline:
            time.sleep(0.001)
        self.closed_by_worker += self.ring.worker_error() is not None
        self.ring.close()
        self.new_ring()

    def close(self) -> None:
        try:
            while self.ring.in_flight:
                self.collect(self.ring.wait_acks(10))
        finally:
            self.ring.close()
            self.conn.close()


def entry(rng, topic: str, bases: list[bytes]) -> tuple[str, int, bytes]:
    r = rng.random()
    t = topic if rng.random() < 0.9 else \
        rng.randbytes(rng.randint(1, 120)).decode("latin-1").replace("\0", "x") or "x"
    partition = rng.randrange(2) if rng.random() < 0.9 else rng.randrange(1 << 31)
    if r < 0.6:
        return t, partition, mutate(rng, rng.choice(bases), keep=0)
    if r < 0.8:
        b = rng.choice(bases)
        return t, partition, b[:rng.randrange(len(b))]
    if r < 0.9:
        return t, partition, rng.randbytes(rng.randint(0, 300))
    return t, partition, rng.choice(bases)


@pytest.mark.processes
@pytest.mark.slow
def test_fuzzed_ring_entries_never_crash_a_worker(server, topic_name):
    create(server, topic_name, 2)
    create(server, topic_name + "-good", 2)
    shm_before = shm_entries()
    logged_before = len(server.output())     # the shared server's log: this test's part
    survival = Survival(server)
    good = AckedRecords(server, topic_name + "-good", 2, **{"kafkalite.transport": "shm"})
    rng = fuzz_rng("ring")
    bases = [record_batch(), record_batch(b"x" * 1000, None), record_batch(b"", b"k" * 50)]
    endpoint = server.info["workers"][0]["endpoint"]
    fuzzer = Fuzzer(endpoint)
    started = time.monotonic()
    try:
        for i in range(INPUTS):
            if rng.randrange(BROKEN_RING_EVERY) == 0:
                fuzzer.break_ring(rng)
            else:
                fuzzer.append(*entry(rng, topic_name, bases))
            if i % GOOD_EVERY == 0:
                good.produce()
    finally:
        fuzzer.close()
    elapsed = time.monotonic() - started
    print(f"{INPUTS} ring inputs in {elapsed:.1f} s ({INPUTS / elapsed:.0f}/s): {fuzzer.rings} "
          f"rings, {fuzzer.broken} broken on purpose ({fuzzer.closed_by_worker} closed by the worker "
          f"with an error), acks by error code {fuzzer.acks}")
    assert fuzzer.poisoned == 0, "a ring was closed over entries the protocol allows"
    good.check("ring fuzz")
    survival.check("ring fuzz")
    log_lines = server.output()[logged_before:].count("\n")
    print(f"server log: {log_lines} lines")
    assert log_lines < 500, "bad input is logged rate-limited"
    wait_until(lambda: not shm_entries() - shm_before, 10,
               lambda: f"no ring left in /dev/shm: {shm_entries() - shm_before}", interval=0.1)
