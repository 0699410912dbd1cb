"""v2 consumer instances' assignments and positions
(kafkalite/rest_proxy/consumer_positions.py) over real HTTP against the
session's server: an instance that takes its partitions itself, reads
them, moves to an offset, a time, the beginning and the end, and the
errors Confluent answers (40903 for a partition not assigned, or for
mixing assign and subscribe). Before, each of these paths was 404.
"""
from __future__ import annotations

import time

import pytest

from proxy_client import V2, V2_JSON, call


@pytest.fixture(scope="module")
def proxy(server):
    url = server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    assert call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                {"topic_name": "positions", "partitions_count": 2})[0] == 201
    answer = call(f"{url}/topics/positions/partitions/0", "POST", {"records": [
        {"value": {"n": i}} for i in range(5)]}, content_type=V2_JSON)[1]
    assert [o["offset"] for o in answer["offsets"]] == [0, 1, 2, 3, 4]
    return url


def offsets_read(inst: str, want: int, deadline_s: float = 30.0) -> list[int]:
    got, deadline = [], time.monotonic() + deadline_s
    while len(got) < want and time.monotonic() < deadline:
        status, records, _ = call(f"{inst}/records?timeout=500", accept=V2_JSON)
        assert status == 200, records
        got += [r["offset"] for r in records]
    return got


def test_assign_then_seek_to_offsets_times_beginning_and_end(proxy):
    url = proxy
    assert call(f"{url}/consumers/pos-g", "POST", {"name": "p1", "format": "json",
                                                   "auto.offset.reset": "earliest"},
                content_type=V2)[0] == 200
    inst = f"{url}/consumers/pos-g/instances/p1"
    tp0 = {"topic": "positions", "partition": 0}
    assert call(f"{inst}/assignments", "POST", {"partitions": [tp0]}, content_type=V2)[0] == 204
    assert call(f"{inst}/assignments")[1] == {"partitions": [tp0]}
    assert call(f"{inst}/subscription", "POST", {"topics": ["positions"]},
                content_type=V2)[1]["error_code"] == 40903
    assert offsets_read(inst, 5) == [0, 1, 2, 3, 4]
    assert call(f"{inst}/positions", "POST", {"offsets": [{**tp0, "offset": 3}]},
                content_type=V2)[0] == 204
    assert offsets_read(inst, 2) == [3, 4]
    assert call(f"{inst}/positions/beginning", "POST", {"partitions": [tp0]},
                content_type=V2)[0] == 204
    assert offsets_read(inst, 5) == [0, 1, 2, 3, 4]
    assert call(f"{inst}/positions", "POST", {"timestamps": [
        {**tp0, "timestamp": "2000-01-01T00:00:00Z"}]}, content_type=V2)[0] == 204
    assert offsets_read(inst, 1)[:1] == [0]
    assert call(f"{inst}/positions/end", "POST", {"partitions": [tp0]},
                content_type=V2)[0] == 204
    assert call(f"{inst}/records?timeout=300", accept=V2_JSON)[1] == []
    # a partition the instance was not given
    assert call(f"{inst}/positions", "POST", {"offsets": [
        {"topic": "positions", "partition": 1, "offset": 0}]}, content_type=V2)[:2] == (409, {
            "error_code": 40903,
            "message": "Illegal state: No current assignment for partition positions-1"})
    assert call(inst, "DELETE")[0] == 204


def test_a_subscribed_instance_seeks_what_its_group_gave_it(proxy):
    url = proxy
    assert call(f"{url}/consumers/pos-sub", "POST", {"name": "s1", "format": "json",
                                                     "auto.offset.reset": "earliest"},
                content_type=V2)[0] == 200
    inst = f"{url}/consumers/pos-sub/instances/s1"
    assert call(f"{inst}/subscription", "POST", {"topics": ["positions"]},
                content_type=V2)[0] == 204
    assert offsets_read(inst, 5) == [0, 1, 2, 3, 4]
    assert {(p["topic"], p["partition"]) for p in call(f"{inst}/assignments")[1][
        "partitions"]} == {("positions", 0), ("positions", 1)}
    assert call(f"{inst}/assignments", "POST", {"partitions": [
        {"topic": "positions", "partition": 0}]}, content_type=V2)[1]["error_code"] == 40903
    assert call(f"{inst}/positions", "POST", {"offsets": [
        {"topic": "positions", "partition": 0, "offset": 4}]}, content_type=V2)[0] == 204
    assert offsets_read(inst, 1) == [4]
    assert call(inst, "DELETE")[0] == 204
