"""Iceberg topics end to end (Redpanda's ``iceberg.mode``): a topic created
with ``iceberg.mode=key_value`` on the shared server, records produced by
confluent-kafka (keys, headers, a tombstone, an aborted and a committed
transaction), and the table the partition leaders keep read back with
pyiceberg and DuckDB: every record a read_committed consumer sees, once,
with its key, value, timestamp and headers. The configs' refusals, and
the checker the kill test (test_iceberg_topics_kills.py) relies on, shown
to catch a planted duplicate and a planted loss."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import urllib.request

import boto3
import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from harness import ServerProcess, child_env, stop_server, wait_until
from moto_s3 import moto_s3_server

pytest.importorskip("pyiceberg")

from iceberg_tables import (check_exactly_once, duckdb_rows, load_table,  # noqa: E402
                            pyiceberg_rows, table_offsets, topic_rows)
from kafkalite.storage.iceberg.topic_table import committed_offsets  # noqa: E402

INVALID_CONFIG = ck.KafkaError.INVALID_CONFIG


def _create(server, topic, partitions=2, **configs):
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1, config=configs)])[topic].result(30)
    return admin


def _ends(server, topic, partitions):
    consumer = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": topic})
    try:
        return {p: consumer.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}
    finally:
        consumer.close()


def _produce(server, topic, count):
    producer = ck.Producer({"bootstrap.servers": server.kafka_bootstrap,
                            "enable.idempotence": True, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, b"value-%d" % i, key=b"key-%d" % (i % 7), partition=i % 2,
                         headers=[("n", b"%d" % i)] if i % 3 == 0 else None)
    producer.produce(topic, None, key=b"gone", partition=0)        # a tombstone
    producer.produce(topic, b"no key", partition=1)
    assert producer.flush(30) == 0


def _transaction(server, topic, commit: bool, tid: str):
    producer = ck.Producer({"bootstrap.servers": server.kafka_bootstrap,
                            "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    for p in (0, 1):
        producer.produce(topic, b"txn %s" % (b"kept" if commit else b"aborted"), partition=p)
    producer.flush(30)
    (producer.commit_transaction if commit else producer.abort_transaction)(30)


def test_a_key_value_topic_is_kept_as_an_iceberg_table_exactly_once(server, topic_name):
    _create(server, topic_name, **{"iceberg.mode": "key_value",
                                   "iceberg.target.lag.ms": "200", "segment.bytes": "8192"})
    _produce(server, topic_name, 400)
    _transaction(server, topic_name, False, f"{topic_name}-a")
    _transaction(server, topic_name, True, f"{topic_name}-c")
    _produce(server, topic_name, 10)       # the log ends on records, not a marker
    ends = _ends(server, topic_name, 2)
    wait_until(lambda: table_offsets(server.data_dir, topic_name) == ends, 60,
               lambda: f"the table's offsets {table_offsets(server.data_dir, topic_name)} "
                       f"short of the log's {ends}")
    topic = topic_rows(server.kafka_bootstrap, topic_name, ends)
    # 400 + 10 records, a tombstone and a keyless one each time, the committed transaction's
    # two: not the aborted one's
    assert len(topic) == 410 + 2 * 2 + 2
    table = pyiceberg_rows(server.data_dir, topic_name)
    assert check_exactly_once(table, topic) == []
    assert not [r for r in table if r[4] == b"txn aborted"]
    duck = duckdb_rows(server.data_dir, topic_name)
    if duck is not None:
        assert sorted(duck) == sorted(table)


def test_the_checker_catches_a_planted_duplicate_and_a_planted_loss():
    topic = [(p, o, 1_700_000_000_000 + o, b"k", b"v%d" % o, ()) for p in (0, 1)
             for o in range(50)]
    assert check_exactly_once(list(topic), topic) == []
    duplicated = topic + [topic[17]]
    assert any("more than once" in p for p in check_exactly_once(duplicated, topic))
    lost = topic[:30] + topic[31:]
    assert any("not in the table" in p for p in check_exactly_once(lost, topic))
    changed = topic[:5] + [topic[5][:4] + (b"other",) + topic[5][5:]] + topic[6:]
    assert any("differ" in p for p in check_exactly_once(changed, topic))


def test_iceberg_mode_is_described_and_other_modes_are_refused(server, topic_name):
    admin = _create(server, topic_name, 1, **{"iceberg.mode": "key_value"})
    described = admin.describe_configs([ConfigResource("topic", topic_name)])
    entries = list(described.values())[0].result(30)
    assert entries["iceberg.mode"].value == "key_value"
    assert entries["iceberg.target.lag.ms"].value == "60000"
    for i, (mode, why) in enumerate((("value_schema_latest:subject=", "unknown option"),
                                     ("key_value:subject=s", "takes no options"),
                                     ("json", "supports off"))):
        with pytest.raises(ck.KafkaException) as exc:
            _create(server, f"{topic_name}-{i}", 1, **{"iceberg.mode": mode})
        assert exc.value.args[0].code() == INVALID_CONFIG
        assert why in exc.value.args[0].str(), exc.value.args[0].str()
    with pytest.raises(ck.KafkaException) as exc:
        _create(server, f"{topic_name}-lag", 1, **{"iceberg.target.lag.ms": "0"})
    assert exc.value.args[0].code() == INVALID_CONFIG


@pytest.mark.processes
def test_key_value_is_refused_where_pyiceberg_cannot_be_imported():
    """The controller checks a topic's configs (config_registry); without
    pyiceberg there it refuses key_value, naming what is missing."""
    code = textwrap.dedent("""
        import sys
        sys.modules["pyiceberg"] = None          # what an install without it gives
        from kafkalite import errors
        from kafkalite.server.config_registry import check_topic_configs
        from kafkalite.storage.config import LogConfig
        check_topic_configs({"iceberg.mode": "off"}, LogConfig())
        try:
            check_topic_configs({"iceberg.mode": "key_value"}, LogConfig())
        except errors.InvalidConfigurationError as exc:
            print(exc.code, exc.message)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=child_env(), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"{INVALID_CONFIG} ")
    assert "need pyiceberg" in out.stdout and "cannot import pyiceberg" in out.stdout


