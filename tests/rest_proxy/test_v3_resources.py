"""v3's clusters, brokers, topics (list, create, get, delete), partitions,
configs and consumer groups (list, get, lag summary) over real HTTP against
a real server (kafkalite/rest_proxy/v3.py), in Confluent's shapes, with
Confluent's error bodies.

One server for the module (module_server): it creates and deletes topics.
"""
from __future__ import annotations

import pytest

from kafkalite.client import Consumer, Producer
from proxy_client import call


@pytest.fixture(scope="module")
def proxy(module_server):
    url = module_server.info["rest_proxy"]
    return url, call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]


def test_clusters_and_brokers(proxy, module_server):
    url, cluster = proxy
    status, answer, ctype = call(f"{url}/v3/clusters")
    assert status == 200 and ctype == "application/json"
    assert answer["kind"] == "KafkaClusterList" and len(answer["data"]) == 1
    status, one, _ = call(f"{url}/v3/clusters/{cluster}")
    assert status == 200 and one["kind"] == "KafkaCluster" and one["cluster_id"] == cluster
    assert one["topics"]["related"] == f"{url}/v3/clusters/{cluster}/topics"
    brokers = call(f"{url}/v3/clusters/{cluster}/brokers")[1]["data"]
    assert [b["broker_id"] for b in brokers] == [0, 1]          # the two workers
    assert call(f"{url}/v3/clusters/{cluster}/brokers/1")[1]["broker_id"] == 1
    assert call(f"{url}/v3/clusters/{cluster}/brokers/7")[0] == 404
    assert call(f"{url}/v3/clusters/other")[:2] == (
        404, {"error_code": 404, "message": "Cluster other cannot be found."})


def test_topic_create_get_list_partitions_configs_delete(proxy):
    url, cluster = proxy
    base = f"{url}/v3/clusters/{cluster}/topics"
    status, topic, _ = call(base, "POST", {
        "topic_name": "orders", "partitions_count": 4, "replication_factor": 1,
        "configs": [{"name": "cleanup.policy", "value": "compact"}]})
    assert status == 201 and topic["kind"] == "KafkaTopic"
    assert (topic["topic_name"], topic["partitions_count"], topic["replication_factor"]) == \
        ("orders", 4, 1)
    assert call(base, "POST", {"topic_name": "orders", "partitions_count": 1})[:2] == (
        400, {"error_code": 40002, "message": "Topic 'orders' already exists."})
    assert call(base, "POST", {"partitions_count": 1})[1]["error_code"] == 400
    assert "orders" in [t["topic_name"] for t in call(base)[1]["data"]]
    assert call(f"{base}/orders")[1]["partitions_count"] == 4
    parts = call(f"{base}/orders/partitions")[1]
    assert parts["kind"] == "KafkaPartitionList"
    assert [p["partition_id"] for p in parts["data"]] == [0, 1, 2, 3]
    assert call(f"{base}/orders/partitions/2")[1]["partition_id"] == 2
    assert call(f"{base}/orders/partitions/9")[1]["error_code"] == 40402
    configs = {c["name"]: c for c in call(f"{base}/orders/configs")[1]["data"]}
    assert configs["cleanup.policy"]["value"] == "compact"
    assert configs["cleanup.policy"]["is_default"] is False
    assert configs["retention.ms"]["kind"] == "KafkaTopicConfig"
    # produced to once (a key: the topic is compacted), so that the proxy knows it; deleted
    assert call(f"{base}/orders/records", "POST", {"key": {"data": 1},
                                                    "value": {"data": 1}})[0] == 200
    assert call(f"{base}/orders", "DELETE")[0] == 204
    # a deleted topic is not written to again (nor auto-created by the write)
    assert call(f"{base}/orders/records", "POST", {"value": {"data": 1}})[1]["error_code"] == \
        40401
    assert "missing" not in [t["topic_name"] for t in call(base)[1]["data"]]
    assert call(f"{base}/orders")[:2] == (404, {
        "error_code": 40401,
        "message": "This server does not host this topic-partition. Topic not found: orders"})
    assert call(f"{base}/orders", "DELETE")[1]["error_code"] == 40401
    assert call(f"{base}/orders/configs")[1]["error_code"] == 40401


def test_consumer_groups_and_lag_summary(proxy, module_server):
    url, cluster = proxy
    assert call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                {"topic_name": "lagged", "partitions_count": 2})[0] == 201
    producer = Producer({"bootstrap.servers": module_server.bootstrap})
    for i in range(10):
        producer.produce("lagged", b"v", partition=i % 2)
    producer.flush(10)
    producer.close()
    consumer = Consumer({"bootstrap.servers": module_server.bootstrap, "group.id": "laggers",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["lagged"])
    got = []
    for _ in range(100):
        m = consumer.poll(0.2)
        if m is not None and m.error() is None:
            got.append(m)
            if m.partition() == 0 and m.offset() == 1:
                consumer.commit(m, asynchronous=False)     # partition 0 at 2 of 5
        if len(got) == 10:
            break
    assert len(got) == 10
    try:
        groups = call(f"{url}/v3/clusters/{cluster}/consumer-groups")[1]
        assert groups["kind"] == "KafkaConsumerGroupList"
        assert "laggers" in [g["consumer_group_id"] for g in groups["data"]]
        group = call(f"{url}/v3/clusters/{cluster}/consumer-groups/laggers")[1]
        assert group["state"] == "STABLE" and group["is_simple"] is False
        lag = call(f"{url}/v3/clusters/{cluster}/consumer-groups/laggers/lag-summary")[1]
        assert lag["kind"] == "KafkaConsumerGroupLagSummary"
        assert (lag["max_lag_topic_name"], lag["max_lag_partition_id"], lag["max_lag"],
                lag["total_lag"]) == ("lagged", 0, 3, 3)
    finally:
        consumer.close()
    assert call(f"{url}/v3/clusters/{cluster}/consumer-groups/nobody")[:2] == (
        404, {"error_code": 404, "message": "Consumer group nobody cannot be found."})


def test_the_ready_line_and_server_json_name_the_proxy(module_server, proxy):
    url, _ = proxy
    ready = next(line for line in module_server.output().splitlines()
                 if line.startswith("kafkalite server ready:"))
    assert f"rest proxy {url}" in ready
    assert url.startswith("http://127.0.0.1:")


@pytest.mark.processes
def test_rest_proxy_port_minus_one_turns_it_off(tmp_path):
    from harness import ServerProcess
    from kafkalite.errors import InvalidConfigurationError
    from kafkalite.server.config import ServerConfig
    with pytest.raises(InvalidConfigurationError, match="rest_proxy_port"):
        ServerConfig(rest_proxy_port=70000)
    with pytest.raises(InvalidConfigurationError,
                       match="rest_proxy_consumer_instance_timeout_ms"):
        ServerConfig(rest_proxy_consumer_instance_timeout_ms=0)
    srv = ServerProcess(str(tmp_path / "data"), workers=1,
                        extra_args=["--rest-proxy-port", "-1"]).start()
    try:
        assert "rest_proxy" not in srv.info
        assert "rest proxy" not in srv.output()
    finally:
        srv.stop()
