"""Smoke test of benchmarks/bench_spark.py: the --quick run completes,
exits 0 and writes every figure, the Markdown table and the plot.

It checks that the benchmark works, not how fast anything is: a benchmark
never fails on timing.
"""
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "benchmarks" / "bench_spark.py"

FIGURES = [f"{source}_{op}" for source in ("kafkalite", "ceiling", "parquet", "naive", "history",
                                               "history_source")
           for op in ("count", "group", "scan")] + ["iceberg_sink_kafka_format"] + [
    f"{source}_{op}_cpu" for source in ("kafkalite", "ceiling") for op in ("count", "scan")] + [
    "kafkalite_pushdown_count", "ceiling_pushdown_count"]
RATIOS = [f"kafkalite_vs_{peer}_{op}" for peer in ("ceiling", "parquet", "naive")
          for op in ("count", "group", "scan")] + [
    f"{h}_vs_parquet_{op}" for h in ("history", "history_source")
    for op in ("count", "group", "scan")]


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime")
def test_quick_run_writes_every_figure(tmp_path):
    out, work = tmp_path / "out", tmp_path / "work"
    proc = subprocess.run(
        # --quick's one round with a tenth of its records and two partitions:
        # Spark's start and first queries are most of the run
        [sys.executable, str(SCRIPT), "--quick", "--records", "4000", "--naive-records", "4000",
         "--sink-records", "4000", "--partitions", "2", "--keys", "20",
         "--output-dir", str(out), "--work-dir", str(work)],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"stdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-5000:]}"
    doc = json.loads((out / "results.json").read_text())
    figures = doc["figures"]
    for key in FIGURES + RATIOS:
        assert key in figures, f"{key} missing from results.json"
        assert figures[key]["value"] > 0, key
    for key in RATIOS:
        assert isinstance(doc["meets_target"][key], bool), key
    assert doc["machine"]["pyspark"]
    table = (out / "results.md").read_text()
    assert "kafkalite / parquet: group" in table and "naive: count()" in table
    assert "kafkalite: groupBy(key).count()" in proc.stdout
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert work.is_dir() and not any(work.iterdir()), "the data directory is removed"
