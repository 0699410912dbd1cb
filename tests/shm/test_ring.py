"""The shared-memory produce ring (kafkalite.shm): real /dev/shm segments,
real FIFOs, and the other side of the ring in a real child process
(ring_child.py) wherever the behaviour crosses processes.

Covered: round trips across many wrap-arounds (hypothesis), back-pressure on
a full ring, kill -9 of the worker and of the producer at random moments,
doorbell latency and idle CPU, select / zmq.Poller on the doorbell fds, and
the inputs a ring must refuse. Every test checks that it leaves nothing
named kafkalite-ring-* behind in /dev/shm.
"""
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
import zlib

import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kafkalite.shm
from kafkalite._ext import shm_ring as core
from kafkalite.shm import (NAME_PREFIX, SHM_DIR, PeerGone, ProducerRing, RingError, RingFenced,
                           RingRefused, RingTimeout, WorkerRing, entry_size)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
CHILD = os.path.join(HERE, "ring_child.py")
sys.path.insert(0, HERE)
import ring_child  # noqa: E402  (content and ack functions shared with the child)
from soak import setting

SMALL = 64 << 10
LARGE = 2 << 20
TOPICS = ["orders", "t", "ü-topic-ß", "x" * 249, "payments.v2"]


# ---- fixtures and helpers ------------------------------------------------------------

def _ring_files():
    """Ring files this test process is responsible for: default names carry
    the creating pid, the names tests choose carry "test-<pid>" (so parallel
    test processes, e.g. pytest -n, do not see each other's rings)."""
    mine = (f"{NAME_PREFIX}{os.getpid()}-", f"{NAME_PREFIX}test-{os.getpid()}-")
    return {n for n in os.listdir(SHM_DIR) if n.startswith(mine)}


@pytest.fixture(autouse=True)
def nothing_left_in_dev_shm():
    before = _ring_files()
    yield
    left = _ring_files() - before
    for n in left:
        os.unlink(os.path.join(SHM_DIR, n))
    assert not left, f"left behind in {SHM_DIR}: {sorted(left)}"


