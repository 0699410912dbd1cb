#!/usr/bin/env python
"""Server CPU per message and end-to-end p99 against the partition count (issue 72).

    python benchmarks/bench_partition_curve.py [--partitions 1,10,100,1000,10000]
        [--rate 20000] [--duration 30] [--warmup 10] [--rounds 1] [--before DIR] [--quick]

One topic of P partitions, 1 KB messages at ``--rate`` msg/s over all of
them (one producer, one consumer), through kafkalite's Kafka listener
with confluent-kafka's default clients (``kafkalite bench``'s
``kafkalite-kafka`` driver: librdkafka's linger.ms 5, fetch.wait.max.ms
500; librdkafka fetches every assigned partition in full each time, no
fetch sessions). For each P the script writes an OMB-style workload
(``partition-curve-<P>p.yaml`` in the output directory), runs it with
``kafkalite bench`` and takes from its results.json the server's CPU per
message (the whole server's user + system time over the measured
seconds, the result's ``cpu.server_us_per_msg``; kafkalite/bench/cpu.py),
the end-to-end p99 and the consume rate (the warm-up is ``--warmup``, at
least 8 s per 1,000 partitions). With ``--before DIR`` each P
also runs on the kafkalite of another tree (its ``kafkalite bench``, the
same workload file), the two taking turns going first.

Writes results.json, results.md and partition-curve.png (both figures
against P, log scale) to ``--output-dir`` (default
benchmarks/results/partition-curve-<time>). The machine's load is in
every result; timing never fails the run.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from report import loadavg, make_dirs, say  # noqa: E402

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DRIVER = "kafkalite-kafka"
QUICK = {"partitions": "1,10", "duration": 5.0, "warmup": 2.0}
WARMUP_S_PER_PARTITION = 0.008

WORKLOAD = """\
# Written by benchmarks/bench_partition_curve.py: {partitions} partition(s),
# 1 KB at {rate} msg/s over all of them, confluent-kafka's defaults.
name: partition curve, {partitions} partitions, 1 KB at {rate} msg/s
topics: 1
partitionsPerTopic: {partitions}
messageSize: 1024
keyDistributor: NO_KEY
producersPerTopic: 1
subscriptionsPerTopic: 1
consumerPerSubscription: 1
producerRate: {rate}
warmupDurationSeconds: {warmup}
testDurationSeconds: {duration}
drivers: [{driver}]
"""


def warmup_s(partitions: int, args) -> float:
    """``--warmup``, and longer for many partitions: librdkafka's first
    message to 10,000 partitions went out ~25 s after the start here at
    load 7 (the topic's creation, every partition's leader learned), later
    under more load, and a run whose warm-up ended before then measured
    nothing."""
    return max(args.warmup, partitions * WARMUP_S_PER_PARTITION)


def write_workload(out_dir: str, partitions: int, args) -> str:
    path = os.path.join(out_dir, f"partition-curve-{partitions}p.yaml")
    with open(path, "w") as f:
        f.write(WORKLOAD.format(partitions=partitions, rate=args.rate,
                                warmup=warmup_s(partitions, args), duration=args.duration,
                                driver=DRIVER))
    return path


def run(tree: str, workload: str, out_dir: str, work_dir: str | None) -> dict:
    """One ``kafkalite bench`` run of ``workload`` on ``tree``'s kafkalite:
    the driver's result (its figures, ``cpu``, ``machine``)."""
    env = dict(os.environ, PYTHONPATH=tree)
    cmd = [sys.executable, "-m", "kafkalite", "bench", workload, "--drivers", DRIVER,
           "--out", out_dir, "--no-progress"]
    if work_dir:
        cmd += ["--work-dir", work_dir]
    started = time.monotonic()
    done = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"kafkalite bench failed on {tree}:\n{done.stdout[-3000:]}"
                           f"{done.stderr[-3000:]}")
    with open(os.path.join(out_dir, "results.json")) as f:
        results = json.load(f)
    result = results["workloads"][0]["results"][0]
    result["wall_s"] = time.monotonic() - started
    return result


def figures(result: dict) -> dict:
    cpu = result.get("cpu") or {}
    e2e = result.get("e2e_latency_ms") or {}
    if not result.get("consume_rate"):
        # nothing got through in the measured seconds: no figure, not a huge one
        cpu = {k: None for k in cpu}
    return {"server_us_per_msg": cpu.get("server_us_per_msg"),
            "server_cores": cpu.get("server_cores"),
            "server_us_per_request": cpu.get("server_us_per_request"),
            "e2e_p50_ms": e2e.get("p50"), "e2e_p99_ms": e2e.get("p99"),
            "consume_rate": result.get("consume_rate"),
            "publish_rate": result.get("publish_rate"), "status": result.get("status")}


