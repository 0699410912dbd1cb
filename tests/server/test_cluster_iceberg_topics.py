"""An Iceberg topic on a cluster (issue 44): three nodes sharing a real
PostgreSQL (tests/postgres.py), each told the same warehouse directory
(``iceberg_warehouse_dir``), or each with its tiered store in the same
bucket of moto's S3 server (the table's files then go to the bucket's
``iceberg/``, with no warehouse setting). The table's catalog is the cluster's
PostgreSQL, so a partition's new leader on another node commits to the
table its old leader kept, from the offsets that table records.

The test kills -9 the node leading partitions of the topic after its
records reached the table, produces more (acks=all), and reads the table
as any client would, with pyiceberg's SQL catalog over the cluster's
PostgreSQL: every offset of the topic exactly once (partition and
offset against a read of the topic, tests/server/iceberg_tables.py's
checker). A second node's REST catalog lists the same table and hands
the reader the S3 endpoint its files are reached by.
"""
from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import boto3
import confluent_kafka as ck
import confluent_kafka.admin  # noqa: F401 (ck.admin)
import pytest

from harness import ServerProcess, wait_until
from moto_s3 import moto_s3
from kafkalite.client import AdminClient, TopicPartition
from postgres import find_binaries, new_database
from replicas import create, state, wait_for
from test_cluster_nodes import TIMEOUTS, in_parallel, kill_node, live_brokers, node_of, \
    produce_acked

pytest.importorskip("pyiceberg")

from iceberg_tables import check_exactly_once, topic_rows  # noqa: E402

pytestmark = pytest.mark.skipif(find_binaries() is None,
                                reason="PostgreSQL is not installed: run tools/install-system-deps")

TOPIC = "events"
PARTITIONS = 3
NAMESPACE = "kafkalite"
BUCKET = "cluster-tiered"


@pytest.fixture(params=["directory", "s3"])
def warehouse(request, tmp_path):
    """(the nodes' config file, the warehouse's location, the FileIO
    properties a reader needs): a shared directory (iceberg_warehouse_dir),
    or the bucket of the nodes' tiered store on moto's S3 server, which
    then needs no setting of its own."""
    config = tmp_path / "node.toml"
    if request.param == "directory":
        config.write_text(f'iceberg_warehouse_dir = "{tmp_path / "warehouse"}"\n')
        yield config, f"file://{tmp_path / 'warehouse'}", {}
        return
    with moto_s3(BUCKET) as endpoint:
        config.write_text('"remote.log.storage.system.enable" = true\n'
                          f'remote_log_storage_s3_bucket = "{BUCKET}"\n'
                          f'remote_log_storage_s3_endpoint = "{endpoint}"\n')
        yield config, f"s3://{BUCKET}/iceberg", {"s3.endpoint": endpoint,
                                                 "s3.region": "us-east-1"}


@pytest.fixture
def cluster(pg_server, tmp_path, warehouse):
    pg = new_database(pg_server)
    config, location, file_io = warehouse
    nodes = {}

    def start(node_id):
        s = ServerProcess(str(tmp_path / f"node{node_id}"), workers=2,
                          extra_args=["--cluster", pg.dsn, "--node-id", str(node_id),
                                      "--config", str(config), *TIMEOUTS])
        nodes[node_id] = s
        return s.start()
    start(1)
    in_parallel(lambda: start(2), lambda: start(3))
    wait_for(lambda: live_brokers(nodes[1]) == 6, what="every node's workers registered")
    yield pg, (location, file_io), nodes
    in_parallel(*[s.stop for n, s in nodes.items()
                  if n != 1 and s.proc is not None and s.proc.poll() is None])
    if nodes[1].proc is not None and nodes[1].proc.poll() is None:
        nodes[1].stop()


def cluster_catalog(dsn: str, warehouse: tuple[str, dict]):
    """pyiceberg's SQL catalog over the cluster's PostgreSQL, as a reader
    outside the cluster opens it (``warehouse``: its location and FileIO
    properties)."""
    from pyiceberg.catalog.sql import SqlCatalog
    location, file_io = warehouse
    return SqlCatalog(NAMESPACE, uri="postgresql+psycopg://" + dsn.split("://", 1)[1],
                      warehouse=location, init_catalog_tables="false", **file_io)


