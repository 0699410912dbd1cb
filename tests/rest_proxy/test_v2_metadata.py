"""v2's topics, partitions and brokers (kafkalite/rest_proxy/v2_metadata.py)
and producing to one partition, over real HTTP against the session's
server, in the shapes of Confluent's v2 API reference. Before, each of
these paths was 404.
"""
from __future__ import annotations

import pytest

from proxy_client import V2, V2_JSON, call


@pytest.fixture(scope="module")
def proxy(server):
    url = server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    assert call(f"{url}/v3/clusters/{cluster}/topics", "POST", {
        "topic_name": "v2meta", "partitions_count": 2,
        "configs": [{"name": "retention.ms", "value": "86400000"}]})[0] == 201
    return url


def test_topics_brokers_and_partitions(proxy):
    url = proxy
    status, topics, ctype = call(f"{url}/topics")
    assert status == 200 and ctype == V2
    assert "v2meta" in topics and not any(t.startswith("__") for t in topics)
    status, topic, _ = call(f"{url}/topics/v2meta")
    assert status == 200 and topic["name"] == "v2meta"
    assert topic["configs"]["retention.ms"] == "86400000"
    assert [p["partition"] for p in topic["partitions"]] == [0, 1]
    leader = topic["partitions"][0]["leader"]
    assert topic["partitions"][0]["replicas"][0] == {"broker": leader, "leader": True,
                                                     "in_sync": True}
    assert call(f"{url}/topics/v2meta/partitions")[1] == topic["partitions"]
    assert call(f"{url}/topics/v2meta/partitions/1")[1] == topic["partitions"][1]
    brokers = call(f"{url}/brokers")[1]["brokers"]
    assert leader in brokers and brokers == sorted(brokers)
    assert call(f"{url}/topics/nowhere")[:2] == (404, {
        "error_code": 40401,
        "message": "This server does not host this topic-partition. Topic not found: nowhere"})
    assert call(f"{url}/topics/v2meta/partitions/7")[1]["error_code"] == 40402


def test_produce_to_one_partition_and_its_offsets(proxy):
    url = proxy
    assert call(f"{url}/topics/v2meta/partitions/1/offsets")[1] == {
        "beginning_offset": 0, "end_offset": 0}
    status, answer, ctype = call(f"{url}/topics/v2meta/partitions/1", "POST", {"records": [
        {"value": {"n": i}} for i in range(3)]}, content_type=V2_JSON)
    assert status == 200 and ctype == V2
    assert [(o["partition"], o["offset"], o["error_code"]) for o in answer["offsets"]] == [
        (1, 0, None), (1, 1, None), (1, 2, None)]
    assert call(f"{url}/topics/v2meta/partitions/1/offsets")[1] == {
        "beginning_offset": 0, "end_offset": 3}
    assert call(f"{url}/topics/v2meta/partitions/0/offsets")[1]["end_offset"] == 0
    assert call(f"{url}/topics/v2meta/partitions/9", "POST", {"records": [{"value": 1}]},
                content_type=V2_JSON)[1]["error_code"] == 40402
