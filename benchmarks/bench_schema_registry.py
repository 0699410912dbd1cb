"""What the schema registry answers, and what Avro through it costs a producer.

    python benchmarks/bench_schema_registry.py            # about a minute
    python benchmarks/bench_schema_registry.py --quick    # a few seconds

Each run starts a fresh server (one worker) and measures, in the same run:

- lookups by id: ``GET /schemas/ids/{id}`` (what a deserializer asks on a
  cache miss), with ``--subjects`` other subjects registered first (each
  with a schema of its own: a lookup must not slow down as they grow), as
  raw HTTP GETs by ``--clients`` threads at once, each
  over one kept-alive connection (as confluent-kafka's registry client's
  session does); beside it the same number of GETs of the registry's
  trivial ``GET /`` on the same HTTP server: the ceiling the HTTP server
  itself sets (the client threads are Python too, on the same machine:
  ``wrk`` measures the server alone better);
- Avro-encoded produce: confluent-kafka's ``Producer`` on kafkalite's Kafka
  listener, ``--records`` values serialized by ``AvroSerializer`` (the
  schema registered once, then cached by the client), beside the same
  count of raw bytes of the same encoded size.

``--runs`` runs (three by default), each from a fresh server; the figures
are each run's and their median and spread. Timing never fails anything:
this prints figures (and ``--json``).
"""
from __future__ import annotations

import http.client
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse

from kafkalite import launcher

import common

SCHEMA = json.dumps({"type": "record", "name": "Reading", "namespace": "bench", "fields": [
    {"name": "sensor", "type": "string"}, {"name": "at", "type": "long"},
    {"name": "value", "type": "double"}, {"name": "ok", "type": "boolean"}]})
TOPIC_AVRO, TOPIC_RAW = "bench-avro", "bench-raw"


def gets_per_s(url: str, path: str, total: int, clients: int) -> float:
    """``total`` GETs of ``path``, ``clients`` threads at once, each over a
    connection of its own kept alive; answers per second (every answer
    must be 200)."""
    parsed = urllib.parse.urlsplit(url)
    per_client = total // clients
    failures = []

    def client() -> None:
        conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
        try:
            for _ in range(per_client):
                conn.request("GET", path)
                resp = conn.getresponse()
                resp.read()
                if resp.status != 200:
                    failures.append(resp.status)
                    return
        finally:
            conn.close()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if failures:
        raise RuntimeError(f"GET {path} answered {failures[0]}")
    return per_client * clients / elapsed


