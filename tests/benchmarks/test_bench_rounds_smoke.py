"""``kafkalite bench --rounds 2 --warm-memory 64M`` on the latency workload
(issue 46): every driver runs once a round, the driver going first rotated
a round, each run with the machine's state over it in results.json and in
results.md; the memory warmed before the first run is recorded; and
tools/performance-table turns that results.json into the headline table of
a copy of docs/performance.md, between its markers and nowhere else.

One tiny real run (two drivers, 0.3 s measured) shared by the module's
tests. It checks that the figures are recorded, never how fast anything is.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness import processes_with, wait_until

REPO = Path(__file__).resolve().parents[2]
WORKLOAD = REPO / "benchmarks" / "workloads" / "latency-10k-1kb.yaml"
DRIVERS = ["file-append", "pyzmq"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    base = tmp_path_factory.mktemp("rounds")
    out, work = base / "out", base / "work"
    proc = subprocess.run([sys.executable, "-m", "kafkalite", "bench", str(WORKLOAD),
                           "--rounds", "2", "--warm-memory", "64M",
                           "--drivers", ",".join(DRIVERS), "--duration", "0.3",
                           "--warmup", "0.1", "--out", str(out), "--work-dir", str(work),
                           "--no-progress"],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    wait_until(lambda: not processes_with(str(work)), 10,
               lambda: f"no process left: {processes_with(str(work))}", interval=0.1)
    return {"doc": json.loads((out / "results.json").read_text()),
            "md": (out / "results.md").read_text(), "stderr": proc.stderr,
            "json": out / "results.json", "base": base}


def test_two_rounds_run_every_driver_twice_in_turns(run):
    doc = run["doc"]
    entry = doc["workloads"][0]
    assert doc["rounds"] == 2
    assert entry["round_orders"] == [DRIVERS, DRIVERS[::-1]]
    runs = [(r["round"], r["driver"]) for r in entry["results"]]
    assert runs == [(0, "file-append"), (0, "pyzmq"), (1, "pyzmq"), (1, "file-append")]
    assert all(r["status"] == "ok" and r["consume_rate"] > 0 for r in entry["results"])
    # results.md: a row per run and the median (lowest-highest) over the rounds
    assert "| pyzmq (round 2) |" in run["md"]
    rows = [line for line in run["md"].splitlines() if line.startswith("| file-append | 2 |")]
    assert len(rows) == 1 and rows[0].count("(") == 3, rows


def test_each_run_records_the_machine_state_over_it(run):
    for r in run["doc"]["workloads"][0]["results"]:
        m = r["machine"]
        assert m["seconds"] > 0
        assert len(m["load_average_start"]) == 3 and len(m["load_average_end"]) == 3
        assert 0 <= m["steal_pct"] <= 100 and 0 <= m["iowait_pct"] <= 100
        # a server and its clients started: pages were faulted in
        assert m["pgfault"] > 0 and m["faulted_bytes"] >= m["pgfault"] * 4096
        assert m["pgmajfault"] >= 0
        assert m["MemAvailable_start"] > 0 and m["MemFree_end"] > 0
    machine_lines = [line for line in run["md"].splitlines()
                     if line.startswith("- pyzmq (round ") and "faulted in" in line]
    assert len(machine_lines) == 2, run["md"]
    assert run["stderr"].count("machine: load ") == 4, run["stderr"]


def test_each_run_records_its_clients_collector_pauses(run):
    for r in run["doc"]["workloads"][0]["results"]:
        for role in ("producers", "consumers"):
            st = r["client_gc"][role]
            assert st["processes"] == 1, st
            assert st["collections"] >= st["full"] >= 0, st
            assert st["paused_ms"] >= st["longest_ms"] >= 0, st
    gc_lines = [line for line in run["md"].splitlines()
                if line.startswith("- pyzmq (round ") and "producers' collector: longest pause" in line]
    assert len(gc_lines) == 2, run["md"]


def test_warmed_memory_is_recorded(run):
    warmed = run["doc"]["machine"]["warm_memory"]
    assert warmed["bytes"] == 64 << 20 and warmed["ok"] and warmed["seconds"] > 0
    assert "64.00 MiB of memory warmed before the first run" in run["md"]


def test_performance_table_rewrites_the_headline_between_its_markers(run):
    original = (REPO / "docs" / "performance.md").read_text()
    page = run["base"] / "performance.md"
    page.write_text(original)
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "performance-table"),
                           str(run["json"]), "--page", str(page)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "2 round(s), not 3" in proc.stderr
    text = page.read_text()
    start, end = "<!-- headline:start -->", "<!-- headline:end -->"
    head, rest = text.split(start)
    block, tail = rest.split(end)
    assert head == original.split(start)[0] and tail == original.split(end)[1]
    assert run["doc"]["command"] in block           # the command that reproduces it
    assert f"tools/performance-table {run['json']}" in block
    prose = " ".join(block.split())        # the paragraph is wrapped
    assert "2 round(s) of every driver" in prose and "faulted in a run" in prose
    rows = {line.split(" | ")[0]: line for line in block.splitlines()
            if line.startswith("| file-append") or line.startswith("| pyzmq")}
    assert set(rows) == {"| file-append", "| pyzmq"}
    for line in rows.values():     # median (lowest-highest) of consume, p50 and p99
        assert line.count("(") == 3 and "msg/s; e2e p50" in line, line
    # a page without markers is refused, not rewritten
    bare = run["base"] / "bare.md"
    bare.write_text("# no markers\n")
    proc = subprocess.run([sys.executable, str(REPO / "tools" / "performance-table"),
                           str(run["json"]), "--page", str(bare)],
                          cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "headline:start" in proc.stderr
    assert bare.read_text() == "# no markers\n"
