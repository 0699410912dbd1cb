"""How long a `kafkalite` CLI command takes, exec to exit, beside kcat and
the bare interpreter in the same rounds (issue 42: `kafkalite --help` took
0.7-0.9 s; a CLI used in scripts and loops pays it at every call).

    python benchmarks/bench_cli_start.py                     # 9 rounds, about 30 s
    python benchmarks/bench_cli_start.py --before /work/old  # also another tree, turn by turn

Each round runs, in turn (the one going first rotated each round):
``python -c pass`` (the interpreter's floor),
``python -m kafkalite --help``, ``python -m kafkalite topics list`` against
a server the benchmark starts (free ports), and ``kcat -L`` against the
same server's Kafka listener (the peer: a C client's metadata listing).
With ``--before DIR`` the two kafkalite commands also run with DIR's
kafkalite first on PYTHONPATH, turn by turn with this tree's, so that load
from elsewhere falls on both. Figures are medians, each beside the same
command from --before, else beside kcat (topics list) or the bare
interpreter (--help), with every round's time below; timing never fails
anything.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import common  # noqa: E402
from kafkalite.launcher import ServerProcess  # noqa: E402


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
    ap = common.parser(__doc__)
    common.add_rounds(ap, 9)
    ap.add_argument("--before", metavar="DIR", help="another kafkalite tree, measured alike")
    args = common.parse(ap)
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
            rounds = common.alternating(list(cases), args.rounds, lambda name: _time(*cases[name]))
        finally:
            server.stop()
    common.say(f"CLI start, exec to exit, median of {args.rounds} rounds ({os.cpu_count()} CPUs)")
    rows = []
    for name in cases:
        if "(this tree)" in name and args.before:
            peer, which = name.replace("(this tree)", "(before)"), "before"
        elif "topics list" in name and "kcat -L" in cases:
            peer, which = "kcat -L", "kcat -L"
        elif name.startswith("kafkalite"):
            peer, which = "python -c pass", "python -c pass"
        else:
            peer, which = None, ""
        rows.append(common.Row(name, rounds.median(name), "s",
                               peer and rounds.median(peer), which, fmt=".3f"))
    common.say_table(rows)
    for name in cases:
        common.say_runs(name, rounds.values[name], " s", fmt=".3f")
    common.say_load(rounds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
