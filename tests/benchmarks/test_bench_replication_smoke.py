"""Smoke test of benchmarks/bench_replication.py: the --quick run completes,
exits 0 and writes every figure (it checks that the benchmark works, not how
fast anything is)."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_replication.py"),
                        # the smallest run that still prints every figure
                        "--quick", "--seconds", "0.3", "--latency-seconds", "0.3",
                        "--catchup-mb", "4", "--rate", "1000",
                        "--output-dir", str(out), "--work-dir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads((out / "results.json").read_text())["figures"]
    for client in ("native", "ck"):
        for rf in ("rf1", "rf3"):
            assert figures[f"{client}_{rf}_records_per_s"]["value"] > 0
    for key in ("latency_rf3_p50_ms", "latency_rf3_p99_ms", "failover_median_s",
                "catchup_mb_per_s", "copy_mb_per_s"):
        assert figures[key]["value"] > 0, key
    assert "RF=3, acks=all" in (out / "results.md").read_text()
