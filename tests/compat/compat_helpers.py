"""Shared pieces of the Kafka client compatibility tests: writing and reading
with kafkalite's native client, and records in one comparable shape.

A record is compared as (partition, offset, key, value, headers, timestamp)
with headers a list of (str, bytes|None) pairs, whatever client read it.
"""
from __future__ import annotations

import time

import confluent_kafka as ck

from kafkalite.client import (OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, Producer,
                              TopicPartition)

COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
ACKS = (0, 1, -1)


def create_topic(server, name: str, partitions: int = 1) -> None:
    admin = AdminClient(server.config())
    try:
        for f in admin.create_topics([NewTopic(name, partitions)]).values():
            f.result()
    finally:
        admin.close()


def sample_records(n: int, tag: str, null_headers: bool = True) -> list[tuple[bytes, bytes, list]]:
    """n (key, value, headers) with varied sizes, a null-valued header (for
    clients that can send one), a binary key, and an empty value."""
    out = []
    for i in range(n):
        key = f"{tag}-key-{i}".encode() if i % 7 else bytes([i % 256, 0, 255])
        value = (f"{tag}-value-{i}-".encode() * (1 + i % 5)) if i % 11 else b""
        headers = [("idx", str(i).encode()), ("tag", tag.encode())]
        if null_headers and i % 3 == 0:
            headers.append(("empty", None))
        out.append((key, value, headers))
    return out


def native_produce(server, topic: str, records, partition: int = 0, timestamps=None) -> list:
    """Write with kafkalite's Producer; returns the delivered offsets."""
    p = Producer(server.config(acks="all", **{"linger.ms": 5}))
    offsets = []

    def on_delivery(err, msg):
        assert err is None, err
        offsets.append(msg.offset())
    try:
        for i, (key, value, headers) in enumerate(records):
            p.produce(topic, value=value, key=key, partition=partition, headers=headers,
                      timestamp=timestamps[i] if timestamps else 0, on_delivery=on_delivery)
        assert p.flush(20) == 0
    finally:
        p.close()
    return offsets


def native_read(server, topic: str, partitions: int, expect: int, timeout: float = 20.0) -> list:
    """Every record of the topic from the beginning, in the comparable shape."""
    c = Consumer(server.config())
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out, deadline = [], time.monotonic() + timeout
        while len(out) < expect and time.monotonic() < deadline:
            out += c.consume(10_000, 0.5)
        return sorted(normalize(m.partition(), m.offset(), m.key(), m.value(), m.headers(),
                                m.timestamp()[1]) for m in out)
    finally:
        c.close()


def normalize(partition, offset, key, value, headers, timestamp) -> tuple:
    hs = tuple((k if isinstance(k, str) else k.decode(), None if v is None else bytes(v))
               for k, v in (headers or []))
    return (partition, offset, None if key is None else bytes(key),
            None if value is None else bytes(value), hs, timestamp)


def expected_shape(records) -> list[tuple]:
    """(key, value, headers) as ``normalize`` shapes them, for comparing
    what a client wrote with what was read back."""
    return [(k, v, tuple((hk, hv) for hk, hv in hs)) for k, v, hs in records]


def strip(read: list) -> list[tuple]:
    """(key, value, headers) of read records, in offset order."""
    return [(r[2], r[3], r[4]) for r in sorted(read, key=lambda r: (r[0], r[1]))]


class KafkaWire:
    """A bare Kafka protocol connection (blocking socket) for tests that
    need exact requests: our codec on one side, the broker on the other."""

    def __init__(self, address: str, timeout: float = 10.0, context=None):
        """``context``: an ssl.SSLContext, for a TLS listener (the server's
        certificate names localhost)."""
        import socket
        host, port = address.rsplit(":", 1)
        sock = socket.create_connection((host, int(port)), timeout=timeout)
        self.sock = context.wrap_socket(sock, server_hostname="localhost") if context else sock
        self.correlation = 0

    def send_frame(self, frame: bytes) -> None:
        import struct
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def recv_frame(self) -> bytes:
        import struct
        size, = struct.unpack(">i", self._exact(4))
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("the broker closed the connection")
            buf += chunk
        return bytes(buf)

    def request(self, api_key: int, version: int, body: dict) -> dict:
        from kafkalite.protocol import decode_response, encode_request
        self.correlation += 1
        self.send_frame(encode_request(api_key, version, self.correlation, "compat-test", body))
        correlation, response = decode_response(api_key, version, self.recv_frame())
        assert correlation == self.correlation
        return response

    def login_plain(self, user: str, password: str) -> None:
        """SASL/PLAIN over this connection; AssertionError when refused."""
        from kafkalite.protocol import ApiKey
        assert self.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
        auth = self.request(ApiKey.SASL_AUTHENTICATE, 2,
                            {"auth_bytes": f"\0{user}\0{password}".encode()})
        assert auth["error_code"] == 0, auth

    def closed_by_server(self, wait: float = 0.0) -> bool:
        return closed_by_server(self.sock, wait)

    def close(self) -> None:
        self.sock.close()


