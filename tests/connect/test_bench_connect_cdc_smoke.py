"""benchmarks/bench_connect.py's CDC and JDBC upsert parts (``--only
cdc,upsert``) run end to end in their --quick setting (one round) and write
each pipeline's figures beside its ceiling's (it checks that the benchmark
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
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--only", "cdc,upsert", "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=300,
                         env=child_env())
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["changes"] == 6_000
    [cdc] = doc["figures"]["cdc"]["rounds"]
    [upsert] = doc["figures"]["upsert"]["rounds"]
    for figures, pipelines in ((cdc, ("snapshot", "streaming")), (upsert, ("upsert",))):
        for name in pipelines:
            for side in (name, name + "_ceiling"):
                assert figures[f"{side}_per_s"] > 0 and figures[f"{side}_cpu_us"] > 0
    assert out.stdout.count("(target 0.5x)") == 3
