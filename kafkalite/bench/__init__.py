"""``kafkalite bench``: kafkalite beside its peers and the machine's limits,
on the same workload, in one command.

OpenMessaging-Benchmark-style workload files (workload.py) run on every
driver in turn (drivers/): kafkalite over ZeroMQ, over shared memory and
through confluent-kafka on its Kafka listener; Redis Streams and NATS
JetStream started by the harness; a plain file append and raw pyzmq as
ceilings. runner.py measures (fixed-rate schedules without coordinated
omission, HdrHistogram latencies, throughput over time); report.py writes
JSON, Markdown and PNG plots; measure.py holds the helpers every kafkalite
benchmark shares.

    from kafkalite.bench import load_workload, run
    run([load_workload("benchmarks/workloads/latency-10k-1kb.yaml")], out_dir="out")

(Client processes are started with multiprocessing "spawn": a script that
calls ``run`` needs the ``if __name__ == "__main__":`` guard.)
"""
from __future__ import annotations

import sys
import time

from kafkalite.bench.drivers import NAMES as DRIVER_NAMES
from kafkalite.bench.workload import Workload, WorkloadError


def load_workload(path: str) -> Workload:
    """Reads and checks a workload file; WorkloadError names the bad field."""
    from kafkalite.bench.workload import load
    return load(path, known_drivers=DRIVER_NAMES)


def run(workloads: list[Workload], out_dir: str, drivers: list[str] | None = None,
        work_dir: str | None = None, progress: bool = True, say=print, rounds: int = 1,
        warm_memory: int | None = None, stall_probe: float = 0.0) -> dict:
    """Runs every workload on every driver (``drivers``, else the workload's
    own list, else all) ``rounds`` times, writes the report files into
    ``out_dir`` and returns the results document (see report.py).

    Each round runs every driver once, a fresh server each, the driver
    going first rotated one place a round (as benchmarks/common.py's
    ``alternating``), so that a machine getting busier or quieter, or the
    previous run's leftovers, weigh on every driver alike; every round
    counts, the first too. Each run records the machine's state at its
    start and end (measure.machine_change) beside its figures.
    ``warm_memory`` bytes are written and freed once before the first run
    (measure.warm_memory): off by default, so that figures are honest
    about a cold start. ``stall_probe`` seconds (0: none) a process spinning
    on each CPU records when its CPU was taken from it, before the first
    run (stalls.py): the floor under the run's latencies."""
    import os

    from kafkalite.bench import measure, report, runner
    from kafkalite.bench.drivers import driver_class
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, not {rounds}")
    names = list(drivers) if drivers else None
    for n in names or ():
        driver_class(n)  # unknown names fail before anything starts
    if work_dir:
        os.makedirs(work_dir, exist_ok=True)
    if warm_memory:
        warmed = measure.warm_memory(warm_memory)
        say(f"warmed {measure.human_bytes(warmed['bytes'])} of memory in "
            f"{warmed['seconds']:.2f} s" + ("" if warmed["ok"] else f" (failed: {warmed['error']})"))
    stalls = None
    if stall_probe:
        from kafkalite.bench.stalls import probe, summary
        stalls = probe(stall_probe, 1.0)
        say(summary(stalls))
    machine = measure.machine_info(work_dir or os.path.abspath(os.getcwd()))
    machine["warm_memory"] = warmed if warm_memory else None    # None: a cold start
    machine["cpu_stalls"] = stalls                               # None: not probed
    started = time.monotonic()
    runs = []
    for w in workloads:
        say(f"workload {w.name} ({w.path}): {w.describe()}")
        listed = list(names or w.drivers or DRIVER_NAMES)
        results, orders = [], []
        for r in range(rounds):
            order = listed[r % len(listed):] + listed[:r % len(listed)]
            orders.append(order)
            if rounds > 1:
                say(f"  round {r + 1} of {rounds}: {', '.join(order)}")
            for name in order:
                before = measure.machine_state()
                result = runner.run_driver(w, name, work_dir, progress)
                change = measure.machine_change(before, measure.machine_state())
                result.update({"round": r, "machine": change})
                if result["status"] == "skipped":
                    say(f"  skipped {name}: {result['reason']}")
                else:
                    print(f"  {name:<16} machine: {measure.machine_summary(change)}",
                          file=sys.stderr, flush=True)
                results.append(result)
        runs.append((w, results, orders))
    measure.machine_info_at_end(machine)
    doc = report.document(runs, machine, time.monotonic() - started)
    paths = report.write(out_dir, doc)
    say("")
    say(report.markdown(doc))
    say("wrote " + ", ".join(paths))
    return doc


__all__ = ["DRIVER_NAMES", "Workload", "WorkloadError", "load_workload", "run"]
