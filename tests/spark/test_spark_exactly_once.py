"""The sink's exactlyOnce mode, seen by read_committed readers: batch
writes that fail part-way and are retried, task attempts that fence each
other, a driver that dies in the middle of a commit, and a streaming query
restarted from a checkpoint that replays a micro-batch the sink had already
committed. The same failures through the default (at-least-once) sink show
the duplicates these tests would catch.

Task retries and speculative attempts cannot be made in the shared local[2]
session (local mode never retries a task), so those tests call the sink's
two phases directly -- ``write_transactional`` as a task would,
``commit_transactions`` as the driver -- against the real server."""
import glob
import os
import threading
import time

import pyarrow as pa
import pytest

from conftest import create, writer
from kafkalite.client import Consumer, Producer, TopicPartition
from kafkalite_spark import options as opt
from kafkalite_spark.sink import (TransactionLostError, abort_transactions,
                                  commit_transactions, write_transactional)

N = 2000


def read_values(server, topic, partitions, isolation="read_committed"):
    """Every value up to the end (the last stable offset for read_committed)."""
    c = Consumer(server.config(**{"isolation.level": isolation}))
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = [c.get_watermark_offsets(tp)[1] for tp in tps]
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        out, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline and any(
                pos.offset < end for pos, end in zip(c.position(tps), ends)):
            out += [m.value() for m in c.consume(10_000, 0.5)]
        return out
    finally:
        c.close()


def open_transactions_hold(server, topic, partitions) -> bool:
    """Whether a transaction is open on a partition of ``topic``: its last
    stable offset is below its high watermark."""
    committed = Consumer(server.config(**{"isolation.level": "read_committed"}))
    everything = Consumer(server.config())
    try:
        return any(committed.get_watermark_offsets(TopicPartition(topic, p))[1]
                   < everything.get_watermark_offsets(TopicPartition(topic, p))[1]
                   for p in range(partitions))
    finally:
        committed.close()
        everything.close()


def expected(n=N, start=0):
    return sorted(b"%d" % i for i in range(start, start + n))


def test_a_batch_write_is_visible_to_read_committed_when_save_returns(spark, server):
    topic = "spark-eo-batch"
    create(server, topic, 3)
    df = spark.range(N, numPartitions=4).selectExpr("CAST(id % 7 AS STRING) AS key",
                                                    "CAST(id AS STRING) AS value")
    writer(df, server, topic=topic, exactlyOnce="true").save()
    assert sorted(read_values(server, topic, 3)) == expected()
    assert not open_transactions_hold(server, topic, 3)


def frame(spark, fail_partition=None):
    """N rows in 4 Spark partitions; ``fail_partition`` raises when its task
    starts, which in local[2] is after two other tasks have finished."""
    value = "CAST(id AS STRING)"
    if fail_partition is not None:
        value = (f"IF(spark_partition_id() = {fail_partition}, raise_error('planted fault'), "
                 f"{value})")
    return spark.range(N, numPartitions=4).selectExpr(f"{value} AS value")


@pytest.mark.parametrize("exactly_once", [True, False],
                         ids=["exactly-once", "at-least-once-shows-duplicates"])
def test_a_job_failing_part_way_then_retried(spark, server, exactly_once):
    topic = "spark-eo-fail-" + ("eo" if exactly_once else "alo")
    create(server, topic, 2)
    options = {"topic": topic, **({"exactlyOnce": "true"} if exactly_once else {})}
    with pytest.raises(Exception, match="planted fault"):
        writer(frame(spark, fail_partition=3), server, **options).save()
    in_the_log = read_values(server, topic, 2, "read_uncommitted")
    after_failure = read_values(server, topic, 2)
    assert len(in_the_log) >= N // 2, "the tasks that finished had written their rows"

    writer(frame(spark), server, **options).save()      # the job, run again
    final = read_values(server, topic, 2)
    if exactly_once:
        assert after_failure == [], "nothing of the failed job is visible to read_committed"
        assert sorted(final) == expected(), "the retried job's rows, each exactly once"
        assert not open_transactions_hold(server, topic, 2), "the failed job left none open"
    else:
        # the default sink: the failed job's finished tasks stay, so the retry duplicates them
        assert len(after_failure) >= N // 2
        assert set(final) == set(expected()) and len(final) > N


# ---- the two phases, driven as Spark would ----------------------------------------------------

def sink_options(server, topic, **extra):
    return opt.parse_sink({"kafkalite.bootstrap.servers": server.bootstrap, "topic": topic,
                           "exactlyOnce": "true", "transactionalIdPrefix": "eo-test", **extra})


def rows(values):
    """A task's input: Arrow batches with a value column."""
    yield pa.record_batch([pa.array(values, pa.binary())], names=["value"])


