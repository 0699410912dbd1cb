"""The kafkalite source under ``kafkalite.isolation.level``: read_committed
batch and streaming reads over a topic holding committed, aborted and still
open transactions beside plain records, against read_uncommitted."""
import json

import pytest

from conftest import create, reader
from kafkalite.client import Consumer, Producer, TopicPartition

# Long enough that the open transaction outlives the test that holds it.
OPEN_TIMEOUT_MS = 600_000


def transactional(server, tid):
    p = Producer(server.config(**{"transactional.id": tid,
                                  "transaction.timeout.ms": OPEN_TIMEOUT_MS}))
    p.init_transactions(15)
    return p


def plain(server, topic, values, partition):
    p = Producer(server.config())
    p.produce_batch(topic, values, partition=partition)
    assert p.flush(15) == 0
    p.close()


def fill(server, topic):
    """Partition 0: plain n*, committed c*, aborted a*, committed d*, an open
    transaction o*, then plain records p* after it. Partition 1: aborted b*
    around committed e*. -> the producer whose transaction is open."""
    create(server, topic, 2)
    plain(server, topic, [b"n%d" % i for i in range(5)], 0)
    tx = transactional(server, topic + "-tx")
    for prefix, partition, commit in ((b"c", 0, True), (b"a", 0, False), (b"b", 1, False),
                                      (b"e", 1, True), (b"d", 0, True), (b"b2-", 1, False)):
        tx.begin_transaction()
        tx.produce_batch(topic, [prefix + b"%d" % i for i in range(10)], partition=partition)
        (tx.commit_transaction if commit else tx.abort_transaction)(15)
    tx.begin_transaction()
    tx.produce_batch(topic, [b"o%d" % i for i in range(5)], partition=0)
    assert tx.flush(15) == 0
    plain(server, topic, [b"p%d" % i for i in range(3)], 0)
    return tx


def values(df):
    return sorted(r["value"] for r in df.select("value").collect())


def family(vals, prefix):
    return [v for v in vals if v.rstrip(b"0123456789") == prefix]


def test_batch_read_committed_never_returns_aborted_or_open_records(spark, server):
    topic = "spark-rc-batch"
    tx = fill(server, topic)
    try:
        committed = values(reader(spark, server, subscribe=topic,
                                  **{"kafkalite.isolation.level": "read_committed"}).load())
        everything = values(reader(spark, server, subscribe=topic).load())
        # minPartitions splits ranges across transaction boundaries
        split = values(reader(spark, server, subscribe=topic, minPartitions="7",
                              **{"kafkalite.isolation.level": "read_committed"}).load())
    finally:
        tx.close(0)
    want = sorted([b"n%d" % i for i in range(5)] + [b"c%d" % i for i in range(10)]
                  + [b"d%d" % i for i in range(10)] + [b"e%d" % i for i in range(10)])
    assert committed == want, "committed and plain records before the open transaction only"
    assert split == want
    for prefix in (b"a", b"b", b"b2-", b"o", b"p"):
        assert not family(committed, prefix)
    # read_uncommitted: everything, aborted and open included (the test can tell)
    assert len(family(everything, b"a")) == 10 and len(family(everything, b"o")) == 5
    assert len(everything) == 5 + 60 + 5 + 3


def test_read_committed_latest_is_the_last_stable_offset(spark, server):
    topic = "spark-rc-offsets"
    tx = fill(server, topic)
    try:
        c = Consumer(server.config(**{"isolation.level": "read_committed"}))
        lso = c.get_watermark_offsets(TopicPartition(topic, 0))[1]
        c.close()
        got = reader(spark, server, subscribe=topic,
                     **{"kafkalite.isolation.level": "read_committed"}).load() \
            .select("partition", "offset").collect()
    finally:
        tx.close(0)
    assert max(r["offset"] for r in got if r["partition"] == 0) < lso
    # 5 plain + 3 committed transactions of 10 + their 3 markers + 1 abort marker + 10 aborted
    assert lso == 5 + 10 + 1 + 10 + 1 + 10 + 1


def test_ending_offsets_past_the_open_transaction_wait_then_fail_clearly(spark, server):
    topic = "spark-rc-ending"
    tx = fill(server, topic)
    try:
        end = json.dumps({topic: {"0": 45, "1": -1}})
        with pytest.raises(Exception, match="last stable offset stayed at 38"):
            reader(spark, server, subscribe=topic, endingOffsets=end,
                   **{"kafkalite.isolation.level": "read_committed",
                      "kafkaConsumer.pollTimeoutMs": "1500"}).load().collect()
        tx.commit_transaction(15)
        got = values(reader(spark, server, subscribe=topic, endingOffsets=end,
                            **{"kafkalite.isolation.level": "read_committed"}).load())
    finally:
        tx.close(0)
    assert family(got, b"o") == [b"o%d" % i for i in range(5)], "once the transaction commits"


def run_available_now(spark, server, topic, out, checkpoint):
    q = (spark.readStream.format("kafkalite")
         .option("kafkalite.bootstrap.servers", server.bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest")
         .option("kafkalite.isolation.level", "read_committed").load()
         .selectExpr("partition", "offset", "value")
         .writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert q.awaitTermination(120), "an available-now query ends by itself"
    assert q.exception() is None


def test_streaming_read_committed_picks_up_a_transaction_when_it_commits(spark, server, tmp_path):
    topic = "spark-rc-stream"
    tx = fill(server, topic)
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")
    try:
        run_available_now(spark, server, topic, out, cp)
        first = sorted(r["value"] for r in spark.read.parquet(out).collect())
        assert not family(first, b"o") and not family(first, b"p") and not family(first, b"a")
        assert len(first) == 35
        tx.commit_transaction(15)
        # a new transaction, left open, after what is now stable
        tx.begin_transaction()
        tx.produce_batch(topic, [b"q%d" % i for i in range(4)], partition=0)
        assert tx.flush(15) == 0
        run_available_now(spark, server, topic, out, cp)
    finally:
        tx.close(0)
    got = spark.read.parquet(out).collect()
    vals = sorted(r["value"] for r in got)
    assert len({(r["partition"], r["offset"]) for r in got}) == len(got), "no record read twice"
    assert family(vals, b"o") == [b"o%d" % i for i in range(5)]
    assert family(vals, b"p") == [b"p%d" % i for i in range(3)]
    assert not family(vals, b"q") and not family(vals, b"a") and not family(vals, b"b")
    assert len(vals) == 35 + 5 + 3
