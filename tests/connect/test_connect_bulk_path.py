"""The worker's bulk path (api.py) against a real server: a source task's
SourceRecordBatch produced whole and its offset stored, a sink task's
``put_batch`` given many converted records at once (``put`` of
SinkRecords where transforms run), a value the converter refuses sending
its batch record by record through the error tolerance, and the file
source's one-split-per-read lines (CRLF, bad UTF-8, a line completed
later) byte for byte through the file sink."""
from __future__ import annotations

import json

from connect_helpers import Connect, lines_of, read_to_end
from harness import create, wait_until

from kafkalite.client import Producer

STR = "org.apache.kafka.connect.storage.StringConverter"


def events(path):
    """The JSON lines the sink has finished writing (not one it is writing)."""
    try:
        with open(path) as f:
            done = f.read().split("\n")[:-1]
    except FileNotFoundError:
        return []
    return [json.loads(x) for x in done]


def test_a_source_batch_is_produced_whole_and_resumes_after_its_stored_offset(
        server, topic_name, tmp_path):
    create(server, topic_name)
    cfg = {"connector.class": "connect_plugins:BatchSourceConnector", "topic": topic_name,
           "batches": "3", "size": "1000", "value.converter": STR}
    c = Connect(server, offset_file=tmp_path / "offsets.json")
    try:
        c.create("batches", **cfg)
        wait_until(lambda: len(read_to_end(server, topic_name)) >= 3000, timeout=60,
                   message="three batches in the topic")
        wait_until(lambda: c.http("GET", "/connectors/batches/offsets").json() == {
            "offsets": [{"partition": {"source": "batches"}, "offset": {"batch": 2}}]},
            timeout=60, message="the last batch's offset stored")
    finally:
        c.close()
    got = [m.value().decode() for m in read_to_end(server, topic_name)]
    assert got == [f"{b}-{i}" for b in range(3) for i in range(1000)]
    # a new worker on the same offsets: nothing again
    c = Connect(server, offset_file=tmp_path / "offsets.json")
    try:
        c.create("batches", **{**cfg, "batches": "4"})
        wait_until(lambda: len(read_to_end(server, topic_name)) >= 4000, timeout=60,
                   message="the fourth batch")
    finally:
        c.close()
    got = [m.value().decode() for m in read_to_end(server, topic_name)]
    assert got == [f"{b}-{i}" for b in range(4) for i in range(1000)]


def _produce(server, topic, values):
    p = Producer(server.config())
    try:
        p.produce_batch(topic, values, partition=0)
        assert p.flush(30) == 0
    finally:
        p.close()


def test_put_batch_gets_many_converted_records_and_put_runs_where_transforms_do(
        connect, server, topic_name, sink_name, tmp_path):
    create(server, topic_name)
    values = [f"v{i} ü".encode() for i in range(5000)]
    _produce(server, topic_name, values)
    ev = tmp_path / "events.jsonl"
    connect.create(sink_name, **{"connector.class": "connect_plugins:BatchSinkConnector",
                                 "topics": topic_name, "events.file": str(ev),
                                 "value.converter": STR, "consumer.override.max.poll.records":
                                 "100000"})
    wait_until(lambda: sum(e.get("put_batch", 0) for e in events(ev)) >= 5000, timeout=60,
               message="every record put")
    got = events(ev)
    assert all("put_batch" in e for e in got)
    assert len(got) < 50                              # many records a call, not one
    assert [v for e in got for v in e["values"]] == [v.decode() for v in values]
    assert [o for e in got for o in e["offsets"]] == list(range(5000))

    # with a transform the records are objects: put, record by record conversions
    ev2 = tmp_path / "events2.jsonl"
    connect.create(sink_name + "-t", **{
        "connector.class": "connect_plugins:BatchSinkConnector", "topics": topic_name,
        "events.file": str(ev2), "value.converter": STR, "transforms": "route",
        "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
        "transforms.route.regex": ".*", "transforms.route.replacement": "elsewhere"})
    wait_until(lambda: sum(e.get("put", 0) for e in events(ev2)) >= 5000, timeout=60,
               message="every record put through the transform")
    assert [v for e in events(ev2) for v in e["values"]] == [v.decode() for v in values]


def test_a_refused_value_sends_its_batch_record_by_record_through_the_tolerance(
        connect, server, topic_name, sink_name, tmp_path):
    create(server, topic_name)
    values = [b"good 0", b"good 1", b"\xff\xfe not utf-8", b"good 3"]
    _produce(server, topic_name, values)
    ev = tmp_path / "events.jsonl"
    dlq = topic_name + "-dlq"
    connect.create(sink_name, **{"connector.class": "connect_plugins:BatchSinkConnector",
                                 "topics": topic_name, "events.file": str(ev),
                                 "value.converter": STR, "errors.tolerance": "all",
                                 "errors.deadletterqueue.topic.name": dlq,
                                 "errors.deadletterqueue.topic.replication.factor": "1"})
    wait_until(lambda: sum(e.get("put", 0) for e in events(ev)) >= 3, timeout=60,
               message="the good records put")
    assert [v for e in events(ev) for v in e.get("values", [])] == ["good 0", "good 1",
                                                                    "good 3"]
    wait_until(lambda: [m.value() for m in read_to_end(server, dlq)] == [values[2]],
               timeout=60, message="the refused record in the dead-letter queue")


def test_file_lines_with_crlf_bad_utf8_and_a_late_newline_arrive_byte_for_byte(
        connect, topic_name, sink_name, tmp_path):
    src, out = tmp_path / "in.txt", tmp_path / "out.txt"
    body = b"".join(f"line {i} \xc3\xbc\r\n".encode("latin-1") for i in range(3000))
    src.write_bytes(b"plain\n" + body + b"bad \xff\xfe byte\n" + b"no newline yet")
    connect.create("src", **{"connector.class": "FileStreamSource", "file": str(src),
                             "topic": topic_name, "value.converter": STR, "batch.size": "700"})
    connect.create(sink_name, **{"connector.class": "FileStreamSink", "file": str(out),
                                 "topics": topic_name, "value.converter": STR})
    want = ["plain"] + [f"line {i} ü" for i in range(3000)] + ["bad \ufffd\ufffd byte"]
    wait_until(lambda: len(lines_of(out)) >= len(want), timeout=60, message="the sink's lines")
    with open(src, "ab") as f:
        f.write(b", now\n")
    wait_until(lambda: len(lines_of(out)) >= len(want) + 1, timeout=60,
               message="the completed line")
    assert out.read_bytes() == ("\n".join(want + ["no newline yet, now"]) + "\n").encode()
    size = src.stat().st_size
    wait_until(lambda: connect.http("GET", "/connectors/src/offsets").json() == {"offsets": [
        {"partition": {"filename": str(src)}, "offset": {"position": size}}]}, timeout=60,
        message="the source's offset at the file's end")
