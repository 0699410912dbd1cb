#!/usr/bin/env python
"""Broker benchmark: a real kafkalite server (supervisor + partition workers
in their own processes) driven by kafkalite's Python clients, each figure
next to raw pyzmq doing the same job in the same run.

    python benchmarks/bench_broker.py             # full run (10M records, best of 3)
    python benchmarks/bench_broker.py --quick     # ~30 s; what the smoke test runs

What is measured (see benchmarks/README.md for the meaning of every figure):

1. Produce 100-byte random values (no key) to one partition, acks=1, from
   one producer process:
   a. ``Producer.produce_batch`` (1,000 values per call) over ZeroMQ;
   b. the same over the shared-memory ring (``kafkalite.transport=shm``);
   c. per-message ``Producer.produce`` over ZeroMQ;
   d. the ceiling: the same bytes as prebuilt 1,000-record RecordBatches
      through a raw pyzmq PUSH -> PULL pair (tcp:// loopback, another
      process, no acks).
2. Consume the topic written by 1a back from the page cache:
   ``Consumer.consume_batch`` (pyarrow) with the default fetch sizes and
   with 16 MiB / 64 MiB fetches, and per-message ``Consumer.consume``.
3. End-to-end latency at a fixed rate of 1 KiB values: a producer process
   sends message i at t_i = t0 + i/rate (keeping the schedule when it falls
   behind: no coordinated omission) with t_i in the value; a consumer
   process records arrival - t_i. Over ZeroMQ, over shared memory, and for
   raw pyzmq PUSH -> PULL (the floor).

Every client runs in a child process of this script (``--role``); the
script itself only orchestrates, reads the clock handshakes and the CPU
time of every thread of every process from /proc. Throughput figures are
the best of --repeats runs; latency figures are percentiles of one run. A
benchmark never fails on timing: the exit status is 0 whenever the run
completed, non-zero only for real errors (a child failed, records went
missing).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import select
import shutil
import struct
import subprocess
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
for _p in (str(REPO), str(HERE)):
    if _p not in sys.path:
        sys.path.insert(0, _p)

import report  # noqa: E402
from report import MB, GiB, MiB, Results, gc_paused, human_bytes, quiesce, say, warn  # noqa: E402

from kafkalite.server import launcher  # noqa: E402

TARGET_PRODUCE_ZMQ = 2_000_000          # records/s, 1a
TARGET_PRODUCE_SHM = 5_000_000          # records/s, 1b
TARGET_CONSUME = 5_000_000              # records/s, 2
TARGET_P99_MS = 1.0                     # end-to-end p99, 3

VALUE_BYTES = 100
BATCH_VALUES = 1000                     # values per produce_batch call / per pyzmq batch
VALUE_POOL = 8                          # distinct 1,000-value lists, cycled through
LARGE_FETCH = {"max.partition.fetch.bytes": 16 * MiB, "fetch.max.bytes": 64 * MiB}
LAT_HEADER = struct.Struct("<qq")       # t_i (time.time_ns), sequence number
PERCENTILES = [("p50", 50.0), ("p99", 99.0), ("p999", 99.9), ("max", 100.0)]

QUICK = dict(records=200_000, per_message_records=50_000, repeats=1, latency_seconds=2.0,
             warmup_seconds=1.0, rate=2000)

HEADERS = ["#", "Figure", "kafkalite", "Ceiling / peer", "Ratio", "Target", "Met"]


# ---- small helpers ---------------------------------------------------------------------

def note(msg: str) -> None:
    """Progress: stderr, so that stdout holds the report."""
    print(msg, file=sys.stderr, flush=True)


def child_env() -> dict:
    return launcher.package_env()


def make_values(seed: int, size: int, count: int, lists: int) -> list[list[bytes]]:
    import random
    rng = random.Random(seed)
    return [[rng.randbytes(size) for _ in range(count)] for _ in range(lists)]


def precise_sleeps() -> None:
    """Timer slack 1 ns for this thread (Linux prctl PR_SET_TIMERSLACK), so a
    sleep until t_i overshoots by tens of microseconds, not the default 50+."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def threads_cpu(pid: int) -> dict[int, tuple[str, float]]:
    """{tid: (thread name, CPU seconds)} for every thread of ``pid`` (/proc)."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                comm = f.read().strip()
        except OSError:
            continue
        out[int(tid)] = (comm, (int(fields[11]) + int(fields[12])) / _TICK)
    return out


class CpuWatch:
    """CPU seconds per thread category of some processes between two snapshots.

    ``procs`` maps a label ("producer", "worker 0", ...) to (pid, {tid: name}).
    Categories: "<label> main thread" (tid == pid), "<label> <name>" for named
    tids, "<label> ZeroMQ I/O" (libzmq's ZMQbg threads), "<label> other"."""

    def __init__(self, procs: dict[str, tuple[int, dict]]):
        self.procs = procs
        self.before = {label: threads_cpu(pid) for label, (pid, _) in procs.items()}

    def stop(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for label, (pid, named) in self.procs.items():
            before = self.before[label]
            for tid, (comm, cpu) in threads_cpu(pid).items():
                used = cpu - before.get(tid, (comm, 0.0))[1]
                if tid == pid:
                    cat = "main thread"
                elif tid in named:
                    cat = named[tid]
                elif comm.startswith("ZMQbg"):
                    cat = "ZeroMQ I/O"
                else:
                    cat = "other threads"
                key = f"{label} {cat}"
                out[key] = round(out.get(key, 0.0) + used, 3)
        return {k: v for k, v in out.items() if v > 0}


def latency_stats(lat_ns) -> dict:
    import numpy as np
    a = np.asarray(lat_ns, dtype=np.int64)
    out = {"count": int(len(a))}
    if len(a):
        ms = a / 1e6
        for name, q in PERCENTILES:
            out[name] = float(np.percentile(ms, q))
        out["min"] = float(ms.min())
        out["mean"] = float(ms.mean())
    return out


# ---- child processes -------------------------------------------------------------------
# Each child speaks JSON lines on stdout and takes one-word commands on stdin.

def emit(event: str, **fields) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def wait_for(word: str) -> None:
    line = sys.stdin.readline().strip()
    if line != word:
        raise SystemExit(f"expected {word!r} on stdin, got {line!r}")


def named_tids(**names) -> dict:
    """{native thread id: label} for the live threads whose Python name is given."""
    import threading
    out = {}
    for t in threading.enumerate():
        for label, name in names.items():
            if t.name == name and t.native_id is not None:
                out[t.native_id] = label
    return out


def role_produce(a: dict) -> None:
    """1a/1b/1c: one kafkalite Producer, timed from the first call to flush()."""
    from kafkalite.client import Producer
    values = make_values(a["seed"], a["value_bytes"], BATCH_VALUES, VALUE_POOL)
    topic, n = a["topic"], a["records"]
    p = Producer({"bootstrap.servers": a["bootstrap"], "acks": 1,
                  "kafkalite.transport": a["transport"]})
    # Untimed warm-up: metadata, the connection (or ring attach), first appends.
    if a["mode"] == "batch":
        p.produce_batch(topic, values[0], partition=0)
    else:
        for v in values[0]:
            p.produce(topic, v, partition=0)
    if p.flush(60) != 0:
        raise RuntimeError("warm-up records were not delivered")
    emit("ready", tids={str(k): v for k, v in
                        named_tids(**{"sender thread": "kafkalite-producer"}).items()})
    wait_for("go")
    max_queued = full = 0
    with gc_paused():
        c0 = time.thread_time()
        t0 = time.perf_counter()
        if a["mode"] == "batch":
            produce_batch, calls = p.produce_batch, n // BATCH_VALUES
            for i in range(calls):
                produce_batch(topic, values[i % VALUE_POOL], partition=0)
                if not i & 63:
                    max_queued = max(max_queued, len(p))
        else:
            produce, poll = p.produce, p.poll
            flat = [v for vs in values for v in vs]
            m = len(flat)
            for i in range(n):
                v = flat[i % m]
                while True:
                    try:
                        produce(topic, v, partition=0)
                        break
                    except BufferError:
                        full += 1
                        poll(0.001)
        t_flush = time.perf_counter()
        left = p.flush(600)
        t1 = time.perf_counter()
        caller_cpu = time.thread_time() - c0
    if left:
        raise RuntimeError(f"{left} records not delivered within 600 s")
    extra = {"queue_full_retries": full} if a["mode"] != "batch" else {"max_queued": max_queued}
    emit("done", seconds=t1 - t0, flush_seconds=t1 - t_flush, caller_cpu=caller_cpu,
         peak_rss_bytes=resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, **extra)
    wait_for("close")
    p.close(30)


def role_zmq_pull(a: dict) -> None:
    """1d receiver: a PULL socket counting bytes; 3 floor: records arrival - t_i."""
    import zmq
    ctx = zmq.Context()
    s = ctx.socket(zmq.PULL)
    s.setsockopt(zmq.LINGER, 0)
    port = s.bind_to_random_port("tcp://127.0.0.1")
    emit("ready", endpoint=f"tcp://127.0.0.1:{port}")
    if a["mode"] == "throughput":
        s.recv(copy=False)                    # the warm-up batch
        emit("warm")
        n, got, nbytes = a["messages"], 0, 0
        recv = s.recv
        with gc_paused():
            while got < n:
                nbytes += len(recv(copy=False))
                got += 1
            t_last = time.monotonic_ns()
        emit("done", t_last=t_last, messages=got, bytes=nbytes)
    else:
        total, warmup = a["total"], a["warmup"]
        lat, seen = [], 0
        deadline = time.monotonic() + total / a["rate"] + 60
        poller = zmq.Poller()
        poller.register(s, zmq.POLLIN)
        unpack, now_ns = LAT_HEADER.unpack_from, time.time_ns
        with gc_paused():
            while seen < total and time.monotonic() < deadline:
                if not poller.poll(200):
                    continue
                while True:
                    try:
                        buf = s.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    now = now_ns()
                    ti, seq = unpack(buf)
                    seen += 1
                    if seq >= warmup:
                        lat.append(now - ti)
        emit("done", received=seen, stats=latency_stats(lat))
    s.close(0)
    ctx.term()


def role_zmq_push(a: dict) -> None:
    """1d sender: the same bytes as 1a, prebuilt as RecordBatches, PUSH, no acks."""
    import zmq
    from kafkalite.record import RecordBatchBuilder
    values = make_values(a["seed"], a["value_bytes"], BATCH_VALUES, VALUE_POOL)
    pool = []
    for v in values:
        b = RecordBatchBuilder(0)
        b.append_values(v)
        pool.append(b.build())
    ctx = zmq.Context()
    s = ctx.socket(zmq.PUSH)
    s.connect(a["endpoint"])
    s.send(pool[0], copy=False)               # warm-up: connects, first transfer
    emit("ready", batch_bytes=len(pool[0]))
    wait_for("go")
    n = a["messages"]
    send = s.send
    with gc_paused():
        c0 = time.thread_time()
        t0 = time.monotonic_ns()
        for i in range(n):
            send(pool[i % VALUE_POOL], copy=False)
        t_sent = time.monotonic_ns()
        caller_cpu = time.thread_time() - c0
    emit("done", t0=t0, t_sent=t_sent, caller_cpu=caller_cpu)
    wait_for("close")
    s.close()                                 # default linger: everything is delivered
    ctx.term()


def role_consume(a: dict) -> None:
    """2: one kafkalite Consumer reading the topic of 1a from the beginning."""
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": a["bootstrap"], **a["config"]})
    topic, n = a["topic"], a["records"]
    low, high = c.get_watermark_offsets(TopicPartition(topic, 0))   # warms metadata + socket
    if high - low < n:
        raise RuntimeError(f"{topic} holds {high - low} records, {n} asked")
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    emit("ready")
    wait_for("go")
    rows, expect = 0, low
    with gc_paused():
        c0 = time.thread_time()
        t0 = time.perf_counter()
        deadline = time.monotonic() + 300 + n / 100_000
        if a["mode"] == "batch":
            consume_batch = c.consume_batch
            while rows < n:
                rb = consume_batch(5.0)
                k = rb.num_rows
                if k:
                    offsets = rb.column(2)
                    if offsets[0].as_py() != expect or offsets[k - 1].as_py() != expect + k - 1:
                        raise RuntimeError(f"consume_batch: offsets {offsets[0]}..{offsets[k - 1]}"
                                           f", expected from {expect}")
                    expect += k
                    rows += k
                elif time.monotonic() > deadline:
                    raise RuntimeError(f"consume_batch: stuck at {rows} of {n} records")
        else:
            consume = c.consume
            while rows < n:
                msgs = consume(10_000, 5.0)
                k = len(msgs)
                if k:
                    if msgs[0].offset() != expect or msgs[-1].offset() != expect + k - 1:
                        raise RuntimeError(f"consume: offsets {msgs[0].offset()}.."
                                           f"{msgs[-1].offset()}, expected from {expect}")
                    expect += k
                    rows += k
                elif time.monotonic() > deadline:
                    raise RuntimeError(f"consume: stuck at {rows} of {n} records")
        t1 = time.perf_counter()
        caller_cpu = time.thread_time() - c0
    emit("done", seconds=t1 - t0, rows=rows, caller_cpu=caller_cpu)
    wait_for("close")
    c.close()


def role_lat_send(a: dict) -> None:
    """3: messages at t_i = t0 + i/rate; t_i in the value's first 8 bytes."""
    import numpy as np
    total, rate = a["total"], a["rate"]
    pad = os.urandom(max(0, a["value_bytes"] - LAT_HEADER.size))
    if a["transport"] == "pyzmq":
        import zmq
        ctx = zmq.Context()
        s = ctx.socket(zmq.PUSH)
        s.connect(a["endpoint"])
        send = s.send
        p = None
    else:
        from kafkalite.client import Producer
        p = Producer({"bootstrap.servers": a["bootstrap"], "acks": 1, "linger.ms": 0,
                      "kafkalite.transport": a["transport"]})
        p.list_topics(a["topic"])             # metadata before the clock starts
        topic, produce = a["topic"], p.produce

        def send(value):
            produce(topic, value, partition=0)
    precise_sleeps()
    lags = np.zeros(total, dtype=np.int64)
    emit("ready", tids={str(k): v for k, v in
                        named_tids(**{"sender thread": "kafkalite-producer"}).items()})
    wait_for("go")
    pack, now_ns, sleep = LAT_HEADER.pack, time.time_ns, time.sleep
    with gc_paused():
        c0 = time.thread_time()
        t0 = now_ns() + 20_000_000
        for i in range(total):
            ti = t0 + i * 1_000_000_000 // rate
            now = now_ns()
            if now < ti:
                sleep((ti - now) / 1e9)
                now = now_ns()
            lags[i] = now - ti
            send(pack(ti, i) + pad)
        t_end = now_ns()
        caller_cpu = time.thread_time() - c0
    if p is not None:
        left = p.flush(60)
        if left:
            raise RuntimeError(f"{left} latency messages not delivered")
    w = a["warmup"]
    measured = lags[w:]
    interval = 1_000_000_000 // rate
    first_send = t0 + w * 1_000_000_000 // rate + int(measured[0]) if len(measured) else t0
    emit("done", sent=total, measured=int(len(measured)),
         send_rate=(len(measured) - 1) / max((t_end - first_send) / 1e9, 1e-9)
         if len(measured) > 1 else 0.0,
         late=int((measured > interval).sum()),
         late_1ms=int((measured > 1_000_000).sum()),
         send_lag_p99_ms=float(np.percentile(measured, 99) / 1e6) if len(measured) else 0.0,
         send_lag_max_ms=float(measured.max() / 1e6) if len(measured) else 0.0,
         caller_cpu=caller_cpu)
    wait_for("close")
    if p is not None:
        p.close(30)
    else:
        s.close()
        ctx.term()


def role_lat_recv(a: dict) -> None:
    """3: a kafkalite Consumer recording arrival - t_i for every message."""
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": a["bootstrap"], "fetch.min.bytes": 1,
                  "fetch.max.wait.ms": a["fetch_wait_ms"]})
    c.assign([TopicPartition(a["topic"], 0, OFFSET_BEGINNING)])
    if c.consume(1, 0.3):
        raise RuntimeError(f"latency topic {a['topic']} is not empty")
    emit("ready")
    total, warmup = a["total"], a["warmup"]
    lat, seen = [], 0
    deadline = time.monotonic() + total / a["rate"] + 60
    unpack, now_ns, consume = LAT_HEADER.unpack_from, time.time_ns, c.consume
    with gc_paused():
        while seen < total and time.monotonic() < deadline:
            msgs = consume(10_000, 0.2)
            now = now_ns()                    # every message of the call arrived by now
            for m in msgs:
                ti, seq = unpack(m.value())
                if seq >= warmup:
                    lat.append(now - ti)
            seen += len(msgs)
    emit("done", received=seen, stats=latency_stats(lat))
    c.close()


