"""bench_share_groups.py runs end to end on a small run and writes its figures."""
import json
import os
import re
import subprocess
import sys

from harness import child_env

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks",
                      "bench_share_groups.py")


def test_bench_share_groups_small(tmp_path):
    temp = tmp_path / "temp"       # the run's TMPDIR: it must be left empty
    temp.mkdir()
    out = subprocess.run([sys.executable, SCRIPT, "--records", "3000", "--rounds", "1",
                          "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300,
                         env=child_env(TMPDIR=str(temp)))
    assert out.returncode == 0, out.stderr + out.stdout
    assert os.listdir(temp) == [], "the server's data directory was left behind"
    doc = json.loads((tmp_path / "results.json").read_text())
    assert len(doc["results"]["share_records_per_s"]) == 1
    assert doc["results"]["share_median"] > 0 and doc["results"]["classic_median"] > 0
    assert re.search(r"^median +[\d,]+ records/s +[\d,]+ records/s +classic group", out.stdout,
                     re.M), out.stdout