def closed_by_server(sock, wait: float = 0.0) -> bool:
    """Whether the broker closes ``sock`` within ``wait`` seconds: EOF or a
    reset, after whatever it sent before (read and dropped: a ServerHello,
    say). poll(2), not select(2): a test holding hundreds of sockets has
    descriptors past 1024, where select cannot go."""
    import select
    poller = select.poll()
    poller.register(sock, select.POLLIN)
    deadline = time.monotonic() + wait
    while poller.poll(max(0, int((deadline - time.monotonic()) * 1000))):
        try:
            if not sock.recv(65536):
                return True
        except OSError:             # a reset
            return True
    return False


def raise_fd_limit(needed: int) -> None:
    """This process's soft descriptor limit up to ``needed`` (at most the hard one)."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < needed:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(needed, hard), hard))


def kafka_conf(server, **extra) -> dict:
    """A confluent-kafka config for the server's Kafka listener."""
    return {"bootstrap.servers": server.kafka_bootstrap, "socket.timeout.ms": 10000, **extra}


def read_values(server, topic, partitions, isolation, expect=0, settle=0.3,
                timeout=15.0) -> list[bytes]:
    """Every value a consumer with ``isolation`` reads from the beginning,
    once it has read up to the end offsets it was told of first (the last
    stable offset under read_committed), has at least ``expect`` values, and
    nothing new came for ``settle`` seconds. (Quiet alone is not enough: on
    a loaded machine the first fetch can take longer than ``settle``; and
    the end offsets alone neither: a committed transaction's markers may
    land after they were asked, so its records come later. A caller that
    knows how many records it wants says so in ``expect``; one that checks
    that nothing is visible gives a ``settle`` as long as it wants to be
    sure of that.)"""
    c = ck.Consumer(kafka_conf(server, **{"group.id": f"reader-{isolation}-{time.monotonic()}",
                                   "enable.auto.commit": False, "isolation.level": isolation}))
    try:
        tps = [ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)]
        ends = [c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)]
        c.assign(tps)

        def at_end() -> bool:
            return all(tp.offset >= end for tp, end in zip(
                c.position([ck.TopicPartition(topic, p) for p in range(partitions)]), ends)
                if end > 0)
        out, quiet_since, deadline = [], time.monotonic(), time.monotonic() + timeout
        while (time.monotonic() - quiet_since < settle or not at_end() or len(out) < expect) \
                and time.monotonic() < deadline:
            got = c.consume(1000, 0.2)
            for m in got:
                assert m.error() is None, m.error()
                out.append(m.value())
            if got:
                quiet_since = time.monotonic()
        return out
    finally:
        c.close()


def first_client_error(conf: dict, topic: str) -> ck.KafkaError:
    """The first error librdkafka reports for a producer with ``conf`` (a
    refused login or handshake), within 15 s."""
    seen = []
    p = ck.Producer({**conf, "error_cb": seen.append, "message.timeout.ms": 10000})
    p.produce(topic, b"never")
    deadline = time.monotonic() + 15
    while not seen and time.monotonic() < deadline:
        p.poll(0.2)
    p.purge()
    p.flush(1)
    assert seen, "no error reported"
    return seen[0]


def add_user(data_dir: str, user: str, password: str, *mechanisms: str) -> None:
    """``kafkalite users add`` before the server starts (its SCRAM and PLAIN
    credentials, or those of ``mechanisms``)."""
    from harness import run_cli
    args = [a for m in mechanisms for a in ("--mechanism", m)]
    r = run_cli("users", "add", user, "--data-dir", data_dir, *args,
                stdin=password.encode() + b"\n")
    assert r.returncode == 0, r.stderr.decode()