@pytest.mark.processes
def test_a_tiered_iceberg_topic_keeps_its_table_files_in_the_remote_store(tmp_path):
    """With tiered storage in a directory, the table's files go to that
    store; the catalog stays in the data directory."""
    remote = tmp_path / "remote"
    config = tmp_path / "tiered.toml"
    config.write_text('"remote.log.storage.system.enable" = true\n'
                      f'remote_log_storage_dir = "{remote}"\n')
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(config)]).start()
    try:
        topic = "tiered-events"
        _create(srv, topic, **{"iceberg.mode": "key_value", "iceberg.target.lag.ms": "200",
                               "remote.storage.enable": "true", "segment.bytes": "8192"})
        _produce(srv, topic, 300)
        ends = _ends(srv, topic, 2)
        wait_until(lambda: table_offsets(srv.data_dir, topic) == ends, 60,
                   lambda: f"the table's offsets {table_offsets(srv.data_dir, topic)} "
                           f"short of the log's {ends}")
        table = pyiceberg_rows(srv.data_dir, topic)
        assert check_exactly_once(table, topic_rows(srv.kafka_bootstrap, topic, ends)) == []
        parquet = list((remote / "iceberg").rglob("*.parquet"))
        assert parquet, f"no data file under {remote / 'iceberg'}"
        assert not list((tmp_path / "data" / "iceberg").rglob("*.parquet"))
    finally:
        stop_server(srv)


@pytest.mark.processes
def test_a_tiered_iceberg_topic_keeps_its_table_files_in_the_s3_bucket(tmp_path):
    """With tiered storage in S3 (moto's server), the table's data and
    metadata files are objects in the store's bucket under ``iceberg/``,
    nothing under the data directory; pyiceberg reads the table through
    the server's REST catalog, which hands it the bucket's endpoint (the
    reader has no other way to know it: its environment has moto's
    credentials only), and every offset comes back once."""
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    with moto_s3_server("tiered-iceberg") as s3:
        config = tmp_path / "tiered.toml"
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          'remote_log_storage_s3_bucket = "tiered-iceberg"\n'
                          f'remote_log_storage_s3_endpoint = "{s3.endpoint}"\n')
        srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(config)]).start()
        try:
            topic = "tiered-events"
            _create(srv, topic, **{"iceberg.mode": "key_value", "iceberg.target.lag.ms": "200",
                                   "remote.storage.enable": "true", "segment.bytes": "8192"})
            _produce(srv, topic, 300)
            ends = _ends(srv, topic, 2)
            catalog = load_catalog("kafkalite", type="rest", uri=srv.info["iceberg_rest"])

            def committed():
                try:
                    table = catalog.load_table(("kafkalite", topic))
                except NoSuchTableError:
                    return None
                return table if committed_offsets(table) == ends else None
            wait_until(committed, 60, lambda: f"the table short of the log's {ends}")
            table = committed()
            assert table.metadata_location.startswith("s3://tiered-iceberg/iceberg/")
            # what LoadTable hands the reader: the endpoint and region, no credential
            # (the server's environment has moto's, as a broker's would have its own)
            url = f"{srv.info['iceberg_rest']}/v1/namespaces/kafkalite/tables/{topic}"
            with urllib.request.urlopen(url, timeout=30) as answer:
                assert json.load(answer)["config"] == {"s3.endpoint": s3.endpoint,
                                                       "s3.region": "us-east-1"}
            rows = [_table_row(r) for r in table.scan().to_arrow().to_pylist()]
            assert check_exactly_once(rows, topic_rows(srv.kafka_bootstrap, topic, ends)) == []

            # the files the snapshot names are objects of the bucket
            keys = {o["Key"] for page in boto3.client("s3", endpoint_url=s3.endpoint)
                    .get_paginator("list_objects_v2").paginate(Bucket="tiered-iceberg")
                    for o in page.get("Contents", ())}
            data_files = {t.file.file_path for t in table.scan().plan_files()}
            assert data_files and all(p.endswith(".parquet") for p in data_files)
            assert data_files <= {f"s3://tiered-iceberg/{k}" for k in keys}
            assert table.metadata_location.removeprefix("s3://tiered-iceberg/") in keys
            assert not list((tmp_path / "data").rglob("*.parquet"))
            assert not list((tmp_path / "data").rglob("*.metadata.json"))
        finally:
            stop_server(srv)