def table_offsets(catalog) -> dict[int, int]:
    """partition -> next offset, from the latest snapshot's summary ({}: no table yet)."""
    try:
        snapshot = catalog.load_table((NAMESPACE, TOPIC)).current_snapshot()
    except Exception:       # the catalog's tables or the topic's table not made yet
        return {}
    if snapshot is None:
        return {}
    prefix = "kafkalite.next-offset."
    return {int(k[len(prefix):]): int(v)
            for k, v in snapshot.summary.additional_properties.items() if k.startswith(prefix)}


def table_rows(catalog) -> list[tuple]:
    """(partition, offset, timestamp ms, key, value, headers) per row."""
    out = []
    for r in catalog.load_table((NAMESPACE, TOPIC)).scan().to_arrow().to_pylist():
        rp = r["redpanda"]
        out.append((rp["partition"], rp["offset"], int(rp["timestamp"].timestamp() * 1000),
                    rp["key"], r["value"], tuple((h["key"], h["value"]) for h in rp["headers"])))
    return out


def ends_of(bootstrap: str) -> dict[int, int]:
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "ends"})
    try:
        return {p: consumer.get_watermark_offsets(ck.TopicPartition(TOPIC, p), timeout=10)[1]
                for p in range(PARTITIONS)}
    finally:
        consumer.close()


def wait_committed(catalog, bootstrap: str, what: str) -> dict[int, int]:
    ends = ends_of(bootstrap)
    wait_until(lambda: table_offsets(catalog) == ends, 30,
               lambda: f"{what}: the cluster catalog's table at {table_offsets(catalog)}, "
                       f"the log at {ends}")
    return ends


def test_the_table_keeps_every_record_once_through_a_leader_node_kill(cluster):
    pg, warehouse, nodes = cluster
    c = nodes[1]
    # a replica on each node; partitions 0 and 1 led by node 2 (the victim:
    # not the controller's node, whose takeover is other tests' matter), 2 by node 3
    brokers = {}
    for broker, node in sorted(node_of(pg.dsn).items()):
        brokers.setdefault(node, broker)
    first = {0: 2, 1: 2, 2: 3}
    create(c, TOPIC, assignments=[[brokers[first[p]]] + [brokers[n] for n in (1, 2, 3)
                                                        if n != first[p]]
                                  for p in range(PARTITIONS)], **{
        "iceberg.mode": "key_value", "iceberg.target.lag.ms": "200",
        "min.insync.replicas": "2"})
    wait_for(lambda: all(len(isr) == 3 and leader >= 0
                         for leader, _, isr in state(c, TOPIC).values()), what="a full ISR")
    # (a new partition's first leader is any live replica: the preferred ones, now)
    admin = AdminClient(c.config())
    try:
        admin.elect_leaders(0, [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]).result()
    finally:
        admin.close()
    where = node_of(pg.dsn)
    wait_for(lambda: {p: where.get(leader) for p, (leader, _, _) in state(c, TOPIC).items()}
             == first, what="the preferred leaders")
    catalog = cluster_catalog(pg.dsn, warehouse)
    produce_acked(c, TOPIC, "before", 150)
    wait_committed(catalog, c.kafka_bootstrap, "before the kill")

    # the node leading partitions 0 and 1, whose commits are in the table: killed
    victim = 2
    kill_node(nodes[victim])
    moved = [p for p, n in first.items() if n == victim]
    wait_for(lambda: all(where[state(c, TOPIC)[p][0]] != victim for p in moved
                         if state(c, TOPIC)[p][0] >= 0), what="new leaders off the killed node")

    produce_acked(c, TOPIC, "after", 150)
    ends = wait_committed(catalog, c.kafka_bootstrap, f"after node {victim}'s kill")
    assert sum(ends.values()) == 300
    rows = table_rows(catalog)
    assert check_exactly_once(rows, topic_rows(c.kafka_bootstrap, TOPIC, ends)) == []
    assert {r[0] for r in rows} == set(range(PARTITIONS))

    # every live node's REST catalog serves the same table: the controller's
    # node's and a broker node's
    metadata_location = catalog.load_table((NAMESPACE, TOPIC)).metadata_location
    location, file_io = warehouse
    assert metadata_location.startswith(location + "/"), metadata_location
    if location.startswith("s3://"):
        # the files in the bucket of the tiered store, nothing on a node's disk
        keys = {o["Key"] for page in boto3.client("s3", endpoint_url=file_io["s3.endpoint"])
                .get_paginator("list_objects_v2").paginate(Bucket=BUCKET)
                for o in page.get("Contents", ())}
        data_files = {t.file.file_path for t in catalog.load_table((NAMESPACE, TOPIC))
                      .scan().plan_files()}
        assert data_files and data_files <= {f"s3://{BUCKET}/{k}" for k in keys}
        for n in nodes.values():
            assert not list(Path(n.data_dir).rglob("*.parquet")), n.data_dir
    for n in (1, 3):
        url = nodes[n].info.get("iceberg_rest")
        assert url, f"node {n} serves no REST catalog: {nodes[n].info}"
        with urllib.request.urlopen(f"{url}/v1/namespaces/{NAMESPACE}/tables", timeout=10) as r:
            assert json.load(r)["identifiers"] == [{"namespace": [NAMESPACE], "name": TOPIC}]
        with urllib.request.urlopen(f"{url}/v1/namespaces/{NAMESPACE}/tables/{TOPIC}",
                                    timeout=10) as r:
            loaded = json.load(r)
            assert loaded["metadata-location"] == metadata_location, n
            assert loaded["config"] == file_io, n      # where a reader finds the files


