"""Smoke test of benchmarks/bench_sql.py: the --quick run completes, exits 0,
checks the topic's answers equal Parquet's and prints every figure side by
side (it checks that the benchmark works, not how fast anything is)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.bench_smoke


def test_a_quick_run_reports_every_figure(tmp_path):
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_sql.py"), "--quick",
                        "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads(out.read_text())
    for name in ("count", "group_by"):
        for side in ("topic", "parquet"):
            assert len(figures[f"{name}_{side}_s"]) == 1
        assert f"{name} over 20,000 records" in r.stdout
    assert "DuckDB over Parquet" in r.stdout and "point lookup by key" in r.stdout


def test_a_quick_run_over_avro_columns_reports_every_figure():
    # --avro: the values through the registry, the queries over their columns
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_sql.py"), "--quick",
                        "--avro"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for name in ("count", "group_by"):
        assert f"{name} over 20,000 records (Avro columns)" in r.stdout


def test_a_quick_run_over_an_iceberg_topic_reports_every_figure(tmp_path):
    # --iceberg: the topic's table's files, beside its log read and Parquet
    pytest.importorskip("pyiceberg")
    out = tmp_path / "figures.json"
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_sql.py"), "--quick",
                        "--iceberg", "--json", str(out)], capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    figures = json.loads(out.read_text())
    for name in ("count", "group_by", "count_all"):
        for side in ("topic", "parquet", "log"):
            assert len(figures[f"{name}_{side}_s"]) == 1
        assert f"{name} over 20,000 records, Iceberg table's files" in r.stdout
        assert f"{name}, the same topic's log read" in r.stdout
