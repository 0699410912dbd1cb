#!/usr/bin/env python
"""The time each CPU is taken from a process that wants all of it: the floor under every latency.

    python benchmarks/bench_vcpu_stalls.py [--seconds 5] [--min-ms 1] [--json FILE]

One process pinned to each CPU reads the clock in a loop for ``--seconds``
and records every gap between two reads longer than ``--min-ms``: a time
when that CPU did not run it. On an otherwise idle machine a gap is the
kernel, a VM's host taking the virtual CPU away, or the machine's own
background processes. Beside the gaps: the CPU time the guest's own
accounting (/proc/stat) gave to steal, interrupts and other work over the
same seconds, and the processes that used the most, which says which.

On the 2-core development VM (2026-11-29) one CPU lost 5-9.7 ms about once a
second and the other 1-1.5 ms every 0.51 s, while /proc/stat counted 0-30 ms
of steal in 5 s: the VM's own agent (pid 1) and DAMON's kernel thread ran.
Every driver's latency figures carry them, the ceilings' too (raw pyzmq's
p99 of each 0.1 s jumps from 0.3 to 3.5-7.1 ms once a second, in
`kafkalite bench`'s latency over time). Run it before a
benchmark on a quiet machine: it takes every CPU for ``--seconds``.
Nothing here fails on timing.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import sys
import time

STAT_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def spin(cpu: int | None, seconds: float, min_gap_s: float, out, ready=None, go=None) -> None:
    """Read the clock for ``seconds`` on ``cpu`` (None: where it runs);
    put [(seconds from the start, gap in ms)] of the gaps over ``min_gap_s``.
    With ``ready``/``go`` (a semaphore and an event): say it is ready, and
    start when every spinner is (none is started while another one's
    interpreter starts on its CPU)."""
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    if ready is not None:
        ready.release()
        go.wait()
    clock = time.perf_counter
    cpu0 = time.process_time()
    start = last = clock()
    end = start + seconds
    gaps = []
    while last < end:
        now = clock()
        if now - last > min_gap_s:
            gaps.append((round(last - start, 4), round((now - last) * 1e3, 3)))
        last = now
    out.put((cpu, (gaps, time.process_time() - cpu0)))


def cpu_ticks() -> dict:
    """/proc/stat's whole-machine CPU time, in clock ticks, by field."""
    with open("/proc/stat") as f:
        values = f.readline().split()[1:1 + len(STAT_FIELDS)]
    return dict(zip(STAT_FIELDS, map(int, values)))


def process_ticks() -> dict:
    """{pid: (name, user + system clock ticks)} of every process now."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(pid)] = (name, int(fields[11]) + int(fields[12]))
    return out


def probe(seconds: float, min_ms: float) -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    ctx = multiprocessing.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Semaphore(0), ctx.Event()
    children = [ctx.Process(target=spin, args=(cpu, seconds, min_ms / 1e3, out, ready, go))
                for cpu in cpus]
    for c in children:
        c.start()
    for _ in children:
        if not ready.acquire(timeout=60):
            raise SystemExit("a spinner did not start in 60 s")
    time.sleep(0.2)         # their interpreters' start-up done, the parent's too
    before, processes = cpu_ticks(), process_ticks()
    go.set()
    got = dict(out.get(timeout=seconds + 60) for _ in children)
    after, processes_after = cpu_ticks(), process_ticks()
    for c in children:
        c.join()
    hz = os.sysconf("SC_CLK_TCK")
    accounted = {k: (after[k] - before[k]) / hz for k in ("steal", "irq", "softirq")}
    per_cpu = {cpu: {"gaps": got[cpu][0], "stalled_ms": round(sum(ms for _, ms in got[cpu][0]), 3)}
               for cpu in cpus}
    # the machine's busy time besides the spinners' own: other processes,
    # the kernel's threads (interrupts are counted above)
    busy = sum(after[k] - before[k] for k in ("user", "nice", "system")) / hz
    accounted["other_work"] = max(0.0, busy - sum(spent for _, spent in got.values()))
    spinners = {c.pid for c in children}
    others = sorted(((ticks - processes[pid][1]) / hz, pid, name)
                    for pid, (name, ticks) in processes_after.items()
                    if pid in processes and pid not in spinners and ticks > processes[pid][1])
    accounted["busiest_others"] = [{"pid": pid, "name": name, "cpu_s": cpu_s}
                                   for cpu_s, pid, name in reversed(others[-5:])]
    return {"seconds": seconds, "min_ms": min_ms, "cpus": per_cpu, "accounted_s": accounted,
            "load_average": os.getloadavg()}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=5.0, help="how long each CPU is probed")
    p.add_argument("--min-ms", type=float, default=1.0, help="the shortest gap recorded")
    p.add_argument("--json", metavar="FILE", help="also write the result as JSON")
    args = p.parse_args(argv)
    result = probe(args.seconds, args.min_ms)
    print(f"{len(result['cpus'])} CPU(s) probed for {args.seconds:g} s each, gaps over "
          f"{args.min_ms:g} ms; load average at the end {result['load_average'][0]:.2f}")
    for cpu, r in result["cpus"].items():
        gaps = r["gaps"]
        if not gaps:
            print(f"  cpu {cpu}: no gap")
            continue
        longest = max(ms for _, ms in gaps)
        print(f"  cpu {cpu}: {len(gaps)} gap(s), {r['stalled_ms']:.1f} ms in all, longest "
              f"{longest:.2f} ms: " + ", ".join(f"{ms:.1f} ms at {t:.2f} s"
                                              for t, ms in gaps[:12]))
    acc = result["accounted_s"]
    print(f"  the guest's accounting over the probe (/proc/stat, 10 ms ticks): steal "
          f"{acc['steal'] * 1e3:.0f} ms, irq {acc['irq'] * 1e3:.0f} ms, softirq "
          f"{acc['softirq'] * 1e3:.0f} ms, other processes and kernel threads about "
          f"{acc['other_work'] * 1e3:.0f} ms"
          + "".join(f"; {o['name']} (pid {o['pid']}) {o['cpu_s'] * 1e3:.0f} ms"
                    for o in acc["busiest_others"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
