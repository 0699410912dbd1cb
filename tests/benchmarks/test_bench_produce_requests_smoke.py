"""Smoke test of benchmarks/bench_produce_requests.py: the --quick run
completes, exits 0 and writes every figure, counted from the server's own
metrics. It checks that the benchmark works, not how many requests anything
sends."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_produce_requests.py"),
                        "--quick", "--partitions", "10", "--lingers", "5",
                        "--output-dir", str(out), "--work-dir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads((out / "results.json").read_text())["figures"]
    assert sorted(figures) == sorted(f"{client}_linger5_{what}"
                                     for client in ("confluent", "kafkalite")
                                     for what in ("requests_per_s", "records_per_request",
                                                  "worker_cpu_us_per_request"))
    assert all(f["value"] > 0 for f in figures.values())
    assert "records a request" in (out / "results.md").read_text()
