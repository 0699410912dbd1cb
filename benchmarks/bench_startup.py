"""How long a server takes to start: kafkalite.testing's settings (one
worker, no ingest gateway, one partition per internal topic) beside the test
harness's (two workers, the gateway, 16 + 4 internal partitions), in one
run, and what the time goes on.

    python benchmarks/bench_startup.py               # 5 rounds, about 30 s
    python benchmarks/bench_startup.py --rounds 20

Start-up is measured as a user of ``kafkalite.testing`` pays it: from
``ServerProcess.start()`` (``python -m kafkalite server`` on free ports)
until ``server.json`` says every worker is ready. The settings take turns
each round, so load from elsewhere on the machine falls on both; figures
are medians. The breakdown is the CPU time (user + system) of a bare
interpreter and of importing what the supervisor and a worker import: a
server is two interpreter starts in sequence (the supervisor binds its
ports before it spawns its workers), and those imports are most of it.
Timing never fails anything: this prints figures (and ``--json``).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from kafkalite import testing
from kafkalite.server import launcher

# name -> the unstarted server, given a directory of its own
SETTINGS = {
    "kafkalite.testing (1 worker, no ingest)": testing.server_process,
    "test harness (2 workers, ingest)":
        lambda directory: launcher.ServerProcess(os.path.join(directory, "data"), workers=2),
}
IMPORTS = {
    "bare interpreter": "pass",
    "supervisor's imports": "import kafkalite.cli, kafkalite.server.supervisor",
    "worker's imports": "import kafkalite.server.worker",
    "numpy alone": "import numpy",
}


def start_once(make_server) -> float:
    directory = tempfile.mkdtemp(prefix="kafkalite-bench-startup-")
    try:
        server = make_server(directory)
        started = time.perf_counter()
        server.start()
        elapsed = time.perf_counter() - started
        server.stop()
        return elapsed
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def cpu_of(code: str) -> float:
    """CPU seconds (user + system) of ``python -c code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], env=launcher.package_env(), check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args()
    starts = {name: [] for name in SETTINGS}
    cpu = {name: [] for name in IMPORTS}
    for _ in range(args.rounds):
        for name, make_server in SETTINGS.items():
            starts[name].append(start_once(make_server))
        for name, code in IMPORTS.items():
            cpu[name].append(cpu_of(code))
    out = {"rounds": args.rounds, "cores": os.cpu_count(), "loadavg": os.getloadavg(),
           "start_s": {k: {"median": statistics.median(v), "min": min(v), "max": max(v)}
                       for k, v in starts.items()},
           "import_cpu_s": {k: statistics.median(v) for k, v in cpu.items()}}
    print(f"{args.rounds} rounds, {os.cpu_count()} cores, load average "
          f"{' '.join(f'{x:.1f}' for x in out['loadavg'])}")
    print("time to ready (wall):")
    for name, s in out["start_s"].items():
        print(f"  {name:42s} median {s['median']:.2f} s  (min {s['min']:.2f}, max {s['max']:.2f})")
    print("CPU time (user + system), median:")
    for name, s in out["import_cpu_s"].items():
        print(f"  {name:42s} {s:.2f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