@pytest.mark.processes
def test_iceberg_warehouse_dir_wins_over_the_s3_store_on_a_single_node(tmp_path):
    """An explicit iceberg_warehouse_dir is where the files go, on one node
    too (its workers once ignored it), even with the S3 store there."""
    from kafkalite.storage.iceberg.topic_table import open_catalog
    warehouse = tmp_path / "warehouse"
    with moto_s3_server("warehouse-dir-wins") as s3:
        config = tmp_path / "tiered.toml"
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          'remote_log_storage_s3_bucket = "warehouse-dir-wins"\n'
                          f'remote_log_storage_s3_endpoint = "{s3.endpoint}"\n'
                          f'iceberg_warehouse_dir = "{warehouse}"\n')
        srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(config)]).start()
        try:
            topic = "dir-events"
            _create(srv, topic, **{"iceberg.mode": "key_value", "iceberg.target.lag.ms": "200"})
            _produce(srv, topic, 100)
            ends = _ends(srv, topic, 2)
            wait_until(lambda: table_offsets(srv.data_dir, topic) == ends, 60,
                       lambda: f"the table's offsets {table_offsets(srv.data_dir, topic)} "
                               f"short of the log's {ends}")
            table = open_catalog(str(tmp_path / "data" / "iceberg")).load_table(
                ("kafkalite", topic))
            assert table.metadata_location.startswith(f"file://{warehouse}/")
            assert list(warehouse.rglob("*.parquet"))
            listed = boto3.client("s3", endpoint_url=s3.endpoint).list_objects_v2(
                Bucket="warehouse-dir-wins", Prefix="iceberg/")
            assert listed["KeyCount"] == 0
        finally:
            stop_server(srv)


def _table_row(r: dict) -> tuple:
    rp = r["redpanda"]
    return (rp["partition"], rp["offset"], int(rp["timestamp"].timestamp() * 1000), rp["key"],
            r["value"], tuple((h["key"], h["value"]) for h in rp["headers"]))


def test_redpandas_iceberg_topic_properties_are_taken_as_aliases(server, topic_name):
    """A topic created for Redpanda (its four redpanda.iceberg.* configs)
    by a Kafka admin client: an Iceberg topic as with kafkalite's names,
    described under the names given, its table partitioned by the spec
    given (pyiceberg shows it); Redpanda's ``disabled`` is off. (Refused
    as unknown before.)"""
    spec = "(day(redpanda.timestamp), bucket(4, redpanda.key))"
    admin = _create(server, topic_name, 2, **{
        "redpanda.iceberg.mode": "key_value", "redpanda.iceberg.target.lag.ms": "200",
        "redpanda.iceberg.partition.spec": spec,
        "redpanda.iceberg.invalid.record.action": "drop"})
    entries = list(admin.describe_configs([ConfigResource("topic", topic_name)])
                   .values())[0].result(30)
    assert entries["redpanda.iceberg.mode"].value == "key_value"
    assert entries["redpanda.iceberg.target.lag.ms"].value == "200"
    assert entries["redpanda.iceberg.partition.spec"].value == spec
    assert entries["redpanda.iceberg.invalid.record.action"].value == "drop"
    assert entries["iceberg.mode"].value == "key_value"
    assert entries["iceberg.target.lag.ms"].value == "200"
    assert entries["iceberg.partition.spec"].value == spec
    _produce(server, topic_name, 50)
    ends = _ends(server, topic_name, 2)
    wait_until(lambda: table_offsets(server.data_dir, topic_name) == ends, 60,
               "the records in the topic's table")
    fields = load_table(server.data_dir, topic_name).spec().fields
    assert [(f.name, str(f.transform)) for f in fields] == [
        ("redpanda_timestamp_day", "day"), ("redpanda_key_bucket", "bucket[4]")]
    _create(server, f"{topic_name}-off", 1, **{"redpanda.iceberg.mode": "disabled"})
    entries = list(admin.describe_configs([ConfigResource("topic", f"{topic_name}-off")])
                   .values())[0].result(30)
    assert entries["iceberg.mode"].value == "off"
    for i, configs in enumerate(({"redpanda.iceberg.mode": "json"},
                                 {"redpanda.iceberg.mode": "key_value", "iceberg.mode": "off"},
                                 {"redpanda.iceberg.partition.spec": "(hour(redpanda.key))"},
                                 {"redpanda.iceberg.invalid.record.action": "keep"})):
        with pytest.raises(ck.KafkaException) as exc:
            _create(server, f"{topic_name}-{i}", 1, **configs)
        assert exc.value.args[0].code() == INVALID_CONFIG
