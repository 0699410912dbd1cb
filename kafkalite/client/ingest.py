"""The plain ZeroMQ ingest gateway: any ZeroMQ program can publish.

A PULL socket (default tcp://127.0.0.1:7091) takes multipart messages

    [topic, key, value]            key: bytes; an empty frame means no key
    [topic, key, value, headers]   headers: a UTF-8 JSON object {"name": "value"}
                                   or array [["name", "value"], ...] (value may be null)

and hands each to a kafkalite Producer (acks=1, linger.ms=5), which batches
them per partition -- keys go to Kafka's murmur2 partition, keyless
records stick to one partition per batch -- and sends each batch to the
worker leading it. PUSH has no reply channel, so a message that cannot be
accepted (bad frames, invalid or unknown topic) is dropped with a
rate-limited warning on stderr and counted; the counts are printed when the
gateway stops.

Anyone who can connect may send anything, so every message is checked at a
cost bounded by its size before it reaches the Producer:

- a frame over MAX_FRAME_BYTES disconnects its sender (ZMQ_MAXMSGSIZE: the
  frame is never buffered whole);
- the topic must be a legal Kafka name (1..249 of [a-zA-Z0-9._-]), checked
  here rather than by a metadata round trip, and a topic the cluster just
  called unknown is not asked about again for UNKNOWN_TOPIC_MEMORY_S;
- key + value + headers may take MAX_RECORD_BYTES. The gateway's own
  batches close at BATCH_BYTES, so a batch with one record of the largest
  size still fits Kafka's default max.message.bytes: a big record cannot
  get its batch -- other publishers' records -- refused;
- headers are JSON nested at most two deep (an object of strings, or an
  array of pairs), checked by a scan before json.loads so that no input
  can make the parser recurse (100,000 '[' once took the gateway down);
  at most MAX_HEADERS of them.

What is read off the socket is handed to the Producer or counted as
dropped, never lost in between: when the Producer's queue is full the
gateway serves its deliveries and stops reading (ZeroMQ then holds the
publishers back), and on SIGTERM it reads what ZeroMQ already received,
hands it on, and flushes the Producer before exiting.

With the server's CURVE on (``native_curve_secret_key_file``) the PULL
socket is a CURVE server with the server's key pair and accepts only
publishers whose public key is in ``native_curve_authorized_keys``
(protocol/curve.py); a publisher without keys, or with another key, gets no
message through. The gateway's own Producer connects with the server's key
pair (the broker principal), since a PUSH message carries no principal on
to the Producer: an authorized publisher may write any topic through it.

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
import re
import signal
import sys
import time

import zmq

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import curve
from kafkalite.ratelimit import RateLimitedLog

log = logging.getLogger("kafkalite.ingest")

MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_RECORD_BYTES = 512 * 1024
BATCH_BYTES = 256 * 1024            # + MAX_RECORD_BYTES < Kafka's max.message.bytes (1048588)
MAX_HEADERS = 1000
MAX_HEADER_DEPTH = 2
UNKNOWN_TOPIC_MEMORY_S = 2.0
MAX_REMEMBERED_TOPICS = 10_000
# Messages read per poll wakeup before the Producer's callbacks are served.
MAX_MESSAGES_PER_WAKEUP = 10_000
# On SIGTERM: how long to keep reading what ZeroMQ already received.
DRAIN_ON_STOP_S = 0.5

_LEGAL_TOPIC = re.compile(rb"[a-zA-Z0-9._-]{1,249}")
_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_OPENERS = frozenset(b"[{")


class BadMessage(ValueError):
    """A message the gateway drops (the reason is its text)."""


def parse_topic(frame: bytes) -> str:
    if not _LEGAL_TOPIC.fullmatch(frame) or frame in (b".", b".."):
        shown = frame[:60] + (b"..." if len(frame) > 60 else b"")
        raise BadMessage(f"invalid topic name {shown!r}: 1..249 of a-z, A-Z, 0-9, '.', '_', '-'")
    return frame.decode("ascii")


def parse_headers(frame: bytes) -> list[tuple[str, bytes | None]]:
    """Headers from their JSON frame; BadMessage for anything else.

    The nesting is checked on the frame's brackets outside JSON strings
    (one regex pass and one translate, both linear) before json.loads
    sees it, so the parser's recursion stays within MAX_HEADER_DEPTH."""
    brackets = _JSON_STRING.sub(b"", frame).translate(None, _NOT_BRACKETS)
    if len(brackets) > 2 * (MAX_HEADERS + 1):
        raise BadMessage(f"more than {MAX_HEADERS} headers")
    depth = 0
    for c in brackets:
        depth += 1 if c in _OPENERS else -1
        if depth > MAX_HEADER_DEPTH:
            raise BadMessage(f"headers nest deeper than {MAX_HEADER_DEPTH} levels")
    try:
        value = json.loads(frame)
    except ValueError as exc:               # JSONDecodeError, UnicodeDecodeError
        raise BadMessage(f"headers are not UTF-8 JSON: {exc}") from None
    if isinstance(value, dict):
        items = list(value.items())
    elif isinstance(value, list) and all(type(p) is list and len(p) == 2 for p in value):
        items = value
    else:
        raise BadMessage("headers must be a JSON object or an array of [name, value] pairs")
    out = []
    for name, v in items:
        if not isinstance(name, str) or not (v is None or isinstance(v, str)):
            raise BadMessage("header names must be strings and values strings or null")
        try:
            out.append((name, None if v is None else v.encode()))
        except UnicodeEncodeError:           # a lone surrogate escaped in the JSON
            raise BadMessage(f"header {name!r} is not valid Unicode") from None
    return out