def register_others(url: str, count: int) -> None:
    """``count`` subjects, each with a record schema of its own (``POST
    /subjects/{s}/versions`` over one kept-alive connection)."""
    parsed = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=60)
    try:
        for i in range(count):
            schema = json.dumps({"type": "record", "name": f"Other{i}", "fields": [
                {"name": "n", "type": "long"}]})
            conn.request("POST", f"/subjects/other-{i}-value/versions",
                         json.dumps({"schema": schema}),
                         {"Content-Type": "application/vnd.schemaregistry.v1+json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                raise RuntimeError(f"registering other-{i}-value answered {resp.status}")
    finally:
        conn.close()


def produce_per_s(bootstrap: str, topic: str, values, serialize=None) -> float:
    """Records/s of confluent-kafka's Producer sending ``values`` (through
    ``serialize`` when given) and flushing them."""
    from confluent_kafka import Producer
    from confluent_kafka.serialization import MessageField, SerializationContext
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    context = SerializationContext(topic, MessageField.VALUE)
    started = time.perf_counter()
    for v in values:
        payload = serialize(v, context) if serialize is not None else v
        while True:
            try:
                producer.produce(topic, payload)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("records left unsent")
    return len(values) / (time.perf_counter() - started)


def one_run(root: str, args) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
    from confluent_kafka.schema_registry.avro import AvroSerializer
    server = launcher.ServerProcess(root, workers=1).start()
    try:
        url = server.info["schema_registry"]
        registry = SchemaRegistryClient({"url": url})
        register_others(url, args.subjects)
        sid = registry.register_schema(f"{TOPIC_AVRO}-value", Schema(SCHEMA, "AVRO"))
        gets_per_s(url, f"/schemas/ids/{sid}", 50, 1)        # warm-up: the store's first read
        lookups = gets_per_s(url, f"/schemas/ids/{sid}", args.gets, args.clients)
        ceiling = gets_per_s(url, "/", args.gets, args.clients)
        admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC_AVRO, 1), NewTopic(TOPIC_RAW, 1)]).values():
            f.result()
        del admin, f                      # gone before the server stops: no reconnect noise
        readings = [{"sensor": f"s{i % 100}", "at": 1_700_000_000_000 + i,
                     "value": i * 0.5, "ok": i % 7 != 0} for i in range(args.records)]
        serialize = AvroSerializer(registry, SCHEMA)
        from confluent_kafka.serialization import MessageField, SerializationContext
        raw = [serialize(readings[0], SerializationContext(TOPIC_RAW, MessageField.VALUE))]
        raw = raw * args.records          # the same encoded size, as raw bytes
        produce_per_s(server.kafka_bootstrap, TOPIC_RAW, raw[:1000])   # warm-up
        raw_rate = produce_per_s(server.kafka_bootstrap, TOPIC_RAW, raw)
        avro_rate = produce_per_s(server.kafka_bootstrap, TOPIC_AVRO, readings, serialize)
        return {"lookups_per_s": lookups, "trivial_gets_per_s": ceiling,
                "avro_records_per_s": avro_rate, "raw_records_per_s": raw_rate,
                "value_bytes": len(raw[0])}
    finally:
        server.stop()


def main(argv=None) -> int:
    parser = common.parser(__doc__)
    common.add_rounds(parser, 3, flag="--runs", help="runs, each from a fresh server")
    parser.add_argument("--gets", type=int, default=20_000, help="GETs of each kind per run")
    parser.add_argument("--clients", type=int, default=4, help="client threads for the GETs")
    parser.add_argument("--subjects", type=int, default=0,
                        help="other subjects registered before the lookups by id")
    parser.add_argument("--records", type=int, default=100_000,
                        help="records of each kind produced per run")
    common.add_quick(parser, "one short run")
    common.add_json(parser)
    args = common.parse(parser, argv, quick={"runs": 1, "gets": 200, "records": 2000})
    runs = []
    for _ in range(args.runs):
        root = tempfile.mkdtemp(prefix="kafkalite-bench-registry-")
        try:
            runs.append(one_run(os.path.join(root, "data"), args))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    common.say(f"schema registry, {args.runs} run(s), each from a fresh server (1 worker); "
               f"medians of the runs")
    median = {key: statistics.median(r[key] for r in runs) for key in runs[0]}
    common.say_table([
        common.Row("lookups by id (GET /schemas/ids/{id})", median["lookups_per_s"], "/s",
                   median["trivial_gets_per_s"], "trivial GET /: the HTTP server's ceiling"),
        common.Row("produce, AvroSerializer", median["avro_records_per_s"], "records/s",
                   median["raw_records_per_s"], "raw bytes")])
    for label, key in (("lookups by id", "lookups_per_s"), ("trivial GET /", "trivial_gets_per_s"),
                       ("produce, AvroSerializer", "avro_records_per_s"),
                       ("produce, raw bytes", "raw_records_per_s")):
        common.say_runs(label, [r[key] for r in runs])
    common.say(f"  {args.gets} GETs a kind, {args.clients} client threads, a kept-alive connection each, "
               f"{args.subjects:,} other subjects; "
               f"{args.records:,} records a kind of {runs[0]['value_bytes']} bytes, "
               f"confluent-kafka to the Kafka listener, linger.ms 5")
    if args.json:
        common.write_json(args.json, {"settings": vars(args), "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