ROLES = {"produce": role_produce, "zmq-pull": role_zmq_pull, "zmq-push": role_zmq_push,
         "consume": role_consume, "lat-send": role_lat_send, "lat-recv": role_lat_recv}


class Child:
    """A ``--role`` child process of this script."""

    live: list["Child"] = []

    def __init__(self, role: str, **args):
        self.role = role
        self.proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--role", role,
             "--role-args", json.dumps(args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env())
        self.buf = b""
        Child.live.append(self)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def expect(self, event: str, timeout: float = 120.0) -> dict:
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buf:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"{self.role} child: no {event!r} within {timeout:.0f} s")
            if not select.select([fd], [], [], left)[0]:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"{self.role} child exited with {self.proc.wait()} "
                                   f"before {event!r} (its traceback is above)")
            self.buf += chunk
        line, _, self.buf = self.buf.partition(b"\n")
        msg = json.loads(line)
        if msg.get("event") != event:
            raise RuntimeError(f"{self.role} child said {msg}, expected {event!r}")
        return msg

    def send(self, word: str) -> None:
        self.proc.stdin.write(word.encode() + b"\n")
        self.proc.stdin.flush()

    def finish(self, timeout: float = 60.0) -> None:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"{self.role} child did not exit")
        finally:
            if self in Child.live:
                Child.live.remove(self)
        if code != 0:
            raise RuntimeError(f"{self.role} child exited with {code}")

    @classmethod
    def kill_all(cls) -> None:
        for c in list(cls.live):
            if c.proc.poll() is None:
                c.proc.kill()
            c.proc.wait()
        cls.live.clear()