def test_a_retried_task_fences_its_failed_attempt(server):
    topic = "spark-eo-retry"
    create(server, topic, 1)
    o = sink_options(server, topic)
    # attempt 0 writes everything and its executor is lost before Spark gets the message
    lost = write_transactional(o, rows(expected(100)), "job-r", 0)
    assert lost.transactional_id == "eo-test-job-r-0" and lost.records == 100
    assert open_transactions_hold(server, topic, 1)
    retry = write_transactional(o, rows(expected(100)), "job-r", 0)
    assert (retry.producer_id, retry.producer_epoch) != (lost.producer_id, lost.producer_epoch)
    commit_transactions(o, [retry])
    assert sorted(read_values(server, topic, 1)) == expected(100)
    assert len(read_values(server, topic, 1, "read_uncommitted")) == 200, "both attempts wrote"
    assert not open_transactions_hold(server, topic, 1)


def test_a_speculative_attempt_that_fenced_the_chosen_one_fails_the_job_cleanly(server):
    topic = "spark-eo-speculative"
    create(server, topic, 1)
    o = sink_options(server, topic)
    other = write_transactional(o, rows([b"other"]), "job-s", 1)
    chosen = write_transactional(o, rows(expected(50)), "job-s", 0)
    # a speculative copy of the same task starts after ``chosen`` prepared
    write_transactional(o, rows(expected(50)), "job-s", 0)
    with pytest.raises(TransactionLostError, match="eo-test-job-s-0"):
        commit_transactions(o, [chosen, other])
    assert read_values(server, topic, 1) == [], "neither copy, nor the other task's rows"
    assert not open_transactions_hold(server, topic, 1), "the copy's transaction is aborted too"


def test_a_task_failing_mid_write_releases_its_partitions_at_once(server):
    topic = "spark-eo-task-fails"
    create(server, topic, 1)
    o = sink_options(server, topic)

    def failing():
        yield from rows(expected(30))
        raise RuntimeError("the task's input failed")

    with pytest.raises(RuntimeError, match="input failed"):
        write_transactional(o, failing(), "job-f", 0)
    assert len(read_values(server, topic, 1, "read_uncommitted")) == 30
    assert not open_transactions_hold(server, topic, 1), "its transaction was aborted"
    assert read_values(server, topic, 1) == []


def test_a_cancelled_task_that_opens_its_transaction_after_the_jobs_abort_is_aborted(server):
    # A job fails; Spark cancels a task still starting and calls abort, which
    # fences the job's ids. The cancelled task's Python worker reaches
    # init_transactions after that fence, writes, and is killed before it can
    # end its transaction (what a loaded CI run did): without the abort's
    # second look, the partitions' last stable offset stayed behind that
    # transaction for transaction.timeout.ms and the retried job was invisible.
    topic = "spark-eo-late-task"
    create(server, topic, 1)
    o = sink_options(server, topic)
    aborting = threading.Thread(target=abort_transactions, args=(o, "job-late", [None, None]))
    aborting.start()
    time.sleep(0.5)                             # the abort's first fences are done
    late = write_transactional(o, rows(expected(40)), "job-late", 1)
    assert late.open
    aborting.join(60)
    assert not aborting.is_alive()
    assert not open_transactions_hold(server, topic, 1), "the late task's transaction is aborted"
    assert read_values(server, topic, 1) == []
    with pytest.raises(TransactionLostError):
        commit_transactions(o, [late])


def test_a_micro_batch_replayed_after_a_crash_in_the_middle_of_commit(server):
    topic = "spark-eo-half-committed"
    create(server, topic, 2)
    o = sink_options(server, topic)
    p0, p1 = [b"a%d" % i for i in range(40)], [b"b%d" % i for i in range(40)]
    first = [write_transactional(o, rows(p0), "query-h", 0, batch_id=7),
             write_transactional(o, rows(p1), "query-h", 1, batch_id=7)]
    commit_transactions(o, first[:1])          # the driver dies after ending one of two
    assert sorted(read_values(server, topic, 2)) == sorted(p0)

    # Spark runs micro-batch 7 again after the restart
    replay = [write_transactional(o, rows(p0), "query-h", 0, batch_id=7),
              write_transactional(o, rows(p1), "query-h", 1, batch_id=7)]
    assert replay[0].already_committed and replay[0].records == 0
    assert not replay[1].already_committed and replay[1].records == 40
    commit_transactions(o, replay)
    assert sorted(read_values(server, topic, 2)) == sorted(p0 + p1), "each row exactly once"
    # a replayed commit() of the same messages is a no-op
    commit_transactions(o, replay)
    # and the next micro-batch is written as usual
    nxt = write_transactional(o, rows([b"c0"]), "query-h", 0, batch_id=8)
    assert not nxt.already_committed
    commit_transactions(o, [nxt])
    assert sorted(read_values(server, topic, 2)) == sorted(p0 + p1 + [b"c0"])
    assert not open_transactions_hold(server, topic, 2)


