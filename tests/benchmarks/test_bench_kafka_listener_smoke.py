"""Smoke test of benchmarks/bench_kafka_listener.py: the --quick run serves
every request over a real socket, exits 0 and writes both figures. It checks
that the benchmark works, not how fast anything is."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_the_listener_and_the_codec(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_kafka_listener.py"),
                        "--quick", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads(out.read_text())
    assert len(figures["listener_cpu_us_per_request"]) == 1
    assert len(figures["codec_cpu_us_per_request"]) == 1
    assert all(v > 0 for v in figures["listener_cpu_us_per_request"] + figures["codec_cpu_us_per_request"])
    assert "listener, CPU per request" in r.stdout + r.stderr
