"""Smoke test of benchmarks/bench_tiered_lag.py: a --quick run completes,
exits 0 and writes every figure (it checks that the benchmark works, not
how fast the copier is)."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_the_lag_over_time(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_tiered_lag.py"),
                        "--quick", "--output", str(out), "--work-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [run] = json.loads(out.read_text())["results"]
    assert run["samples"] and run["peak_mib"] > 0
    assert run["segments_copied"] > 0 and run["metadata_per_segment"] > 0
    assert "lag (s after the store came back" in r.stdout
