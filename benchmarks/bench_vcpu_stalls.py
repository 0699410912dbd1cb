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
import sys

from kafkalite.bench.stalls import probe


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
                    for o in result["busiest_others"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