class Child:
    """A ring_child.py process, talked to line by line with a timeout."""

    def __init__(self, *args):
        env = dict(os.environ)
        env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen([sys.executable, CHILD, *args], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT)
        self._buf = b""

    def readline(self, timeout=20.0):
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                raise AssertionError(f"child {self.proc.args[2:]} said nothing for {timeout} s")
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise AssertionError(f"child exited with {self.proc.wait()}")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def send(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd).encode() + b"\n")
        self.proc.stdin.flush()

    def recv(self, timeout=20.0):
        return json.loads(self.readline(timeout))

    def call(self, _timeout=20.0, **cmd):
        self.send(**cmd)
        return self.recv(_timeout)

    def kill(self):
        """SIGKILL, without reaping: the child stays a zombie until reap()."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)

    def reap(self):
        self.kill()
        self.proc.wait(10)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except OSError:
                pass

    def stop(self):
        if self.proc.poll() is None:
            try:
                self.send(op="exit")
                self.proc.wait(5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.reap()


@pytest.fixture(scope="module")
def worker_proc():
    """One long-lived worker process, told by command which ring to attach."""
    child = Child("worker")
    yield child
    child.stop()


def expected_ack(seq, topic, partition, batch):
    return (seq, *ring_child.ack_values(seq, topic, partition, zlib.crc32(batch), len(batch)))


def received(seq, topic, partition, batch):
    """What the child worker reports for an entry it received intact."""
    return [seq, topic, partition, len(batch), zlib.crc32(batch)]


def collect_acks(ring, count, acks=None):
    acks = [] if acks is None else acks
    while len(acks) < count:
        new = ring.wait_acks(10)
        assert new, f"only {len(acks)} of {count} acks arrived"
        acks += new
    return acks


def wait_until(predicate, timeout=2.0):
    """Seconds until predicate() held (the test fails after ``timeout``)."""
    t0 = time.monotonic()
    while not predicate():
        assert time.monotonic() - t0 < timeout, "condition not reached in time"
        time.sleep(0.0005)
    return time.monotonic() - t0


def unique_name(tag):
    return f"{NAME_PREFIX}test-{os.getpid()}-{tag}-{random.getrandbits(32):08x}"


# ---- 1. round trips ------------------------------------------------------------------

def _round_trip(worker_proc, capacity, entries):
    """Send ``entries`` through a ring to the child worker; checks every
    byte and ack. Returns how often the producer padded to the end of the
    region because the entry did not fit (wrap) or to rewind early."""
    ring = ProducerRing.create(capacity)
    wraps = rewinds = 0
    try:
        assert worker_proc.call(op="attach", name=ring.name, secret=ring.attach_secret.hex())["epoch"] == 1
        worker_proc.send(op="drain", count=len(entries))
        seqs, acks = [], []
        for topic, partition, batch in entries:
            before = ring.data_head
            seqs.append(ring.append(topic, partition, batch, timeout=10))
            size = entry_size(len(topic.encode()), len(batch))
            if ring.data_head - before != size:
                assert ring.data_head - before == size + capacity - before % capacity
                assert ring.data_head % capacity == size, "entry after padding not at 0"
                if before % capacity + size > capacity:
                    wraps += 1
                else:
                    rewinds += 1
            acks += ring.poll_acks()
        got = worker_proc.recv()["entries"]
        collect_acks(ring, len(entries), acks)
        assert ring.unacked() == []
        worker_proc.call(op="close")
    finally:
        ring.close()
    assert seqs == list(range(len(entries))), "sequence numbers are not 0, 1, 2, ..."
    assert got == [received(s, *e) for s, e in zip(seqs, entries)]
    assert acks == [expected_ack(s, *e) for s, e in zip(seqs, entries)]
    return wraps, rewinds


@settings(max_examples=50, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(data=st.data())
def test_round_trip_of_random_entries_across_wrap_arounds(worker_proc, data):
    capacity = data.draw(st.sampled_from([SMALL, LARGE]), label="capacity")
    largest = min(capacity // 2 - entry_size(249, 0), 1_000_000)
    sizes = data.draw(st.lists(
        st.one_of(st.integers(1, 64), st.integers(1, largest // 16),
                  st.integers(largest // 4, largest)),
        min_size=20, max_size=150 if capacity == SMALL else 25), label="sizes")
    rng = random.Random(data.draw(st.integers(0, 2 ** 32 - 1), label="seed"))
    entries = [(rng.choice(TOPICS), rng.randrange(0, 2 ** 31), rng.randbytes(size))
               for size in sizes]
    _round_trip(worker_proc, capacity, entries)


def test_thousands_of_entries_through_a_small_ring(worker_proc):
    rng = random.Random(7)
    entries = [(rng.choice(TOPICS), rng.randrange(0, 64), rng.randbytes(rng.randint(1, 8000)))
               for _ in range(3000)]
    wraps, rewinds = _round_trip(worker_proc, SMALL, entries)
    assert wraps + rewinds > 150, "the ring did not go round many times"


# ---- 2. back-pressure ----------------------------------------------------------------

def test_full_ring_refuses_then_resumes_and_loses_nothing(worker_proc):
    ring = ProducerRing.create(SMALL)
    try:
        worker_proc.call(op="attach", name=ring.name, secret=ring.attach_secret.hex())         # attached, not draining
        sent = []
        while True:
            entry = ("full", len(sent) % 4, ring_child.content(len(sent), 4000))
            seq = ring.try_append(*entry)
            if seq < 0:
                break
            assert seq == len(sent)
            sent.append(entry)
        assert len(sent) >= SMALL // entry_size(4, 4000) - 1
        for _ in range(3):
            assert ring.try_append("full", 0, b"x" * 4000) == -1
        assert ring.next_sequence == len(sent)
        assert [(t, p, b) for _, t, p, b in ring.unacked()] == sent, "a refused append wrote"

        t0 = time.monotonic()
        with pytest.raises(RingTimeout):
            ring.append("full", 0, b"x" * 4000, timeout=0.2)
        assert 0.2 <= time.monotonic() - t0 < 2.0
        assert ring.next_sequence == len(sent)

        total = len(sent) + 60
        worker_proc.send(op="drain", count=total)
        while len(sent) < total:
            batch = ring_child.content(len(sent), 4000)
            assert ring.append("full", 1, batch, timeout=10) == len(sent)
            sent.append(("full", 1, batch))
        got = worker_proc.recv()["entries"]
        acks = collect_acks(ring, total)
        assert ring.data_head > 4 * SMALL                   # wrapped at the end of the region
        worker_proc.call(op="close")
    finally:
        ring.close()
    assert got == [received(i, *e) for i, e in enumerate(sent)]
    assert acks == [expected_ack(i, *e) for i, e in enumerate(sent)]


def test_entries_in_flight_are_bounded_by_ack_slots():
    ring = ProducerRing.create(SMALL, ack_slots=16)
    worker = WorkerRing.attach(ring.name, ring.attach_secret)
    try:
        assert [ring.try_append("t", 0, b"x") for _ in range(16)] == list(range(16))
        assert ring.try_append("t", 0, b"x") == -1       # data room left, ack slots not
        (seq, *_), = worker.poll(1)
        worker.ack(seq, 0, 0)
        worker.release_through(seq)
        assert ring.try_append("t", 0, b"x") == 16       # collecting the ack freed a slot
        assert [a[0] for a in ring.poll_acks()] == [0]
    finally:
        worker.close()
        ring.close()


# ---- 3. worker killed ----------------------------------------------------------------

KILL_ROUNDS = setting("KAFKALITE_RING_KILL_ROUNDS")


@pytest.mark.processes
@pytest.mark.slow
def test_worker_kill_9_mid_stream_loses_nothing_and_a_new_worker_drains_the_rest(worker_proc):
    """KAFKALITE_RING_KILL_ROUNDS kills (tests/soak.py: 2, 50 under tools/soak)."""
    rng = random.Random(0x5EED)
    ring = ProducerRing.create(SMALL)
    appended, acked = {}, {}

    def record(acks):
        for seq, err, base in acks:
            assert seq not in acked, f"sequence {seq} acked twice"
            assert not acked or seq > max(acked), "acks out of order"
            acked[seq] = (err, base)

    def new_entry():
        return (rng.choice(TOPICS), rng.randrange(0, 8), rng.randbytes(rng.randint(1, 6000)))

    try:
        for rnd in range(KILL_ROUNDS):
            pending = [u[0] for u in ring.unacked()]
            child = Child("serve", ring.name, ring.attach_secret.hex(), str(rnd))
            try:
                word, epoch, first = child.readline().split()
                assert (word, int(epoch)) == ("attached", rnd + 1)
                assert int(first) == (pending[0] if pending else ring.next_sequence), \
                    "the new worker does not resume at the first unacked entry"
                stop = time.monotonic() + rng.uniform(0.02, 0.25)
                while time.monotonic() < stop:
                    entry = new_entry()
                    appended[ring.append(*entry, timeout=5)] = entry
                    record(ring.poll_acks())
            finally:
                child.kill()
            # still a zombie here: liveness must not be fooled by it
            assert wait_until(lambda: not ring.worker_alive(), timeout=1.0) < 1.0
            child.reap()
            record(ring.poll_acks())

            t0 = time.monotonic()
            with pytest.raises(PeerGone):
                ring.wait_acks(5)
            assert time.monotonic() - t0 < 1.0
            while (seq := ring.try_append(*(entry := new_entry()))) >= 0:
                appended[seq] = entry
            t0 = time.monotonic()
            with pytest.raises(PeerGone):
                ring.append(*entry, timeout=5)          # the entry the full ring refused
            assert time.monotonic() - t0 < 1.0

            unacked = ring.unacked()
            assert [u[0] for u in unacked] == sorted(set(appended) - set(acked))
            assert all(appended[s] == (t, p, b) for s, t, p, b in unacked)

        rest = ring.unacked()
        hello = worker_proc.call(op="attach", name=ring.name, secret=ring.attach_secret.hex())
        assert hello["epoch"] == KILL_ROUNDS + 1 and hello["next"] == rest[0][0]
        worker_proc.send(op="drain", count=len(rest))
        got = worker_proc.recv()["entries"]
        assert got == [received(s, t, p, b) for s, t, p, b in rest]
        record(collect_acks(ring, len(rest)))
        worker_proc.call(op="close")
    finally:
        ring.close()
    assert sorted(acked) == sorted(appended) == list(range(len(appended)))
    for seq, (topic, partition, batch) in appended.items():
        assert (seq, *acked[seq]) == expected_ack(seq, topic, partition, batch)


@pytest.mark.processes
def test_worker_death_is_noticed_without_pidfds(worker_proc, monkeypatch):
    """Kernels or sandboxes without pidfd_open: liveness falls back to /proc,
    re-checked every LIVENESS_POLL_S while blocked."""
    def no_pidfd(pid, flags=0):
        raise OSError(38, "Function not implemented")
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    with ProducerRing.create(SMALL) as ring:
        child = Child("worker")
        try:
            child.call(op="attach", name=ring.name, secret=ring.attach_secret.hex())
            assert ring.worker_alive()
            ring.append("t", 0, b"never acked")
            child.kill()
            t0 = time.monotonic()
            with pytest.raises(PeerGone):
                ring.wait_acks(5)
            assert time.monotonic() - t0 < 1.0
        finally:
            child.reap()
        assert [u[0] for u in ring.unacked()] == [0]


# ---- 4. producer killed --------------------------------------------------------------

@pytest.mark.processes
def test_producer_kill_9_worker_drains_complete_entries_and_cleans_up():
    rng = random.Random(0xBEEF)
    for rnd in range(3):
        name = unique_name(f"producer-kill-{rnd}")
        child = Child("produce", name, str(rnd))
        ring = None
        try:
            word, created, secret = child.readline().split()
            assert (word, created) == ("created", name)
            ring = WorkerRing.attach(name, bytes.fromhex(secret))
            assert ring.producer_alive()
            expected = [0]

            def take():
                entries = ring.poll()
                for seq, topic, partition, view in entries:
                    assert seq == expected[0]
                    assert (topic, partition) == (f"t{seq % 5}", seq % 3)
                    assert view == ring_child.content(seq, len(view)), f"entry {seq} is torn"
                    ring.ack(seq, 0, seq)
                    expected[0] += 1
                if entries:
                    ring.release_through(entries[-1][0])
                return len(entries)

            stop = time.monotonic() + rng.uniform(0.05, 0.3)
            while time.monotonic() < stop:
                if ring.wait(0.5):
                    take()
            child.kill()
            assert wait_until(lambda: not ring.producer_alive(), timeout=1.0) < 1.0
            child.reap()
            while take():
                pass
            assert expected[0] > 0
            t0 = time.monotonic()
            assert ring.wait(5) is False                 # returns at once: no producer
            assert time.monotonic() - t0 < 0.5
        finally:
            child.reap()
            if ring is not None:
                ring.close(unlink=True)
        assert not [n for n in os.listdir(SHM_DIR) if n.startswith(name)]


# ---- 5. doorbells --------------------------------------------------------------------

def test_a_sleeping_worker_wakes_within_milliseconds(worker_proc):
    ring = ProducerRing.create(SMALL)
    try:
        worker_proc.call(op="attach", name=ring.name, secret=ring.attach_secret.hex())
        latencies = []
        for op in ["wait", "wait", "wait", "select", "select"]:
            assert worker_proc.call(op=op, timeout=5).get("armed", True) is True
            time.sleep(0.05)                             # let it fall asleep
            t0 = time.monotonic()
            ring.append("wake", 0, b"x" * 100)
            woke = worker_proc.recv()
            assert woke.get("ready", woke.get("readable")) is True
            latencies.append(woke["t"] - t0)
            if op == "wait":
                worker_proc.call(op="drain", count=1)
        assert max(latencies) < 0.2, latencies
        worker_proc.call(op="close")
    finally:
        ring.close()


def test_idle_waits_burn_no_cpu(worker_proc):
    ring = ProducerRing.create(SMALL)
    try:
        worker_proc.call(op="attach", name=ring.name, secret=ring.attach_secret.hex())
        assert worker_proc.call(op="wait", timeout=0.5) == {"waiting": True}
        idle = worker_proc.recv()
        assert idle["ready"] is False and idle["wall"] >= 0.49
        assert idle["cpu"] < 0.05, f"idle worker used {idle['cpu']:.3f} s of CPU in 0.5 s"

        ring.append("idle", 0, b"x")                     # an ack the worker never sends
        cpu, t0 = time.process_time(), time.monotonic()
        assert ring.wait_acks(0.5) == []
        assert time.monotonic() - t0 >= 0.49 and time.process_time() - cpu < 0.05

        while ring.try_append("idle", 0, b"y" * 1000) >= 0:
            pass
        cpu, t0 = time.process_time(), time.monotonic()
        with pytest.raises(RingTimeout):
            ring.append("idle", 0, b"y" * 1000, timeout=0.5)
        assert time.monotonic() - t0 >= 0.49 and time.process_time() - cpu < 0.05

        assert len(worker_proc.call(op="drain", count=ring.next_sequence)["entries"]) \
            == ring.next_sequence
        worker_proc.call(op="close")
    finally:
        ring.close()


def test_doorbell_fds_work_with_select_and_zmq_poller():
    ring = ProducerRing.create(SMALL)
    worker = WorkerRing.attach(ring.name, ring.attach_secret)
    ctx = zmq.Context()
    pull, push = ctx.socket(zmq.PULL), ctx.socket(zmq.PUSH)
    try:
        pull.bind("inproc://ring-test")
        push.connect("inproc://ring-test")
        # worker fd with select.select
        assert worker.arm() is True
        assert select.select([worker], [], [], 0)[0] == []
        seq = ring.append("bell", 1, b"abc")
        assert select.select([worker], [], [], 1)[0] == [worker]
        assert [e[0] for e in worker.poll()] == [seq]    # poll disarms and drains the FIFO
        assert select.select([worker], [], [], 0)[0] == []

        # worker fd in a zmq.Poller next to a ZeroMQ socket, as a worker's loop has it
        poller = zmq.Poller()
        poller.register(worker.fileno(), zmq.POLLIN)
        poller.register(pull, zmq.POLLIN)
        assert worker.arm() is True
        assert dict(poller.poll(0)) == {}
        push.send(b"request")
        assert dict(poller.poll(1000)) == {pull: zmq.POLLIN}
        pull.recv()
        seq2 = ring.append("bell", 2, b"defg")
        assert dict(poller.poll(1000)) == {worker.fileno(): zmq.POLLIN}
        assert [e[0] for e in worker.poll()] == [seq2]
        assert dict(poller.poll(0)) == {}

        # producer fd: readable when acks arrive
        pp = zmq.Poller()
        pp.register(ring.fileno(), zmq.POLLIN)
        assert ring.arm() is True
        assert dict(pp.poll(0)) == {}
        worker.ack(seq, 0, 41)
        assert dict(pp.poll(1000)) == {ring.fileno(): zmq.POLLIN}
        assert ring.poll_acks() == [(seq, 0, 41)]
        assert dict(pp.poll(0)) == {}
        assert ring.arm() is True
        worker.ack(seq2, 3, 42)
        assert select.select([ring], [], [], 1)[0] == [ring]
        assert ring.poll_acks() == [(seq2, 3, 42)]
        # arm() says so when there is news already: no need to sleep
        assert worker.arm() is True
        ring.append("bell", 0, b"h")
        assert worker.arm() is False
        worker.disarm()
    finally:
        pull.close(0)
        push.close(0)
        ctx.term()
        worker.close()
        ring.close()


# ---- 6. bad input --------------------------------------------------------------------

def _write_shm(name, data):
    """A file of ours in /dev/shm, as a producer makes a ring's (0600)."""
    with open(os.open(os.path.join(SHM_DIR, name), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600),
              "wb") as f:
        f.write(data)


