"""Topic name rules, metadata persistence, and server config loading."""
import json

import pytest

from kafkalite.errors import (InvalidConfigurationError, InvalidPartitionsError, InvalidTopicError,
                              TopicAlreadyExistsError)
from kafkalite.server.config import ServerConfig
from kafkalite.server.controller.metadata import MetadataStore
from kafkalite.server.topic import validate_topic_name


@pytest.mark.parametrize("name,why", [
    ("", "non-empty"), (".", "cannot be"), ("..", "cannot be"), ("a" * 250, "249"),
    ("has space", "' '"), ("ümlaut", "only ASCII"), ("slash/x", "'/'"), (None, "string")])
def test_bad_topic_names(name, why):
    with pytest.raises(InvalidTopicError, match=why):
        validate_topic_name(name)


def test_good_topic_names():
    for name in ("a", "a" * 249, "Orders_v2.eu-west-1", "...", "__internal"):
        assert validate_topic_name(name) == name


def test_metadata_survives_a_reload_and_epochs_only_grow(tmp_path):
    store = MetadataStore(str(tmp_path))
    topic = store.create_topic("orders", 4, {"retention.ms": "1000"}, workers=2)
    assert {p.leader for p in topic.partitions} == {0, 1}
    with pytest.raises(TopicAlreadyExistsError):
        store.create_topic("orders", 1, {}, 2)
    with pytest.raises(InvalidPartitionsError):
        store.add_partitions("orders", 3, 2)
    assert store.add_partitions("orders", 6, 2) == [4, 5]
    started = store.start_leadership(0)
    again = MetadataStore(str(tmp_path))
    assert again.cluster_id == store.cluster_id
    t = again.get("orders")
    assert len(t.partitions) == 6 and t.configs == {"retention.ms": "1000"}
    assert all(again.get(name).partitions[p].leader_epoch == e for name, p, e in started)
    assert again.rebalance(1) > 0 and all(p.leader == 0 for p in again.get("orders").partitions)


def test_the_metadata_offset_counts_changes_and_only_grows(tmp_path, monkeypatch):
    """The metadata log's end offset (DescribeQuorum's high watermark): one
    per change made durable, kept across a reload, across the snapshot that
    empties the change log, and across a broker-config change (a snapshot)."""
    store = MetadataStore(str(tmp_path))
    start = store.offset
    assert start == 0                                   # nothing written yet
    store.create_topic("orders", 2, {}, workers=2)
    store.set_configs("orders", {"retention.ms": "1000"})
    assert store.offset == start + 2
    assert MetadataStore(str(tmp_path)).offset == start + 2
    store.set_broker_configs("", {"log.retention.ms": "5000"})
    assert store.offset == start + 3 and MetadataStore(str(tmp_path)).offset == start + 3
    # changes until the log outgrows the snapshot and a new snapshot empties it
    monkeypatch.setattr("kafkalite.server.controller.metadata.MIN_COMPACTION_BYTES", 0)
    changes = 0
    while changes == 0 or (tmp_path / "cluster-metadata.log").stat().st_size:
        store.set_configs("orders", {"retention.ms": str(changes)})
        changes += 1
    assert changes > 1
    assert store.offset == start + 3 + changes
    assert MetadataStore(str(tmp_path)).offset == start + 3 + changes


def test_a_version_1_metadata_file_is_read_and_rewritten_as_version_2(tmp_path):
    # what servers before replicas and ISRs in the metadata wrote
    (tmp_path / "cluster-metadata.json").write_text(json.dumps({
        "version": 1, "cluster_id": "c1", "topics": {"orders": {
            "topic_id": "5d1d3c2a-9a43-4b5e-9d55-0a6f0e3c8b11", "configs": {},
            "partitions": [{"worker": 1, "leader_epoch": 7}, {"worker": 0, "leader_epoch": 2}]}}}))
    store = MetadataStore(str(tmp_path))
    p0, p1 = store.get("orders").partitions
    assert (p0.replicas, p0.leader, p0.isr, p0.leader_epoch) == ([1], 1, [1], 7)
    assert (p1.replicas, p1.leader, p1.isr, p1.leader_epoch) == ([0], 0, [0], 2)
    assert [(t.name, i) for t, i, _ in store.owned_by(1)] == [("orders", 0)]
    store.start_leadership(1)
    raw = json.loads((tmp_path / "cluster-metadata.json").read_text())
    assert raw["version"] == 2
    assert raw["topics"]["orders"]["partitions"][0] == {"replicas": [1], "leader": 1, "isr": [1],
                                                        "leader_epoch": 8, "partition_epoch": 1}