def plot(path: str, curves: dict, rate: int) -> None:
    """Both figures against P; a point where nothing got through in the
    measured seconds is marked at the bottom instead."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (cpu_ax, p99_ax) = plt.subplots(1, 2, figsize=(11, 4.2))
    counts = sorted({int(x) for points in curves.values() for x in points})
    for name, points in curves.items():
        points = {int(x): f for x, f in points.items()}
        xs = [x for x in sorted(points) if points[x]["server_us_per_msg"] is not None]
        line, = cpu_ax.plot(xs, [points[x]["server_us_per_msg"] for x in xs], marker="o",
                            label=name)
        p99_ax.plot(xs, [points[x]["e2e_p99_ms"] for x in xs], marker="o", label=name,
                    color=line.get_color())
        for x in sorted(points):
            if points[x]["server_us_per_msg"] is None:
                for ax in (cpu_ax, p99_ax):
                    ax.annotate(f"{name}: nothing\nconsumed in time", (x, 0), xycoords=(
                        "data", "axes fraction"), xytext=(0, 8), textcoords="offset points",
                        ha="center", fontsize=8, color=line.get_color())
                    ax.plot([x], [0], marker="x", color=line.get_color(),
                            transform=ax.get_xaxis_transform(), clip_on=False)
    cpu_ax.set_ylim(bottom=0)
    cpu_ax.set(xscale="log", xlabel="partitions", ylabel="server CPU, µs per message",
               title=f"server CPU per message, 1 KB at {rate:,} msg/s")
    p99_ax.set(xscale="log", yscale="log", xlabel="partitions", ylabel="end-to-end p99, ms",
               title="end-to-end p99 (confluent-kafka defaults)")
    for ax in (cpu_ax, p99_ax):
        ax.set_xticks(counts, [f"{c:,}" for c in counts])
        ax.minorticks_off()
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(curves: dict, counts: list[int]) -> str:
    lines = ["| tree | partitions | server µs/msg | server cores | e2e p50 / p99 ms | "
             "consume msg/s | load (1 min) at start |", "|---|---|---|---|---|---|---|"]
    for name, points in curves.items():
        for p in counts:
            f = points.get(p)
            if f is None:
                continue

            def num(v, fmt):
                return "n/a" if v is None else format(v, fmt)
            lines.append(f"| {name} | {p:,} | {num(f['server_us_per_msg'], '.1f')} | "
                         f"{num(f['server_cores'], '.2f')} | {num(f['e2e_p50_ms'], '.1f')} / "
                         f"{num(f['e2e_p99_ms'], '.1f')} | {num(f['consume_rate'], ',.0f')} | "
                         f"{f['load_at_start']} |")
    return "\n".join(lines)


def measure(args, counts: list[int], trees: dict, out_dir: str, work_dir: str) -> tuple:
    """Each point on each tree, the trees taking turns: (curves, runs)."""
    curves: dict = {name: {} for name in trees}
    runs: dict = {name: {} for name in trees}
    for count in counts:
        workload = write_workload(out_dir, count, args)
        rounds = common.alternating(list(trees), args.rounds, lambda name: run(
            trees[name], workload, os.path.join(out_dir, f"{count}p-{name.replace(' ', '-')}"
                                                f"-{time.monotonic_ns()}"), work_dir))
        for name in trees:
            results = [figures(r) for r in rounds.values[name]]
            runs[name][count] = results
            point = {}
            for key in results[0]:
                values = [r[key] for r in results if isinstance(r[key], (int, float))]
                point[key] = sorted(values)[len(values) // 2] if values else results[0][key]
            point["load_at_start"] = ", ".join(f"{la[0]:.1f}" for la in rounds.loads if la)
            curves[name][count] = point
            say(f"{name}, {count} partitions: " + ", ".join(
                f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                for k, v in point.items()))
    return curves, runs


def main(argv=None) -> int:
    p = common.parser(__doc__)
    common.add_quick(p, "1 and 10 partitions, 2 s warm-up, 5 s measured")
    common.add_dirs(p)
    p.add_argument("--partitions", default="1,10,100,1000,10000",
                   help="comma-separated partition counts")
    p.add_argument("--rate", type=int, default=20_000, help="messages/s over all partitions")
    p.add_argument("--duration", type=float, default=30.0, help="measured seconds a run")
    p.add_argument("--warmup", type=float, default=10.0, help="warm-up seconds a run")
    p.add_argument("--rounds", type=int, default=1, help="runs of each point (medians kept)")
    p.add_argument("--before", metavar="DIR", help="also run another tree's kafkalite")
    p.add_argument("--replot", metavar="DIR", help="only draw DIR/results.json's curves again")
    args = common.parse(p, argv, QUICK)
    if args.replot:
        with open(os.path.join(args.replot, "results.json")) as f:
            done = json.load(f)
        plot(os.path.join(args.replot, "partition-curve.png"), done["curves"],
             done["settings"]["rate"])
        return 0
    counts = [int(n) for n in str(args.partitions).split(",")]
    out_dir, work_dir = make_dirs("partition-curve", args.output_dir, args.work_dir)
    trees = {"this tree": HERE, **({"before": os.path.abspath(args.before)} if args.before else {})}
    try:
        curves, runs = measure(args, counts, trees, out_dir, work_dir)
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    md = table(curves, counts)
    say(md)
    plot(os.path.join(out_dir, "partition-curve.png"), curves, args.rate)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(f"# Partition curve, 1 KB at {args.rate:,} msg/s, {DRIVER}\n\n{md}\n")
    common.write_json(os.path.join(out_dir, "results.json"), {
        "benchmark": "partition_curve", "driver": DRIVER, "trees": trees, "curves": curves,
        "runs": runs, "settings": {"partitions": counts, "rate": args.rate,
                                   "duration_s": args.duration, "warmup_s": args.warmup,
                                   "rounds": args.rounds}})
    say(f"wrote {out_dir}; load average at end: {loadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
