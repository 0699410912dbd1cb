"""v3's ``POST /v3/clusters/{c}/topics/{t}/records`` over real HTTP against a
real server (kafkalite/rest_proxy/records.py): one record of each key and
value type with partition, headers and timestamp, read back by a Kafka
consumer byte for byte; the streaming mode (a chunked body, one answer a
record, in order, each with its own error_code, answered while the body
is still open); Confluent's error bodies.

One server for the module (module_server): its topics are its own.
"""
from __future__ import annotations

import base64
import json
import socket
import urllib.parse

import pytest
import requests

from kafkalite.client import Consumer, TopicPartition
from proxy_client import call, dechunked, stream_records
from soak import setting

WRITE_FIRST_RECORDS = int(setting("KAFKALITE_PROXY_WRITE_FIRST"))


@pytest.fixture(scope="module")
def proxy(module_server):
    url = module_server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    for name, count in (("rec", 3), ("stream", 3), ("live", 1), ("whole", 1)):
        status, _, _ = call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                            {"topic_name": name, "partitions_count": count})
        assert status == 201
    return url, cluster


def read_back(server, topic, partition, offset):
    consumer = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "rb",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, partition, offset)])
        for _ in range(100):
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                return m
    finally:
        consumer.close()
    raise AssertionError(f"{topic}-{partition}@{offset} was not read back")


@pytest.mark.parametrize("kind, data, raw", [
    ("BINARY", base64.b64encode(b"\x00\xffbytes").decode(), b"\x00\xffbytes"),
    ("JSON", {"a": [1, 2], "b": "é"}, json.dumps({"a": [1, 2], "b": "é"}, separators=(",", ":"),
                                                 ensure_ascii=False).encode()),
    ("STRING", "plain text", b"plain text"),
])
def test_a_record_of_each_type_is_written_as_its_bytes(proxy, module_server, kind, data, raw):
    url, cluster = proxy
    status, answer, ctype = call(f"{url}/v3/clusters/{cluster}/topics/rec/records", "POST", {
        "partition_id": 1, "key": {"type": "STRING", "data": "k1"},
        "value": {"type": kind, "data": data},
        "headers": [{"name": "h", "value": base64.b64encode(b"hv").decode()}],
        "timestamp": "2026-01-02T03:04:05.678Z"})
    assert status == 200 and ctype == "application/json", answer
    assert answer["error_code"] == 200 and answer["cluster_id"] == cluster
    assert answer["topic_name"] == "rec" and answer["partition_id"] == 1
    assert answer["timestamp"] == "2026-01-02T03:04:05.678Z"
    assert answer["key"] == {"type": "STRING", "size": 2}
    assert answer["value"] == {"type": kind, "size": len(raw)}
    m = read_back(module_server, "rec", 1, answer["offset"])
    assert (m.key(), m.value()) == (b"k1", raw)
    assert list(m.headers() or []) == [("h", b"hv")]
    assert m.timestamp()[1] == 1767323045678


def test_streaming_answers_every_record_in_order(proxy):
    url, cluster = proxy
    records = [{"key": {"type": "JSON", "data": i % 7}, "value": {"type": "JSON", "data": {"i": i}}}
               for i in range(3000)]
    records[1500] = {"value": {"type": "BINARY", "data": "not base64!"}}
    records[2000] = {"partition_id": 9, "value": {"type": "JSON", "data": 1}}
    status, answers = stream_records(f"{url}/v3/clusters/{cluster}/topics/stream/records",
                                     records, chunk_records=97)
    assert status.endswith("200 OK") and len(answers) == 3000
    assert answers[1500]["error_code"] == 400 and "base64" in answers[1500]["message"]
    assert answers[2000]["error_code"] == 40402
    good = [a for i, a in enumerate(answers) if i not in (1500, 2000)]
    assert all(a["error_code"] == 200 for a in good)
    # same key, same partition; each partition's offsets follow the records' order
    by_key = {}
    for i, a in enumerate(answers):
        if i not in (1500, 2000):
            by_key.setdefault(i % 7, set()).add(a["partition_id"])
    assert all(len(p) == 1 for p in by_key.values())
    for p in range(3):
        offsets = [a["offset"] for a in good if a["partition_id"] == p]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets)))


def answered(buf: bytes) -> list[bytes]:
    return [x for x in dechunked(buf)[0].splitlines() if x.strip()]