# ---- the server ------------------------------------------------------------------------

class Server(launcher.ServerProcess):
    """``python -m kafkalite server`` on free loopback ports (kafkalite.server.launcher)."""

    def __init__(self, work: str, workers: int):
        super().__init__(os.path.join(work, "data"), workers,
                         log_path=os.path.join(work, "server.log"))

    def processes(self) -> dict[str, tuple[int, dict]]:
        procs = {f"worker {i}": (pid, {}) for i, pid in enumerate(self.worker_pids())}
        procs["supervisor"] = (self.proc.pid, {})
        return procs

    def stop(self, timeout: float = 30.0) -> None:
        if super().stop(timeout) is None:
            warn("the server did not stop on SIGTERM; it was killed")
        for p in self.survivors:
            warn(f"worker {p} outlived the server; it was killed")


def create_topic(server: Server, name: str) -> None:
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        for f in admin.create_topics([NewTopic(name, 1)]).values():
            f.result()
    finally:
        admin.close()


def delete_topic(server: Server, name: str) -> None:
    from kafkalite.client import AdminClient
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        for f in admin.delete_topics([name]).values():
            f.result()
    finally:
        admin.close()


def watermarks(server: Server, topic: str) -> tuple[int, int]:
    from kafkalite.client import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": server.bootstrap})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0))
    finally:
        c.close()


