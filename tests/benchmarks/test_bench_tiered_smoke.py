"""Smoke test of benchmarks/bench_tiered.py: a --quick run of one store
completes, exits 0 and writes every figure (it checks that the benchmark
works, not how fast anything is)."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_tiered.py"), "--quick",
                        "--store", "directory", "--runs", "1", "--output", str(out),
                        "--work-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [offload] = json.loads(out.read_text())["results"]["directory"]["offload"]
    [read] = json.loads(out.read_text())["results"]["directory"]["read"]
    assert offload["bytes"] > 0 and offload["ratio"] > 0
    assert read["records"] > 0 and read["ratio"] > 0 and read["vs_local"] > 0
    assert "remote read / local read" in r.stdout
