"""The Iceberg sink's table read back in PySpark (the session's Spark,
tests/spark/conftest.py): a topic copied by the sink in a Connect worker,
and spark.read.parquet over the data files of the table's scan plan (what
an Iceberg reader reads of a table without deletes: tests/connect/
test_connect_iceberg.py says why not through Spark's Iceberg runtime) gives
the topic's rows."""
import datetime as dt
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "connect"))
from connect_helpers import Connect  # noqa: E402
from harness import create, wait_until  # noqa: E402
from test_connect_iceberg import (catalog, produce_rows, sink_config, table_rows,  # noqa: E402
                                  topic_rows)

pytest.importorskip("pyiceberg")


def test_iceberg_table_reads_back_in_pyspark(spark, server, topic_name, tmp_path):
    create(server, topic_name, 2)
    produce_rows(server, topic_name, range(120))
    cat = catalog(tmp_path)     # the catalog's tables made before the sink's catalog opens it
    connect = Connect(server, offset_file=tmp_path / "offsets.json")
    try:
        connect.create(f"sink-{topic_name}", **sink_config(tmp_path, topic_name, "lake.spark"))
        wait_until(lambda: len(table_rows(cat, "lake.spark")) >= 120, timeout=60,
                   message="120 rows")
    finally:
        connect.close()
    files = [t.file.file_path for t in cat.load_table("lake.spark").scan().plan_files()]
    df = spark.read.parquet(*files)
    got = sorted((r["__kafka_partition"], r["__kafka_offset"], r["id"], r["name"], r["amount"],
                  int(r["at"].replace(tzinfo=dt.timezone.utc).timestamp() * 1000))
                 for r in df.collect())
    assert got == topic_rows(server, topic_name, 120)
