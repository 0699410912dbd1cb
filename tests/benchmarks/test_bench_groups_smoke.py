"""bench_groups.py runs end to end in its --quick setting and writes its report."""
import json
import os
import subprocess
import sys

from harness import child_env

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_groups.py")


def test_bench_groups_quick(tmp_path):
    temp = tmp_path / "temp"       # the run's TMPDIR: it must be left empty
    temp.mkdir()
    # --quick's group sizes with fewer records (--quick sets 50,000)
    out = subprocess.run([sys.executable, SCRIPT, "--members", "2", "--records", "5000",
                          "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300,
                         env=child_env(TMPDIR=str(temp)))
    assert out.returncode == 0, out.stderr + out.stdout
    assert os.listdir(temp) == [], "the server's data directory was left behind"
    doc = json.loads((tmp_path / "results.json").read_text())
    assert {(r["members_before"], r["strategy"]) for r in doc["results"]["rebalance"]} == {
        (n, s) for n in (1, 2) for s in ("range", "cooperative-sticky")}
    assert all(r["seconds"] is not None for r in doc["results"]["rebalance"])
    assert [r["members"] for r in doc["results"]["throughput"]] == [1, 4]
    assert all(r["records"] == 5_000 for r in doc["results"]["throughput"][:1])
    assert (tmp_path / "results.md").read_text().count("|") > 10
    assert (tmp_path / "rebalance.png").stat().st_size > 0
