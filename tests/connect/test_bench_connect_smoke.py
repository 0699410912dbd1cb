"""benchmarks/bench_connect.py runs end to end in its --quick setting and
writes every figure (it checks that the benchmark works, not how fast)."""
import json
import os
import subprocess
import sys

import pytest
from harness import child_env
from postgres import find_binaries

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_connect.py")


def test_bench_connect_quick(tmp_path):
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=child_env())
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["rows"] == 20_000 and doc["lines"] == 20_000
    assert set(doc["figures"]) == {"file_ceiling_lines_per_s", "connect_file_lines_per_s",
                                   "copy_to_rows_per_s", "connect_json_schemas_rows_per_s",
                                   "connect_json_schemaless_rows_per_s",
                                   "jdbc_source_ceiling_rows_per_s",
                                   "jdbc_sink_ceiling_rows_per_s", "connect_jdbc_sink_rows_per_s",
                                   "copy_to_parquet_rows_per_s",
                                   "connect_parquet_sink_rows_per_s"}
    assert all(v > 0 for v in doc["figures"].values())


def test_bench_connect_mirror_quick(tmp_path):
    """``--only mirror``: the MirrorSourceConnector between two servers and
    its ceiling (consume_batch + produce_batch) in the same run."""
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--only", "mirror", "--records",
                          "5000", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=child_env())
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["records"] == 5000
    assert set(doc["figures"]) == {"mirror_ceiling_records_per_s",
                                   "connect_mirror_records_per_s"}
    assert all(v > 0 for v in doc["figures"].values())
    assert "of the ceiling; target 0.5x" in out.stdout
