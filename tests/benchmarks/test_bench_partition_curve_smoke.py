"""Smoke test of benchmarks/bench_partition_curve.py: a run of one point
completes, exits 0 and writes the server's CPU per message, the p99 and
the plot, taken from kafkalite bench's results. It checks that the
benchmark works, not how fast anything is."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_one_point_reports_cpu_and_latency(tmp_path):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_partition_curve.py"),
                        "--partitions", "2", "--rate", "2000", "--duration", "2",
                        "--warmup", "1", "--output-dir", str(out), "--work-dir",
                        str(tmp_path / "work")],
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    point = json.loads((out / "results.json").read_text())["curves"]["this tree"]["2"]
    assert point["server_us_per_msg"] > 0 and point["e2e_p99_ms"] > 0
    assert (out / "partition-curve.png").stat().st_size > 0
    assert (out / "partition-curve-2p.yaml").exists()
