"""Kafka's own client against kafkalite's Kafka listener, beside our native client.

    python benchmarks/bench_kafka_clients.py            # 1,000,000 records per run
    python benchmarks/bench_kafka_clients.py --quick    # what the smoke test runs

Figures (100-byte values, one partition, acks=1, one client process):

1. confluent-kafka Producer.produce() per record, over the Kafka wire protocol
2. confluent-kafka Consumer.consume() batches, over the Kafka wire protocol
   (fetch responses sendfile the segment bytes)
3. kafkalite Producer.produce_batch / Consumer.consume_batch over ZeroMQ

Each figure is the best of --runs runs on a fresh topic (consume reads the
topic the best produce run wrote). For reference, a single Python process
with confluent-kafka reached about 570,000 records/s against Apache Kafka in
a published measurement. Timing never fails anything: this prints figures and
writes results.json / results.md under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
import traceback

import common
import report
from report import Results, say

from kafkalite import launcher

VALUE_BYTES = 100
HEADERS = ["#", "Figure", "kafkalite", "Compared with", "Ratio", "Target", "Met"]


def create_topic(server, name: str) -> None:
    from kafkalite.client import AdminClient, NewTopic
    from kafkalite.client.config import owner_config
    # a server with security on takes the owner's key pair on its native port
    admin = AdminClient({"bootstrap.servers": server.bootstrap, **owner_config(server.info)})
    try:
        admin.create_topics([NewTopic(name, 1)])[name].result()
    finally:
        admin.close()


def ck_produce(server, topic: str, n: int) -> float:
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "acks": 1, "linger.ms": 5,
                     "batch.num.messages": 10000, "batch.size": 1_000_000,
                     "queue.buffering.max.messages": 1_000_000})
    value = b"v" * VALUE_BYTES

    def loop():
        produce = p.produce
        for _ in range(n):
            try:
                produce(topic, value, partition=0)
            except BufferError:
                report.produce_when_room(p, lambda: produce(topic, value, partition=0))
        assert p.flush(120) == 0
    seconds = report.timed(loop)
    return n / seconds


def ck_consume(server, topic: str, n: int) -> float:
    import confluent_kafka as ck
    c = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "group.id": "bench",
                     "enable.auto.commit": False, "fetch.max.bytes": 52428800,
                     "max.partition.fetch.bytes": 10485760})
    c.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    try:
        def loop():
            seen, deadline = 0, time.monotonic() + 300
            while seen < n and time.monotonic() < deadline:
                seen += len(c.consume(10_000, 1.0))
            assert seen >= n, f"consumed {seen} of {n}"
        return n / report.timed(loop)
    finally:
        c.close()


def native_produce(server, topic: str, n: int) -> float:
    from kafkalite.client import Producer
    p = Producer({"bootstrap.servers": server.bootstrap, "acks": 1})
    values = [b"v" * VALUE_BYTES] * 5_000      # ~600 KB batches, under max.message.bytes
    failed = []
    try:
        def loop():
            for start in range(0, n, len(values)):
                p.produce_batch(topic, values[:min(len(values), n - start)], partition=0,
                                on_delivery=lambda err, d: err and failed.append(err))
            assert p.flush(120) == 0
        rate = n / report.timed(loop)
        assert not failed, failed[:3]
        return rate
    finally:
        p.close()


def native_consume(server, topic: str, n: int) -> float:
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": server.bootstrap})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    try:
        def loop():
            seen, deadline = 0, time.monotonic() + 300
            while seen < n and time.monotonic() < deadline:
                batch = c.consume_batch(1.0)
                seen += 0 if batch is None else batch.num_rows
            assert seen >= n, f"consumed {seen} of {n}"
        return n / report.timed(loop)
    finally:
        c.close()


def best_of(runs: int, server, name: str, produce, consume, n: int) -> tuple[float, float]:
    best_p = best_c = 0.0
    for r in range(runs):
        topic = f"{name}-{r}"
        create_topic(server, topic)
        best_p = max(best_p, produce(server, topic, n))
        best_c = max(best_c, consume(server, topic, n))
    return best_p, best_c


def parse_args(argv):
    p = common.parser(__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000, help="records per run")
    common.add_rounds(p, 2, flag="--runs", help="runs per figure (best is kept)")
    p.add_argument("--workers", type=int, default=1)
    common.add_dirs(p)
    common.add_quick(p, "20,000 records, 1 run")
    args = common.parse(p, argv, quick={"records": 20_000, "runs": 1})
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out_dir, work = report.make_dirs("kafka-clients", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    import confluent_kafka
    say("kafkalite Kafka client benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    say(f"  clients    confluent-kafka {confluent_kafka.version()[0]} (librdkafka "
        f"{confluent_kafka.libversion()[0]}); kafkalite native client")
    say(f"  workload   {args.records:,} records of {VALUE_BYTES} bytes, one partition, acks=1, "
        f"best of {args.runs}")
    report.say_load(info)
    res = Results()
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=args.workers)
    started = time.perf_counter()
    try:
        server.start()
        nat_p, nat_c = best_of(args.runs, server, "native", native_produce, native_consume,
                               args.records)
        ck_p, ck_c = best_of(args.runs, server, "kafka", ck_produce, ck_consume, args.records)
    except Exception:
        traceback.print_exc()
        print(server.output()[-3000:], file=sys.stderr)
        return 1
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    res.add("native_produce_batch_records_per_s", 1, "kafkalite produce_batch (ZeroMQ)", nat_p,
            "records/s")
    res.add("confluent_produce_records_per_s", 1, "confluent-kafka produce() (Kafka wire)", ck_p,
            "records/s", baseline_key="native_produce_batch_records_per_s")
    res.add("native_consume_batch_records_per_s", 2, "kafkalite consume_batch (ZeroMQ)", nat_c,
            "records/s")
    res.add("confluent_consume_records_per_s", 2, "confluent-kafka consume() (Kafka wire)", ck_c,
            "records/s", baseline_key="native_consume_batch_records_per_s")
    rows = report.table_rows(res)
    say()
    say(report.text_table(rows, HEADERS))
    say("(reference: confluent-kafka in one Python process, ~570,000 records/s against "
        "Apache Kafka in a published measurement)")
    doc = report.results_doc("kafkalite Kafka clients", elapsed, info, vars(args),
                             {"records/s": "records per second"}, {}, res)
    report.write_json(out_dir, doc)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("# kafkalite with Kafka's clients\n\n")
        f.write(f"- command: `{doc['command']}`\n- date: {doc['timestamp']}\n")
        f.write(f"- {args.records:,} records of {VALUE_BYTES} bytes, one partition, acks=1, "
                f"best of {args.runs}; {args.workers} worker(s)\n\n")
        f.write(report.markdown_table(rows, HEADERS) + "\n")
    say(f"results: {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
