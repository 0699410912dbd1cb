"""Smoke test of benchmarks/bench_sql_windowed.py: the --quick run completes,
exits 0 and prints every figure of the three applications side by side (it
checks that the benchmark works, not how fast anything is)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench_smoke


def test_a_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_sql_windowed.py"),
                        "--quick", "--json", str(out)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads(out.read_text())
    for side in ("dsl", "sql", "sql_expr"):
        for figure in ("records_per_s", "app_cpu_us_per_record", "server_cpu_us_per_record"):
            assert len(figures[f"{side}_{figure}"]) == 1 and figures[f"{side}_{figure}"][0] > 0
    assert "windowed count per key, 20,000 records" in r.stdout
    assert "Streams DSL columnar" in r.stdout
