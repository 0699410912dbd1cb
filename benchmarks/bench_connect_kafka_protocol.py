"""A Connect worker's file source -> topic -> file sink, with kafkalite's
native clients against Kafka's protocol (``kafkalite.client.protocol=kafka``,
the worker pointed at the Kafka listener), beside confluent-kafka's plain
producer and consumer on the same Kafka listener (the ceiling of the Kafka
path) in the same run.

    python benchmarks/bench_connect_kafka_protocol.py            # 200,000 lines
    python benchmarks/bench_connect_kafka_protocol.py --lines 20000

A kafkalite server (2 workers) is started; a file of ``--lines`` 100-byte
lines is written. Figures, in lines/s (records/s):

1. ceiling: confluent-kafka's Producer sending the file's lines to a
   1-partition topic (``linger.ms=5``, flushed), then its Consumer reading
   them back (``fetch.wait.max.ms=100``);
2. for each of ``native`` and ``kafka``: a standalone worker (in this process)
   running FileStreamSource into a 1-partition topic, timed from the
   connector's creation until the topic's high watermark reaches the line
   count; then FileStreamSink from that topic, timed until the sink file
   has every line.

Timing never fails anything: this prints figures and writes results.json
under ``--out`` (default benchmarks/results/connect_kafka_protocol).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import common  # noqa: E402
from kafkalite import launcher  # noqa: E402

STRING = "org.apache.kafka.connect.storage.StringConverter"


def kafka(server) -> dict:
    return {"bootstrap.servers": server.kafka_bootstrap}


def make_topic(server, name) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic
    admin = AdminClient(kafka(server))       # kept: its futures die with it
    admin.create_topics([NewTopic(name, 1)])[name].result(30)


def high_watermark(server, topic) -> int:
    import confluent_kafka
    c = confluent_kafka.Consumer({**kafka(server), "group.id": "bench-hw"})
    try:
        return c.get_watermark_offsets(confluent_kafka.TopicPartition(topic, 0), 10)[1]
    finally:
        c.close()


def ceiling(server, path, lines) -> tuple[float, float]:
    """(produce s, consume s) of confluent-kafka's clients alone."""
    import confluent_kafka
    make_topic(server, "ceiling")
    p = confluent_kafka.Producer({**kafka(server), "linger.ms": 5})
    start = time.perf_counter()
    with open(path, "rb") as f:
        for line in f:
            while True:
                try:
                    p.produce("ceiling", line.rstrip(b"\n"))
                    break
                except BufferError:
                    p.poll(0.05)
    p.flush(60)
    produced = time.perf_counter() - start
    c = confluent_kafka.Consumer({**kafka(server), "group.id": "bench-ceiling",
                                  "auto.offset.reset": "earliest", "fetch.wait.max.ms": 100})
    c.subscribe(["ceiling"])
    start, got = time.perf_counter(), 0
    while got < lines:
        got += sum(1 for m in c.consume(10_000, 0.5) if not m.error())
    consumed = time.perf_counter() - start
    c.close()
    return produced, consumed


def through_connect(server, protocol, path, lines, work) -> tuple[float, float]:
    """(source s, sink s) of a standalone worker with ``protocol``'s clients."""
    from kafkalite.connect import Herder, Worker
    from kafkalite.connect.offsets import FileOffsetStore
    topic, out = f"lines-{protocol}", os.path.join(work, f"out-{protocol}.txt")
    make_topic(server, topic)
    bootstrap = server.kafka_bootstrap if protocol == "kafka" else server.bootstrap
    worker = Worker({"bootstrap.servers": bootstrap, "kafkalite.client.protocol": protocol,
                     "offset.flush.interval.ms": 1000, "key.converter": STRING,
                     "value.converter": STRING, "consumer.max.poll.records": 10_000,
                     "kafkalite.file.allowed.paths": f"{os.path.dirname(path)},{work}"},
                    FileOffsetStore(os.path.join(work, f"offsets-{protocol}.json")))
    worker.start()
    herder = Herder(worker)
    try:
        start = time.perf_counter()
        herder.put_connector_config("src", {"connector.class": "FileStreamSource",
                                            "file": path, "topic": topic,
                                            "batch.size": "10000"}, False)
        while high_watermark(server, topic) < lines:
            time.sleep(0.05)
        source = time.perf_counter() - start
        start = time.perf_counter()
        herder.put_connector_config("sink", {"connector.class": "FileStreamSink",
                                             "topics": topic, "file": out}, False)
        while True:
            try:
                with open(out, "rb") as f:
                    if sum(1 for _ in f) >= lines:
                        break
            except FileNotFoundError:
                pass
            time.sleep(0.05)
        return source, time.perf_counter() - start
    finally:
        herder.stop()
        worker.stop()


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--lines", type=int, default=200_000)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "connect_kafka_protocol"))
    args = common.parse(ap, argv)
    n = args.lines
    work = tempfile.mkdtemp(prefix="bench-connect-kp-")
    path = os.path.join(work, "in.txt")
    with open(path, "w") as f:
        for i in range(n):
            f.write(f"{i:012d} {'x' * 86}\n")
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=2).start()
    figures = {}
    try:
        produced, consumed = ceiling(server, path, n)
        figures.update(ceiling_produce=n / produced, ceiling_consume=n / consumed)
        for protocol in ("native", "kafka"):
            source, sink = through_connect(server, protocol, path, n, work)
            figures[f"{protocol}_source"], figures[f"{protocol}_sink"] = n / source, n / sink
        common.say(f"{n:,} lines; ceilings: confluent-kafka alone on the Kafka listener")
        rows = []
        for protocol in ("native", "kafka"):
            where = f"worker, kafkalite.client.protocol={protocol}"
            rows += [common.Row(f"{where}: FileStreamSource -> topic",
                                figures[f"{protocol}_source"], "lines/s",
                                figures["ceiling_produce"], "confluent-kafka produce"),
                     common.Row(f"{where}: topic -> FileStreamSink",
                                figures[f"{protocol}_sink"], "lines/s",
                                figures["ceiling_consume"], "confluent-kafka consume")]
        common.say_table(rows)
        os.makedirs(args.out, exist_ok=True)
        common.write_json(os.path.join(args.out, "results.json"), {"lines": n,
                                                                    "figures": figures})
    finally:
        server.stop()
        server.kill()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
