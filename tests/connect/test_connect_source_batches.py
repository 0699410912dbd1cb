"""The worker's batch path for sources (api.py's SourceRecordBatch with a
key, timestamp and header list per record) against a real server: a batch
with null keys and values, binary bytes, str and null header values and
records without a timestamp arrives byte for byte with its headers and
timestamps; each batch is acknowledged once (``commit_batch``) and its
offset stored, and a restarted task resumes after it; transforms and
predicates apply per record; a value the converter refuses is skipped
under ``errors.tolerance=all`` while the rest of its batch arrives."""
from __future__ import annotations

import json
import time

from connect_helpers import Connect, read_to_end
from harness import create, wait_until
from source_batch_plugins import expected_record

BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
SIZE = 60


def config(topic, events, batches, **extra):
    return {"connector.class": "source_batch_plugins:HeaderBatchSourceConnector",
            "topic": topic, "batches": str(batches), "size": str(SIZE),
            "events.file": str(events), "key.converter": BYTES, "value.converter": BYTES,
            **extra}


def events(path) -> list:
    try:
        with open(path) as f:
            return [json.loads(x) for x in f.read().split("\n")[:-1]]
    except FileNotFoundError:
        return []


def arrived(m) -> tuple:
    return m.key(), m.value(), list(m.headers() or []), m.timestamp()[1]


def assert_record(m, j, since_ms, until_ms) -> None:
    key, value, headers, ts = expected_record(j)
    got = arrived(m)
    assert got[:3] == (key, value, headers), (j, got)
    if ts is None:
        assert since_ms <= got[3] <= until_ms, (j, got[3])    # stamped when produced
    else:
        assert got[3] == ts, (j, got[3])


def test_a_batch_arrives_byte_for_byte_is_committed_once_and_resumes_after_its_offset(
        server, topic_name, tmp_path):
    create(server, topic_name)
    ev = tmp_path / "events.jsonl"
    since = int(time.time() * 1000)
    c = Connect(server, offset_file=tmp_path / "offsets.json")
    try:
        c.create("hb", **config(topic_name, ev, 2))
        wait_until(lambda: len(read_to_end(server, topic_name)) >= 2 * SIZE, timeout=60,
                   message="two batches in the topic")
        wait_until(lambda: c.http("GET", "/connectors/hb/offsets").json() == {
            "offsets": [{"partition": {"source": "headers"}, "offset": {"batch": 1}}]},
            timeout=60, message="the last batch's offset stored")
        wait_until(lambda: len(events(ev)) >= 2, timeout=60, message="both batches committed")
    finally:
        c.close()
    # each batch acknowledged once, whole, and no record made for it
    assert events(ev) == [{"batch": 0, "records": SIZE}, {"batch": 1, "records": SIZE}]
    # a new worker on the same offsets: the third batch only
    c = Connect(server, offset_file=tmp_path / "offsets.json")
    try:
        c.create("hb", **config(topic_name, ev, 3))
        wait_until(lambda: len(read_to_end(server, topic_name)) >= 3 * SIZE, timeout=60,
                   message="the third batch")
        wait_until(lambda: len(events(ev)) >= 3, timeout=60, message="the third committed")
    finally:
        c.close()
    until = int(time.time() * 1000)
    got = read_to_end(server, topic_name)
    assert len(got) == 3 * SIZE
    for j, m in enumerate(got):
        assert_record(m, j, since, until)
    assert events(ev)[2:] == [{"batch": 2, "records": SIZE}]


