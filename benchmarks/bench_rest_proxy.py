"""What the REST proxy's v3 streaming produce costs beside the Kafka protocol,
and the issue's round trip at its full size.

    python benchmarks/bench_rest_proxy.py            # 100,000 records, 3 runs
    python benchmarks/bench_rest_proxy.py --quick    # a few seconds

Each run starts a fresh server (2 workers) and measures, in the same run,
``--records`` JSON values (about 60 bytes each, a key of 50 users) into
a 3-partition topic of their own:

- REST v3 streaming: one ``POST /v3/clusters/{c}/topics/{t}/records``
  with a chunked body (``--chunk`` records a chunk) written by one thread
  while another reads the answers, timed until the last answer (every one
  ``error_code`` 200: acknowledged, acks=all);
- Kafka protocol: kafkalite's own Producer (acks=all, idempotent, as the
  proxy's) and confluent-kafka's Producer on the Kafka listener, the same
  keys and values, timed until flushed;
- the round trip: the REST records read back over one v2 consumer
  instance (json format), checked exactly once and in order per
  partition against the answers' offsets (a failure stops the run).

``--runs`` runs (three by default), each from a fresh server; the figures
are each run's with their median and spread. Timing never fails anything;
a round trip that lost or repeated a record does.
"""
from __future__ import annotations

import http.client
import json
import os
import shutil
import socket
import statistics
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

from kafkalite import launcher

import common

V2 = "application/vnd.kafka.v2+json"
V2_JSON = "application/vnd.kafka.json.v2+json"


def http_json(url: str, method: str = "GET", body=None, content_type="application/json",
              accept=None):
    req = urllib.request.Request(url, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    if body is not None:
        req.add_header("Content-Type", content_type)
    if accept:
        req.add_header("Accept", accept)
    with urllib.request.urlopen(req, timeout=60) as resp:
        raw = resp.read()
        return json.loads(raw) if raw else None


def stream(url: str, bodies: list[bytes], chunk: int) -> list[dict]:
    """The chunked POST of ``bodies`` (JSON records); the answers."""
    parts = urllib.parse.urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=120)
    sock.sendall(f"POST {parts.path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: "
                 f"application/json\r\nTransfer-Encoding: chunked\r\n\r\n".encode())

    def write() -> None:
        for i in range(0, len(bodies), chunk):
            data = b"".join(bodies[i:i + chunk])
            sock.sendall(b"%x\r\n%s\r\n" % (len(data), data))
        sock.sendall(b"0\r\n\r\n")
    writer = threading.Thread(target=write)
    writer.start()
    resp = http.client.HTTPResponse(sock)
    resp.begin()
    body = resp.read()                  # to the answer's last chunk
    writer.join()
    sock.close()
    if resp.status != 200:
        raise RuntimeError(f"the proxy answered {resp.status} {resp.reason}: {body[:200]!r}")
    return [json.loads(line) for line in body.splitlines() if line.strip()]


def produce_per_s(producer, topic: str, keys, values) -> float:
    """Records a second through ``producer`` (kafkalite's or confluent-kafka's:
    the same calls), waiting out a full queue as an application does."""
    started = time.perf_counter()
    for k, v in zip(keys, values):
        while True:
            try:
                producer.produce(topic, v, k)
                break
            except BufferError:
                producer.poll(0.01)
        producer.poll(0)
    if producer.flush(60) != 0:
        raise RuntimeError("records left unsent")
    return len(values) / (time.perf_counter() - started)


def round_trip(url: str, topic: str, produced: dict) -> float:
    """Every record of ``produced`` ({(partition, offset): value}) read back
    over a v2 instance, exactly once and in order; records/s."""
    http_json(f"{url}/consumers/bench", "POST", {"name": "rt", "format": "json",
                                                 "auto.offset.reset": "earliest"}, V2)
    inst = f"{url}/consumers/bench/instances/rt"
    http_json(f"{inst}/subscription", "POST", {"topics": [topic]}, V2)
    seen, last = set(), {}
    started = time.perf_counter()
    deadline = time.monotonic() + 120
    while len(seen) < len(produced) and time.monotonic() < deadline:
        for r in http_json(f"{inst}/records?timeout=1000", accept=V2_JSON):
            where = (r["partition"], r["offset"])
            if where in seen or r["offset"] <= last.get(r["partition"], -1) \
                    or produced.get(where) != r["value"]:
                raise RuntimeError(f"round trip: {where} repeated, reordered or changed")
            seen.add(where)
            last[r["partition"]] = r["offset"]
    elapsed = time.perf_counter() - started
    http_json(inst, "DELETE")
    if len(seen) != len(produced):
        raise RuntimeError(f"round trip: {len(produced) - len(seen)} records lost")
    return len(seen) / elapsed


