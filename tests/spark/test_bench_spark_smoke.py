"""Smoke tests of benchmarks/bench_spark.py (the --quick run completes,
returns 0 and writes every figure, the Markdown table and the plot) and
benchmarks/bench_spark_iceberg.py (its --quick run reads the Iceberg topic
both ways, each answer checked by the script).

It runs the benchmark's main in this process, in the Spark tests' shared
session (the fixture ``spark``): run as a script, it started a JVM of its
own, and with its Python workers' first start that was half of its two
minutes. The benchmark leaves a running session alone (its confs, and
running: it stops only a session it started); the test checks that the
session still answers and that the confs the other Spark tests rely on
are as they were.

It checks that the benchmark works, not how fast anything is: a benchmark
never fails on timing.
"""
import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
BENCHMARKS = REPO / "benchmarks"

FIGURES = [f"{source}_{op}" for source in ("kafkalite", "ceiling", "parquet", "naive", "history",
                                               "history_source")
           for op in ("count", "group", "scan")] + ["iceberg_sink_kafka_format"] + [
    f"{source}_{op}_cpu" for source in ("kafkalite", "ceiling") for op in ("count", "scan")] + [
    "kafkalite_pushdown_count", "ceiling_pushdown_count"]
RATIOS = [f"kafkalite_vs_{peer}_{op}" for peer in ("ceiling", "parquet", "naive")
          for op in ("count", "group", "scan")] + [
    f"{h}_vs_parquet_{op}" for h in ("history", "history_source")
    for op in ("count", "group", "scan")]
# the benchmark's own modules, imported as a script imports them (benchmarks/
# on sys.path): taken out again afterwards, so that no later test in this
# process finds a "common" or "report" it did not import
SCRIPT_MODULES = ("common", "report")


def _script(monkeypatch, name: str):
    """benchmarks/<name>.py as a module, loaded as the script runs (its
    directory on sys.path), its environment and modules put back after."""
    # the script sets these for the Spark workers it would start; the test
    # process keeps its own
    for var in ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYTHONPATH"):
        monkeypatch.setenv(var, os.environ.get(var, ""))
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    saved = {m: sys.modules.pop(m) for m in SCRIPT_MODULES if m in sys.modules}
    try:
        spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        for m in SCRIPT_MODULES:
            sys.modules.pop(m, None)
        sys.modules.update(saved)


@pytest.fixture
def bench_spark(monkeypatch):
    yield from _script(monkeypatch, "bench_spark")


@pytest.fixture
def bench_spark_iceberg(monkeypatch):
    yield from _script(monkeypatch, "bench_spark_iceberg")


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime")
def test_quick_run_writes_every_figure(spark, bench_spark, tmp_path, capsys):
    confs = {key: spark.conf.get(key) for key in (
        "spark.sql.shuffle.partitions", "spark.sql.session.timeZone",
        "spark.sql.python.filterPushdown.enabled")}
    out, work = tmp_path / "out", tmp_path / "work"
    # --quick's one round with a tenth of its records and two partitions:
    # Spark's first queries are most of the run
    code = bench_spark.main(["--quick", "--records", "4000", "--naive-records", "4000",
                             "--sink-records", "4000", "--partitions", "2", "--keys", "20",
                             "--output-dir", str(out), "--work-dir", str(work)])
    stdout, stderr = capsys.readouterr()
    assert code == 0, f"stdout:\n{stdout}\nstderr:\n{stderr[-5000:]}"
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
    assert "kafkalite: groupBy(key).count()" in stdout
    if importlib.util.find_spec("matplotlib") is not None:
        assert (out / "results.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert work.is_dir() and not any(work.iterdir()), "the data directory is removed"
    # the shared session outlives the run, as the Spark tests left it
    assert {key: spark.conf.get(key) for key in confs} == confs
    assert spark.range(3).count() == 3
    assert not spark.catalog.listTables(), "the run left a table or view behind"


@pytest.mark.skipif(shutil.which("java") is None, reason="Spark needs a Java runtime")
def test_iceberg_quick_run_reads_the_table_both_ways(spark, bench_spark_iceberg, tmp_path,
                                                     capsys):
    """The script checks each reader's answer against the records it
    produced (it raises otherwise) and prints each query's ratio."""
    code = bench_spark_iceberg.main(["--quick", "--partitions", "2",
                                     "--work-dir", str(tmp_path)])
    stdout, stderr = capsys.readouterr()
    assert code == 0, f"stdout:\n{stdout}\nstderr:\n{stderr[-5000:]}"
    assert "20,000 records of 100 B over 2 partitions" in stdout
    for query in ("count", "groupBy(key).count()", "scan sum(length(value))"):
        assert f"  {query}" in stdout and f"{query}: " in stdout, query
    assert not any(tmp_path.iterdir()), "the data directory is removed"
    assert spark.range(3).count() == 3      # the shared session outlives the run
