"""v3's configs (kafkalite/rest_proxy/v3_configs.py) over real HTTP against
the session's server: one topic config, changed one at a time and in a
batch (``configs:alter``, ``validate_only`` too), a broker's configs and
the cluster's broker defaults, in Confluent's shapes, with its errors (a
config the resource has not: 404; a value Kafka refuses: 400, 40002).
Before, each of these paths was 404 (only the topic's list was served).
"""
from __future__ import annotations

import pytest

from proxy_client import call


@pytest.fixture(scope="module")
def base(server):
    url = server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    assert call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                {"topic_name": "configured", "partitions_count": 1})[0] == 201
    return url, f"{url}/v3/clusters/{cluster}", cluster


def test_one_topic_config_get_put_delete(base):
    url, c, cluster = base
    configs = f"{c}/topics/configured/configs"
    status, one, ctype = call(f"{configs}/retention.ms")
    assert status == 200 and ctype == "application/json"
    assert one["kind"] == "KafkaTopicConfig" and one["is_default"] is True
    assert one["metadata"] == {
        "self": f"{configs}/retention.ms",
        "resource_name": f"crn:///kafka={cluster}/topic=configured/config=retention.ms"}
    assert call(f"{configs}/retention.ms", "PUT", {"value": "3600000"})[0] == 204
    one = call(f"{configs}/retention.ms")[1]
    assert (one["value"], one["is_default"], one["source"]) == (
        "3600000", False, "DYNAMIC_TOPIC_CONFIG")
    assert call(f"{configs}/retention.ms", "DELETE")[0] == 204
    assert call(f"{configs}/retention.ms")[1]["is_default"] is True
    assert call(f"{configs}/no.such.config")[0] == 404
    assert call(f"{configs}/no.such.config", "PUT", {"value": "1"})[:2] == (404, {
        "error_code": 404, "message": f"Config no.such.config cannot be found for TOPIC "
                                      f"configured in cluster {cluster}."})
    status, refused, _ = call(f"{configs}/retention.ms", "PUT", {"value": "soon"})
    assert (status, refused["error_code"]) == (400, 40002)
    assert call(f"{c}/topics/nowhere/configs/retention.ms")[1]["error_code"] == 40401


def test_topic_configs_alter_in_one_batch(base):
    url, c, _ = base
    configs = f"{c}/topics/configured/configs"
    batch = {"data": [{"name": "retention.ms", "value": "7200000"},
                      {"name": "cleanup.policy", "value": "compact", "operation": "SET"}]}
    assert call(f"{configs}:alter", "POST", {**batch, "validate_only": True})[0] == 204
    assert call(f"{configs}/retention.ms")[1]["is_default"] is True      # only validated
    assert call(f"{configs}:alter", "POST", batch)[0] == 204
    got = {e["name"]: e["value"] for e in call(configs)[1]["data"]}
    assert (got["retention.ms"], got["cleanup.policy"]) == ("7200000", "compact")
    assert call(f"{configs}:alter", "POST", {"data": [
        {"name": "retention.ms", "operation": "DELETE"},
        {"name": "cleanup.policy", "operation": "DELETE"}]})[0] == 204
    assert call(f"{configs}/cleanup.policy")[1]["is_default"] is True
    assert call(f"{configs}:alter", "POST", {"data": [
        {"name": "retention.ms", "operation": "APPEND_TWICE"}]})[0] == 400


def test_broker_configs_and_the_clusters_broker_defaults(base):
    url, c, cluster = base
    broker = call(f"{c}/brokers")[1]["data"][0]["broker_id"]
    configs = f"{c}/brokers/{broker}/configs"
    listed = call(configs)[1]
    assert listed["kind"] == "KafkaBrokerConfigList" and listed["data"]
    names = [e["name"] for e in listed["data"]]
    assert names == sorted(names) and "log.retention.ms" in names
    one = call(f"{configs}/log.retention.ms")[1]
    assert (one["kind"], one["broker_id"]) == ("KafkaBrokerConfig", broker)
    everyone = call(f"{c}/brokers/-/configs")[1]["data"]
    assert {e["broker_id"] for e in everyone} == {
        b["broker_id"] for b in call(f"{c}/brokers")[1]["data"]}
    assert call(f"{c}/brokers/99/configs")[0] == 404
    try:
        assert call(f"{configs}/log.retention.ms", "PUT", {"value": "7200000"})[0] == 204
        assert call(f"{configs}/log.retention.ms")[1]["value"] == "7200000"
    finally:
        assert call(f"{configs}/log.retention.ms", "DELETE")[0] == 204
    assert call(f"{configs}:alter", "POST", {"data": [
        {"name": "log.retention.ms", "value": "7200000"}], "validate_only": True})[0] == 204
    # the cluster's defaults: what is set for every broker
    defaults = f"{c}/broker-configs"
    try:
        assert call(f"{defaults}/log.retention.ms", "PUT", {"value": "7200000"})[0] == 204
        one = call(f"{defaults}/log.retention.ms")[1]
        assert (one["kind"], one["config_type"], one["value"]) == (
            "KafkaClusterConfig", "BROKER", "7200000")
        assert "log.retention.ms" in [e["name"] for e in call(defaults)[1]["data"]]
    finally:
        assert call(f"{defaults}/log.retention.ms", "DELETE")[0] == 204