# ---- streaming ------------------------------------------------------------------------------

def produce(server, topic, values, partition):
    p = Producer(server.config())
    p.produce_batch(topic, values, partition=partition)
    assert p.flush(20) == 0
    p.close()


def run_available_now(spark, server, src, dst, checkpoint, exactly_once):
    w = (spark.readStream.format("kafkalite")
         .option("kafkalite.bootstrap.servers", server.bootstrap).option("subscribe", src)
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", "100").load()
         .selectExpr("value").writeStream.format("kafkalite")
         .option("kafkalite.bootstrap.servers", server.bootstrap).option("topic", dst)
         .option("checkpointLocation", checkpoint))
    if exactly_once:
        w = w.option("exactlyOnce", "true")
    q = w.trigger(availableNow=True).start()
    assert q.awaitTermination(180), "an available-now query ends by itself"
    assert q.exception() is None


@pytest.mark.parametrize("exactly_once", [True, False],
                         ids=["exactly-once", "at-least-once-shows-duplicates"])
def test_a_stream_restarted_from_its_checkpoint_replaying_a_committed_batch(
        spark, server, tmp_path, exactly_once):
    tag = "eo" if exactly_once else "alo"
    src, dst = f"spark-eo-src-{tag}", f"spark-eo-dst-{tag}"
    create(server, src, 2)
    create(server, dst, 2)
    produce(server, src, [b"%d" % i for i in range(150)], 0)
    produce(server, src, [b"%d" % i for i in range(150, 300)], 1)
    cp = str(tmp_path / "cp")
    run_available_now(spark, server, src, dst, cp, exactly_once)
    assert sorted(read_values(server, dst, 2)) == expected(300)

    # The driver dies after the sink committed the last micro-batch and
    # before Spark wrote it to the checkpoint's commit log: the restart runs
    # that micro-batch again.
    last = max(int(os.path.basename(f)) for f in glob.glob(cp + "/commits/[0-9]*"))
    for f in (f"{cp}/commits/{last}", f"{cp}/commits/.{last}.crc"):
        if os.path.exists(f):
            os.remove(f)
    produce(server, src, [b"%d" % i for i in range(300, 400)], 0)
    run_available_now(spark, server, src, dst, cp, exactly_once)

    final = read_values(server, dst, 2)
    if exactly_once:
        assert sorted(final) == expected(400), "every row exactly once"
        assert not open_transactions_hold(server, dst, 2)
    else:
        assert set(final) == set(expected(400)) and len(final) == 500, \
            "the replayed micro-batch (100 rows) twice"


# ---- options --------------------------------------------------------------------------------

BAD = [
    ({"exactlyOnce": "maybe"}, "exactlyOnce", "true or false"),
    ({"transactionalIdPrefix": "x"}, "transactionalIdPrefix", "only with exactlyOnce"),
    ({"exactlyOnce": "true", "transactionalIdPrefix": " "}, "transactionalIdPrefix", "1 to 200"),
    ({"exactlyOnce": "true", "kafkalite.transactional.id": "mine"},
     "kafkalite.transactional.id", "its own transactional id"),
    ({"exactlyOnce": "true", "kafkalite.acks": "1"}, "kafkalite.*", "acks must be all"),
    ({"exactlyOnce": "true", "kafkalite.enable.idempotence": "false"}, "kafkalite.*",
     "enable.idempotence"),
]


@pytest.mark.parametrize("options,option,message", BAD, ids=[b[1] + "-" + b[2] for b in BAD])
def test_bad_sink_options_fail_at_planning(spark, server, options, option, message):
    df = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception) as info:
        writer(df, server, topic="spark-eo-batch", **options).save()
    text = str(info.value)
    assert f"option {option!r}" in text and message in text, text[:2000]


def test_streaming_exactly_once_needs_the_topic_option(spark, server, tmp_path):
    q = (spark.readStream.format("rate").load().selectExpr("CAST(value AS STRING) AS value",
                                                          "'spark-eo-batch' AS topic")
         .writeStream.format("kafkalite").option("kafkalite.bootstrap.servers", server.bootstrap)
         .option("exactlyOnce", "true").option("checkpointLocation", str(tmp_path / "cp")))
    with pytest.raises(Exception, match="option 'topic'.*exactlyOnce on a streaming query"):
        q.start().awaitTermination(60)
