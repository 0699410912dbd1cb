"""The CPU stall probe (kafkalite/bench/stalls.py, benchmarks/bench_vcpu_stalls.py):
a spinner reports the time its CPU was taken from it (here a SIGSTOP of 300 ms,
planted), and the script's short run exits 0 with every CPU's gaps and the
machine's own accounting beside them. It checks that the probe works, not how
stalled the machine is."""
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from kafkalite.bench import stalls

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_vcpu_stalls.py"


def test_a_spinner_reports_the_time_it_was_stopped():
    ctx = multiprocessing.get_context("spawn")
    out, ready, go = ctx.Queue(), ctx.Semaphore(0), ctx.Event()
    child = ctx.Process(target=stalls.spin, args=(None, 2.0, 0.02, out, ready, go))
    child.start()
    try:
        assert ready.acquire(timeout=60)
        go.set()
        time.sleep(0.4)
        os.kill(child.pid, signal.SIGSTOP)
        time.sleep(0.3)
        os.kill(child.pid, signal.SIGCONT)
        cpu, (gaps, spent) = out.get(timeout=60)
    finally:
        child.join(10)
    assert cpu is None and spent > 0
    # the planted stop, when it was made (a loaded machine may add gaps of its own)
    stops = [(t, ms) for t, ms in gaps if ms >= 280]
    assert any(0.2 < t < 1.5 for t, _ in stops), gaps
    assert all(ms < 2000 for _, ms in stops), gaps


def test_a_short_run_reports_every_cpu_and_the_accounting(tmp_path):
    out = tmp_path / "stalls.json"
    r = subprocess.run([sys.executable, str(SCRIPT), "--seconds", "0.3", "--json", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    result = json.loads(out.read_text())
    assert sorted(int(c) for c in result["cpus"]) == sorted(os.sched_getaffinity(0))
    assert set(result["accounted_s"]) == {"steal", "irq", "softirq", "other_work"}
    assert all(o["cpu_s"] > 0 for o in result["busiest_others"])
    assert "CPU(s) probed for 0.3 s" in r.stdout
    assert "the guest's accounting over the probe" in r.stdout


def test_the_summary_names_each_cpu_and_the_accounting():
    result = {"seconds": 2.0, "min_ms": 1.0, "load_average": (0.5, 0.5, 0.5),
              "cpus": {0: {"gaps": [], "stalled_ms": 0.0},
                       1: {"gaps": [(0.5, 6.25), (1.5, 8.5)], "stalled_ms": 14.75}},
              "accounted_s": {"steal": 0.01, "irq": 0.0, "softirq": 0.0, "other_work": 0.05},
              "busiest_others": [{"pid": 1, "name": "agent", "cpu_s": 0.04}]}
    assert stalls.summary(result) == (
        "CPU stalls over 2 s before the runs (gaps over 1 ms of a process spinning on each "
        "CPU): cpu 0 0.0 ms in 0 gap(s); cpu 1 14.8 ms in 2 gap(s) (longest 8.5 ms); steal "
        "counted 10 ms; busiest other processes meanwhile: agent 40 ms")
