"""The plain ZeroMQ ingest gateway: any ZeroMQ program can publish.

A PULL socket (default tcp://127.0.0.1:7091) takes multipart messages

    [topic, key, value]            key: bytes; an empty frame means no key
    [topic, key, value, headers]   headers: a UTF-8 JSON object {"name": "value"}
                                   or array [["name", "value"], ...] (value may be null)

and hands each to a kafkalite Producer (acks=1, linger.ms=5), which batches
them per partition -- keys go to Kafka's murmur2 partition, keyless
records stick to one partition per batch -- and sends each batch to the
worker leading it. PUSH has no reply channel, so a message that cannot be
accepted (bad frames, invalid or unknown topic) is dropped with a warning
on stderr and counted; the counts are printed when the gateway stops.

It is a client of the broker like any other (it lives beside the clients
and imports nothing of the server); the supervisor starts it as a child
process and restarts it if it dies.

Who may call: started by the supervisor (``python -m kafkalite.client.ingest``).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

import zmq

from kafkalite.errors import KafkaError

log = logging.getLogger("kafkalite.ingest")


def parse_headers(frame: bytes):
    value = json.loads(frame)
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = value
    else:
        raise ValueError("headers must be a JSON object or an array of [name, value] pairs")
    out = []
    for name, v in items:
        if not isinstance(name, str) or not (v is None or isinstance(v, str)):
            raise ValueError("header names must be strings and values strings or null")
        out.append((name, None if v is None else v.encode()))
    return out


class Gateway:
    def __init__(self, bootstrap: str, host: str, port: int):
        from kafkalite.client import Producer
        self.ctx = zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.LINGER, 0)
        if port:
            self.pull.bind(f"tcp://{host}:{port}")
            self.port = port
        else:
            self.port = self.pull.bind_to_random_port(f"tcp://{host}")
        self.received = self.dropped = self.failed = 0
        self._last_warning = 0.0
        self._stop = False
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                                  "client.id": "kafkalite-ingest", "on_delivery": self._delivered})

    def _warn(self, message: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= 1.0:  # rate-limited: a flood must not flood stderr
            print(f"kafkalite ingest: {message}", file=sys.stderr, flush=True)
            self._last_warning = now

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed += 1
            self._warn(f"record for {msg.topic()} was not stored: {err}")

    def _accept(self, frames: list[bytes]) -> None:
        self.received += 1
        if len(frames) not in (3, 4):
            self.dropped += 1
            self._warn(f"dropped a message of {len(frames)} frames; expected "
                       f"[topic, key, value] or [topic, key, value, headers]")
            return
        try:
            topic = frames[0].decode("utf-8")
            headers = parse_headers(frames[3]) if len(frames) == 4 and frames[3] else None
            self.producer.produce(topic, frames[2], frames[1] or None, headers=headers)
        except (KafkaError, ValueError, UnicodeDecodeError, BufferError) as exc:
            self.dropped += 1
            self._warn(f"dropped a message: {exc}")

    def run(self) -> int:
        parent = os.getppid()
        while not self._stop:
            if self.pull.poll(100):
                for _ in range(10000):
                    try:
                        frames = self.pull.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._accept(frames)
            self.producer.poll(0)
            if os.getppid() != parent:
                break
        self.producer.close(10)
        self.pull.close()
        self.ctx.term()
        print(f"kafkalite ingest: {self.received} received, {self.dropped} dropped, "
              f"{self.failed} failed to store", file=sys.stderr, flush=True)
        return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="kafkalite plain ZeroMQ ingest gateway")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7091)
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("KAFKALITE_LOG_LEVEL", "WARNING"))
    try:
        gw = Gateway(args.bootstrap, args.host, args.port)
    except zmq.ZMQError as exc:
        print(f"kafkalite ingest: cannot listen on {args.host}:{args.port}: {exc}",
              file=sys.stderr, flush=True)
        return 1
    print("ingest", gw.port, flush=True)

    def stop(signum, frame):
        gw._stop = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return gw.run()


if __name__ == "__main__":
    sys.exit(main())
