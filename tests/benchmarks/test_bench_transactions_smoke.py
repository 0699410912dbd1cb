"""Smoke test of benchmarks/bench_transactions.py: the --quick run completes,
exits 0 and writes every figure (it checks that the benchmark works, not how
fast anything is; the benchmark itself checks that read_committed delivers
exactly the committed 90% of the log)."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_transactions.py"),
                        # the smallest run that still prints every figure (10,000
                        # records: every tenth transaction of 1,000 is aborted)
                        "--quick", "--seconds", "0.3", "--records", "10000", "--commits", "10",
                        "--output-dir", str(out), "--work-dir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    for client in ("native", "ck"):
        for name in ("idempotent", "txn_100ms", "txn_10k", "read_uncommitted", "read_committed"):
            assert doc["figures"][f"{client}_{name}_records_per_s"]["value"] > 0
    assert doc["figures"]["commit_visible_p99_ms"]["value"] >= \
        doc["figures"]["commit_call_p50_ms"]["value"] > 0
    assert "commit every 100 ms" in (out / "results.md").read_text()
