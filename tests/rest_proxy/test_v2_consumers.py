"""v2's consumer instances and produce over real HTTP against a real server
(kafkalite/rest_proxy/consumers.py): create, subscribe, records in the json
and binary embedded formats with ``timeout`` and ``max_bytes``, commit and
read offsets, delete; the content types and Confluent's error bodies
(40403, 40902, 40601, 406). And the done-when's round trip scaled to the
suite: 10,000 JSON records produced over v3's streaming mode and read back
over a v2 consumer instance, each exactly once and in order per partition,
by a checker shown to catch a planted loss and a planted duplicate
(``KAFKALITE_PROXY_ROUND_TRIP=100000``, the soak's setting, is the issue's
100,000).

One server for the module (module_server): its groups and topics are its own.
"""
from __future__ import annotations

import base64
import time

import pytest

from proxy_client import V2, V2_BINARY, V2_JSON, call, stream_records
from soak import setting

ROUND_TRIP_RECORDS = int(setting("KAFKALITE_PROXY_ROUND_TRIP"))


@pytest.fixture(scope="module")
def proxy(module_server):
    url = module_server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    for name, count in (("v2", 2), ("trip", 3)):
        assert call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                    {"topic_name": name, "partitions_count": count})[0] == 201
    return url, cluster


def create(url, group, name, fmt, **config):
    return call(f"{url}/consumers/{group}", "POST",
                {"name": name, "format": fmt, "auto.offset.reset": "earliest", **config},
                content_type=V2)


def read_all(url, group, name, accept, want, max_bytes=None, deadline_s=30.0):
    """GET records until ``want`` came (or the deadline)."""
    got, deadline = [], time.monotonic() + deadline_s
    query = "timeout=1000" + (f"&max_bytes={max_bytes}" if max_bytes else "")
    while len(got) < want and time.monotonic() < deadline:
        status, records, ctype = call(f"{url}/consumers/{group}/instances/{name}/records?"
                                      f"{query}", accept=accept)
        assert status == 200 and ctype == accept, records
        got.extend(records)
    return got


def test_v2_produce_then_a_json_instance_reads_commits_and_is_deleted(proxy):
    url, _ = proxy
    status, answer, ctype = call(f"{url}/topics/v2", "POST", {"records": [
        {"key": "k", "value": {"n": i}, "partition": i % 2} for i in range(6)]},
        content_type=V2_JSON)
    assert status == 200 and ctype == V2
    assert [o["partition"] for o in answer["offsets"]] == [0, 1, 0, 1, 0, 1]
    assert all(o["error_code"] is None for o in answer["offsets"])
    status, made, ctype = create(url, "g-json", "c1", "json", **{"auto.commit.enable": "false"})
    assert status == 200 and ctype == V2
    assert made == {"instance_id": "c1", "base_uri": f"{url}/consumers/g-json/instances/c1"}
    assert create(url, "g-json", "c1", "json")[:2] == (409, {
        "error_code": 40902, "message": "Consumer with specified consumer ID already exists "
                                        "in the specified consumer group."})
    inst = f"{url}/consumers/g-json/instances/c1"
    assert call(f"{inst}/subscription", "POST", {"topics": ["v2"]}, content_type=V2)[0] == 204
    assert call(f"{inst}/subscription")[1] == {"topics": ["v2"]}
    # the instance's format decides the embedded type: binary is refused, a non-Kafka type 406
    assert call(f"{inst}/records", accept=V2_BINARY)[:2] == (406, {
        "error_code": 40601, "message": "The requested embedded data format does not match "
                                        "the deserializer for this consumer instance"})
    assert call(f"{inst}/records", accept="text/html")[:2] == (
        406, {"error_code": 406, "message": "HTTP 406 Not Acceptable"})
    records = read_all(url, "g-json", "c1", V2_JSON, 6, max_bytes=20)
    assert sorted((r["partition"], r["offset"]) for r in records) == \
        [(p, o) for p in (0, 1) for o in range(3)]
    assert {r["value"]["n"] for r in records} == set(range(6))
    assert all(r["key"] == "k" and r["topic"] == "v2" for r in records)
    # an explicit commit names the last offset consumed; the committed offset is the next
    assert call(f"{inst}/offsets", "POST", {"offsets": [
        {"topic": "v2", "partition": 0, "offset": 1}]}, content_type=V2)[0] == 200
    got = call(f"{inst}/offsets", "GET", {"partitions": [
        {"topic": "v2", "partition": 0}, {"topic": "v2", "partition": 1}]}, content_type=V2)
    assert [(o["partition"], o["offset"]) for o in got[1]["offsets"]] == [(0, 2), (1, -1001)]
    # an empty body commits everything this instance answered
    assert call(f"{inst}/offsets", "POST")[0] == 200
    got = call(f"{inst}/offsets", "GET", {"partitions": [
        {"topic": "v2", "partition": 0}, {"topic": "v2", "partition": 1}]}, content_type=V2)
    assert [o["offset"] for o in got[1]["offsets"]] == [3, 3]
    assert call(inst, "DELETE")[0] == 204
    assert call(f"{inst}/records", accept=V2_JSON)[:2] == (
        404, {"error_code": 40403, "message": "Consumer instance not found."})


