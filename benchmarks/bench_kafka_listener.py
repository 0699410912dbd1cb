#!/usr/bin/env python
"""The Kafka listener's own CPU per Produce request, shaped as librdkafka sends them.

    python benchmarks/bench_kafka_listener.py [--requests 20000] [--partitions 2] [--rounds 3]
        [--fetch-version 16] [--quick] [--json FILE]

A KafkaListener on loopback in this process, its dispatcher's one handler
answering each Produce request at once (no log: what is measured is the
listener's read, decode, dispatch, encode and write, nothing of storage).
A client process sends ``--requests`` Produce v9 requests of
``--partitions`` partitions with one ``--batch-bytes`` batch each (what
librdkafka sends at 100 partitions: a few partitions a request), five in
flight as a producer keeps them, and reads every answer. The figure is this
process's CPU (``time.process_time``) per request over the exchange, beside
its ceiling: the same request decoded and its answer encoded by the codec
alone, in a loop; and the codec alone encoding the Fetch answer
(``--fetch-version``) that hands a consumer those batches back, records in
memory. Round after round; the median and spread are printed.
Nothing here fails on timing.
"""
from __future__ import annotations

import os
import socket
import statistics
import struct
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from report import say  # noqa: E402

import zmq  # noqa: E402

from kafkalite.protocol import (  # noqa: E402
    ApiKey,
    decode_request,
    encode_request,
    encode_response,
    encode_response_wire,
)
from kafkalite.server.network.kafka_listener import KafkaListener  # noqa: E402
from kafkalite.server.network.requests import RequestDispatcher  # noqa: E402

QUICK = {"requests": 500, "rounds": 1}
IN_FLIGHT = 5           # librdkafka's max.in.flight with idempotence
TOPIC = "bench-listener"


def produce_request(correlation_id: int, partitions: int, batch_bytes: int) -> bytes:
    body = {"acks": -1, "timeout_ms": 30000, "topic_data": [{"name": TOPIC, "partition_data": [
        {"index": i, "records": b"r" * batch_bytes} for i in range(partitions)]}]}
    frame = encode_request(ApiKey.PRODUCE, 9, correlation_id, "rdkafka", body)
    return struct.pack(">i", len(frame)) + frame


def answer(ctx, body: dict) -> dict:
    """What a broker answers a produce that appended every batch."""
    return {"responses": [{"name": t["name"], "partition_responses": [
        {"index": p["index"], "error_code": 0, "base_offset": 0, "log_start_offset": 0}
        for p in t["partition_data"]]} for t in body["topic_data"]]}


def client(port: int, requests: int, partitions: int, batch_bytes: int) -> None:
    """Send ``requests`` Produce requests, ``IN_FLIGHT`` at a time, and read every answer."""
    frame = produce_request(1, partitions, batch_bytes)
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sent = answered = 0
    buf = bytearray()
    while answered < requests:
        while sent < requests and sent - answered < IN_FLIGHT:
            sock.sendall(frame)
            sent += 1
        chunk = sock.recv(1 << 20)
        if not chunk:
            raise SystemExit("the listener closed the connection")
        buf += chunk
        while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
            del buf[:4 + struct.unpack_from(">i", buf)[0]]
            answered += 1
    sock.close()


def listener_round(requests: int, partitions: int, batch_bytes: int) -> float:
    """µs of this process's CPU per request the listener served."""
    listener = KafkaListener("127.0.0.1", 0, RequestDispatcher("bench", {ApiKey.PRODUCE: answer}))
    poller = zmq.Poller()
    listener.attach(poller)
    proc = subprocess.Popen([sys.executable, __file__, "--client", str(listener.port),
                             str(requests), str(partitions), str(batch_bytes)])
    try:
        began = time.process_time()
        while proc.poll() is None:
            listener.on_events(dict(poller.poll(100)))
        spent = time.process_time() - began
    finally:
        listener.close()
    if proc.returncode:
        raise SystemExit(f"the client failed ({proc.returncode})")
    return spent / requests * 1e6


def codec_ceiling(requests: int, partitions: int, batch_bytes: int) -> float:
    """µs per request to decode it and encode its answer, the codec alone."""
    payload = bytearray(produce_request(1, partitions, batch_bytes)[4:])
    began = time.process_time()
    for _ in range(requests):
        header, body = decode_request(payload, ignore_trailing=True)
        encode_response(header.api_key, header.api_version, header.correlation_id,
                        answer(None, body))
    return (time.process_time() - began) / requests * 1e6


def fetch_answer(partitions: int, batch_bytes: int) -> dict:
    """A consumer's Fetch answer: one batch in each of ``partitions`` partitions."""
    return {"throttle_time_ms": 0, "error_code": 0, "session_id": 7, "responses": [
        {"topic": TOPIC, "partitions": [
            {"partition_index": i, "error_code": 0, "high_watermark": 1000, "last_stable_offset": 1000,
             "log_start_offset": 0, "aborted_transactions": None, "records": b"r" * batch_bytes}
            for i in range(partitions)]}]}


def fetch_encode(requests: int, partitions: int, batch_bytes: int, version: int) -> float:
    """µs per Fetch answer encoded for the TCP wire, the codec alone."""
    body = fetch_answer(partitions, batch_bytes)
    began = time.process_time()
    for _ in range(requests):
        encode_response_wire(ApiKey.FETCH, version, 1, body)
    return (time.process_time() - began) / requests * 1e6


def main(argv=None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--client":
        client(*map(int, sys.argv[2:6]))
        return 0
    p = common.parser(__doc__)
    p.add_argument("--requests", type=int, default=20000, help="Produce requests a round")
    p.add_argument("--partitions", type=int, default=2, help="partitions a request")
    p.add_argument("--batch-bytes", type=int, default=1024, help="bytes of each partition's batch")
    p.add_argument("--fetch-version", type=int, default=16,
                   help="the Fetch version whose answer is encoded (librdkafka 2.16 fetches with v16)")
    common.add_rounds(p, 3)
    common.add_quick(p, "a few hundred requests, one round: a smoke run")
    common.add_json(p)
    args = common.parse(p, argv, QUICK)
    listener, ceiling, fetch = [], [], []
    for _ in range(args.rounds):
        listener.append(listener_round(args.requests, args.partitions, args.batch_bytes))
        ceiling.append(codec_ceiling(args.requests, args.partitions, args.batch_bytes))
        fetch.append(fetch_encode(args.requests, args.partitions, args.batch_bytes, args.fetch_version))
    say(f"Produce v9, {args.partitions} partition(s) of {args.batch_bytes} B a request, "
        f"{args.requests:,} requests a round, {args.rounds} round(s); load average "
        f"{os.getloadavg()[0]:.2f}")
    say(f"  listener, CPU per request: median {statistics.median(listener):.1f} µs "
        f"({min(listener):.1f}-{max(listener):.1f})")
    say(f"  codec alone (decode + answer + encode): median {statistics.median(ceiling):.1f} µs "
        f"({min(ceiling):.1f}-{max(ceiling):.1f})")
    say(f"  codec alone, Fetch v{args.fetch_version} answer of the same partitions encoded: median "
        f"{statistics.median(fetch):.1f} µs ({min(fetch):.1f}-{max(fetch):.1f})")
    if args.json:
        common.write_json(args.json, {
            "partitions": args.partitions, "batch_bytes": args.batch_bytes,
            "requests": args.requests, "listener_cpu_us_per_request": listener,
            "codec_cpu_us_per_request": ceiling, "fetch_version": args.fetch_version,
            "fetch_encode_cpu_us": fetch})
    return 0


if __name__ == "__main__":
    sys.exit(main())
