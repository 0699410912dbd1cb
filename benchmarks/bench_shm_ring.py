#!/usr/bin/env python
"""Same-host produce benchmark: a producer process hands RecordBatch v2
batches to a worker process through the shared-memory ring (acks on), next to
the same bytes through a raw pyzmq PUSH/PULL pair over ipc:// and tcp://
loopback, all in one run on the same machine.

    python benchmarks/bench_shm_ring.py            # 20,000 batches per run, best of 5
    python benchmarks/bench_shm_ring.py --quick    # a few seconds

Each batch is a real RecordBatch v2 of 1,000 records with 100-byte random
values (109,997 bytes), from a pool of distinct batches cycled through.

Rows:
  ring, ack only      the worker polls each batch (copied out of the ring into
                      its own memory), acks it and releases it without reading
                      it: the hand-off itself
  ring, CRC-32C read  the worker also reads every byte (hardware CRC-32C of the
                      copy), as a log append that copies the batch would
  zmq ipc:// / tcp:// PUSH -> PULL, send(copy=False), recv(copy=False), no
                      acks and no reading: the ceiling of a socket hand-off

Time runs from the producer's first append (send) to the producer's receipt
of the last ack (ring) or the receiver's receipt of the last message (zmq;
both processes read the same CLOCK_MONOTONIC). Worker start-up is outside
it. Units: GB/s = 10^9 bytes/s of batch bytes; "records/s" = batches x 1,000
per second. A benchmark never fails on timing.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from kafkalite.record import RecordBatchBuilder  # noqa: E402
from kafkalite.shm import ProducerRing, WorkerRing  # noqa: E402
import common  # noqa: E402
from report import cpu_model  # noqa: E402

RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100
TOPIC = "bench"


def make_pool(count: int, seed: int = 1) -> list[bytes]:
    rng = random.Random(seed)
    pool = []
    builder = RecordBatchBuilder()
    for _ in range(count):
        builder.reset()
        builder.append_values([rng.randbytes(VALUE_BYTES) for _ in range(RECORDS_PER_BATCH)],
                              timestamp=1_700_000_000_000)
        pool.append(builder.build())
    return pool


def _child(*args: str) -> subprocess.Popen:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.Popen([sys.executable, __file__, "--role", *args],
                            stdout=subprocess.PIPE, text=True, env=env)


def _expect(proc: subprocess.Popen, word: str) -> dict:
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"child {proc.args[3:]} exited with {proc.wait()}")
    msg = json.loads(line)
    if msg.get("event") != word:
        raise RuntimeError(f"child said {msg}, expected {word}")
    return msg


# ---- children --------------------------------------------------------------------------

def role_ring_worker(name: str, secret: str, count: int, touch: bool) -> None:
    from kafkalite._ext.crc32c import crc32c
    ring = WorkerRing.attach(name, bytes.fromhex(secret))
    print(json.dumps({"event": "ready"}), flush=True)
    gc.disable()
    cpu0 = time.process_time()
    done = offset = 0
    crc = 0
    while done < count:
        if not ring.wait(10):
            raise SystemExit(f"worker: nothing for 10 s after {done} batches")
        entries = ring.poll(1024)
        for seq, _topic, _partition, view in entries:
            if touch:
                crc = crc32c(view, crc)
            ring.ack(seq, 0, offset)
            offset += RECORDS_PER_BATCH
        ring.release_through(entries[-1][0])
        done += len(entries)
        del entries
    cpu = time.process_time() - cpu0
    ring.close()
    print(json.dumps({"event": "done", "cpu": cpu, "crc": crc}), flush=True)


def role_zmq_pull(endpoint: str, count: int) -> None:
    import zmq
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PULL)
    sock.bind(endpoint)
    print(json.dumps({"event": "ready"}), flush=True)
    gc.disable()
    sock.recv(copy=False)                       # the warm-up message starts the clock
    cpu0 = time.process_time()
    nbytes = 0
    for _ in range(count):
        nbytes += len(sock.recv(copy=False))
    end = time.monotonic()
    cpu = time.process_time() - cpu0
    sock.close(0)
    ctx.term()
    print(json.dumps({"event": "done", "end": end, "cpu": cpu, "bytes": nbytes}), flush=True)


# ---- runs ----------------------------------------------------------------------------

def run_ring(pool: list[bytes], count: int, capacity: int, touch: bool) -> dict:
    ring = ProducerRing.create(capacity)
    worker = _child("ring-worker", ring.name, ring.attach_secret.hex(), str(count),
                    "touch" if touch else "ack")
    try:
        _expect(worker, "ready")
        n_pool = len(pool)
        acks = 0
        gc.disable()
        cpu0, t0 = time.process_time(), time.monotonic()
        for i in range(count):
            ring.append(TOPIC, 0, pool[i % n_pool], timeout=30)
            if not i & 31:
                acks += len(ring.poll_acks())
        while acks < count:
            got = ring.wait_acks(30)
            if not got:
                raise RuntimeError(f"only {acks} of {count} acks")
            acks += len(got)
        elapsed = time.monotonic() - t0
        cpu = time.process_time() - cpu0
        gc.enable()
        done = _expect(worker, "done")
        worker.wait(30)
    finally:
        gc.enable()
        if worker.poll() is None:
            worker.kill()
            worker.wait()
        ring.close()
    if touch and done["crc"] != _expected_crc(pool, count):
        raise RuntimeError("the worker read different bytes than the producer appended")
    return {"seconds": elapsed, "producer_cpu": cpu, "worker_cpu": done["cpu"]}


def _expected_crc(pool: list[bytes], count: int) -> int:
    """The CRC-32C chain the worker computes over ``count`` batches."""
    from kafkalite._ext.crc32c import crc32c
    crc = 0
    for i in range(count):
        crc = crc32c(pool[i % len(pool)], crc)
    return crc


def run_zmq(pool: list[bytes], count: int, endpoint: str) -> dict:
    import zmq
    puller = _child("zmq-pull", endpoint, str(count))
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUSH)
    try:
        _expect(puller, "ready")
        sock.connect(endpoint)
        sock.send(pool[0], copy=False)                 # connection up before the clock starts
        time.sleep(0.05)
        n_pool = len(pool)
        gc.disable()
        cpu0, t0 = time.process_time(), time.monotonic()
        for i in range(count):
            sock.send(pool[i % n_pool], copy=False)
        cpu = time.process_time() - cpu0
        gc.enable()
        done = _expect(puller, "done")
        puller.wait(30)
    finally:
        gc.enable()
        sock.close(0)
        ctx.term()
        if puller.poll() is None:
            puller.kill()
            puller.wait()
    if done["bytes"] != count * len(pool[0]):
        raise RuntimeError(f"zmq receiver got {done['bytes']} bytes")
    return {"seconds": done["end"] - t0, "producer_cpu": cpu, "worker_cpu": done["cpu"]}


def best_of(repeats: int, fn, *args) -> dict:
    runs = [fn(*args) for _ in range(repeats)]
    best = min(runs, key=lambda r: r["seconds"])
    best["all_seconds"] = [round(r["seconds"], 4) for r in runs]
    return best


def main() -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--batches", type=int, default=20000, help="batches per run")
    common.add_rounds(ap, 5, flag="--repeats", help="runs per row; the best is shown")
    ap.add_argument("--pool", type=int, default=64, help="distinct prebuilt batches")
    ap.add_argument("--capacity-mib", type=int, default=64, help="ring data region, MiB")
    common.add_quick(ap, "2,000 batches, 1 run per row")
    common.add_json(ap, help="also write the figures to this file")
    ap.add_argument("--role", nargs="+", help=argparse.SUPPRESS)
    args = common.parse(ap, quick={"batches": 2000, "repeats": 1})

    if args.role:
        role, *rest = args.role
        if role == "ring-worker":
            role_ring_worker(rest[0], rest[1], int(rest[2]), rest[3] == "touch")
        elif role == "zmq-pull":
            role_zmq_pull(rest[0], int(rest[1]))
        return 0

    pool = make_pool(args.pool)
    batch_bytes = len(pool[0])
    ipc_path = f"/tmp/kafkalite-bench-{os.getpid()}.ipc"
    rows = [
        ("ring, ack only", run_ring, (pool, args.batches, args.capacity_mib << 20, False)),
        ("ring, CRC-32C read", run_ring, (pool, args.batches, args.capacity_mib << 20, True)),
        ("zmq PUSH/PULL ipc://", run_zmq, (pool, args.batches, f"ipc://{ipc_path}")),
        ("zmq PUSH/PULL tcp://", run_zmq, (pool, args.batches, "tcp://127.0.0.1:0")),
    ]
    cpu = cpu_model() or platform.processor() or "unknown"
    print(f"kafkalite shm ring benchmark: {cpu}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}, Linux {platform.release()}")
    print(f"{args.batches:,} batches per run of {batch_bytes:,} bytes "
          f"({RECORDS_PER_BATCH} x {VALUE_BYTES}-byte records), ring {args.capacity_mib} MiB, "
          f"best of {args.repeats}\n")
    header = (f"{'variant':<22}{'GB/s':>8}{'batches/s':>12}{'records/s equiv':>18}"
              f"{'producer CPU':>14}{'worker CPU':>12}")
    print(header)
    print("-" * len(header))
    results = {}
    try:
        for label, fn, fargs in rows:
            if fn is run_zmq and fargs[2].startswith("tcp://"):
                fargs = (fargs[0], fargs[1], f"tcp://127.0.0.1:{_free_port()}")
            r = best_of(args.repeats, fn, *fargs)
            per_s = args.batches / r["seconds"]
            r.update(gb_per_s=per_s * batch_bytes / 1e9, batches_per_s=per_s,
                     records_per_s=per_s * RECORDS_PER_BATCH)
            results[label] = r
            print(f"{label:<22}{r['gb_per_s']:>8.2f}{per_s:>12,.0f}{r['records_per_s']:>18,.0f}"
                  f"{r['producer_cpu']:>13.2f}s{r['worker_cpu']:>11.2f}s", flush=True)
    finally:
        if os.path.exists(ipc_path):
            os.unlink(ipc_path)
    print("\nCPU columns: process CPU seconds of the timed section (best run). ring rows "
          "include acks; zmq rows have none.\n")
    peer = "zmq PUSH/PULL ipc://"
    common.say_table([common.Row(label, r["gb_per_s"], "GB/s", results[peer]["gb_per_s"], peer,
                                 fmt=".2f")
                      for label, r in results.items() if label != peer])
    if args.json:
        common.write_json(args.json, {"batch_bytes": batch_bytes, "batches": args.batches,
                                      "repeats": args.repeats, "results": results})
    return 0


def _free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


if __name__ == "__main__":
    sys.exit(main())
