"""``max.task.idle.ms`` (KIP-353) against a real server.

A stream-table join whose result depends on the order across its two
inputs: stream records arrive first, the table's records (timestamps a
second earlier) a few seconds later. With
max.task.idle.ms the task waits for the table's partition, then takes the
table's records first (timestamp order), so every stream record joins (the
model: the table as of each stream record's timestamp; once the table's
partition has nothing buffered again they wait up to max.task.idle.ms
more, KIP-353); with 0 it does not wait and nothing joins. While the task waits, the committed offset of the
stream's partition is that of its first buffered record, not the
consumer's position (a crash then reads them again: exactly-once), and
after the table arrives the commit reaches the end.
"""
from __future__ import annotations

import time

import pytest
from harness import create, wait_until
from test_streams_runtime import config, read

from kafkalite.client import Consumer, Producer, TopicPartition
from kafkalite.streams import Consumed, KafkaStreams, Produced, Serdes, StreamsBuilder

S = Serdes.string()
N = 20


def produce(server, topic, records) -> None:
    p = Producer(server.config())
    for k, v, ts in records:
        p.produce(topic, v.encode(), k.encode(), timestamp=ts)
    assert p.flush(10) == 0
    p.close()


def committed(server, group, topic) -> int:
    c = Consumer(server.config(**{"group.id": group}))
    try:
        return c.committed([TopicPartition(topic, 0)])[0].offset
    finally:
        c.close()


@pytest.mark.parametrize("guarantee", ["at_least_once", "exactly_once_v2"])
# 5 s: time enough for the table's records to be written and fetched once
# the stream's are buffered, on a loaded machine too
@pytest.mark.parametrize("idle_ms", [0, 5_000])
def test_join_waits_for_the_idle_partition(server, topic_name, tmp_path, guarantee, idle_ms):
    stream_t, table_t, out = topic_name, f"{topic_name}-t", f"{topic_name}-o"
    for t in (stream_t, table_t, out):
        create(server, t, 1)
    app_id = f"{topic_name}-app"
    b = StreamsBuilder()
    table = b.table(table_t, Consumed.with_(S, S))
    b.stream(stream_t, Consumed.with_(S, S)).join(
        table, lambda v, t: f"{v}+{t}").to(out, Produced.with_(S, S))
    streams = KafkaStreams(b.build(), config(server, tmp_path, app_id, **{
        "processing.guarantee": guarantee, "max.task.idle.ms": idle_ms,
        "commit.interval.ms": 100}))
    now = int(time.time() * 1000)      # not 1970: retention would delete the output
    produce(server, stream_t, [(f"k{i}", f"s{i}", now + i) for i in range(N)])
    streams.start()

    def running(condition):
        assert streams.state != KafkaStreams.ERROR, streams.error
        return condition()
    try:
        if idle_ms:
            # polls brought the stream's records, not the table's: they wait
            # (the consumer's buffers, read here as they are)
            wait_until(lambda: running(lambda: any(
                stream_t in held for held in list(streams._buffered.values()))), 30,
                "the stream's records to be buffered")
            # waiting: nothing processed, nothing of the stream committed
            assert streams.metrics()["processed"] == 0
            assert committed(server, app_id, stream_t) in (-1, -1001, 0)
        else:
            wait_until(lambda: running(lambda: streams.metrics()["processed"] >= N), 30,
                       "the stream's records to be processed")
        produce(server, table_t, [(f"k{i}", f"t{i}", now - 1_000) for i in range(N)])
        wait_until(lambda: running(lambda: streams.metrics()["processed"] >= 2 * N), 30,
                   "every record to be processed")
        wait_until(lambda: committed(server, app_id, stream_t) >= N, 30,
                   "the stream's offsets to be committed")
    finally:
        streams.close()
    joined = sorted(v.decode() for _, _, v, _ in read(server, out, 1))
    if idle_ms:
        assert joined == sorted(f"s{i}+t{i}" for i in range(N))
    else:
        assert joined == []     # processed as they came: the table was empty


@pytest.mark.parametrize("bad", [-2, "5", 1.5, None])
def test_bad_max_task_idle_is_refused(bad):
    with pytest.raises(ValueError, match="max.task.idle.ms"):
        KafkaStreams(StreamsBuilder().build(), {"application.id": "a",
                                                "bootstrap.servers": "x:1",
                                                "max.task.idle.ms": bad})
