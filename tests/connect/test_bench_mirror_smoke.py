"""benchmarks/bench_mirror.py runs end to end in its --quick setting and
writes every figure (it checks that the benchmark works, not how fast)."""
import json
import os
import subprocess
import sys

from harness import child_env

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "bench_mirror.py")


def test_bench_mirror_quick(tmp_path):
    out = subprocess.run([sys.executable, SCRIPT, "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=child_env())
    assert out.returncode == 0, out.stderr + out.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["records"] == 20_000
    assert set(doc["figures"]) == {"produce_ceiling_mb_per_s", "mirror_mb_per_s",
                                   "mirror_steady_mb_per_s"}
    assert all(v > 0 for v in doc["figures"].values())
