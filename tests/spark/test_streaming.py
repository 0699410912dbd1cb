"""Streaming queries over the kafkalite source: micro-batches bounded by
maxOffsetsPerTrigger, restarts from the checkpoint, new partitions."""
import pytest

from conftest import consume_all, create
from kafkalite.client import AdminClient, NewPartitions, Producer


def produce(server, topic, values, partition):
    p = Producer(server.config())
    p.produce_batch(topic, [b"%d" % v for v in values], partition=partition)
    assert p.flush(20) == 0
    p.close()


def run_available_now(spark, server, topic, out, checkpoint, **options):
    r = (spark.readStream.format("kafkalite")
         .option("kafkalite.bootstrap.servers", server.bootstrap).option("subscribe", topic)
         .option("startingOffsets", "earliest"))
    for k, v in options.items():
        r = r.option(k, v)
    q = (r.load().selectExpr("partition", "offset", "CAST(value AS STRING) AS value")
         .writeStream.format("parquet").option("path", out)
         .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
    assert q.awaitTermination(120), "an available-now query ends by itself"
    assert q.exception() is None
    return [p["numInputRows"] for p in q.recentProgress]


def test_two_runs_from_one_checkpoint_lose_and_repeat_nothing(spark, server, tmp_path, topic_name):
    topic = topic_name          # the test's own on the shared server, run after run
    create(server, topic, 2)
    produce(server, topic, range(0, 150), 0)
    produce(server, topic, range(150, 300), 1)
    out, cp = str(tmp_path / "out"), str(tmp_path / "cp")

    batches = run_available_now(spark, server, topic, out, cp, maxOffsetsPerTrigger="100")
    assert [n for n in batches if n] == [100, 100, 100], "maxOffsetsPerTrigger bounds each batch"

    # while the query is down: more records, and a partition added to the topic
    produce(server, topic, range(300, 400), 0)
    admin = AdminClient(server.config())
    for f in admin.create_partitions([NewPartitions(topic, 3)]).values():
        f.result()
    admin.close()
    produce(server, topic, range(400, 450), 2)

    batches = run_available_now(spark, server, topic, out, cp)
    assert sum(batches) == 150, "the restart reads only what came after the checkpoint"
    got = spark.read.parquet(out).collect()
    values = sorted(int(r["value"]) for r in got)
    assert values == list(range(450)), "every record exactly once, new partition included"
    assert len({(r["partition"], r["offset"]) for r in got}) == 450


def test_stream_from_topic_to_topic_through_the_sink(spark, server, tmp_path):
    src, dst = "spark-stream-src", "spark-stream-dst"
    create(server, src, 2)
    create(server, dst, 1)
    produce(server, src, range(500), 0)
    q = (spark.readStream.format("kafkalite")
         .option("kafkalite.bootstrap.servers", server.bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").load()
         .selectExpr("key", "CONCAT(CAST(value AS STRING), '!') AS value")
         .writeStream.format("kafkalite").option("kafkalite.bootstrap.servers", server.bootstrap)
         .option("topic", dst).option("checkpointLocation", str(tmp_path / "cp"))
         .trigger(availableNow=True).start())
    assert q.awaitTermination(120) and q.exception() is None
    got = consume_all(server, dst, 1, 500)
    assert sorted(m.value() for m in got.values()) == sorted(b"%d!" % i for i in range(500))


def test_streaming_rejects_ending_offsets(spark, server, tmp_path):
    q = (spark.readStream.format("kafkalite")
         .option("kafkalite.bootstrap.servers", server.bootstrap).option("subscribe", "x")
         .option("endingOffsets", "latest").load()
         .writeStream.format("noop").option("checkpointLocation", str(tmp_path / "cp")).start())
    with pytest.raises(Exception, match="option 'endingOffsets'.*not allowed for a streaming"):
        q.awaitTermination(60)


def test_bad_stream_options_fail_at_load(spark, server):
    with pytest.raises(Exception, match="option 'maxOffsetsPerTrigger'.*at least 1"):
        (spark.readStream.format("kafkalite")
         .option("kafkalite.bootstrap.servers", server.bootstrap).option("subscribe", "x")
         .option("maxOffsetsPerTrigger", "0").load())