def test_attach_refuses_what_is_not_a_ring():
    """A file with the ring's secret but not a ring is named for what is
    wrong with it; one without is only "not yours" (what is in a file the
    asker did not prove is theirs is not told)."""
    ring = ProducerRing.create(SMALL)
    secret = ring.attach_secret
    with open(ring.path, "rb") as f:
        image = bytearray(f.read())
    ring.close()
    bad = {
        "garbage": (bytes(range(256)) * 64, "not its own"),
        "empty": (b"", "not its own"),
        "short": (image[:1000], "shorter than a ring header"),
        "truncated": (image[:len(image) // 2], "truncated"),
        "version": (image[:8] + (99).to_bytes(4, "little") + image[12:], "layout version 99"),
        "capacity": (image[:16] + (SMALL + 1).to_bytes(8, "little") + image[24:],
                     "inconsistent ring header"),
        "no-fifos": (image, "doorbell FIFO"),
    }
    names = []
    try:
        for tag, (data, message) in bad.items():
            name = unique_name(tag)
            names.append(name)
            _write_shm(name, data)
            with pytest.raises((ValueError, RingRefused), match=message):
                WorkerRing.attach(name, secret)
        with pytest.raises(FileNotFoundError):
            WorkerRing.attach(unique_name("missing"), secret)
    finally:
        for name in names:
            os.unlink(os.path.join(SHM_DIR, name))


def test_a_ring_is_attached_only_for_whoever_shows_it_is_theirs():
    """The worker runs as the server's user (root, often) and opens what a
    request names (issue 67: another local user named a ring read off
    /dev/shm and took it over from the worker draining it). Refused
    (RingRefused) before the worker slot is touched: the wrong secret,
    another owner than the asker, a link to the ring, a ring others may
    open; the attached worker drains on, unfenced."""
    with ProducerRing.create(SMALL) as ring:
        worker = WorkerRing.attach(ring.name, ring.attach_secret, os.geteuid())
        for args, message in [
                ((ring.name, bytes(core.ATTACH_SECRET_SIZE)), "not its own"),
                ((ring.name, ring.attach_secret[:-1]), "not its own"),
                ((ring.name, b""), "not its own"),
                ((ring.name, ring.attach_secret, os.geteuid() + 1), "belongs to uid")]:
            with pytest.raises(RingRefused, match=message):
                WorkerRing.attach(*args)
        for make_link, message in [(os.symlink, "symbolic link"), (os.link, "2 links")]:
            link = unique_name(make_link.__name__)
            make_link(ring.path, os.path.join(SHM_DIR, link))
            try:
                with pytest.raises(RingRefused, match=message):
                    WorkerRing.attach(link, ring.attach_secret)
            finally:
                os.unlink(os.path.join(SHM_DIR, link))
        os.chmod(ring.path, 0o640)
        with pytest.raises(RingRefused, match="mode 0640"):
            WorkerRing.attach(ring.name, ring.attach_secret)
        os.chmod(ring.path, 0o600)
        assert (ring.worker_epoch, worker.epoch) == (1, 1)
        ring.append("t", 0, b"still drained")
        assert [bytes(e[3]) for e in worker.poll()] == [b"still drained"]
        worker.close()


def test_a_doorbell_that_is_not_the_rings_own_is_refused(tmp_path):
    """The asker's own ring (its secret known) whose doorbell is a link to
    another file: the worker would write a byte into whatever it opened.
    It opens no link, and takes only FIFOs of the segment's owner."""
    target = tmp_path / "someone-elses"
    target.write_bytes(b"untouched")
    with ProducerRing.create(SMALL) as ring:
        bell = ring.path + ".p"
        os.rename(bell, bell + ".saved")
        os.symlink(target, bell)
        try:
            with pytest.raises(RingRefused, match="symbolic link"):
                WorkerRing.attach(ring.name, ring.attach_secret)
        finally:
            os.unlink(bell)
            os.rename(bell + ".saved", bell)
        if os.geteuid() == 0:       # a FIFO of another user (root can make one)
            os.chown(bell, 65534, 65534)
            with pytest.raises(RingRefused, match="belongs to uid 65534"):
                WorkerRing.attach(ring.name, ring.attach_secret)
            os.chown(bell, 0, 0)
        assert ring.worker_epoch == 0
        WorkerRing.attach(ring.name, ring.attach_secret).close()
    assert target.read_bytes() == b"untouched"


def test_producer_refuses_bad_entries_and_bad_rings():
    with pytest.raises(ValueError, match="power of two"):
        ProducerRing.create(100_000)
    with pytest.raises(ValueError, match="power of two"):
        ProducerRing.create(1024)
    with pytest.raises(ValueError, match="invalid ring name"):
        ProducerRing.create(SMALL, name="a/b")
    with ProducerRing.create(SMALL) as ring:
        with pytest.raises(FileExistsError):
            ProducerRing.create(SMALL, name=ring.name)
        assert ring.try_append("x" * 249, 0, b"ok") == 0
        assert ring.try_append("é" * 124, 0, b"ok") == 1        # 248 bytes of UTF-8
        for topic in ["x" * 250, "é" * 125, ""]:
            with pytest.raises(ValueError, match="topic name"):
                ring.try_append(topic, 0, b"x")
        with pytest.raises(TypeError):
            ring.try_append(b"bytes-topic", 0, b"x")
        with pytest.raises(ValueError, match="partition"):
            ring.try_append("t", -1, b"x")
        # the largest legal entry is capacity / 2, one byte more is refused
        # (by append too: it could never fit, waiting would not help)
        fits = SMALL // 2 - entry_size(1, 0)
        assert entry_size(1, fits) == SMALL // 2
        with pytest.raises(ValueError, match="larger than half the ring"):
            ring.append("t", 0, bytes(fits + 1), timeout=10)
        worker = WorkerRing.attach(ring.name, ring.attach_secret)
        for seq, *_ in worker.poll():
            worker.ack(seq, 0, 0)
            worker.release_through(seq)
        assert ring.append("t", 0, bytes(fits), timeout=1) == 2
        worker.close()
    with pytest.raises(ValueError, match="closed"):
        ring.try_append("t", 0, b"x")
    ring.close()                                                  # idempotent


def test_worker_refuses_out_of_order_acks_and_releases():
    with ProducerRing.create(SMALL) as ring, WorkerRing.attach(ring.name, ring.attach_secret) as worker:
        with pytest.raises(ValueError, match="no polled entry"):
            worker.ack(0, 0, 0)
        for i in range(3):
            ring.append("t", i, b"%d" % i)
        assert [e[0] for e in worker.poll(2)] == [0, 1]
        with pytest.raises(ValueError, match="sequence order"):
            worker.ack(1, 0, 0)
        with pytest.raises(ValueError, match="int16"):
            worker.ack(0, 40000, 0)
        with pytest.raises(ValueError, match="polled"):
            worker.release_through(2)
        worker.ack(0, 0, 0)
        worker.ack(1, 0, 0)
        with pytest.raises(ValueError, match="no polled entry"):
            worker.ack(2, 0, 0)
        worker.release_through(1)
        assert ring.wait_acks(1) == [(0, 0, 0), (1, 0, 0)]


def test_a_second_live_worker_is_refused_and_a_takeover_fences_the_first(worker_proc):
    with ProducerRing.create(SMALL) as ring:
        worker_proc.call(op="attach", name=ring.name, secret=ring.attach_secret.hex())
        with pytest.raises(ValueError, match="live worker"):
            WorkerRing.attach(ring.name, ring.attach_secret)
        worker_proc.call(op="close")
        first = WorkerRing.attach(ring.name, ring.attach_secret)
        second = WorkerRing.attach(ring.name, ring.attach_secret)               # same process: takes over
        assert (first.epoch, second.epoch) == (2, 3)
        with pytest.raises(RingFenced):
            first.poll()
        assert isinstance(RingFenced("x"), RingError)
        first.close()
        assert ring.worker_alive()                          # the fenced close left it alone
        second.close()
        assert not ring.worker_alive()


# ---- views, re-attach, API ------------------------------------------------------------

def test_entries_are_private_copies_the_producer_cannot_change():
    ring = ProducerRing.create(SMALL)
    worker = WorkerRing.attach(ring.name, ring.attach_secret)
    ring.append("t", 0, b"\x00" * 16 + b"payload")
    (seq, _, _, batch), = worker.poll()
    batch[0:8] = (1234).to_bytes(8, "big")          # a broker stamps baseOffset in place
    assert ring.unacked()[0][3][:8] == bytes(8)     # ... in its own copy
    with open(os.path.join(SHM_DIR, ring.name), "r+b") as f:
        f.seek(core.HEADER_SIZE)
        f.write(b"\xff" * 128)                       # the producer scribbles after the poll
    worker.close()
    ring.close()
    assert bytes(batch[16:]) == b"payload"          # what the worker validated stays as it was


def test_reattach_resumes_after_the_last_ack():
    with ProducerRing.create(SMALL) as ring:
        for i in range(5):
            ring.append("t", 0, b"entry-%d" % i)
        worker = WorkerRing.attach(ring.name, ring.attach_secret)
        assert [e[0] for e in worker.poll()] == [0, 1, 2, 3, 4]
        worker.ack(0, 0, 100)
        worker.ack(1, 0, 101)                           # acked, never released
        worker.release_through(0)
        worker.close()
        assert not ring.worker_alive()
        assert [u[0] for u in ring.unacked()] == [2, 3, 4]
        worker = WorkerRing.attach(ring.name, ring.attach_secret)
        assert worker.epoch == 2
        assert [(e[0], bytes(e[3])) for e in worker.poll()] == \
            [(2, b"entry-2"), (3, b"entry-3"), (4, b"entry-4")]
        for seq in (2, 3, 4):
            worker.ack(seq, 0, 100 + seq)
        worker.release_through(4)
        assert [a[0] for a in collect_acks(ring, 5)] == [0, 1, 2, 3, 4]
        assert ring.unacked() == []
        worker.close()


def test_public_surface():
    assert sorted(kafkalite.shm.__all__) == sorted(
        ["ProducerRing", "WorkerRing", "RingError", "RingTimeout", "PeerGone", "RingFenced",
         "RingCorrupted", "RingPoisoned", "RingRefused", "DEFAULT_CAPACITY", "NAME_PREFIX",
         "SHM_DIR", "entry_size"])
    for name in kafkalite.shm.__all__:
        assert getattr(kafkalite.shm, name) is getattr(kafkalite.shm.ring, name)
    for method in ["create", "try_append", "append", "poll_acks", "wait_acks", "unacked",
                   "worker_alive", "fileno", "close", "name", "capacity"]:
        assert hasattr(ProducerRing, method), method
    for method in ["attach", "poll", "ack", "release_through", "wait", "fileno",
                   "producer_alive", "close"]:
        assert hasattr(WorkerRing, method), method
    assert kafkalite.shm.DEFAULT_CAPACITY == 64 << 20
    assert core.HEADER_SIZE == 4096 and core.ACK_RECORD_SIZE == 32
    assert issubclass(RingTimeout, TimeoutError) and issubclass(PeerGone, ConnectionError)
