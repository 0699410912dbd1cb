"""Smoke test of benchmarks/bench_client_paths.py: the --quick run (with
--before pointing at this same checkout, to run that path too) completes,
exits 0 and writes every figure. It checks that the benchmark works, not how
fast anything is."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIGURES = ["consume", "consume_batch", "consume_gc", "paced_cpu_us", "poll", "produce",
           "produce_batch", "produce_cb", "produce_cb_gc"]


@pytest.mark.parametrize("transport", ["tcp", "zmq"])
def test_quick_run_reports_every_figure(tmp_path, transport):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_client_paths.py"),
                        "--quick", "--records", "1000", "--before", str(REPO),
                        "--transport", transport,
                        "--output-dir", str(out), "--work-dir", str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    doc = json.loads((out / "results.json").read_text())
    for tree in ("after", "before"):
        assert sorted(doc["medians"][tree]) == FIGURES
        assert all(v > 0 for v in doc["medians"][tree].values())
    assert sorted(doc["medians"]["confluent"]) == ["consume", "consume_gc", "paced_cpu_us",
                                                  "produce", "produce_cb", "produce_cb_gc"]
    assert doc["medians"]["confluent"]["paced_cpu_us"] > 0
    assert "poll() per message" in (out / "results.md").read_text()
    # the 100-partition workload's producer, CPU per record of both clients
    assert "paced produce(): 5,000 records/s of 1024 B over 100 partitions" in \
        (out / "results.md").read_text()
    assert f"kafkalite over {transport}" in (out / "results.md").read_text()