def test_several_config_files_merge_in_order_and_the_cli_reads_every_one(tmp_path):
    """``--config a --config b``: b's settings over a's, key by key, topic
    defaults and listener overrides merged too (only b was read before, and
    a test's TLS file silently dropped the authorizer its first file set)."""
    a, b = tmp_path / "a.toml", tmp_path / "b.toml"
    a.write_text('authorizer_enabled = true\nsuper_users = "User:admin"\nworkers = 3\n'
                 '[topic_defaults]\n"retention.ms" = 1000\n"segment.bytes" = 2000000\n')
    b.write_text('workers = 4\n[topic_defaults]\n"retention.ms" = 5\n')
    cfg = ServerConfig.load([str(a), str(b)])
    assert cfg.authorizer_enabled and cfg.super_users == "User:admin" and cfg.workers == 4
    assert (cfg.log_config().retention_ms, cfg.log_config().segment_bytes) == (5, 2_000_000)
    from kafkalite.cli import build_parser
    args = build_parser().parse_args(["server", "--config", str(a), "--config", str(b)])
    assert args.config == [str(a), str(b)]


def test_iceberg_tables_go_to_the_tiered_stores_bucket_on_one_node_and_on_a_cluster(
        monkeypatch):
    """With tiered storage in S3, Iceberg topics' warehouse is the bucket's
    ``iceberg/`` (beside the segments' ``<topic>-<partition>/`` keys), on a
    cluster too, which then needs no iceberg_warehouse_dir; the FileIO gets
    the store's endpoint and region and no credential; an explicit
    iceberg_warehouse_dir still wins."""
    monkeypatch.setenv("AWS_REGION", "eu-west-3")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "never-handed-out")
    s3 = dict(remote_log_storage_system_enable=True, remote_log_storage_s3_bucket="tiered",
              remote_log_storage_s3_endpoint="http://127.0.0.1:9000")
    for cluster in ("", "postgresql://pg-host/kafkalite"):
        cfg = ServerConfig(cluster=cluster, **s3)
        assert cfg.iceberg_warehouse == "s3://tiered/iceberg"
        assert cfg.iceberg_file_io == {"s3.endpoint": "http://127.0.0.1:9000",
                                       "s3.region": "eu-west-3"}
        assert cfg.iceberg_unshared is None
    aws = ServerConfig(**{**s3, "remote_log_storage_s3_endpoint": ""})
    assert aws.iceberg_file_io == {"s3.region": "eu-west-3"}
    chosen = ServerConfig(cluster="postgresql://pg-host/kafkalite",
                          iceberg_warehouse_dir="/mnt/share/iceberg", **s3)
    assert (chosen.iceberg_warehouse, chosen.iceberg_file_io) == ("/mnt/share/iceberg", {})
    # a cluster whose tiered store is each node's default directory shares nothing
    unshared = ServerConfig(cluster="postgresql://pg-host/kafkalite",
                            remote_log_storage_system_enable=True)
    assert unshared.iceberg_warehouse is None
    assert "remote_log_storage_s3_bucket" in unshared.iceberg_unshared


def test_server_config_from_toml_and_flags(tmp_path):
    path = tmp_path / "k.toml"
    path.write_text('workers = 3\nport = 9999\n[topic_defaults]\n"retention.ms" = 1000\n')
    cfg = ServerConfig.load(str(path), port=1234, workers=None)
    assert (cfg.workers, cfg.port) == (3, 1234)
    assert cfg.log_config().retention_ms == 1000
    assert cfg.log_config({"retention.ms": "5"}).retention_ms == 5
    path.write_text("wrokers = 3\n")
    with pytest.raises(InvalidConfigurationError, match="wrokers"):
        ServerConfig.load(str(path))
    path.write_text("port = [\n")
    with pytest.raises(InvalidConfigurationError, match="k.toml"):
        ServerConfig.load(str(path))
    with pytest.raises(InvalidConfigurationError, match="port"):
        ServerConfig(port=70000)
    with pytest.raises(InvalidConfigurationError, match="segment.bytes"):
        ServerConfig(topic_defaults={"segment.bytes": "x"})
    for bad in (-2, 1.5, "15000"):
        with pytest.raises(InvalidConfigurationError, match="worker_orphan_timeout_ms"):
            ServerConfig(worker_orphan_timeout_ms=bad)
    assert ServerConfig(worker_orphan_timeout_ms=0).worker_orphan_timeout_ms == 0
    assert ServerConfig().worker_orphan_timeout_ms == -1        # no bound (issue 68)


@pytest.mark.parametrize("bucket,why", [
    ("ab", "3 to 63"), ("a" * 64, "3 to 63"), ("My_Bucket", "lowercase"),
    ("-tiered", "begin and end"), ("tiered.", "begin and end"), ("a..b", "adjacent"),
    ("192.168.5.4", "IP address"), ("xn--tiered", "prefix"), ("tiered-s3alias", "suffix")])
def test_an_s3_bucket_name_s3_refuses_is_refused_by_the_config(bucket, why):
    """Refused at start, with S3's rule, not accepted and then failing
    every call while the node reported healthy (issue 71)."""
    with pytest.raises(InvalidConfigurationError, match=why):
        ServerConfig(remote_log_storage_system_enable=True, remote_log_storage_s3_bucket=bucket)
    ServerConfig(remote_log_storage_system_enable=True,
                 remote_log_storage_s3_bucket="kafkalite-tiered.eu-1")
