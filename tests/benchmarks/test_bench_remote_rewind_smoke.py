"""Smoke test of benchmarks/bench_remote_rewind.py: a small run completes,
exits 0 and writes every figure (it checks that the benchmark works, not
how fast anything is)."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_a_small_run_reports_every_figure(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_remote_rewind.py"),
                        "--quick", "--segments", "4", "--output", str(out),
                        "--work-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [figures] = json.loads(out.read_text())["results"].values()
    assert len(figures["read_committed"]) == len(figures["read_uncommitted"]) == 1
    assert figures["txn_index_requests"] == [0]
    assert "first record after" in r.stdout