# ---- results ---------------------------------------------------------------------------

def cpu_lines(res: Results) -> list[str]:
    """Where the CPU went in the best run of each throughput figure and in
    each latency run: seconds of CPU per thread category, and as a share of
    the wall time (100% = one core busy all the time)."""
    out = []
    for key in res.order:
        f = res.figures[key]
        cpu = f.get("cpu") or {}
        wall = cpu.get("wall_s")
        threads = cpu.get("threads") or {}
        if not wall or not threads:
            continue
        parts = [f"{k} {v:.2f} s ({100 * v / wall:.0f}%)"
                 for k, v in sorted(threads.items(), key=lambda kv: -kv[1]) if v >= 0.01]
        title = cpu.get("title") or f["label"]
        extra = f"; {cpu['extra']}" if cpu.get("extra") else ""
        out.append(f"  {title} (wall {wall:.2f} s): " + ", ".join(parts) + extra)
    return out


# ---- 1. produce ------------------------------------------------------------------------

def memory_text(o: dict) -> str:
    """How much the producer held: produce_batch's peak queue and the peak RSS."""
    parts = []
    if o.get("max_queued"):
        parts.append(f"up to {o['max_queued']:,} records queued in the producer")
    if o.get("queue_full_retries"):
        parts.append(f"{o['queue_full_retries']:,} BufferError retries")
    if o.get("peak_rss_bytes"):
        parts.append(f"producer peak RSS {human_bytes(o['peak_rss_bytes'])}")
    return ", ".join(parts)


def produce_run(server: Server, topic: str, transport: str, mode: str, records: int,
                seed: int) -> dict:
    child = Child("produce", bootstrap=server.bootstrap, topic=topic, transport=transport,
                  mode=mode, records=records, value_bytes=VALUE_BYTES, seed=seed)
    try:
        ready = child.expect("ready", 120)
        named = {int(k): v for k, v in ready["tids"].items()}
        watch = CpuWatch({"producer": (child.pid, named), **server.processes()})
        child.send("go")
        done = child.expect("done", 600 + records / 50_000)
        threads = watch.stop()
        child.send("close")
        child.finish()
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
    low, high = watermarks(server, topic)
    if high - low != records + BATCH_VALUES:
        raise RuntimeError(f"{topic}: {high - low} records in the log, expected "
                           f"{records + BATCH_VALUES} ({records} + {BATCH_VALUES} warm-up)")
    done["threads"] = threads
    return done


def pyzmq_run(messages: int, seed: int) -> dict:
    pull = Child("zmq-pull", mode="throughput", messages=messages)
    push = None
    try:
        ep = pull.expect("ready", 60)["endpoint"]
        push = Child("zmq-push", endpoint=ep, messages=messages, value_bytes=VALUE_BYTES,
                     seed=seed)
        batch_bytes = push.expect("ready", 60)["batch_bytes"]
        pull.expect("warm", 60)
        watch = CpuWatch({"PUSH process": (push.pid, {}), "PULL process": (pull.pid, {})})
        push.send("go")
        sent = push.expect("done", 600 + messages / 50)
        got = pull.expect("done", 600 + messages / 50)
        threads = watch.stop()
        push.send("close")
        push.finish()
        pull.finish()
    finally:
        for c in (pull, push):
            if c is not None and c.proc.poll() is None:
                c.proc.kill()
    if got["messages"] != messages or got["bytes"] != messages * batch_bytes:
        raise RuntimeError(f"pyzmq: {got['messages']} messages / {got['bytes']} bytes received, "
                           f"sent {messages} x {batch_bytes}")
    return {"seconds": (got["t_last"] - sent["t0"]) / 1e9, "bytes": got["bytes"],
            "batch_bytes": batch_bytes, "caller_cpu": sent["caller_cpu"], "threads": threads}


