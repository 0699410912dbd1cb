"""Smoke test of benchmarks/bench_broker.py: the --quick run completes,
exits 0, writes every figure, the Markdown table and the plot, and leaves
no server process, child process or shared-memory ring behind.

It checks that the benchmark works, not how fast anything is: a benchmark
never fails on timing.
"""
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_broker.py"

THROUGHPUT = [
    # 1. produce: produce_batch over ZeroMQ and shared memory, produce(), the pyzmq ceiling
    "produce_batch_zmq_records_per_s", "produce_batch_shm_records_per_s",
    "produce_zmq_records_per_s", "pyzmq_push_pull_records_per_s", "pyzmq_push_pull_mb_per_s",
    # 2. consume: consume_batch with default and large fetches, consume() per message
    "consume_batch_default_records_per_s", "consume_batch_large_records_per_s",
    "consume_records_per_s",
]
LATENCY = [f"latency_{t}_{q}_ms" for t in ("pyzmq", "zmq", "shm")
           for q in ("p50", "p99", "p999", "max")]
LATENCY += [f"latency_{t}_late_sends" for t in ("pyzmq", "zmq", "shm")]
SEND_RATES = [f"latency_{t}_send_rate" for t in ("pyzmq", "zmq", "shm")]

TARGETED = ["produce_batch_zmq_records_per_s", "produce_batch_shm_records_per_s",
            "consume_batch_default_records_per_s", "consume_batch_large_records_per_s",
            "latency_zmq_p99_ms", "latency_shm_p99_ms"]


def _processes(marker: str) -> dict:
    """{pid: command line} of live processes whose command line contains ``marker``."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        if marker in cmd:
            out[int(pid)] = cmd
    return out


def _ours(tmp_path) -> dict:
    """The benchmark's own processes: its role children, and the server and
    workers whose data directory is under tmp_path."""
    procs = _processes("bench_broker.py --role")
    procs.update({p: c for p, c in _processes(str(tmp_path)).items() if "kafkalite" in c})
    return procs


def _shm() -> set:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("kafkalite")}
    except FileNotFoundError:
        return set()


def test_quick_run_writes_every_figure_and_cleans_up(tmp_path):
    out = tmp_path / "out"
    work = tmp_path / "work"
    procs_before = _ours(tmp_path)
    shm_before = _shm()
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--output-dir", str(out),
         "--work-dir", str(work)],
        cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"

    doc = json.loads((out / "results.json").read_text())
    machine, figures = doc["machine"], doc["figures"]
    for key in ("cpu_model", "logical_cores", "python", "load_average_at_start", "pyzmq"):
        assert key in machine, key
    for key in THROUGHPUT + SEND_RATES:
        assert key in figures, f"{key} missing from results.json"
        value = figures[key]["value"]
        assert isinstance(value, (int, float)) and value > 0, f"{key} = {value!r}"
    for key in LATENCY:
        assert key in figures, f"{key} missing from results.json"
        value = figures[key]["value"]
        assert isinstance(value, (int, float)) and value >= 0, f"{key} = {value!r}"
    # percentiles are ordered
    for t in ("pyzmq", "zmq", "shm"):
        qs = [figures[f"latency_{t}_{q}_ms"]["value"] for q in ("p50", "p99", "p999", "max")]
        assert qs == sorted(qs), (t, qs)

    # pass/fail against the targets is recorded, as information only
    for key in TARGETED:
        assert isinstance(figures[key]["meets_target"], bool), key
        assert isinstance(doc["meets_target"][key], bool), key

    table = (out / "results.md").read_text()
    assert "| # | Figure | kafkalite | Ceiling / peer |" in table
    assert "produce_batch over ZeroMQ" in table and "pyzmq PUSH->PULL" in table
    assert "produce_batch over ZeroMQ" in proc.stdout  # the table is printed too

    if importlib.util.find_spec("matplotlib") is not None:
        png = out / "results.png"
        assert png.exists() and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:
        assert "plot skipped" in proc.stdout

    # nothing is left behind: data directory, processes, shared-memory rings
    assert work.is_dir() and not any(work.iterdir())
    deadline = time.monotonic() + 10
    while True:
        left = {p: c for p, c in _ours(tmp_path).items() if p not in procs_before}
        rings = _shm() - shm_before
        if (not left and not rings) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"
    assert not rings, f"/dev/shm entries left behind: {rings}"