def parse_message(frames: list[bytes]) -> tuple[str, bytes | None, bytes, list | None]:
    """(topic, key, value, headers) of one ingest message; BadMessage when it
    is not one."""
    if len(frames) not in (3, 4):
        raise BadMessage(f"a message of {len(frames)} frames; expected "
                         f"[topic, key, value] or [topic, key, value, headers]")
    size = sum(len(f) for f in frames[1:])
    if size > MAX_RECORD_BYTES:
        raise BadMessage(f"key, value and headers take {size} bytes; at most "
                         f"{MAX_RECORD_BYTES} are accepted")
    topic = parse_topic(frames[0])
    headers = parse_headers(frames[3]) if len(frames) == 4 and frames[3] else None
    return topic, frames[1] or None, frames[2], headers


class Gateway:
    def __init__(self, bootstrap: str, host: str, port: int, curve_secret_key_file: str = "",
                 curve_authorized_keys: str = ""):
        from kafkalite.client import Producer
        self.ctx = zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.pull.setsockopt(zmq.LINGER, 0)
        self.pull.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        self.curve = None
        security = {}
        if curve_secret_key_file:
            public, secret = curve.load_keypair_file(curve_secret_key_file)
            self.curve = curve.CurveServer(public, secret, curve_authorized_keys or None,
                                           curve.BROKER_PRINCIPAL)
            self.curve.start(self.ctx)
            self.curve.secure_server(self.pull)
            security = {"curve.server.key": public.decode(), "curve.public.key": public.decode(),
                        "curve.secret.key": secret.decode()}
        if port:
            self.pull.bind(f"tcp://{host}:{port}")
            self.port = port
        else:
            self.port = self.pull.bind_to_random_port(f"tcp://{host}")
        self.received = self.dropped = self.failed = 0
        self._bad_input = RateLimitedLog(log)
        self._unstored = RateLimitedLog(log)
        self._unknown_topics: dict[str, float] = {}     # topic -> when to ask again
        self._stop = False
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                                  "batch.size": BATCH_BYTES, "client.id": "kafkalite-ingest",
                                  "on_delivery": self._delivered, **security})

    def _delivered(self, err, msg) -> None:
        if err is not None:
            self.failed += 1
            self._unstored.warning("a record for %s was not stored: %s",
                                   msg.topic(), err)

    def _drop(self, why) -> None:
        self.dropped += 1
        self._bad_input.warning("dropped a message: %s", why)

    def _accept(self, frames: list[bytes]) -> None:
        self.received += 1
        try:
            topic, key, value, headers = parse_message(frames)
            retry_at = self._unknown_topics.get(topic)
            if retry_at is not None:
                if time.monotonic() < retry_at:
                    raise errors.UnknownTopicOrPartitionError(f"topic {topic} does not exist")
                del self._unknown_topics[topic]
            self._hand_on(topic, key, value, headers)
        except BadMessage as exc:
            self._drop(exc)
        except errors.UnknownTopicOrPartitionError as exc:
            if len(self._unknown_topics) >= MAX_REMEMBERED_TOPICS:
                self._unknown_topics.clear()
            self._unknown_topics.setdefault(topic, time.monotonic() + UNKNOWN_TOPIC_MEMORY_S)
            self._drop(exc)
        except KafkaError as exc:
            self._drop(exc)
        except Exception as exc:    # a bug here must cost one message, not the gateway
            self._drop(f"{type(exc).__name__}: {exc}")

    def _hand_on(self, topic: str, key, value, headers) -> None:
        """Give the record to the Producer, waiting (serving its deliveries)
        while its queue is full: ZeroMQ holds the publishers back meanwhile."""
        while True:
            try:
                self.producer.produce(topic, value, key, headers=headers)
                return
            except BufferError:
                self.producer.poll(0.05)

    def _read(self, limit: int) -> int:
        n = 0
        while n < limit:
            try:
                frames = self.pull.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            self._accept(frames)
            n += 1
        return n

    def run(self) -> int:
        parent = os.getppid()
        while not self._stop:
            if self.pull.poll(100):
                self._read(MAX_MESSAGES_PER_WAKEUP)
            self.producer.poll(0)
            if os.getppid() != parent:
                break
        # What ZeroMQ received before the stop is handed on too.
        deadline = time.monotonic() + DRAIN_ON_STOP_S
        while time.monotonic() < deadline:
            if not self._read(MAX_MESSAGES_PER_WAKEUP) and not self.pull.poll(50):
                break
        left = self.producer.close(10)
        self.pull.close()
        if self.curve is not None:
            self.curve.stop()
        self.ctx.term()
        print(f"kafkalite ingest: {self.received} received, {self.dropped} dropped, "
              f"{self.failed + (left or 0)} failed to store", file=sys.stderr, flush=True)
        return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="kafkalite plain ZeroMQ ingest gateway")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=7091)
    parser.add_argument("--curve-secret-key-file", default="",
                        help="CURVE: the server's key pair (publishers need its public key)")
    parser.add_argument("--curve-authorized-keys", default="",
                        help="CURVE: the publishers' public keys (native_curve_authorized_keys)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=os.environ.get("KAFKALITE_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        gw = Gateway(args.bootstrap, args.host, args.port, args.curve_secret_key_file,
                     args.curve_authorized_keys)
    except curve.CurveKeyError as exc:
        print(f"kafkalite ingest: {exc}", file=sys.stderr, flush=True)
        return 1
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
