"""How long a `kafkalite` CLI command takes, exec to exit, beside kcat and
the bare interpreter in the same rounds (issue 42: `kafkalite --help` took
0.7-0.9 s; a CLI used in scripts and loops pays it at every call).

    python benchmarks/bench_cli_start.py                     # 9 rounds, about 30 s
    python benchmarks/bench_cli_start.py --before /work/old  # also another tree, turn by turn

Each round runs, in turn: ``python -c pass`` (the interpreter's floor),
``python -m kafkalite --help``, ``python -m kafkalite topics list`` against
a server the benchmark starts (free ports), and ``kcat -L`` against the
same server's Kafka listener (the peer: a C client's metadata listing).
With ``--before DIR`` the two kafkalite commands also run with DIR's
kafkalite first on PYTHONPATH, turn by turn with this tree's, so that load
from elsewhere falls on both. Figures are medians with min and max; timing
never fails anything.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

from kafkalite.server.node.launcher import ServerProcess  # noqa: E402


def _time(cmd: list[str], env: dict) -> float:
    started = time.perf_counter()
    # run from the tree: `python -m` puts the working directory first on sys.path
    # (no timeout: Popen.wait polls with one, in steps of up to 50 ms)
    subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False, cwd=env.get("KAFKALITE_BENCH_TREE", HERE))
    return time.perf_counter() - started


def _env(tree: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = tree + os.pathsep + env.get("PYTHONPATH", "")
    env["KAFKALITE_BENCH_TREE"] = tree
    return env


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--before", metavar="DIR", help="another kafkalite tree, measured alike")
    args = ap.parse_args()
    trees = {"this tree": HERE}
    if args.before:
        trees["before"] = os.path.abspath(args.before)
    with tempfile.TemporaryDirectory() as tmp:
        server = ServerProcess(os.path.join(tmp, "data")).start()
        try:
            bootstrap, kafka = server.bootstrap, server.kafka_bootstrap
            cases: dict[str, tuple[list[str], dict]] = {
                "python -c pass": ([sys.executable, "-c", "pass"], dict(os.environ))}
            for label, tree in trees.items():
                env = _env(tree)
                cases[f"kafkalite --help ({label})"] = (
                    [sys.executable, "-m", "kafkalite", "--help"], env)
                cases[f"kafkalite topics list ({label})"] = (
                    [sys.executable, "-m", "kafkalite", "topics", "list",
                     "--bootstrap-server", bootstrap], env)
            if shutil.which("kcat"):
                cases["kcat -L"] = (["kcat", "-L", "-b", kafka], dict(os.environ))
            for cmd, env in cases.values():      # untimed: bytecode caches, page cache
                _time(cmd, env)
            times: dict[str, list[float]] = {name: [] for name in cases}
            for _ in range(args.rounds):
                for name, (cmd, env) in cases.items():
                    times[name].append(_time(cmd, env))
        finally:
            server.stop()
    load = os.getloadavg()[0]
    print(f"CLI start, exec to exit, {args.rounds} rounds (load average {load:.2f}, "
          f"{os.cpu_count()} CPUs)")
    print(f"{'command':42} {'median s':>9} {'min':>7} {'max':>7}")
    for name, ts in times.items():
        print(f"{name:42} {statistics.median(ts):9.3f} {min(ts):7.3f} {max(ts):7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
