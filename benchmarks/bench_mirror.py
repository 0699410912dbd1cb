"""Mirroring MB/s between two local kafkalite servers (``kafkalite mirror``,
MirrorMaker 2 on Connect) against the produce ceiling measured in the same
run.

    python benchmarks/bench_mirror.py             # 200,000 records of 512 B, 4 partitions
    python benchmarks/bench_mirror.py --quick     # 20,000 records (the smoke test's size)
    python benchmarks/bench_mirror.py --records 1000000 --size 1024

Two servers (2 workers each) are started. The source topic is filled with
``--records`` records (``--size``-byte values, 16-byte keys, one header)
by the native bulk path. Figures, in MB/s of values + keys:

1. ceiling: the same records produced into a topic of the TARGET server by
   one native Producer's ``produce_batch`` (10,000 per call), timed until
   ``flush()`` returned (acks=all) -- what the target takes from one client;
2. mirror: ``kafkalite mirror`` (one source task) copying the topic, timed
   from the command's start until the remote topic's log end offsets
   reach ``--records`` (so it includes the process start, the worker and
   topic creation); also ``mirror_steady`` timed from the first mirrored
   record on.

Timing never fails anything: this prints figures and writes results.json
under ``--out`` (default benchmarks/results/mirror).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

import common  # noqa: E402
from kafkalite import launcher  # noqa: E402


def records(n: int, size: int, partitions: int):
    """Per partition: (values, keys, headers) lists."""
    out = []
    for p in range(partitions):
        idx = range(p, n, partitions)
        out.append(([f"{i:012d}".encode().ljust(size, b"x") for i in idx],
                    [f"key-{i:012d}".encode() for i in idx],
                    [[("src", b"bench")] for _ in idx]))
    return out


def create(server, topic, partitions):
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        admin.create_topics([NewTopic(topic, partitions)])[topic].result()
    finally:
        admin.close()


def produce_all(server, topic, data) -> float:
    """Seconds to produce ``data`` with produce_batch and flush."""
    from kafkalite.client import Producer
    p = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 5})
    try:
        start = time.perf_counter()
        for part, (values, keys, headers) in enumerate(data):
            for i in range(0, len(values), 10_000):
                p.produce_batch(topic, values[i:i + 10_000], partition=part,
                                headers=headers[i:i + 10_000])
                p.poll(0)
        left = p.flush(300)
        took = time.perf_counter() - start
        assert left == 0, f"{left} records not acknowledged"
        return took
    finally:
        p.close(30)


def total_end(server, topic, partitions) -> int:
    from kafkalite.client import AdminClient
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        return sum(admin.list_offsets({(topic, p): -1 for p in range(partitions)}).values())
    except Exception:       # noqa: BLE001 -- not created yet
        return 0
    finally:
        admin.close()


def mirror(source, target, topic, partitions, n) -> tuple[float, float]:
    """(seconds from the command's start, seconds from the first record) to mirror n."""
    cmd = [sys.executable, "-m", "kafkalite", "mirror", "--source", source.bootstrap,
           "--target", target.bootstrap, "--topics", topic, "--source-alias", "src",
           "--interval", "1"]
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=launcher.package_env(), stdout=subprocess.DEVNULL)
    first = None
    try:
        deadline = start + 600
        while time.perf_counter() < deadline:
            got = total_end(target, f"src.{topic}", partitions)
            if got and first is None:
                first = time.perf_counter()
            if got >= n:
                end = time.perf_counter()
                return end - start, end - first
            if proc.poll() is not None:
                raise RuntimeError(f"kafkalite mirror exited with {proc.returncode}")
            time.sleep(0.05)
        raise TimeoutError(f"not mirrored in 600 s ({got} of {n})")
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--size", type=int, default=512, help="value bytes")
    ap.add_argument("--partitions", type=int, default=4)
    common.add_quick(ap, "20,000 records")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "mirror"))
    args = common.parse(ap, argv, quick={"records": 20_000})
    n = args.records
    work = tempfile.mkdtemp(prefix="bench-mirror-")
    source = launcher.ServerProcess(os.path.join(work, "a"), workers=2).start()
    target = None
    try:
        target = launcher.ServerProcess(os.path.join(work, "b"), workers=2).start()
        data = records(n, args.size, args.partitions)
        mb = sum(len(v) + len(k) for vs, ks, _ in data for v, k in zip(vs, ks)) / 1e6
        create(source, "bench", args.partitions)
        produce_all(source, "bench", data)
        create(target, "ceiling", args.partitions)
        took = produce_all(target, "ceiling", data)
        figures = {"produce_ceiling_mb_per_s": mb / took}
        total, steady = mirror(source, target, "bench", args.partitions, n)
        figures["mirror_mb_per_s"] = mb / total
        figures["mirror_steady_mb_per_s"] = mb / steady if steady > 0 else 0.0
        ceiling = "produce_batch into the target"
        common.say(f"{n:,} records ({mb:.1f} MB); the mirror from its start took {total:.2f} s, "
                   f"from the first record {steady:.2f} s; the ceiling {took:.2f} s")
        common.say_table([
            common.Row("kafkalite mirror, from its start", figures["mirror_mb_per_s"], "MB/s",
                       figures["produce_ceiling_mb_per_s"], ceiling, fmt=".1f"),
            common.Row("kafkalite mirror, from the first record",
                       figures["mirror_steady_mb_per_s"], "MB/s",
                       figures["produce_ceiling_mb_per_s"], ceiling, fmt=".1f")])
        os.makedirs(args.out, exist_ok=True)
        common.write_json(os.path.join(args.out, "results.json"), {
            "records": n, "value.size": args.size, "partitions": args.partitions,
            "figures": figures})
    finally:
        for s in (source, target):
            if s is not None:
                s.stop()
                s.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
