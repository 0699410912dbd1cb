"""Smoke test of benchmarks/bench_poller.py: the --quick run polls both
sides over real ZeroMQ sockets and a real connection, exits 0 and writes
both figures. It checks that the benchmark works, not how fast anything is."""
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_quick_run_reports_both_pollers(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_poller.py"),
                        "--quick", "--json", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads(out.read_text())
    for key in ("zmq_poller_cpu_us_per_pass", "epoll_poller_cpu_us_per_pass"):
        assert len(figures[key]) == 1 and figures[key][0] > 0
    assert "EpollPoller, CPU per pass" in r.stdout + r.stderr
