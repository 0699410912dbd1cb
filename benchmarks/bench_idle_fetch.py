#!/usr/bin/env python
"""A worker's CPU for a consumer's fetch of N partitions with nothing new (issue 72).

    python benchmarks/bench_idle_fetch.py [--partitions 100,1000,10000] [--requests 200] [--quick]

In one process, with no other process on the path: a real KafkaListener,
RequestDispatcher and ReplicaManager leading ``P`` partitions of one topic
(each empty, so a fetch from offset 0 is at the high watermark), and a
client socket in the same thread sending one fetch at a time and reading
its answer. The figure is the process's CPU time (``time.process_time``:
the server's decode, read and encode, both ends' socket work) per fetch,
for fetches as the clients send them:

- ``full``: a Fetch v11 naming every partition, read_uncommitted,
  ``max_wait_ms`` 0, in no session -- librdkafka's (confluent-kafka's)
  fetch, every time;
- ``full-committed``: the same, read_committed, v12 (flexible);
- ``incremental``: a fetch in an incremental fetch session (KIP-227) of
  the P partitions, naming none -- a Java client's or kafka-python's
  fetch once its session is open;
- ``long-poll``: the full fetch with ``max_wait_ms`` 1: it waits (its
  partitions watched), expires and is read and answered again.

A process holds three file descriptors a partition (a segment, its two
indexes); where P partitions would not fit this process's descriptor
limit they are split evenly over several such workers, each in a child
process leading its share, as the server's workers share a topic: the
figure is then the CPU of one fetch to each of them (each naming its
share), summed -- what one round of a consumer's fetches costs the server.

Each is measured with the worker's idle partitions answered in C (ours)
and, as the peer in the same run, with every partition read by the
replica manager's Python path (``FetchHandler.idle_in_c`` off: the code
as it stood before, but for the compiled FetchRequest decoder). The two
take turns going first over ``--rounds`` rounds; the median of each is
shown. Nothing fails on timing; the machine's load is printed with the
figures. ``--json FILE`` writes them.
"""
from __future__ import annotations

import math
import multiprocessing
import os
import resource
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import Row  # noqa: E402
from report import loadavg, say  # noqa: E402

import zmq  # noqa: E402

from kafkalite.protocol import encode_request  # noqa: E402
from kafkalite.server.config import ServerConfig  # noqa: E402
from kafkalite.server.network.kafka_listener import KafkaListener  # noqa: E402
from kafkalite.server.network.requests import RequestDispatcher  # noqa: E402
from kafkalite.server.replica.replica_manager import ReplicaManager  # noqa: E402

TOPIC = "idle"
KINDS = ("full", "full-committed", "incremental", "long-poll")
QUICK = {"partitions": "10,100", "requests": 30, "rounds": 1}
FDS_PER_PARTITION = 3        # a segment's log, offset index and time index
FDS_SPARE = 500