def test_a_binary_instance_reads_bytes_as_base64(proxy):
    url, _ = proxy
    raw = base64.b64encode(b"\x00\x01\xfe").decode()
    status, answer, _ = call(f"{url}/topics/v2", "POST", {"records": [
        {"value": raw, "partition": 0}]}, content_type=V2_BINARY)
    assert status == 200 and answer["offsets"][0]["error_code"] is None
    assert call(f"{url}/topics/v2", "POST", {"records": [{"value": "!!"}]},
                content_type=V2_BINARY)[1]["error_code"] == 42205
    assert call(f"{url}/topics/v2", "POST", {"records": []},
                content_type="text/plain")[1]["error_code"] == 415
    assert create(url, "g-bin", "b1", "binary")[0] == 200
    # kafka-rest's CreateConsumerInstanceRequest: RestConstraintViolationException, 422
    assert create(url, "g-bin", "b2", "thrift")[:2] == (
        422, {"error_code": 422, "message": "Invalid format type."})
    inst = f"{url}/consumers/g-bin/instances/b1"
    assert call(f"{inst}/subscription", "POST", {"topics": ["v2"]}, content_type=V2)[0] == 204
    records = read_all(url, "g-bin", "b1", V2_BINARY, 7)
    assert raw in [r["value"] for r in records]
    assert call(inst, "DELETE")[0] == 204


@pytest.mark.parametrize("config,status,code,says", [
    ({"fetch.min.bytes": -10}, 422, 40001,
     "Invalid value -10 for configuration fetch.min.bytes: Value must be at least -1"),
    ({"fetch.min.bytes": 10_000_001}, 422, 40001, "Value must be no more than 10000000"),
    ({"fetch.min.bytes": "lots"}, 400, 400, "fetch.min.bytes is an integer"),
    ({"auto.offset.reset": "smallest"}, 422, 42204,
     "Invalid value smallest for configuration auto.offset.reset"),
    ({"auto.commit.enable": "maybe"}, 422, 42204, "Expected value to be either true or false"),
    ({"consumer.request.timeout.ms": -1}, 422, 40001, "negative"),
])
def test_an_instances_settings_are_checked_as_confluent_checks_them(proxy, config, status,
                                                                     code, says):
    """kafka-rest checks fetch.min.bytes against its range (40001, HTTP 422
    as rest-utils answers every constraint violation) and Kafka's
    consumer the rest (42204). Before, each of these made an instance."""
    url, _ = proxy
    got = call(f"{url}/consumers/g-settings", "POST", {"name": "bad", "format": "json",
                                                       **config}, content_type=V2)
    assert (got[0], got[1]["error_code"]) == (status, code) and says in got[1]["message"]
    assert call(f"{url}/consumers/g-settings/instances/bad/subscription")[1][
        "error_code"] == 40403


