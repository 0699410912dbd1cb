#!/usr/bin/env python
"""Many partitions on one server: what they cost when nothing happens.

    python benchmarks/bench_many_partitions.py [--topics 500] [--workers 2] [--quick]

One server (``--workers`` partition workers) gets ``--topics`` topics of
``--partitions`` partitions each, created ``--topics-per-request`` at a time
through CreateTopics. Then, on that server:

1. topic creation: seconds per 1,000 partitions, for the whole run and for
   each quarter of it (a later quarter slower than the first means creation
   grows faster than linearly);
2. idle CPU: user + system CPU of the supervisor and its workers over
   ``--idle-seconds`` with no client connected, from /proc/<pid>/stat, as %
   of one core; also their write system calls in that time (/proc/<pid>/io);
3. produce latency: one 100-byte record at a time, acks=all, to one topic,
   p50/p99/max over ``--latency-seconds`` (long enough to cover several
   checkpoint intervals); the same on a fresh server with one 4-partition
   topic, in the same run, as the baseline;
4. SIGTERM: seconds from SIGTERM to the supervisor's exit, its exit code,
   and whether any worker had to be killed;
5. restart: seconds from start to ready (server.json) on the same data
   directory.

Prints a table and writes results.json and results.md to ``--output-dir``
(default benchmarks/results/many-partitions-<timestamp>). Nothing here fails
on timing. The targets shown are issue 12's: 10,000 partitions with idle CPU
under 5 %, produce p99 as on a 4-partition server, clean SIGTERM, restart in
seconds.
"""
from __future__ import annotations

import os
import shutil
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import report  # noqa: E402
from report import Results, machine_info, markdown_table, say, text_table  # noqa: E402

from kafkalite.client import AdminClient, NewTopic, Producer  # noqa: E402
from kafkalite.launcher import ServerProcess, pid_alive  # noqa: E402

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
LATENCY_TOPIC = "latency"
QUICK = {"topics": 25, "idle_seconds": 2.0, "latency_seconds": 2.0}


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (fields 14 and 15 of /proc/<pid>/stat)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def write_calls(pid: int) -> int:
    """Write-like system calls of ``pid`` so far (syscw of /proc/<pid>/io)."""
    try:
        with open(f"/proc/{pid}/io") as f:
            return int(next(line for line in f if line.startswith("syscw:")).split()[1])
    except (OSError, StopIteration):
        return 0


def server_pids(srv: ServerProcess) -> list[int]:
    return [srv.proc.pid] + srv.worker_pids()


def idle_cost(srv: ServerProcess, seconds: float) -> tuple[float, int]:
    """(% of one core, write syscalls) of the server's processes over ``seconds``."""
    pids = server_pids(srv)
    cpu0 = sum(cpu_seconds(p) for p in pids)
    w0 = sum(write_calls(p) for p in pids)
    t0 = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - t0
    cpu1 = sum(cpu_seconds(p) for p in pids)
    w1 = sum(write_calls(p) for p in pids)
    return 100.0 * (cpu1 - cpu0) / elapsed, w1 - w0


def create_topics(srv: ServerProcess, names: list[str], partitions: int, per_request: int,
                  progress: bool = True) -> list[float]:
    """Create ``names``; returns the seconds each request took."""
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    took = []
    try:
        for i in range(0, len(names), per_request):
            chunk = names[i:i + per_request]
            t0 = time.perf_counter()
            futures = admin.create_topics([NewTopic(n, partitions) for n in chunk],
                                          operation_timeout=300)
            for name, f in futures.items():
                f.result()
            took.append(time.perf_counter() - t0)
            if progress and len(took) % max(1, len(names) // per_request // 10) == 0:
                print(f"  created {i + len(chunk):,} topics in {sum(took):.1f} s",
                      file=sys.stderr, flush=True)
    finally:
        admin.close()
    return took


def produce_latencies(srv: ServerProcess, topic: str, seconds: float) -> list[float]:
    """Milliseconds from produce() to delivery of single records, acks=all."""
    p = Producer({"bootstrap.servers": srv.bootstrap, "acks": "all", "linger.ms": 0})
    out: list[float] = []
    try:
        value = b"x" * 100
        p.produce(topic, value, partition=0)       # connect and learn the leader first
        p.flush(30)
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            t0 = time.perf_counter()
            p.produce(topic, value, partition=0)
            if p.flush(30) != 0:
                raise RuntimeError("a record was not delivered in 30 s")
            out.append((time.perf_counter() - t0) * 1000)
    finally:
        p.close()
    return out


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100.0 * (len(s) - 1))))]