def one_run(root: str, args) -> dict:
    server = launcher.ServerProcess(root, workers=2).start()
    try:
        url = server.info["rest_proxy"]
        cluster = http_json(f"{url}/v3/clusters")["data"][0]["cluster_id"]
        for t in ("rest", "native", "confluent", "warm"):
            http_json(f"{url}/v3/clusters/{cluster}/topics", "POST",
                      {"topic_name": t, "partitions_count": 3})
        docs = [{"seq": i, "user": f"user-{i % 50}", "amount": i * 0.25, "ok": i % 3 != 0}
                for i in range(args.records)]
        keys = [f"user-{i % 50}" for i in range(args.records)]
        bodies = [json.dumps({"key": {"type": "JSON", "data": k},
                              "value": {"type": "JSON", "data": d}}).encode()
                  for k, d in zip(keys, docs)]
        values = [json.dumps(d, separators=(",", ":")).encode() for d in docs]
        stream(f"{url}/v3/clusters/{cluster}/topics/warm/records", bodies[:2000], args.chunk)
        started = time.perf_counter()
        answers = stream(f"{url}/v3/clusters/{cluster}/topics/rest/records", bodies, args.chunk)
        rest = len(answers) / (time.perf_counter() - started)
        bad = [a for a in answers if a.get("error_code") != 200]
        if len(answers) != args.records or bad:
            raise RuntimeError(f"{len(answers)} answers, {len(bad)} errors: {bad[:1]}")
        keys = [json.dumps(k).encode() for k in keys]      # the bytes the proxy wrote
        from confluent_kafka import Producer as ConfluentProducer
        from kafkalite.client import Producer
        settings = {"acks": "all", "enable.idempotence": True}
        producer = Producer({"bootstrap.servers": server.bootstrap, "linger.ms": 2, **settings})
        try:
            native = produce_per_s(producer, "native", keys, values)
        finally:
            producer.close()
        confluent = produce_per_s(ConfluentProducer({
            "bootstrap.servers": server.kafka_bootstrap, "linger.ms": 5, **settings}),
            "confluent", keys, values)
        produced = {(a["partition_id"], a["offset"]): d for a, d in zip(answers, docs)}
        trip = round_trip(url, "rest", produced)
        return {"rest_v3_streaming_per_s": rest, "kafkalite_producer_per_s": native,
                "confluent_kafka_per_s": confluent, "v2_round_trip_read_per_s": trip,
                "value_bytes": sum(map(len, values)) // len(values)}
    finally:
        server.stop()


def main(argv=None) -> int:
    parser = common.parser(__doc__)
    common.add_rounds(parser, 3, flag="--runs", help="runs, each from a fresh server")
    parser.add_argument("--records", type=int, default=100_000, help="records per kind per run")
    parser.add_argument("--chunk", type=int, default=500, help="records a chunk of the body")
    common.add_quick(parser, "one short run")
    common.add_json(parser)
    args = common.parse(parser, argv, quick={"runs": 1, "records": 5000})
    runs = []
    for _ in range(args.runs):
        root = tempfile.mkdtemp(prefix="kafkalite-bench-proxy-")
        try:
            runs.append(one_run(os.path.join(root, "data"), args))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    common.say(f"rest proxy, {args.runs} run(s), each from a fresh server (2 workers), "
               f"{args.records:,} JSON records a kind of {runs[0]['value_bytes']} bytes, "
               f"3 partitions, acks=all; medians of the runs")
    figures = [("REST v3 produce, streaming mode", "rest_v3_streaming_per_s"),
               ("kafkalite Producer (native protocol)", "kafkalite_producer_per_s"),
               ("confluent-kafka Producer (Kafka protocol)", "confluent_kafka_per_s"),
               ("REST v2 consumer instance, read back", "v2_round_trip_read_per_s")]
    median = {key: statistics.median(r[key] for r in runs) for _, key in figures}
    peer = {"rest_v3_streaming_per_s": "confluent_kafka_per_s",
            "kafkalite_producer_per_s": "confluent_kafka_per_s"}
    common.say_table([common.Row(label, median[key], "records/s", median.get(peer.get(key)),
                                 "confluent-kafka") for label, key in figures])
    for label, key in figures:
        common.say_runs(label, [r[key] for r in runs])
    common.say(f"  round trip: {args.records:,} records a run read back exactly once, in order")
    if args.json:
        common.write_json(args.json, {"settings": vars(args), "runs": runs})
    return 0


if __name__ == "__main__":
    sys.exit(main())