def bench_produce(args, server: Server, res: Results) -> str:
    """Returns the topic written by the last 1a run (read back by test 2)."""
    n, npm = args.records, args.per_message_records
    say(f"[1] produce: {n:,} records of {VALUE_BYTES} random bytes (no key) per run for 1a/1b/1d "
        f"and {npm:,} for 1c, one partition, acks=1, one producer process; best of "
        f"{args.repeats}")
    runs: dict[str, list] = {k: [] for k in ("zmq_batch", "shm_batch", "zmq_single", "pyzmq")}
    keep = [None]

    def kafkalite_variant(key, transport, mode, records):
        def run(r):
            topic = f"produce-{key.replace('_', '-')}-{r}"
            create_topic(server, topic)
            quiesce()
            note(f"  [1] run {r + 1}/{args.repeats}: {key} ({records:,} records) ...")
            out = produce_run(server, topic, transport, mode, records, seed=r)
            out["records"] = records
            runs[key].append(out)
            note(f"      {records / out['seconds'] / 1e6:.2f} M rec/s ({out['seconds']:.2f} s, of "
                 f"which flush {out['flush_seconds']:.2f} s; {memory_text(out)})")
            if key == "zmq_batch":
                if keep[0] is not None:
                    delete_topic(server, keep[0])
                keep[0] = topic
            else:
                delete_topic(server, topic)
        return run

    def pyzmq_variant(r):
        quiesce()
        msgs = n // BATCH_VALUES
        note(f"  [1] run {r + 1}/{args.repeats}: pyzmq PUSH/PULL ({msgs:,} batches) ...")
        out = pyzmq_run(msgs, seed=r)
        out["records"] = msgs * BATCH_VALUES
        runs["pyzmq"].append(out)
        note(f"      {out['records'] / out['seconds'] / 1e6:.2f} M rec/s "
             f"({out['bytes'] / out['seconds'] / MB:,.0f} MB/s, {out['seconds']:.2f} s)")

    variants = [kafkalite_variant("zmq_batch", "zmq", "batch", n),
                kafkalite_variant("shm_batch", "shm", "batch", n),
                kafkalite_variant("zmq_single", "zmq", "single", npm),
                pyzmq_variant]
    for r in range(args.repeats):
        k = r % len(variants)           # rotated, so no variant always follows the same one
        for variant in variants[k:] + variants[:k]:
            variant(r)

    def best(key):
        return min(runs[key], key=lambda o: o["seconds"] / o["records"])

    def rate(o):
        return o["records"] / o["seconds"]

    def cpu(o):
        return {"wall_s": round(o["seconds"], 3), "threads": o["threads"],
                "extra": memory_text(o) if "peak_rss_bytes" in o else ""}

    def per_run(key):
        return [{k: v for k, v in o.items() if k != "threads"} for o in runs[key]]

    z = best("pyzmq")
    res.add("pyzmq_push_pull_records_per_s", "1d", "pyzmq PUSH->PULL ceiling (prebuilt batches)",
            rate(z), "records/s", target_text="ceiling", runs=per_run("pyzmq"), cpu=cpu(z),
            short="pyzmq ceiling",
            note=f"{z['batch_bytes']:,}-byte batches of {BATCH_VALUES} records, tcp:// loopback, "
                 f"no acks; send(copy=False)")
    res.add("pyzmq_push_pull_mb_per_s", "1d", "pyzmq PUSH->PULL ceiling (prebuilt batches)",
            z["bytes"] / z["seconds"] / MB, "MB/s", target_text="ceiling")
    a = best("zmq_batch")
    v = rate(a)
    res.add("produce_batch_zmq_records_per_s", "1a", "produce_batch over ZeroMQ", v, "records/s",
            baseline_key="pyzmq_push_pull_records_per_s", target=TARGET_PRODUCE_ZMQ,
            target_text=">= 2.00 M rec/s", meets=v >= TARGET_PRODUCE_ZMQ,
            runs=per_run("zmq_batch"), cpu=cpu(a),
            note="first produce_batch call to flush() returning")
    b = best("shm_batch")
    v = rate(b)
    res.add("produce_batch_shm_records_per_s", "1b", "produce_batch over shared memory", v,
            "records/s", baseline_key="pyzmq_push_pull_records_per_s", target=TARGET_PRODUCE_SHM,
            target_text=">= 5.00 M rec/s", meets=v >= TARGET_PRODUCE_SHM,
            runs=per_run("shm_batch"), cpu=cpu(b),
            note="kafkalite.transport=shm; first produce_batch call to flush() returning")
    c = best("zmq_single")
    res.add("produce_zmq_records_per_s", "1c", "produce() per message over ZeroMQ", rate(c),
            "records/s", baseline_key="pyzmq_push_pull_records_per_s", target_text="info",
            runs=per_run("zmq_single"), cpu=cpu(c),
            note="BufferError (queue.buffering.max.messages) answered with poll(0.001)")
    return keep[0]


# ---- 2. consume ------------------------------------------------------------------------

def consume_run(server: Server, topic: str, mode: str, records: int, config: dict) -> dict:
    child = Child("consume", bootstrap=server.bootstrap, topic=topic, mode=mode,
                  records=records, config=config)
    try:
        child.expect("ready", 120)
        watch = CpuWatch({"consumer": (child.pid, {}), **server.processes()})
        child.send("go")
        done = child.expect("done", 600 + records / 50_000)
        done["threads"] = watch.stop()
        child.send("close")
        child.finish()
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
    return done


def bench_consume(args, server: Server, topic: str, res: Results) -> None:
    n, npm = args.records, args.per_message_records
    say(f"[2] consume: {n:,} records of topic {topic} (written by 1a, in the page cache) per "
        f"run, {npm:,} per run for consume(); best of {args.repeats}")
    variants = [("batch_default", "batch", n, {}),
                ("batch_large", "batch", n, dict(LARGE_FETCH)),
                ("single", "single", npm, {})]
    runs: dict[str, list] = {k: [] for k, *_ in variants}
    for r in range(args.repeats):
        k = r % len(variants)
        for key, mode, records, config in variants[k:] + variants[:k]:
            note(f"  [2] run {r + 1}/{args.repeats}: {key} ({records:,} records) ...")
            out = consume_run(server, topic, mode, records, config)
            runs[key].append(out)
            note(f"      {out['rows'] / out['seconds'] / 1e6:.2f} M rec/s "
                 f"({out['seconds']:.2f} s)")

    def best(key):
        return min(runs[key], key=lambda o: o["seconds"] / o["rows"])

    def per_run(key):
        return [{k: v for k, v in o.items() if k != "threads"} for o in runs[key]]

    for key, label, targeted, cfg_note in (
            ("batch_default", "consume_batch, default fetch sizes", True,
             "max.partition.fetch.bytes 1 MiB, fetch.max.bytes 50 MiB (defaults)"),
            ("batch_large", "consume_batch, 16 MiB / 64 MiB fetches", True,
             "max.partition.fetch.bytes 16 MiB, fetch.max.bytes 64 MiB"),
            ("single", "consume() per message (10,000 per call)", False, "default fetch sizes")):
        o = best(key)
        v = o["rows"] / o["seconds"]
        fig = f"consume_{key}_records_per_s" if key != "single" else "consume_records_per_s"
        res.add(fig, 2, label, v, "records/s", baseline_key="pyzmq_push_pull_records_per_s",
                target=TARGET_CONSUME if targeted else None,
                target_text=">= 5.00 M rec/s" if targeted else "info",
                meets=(v >= TARGET_CONSUME) if targeted else None, runs=per_run(key),
                cpu={"wall_s": round(o["seconds"], 3), "threads": o["threads"]},
                note=f"{cfg_note}; first consume call to the last record; from OFFSET_BEGINNING")