def test_transforms_and_predicates_apply_per_record_of_a_batch(server, topic_name, tmp_path):
    routed = topic_name + "-routed"
    create(server, topic_name)
    create(server, routed)
    ev = tmp_path / "events.jsonl"
    since = int(time.time() * 1000)
    c = Connect(server, offset_file=tmp_path / "offsets.json")
    try:
        c.create("hb", **config(
            topic_name, ev, 2, **{
                "transforms": "dropMarked,route",
                "transforms.dropMarked.type": "org.apache.kafka.connect.transforms.Filter",
                "transforms.dropMarked.predicate": "marked",
                "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
                "transforms.route.regex": "(.*)",
                "transforms.route.replacement": "$1-routed",
                "predicates": "marked",
                "predicates.marked.type":
                    "org.apache.kafka.connect.transforms.predicates.HasHeaderKey",
                "predicates.marked.name": "drop"}))
        kept = [j for j in range(2 * SIZE) if j % 4 != 1]      # j % 4 == 1: a "drop" header
        wait_until(lambda: len(read_to_end(server, routed)) >= len(kept), timeout=60,
                   message="the unmarked records in the routed topic")
        wait_until(lambda: len(events(ev)) >= 2, timeout=60, message="both batches committed")
    finally:
        c.close()
    until = int(time.time() * 1000)
    got = read_to_end(server, routed)
    assert len(got) == len(kept)
    for j, m in zip(kept, got):
        assert_record(m, j, since, until)
    assert read_to_end(server, topic_name) == []
    assert events(ev) == [{"batch": 0, "records": SIZE}, {"batch": 1, "records": SIZE}]


def test_a_refused_value_of_a_batch_is_skipped_under_tolerance_and_the_rest_arrive(
        server, topic_name, tmp_path):
    """Kafka's source tasks report a tolerated failure to the log only (its
    dead-letter queue is a sink's): the record is skipped, its batch's other
    records arrive and the batch's offset is stored."""
    create(server, topic_name)
    ev = tmp_path / "events.jsonl"
    since = int(time.time() * 1000)
    c = Connect(server, offset_file=tmp_path / "offsets.json")
    try:
        c.create("hb", **config(topic_name, ev, 2, **{"bad.index": "7",
                                                      "errors.tolerance": "all",
                                                      "errors.log.enable": "true"}))
        wait_until(lambda: len(read_to_end(server, topic_name)) >= 2 * (SIZE - 1), timeout=60,
                   message="every good record in the topic")
        wait_until(lambda: c.http("GET", "/connectors/hb/offsets").json() == {
            "offsets": [{"partition": {"source": "headers"}, "offset": {"batch": 1}}]},
            timeout=60, message="the last batch's offset stored")
        assert c.state("hb")["tasks"][0]["state"] == "RUNNING"
    finally:
        c.close()
    until = int(time.time() * 1000)
    got = read_to_end(server, topic_name)
    good = [j for j in range(2 * SIZE) if j % SIZE != 7]
    assert len(got) == len(good)
    for j, m in zip(good, got):
        assert_record(m, j, since, until)


def test_the_tombstones_of_a_batch_are_null_values_amid_its_records(server, topic_name,
                                                                  tmp_path):
    """A batch's ``tombstones`` (a delete's tombstone amid the changes of a
    table, as the CDC source sends them) arrive as null values in their
    place, the other records as the JsonConverter's envelopes of the batch's
    value schema; with a transform (the per-record path) the same."""
    routed = topic_name + "-routed"
    for t in (topic_name, routed):
        create(server, t)
    base = {"connector.class": "source_batch_plugins:TombstoneBatchSourceConnector",
            "size": str(SIZE)}
    c = Connect(server, offset_file=tmp_path / "offsets.json")
    try:
        c.create("tb", topic=topic_name, **base)
        c.create("tbr", topic=topic_name, **base, **{
            "transforms": "route", "transforms.route.regex": "(.*)",
            "transforms.route.type": "org.apache.kafka.connect.transforms.RegexRouter",
            "transforms.route.replacement": "$1-routed"})
        for t in (topic_name, routed):
            wait_until(lambda t=t: len(read_to_end(server, t)) >= SIZE, timeout=60,
                       message=f"the batch in {t}")
    finally:
        c.close()
    for t in (topic_name, routed):
        got = read_to_end(server, t)
        assert len(got) == SIZE
        for j, m in enumerate(got):
            assert json.loads(m.key())["payload"] == {"id": j}
            if j % 3 == 2:
                assert m.value() is None, (t, j)
            else:
                assert json.loads(m.value())["payload"] == {"id": j, "name": f"ü{j}"}, (t, j)
