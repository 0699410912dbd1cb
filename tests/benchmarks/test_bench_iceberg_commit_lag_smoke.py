"""Smoke test of benchmarks/bench_iceberg_commit_lag.py: a --quick run
completes, exits 0, waits for the table to hold every record and reports
each figure beside the target lag (it checks that the benchmark works,
not how fast anything is)."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_the_commit_lag(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_iceberg_commit_lag.py"),
                        "--quick", "--target-lag-ms", "200", "--json", str(out),
                        "--work-dir", str(tmp_path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    [figures] = json.loads(out.read_text())["rounds"]
    assert figures["records"] >= 5_000 * 3 and figures["calls"] > 0
    # a call's records are committed after it was made, at least one read later
    assert 0 < figures["lag_ms_median"] <= figures["lag_ms_p99"] <= figures["lag_ms_max"]
    assert "commit lag, p99" in r.stdout and "iceberg.target.lag.ms" in r.stdout