# ---- 3. latency ------------------------------------------------------------------------

def latency_run(args, server: Server, transport: str) -> dict:
    total = int(round(args.rate * (args.warmup_seconds + args.latency_seconds)))
    warmup = int(round(args.rate * args.warmup_seconds))
    common = dict(total=total, warmup=warmup, rate=args.rate)
    recv = send = None
    try:
        if transport == "pyzmq":
            recv = Child("zmq-pull", mode="latency", **common)
            ep = recv.expect("ready", 60)["endpoint"]
            send = Child("lat-send", transport="pyzmq", endpoint=ep,
                         value_bytes=args.latency_value_bytes, **common)
            procs = {"sender": (send.pid, {}), "receiver": (recv.pid, {})}
        else:
            topic = f"latency-{transport}"
            create_topic(server, topic)
            recv = Child("lat-recv", bootstrap=server.bootstrap, topic=topic,
                         fetch_wait_ms=args.fetch_max_wait_ms, **common)
            recv.expect("ready", 60)
            send = Child("lat-send", transport=transport, bootstrap=server.bootstrap, topic=topic,
                         value_bytes=args.latency_value_bytes, **common)
            procs = None
        ready = send.expect("ready", 60)
        if procs is None:
            named = {int(k): v for k, v in ready["tids"].items()}
            procs = {"producer": (send.pid, named), "consumer": (recv.pid, {}),
                     **server.processes()}
        quiesce()
        watch = CpuWatch(procs)
        send.send("go")
        wait = total / args.rate + 120
        sent = send.expect("done", wait)
        got = recv.expect("done", wait)
        threads = watch.stop()
        send.send("close")
        send.finish()
        recv.finish()
    finally:
        for c in (recv, send):
            if c is not None and c.proc.poll() is None:
                c.proc.kill()
    if got["received"] != total:
        raise RuntimeError(f"latency {transport}: {got['received']} of {total} messages arrived")
    wall = total / args.rate
    return {"sent": sent, "stats": got["stats"], "received": got["received"],
            "cpu": {"wall_s": round(wall, 3), "threads": threads}}


def bench_latency(args, server: Server, res: Results) -> None:
    say(f"[3] latency: {args.rate:,} msg/s of {args.latency_value_bytes:,}-byte values for "
        f"{args.latency_seconds:g} s after {args.warmup_seconds:g} s of warm-up; producer "
        f"linger.ms 0, acks 1, produce() per message; consumer in another process, "
        f"fetch.min.bytes 1, fetch.max.wait.ms {args.fetch_max_wait_ms}")
    out = {}
    for transport in ("pyzmq", "zmq", "shm"):
        note(f"  [3] {transport}: {args.warmup_seconds + args.latency_seconds:g} s at "
             f"{args.rate:,} msg/s ...")
        o = out[transport] = latency_run(args, server, transport)
        s = o["stats"]
        note(f"      p50 {s['p50']:.3f} ms, p99 {s['p99']:.3f} ms, p99.9 {s['p999']:.3f} ms, "
             f"max {s['max']:.3f} ms; sent at {o['sent']['send_rate']:,.0f} msg/s, "
             f"{o['sent']['late']:,} late")
    names = {"pyzmq": "pyzmq PUSH->PULL floor", "zmq": "ZeroMQ", "shm": "shared memory"}
    for transport in ("pyzmq", "zmq", "shm"):
        o = out[transport]
        s, sent = o["stats"], o["sent"]
        floor = transport == "pyzmq"
        for name, q in PERCENTILES:
            key = f"latency_{transport}_{name}_ms"
            qtxt = {"p50": "p50", "p99": "p99", "p999": "p99.9", "max": "max"}[name]
            targeted = name == "p99" and not floor
            res.add(key, 3, f"{qtxt} latency, {names[transport]}", s[name], "ms",
                    short=f"pyzmq {qtxt}",
                    baseline_key=None if floor else f"latency_pyzmq_{name}_ms",
                    target=TARGET_P99_MS if targeted else None,
                    target_text=("< 1 ms" if targeted else ("floor" if floor else "info")),
                    meets=(s[name] < TARGET_P99_MS) if targeted else None,
                    runs=[{"stats": s, "received": o["received"]}],
                    cpu=dict(o["cpu"], title=f"latency run, {names[transport]}")
                    if name == "p50" else None,
                    note=f"{s['count']:,} messages after warm-up; receive_time - t_i "
                         f"(time.time_ns in both processes)")
        res.add(f"latency_{transport}_send_rate", 3, f"achieved send rate, {names[transport]}",
                sent["send_rate"], "msg/s", target=args.rate, target_text=f"{args.rate:,} msg/s",
                runs=[sent], note="measured messages / (last send - first measured send)")
        res.add(f"latency_{transport}_late_sends", 3,
                f"sends more than 1/rate late, {names[transport]}", sent["late"], "messages",
                target_text="info", runs=[sent],
                note=f"of {sent['measured']:,}; {sent['late_1ms']:,} more than 1 ms late; send "
                     f"lag p99 {sent['send_lag_p99_ms']:.3f} ms, max "
                     f"{sent['send_lag_max_ms']:.3f} ms")