def test_a_cluster_with_iceberg_topics_and_no_shared_warehouse_is_refused_at_start(pg_server,
                                                                                   tmp_path):
    """Each node would keep the table's files in its own data directory,
    where the others cannot read them: without a shared warehouse a topic is
    not made Iceberg (INVALID_CONFIG, created or altered), and a node whose
    cluster has an Iceberg topic from before names the setting instead of
    starting."""
    pg = new_database(pg_server)
    config = tmp_path / "node.toml"
    config.write_text(f'iceberg_warehouse_dir = "{tmp_path / "warehouse"}"\n')
    node = ServerProcess(str(tmp_path / "node1"), workers=2,
                         extra_args=["--cluster", pg.dsn, "--node-id", "1", "--config",
                                     str(config), *TIMEOUTS])
    node.start()
    try:
        create(node, TOPIC, partitions=1, rf=1, **{"iceberg.mode": "key_value"})
    finally:
        node.stop()
    bare = ServerProcess(str(tmp_path / "node2"), workers=2,
                         extra_args=["--cluster", new_database(pg_server).dsn, "--node-id", "1",
                                     *TIMEOUTS])
    bare.start()
    try:
        admin = ck.admin.AdminClient({"bootstrap.servers": bare.kafka_bootstrap})
        fut = admin.create_topics([ck.admin.NewTopic(
            "lake", 1, 1, config={"iceberg.mode": "key_value"})])["lake"]
        with pytest.raises(ck.KafkaException, match="iceberg_warehouse_dir") as refused:
            fut.result(30)
        assert refused.value.args[0].code() == ck.KafkaError.INVALID_CONFIG
        create(bare, "plain", partitions=1, rf=1)
        fut = admin.incremental_alter_configs([ck.admin.ConfigResource(
            "topic", "plain", incremental_configs=[ck.admin.ConfigEntry(
                "iceberg.mode", "key_value",
                incremental_operation=ck.admin.AlterConfigOpType.SET)])])
        with pytest.raises(ck.KafkaException, match="iceberg_warehouse_dir"):
            list(fut.values())[0].result(30)
    finally:
        bare.stop()
    again = ServerProcess(str(tmp_path / "node1"), workers=2,
                          extra_args=["--cluster", pg.dsn, "--node-id", "1", *TIMEOUTS])
    try:
        with pytest.raises(RuntimeError, match=f"iceberg_warehouse_dir.*{TOPIC}"):
            again.start()
    finally:
        if again.proc is not None and again.proc.poll() is None:    # (it started)
            again.stop()
