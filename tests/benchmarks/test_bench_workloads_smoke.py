"""Smoke test of the shipped throughput and latency workloads (the figures
benchmarks/bench_broker.py used to report, now ``kafkalite bench``
workloads): each runs briefly through the CLI, every driver it names that
can run here reports its figures, the targets table says met or not for
each target, and no process or shared-memory ring is left behind.

It checks that the benchmarks work, not how fast anything is: a benchmark
never fails on timing.
"""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from harness import processes_with

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = REPO / "benchmarks" / "workloads"


def _shm() -> set:
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("kafkalite")}
    except FileNotFoundError:
        return set()


def _run(tmp_path, *args):
    out, work = tmp_path / "out", tmp_path / "work"
    shm_before = _shm()
    proc = subprocess.run([sys.executable, "-m", "kafkalite", "bench", *map(str, args),
                           "--out", str(out), "--work-dir", str(work), "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert not any(work.iterdir())
    deadline = time.monotonic() + 10
    while (processes_with(str(work)) or _shm() - shm_before) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not processes_with(str(work)) and not _shm() - shm_before
    return json.loads((out / "results.json").read_text()), (out / "results.md").read_text()


def test_backlog_workloads_report_fill_and_drain_rates(tmp_path):
    # 1% of each workload's 0.5 GB: 50,000 messages
    doc, md = _run(tmp_path, WORKLOADS / "backlog-1p-100b.yaml",
                   WORKLOADS / "backlog-1p-100b-large-fetch.yaml", "--scale", "0.01")
    for entry in doc["workloads"]:
        w = entry["workload"]
        assert w["backlog_gb"] == 0.005
        for r in entry["results"]:
            assert r["status"] == "ok", (r["driver"], r.get("reason"))
            assert r["sent"] == r["received"] == 50_000 and r["missing"] == 0, r
            assert r["publish_rate"] > 0 and r["consume_rate"] > 0, r
            assert r["fill_s"] > 0 and r["drain_s"] > 0, r
            assert r["e2e_latency_ms"]["count"] == 0       # nothing to measure in a backlog
    drivers = [r["driver"] for r in doc["workloads"][0]["results"]]
    assert drivers == ["kafkalite-zmq", "kafkalite-shm", "kafkalite-records", "file-append"]
    # the DESIGN targets are judged, as information
    for driver, figure in (("kafkalite-zmq", "publish rate"), ("kafkalite-zmq", "consume rate"),
                           ("kafkalite-shm", "publish rate")):
        rows = [line for line in md.splitlines()
                if line.startswith(f"| {driver} | {figure} |")]
        assert rows and rows[0].rstrip(" |").split("| ")[-1] in ("yes", "NO"), (driver, figure)


def test_latency_workload_reports_percentiles_beside_the_pyzmq_floor(tmp_path):
    doc, md = _run(tmp_path, WORKLOADS / "latency-10k-1kb.yaml", "--duration", "1",
                   "--warmup", "0.5", "--drivers", "kafkalite-zmq,kafkalite-shm,pyzmq")
    results = {r["driver"]: r for r in doc["workloads"][0]["results"]}
    assert set(results) == {"kafkalite-zmq", "kafkalite-shm", "pyzmq"}
    for name, r in results.items():
        assert r["status"] == "ok", (name, r.get("reason"))
        lat = r["e2e_latency_ms"]
        qs = [lat["p50"], lat["p99"], lat["p999"], lat["max"]]
        assert lat["count"] > 0 and qs == sorted(qs), (name, qs)
    assert "| kafkalite-zmq | end-to-end p99 | <= 1.00 ms |" in md