# ---- plot ------------------------------------------------------------------------------

def plot(res: Results, path: str, args) -> bool:
    plt = report.pyplot()
    if plt is None:
        return False
    g = res.get
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(15, 6), gridspec_kw={"width_ratios": [3, 2]})

    bars = [("pyzmq\nPUSH/PULL\n(ceiling)", g("pyzmq_push_pull_records_per_s"), "#999999", None),
            ("produce_batch\nZeroMQ", g("produce_batch_zmq_records_per_s"), "#1f77b4",
             TARGET_PRODUCE_ZMQ),
            ("produce_batch\nshm", g("produce_batch_shm_records_per_s"), "#2ca02c",
             TARGET_PRODUCE_SHM),
            ("produce()\nZeroMQ", g("produce_zmq_records_per_s"), "#9ecae1", None),
            ("consume_batch\ndefault", g("consume_batch_default_records_per_s"), "#ff7f0e",
             TARGET_CONSUME),
            ("consume_batch\n16/64 MiB", g("consume_batch_large_records_per_s"), "#d62728",
             TARGET_CONSUME),
            ("consume()\nper message", g("consume_records_per_s"), "#fdae6b", None)]
    bars = [b for b in bars if b[1] is not None]
    xs = list(range(len(bars)))
    vals = [b[1] / 1e6 for b in bars]
    rects = ax1.bar(xs, vals, color=[b[2] for b in bars])
    for r, v in zip(rects, vals):
        ax1.annotate(f"{v:.2f}", (r.get_x() + r.get_width() / 2, v), ha="center", va="bottom",
                     fontsize=8)
    labelled = False
    for x, b in zip(xs, bars):
        if b[3] is not None:
            ax1.hlines(b[3] / 1e6, x - 0.45, x + 0.45, colors="red", linestyles="--",
                       label=None if labelled else "target")
            labelled = True
    if bars and bars[0][1]:
        ax1.axhline(bars[0][1] / 1e6, color="#999999", linestyle=":", linewidth=1,
                    label="pyzmq ceiling")
    ax1.set_xticks(xs)
    ax1.set_xticklabels([b[0] for b in bars], fontsize=8)
    ax1.set_ylabel("M records/s (100-byte values)")
    ax1.set_title("1-2. Produce / consume throughput vs the pyzmq ceiling")
    ax1.legend(fontsize=8, loc="upper right")
    top = max(vals + [TARGET_PRODUCE_SHM / 1e6]) if vals else 1
    ax1.set_ylim(0, top * 1.2)

    series = [("pyzmq floor", "pyzmq", "#999999"), ("ZeroMQ", "zmq", "#1f77b4"),
              ("shared memory", "shm", "#2ca02c")]
    width = 0.26
    for j, (label, t, color) in enumerate(series):
        ys = [g(f"latency_{t}_{name}_ms") for name, _ in PERCENTILES]
        if any(y is None for y in ys):
            continue
        pos = [i + (j - 1) * width for i in range(len(PERCENTILES))]
        rr = ax2.bar(pos, [max(y, 1e-3) for y in ys], width, color=color, label=label)
        for r, y in zip(rr, ys):
            ax2.annotate(f"{y:.2f}" if y < 10 else f"{y:.0f}",
                         (r.get_x() + r.get_width() / 2, max(y, 1e-3)), ha="center",
                         va="bottom", fontsize=7)
    ax2.axhline(TARGET_P99_MS, color="red", linestyle="--", linewidth=1, label="target p99 < 1 ms")
    ax2.set_yscale("log")
    lo, hi = ax2.get_ylim()
    ax2.set_ylim(lo, hi * 20)                 # room for the legend above the bars
    ax2.set_xticks(range(len(PERCENTILES)))
    ax2.set_xticklabels(["p50", "p99", "p99.9", "max"])
    ax2.set_ylabel("end-to-end latency, ms (log scale)")
    ax2.set_title(f"3. Latency at {args.rate:,} msg/s of {args.latency_value_bytes:,} B")
    ax2.legend(fontsize=8, loc="upper left", ncol=2)
    fig.suptitle("kafkalite broker benchmark (one partition, acks=1, one producer process)")
    report.save_figure(plt, fig, path)
    return True


# ---- main ------------------------------------------------------------------------------

