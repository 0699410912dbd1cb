"""benchmarks/bench_connect_iceberg.py runs end to end in its --quick
setting and writes every figure, the format rounds' (JSON with schema,
schemaless JSON, Avro through the registry) included (it checks that the
benchmark works, not how fast)."""
import json
import os
import subprocess
import sys

import pytest
from harness import child_env
from postgres import find_binaries

pytest.importorskip("pyiceberg")
pytestmark = pytest.mark.bench_smoke
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks",
                      "bench_connect_iceberg.py")


def test_bench_connect_iceberg_quick(tmp_path):
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--output-dir", str(tmp_path),
                          "--work-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=child_env())
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["settings"]["rows"] == 20_000
    rounds = {f"iceberg_{fmt}_round1_{kind}" for fmt in ("json", "schemaless", "avro")
              for kind in ("ratio", "cpu_ratio")}
    assert set(doc["figures"]) == {"copy_to_parquet_rows_per_s",
                                   "connect_pg_to_iceberg_rows_per_s",
                                   "connect_topic_to_iceberg_rows_per_s",
                                   "pyiceberg_append_rows_per_s",
                                   "connect_sink_to_append_ratio"} | rounds
    assert all(f["value"] > 0 for f in doc["figures"].values())


def test_bench_connect_iceberg_lag_quick(tmp_path):
    """benchmarks/bench_connect_iceberg_lag.py runs in its --quick setting
    and prints the round's commit lag (the table's and the group's)."""
    script = os.path.join(os.path.dirname(SCRIPT), "bench_connect_iceberg_lag.py")
    out = subprocess.run([sys.executable, script, "--quick", "--work-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=child_env())
    assert out.returncode == 0, out.stderr + out.stdout
    line = next(x for x in out.stdout.splitlines() if x.startswith("round 1:"))
    assert "table lag median" in line and "group lag median" in line, out.stdout
    assert "table lag median -" not in line, out.stdout
