"""Smoke test of benchmarks/bench_idle_fetch.py: the --quick run completes,
exits 0 and writes every figure for both paths. It checks that the
benchmark works, not how fast anything is."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "idle.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_idle_fetch.py"),
                        "--quick", "--partitions", "10", "--requests", "10",
                        "--json", str(out), "--work-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads(out.read_text())["figures"]
    assert sorted(figures) == sorted(f"{kind}_10" for kind in
                                     ("full", "full-committed", "incremental", "long-poll"))
    assert all(f["c_us"] > 0 and f["python_us"] > 0 for f in figures.values())
    assert "idle partitions" in r.stdout
