"""Smoke test of benchmarks/bench_coordinator_relay.py: the --quick run
starts a server, commits through the worker FindCoordinator names and
through the supervisor directly, exits 0 and prints both figures. It checks
that the benchmark works, not how fast anything is."""
import re
import subprocess
import sys
from pathlib import Path

from harness import child_env

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_both_paths():
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_coordinator_relay.py"),
                        "--quick"], capture_output=True, text=True, timeout=120, env=child_env())
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for path in ("relayed", "direct"):
        assert re.search(rf"^{path} +commits/s per round: [\d,]+", r.stdout, re.M), r.stdout
    assert re.search(r"relayed/direct per round: \d+\.\d\d", r.stdout), r.stdout
