"""The ``kafkalite bench`` subcommand: arguments and entry point.

kafkalite/cli/__init__.py registers it with ``add_arguments`` and ``run``; this
module imports nothing heavy until ``run`` is called, so ``kafkalite
--help`` stays fast. Exit status: 0 when every driver that could run did;
1 when a workload file is bad (one line naming the field) or a driver run
failed (the reports are still written). Timing never fails a run.
"""
from __future__ import annotations

import argparse
import datetime
import sys

DESCRIPTION = ("benchmark kafkalite beside Redis Streams, NATS JetStream and the machine's "
               "ceilings on OpenMessaging-Benchmark-style workload files")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("workloads", nargs="*", metavar="WORKLOAD.yaml",
                   help="workload files (OMB fields; see benchmarks/workloads/)")
    p.add_argument("--drivers", metavar="A,B,...",
                   help="drivers to run, comma-separated (default: the workload's list, else all)")
    p.add_argument("--out", metavar="DIR",
                   help="where results.json, results.md and the PNGs go "
                        "(default: ./kafkalite-bench-<timestamp>)")
    p.add_argument("--duration", type=float, metavar="S",
                   help="measured seconds of every workload (overrides the files)")
    p.add_argument("--warmup", type=float, metavar="S",
                   help="warm-up seconds of every workload (overrides the files)")
    p.add_argument("--scale", type=float, metavar="F",
                   help="multiply every workload's warm-up and test duration by F")
    p.add_argument("--work-dir", metavar="DIR",
                   help="where the servers' temporary data directories are made "
                        "(default: the system temp dir); removed after each run")
    p.add_argument("--rounds", type=int, default=1, metavar="N",
                   help="run each workload's drivers N times, a fresh server each run, the "
                        "driver going first rotated a round; every round counts and results.md "
                        "gives the median and min-max over them (default: 1)")
    p.add_argument("--warm-memory", metavar="SIZE",
                   help="before the first run, write SIZE of memory (e.g. 4G) in a child "
                        "process and free it, so that a VM's host backs it again (free page "
                        "reporting); off by default, so that figures show a cold start; "
                        "recorded in results.json")
    p.add_argument("--stall-probe", type=float, default=0.0, metavar="S",
                   help="before the first run, spin a process on each CPU for S seconds and "
                        "record when its CPU was taken from it (the machine's own stalls, "
                        "under every latency), beside the steal /proc/stat counted; off by "
                        "default; recorded in results.json and results.md")
    p.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    p.add_argument("--list-drivers", action="store_true",
                   help="list the drivers and whether each can run here, then exit")


def run(args) -> int:
    from kafkalite.bench import DRIVER_NAMES, load_workload
    from kafkalite.bench import run as run_bench
    from kafkalite.bench.drivers import driver_class
    if args.list_drivers:
        for name in DRIVER_NAMES:
            d = driver_class(name)()
            why = d.unavailable()
            print(f"{name:<16} {'ok' if why is None else 'unavailable: ' + why}\n"
                  f"{'':<16} {d.label}")
        return 0
    if not args.workloads:
        raise ValueError("give at least one workload file (e.g. benchmarks/workloads/*.yaml)")
    if args.scale is not None and args.scale <= 0:
        raise ValueError(f"--scale must be > 0, not {args.scale:g}")
    if args.duration is not None and args.duration <= 0:
        raise ValueError(f"--duration must be > 0, not {args.duration:g}")
    if args.warmup is not None and args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, not {args.warmup:g}")
    if args.rounds < 1:
        raise ValueError(f"--rounds must be >= 1, not {args.rounds}")
    if not 0 <= args.stall_probe <= 600:
        raise ValueError(f"--stall-probe takes 0 to 600 seconds, not {args.stall_probe:g}")
    warm = None
    if args.warm_memory is not None:
        from kafkalite.bench.measure import parse_size
        try:
            warm = parse_size(args.warm_memory)
        except ValueError:
            raise ValueError(f"--warm-memory takes a size such as 512M or 4G, "
                             f"not {args.warm_memory!r}") from None
        if warm <= 0:
            raise ValueError(f"--warm-memory must be > 0, not {args.warm_memory}")
    drivers = [d.strip() for d in args.drivers.split(",") if d.strip()] if args.drivers else None
    for d in drivers or ():
        driver_class(d)
    workloads = [load_workload(p).with_durations(args.duration, args.warmup, args.scale)
                 for p in args.workloads]
    out = args.out or f"kafkalite-bench-{datetime.datetime.now():%Y%m%d-%H%M%S}"
    doc = run_bench(workloads, out, drivers=drivers, work_dir=args.work_dir,
                    progress=not args.no_progress, rounds=args.rounds, warm_memory=warm,
                    stall_probe=args.stall_probe)
    failed = [f"{e['workload']['name']}/{r['driver']}" for e in doc["workloads"]
              for r in e["results"] if r["status"] == "failed"]
    if failed:
        print(f"kafkalite bench: {len(failed)} driver run(s) failed: {', '.join(failed)} "
              f"(see {out}/results.md)", file=sys.stderr)
        return 1
    return 0
