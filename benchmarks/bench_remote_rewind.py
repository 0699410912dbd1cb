#!/usr/bin/env python
"""A consumer's rewind to offset 0 of a tiered topic: the time to its first
record, read_committed and read_uncommitted, with a fixed latency added to
every request the S3 store is sent (issue 71, item 3).

    python benchmarks/bench_remote_rewind.py                   # 300 segments, 20 ms, 3 runs
    python benchmarks/bench_remote_rewind.py --before DIR      # also DIR's kafkalite
    python benchmarks/bench_remote_rewind.py --quick           # 30 segments, 1 run

The store is moto's S3 server on a thread of this process behind a TCP
relay that holds each request --latency-ms before passing it on (an
object store farther away than memory; each connection is held on its
own, as requests in flight at once are). A one-worker server tiers a
topic of --segments segments of --segment-bytes with no transaction
(offloaded while the relay adds nothing); then each run restarts the
server (the remote read cache is emptied at open: each rewind finds
nothing cached), and a confluent-kafka consumer assigned offset 0 polls
until its first record: the seconds from the assign to it, and how many
requests for a transaction index the store was sent meanwhile. The
read_committed and read_uncommitted rewinds take turns going first; the
trees too with --before (a checkout of the code before the change, e.g.
``git archive <commit> | tar -x -C DIR`` with the built extensions
copied in). Every run is printed with the load average; a benchmark never
fails on timing.
"""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
for path in (REPO, REPO / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

import common  # noqa: E402
from report import say  # noqa: E402

from harness import TcpRelay  # noqa: E402
from kafkalite.launcher import ServerProcess  # noqa: E402

QUICK = dict(segments=30, runs=1)
_METHODS = (b"GET ", b"PUT ", b"HEAD ", b"POST ", b"DELETE ")


def load() -> str:
    return "%.2f %.2f %.2f" % os.getloadavg()


class LatencyRelay(TcpRelay):
    """A relay to S3 that holds each request ``latency`` seconds."""

    def __init__(self, upstream):
        self.latency = 0.0
        super().__init__(upstream)

    def forward(self, source, data: bytes, requests: bool) -> bool:
        if requests and self.latency and data.startswith(_METHODS):
            time.sleep(self.latency)
        return True


def tiered_server(tree: str, data_dir: str, config: str) -> ServerProcess:
    # another tree's kafkalite: its own package first on the path, and its
    # directory the processes' working one (``python -m`` looks there first)
    program = None if tree == str(REPO) else [
        "env", f"PYTHONPATH={tree}", sys.executable, "-m", "kafkalite"]
    os.chdir(tree)
    return ServerProcess(data_dir, workers=1, extra_args=["--config", config],
                         program=program).start(timeout=120)


def offload(server, topic: str, args) -> int:
    """The topic, all but its newest segments remote; its local start."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient, NewTopic
    from bench_tiered import list_offsets
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    admin.create_topics([NewTopic(
        topic, 1, 1, config={"remote.storage.enable": "true", "local.retention.bytes": "1",
                             "segment.bytes": str(args.segment_bytes)})])[topic].result(30)
    producer = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 5,
                            "batch.size": 4096})     # a batch fits a segment
    value = b"v" * 100
    records = (args.segments + 1) * args.segment_bytes // 150
    failed: list = []
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=0,
                                 on_delivery=lambda err, _: err and failed.append(err))
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120) or failed:
        raise RuntimeError(f"the producer could not deliver every record: {failed[:1]}")
    deadline = time.monotonic() + 600
    while True:
        local, tiered = list_offsets(server, topic, -4, -5)
        if local > 0 and tiered == local - 1 and local >= records * args.segments // (
                args.segments + 2):
            return local
        if time.monotonic() > deadline:
            raise RuntimeError(f"not offloaded: local start {local}, latest tiered {tiered}; "
                               f"the server's log ends: {server.output()[-3000:]}")
        time.sleep(0.5)


def first_record(server, topic: str, isolation: str) -> float:
    import confluent_kafka as ck
    consumer = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap,
                            "group.id": "bench-rewind", "enable.auto.commit": False,
                            "isolation.level": isolation})
    try:
        consumer.list_topics(topic, timeout=30)     # connected before the clock starts
        t0 = time.perf_counter()
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 600
        while True:
            m = consumer.poll(1)
            if m is not None and m.error() is None:
                return time.perf_counter() - t0
            if time.monotonic() > deadline:
                raise RuntimeError(f"no record in 600 s ({isolation})")
    finally:
        consumer.close()


def bench_tree(name: str, tree: str, work: str, s3, relay, args) -> dict:
    data_dir = os.path.join(work, name.replace(" ", "-"))
    topic = "rewind-" + name.replace(" ", "-")     # the trees share the bucket
    config = os.path.join(work, "tiered.toml")
    relay.latency = 0.0
    server = tiered_server(tree, data_dir, config)
    try:
        local = offload(server, topic, args)
    finally:
        server.stop()
    say(f"{name}: {args.segments} segments offloaded (local start {local}); load {load()}")
    asked: list = []
    s3.on_request = lambda method, path: (
        asked.append(path) if path.endswith("/transaction.index") else None)
    out: dict = {"read_committed": [], "read_uncommitted": [], "txn_index_requests": []}
    try:
        for run in range(args.runs):
            order = ["read_committed", "read_uncommitted"][::1 if run % 2 == 0 else -1]
            for isolation in order:
                server = tiered_server(tree, data_dir, config)
                relay.latency = args.latency_ms / 1000
                try:
                    del asked[:]
                    seconds = first_record(server, topic, isolation)
                    if isolation == "read_committed":
                        out["txn_index_requests"].append(len(asked))
                finally:
                    relay.latency = 0.0
                    server.stop()
                out[isolation].append(seconds)
                say(f"  {name} run {run + 1} {isolation}: first record after {seconds:.2f} s"
                    + (f", {len(asked)} transaction index requests"
                       if isolation == "read_committed" else "") + f"; load {load()}")
    finally:
        s3.on_request = None
    for isolation in ("read_committed", "read_uncommitted"):
        values = out[isolation]
        say(f"{name} {isolation}: {min(values):.2f}-{max(values):.2f} s "
            f"(median {statistics.median(values):.2f})")
    return out


def main(argv=None) -> int:
    parser = common.parser(__doc__)
    parser.add_argument("--segments", type=int, default=300)
    parser.add_argument("--segment-bytes", type=int, default=16384)
    parser.add_argument("--latency-ms", type=float, default=20.0)
    common.add_rounds(parser, 3, flag="--runs")
    common.add_quick(parser, "30 segments, one run")
    parser.add_argument("--before", metavar="DIR", help="also run another tree's kafkalite")
    parser.add_argument("--work-dir", default=None)
    common.add_json(parser, "--output", help="write the figures as JSON here")
    args = common.parse(parser, argv, quick=QUICK)
    trees = {"this tree": str(REPO), **({"before": os.path.abspath(args.before)}
                                        if args.before else {})}
    say(f"bench_remote_rewind: {args.segments} segments of {args.segment_bytes} bytes, "
        f"{args.latency_ms:g} ms a store request, {args.runs} runs; load average {load()} "
        f"({os.cpu_count()} CPUs)")
    from moto_s3 import moto_s3_server
    logging.getLogger("werkzeug").setLevel(logging.WARNING)     # moto's request log
    work = os.path.abspath(tempfile.mkdtemp(prefix="kafkalite-bench-rewind-",
                                            dir=args.work_dir))
    results = {}
    try:
        with contextlib.ExitStack() as stack:
            s3 = stack.enter_context(moto_s3_server("rewind"))
            relay = LatencyRelay(("127.0.0.1", s3.port))
            stack.callback(relay.close)
            with open(os.path.join(work, "tiered.toml"), "w") as f:
                f.write('"remote.log.storage.system.enable" = true\n'
                        'remote_log_storage_s3_bucket = "rewind"\n'
                        f'remote_log_storage_s3_endpoint = "http://127.0.0.1:{relay.port}"\n')
            for name, tree in trees.items():
                results[name] = bench_tree(name, tree, work, s3, relay, args)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if args.output:
        common.write_json(args.output, {"settings": vars(args), "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
