"""Smoke test of benchmarks/bench_many_partitions.py: the --quick run
completes, exits 0 and writes every figure. It checks that the benchmark
works, never how fast anything is."""
import json
import os
import subprocess
import sys

from harness import child_env

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks",
                      "bench_many_partitions.py")

FIGURES = ["create_s_per_1000_partitions", "idle_cpu_pct", "idle_cpu_pct_base",
           "idle_write_syscalls", "produce_p50_ms", "produce_p99_ms", "produce_p99_ms_base",
           "sigterm_s", "sigterm_exit_code", "sigterm_workers_killed", "restart_s"]


def test_bench_many_partitions_quick(tmp_path):
    # the smallest run that still prints every figure
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--topics", "10",
                          "--idle-seconds", "0.5", "--latency-seconds", "0.5",
                          "--output-dir", str(tmp_path / "out"),
                          "--work-dir", str(tmp_path / "work")],
                         capture_output=True, text=True, timeout=300, env=child_env())
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads((tmp_path / "out" / "results.json").read_text())
    figures = doc["figures"]
    assert all(figures[k]["value"] is not None for k in FIGURES), figures
    assert doc["settings"]["total_partitions"] == 40
    assert (tmp_path / "out" / "results.md").read_text().count("|") > 10
    assert not os.listdir(tmp_path / "work")        # the data directories are gone
