"""benchmarks/bench_connect.py's CDC part (``--only cdc``) runs end to end in
its --quick setting and writes its figures (it checks that the benchmark
works, not how fast)."""
import json
import os
import subprocess
import sys

import pytest
from harness import child_env
from postgres import find_binaries

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_connect.py")


def test_bench_connect_cdc_quick(tmp_path):
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--only", "cdc", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=300,
                         env=child_env())
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["changes"] == 10_000
    assert set(doc["figures"]) == {"connect_cdc_changes_per_s", "cdc_ceiling_changes_per_s"}
    assert all(v > 0 for v in doc["figures"].values())
    assert "target 20,000 changes/s" in out.stdout
