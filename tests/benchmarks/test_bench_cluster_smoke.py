"""Smoke test of benchmarks/bench_cluster.py: the --quick run (three nodes,
one kill of each kind) completes, exits 0 and writes every figure (it checks
that the benchmark works, not how fast anything is)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from postgres import find_binaries

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(find_binaries() is None, reason="PostgreSQL is not installed")
def test_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_cluster.py"),
                        # the smallest run that still prints every figure
                        "--quick", "--seconds", "0.3", "--commits", "20",
                        "--output-dir", str(out), "--work-dir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads((out / "results.json").read_text())["figures"]
    for key in ("process_median_s", "process_max_s", "whole_median_s", "whole_max_s",
                "native_rf1", "native_rf3", "ck_rf1", "ck_rf3"):
        assert figures[key]["value"] > 0, key
