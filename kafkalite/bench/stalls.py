"""The time each CPU is taken from a process that wants all of it.

One process pinned to each CPU reads the clock in a loop and records every
gap between two reads over a threshold: a time its CPU ran something else
(the kernel, a VM's host, the machine's background processes). Beside the
gaps: what /proc/stat accounted to steal, interrupts and other work over the
same seconds, and the processes that used the most CPU meanwhile.
``kafkalite bench --stall-probe SECONDS`` records it before the first run;
benchmarks/bench_vcpu_stalls.py prints it.

Who calls: kafkalite.bench (the parent process, before any run) and
benchmarks/bench_vcpu_stalls.py. It takes every CPU for its seconds.
"""
from __future__ import annotations

import multiprocessing
import os
import time

from kafkalite.bench.measure import cpu_jiffies, process_table


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


def process_ticks() -> dict:
    """{pid: (name, user + system clock ticks)} of every process now."""
    return {pid: (name, ticks) for pid, (name, _ppid, ticks) in process_table().items()}


def probe(seconds: float, min_ms: float) -> dict:
    """A spinner on each CPU this process may use, ``seconds`` long, all
    started together: {"cpus": {cpu: {"gaps", "stalled_ms"}},
    "accounted_s": /proc/stat's steal, irq, softirq and other work
    meanwhile, "busiest_others": the five processes that used the most CPU
    meanwhile, ...}. Spinners left behind by a failure are killed."""
    cpus = sorted(os.sched_getaffinity(0))
    ctx = multiprocessing.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Semaphore(0), ctx.Event()
    children = [ctx.Process(target=spin, args=(cpu, seconds, min_ms / 1e3, out, ready, go))
                for cpu in cpus]
    try:
        for c in children:
            c.start()
        for _ in children:
            if not ready.acquire(timeout=60):
                raise RuntimeError("a CPU stall probe's spinner did not start in 60 s")
        time.sleep(0.2)         # their interpreters' start-up done, the parent's too
        before, processes = cpu_jiffies() or {}, process_ticks()
        go.set()
        got = dict(out.get(timeout=seconds + 60) for _ in children)
        after, processes_after = cpu_jiffies() or {}, process_ticks()
    finally:
        for c in children:
            if c.pid is not None:
                c.join(5)
                if c.is_alive():
                    c.kill()
                    c.join()
    hz = os.sysconf("SC_CLK_TCK")

    def spent(*fields) -> float:
        return sum(after.get(k, 0) - before.get(k, 0) for k in fields) / hz

    accounted = {k: spent(k) for k in ("steal", "irq", "softirq")}
    per_cpu = {cpu: {"gaps": got[cpu][0], "stalled_ms": round(sum(ms for _, ms in got[cpu][0]), 3)}
               for cpu in cpus}
    # the machine's busy time besides the spinners' own: other processes,
    # the kernel's threads (interrupts are counted above)
    accounted["other_work"] = max(0.0, spent("user", "nice", "system")
                                  - sum(cpu_s for _, cpu_s in got.values()))
    spinners = {c.pid for c in children}
    others = sorted(((ticks - processes[pid][1]) / hz, pid, name)
                    for pid, (name, ticks) in processes_after.items()
                    if pid in processes and pid not in spinners and ticks > processes[pid][1])
    busiest = [{"pid": pid, "name": name, "cpu_s": cpu_s}
               for cpu_s, pid, name in reversed(others[-5:])]
    return {"seconds": seconds, "min_ms": min_ms, "cpus": per_cpu, "accounted_s": accounted,
            "busiest_others": busiest, "load_average": os.getloadavg()}


def summary(result: dict) -> str:
    """One line: each CPU's gaps, and what the accounting saw."""
    parts = []
    for cpu, r in result["cpus"].items():
        gaps = r["gaps"]
        parts.append(f"cpu {cpu} {r['stalled_ms']:.1f} ms in {len(gaps)} gap(s)"
                     + (f" (longest {max(ms for _, ms in gaps):.1f} ms)" if gaps else ""))
    acc = result["accounted_s"]
    others = ", ".join(f"{o['name']} {o['cpu_s'] * 1e3:.0f} ms"
                       for o in result["busiest_others"][:3])
    return (f"CPU stalls over {result['seconds']:g} s before the runs (gaps over "
            f"{result['min_ms']:g} ms of a process spinning on each CPU): {'; '.join(parts)}; "
            f"steal counted {acc['steal'] * 1e3:.0f} ms"
            + (f"; busiest other processes meanwhile: {others}" if others else ""))
