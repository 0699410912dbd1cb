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
message through. Its ZAP handler maps keys to principals as the broker's
does (same file, same code), and each message's frame carries its
publisher's principal (the ZAP User-Id). The gateway produces on that
principal's behalf, as a Kafka proxy does with an Envelope (KIP-590): one
Producer per principal, connected with the server's key pair, whose
Produce requests name the principal (``kafkalite.request.principal``) --
the broker takes that name only from its own key, then authorizes the
write (topic Write) and counts ``producer_byte_rate`` against the
publisher, as for a native producer of its own. Those Producers create no
topics (they would do it as the broker): a topic must exist.

A message the broker denies (TOPIC_AUTHORIZATION_FAILED) cannot be
answered over PUSH: it is dropped, counted (``denied``) and logged
(rate-limited, naming principal and topic); the gateway keeps serving the
others. A throttled principal's records wait in its Producer (the broker
holds its connection's answers for the throttle time), delayed, not
dropped. What waits there is bounded: at most PRINCIPAL_BACKLOG_BYTES of
records per principal; over it the gateway stops reading until the
principal's records drain, and ZeroMQ's high-water marks hold the
publishers back meanwhile. A PULL socket cannot read one publisher and
leave another, so once a principal is that far behind, every publisher
waits with it; below the bound the others are not slowed.

With security on and no key file the supervisor hands the gateway the
node's key pair of this run on its stdin (``--curve-keys-stdin``): it is a
CURVE server that admits no publisher over TCP, as the native ports admit
no client (server/auth/security.py native_security); with the authorizer on,
publishers on this host come in by the local door (below).