def stop_timed(srv: ServerProcess) -> tuple[float, int | None, int]:
    """(seconds to exit after SIGTERM, exit code, workers that had to be killed)."""
    pids = srv.worker_pids()
    t0 = time.perf_counter()
    srv.proc.send_signal(signal.SIGTERM)
    try:
        code = srv.proc.wait(120)
    except Exception:
        code = None
    took = time.perf_counter() - t0
    deadline = time.monotonic() + 5
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    srv.stop()                                   # reaps, kills survivors, closes the log
    killed = len(srv.survivors) + srv.output().count("did not stop in time")
    return took, code, killed


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--topics", type=int, default=500, help="topics to create (default 500)")
    ap.add_argument("--partitions", type=int, default=4, help="partitions per topic")
    ap.add_argument("--topics-per-request", type=int, default=10)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--idle-seconds", type=float, default=10.0)
    ap.add_argument("--latency-seconds", type=float, default=12.0,
                    help="produce for this long on each server (covers checkpoint intervals)")
    common.add_quick(ap, "25 topics, 2 s idle, 2 s of produce (a smoke run)")
    ap.add_argument("--work-dir", help="where the temporary data directories go")
    ap.add_argument("--output-dir", help="where results go")
    args = common.parse(ap, argv, quick=QUICK)
    out_dir, work = report.make_dirs("many-partitions", args.output_dir, args.work_dir)
    info = machine_info(work)
    started = time.perf_counter()
    total = args.topics * args.partitions
    say(f"many partitions: {args.topics:,} topics x {args.partitions} = {total:,} partitions, "
        f"{args.workers} workers, data in {work} ({info['work_dir_fstype']})")
    res = Results()
    big = small = None
    try:
        # baseline: a server with one 4-partition topic
        small = ServerProcess(os.path.join(work, "small"), workers=args.workers).start()
        create_topics(small, [LATENCY_TOPIC], 4, 1, progress=False)
        base_lat = produce_latencies(small, LATENCY_TOPIC, args.latency_seconds)
        base_cpu, base_writes = idle_cost(small, args.idle_seconds)
        small.stop()
        small = None

        big = ServerProcess(os.path.join(work, "big"), workers=args.workers).start()
        names = [f"topic-{i:05d}" for i in range(args.topics)]
        took = create_topics(big, names, args.partitions, args.topics_per_request)
        create_topics(big, [LATENCY_TOPIC], 4, 1, progress=False)
        per_k = 1000.0 * sum(took) / total
        res.add("create_s_per_1000_partitions", 1, "topic creation, s per 1,000 partitions",
                round(per_k, 3), "s")
        quarter = max(1, len(took) // 4)
        for q in range(4):
            part = took[q * quarter:(q + 1) * quarter] if q < 3 else took[3 * quarter:]
            n = len(part) * args.topics_per_request * args.partitions
            if part:
                res.add(f"create_s_per_1000_partitions_q{q + 1}", 1,
                        f"  quarter {q + 1} of the creation", round(1000.0 * sum(part) / n, 3),
                        "s", baseline_key="create_s_per_1000_partitions_q1" if q else None)
        time.sleep(1.0)                          # let creation's own work settle
        cpu, writes = idle_cost(big, args.idle_seconds)
        res.add("idle_cpu_pct_base", 2, "idle CPU, 4-partition server", round(base_cpu, 2), "%")
        res.add("idle_cpu_pct", 2, f"idle CPU, {total:,} partitions", round(cpu, 2), "%",
                baseline_key="idle_cpu_pct_base", target=5.0, target_text="< 5 %",
                meets=cpu < 5.0)
        res.add("idle_write_syscalls_base", 2, "idle write syscalls, 4-partition server",
                base_writes, "calls")
        res.add("idle_write_syscalls", 2, f"idle write syscalls, {total:,} partitions", writes,
                "calls", baseline_key="idle_write_syscalls_base")
        lat = produce_latencies(big, LATENCY_TOPIC, args.latency_seconds)
        for name, q in (("p50", 50), ("p99", 99), ("max", 100)):
            res.add(f"produce_{name}_ms_base", 3, f"produce {name}, 4-partition server",
                    round(percentile(base_lat, q), 3), "ms")
            ok = None
            if name == "p99":
                ok = percentile(lat, q) <= 2 * percentile(base_lat, q) + 1.0
            res.add(f"produce_{name}_ms", 3, f"produce {name}, {total:,} partitions",
                    round(percentile(lat, q), 3), "ms", baseline_key=f"produce_{name}_ms_base",
                    target_text="as the 4-partition server" if name == "p99" else "", meets=ok)
        stop_s, code, killed = stop_timed(big)
        res.add("sigterm_s", 4, "SIGTERM to exit", round(stop_s, 3), "s",
                target_text="exit 0, no worker killed", meets=(code == 0 and killed == 0),
                note=f"exit code {code}, {killed} worker(s) killed")
        res.add("sigterm_exit_code", 4, "  exit code", code, "")
        res.add("sigterm_workers_killed", 4, "  workers killed", killed, "")
        t0 = time.perf_counter()
        big.start(timeout=600)
        res.add("restart_s", 5, "restart to ready", round(time.perf_counter() - t0, 3), "s",
                target_text="seconds")
        stop_s2, code2, killed2 = stop_timed(big)
        res.add("second_sigterm_s", 5, "SIGTERM after the restart", round(stop_s2, 3), "s",
                note=f"exit code {code2}, {killed2} worker(s) killed")
        big = None
    finally:
        for srv in (small, big):
            if srv is not None:
                srv.stop()
                srv.kill()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    report.machine_info_at_end(info)
    headers = ["test", "figure", "value", "baseline", "ratio", "target", "met"]
    rows = report.table_rows(res)
    say(text_table(rows, headers))
    settings = {k: v for k, v in vars(args).items() if k not in ("output_dir", "work_dir")}
    settings["total_partitions"] = total
    targets = {"idle_cpu_pct": "< 5 % of one core", "produce_p99_ms":
               "at most 2x + 1 ms of the 4-partition server's",
               "sigterm_s": "exit 0 with no worker killed"}
    report.write_json(out_dir, report.results_doc("many-partitions", elapsed, info, settings,
                                                  {"s": "seconds", "%": "of one core",
                                                   "ms": "milliseconds"}, targets, res))
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(markdown_table(rows, headers) + "\n")
    report.say_targets_informational()
    say(f"results: {os.path.join(out_dir, 'results.json')}")
    say(f"elapsed: {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