def library_versions() -> dict:
    """Versions of the libraries the broker benchmark runs on, for machine_info."""
    import zmq
    try:
        import pyarrow
        pa_version = pyarrow.__version__
    except ImportError:
        pa_version = None
    return {"pyzmq": zmq.__version__, "libzmq": zmq.zmq_version(), "pyarrow": pa_version}


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="kafkalite broker benchmark (see benchmarks/README.md)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000,
                   help="records per run of 1a, 1b, 1d and of the consume_batch runs (2)")
    p.add_argument("--per-message-records", type=int, default=1_000_000,
                   help="records per run of per-message produce() (1c) and consume() (2)")
    p.add_argument("--repeats", type=int, default=3, help="runs per throughput figure (best kept)")
    p.add_argument("--latency-seconds", type=float, default=10.0,
                   help="measured seconds of each latency run (3)")
    p.add_argument("--warmup-seconds", type=float, default=2.0,
                   help="seconds sent before the measured part of each latency run")
    p.add_argument("--rate", type=int, default=10_000, help="messages/s of the latency runs")
    p.add_argument("--latency-value-bytes", type=int, default=1024,
                   help="value size of the latency runs (>= 16)")
    p.add_argument("--fetch-max-wait-ms", type=int, default=100,
                   help="fetch.max.wait.ms of the latency consumer")
    p.add_argument("--workers", type=int, default=2, help="partition worker processes")
    p.add_argument("--quick", action="store_true",
                   help="tiny sizes for CI smoke tests (200k records, 2 s latency at 2,000 "
                        "msg/s, 1 run)")
    p.add_argument("--work-dir", default=None,
                   help="parent of the temporary server data directory (default: the system "
                        "temp dir if it is on the repository's disk and not tmpfs, else "
                        "benchmarks/)")
    p.add_argument("--output-dir", default=None,
                   help="where results go (default benchmarks/results/broker-<timestamp>)")
    p.add_argument("--role", default=None, help=argparse.SUPPRESS)
    p.add_argument("--role-args", default="{}", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.role:
        return args
    if args.quick:
        report.apply_quick(args, argv, QUICK)
    if args.records < BATCH_VALUES or args.per_message_records < BATCH_VALUES:
        p.error(f"--records and --per-message-records must be at least {BATCH_VALUES}")
    args.records -= args.records % BATCH_VALUES
    if args.repeats < 1 or args.rate < 1 or args.latency_seconds <= 0 or args.warmup_seconds < 0:
        p.error("need --repeats >= 1, --rate >= 1, --latency-seconds > 0, --warmup-seconds >= 0")
    if args.latency_value_bytes < LAT_HEADER.size:
        p.error(f"--latency-value-bytes must be at least {LAT_HEADER.size}")
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.role:
        ROLES[args.role](json.loads(args.role_args))
        return 0

    out_dir, work = report.make_dirs("broker", args.output_dir, args.work_dir)
    info = report.machine_info(work, extra=library_versions())
    say("kafkalite broker benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    report.say_memory(info)
    say(f"  Python     {info['python']} ({info['python_implementation']}), numpy "
        f"{info['numpy']}, pyarrow {info['pyarrow']}, pyzmq {info['pyzmq']} (libzmq "
        f"{info['libzmq']}), {info['platform']}")
    report.say_load(info)
    say(f"  server     {args.workers} workers; data dir {work} ({info['work_dir_fstype']} at "
        f"{info['work_dir_mount']}, {human_bytes(shutil.disk_usage(work).free)} free)")
    say(f"  output     {out_dir}")
    report.warn_if_memory_fs(info, work, "the log lives in memory, not on a disk filesystem")
    say()

    # Disk: the kept 1a topic, the run being written, and 1c's topic at once.
    need = int((2 * args.records + args.per_message_records + 4 * BATCH_VALUES) * 112) + GiB
    free = shutil.disk_usage(work).free
    if free < need:
        fit = max(BATCH_VALUES, int((free - GiB) / 112 / 3) // BATCH_VALUES * BATCH_VALUES)
        warn(f"only {human_bytes(free)} free in {work}: --records scaled down from "
             f"{args.records:,} to {fit:,}")
        args.records = fit
        args.per_message_records = min(args.per_message_records, fit)

    res = Results(short_and_cpu=True)
    server = Server(work, args.workers)
    started = time.perf_counter()
    code = 0
    try:
        server.start()
        say(f"  server up: {server.bootstrap}, worker pids {server.worker_pids()}")
        topic = bench_produce(args, server, res)
        bench_consume(args, server, topic, res)
        bench_latency(args, server, res)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        code = 130
    except Exception:
        traceback.print_exc()
        tail = server.output()[-3000:]
        if tail:
            print(f"--- server output (last 3000 characters) ---\n{tail}", file=sys.stderr)
        code = 1
    finally:
        Child.kill_all()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    if code:
        return code
    elapsed = time.perf_counter() - started
    report.machine_info_at_end(info)

    rows = report.table_rows(res)
    cpu = cpu_lines(res)
    say()
    say(report.text_table(rows, HEADERS))
    say()
    say("CPU time per thread (best run of each throughput figure; each latency run; "
        "100% = one core):")
    for line in cpu:
        say(line)
    say()
    report.say_targets_met(res.targets_met())
    consume_ok = [res.figures[k]["label"] for k in ("consume_batch_default_records_per_s",
                                                     "consume_batch_large_records_per_s")
                  if res.figures[k]["meets_target"]]
    say("consume target (>= 5 M rec/s) met by: " + (", ".join(consume_ok) or "neither config"))
    report.say_targets_informational()

    settings = {k: v for k, v in vars(args).items() if k not in ("role", "role_args")}
    settings.update(value_bytes=VALUE_BYTES, batch_values=BATCH_VALUES, value_pool=VALUE_POOL,
                    large_fetch=LARGE_FETCH)
    doc = report.results_doc(
        "kafkalite broker", elapsed, info, settings,
        units={"records/s": "records per second", "MB/s": "10^6 bytes/s",
               "ms": "milliseconds", "msg/s": "messages per second"},
        targets={"produce_batch_zmq_records_per_s": TARGET_PRODUCE_ZMQ,
                 "produce_batch_shm_records_per_s": TARGET_PRODUCE_SHM,
                 "consume_batch_records_per_s": TARGET_CONSUME,
                 "latency_p99_ms_below": TARGET_P99_MS},
        res=res)
    report.write_json(out_dir, doc)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("# kafkalite broker benchmark\n\n")
        f.write(f"- command: `{doc['command']}`\n- date: {doc['timestamp']}\n")
        f.write(f"- CPU: {info['cpu_model']}, {info['logical_cores']} logical cores; Python "
                f"{info['python']}; pyzmq {info['pyzmq']} (libzmq {info['libzmq']}); load "
                f"average {info['load_average_at_start']} at start, "
                f"{info['load_average_at_end']} at end\n")
        f.write(f"- server: {args.workers} workers, data dir on {info['work_dir_fstype']}; one "
                f"partition, acks=1, one producer process\n")
        f.write(f"- throughput: {args.records:,} records of {VALUE_BYTES} bytes per run "
                f"({args.per_message_records:,} for per-message produce/consume), best of "
                f"{args.repeats}; consume reads from the page cache\n")
        f.write(f"- latency: {args.rate:,} msg/s of {args.latency_value_bytes:,}-byte values, "
                f"{args.latency_seconds:g} s after {args.warmup_seconds:g} s warm-up, one run "
                f"per transport\n")
        f.write("\n" + report.markdown_table(rows, HEADERS) + "\n")
        f.write("\nCPU time per thread (best run of each throughput figure; each latency run; "
                "100% = one core):\n\n")
        for line in cpu:
            f.write(f"- {line.strip()}\n")
    report.finish(out_dir, lambda png: plot(res, png, args), elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
