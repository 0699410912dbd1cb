"""Smoke test of benchmarks/bench_kafka_clients.py: the --quick run completes,
exits 0 and writes every figure. It checks that the benchmark works, not how
fast anything is."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIGURES = ["native_produce_batch_records_per_s", "confluent_produce_records_per_s",
           "native_consume_batch_records_per_s", "confluent_consume_records_per_s"]


def test_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_kafka_clients.py"),
                        "--quick", "--records", "5000", "--output-dir", str(out),
                        "--work-dir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=240)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    assert list(doc["figures"]) == FIGURES
    assert all(doc["figures"][k]["value"] > 0 for k in FIGURES)
    assert "confluent-kafka produce()" in (out / "results.md").read_text()