def test_an_instances_request_timeout_is_its_records_wait(proxy):
    """``consumer.request.timeout.ms``: how long a records GET without
    ``timeout`` waits for records (before: always the 1 s default)."""
    url, _ = proxy
    assert create(url, "g-wait", "w1", "json", **{"consumer.request.timeout.ms": 3000,
                                                  "auto.offset.reset": "latest"})[0] == 200
    inst = f"{url}/consumers/g-wait/instances/w1"
    assert call(f"{inst}/subscription", "POST", {"topics": ["v2"]}, content_type=V2)[0] == 204
    started = time.monotonic()
    assert call(f"{inst}/records", accept=V2_JSON)[:2] == (200, [])
    assert time.monotonic() - started >= 2.9     # its own 3 s, not the 1 s default
    assert call(inst, "DELETE")[0] == 204


def check_exactly_once_in_order(produced: dict, consumed: list) -> list[str]:
    """What is wrong with ``consumed`` (v2 records) against ``produced``
    ({(partition, offset): value} from v3's answers): a record lost, read
    twice, out of its partition's order, or not the value produced."""
    faults, seen, last = [], set(), {}
    for r in consumed:
        where = (r["partition"], r["offset"])
        if where in seen:
            faults.append(f"duplicate {where}")
        seen.add(where)
        if r["offset"] <= last.get(r["partition"], -1):
            faults.append(f"out of order {where}")
        last[r["partition"]] = r["offset"]
        if produced.get(where) != r["value"]:
            faults.append(f"value at {where}: {r['value']!r}, produced {produced.get(where)!r}")
    faults += [f"lost {w}" for w in sorted(set(produced) - seen)]
    return faults


def test_round_trip_exactly_once_and_in_order(proxy):
    url, cluster = proxy
    records = [{"key": {"type": "JSON", "data": f"user-{i % 50}"},
                "value": {"type": "JSON", "data": {"seq": i, "text": f"record {i}"}}}
               for i in range(ROUND_TRIP_RECORDS)]
    status, answers = stream_records(f"{url}/v3/clusters/{cluster}/topics/trip/records",
                                     records)
    assert status.endswith("200 OK") and len(answers) == ROUND_TRIP_RECORDS
    assert all(a["error_code"] == 200 for a in answers)
    produced = {(a["partition_id"], a["offset"]): r["value"]["data"]
                for a, r in zip(answers, records)}
    assert len(produced) == ROUND_TRIP_RECORDS
    assert create(url, "g-trip", "t1", "json")[0] == 200
    assert call(f"{url}/consumers/g-trip/instances/t1/subscription", "POST",
                {"topics": ["trip"]}, content_type=V2)[0] == 204
    consumed = read_all(url, "g-trip", "t1", V2_JSON, ROUND_TRIP_RECORDS)
    # nothing more comes after the last record
    consumed += call(f"{url}/consumers/g-trip/instances/t1/records?timeout=300",
                     accept=V2_JSON)[1]
    assert check_exactly_once_in_order(produced, consumed) == []
    # the checker catches a planted loss, a planted duplicate and a reordering
    assert check_exactly_once_in_order(produced, consumed[:500] + consumed[501:]) == \
        [f"lost {(consumed[500]['partition'], consumed[500]['offset'])}"]
    assert any(f.startswith("duplicate") for f in check_exactly_once_in_order(
        produced, consumed[:900] + [consumed[899]] + consumed[900:]))
    swapped = consumed[:10] + [consumed[11], consumed[10]] + consumed[12:]
    if consumed[10]["partition"] == consumed[11]["partition"]:
        assert any(f.startswith("out of order") for f in check_exactly_once_in_order(
            produced, swapped))
    assert call(f"{url}/consumers/g-trip/instances/t1", "DELETE")[0] == 204