def partitions_per_process() -> int:
    return max(1, (resource.getrlimit(resource.RLIMIT_NOFILE)[0] - FDS_SPARE)
               // FDS_PER_PARTITION)


class InProcessWorker:
    """A replica manager leading ``partitions`` empty partitions behind a
    Kafka listener, and a client socket to it, in this thread."""

    def __init__(self, partitions: range, work_dir: str | None):
        self.dir = tempfile.mkdtemp(prefix="idle-fetch-", dir=work_dir)
        self.rm = ReplicaManager(0, self.dir, ServerConfig(data_dir=self.dir).log_config)
        results = self.rm.assign([{"topic": TOPIC, "partition": p, "topic_id": None,
                                   "leader_epoch": 1, "configs": {}} for p in partitions])
        bad = [r for r in results if r["error"]]
        assert not bad, bad[:3]
        self.partitions = partitions
        self.listener = KafkaListener("127.0.0.1", 0, RequestDispatcher("b", self.rm.handlers()))
        self.poller = zmq.Poller()
        self.listener.attach(self.poller)
        self.sock = socket.create_connection(("127.0.0.1", self.listener.port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.poller.register(self.sock.fileno(), zmq.POLLIN)
        self.rbuf = bytearray()
        self.cid = 0
        self.session = (0, -1)
        while not self.listener._by_activity:
            self.step()

    def step(self) -> None:
        """One pass of a worker's loop: it sleeps until a socket is ready
        or the purgatory's next deadline (a long poll waits without CPU)."""
        deadline = self.rm.next_deadline()
        wait = 0 if deadline is None else max(0, int((deadline - time.monotonic()) * 1000) + 1)
        events = dict(self.poller.poll(wait if self.rm.purgatory else 0))
        with self.rm.gathered_wakeups():
            self.listener.on_events(events)
            self.listener.expire()
        self.rm.expire()

    def body(self, kind: str, session_id: int = 0, epoch: int = -1, named: bool = True) -> dict:
        parts = [{"partition": p, "fetch_offset": 0, "log_start_offset": -1,
                  "partition_max_bytes": 1 << 20, "current_leader_epoch": -1,
                  "last_fetched_epoch": -1} for p in self.partitions] if named else []
        return {"replica_id": -1, "max_wait_ms": 1 if kind == "long-poll" else 0,
                "min_bytes": 1, "max_bytes": 52428800,
                "isolation_level": 1 if kind == "full-committed" else 0,
                "session_id": session_id, "session_epoch": epoch,
                "topics": [{"topic": TOPIC, "partitions": parts}] if parts else [],
                "forgotten_topics_data": [], "rack_id": ""}

    def frame(self, body: dict, version: int) -> bytes:
        self.cid += 1
        data = encode_request(1, version, self.cid, "bench", body)
        return struct.pack(">i", len(data)) + data

    def ask(self, frame: bytes) -> bytes:
        """Send one request and serve until its answer is read."""
        self.sock.sendall(frame)
        while True:
            self.step()
            try:
                while True:
                    chunk = self.sock.recv(1 << 20)
                    if not chunk:
                        raise ConnectionError("the listener closed the connection")
                    self.rbuf += chunk
            except BlockingIOError:
                pass
            if len(self.rbuf) >= 4:
                n, = struct.unpack_from(">i", self.rbuf)
                if len(self.rbuf) >= 4 + n:
                    answer = bytes(self.rbuf[4:4 + n])
                    del self.rbuf[:4 + n]
                    return answer

    def cpu_per_fetch(self, kind: str, requests: int, in_c: bool) -> float:
        """Microseconds of this process's CPU per fetch of ``kind``."""
        fetches = getattr(self.rm, "fetches", None)
        if fetches is not None:
            fetches.idle_in_c = in_c
        if kind == "incremental":
            answer = self.ask(self.frame(self.body(kind, 0, 0), 12))
            # the answer's header (correlation id, tags), throttle, error, then the session id
            session_id, = struct.unpack_from(">i", answer, 4 + 1 + 4 + 2)
            frames = [self.frame(self.body(kind, session_id, e, named=False), 12)
                      for e in range(1, requests + 1)]
        else:
            frame = self.frame(self.body(kind), 12 if kind == "full-committed" else 11)
            frames = [frame] * requests
        c0 = time.process_time()
        for frame in frames:
            self.ask(frame)
        return (time.process_time() - c0) * 1e6 / requests

    def close(self) -> None:
        self.sock.close()
        self.listener.close()
        self.rm.shutdown()
        shutil.rmtree(self.dir, ignore_errors=True)


def _shard_main(partitions: range, work_dir, conn) -> None:
    """A child process's worker: measures what the parent asks for."""
    worker = InProcessWorker(partitions, work_dir)
    conn.send("ready")
    try:
        while True:
            ask = conn.recv()
            if ask is None:
                return
            conn.send(worker.cpu_per_fetch(*ask))
    finally:
        worker.close()


class Workers:
    """P partitions on as many in-process workers as the descriptor limit
    needs: this process's alone, or child processes' shares."""

    def __init__(self, count: int, work_dir: str | None):
        shards = math.ceil(count / partitions_per_process())
        self.local = None
        self.children = []
        if shards == 1:
            self.local = InProcessWorker(range(count), work_dir)
            return
        ctx = multiprocessing.get_context("spawn")
        for i in range(shards):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_shard_main, args=(range(i, count, shards), work_dir, there))
            proc.start()
            self.children.append((proc, here))
        for _, conn in self.children:
            assert conn.recv() == "ready"

    def cpu_per_fetch(self, kind: str, requests: int, in_c: bool) -> float:
        if self.local is not None:
            return self.local.cpu_per_fetch(kind, requests, in_c)
        total = 0.0
        for _, conn in self.children:           # one after the other: no two at once
            conn.send((kind, requests, in_c))
            total += conn.recv()
        return total

    def close(self) -> None:
        if self.local is not None:
            self.local.close()
        for proc, conn in self.children:
            conn.send(None)
            proc.join(60)


def main(argv=None) -> int:
    p = common.parser(__doc__)
    common.add_quick(p, "10 and 100 partitions, 30 fetches, one round")
    common.add_rounds(p, 3)
    common.add_json(p)
    p.add_argument("--partitions", default="100,1000,10000",
                   help="comma-separated partition counts")
    p.add_argument("--requests", type=int, default=200, help="fetches a measurement")
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds of fetch")
    p.add_argument("--work-dir", default=None, help="parent of the temporary data directories")
    args = common.parse(p, argv, QUICK)
    counts = [int(n) for n in str(args.partitions).split(",")]
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        p.error(f"unknown kinds {sorted(unknown)}: choose from {', '.join(KINDS)}")
    say(f"load average at start: {loadavg()}")
    rows, figures = [], {}
    for count in counts:
        worker = Workers(count, args.work_dir)
        shards = max(1, len(worker.children))
        try:
            for kind in kinds:
                n = max(5, args.requests if count <= 1000 else args.requests // 4)
                for in_c in (True, False):      # warmed up: first calls, caches
                    worker.cpu_per_fetch(kind, 3, in_c)
                rounds = common.alternating(("C", "Python"), args.rounds,
                                            lambda side: worker.cpu_per_fetch(
                                                kind, n, side == "C"))
                ours, peer = rounds.median("C"), rounds.median("Python")
                figures[f"{kind}_{count}"] = {"c_us": ours, "python_us": peer,
                                              "c_runs": rounds.values["C"],
                                              "python_runs": rounds.values["Python"]}
                each = "" if shards == 1 else f" ({shards} workers, summed)"
                rows.append(Row(f"{kind}, {count:,} idle partitions{each}", ours, "us/fetch",
                                peer=peer, peer_name="Python path"))
        finally:
            worker.close()
    common.say_table(rows)
    say(f"load average at end: {loadavg()}")
    if args.json:
        common.write_json(args.json, {"benchmark": "idle_fetch", "figures": figures,
                                      "settings": {"partitions": counts,
                                                   "requests": args.requests,
                                                   "rounds": args.rounds}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
