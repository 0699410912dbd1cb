"""Child processes for the shared-memory ring tests: the other side of a
ring, in a real separate process.

usage:
  ring_child.py worker            JSON commands on stdin, one JSON reply per line
  ring_child.py serve NAME SECRET SEED  attach as worker (SECRET: the ring's attach
                                  secret, hex), drain and ack forever (until killed)
  ring_child.py produce NAME SEED create ring NAME, say its attach secret, append
                                  forever (until killed)

Batch contents are a pure function of the sequence number (``content``), and
the worker's ack values a pure function of what it received (``ack_values``),
so the parent can check every byte and every ack without trusting the child.
"""
import json
import os
import random
import select
import struct
import sys
import time
import zlib

from kafkalite.shm import ProducerRing, WorkerRing


def content(seq, size):
    """Batch bytes for ``seq``: its number repeated, so a torn or stale entry
    (bytes of another entry at the same place) cannot pass for it."""
    word = struct.pack("<Q", seq * 0x9E3779B97F4A7C15 % (1 << 64))
    return (word * (size // 8 + 1))[:size]


def ack_values(seq, topic, partition, crc, length):
    """(error_code, base_offset) a child worker acks an entry with."""
    return (crc + partition + len(topic)) % 1000, seq * 1_000_003 + length


def _reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def _drain(ring, count, rng):
    """Receive ``count`` entries, acking each and releasing after every poll."""
    got = []
    while len(got) < count:
        if not ring.wait(10):
            raise SystemExit(f"worker: no entry within 10 s after {len(got)} of {count}")
        entries = ring.poll(rng.randint(1, 64))
        for seq, topic, partition, view in entries:
            crc = zlib.crc32(view)
            err, base = ack_values(seq, topic, partition, crc, len(view))
            ring.ack(seq, err, base)
            got.append([seq, topic, partition, len(view), crc])
        ring.release_through(entries[-1][0])
    return got


def worker():
    ring = None
    rng = random.Random(1)
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "attach":
            ring = WorkerRing.attach(cmd["name"], bytes.fromhex(cmd["secret"]))
            _reply({"epoch": ring.epoch, "next": ring.next_sequence, "pid": os.getpid()})
        elif op == "drain":
            _reply({"entries": _drain(ring, cmd["count"], rng)})
        elif op == "wait":
            _reply({"waiting": True})
            cpu, t0 = time.process_time(), time.monotonic()
            ready = ring.wait(cmd["timeout"])
            t = time.monotonic()
            _reply({"ready": ready, "t": t, "wall": t - t0, "cpu": time.process_time() - cpu})
        elif op == "select":
            # the event-loop way: arm, then block on the fd
            _reply({"armed": ring.arm()})
            readable, _, _ = select.select([ring], [], [], cmd["timeout"])
            t = time.monotonic()
            _reply({"readable": bool(readable), "t": t, "entries": len(ring.poll())})
        elif op == "close":
            ring.close(unlink=cmd.get("unlink", False))
            _reply({})
        elif op == "exit":
            return


def serve(name, secret, seed):
    """A worker that polls a few entries at a time and acks them with small
    random pauses in between, so a kill lands between poll, ack and release."""
    rng = random.Random(seed)
    ring = WorkerRing.attach(name, bytes.fromhex(secret))
    print("attached", ring.epoch, ring.next_sequence, flush=True)
    while ring.producer_alive():
        if not ring.wait(1.0):
            continue
        entries = ring.poll(rng.randint(1, 8))
        for seq, topic, partition, view in entries:
            if rng.random() < 0.3:
                time.sleep(rng.random() * 0.002)
            crc = zlib.crc32(view)
            ring.ack(seq, *ack_values(seq, topic, partition, crc, len(view)))
        ring.release_through(entries[-1][0])


def produce(name, seed):
    """A producer appending large batches as fast as the worker takes them."""
    rng = random.Random(seed)
    ring = ProducerRing.create(4 << 20, name=name)
    print("created", ring.name, ring.attach_secret.hex(), flush=True)
    while True:
        seq = ring.next_sequence
        ring.append("t%d" % (seq % 5), seq % 3, content(seq, size_for(seq, rng)))
        ring.poll_acks()


def size_for(seq, rng):
    return rng.choice([1, 100, 10_000, 300_000, 1_000_000])


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "worker":
        worker()
    elif mode == "serve":
        serve(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif mode == "produce":
        produce(sys.argv[2], int(sys.argv[3]))
    else:
        raise SystemExit(f"unknown mode {mode}")
