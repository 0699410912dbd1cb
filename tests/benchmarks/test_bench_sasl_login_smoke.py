"""Smoke test of benchmarks/bench_sasl_login.py: a short run logs in with
PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512, exits 0 and prints a figure for
each beside PLAIN's. It checks that the benchmark works, not how fast
anything is."""
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_short_run_prints_every_mechanism(tmp_path):
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_sasl_login.py"),
                        "--seconds", "0.3", "--rounds", "1"],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    # "<mechanism> login  <ms> ms  <PLAIN's ms> ms  PLAIN  <ratio>x": the login time beside PLAIN's
    rows = {line.split()[0]: line.split() for line in r.stdout.splitlines()
            if line.startswith(("PLAIN", "SCRAM-")) and line.split()[1] == "login"}
    assert set(rows) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
    assert all(float(row[2]) > 0 and row[-1].endswith("x") for row in rows.values())
    assert rows["PLAIN"][-1] == "1.00x"