def test_streaming_answers_a_record_before_the_body_ends(proxy):
    """The mode's point: a record sent is answered while the connection
    stays open for more (the old way, answering at the body's end, hangs)."""
    url, cluster = proxy
    parts = urllib.parse.urlsplit(f"{url}/v3/clusters/{cluster}/topics/live/records")
    sock = socket.create_connection((parts.hostname, parts.port), timeout=20)
    sock.sendall(f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: "
                 f"application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    buf = b""
    for i in range(3):
        data = json.dumps({"value": {"type": "STRING", "data": f"v{i}"}}).encode()
        sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
        while len(answered(buf)) < i + 1:          # a socket timeout if never answered
            piece = sock.recv(4096)
            assert piece, "the proxy closed the stream"
            buf += piece
    sock.sendall(b"0\r\n\r\n")
    while not dechunked(buf)[1]:                   # to the answer's last chunk
        piece = sock.recv(4096)
        assert piece, "the proxy closed the stream before its last chunk"
        buf += piece
    sock.close()
    lines = [json.loads(x) for x in answered(buf)]
    assert [a["error_code"] for a in lines] == [200, 200, 200]
    assert [a["offset"] for a in lines] == [lines[0]["offset"] + i for i in range(3)]


def test_streaming_is_exact_for_a_client_that_writes_the_whole_body_first(proxy, module_server):
    """``requests`` with a generator body sends every chunk before it reads
    a byte of the answer, so the answers wait unread for as long as the
    body takes: every record is written, in order, and answered. The body
    (at least 40 MB) outgrows what the sockets' buffers hold."""
    url, cluster = proxy
    size = max(100, (40 << 20) // WRITE_FIRST_RECORDS)

    def value(i: int) -> str:
        return f"r{i}".ljust(size, ".")

    def body():
        for start in range(0, WRITE_FIRST_RECORDS, 10):
            yield "".join(json.dumps({"value": {"type": "STRING", "data": value(i)}})
                          for i in range(start, min(start + 10, WRITE_FIRST_RECORDS))).encode()
    resp = requests.post(f"{url}/v3/clusters/{cluster}/topics/whole/records", data=body(),
                         headers={"Content-Type": "application/json"}, timeout=600)
    assert resp.status_code == 200
    lines = resp.text.splitlines()
    assert len(lines) == WRITE_FIRST_RECORDS, f"{len(lines)} answers, the last {lines[-1]!r}"
    answers = [json.loads(line) for line in lines]
    assert all(a["error_code"] == 200 for a in answers)
    assert [a["offset"] for a in answers] == list(range(WRITE_FIRST_RECORDS))
    consumer = Consumer({"bootstrap.servers": module_server.bootstrap, "group.id": "whole",
                         "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition("whole", 0, 0)])
        values = []
        for _ in range(3000):
            values += [m.value() for m in consumer.consume(10_000, 0.2) if m.error() is None]
            if len(values) >= WRITE_FIRST_RECORDS:
                break
        assert consumer.consume(10, 0.5) == []          # nothing more than was sent
    finally:
        consumer.close()
    assert len(values) == WRITE_FIRST_RECORDS
    assert all(v == value(i).encode() for i, v in enumerate(values))


def test_errors_are_confluents_bodies(proxy):
    url, cluster = proxy
    base = f"{url}/v3/clusters/{cluster}/topics"
    assert call(f"{base}/missing/records", "POST", {"value": {"data": 1}})[:2] == (404, {
        "error_code": 40401, "message": "This server does not host this topic-partition. "
                                        "Topic not found: missing"})
    assert "missing" not in [t["topic_name"] for t in call(base)[1]["data"]]   # not created
    status, answer, _ = call(f"{url}/v3/clusters/nope/topics/rec/records", "POST",
                             {"value": {"data": 1}})
    assert (status, answer["error_code"]) == (404, 404)
    status, answer, _ = call(f"{base}/rec/records", "POST", raw=b"{not json")
    assert (status, answer["error_code"]) == (400, 400)
    status, answer, _ = call(f"{base}/rec/records", "POST", raw=b"x", content_type="text/csv")
    assert (status, answer["error_code"]) == (415, 415)
    status, answer, _ = call(f"{base}/rec/records", "POST",
                             {"partition_id": 5, "value": {"data": 1}})
    assert (status, answer["error_code"]) == (404, 40402)
    status, answer, _ = call(f"{base}/rec/records", "POST", {"value": {"type": "THRIFT",
                                                                        "data": 1}})
    assert (status, answer["error_code"]) == (400, 400)
    # AVRO with no schema: the subject's latest, and rec-value has none
    status, answer, _ = call(f"{base}/rec/records", "POST", {"value": {"type": "AVRO",
                                                                        "data": 1}})
    assert (status, answer["error_code"]) == (408, 40801)
    assert call(f"{base}/rec/records", "PUT", {"value": {"data": 1}})[:2] == (
        405, {"error_code": 405, "message": "HTTP 405 Method Not Allowed"})
    assert call(f"{url}/v3/nothing")[1]["error_code"] == 404
