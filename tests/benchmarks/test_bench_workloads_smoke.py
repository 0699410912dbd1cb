"""Smoke test of the shipped throughput and latency workloads (the figures
benchmarks/bench_broker.py used to report, now ``kafkalite bench``
workloads): each runs briefly through the CLI, every driver it names that
can run here reports its figures, the targets table says met or not for
each target, and no process or shared-memory ring is left behind.

It checks that the benchmarks work, not how fast anything is: a benchmark
never fails on timing.
"""
import json
import subprocess
import sys
from pathlib import Path

from harness import processes_with, shm_entries, wait_until

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = REPO / "benchmarks" / "workloads"


def _run(tmp_path, *args):
    out, work = tmp_path / "out", tmp_path / "work"
    shm_before = shm_entries()        # this test's rings only: other xdist workers make theirs
    proc = subprocess.run([sys.executable, "-m", "kafkalite", "bench", *map(str, args),
                           "--out", str(out), "--work-dir", str(work), "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    assert not any(work.iterdir())
    wait_until(lambda: not processes_with(str(work)) and not shm_entries() - shm_before, 10,
               lambda: f"no process or ring left: {processes_with(str(work))}, "
                       f"{shm_entries() - shm_before}", interval=0.1)
    return json.loads((out / "results.json").read_text()), (out / "results.md").read_text()


def test_backlog_workloads_report_fill_and_drain_rates(tmp_path):
    # 0.2% of each workload's 0.5 GB: 10,000 messages
    doc, md = _run(tmp_path, WORKLOADS / "backlog-1p-100b.yaml",
                   WORKLOADS / "backlog-1p-100b-large-fetch.yaml", "--scale", "0.002")
    for entry in doc["workloads"]:
        w = entry["workload"]
        assert w["backlog_gb"] == 0.001
        for r in entry["results"]:
            assert r["status"] == "ok", (r["driver"], r.get("reason"))
            assert r["sent"] == r["received"] == 10_000 and r["missing"] == 0, r
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
    doc, md = _run(tmp_path, WORKLOADS / "latency-10k-1kb.yaml", "--duration", "0.5",
                   "--warmup", "0.2", "--drivers", "kafkalite-zmq,kafkalite-shm,pyzmq")
    results = {r["driver"]: r for r in doc["workloads"][0]["results"]}
    assert set(results) == {"kafkalite-zmq", "kafkalite-shm", "pyzmq"}
    for name, r in results.items():
        assert r["status"] == "ok", (name, r.get("reason"))
        lat = r["e2e_latency_ms"]
        qs = [lat["p50"], lat["p99"], lat["p999"], lat["max"]]
        assert lat["count"] > 0 and qs == sorted(qs), (name, qs)
    assert "| kafkalite-zmq | end-to-end p99 | <= 1.00 ms |" in md