With the authorizer on as well (``--local-door-dir``, as the native ports'
local doors: server/network/native_listener.py), a second PULL socket takes
publishers on this host without keys: a ZeroMQ ``ipc://`` socket file,
``ipc://<door dir>/ingest-<port>`` (local_socket.py ``ingest_door``), in a
directory only the server's user can add entries to (``door_directory``:
/run/kafkalite for root), whose ZAP handler makes the peer's user id, as the
kernel tells it, the principal ``User:unix:<name>``; its messages go the
same way as a key's. The socket file is 0666 (anyone may connect: the ZAP
handler tells who did). A publisher checks nothing: no other user can have
put a socket there. (The door was an abstract name, ``kafkalite-ingest-
<port>``, until issue 67: any local user could bind it first, the gateway
then served on without a door, and publishers' records went to that user.)
The gateway does not start without its door: an unsafe directory, or a
socket there that another process serves, is one line on stderr and exit 1
(the server checks the directory before it starts: server/auth/security.py
``check_local_door_dir``).

Without CURVE there are no principals: one Producer, principal ANONYMOUS
on the broker, as for any native client.

It is a client of the broker like any other (it lives beside the clients
and imports nothing of the server); the supervisor starts it as a child
process and restarts it if it dies.

Who may call: started by the supervisor (``python -m kafkalite.client.ingest``).
"""
from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import re
import signal
import sys
import time

import zmq

from kafkalite import errors, local_socket
from kafkalite.errors import KafkaError
from kafkalite.protocol import curve
from kafkalite.protocol.curve import principal_of
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
# Under CURVE: the records of one principal waiting in its Producer
# (throttled by a quota, or a slow broker) before the gateway stops reading.
PRINCIPAL_BACKLOG_BYTES = 8 * 1024 * 1024
# Delivery errors that mean "this principal may not": the message is denied.
_DENIED = frozenset({errors.TopicAuthorizationFailedError.code,
                     errors.ClusterAuthorizationFailedError.code,
                     errors.TransactionalIdAuthorizationFailedError.code})

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
                 curve_authorized_keys: str = "", curve_keys: tuple[bytes, bytes] | None = None,
                 local_door_dir: str = ""):
        self.ctx = zmq.Context()
        self.pull = self._pull_socket()
        self.door = None
        self.curve = None
        self._config = {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                        "batch.size": BATCH_BYTES, "client.id": "kafkalite-ingest",
                        "kafkalite.transport": "zmq"}
        if curve_secret_key_file or curve_keys:
            public, secret = curve_keys or curve.load_keypair_file(curve_secret_key_file)
            self.curve = curve.CurveServer(public, secret, curve_authorized_keys or None,
                                           curve.BROKER_PRINCIPAL)
            self.curve.start(self.ctx)
            self.curve.secure_server(self.pull)
            self._config.update({"curve.server.key": public.decode(),
                                 "curve.public.key": public.decode(),
                                 "curve.secret.key": secret.decode(),
                                 # as the broker it could create any topic
                                 "allow.auto.create.topics": False})
        if port:
            self.pull.bind(f"tcp://{host}:{port}")
            self.port = port
        else:
            self.port = self.pull.bind_to_random_port(f"tcp://{host}")
        self.door_endpoint = None
        if self.curve is not None and local_door_dir:
            self.door = self._local_door(local_door_dir)
        self.sockets = [self.pull] + ([self.door] if self.door is not None else [])
        self.poller = zmq.Poller()
        for sock in self.sockets:
            self.poller.register(sock, zmq.POLLIN)
        self.received = self.dropped = self.failed = self.denied = 0
        self._bad_input = RateLimitedLog(log)
        self._unstored = RateLimitedLog(log)
        self._denials = RateLimitedLog(log)
        self._unknown_topics: dict[str, float] = {}     # topic -> when to ask again
        self._stop = False
        # principal (None without CURVE) -> its Producer, and the bytes of
        # its records not yet delivered
        self.producers: dict = {}
        self._backlog: dict = {}
        if self.curve is None:
            self._producer_for(None)

    def _pull_socket(self) -> zmq.Socket:
        sock = self.ctx.socket(zmq.PULL)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME_BYTES)
        return sock

    def _local_door(self, directory: str) -> zmq.Socket:
        """The PULL socket of publishers on this host without keys, a socket
        file in ``directory``; OSError when the directory is not one only
        this user can add to, or a process serves that socket already."""
        endpoint = local_socket.ingest_door(local_socket.door_directory(directory), self.port)
        path = endpoint[len("ipc://"):]
        if local_socket.listening(path):
            raise OSError(f"{path} is served already (an ingest gateway of another server of "
                          f"this user on port {self.port}?)")
        door = self._pull_socket()
        try:
            self.curve.local_door(door, self.ctx)
            door.bind(endpoint)     # in place of a socket file a dead gateway left
            os.chmod(path, 0o666)   # anyone may connect: the ZAP handler tells who did
        except (zmq.ZMQError, OSError) as exc:
            door.close()
            raise OSError(f"cannot listen on {endpoint}: {exc}") from None
        self.door_endpoint = endpoint
        return door

    def _producer_for(self, principal: str | None):
        producer = self.producers.get(principal)
        if producer is None:
            from kafkalite.client import Producer
            config = dict(self._config)
            if principal is None:
                config["on_delivery"] = self._delivered
            else:
                config["kafkalite.request.principal"] = principal
                config["on_delivery"] = functools.partial(self._delivered_for, principal)
            producer = self.producers[principal] = Producer(config)
            self._backlog[principal] = 0
        return producer

    def _delivered_for(self, principal: str, err, msg) -> None:
        self._backlog[principal] -= len(msg.value() or b"") + len(msg.key() or b"")
        if err is not None:
            self._delivered(err, msg, principal)

    def _delivered(self, err, msg, principal: str | None = None) -> None:
        if err is None:
            return
        if err.code in _DENIED:
            self.denied += 1
            self._denials.warning("dropped a message of %s to topic %s: %s", principal,
                                  msg.topic(), err)
        else:
            self.failed += 1
            self._unstored.warning("a record for %s was not stored: %s", msg.topic(), err)

    def _drop(self, why) -> None:
        self.dropped += 1
        self._bad_input.warning("dropped a message: %s", why)

    def _accept(self, frames: list[bytes], principal: str | None) -> None:
        self.received += 1
        try:
            if principal is None and self.curve is not None:
                raise BadMessage("no principal: the ZAP handler did not authenticate it")
            topic, key, value, headers = parse_message(frames)
            retry_at = self._unknown_topics.get(topic)
            if retry_at is not None:
                if time.monotonic() < retry_at:
                    raise errors.UnknownTopicOrPartitionError(f"topic {topic} does not exist")
                del self._unknown_topics[topic]
            self._hand_on(principal, topic, key, value, headers)
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

    def _hand_on(self, principal, topic: str, key, value, headers) -> None:
        """Give the record to its principal's Producer, waiting (serving
        every Producer's deliveries) while that one's queue is full or its
        backlog over PRINCIPAL_BACKLOG_BYTES: ZeroMQ holds the publishers
        back meanwhile."""
        producer = self._producer_for(principal)
        size = len(value) + len(key or b"")     # what _delivered_for takes off again
        while True:
            if principal is None or self._backlog[principal] < PRINCIPAL_BACKLOG_BYTES:
                try:
                    producer.produce(topic, value, key, headers=headers)
                    if principal is not None:
                        self._backlog[principal] += size
                    return
                except BufferError:
                    pass
            producer.poll(0.05)
            self._serve()

    def _serve(self) -> None:
        for producer in list(self.producers.values()):
            producer.poll(0)

    def _receive(self, sock: zmq.Socket):
        """The next message's frames and principal; zmq.Again when none."""
        if self.curve is None:
            return sock.recv_multipart(zmq.NOBLOCK), None
        # the first frame as a zmq.Frame, for its ZAP User-Id (None only if
        # no ZAP handler answered: _accept drops it); the rest copied, which
        # costs less than a Frame each (a multipart message arrives whole)
        first = sock.recv(zmq.NOBLOCK, copy=False)
        frames = [first.bytes]
        if first.more:
            frames += sock.recv_multipart()
        return frames, principal_of(first)

    def _read(self, limit: int) -> int:
        n = 0
        for sock in self.sockets:
            while n < limit:
                try:
                    frames, principal = self._receive(sock)
                except zmq.Again:
                    break
                self._accept(frames, principal)
                n += 1
        return n

    def run(self) -> int:
        parent = os.getppid()
        while not self._stop:
            if self.poller.poll(100):
                self._read(MAX_MESSAGES_PER_WAKEUP)
            self._serve()
            if os.getppid() != parent:
                break
        # What ZeroMQ received before the stop is handed on too.
        deadline = time.monotonic() + DRAIN_ON_STOP_S
        while time.monotonic() < deadline:
            if not self._read(MAX_MESSAGES_PER_WAKEUP) and not self.poller.poll(50):
                break
        left = 0
        for producer in self.producers.values():
            left += producer.close(10) or 0
        for sock in self.sockets:
            sock.close()
        if self.curve is not None:
            self.curve.stop()
        self.ctx.term()
        if self.door_endpoint is not None:      # libzmq leaves the socket file behind
            try:
                os.unlink(self.door_endpoint[len("ipc://"):])
            except OSError:
                pass
        print(f"kafkalite ingest: {self.received} received, {self.dropped} dropped, "
              f"{self.denied} denied, {self.failed + left} failed to store",
              file=sys.stderr, flush=True)
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
    parser.add_argument("--curve-keys-stdin", action="store_true",
                        help="CURVE: the server's key pair of this run, one line on stdin "
                             "(public and secret key, Z85); no publisher is admitted")
    parser.add_argument("--local-door-dir", default="", metavar="DIR",
                        help="with CURVE: also take publishers on this host without keys, as "
                             "their Unix user, on ipc://DIR/ingest-<port> (the authorizer is "
                             "on); DIR must be a directory only this user can add to")
    args = parser.parse_args(argv)
    keys = None
    if args.curve_keys_stdin:
        keys = tuple(sys.stdin.buffer.readline().split())
        if len(keys) != 2:
            print("kafkalite ingest: no key pair on stdin", file=sys.stderr, flush=True)
            return 1
    logging.basicConfig(level=os.environ.get("KAFKALITE_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        gw = Gateway(args.bootstrap, args.host, args.port, args.curve_secret_key_file,
                     args.curve_authorized_keys, keys, local_door_dir=args.local_door_dir)
    except curve.CurveKeyError as exc:
        print(f"kafkalite ingest: {exc}", file=sys.stderr, flush=True)
        return 1
    except zmq.ZMQError as exc:
        print(f"kafkalite ingest: cannot listen on {args.host}:{args.port}: {exc}",
              file=sys.stderr, flush=True)
        return 1
    except OSError as exc:          # the local door
        print(f"kafkalite ingest: no local door: {exc}", file=sys.stderr, flush=True)
        return 1
    print("ingest", gw.port, flush=True)

    def stop(signum, frame):
        gw._stop = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    return gw.run()


if __name__ == "__main__":
    sys.exit(main())
