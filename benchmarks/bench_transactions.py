"""What transactions cost: produce, read_committed consume and commit latency.

    python benchmarks/bench_transactions.py            # about 2 minutes
    python benchmarks/bench_transactions.py --quick    # what the smoke test runs

Figures (100-byte values, one partition, one client process, same server):

1. produce for ``--seconds`` with an idempotent producer (the baseline), then
   transactionally, committing every 100 ms and every 10,000 records:
   kafkalite's native client (produce_batch of 1,000 values) and
   confluent-kafka (produce() per record, over the Kafka listener).
   Target: transactional at 100 ms >= 0.8x the idempotent rate.
2. consume a log where 10% of the records are in aborted transactions,
   read_committed against read_uncommitted (the whole log, records of the
   log per second): native consume_batch and confluent-kafka.
   Target: read_committed >= 0.9x read_uncommitted.
3. commit latency of transactions of 100 records: commit_transaction()
   (until EndTxn is answered: PrepareCommit is durable) and until a
   read_committed consumer's end offset passes the transaction (its
   markers are written), p50 and p99.

Timing never fails anything: this prints figures and writes results.json /
results.md under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
import traceback

import common
import report
from report import Results, say

from kafkalite import launcher

VALUE = b"v" * 100
HEADERS = ["#", "Figure", "kafkalite", "Compared with", "Ratio", "Target", "Met"]


def create_topic(server, name: str) -> None:
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        admin.create_topics([NewTopic(name, 1)])[name].result()
    finally:
        admin.close()


# ---- produce ----------------------------------------------------------------------------------

def drive(p, transactional: bool, seconds: float, send_1000, commit_ms, commit_records) -> float:
    """Records/s of ``send_1000()`` (1,000 records a call) for ``seconds``,
    in transactions committed every ``commit_ms`` or ``commit_records``
    when ``transactional``; the same loop for both clients."""
    if transactional:
        p.init_transactions(30)
        p.begin_transaction()
    sent, in_txn, txn_started = 0, 0, time.monotonic()
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        send_1000()
        sent += 1000
        in_txn += 1000
        if transactional and ((commit_records and in_txn >= commit_records) or
                              (commit_ms and time.monotonic() - txn_started >= commit_ms / 1000)):
            p.commit_transaction(60)
            p.begin_transaction()
            in_txn, txn_started = 0, time.monotonic()
    if transactional:
        p.commit_transaction(60)
    assert p.flush(120) == 0
    return sent / (time.monotonic() - start)


def native_produce(server, topic: str, seconds: float, commit_ms=None, commit_records=None,
                   tag="", version=2) -> float:
    """Records/s for ``seconds``: idempotent when no commit interval is given;
    ``version``: the transaction protocol (2: KIP-890 part 2)."""
    from kafkalite.client import Producer
    conf = {"bootstrap.servers": server.bootstrap, "kafkalite.transaction.version": version}
    transactional = bool(commit_ms or commit_records)
    if transactional:
        conf["transactional.id"] = f"bench-native-{tag}"
    p = Producer(conf)
    values = [VALUE] * 1_000
    try:
        return drive(p, transactional, seconds,
                     lambda: p.produce_batch(topic, values, partition=0), commit_ms,
                     commit_records)
    finally:
        p.close()


def ck_produce(server, topic: str, seconds: float, commit_ms=None, commit_records=None,
               tag="") -> float:
    import confluent_kafka as ck
    conf = {"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 5,
            "enable.idempotence": True, "batch.num.messages": 10000,
            "queue.buffering.max.messages": 1_000_000}
    transactional = bool(commit_ms or commit_records)
    if transactional:
        conf["transactional.id"] = f"bench-ck-{tag}"
    p = ck.Producer(conf)
    produce = p.produce

    def send_1000():
        for _ in range(1000):
            try:
                produce(topic, VALUE, partition=0)
            except BufferError:     # a million records in flight on a loaded machine
                report.produce_when_room(p, lambda: produce(topic, VALUE, partition=0))

    return drive(p, transactional, seconds, send_1000, commit_ms, commit_records)


# ---- consume ----------------------------------------------------------------------------------

def fill_with_aborts(server, topic: str, records: int, txn_records: int = 1_000) -> int:
    """``records`` records in transactions of ``txn_records``, every tenth
    aborted; returns the log end offset (records plus markers)."""
    from kafkalite.client import Consumer, Producer, TopicPartition
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": f"fill-{topic}"})
    try:
        p.init_transactions(30)
        for i in range(records // txn_records):
            p.begin_transaction()
            p.produce_batch(topic, [VALUE] * txn_records, partition=0)
            # every tenth aborted, but not the last: a read that ends on an
            # aborted transaction waits its poll timeout for records that
            # will not come, a cost of the log's shape, not of read_committed
            (p.abort_transaction if i % 10 == 8 else p.commit_transaction)(60)
    finally:
        p.close()
    c = Consumer({"bootstrap.servers": server.bootstrap})
    try:
        return c.get_watermark_offsets(TopicPartition(topic, 0))[1]
    finally:
        c.close()


def native_consume(server, topic: str, end: int, isolation: str) -> tuple[float, int]:
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": server.bootstrap, "isolation.level": isolation})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    tp = [TopicPartition(topic, 0)]
    try:
        rows = 0
        start = time.monotonic()
        deadline = start + 300
        while c.position(tp)[0].offset < end and time.monotonic() < deadline:
            # a short wait: a consume_batch that finds only aborted records
            # waits its whole timeout for more (the position is past them)
            rows += c.consume_batch(0.05).num_rows
        return end / (time.monotonic() - start), rows
    finally:
        c.close()


def ck_consume(server, topic: str, end: int, isolation: str) -> tuple[float, int]:
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": "bench",
                     "enable.auto.commit": False, "isolation.level": isolation,
                     "max.partition.fetch.bytes": 10485760})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    try:
        rows, last = 0, -1
        start = time.monotonic()
        deadline = start + 300
        while last < end - 1 and time.monotonic() < deadline:
            msgs = c.consume(10_000, 0.5)
            rows += len(msgs)
            if msgs:
                last = max(last, msgs[-1].offset())
            elif rows and c.position([ck.TopicPartition(topic, 0)])[0].offset >= end:
                break
        return end / (time.monotonic() - start), rows
    finally:
        c.close()


# ---- commit latency ----------------------------------------------------------------------------

def commit_latency(server, topic: str, count: int) -> tuple[list, list]:
    """(commit_transaction() seconds, seconds until the LSO passes) per transaction."""
    from kafkalite.client import Consumer, Producer, TopicPartition
    p = Producer({"bootstrap.servers": server.bootstrap, "transactional.id": "latency",
                  "linger.ms": 0})
    c = Consumer({"bootstrap.servers": server.bootstrap, "isolation.level": "read_committed"})
    tp = TopicPartition(topic, 0)
    calls, visible = [], []
    try:
        p.init_transactions(30)
        for _ in range(count):
            p.begin_transaction()
            p.produce_batch(topic, [VALUE] * 100, partition=0)
            assert p.flush(30) == 0
            end = c.get_watermark_offsets(TopicPartition(topic, 0))[1] + 100
            t0 = time.perf_counter()
            p.commit_transaction(30)
            calls.append(time.perf_counter() - t0)
            while c.get_watermark_offsets(tp)[1] < end:
                pass
            visible.append(time.perf_counter() - t0)
    finally:
        p.close()
        c.close()
    return calls, visible


def parse_args(argv):
    p = common.parser(__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seconds", type=float, default=8.0, help="seconds per produce figure")
    p.add_argument("--records", type=int, default=1_000_000,
                   help="records of the consume log (10%% aborted)")
    p.add_argument("--commits", type=int, default=300, help="transactions timed for latency")
    p.add_argument("--workers", type=int, default=1)
    common.add_dirs(p)
    common.add_quick(p, "1 s figures, 20,000 records, 20 commits")
    args = common.parse(p, argv, quick={"seconds": 1.0, "records": 20_000, "commits": 20})
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out_dir, work = report.make_dirs("transactions", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    import confluent_kafka
    say("kafkalite transactions benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    say(f"  clients    kafkalite native; confluent-kafka {confluent_kafka.version()[0]}")
    report.say_load(info)
    res = Results()
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=args.workers)
    started = time.perf_counter()
    figures = {}
    try:
        server.start()
        for client, produce in (("native", native_produce), ("ck", ck_produce)):
            runs = [("idempotent", {}), ("txn_100ms", {"commit_ms": 100}),
                    ("txn_10k", {"commit_records": 10_000})]
            if client == "native":      # confluent-kafka (librdkafka) speaks v1 only
                runs.append(("txn_100ms_v1", {"commit_ms": 100, "version": 1}))
            for name, kw in runs:
                topic = f"p-{client}-{name}"
                create_topic(server, topic)
                figures[(client, name)] = produce(server, topic, args.seconds, tag=name, **kw)
        create_topic(server, "aborts")
        end = fill_with_aborts(server, "aborts", args.records)
        for client, consume, repeats in (("native", native_consume, 5), ("ck", ck_consume, 1)):
            # a native read of the log takes a tenth of a second: the median
            # of several, the two isolation levels taking turns
            rates: dict = {}
            for _ in range(repeats):
                for iso in ("read_uncommitted", "read_committed"):
                    rate, rows = consume(server, "aborts", end, iso)
                    expect = args.records * (9 if iso == "read_committed" else 10) // 10
                    assert rows == expect, f"{client} {iso}: {rows} records, expected {expect}"
                    rates.setdefault(iso, []).append(rate)
            for iso, got in rates.items():
                figures[(client, iso)] = statistics.median(got)
        create_topic(server, "latency")
        calls, visible = commit_latency(server, "latency", args.commits)
    except Exception:
        traceback.print_exc()
        print(server.output()[-3000:], file=sys.stderr)
        return 1
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started

    labels = {"native": "native produce_batch", "ck": "confluent-kafka produce()"}
    for client in ("native", "ck"):
        base = f"{client}_idempotent_records_per_s"
        res.add(base, 1, f"{labels[client]}, idempotent", figures[(client, "idempotent")],
                "records/s")
        ratio = figures[(client, "txn_100ms")] / figures[(client, "idempotent")]
        res.add(f"{client}_txn_100ms_records_per_s", 1,
                f"{labels[client]}, transactional, commit every 100 ms",
                figures[(client, "txn_100ms")], "records/s", baseline_key=base,
                target_text=">= 0.8x idempotent", meets=ratio >= 0.8)
        res.add(f"{client}_txn_10k_records_per_s", 1,
                f"{labels[client]}, transactional, commit every 10,000 records",
                figures[(client, "txn_10k")], "records/s", baseline_key=base)
        if (client, "txn_100ms_v1") in figures:
            res.add(f"{client}_txn_100ms_v1_records_per_s", 1,
                    f"{labels[client]}, transactions v1, commit every 100 ms",
                    figures[(client, "txn_100ms_v1")], "records/s", baseline_key=base)
    consume_labels = {"native": "native consume_batch", "ck": "confluent-kafka consume()"}
    for client in ("native", "ck"):
        base = f"{client}_read_uncommitted_records_per_s"
        res.add(base, 2, f"{consume_labels[client]}, read_uncommitted",
                figures[(client, "read_uncommitted")], "records/s")
        ratio = figures[(client, "read_committed")] / figures[(client, "read_uncommitted")]
        res.add(f"{client}_read_committed_records_per_s", 2,
                f"{consume_labels[client]}, read_committed (10% aborted)",
                figures[(client, "read_committed")], "records/s", baseline_key=base,
                target_text=">= 0.9x read_uncommitted", meets=ratio >= 0.9)
    res.add("commit_call_p50_ms", 3, "commit_transaction() p50",
            common.percentile(calls, 0.5) * 1000, "ms")
    res.add("commit_call_p99_ms", 3, "commit_transaction() p99",
            common.percentile(calls, 0.99) * 1000, "ms")
    res.add("commit_visible_p50_ms", 3, "commit until read_committed sees it, p50",
            common.percentile(visible, 0.5) * 1000, "ms")
    res.add("commit_visible_p99_ms", 3, "commit until read_committed sees it, p99",
            common.percentile(visible, 0.99) * 1000, "ms")
    report.write_tables(
        out_dir, "kafkalite transactions", res, HEADERS, elapsed=elapsed, info=info,
        settings=vars(args), units={"records/s": "records per second", "ms": "milliseconds"},
        intro=f"100-byte values, one partition; produce figures {args.seconds:g} s each; "
              f"consume log {args.records:,} records (10% aborted); {args.commits} "
              f"transactions of 100 records timed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
