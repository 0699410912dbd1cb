"""The direct TCP link (kafkalite/client/tcp_link.py) and
``kafkalite.transport: tcp`` for the producer and the consumer.

Against a real server: records through a kill -9 of a worker, checked by
the Jepsen-style checker (tests/jepsen.py, shown first to catch a planted
loss, duplicate and reordering in this run's own log); a request larger
than the socket takes at once (written as the socket drains); the link
kept only where the worker offers it. Against a fake peer on a local
socket: answers split anywhere across reads, and what a confused or hostile
peer may send (a huge size, an answer to nothing, garbage, a close) ends
the link with its reason instead of buffering or hanging.

Tests that kill or stop a worker have a server of their own (``own_server``);
the others share the session's ``server`` on topics of their own.
"""
from __future__ import annotations

import os
import select
import signal
import socket
import struct
import threading
import time

import pytest

from harness import ServerProcess, create, wait_answers, wait_until
from jepsen import History, check
from kafkalite.client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from kafkalite.client.connection import (AuthenticationRefusedError, Connection, KafkaTimeoutError,
                                        PeerLostError)
from kafkalite.client.producer import sender as producer_module
from kafkalite import local_socket
from kafkalite.client.tcp_link import TcpLink, kafka_endpoint_of, resolve_transport, tcp_link_or
from kafkalite.protocol import ApiKey, encode_response
from kafkalite.record import RecordBatchBuilder

TCP = {"kafkalite.transport": "tcp"}
FAMILIES = {"unix": socket.AF_UNIX, "tcp": socket.AF_INET}


def produce_body(topic, values, partition=0, acks=1):
    b = RecordBatchBuilder()
    for v in values:
        b.append(None, None, v)
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": b.build()}]}]}


def read_log(srv, topic, partitions, expect, settle=0.5, timeout=60.0):
    """partition -> [(offset, value)] of the whole log, over TCP links: read
    until ``expect`` records came, then until nothing more came for
    ``settle`` s (a record stored twice shows up past the expected count)."""
    c = Consumer(srv.config(**TCP))
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        deadline, quiet_since, n = time.monotonic() + timeout, time.monotonic(), 0
        while time.monotonic() < deadline and (n < expect
                                               or time.monotonic() - quiet_since < settle):
            got = c.consume(10_000, 0.3)
            if got:
                quiet_since = time.monotonic()
            n += len(got)
            for m in got:
                out[m.partition()].append((m.offset(), m.value()))
        assert all(type(link) is TcpLink for link in c._conns.values()), c._conns
        return out
    finally:
        c.close()


@pytest.mark.parametrize("family", ["unix", "tcp"])
def test_acknowledged_records_survive_a_killed_worker_over_tcp_links(own_server, topic_name,
                                                                     monkeypatch, family):
    """Keyless records of four writers (one per partition, both workers
    lead some) with idempotence on; a reader follows along over its own
    links; the worker leading partition 0 is killed with SIGKILL mid-run.
    Nothing acknowledged is lost or moved, nothing is stored twice, no
    writer's records are reordered, and nothing read was later gone. Over
    the workers' Unix-domain sockets (the default on one host) and over
    loopback TCP."""
    TCP = {"kafkalite.transport": "tcp", "kafkalite.local.socket": family == "unix"}
    partitions = 4
    create(own_server, topic_name, partitions)
    made = []        # the producer's links: TCP ones, not a quiet fall-back to ZeroMQ

    def recording(*args, **kwargs):
        made.append(tcp_link_or(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(producer_module, "tcp_link_or", recording)
    history = History()
    stop = threading.Event()

    def reader():
        c = Consumer(own_server.config(**TCP))
        c.assign([TopicPartition(topic_name, p, OFFSET_BEGINNING) for p in range(partitions)])
        try:
            while not stop.is_set():
                for m in c.consume(5_000, 0.2):
                    history.read(m.partition(), m.offset(), m.value())
        finally:
            c.close()
    reading = threading.Thread(target=reader)
    reading.start()
    p = Producer(own_server.config(**TCP, **{"linger.ms": 2, "acks": "all"}))
    errors_seen = []

    def delivered(err, msg):
        if err is None:
            history.ack(msg.partition(), msg.offset(), msg.value())
        else:
            errors_seen.append(err)
    killed = False
    try:
        for seq in range(12_000):
            for part in range(partitions):
                p.produce(topic_name, b"w%d-%d" % (part, seq), partition=part,
                          on_delivery=delivered)
            p.poll(0)
            if seq == 4_000:
                # the sender makes its links as it first sends: on a loaded machine
                # that can come after these 16,000 records were queued
                wait_until(lambda: made, 30, "the producer's links to the workers")
                assert all(type(link) is TcpLink and link.sock.family == FAMILIES[family]
                                    for link in made), made
                leader = p.list_topics(topic_name).topics[topic_name].partitions[0].leader
                os.kill(own_server.worker_pids()[leader], signal.SIGKILL)
                killed = True
            if seq % 500 == 0:
                time.sleep(0.01)
        assert p.flush(120) == 0
    finally:
        p.close()
        stop.set()
        reading.join(30)
    assert killed and not errors_seen, errors_seen[:3]
    final = read_log(own_server, topic_name, partitions, 12_000 * partitions)
    report = check(history, final)
    assert report.ok, str(report)
    assert report.acked == 12_000 * partitions and report.stored == report.acked

    # the checker catches each fault planted in this run's own log
    lost = {q: list(recs) for q, recs in final.items()}
    del lost[1][len(lost[1]) // 2]
    assert check(history, lost).lost
    dup = {q: list(recs) for q, recs in final.items()}
    dup[2].append((dup[2][-1][0] + 1, dup[2][10][1]))
    assert check(history, dup).duplicates
    swapped = {q: list(recs) for q, recs in final.items()}
    (o1, v1), (o2, v2) = swapped[3][100], swapped[3][101]
    swapped[3][100], swapped[3][101] = (o1, v2), (o2, v1)
    assert check(history, swapped).reordered


def test_a_request_larger_than_the_socket_takes_goes_out_as_it_drains(own_server, topic_name):
    create(own_server, topic_name, 1)
    c = Consumer(own_server.config())
    leader = c.list_topics(topic_name).topics[topic_name].partitions[0].leader
    c.close()
    worker = own_server.refresh()["workers"][leader]
    link = tcp_link_or(Connection(worker["endpoint"], "test", watch=True), 10)
    assert type(link) is TcpLink
    try:
        link.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        values = [os.urandom(1000) for _ in range(900)]          # ~0.9 MB in one request
        # the worker stopped while the request is written: on loopback a
        # reading peer can take 0.9 MB as fast as one send() gives it
        os.kill(worker["pid"], signal.SIGSTOP)
        try:
            cid = link.send(ApiKey.PRODUCE, produce_body(topic_name, values))
        finally:
            os.kill(worker["pid"], signal.SIGCONT)
        assert link._out, "the socket took the whole request at once: nothing tested"
        got = dict(wait_answers(link, 1, timeout=30))
        part = got[cid]["responses"][0]["partition_responses"][0]
        assert (part["error_code"], part["base_offset"]) == (0, 0)
        assert not link._out
    finally:
        link.close()
    # read back over TCP, in answers that take many reads each
    stored = read_log(own_server, topic_name, 1, len(values))[0]
    assert [v for _, v in stored] == values


def test_acks_0_and_list_offsets_over_tcp(server, topic_name):
    create(server, topic_name, 2)
    p = Producer(server.config(**TCP, acks=0))
    for i in range(2_000):
        p.produce(topic_name, b"%d" % i, partition=i % 2)
    assert p.flush(30) == 0
    p.close(30)
    c = Consumer(server.config(**TCP, **{"fetch.max.bytes": 200 << 20}))
    try:
        wait_until(lambda: [c.get_watermark_offsets(TopicPartition(topic_name, q))[1]
                            for q in (0, 1)] == [1_000, 1_000], 20,
                   "the acks=0 records to be stored")
        # ListOffsets went over the TCP links, which take answers as large
        # as the fetches asked for may be (200 MiB and one batch)
        assert c._conns and all(type(link) is TcpLink and link.max_response > 300 << 20
                                for link in c._conns.values())
    finally:
        c.close()
    final = read_log(server, topic_name, 2, 2_000)
    assert sorted(int(v) for recs in final.values() for _, v in recs) == list(range(2_000))


def test_the_tcp_transport_is_refused_with_curve_keys_or_a_bad_name():
    with pytest.raises(ValueError, match="cannot be used with CURVE"):
        Consumer({"bootstrap.servers": "127.0.0.1:9", **TCP, "curve.server.key": "x" * 40})
    with pytest.raises(ValueError, match="'zmq' or 'tcp'"):
        Consumer({"bootstrap.servers": "127.0.0.1:9", "kafkalite.transport": "shm"})
    with pytest.raises(ValueError, match="'tcp'"):
        Producer({"bootstrap.servers": "127.0.0.1:9", "kafkalite.transport": "udp"})


def test_an_unset_transport_is_tcp_unless_only_zmq_carries_what_was_asked():
    """resolve_transport: unset means the TCP link, except with CURVE keys
    or a proxy's request principal (only ZeroMQ carries them); a chosen
    value is the user's and is kept."""
    for extra, expected in (({}, "tcp"), ({"curve.server.key": "x" * 40}, "zmq"),
                            ({"kafkalite.request.principal": "User:gateway"}, "zmq")):
        cfg = dict(extra)
        assert resolve_transport(cfg) is False
        assert cfg["kafkalite.transport"] == expected, extra
    for chosen in ("zmq", "tcp", "shm", "auto"):
        cfg = {"kafkalite.transport": chosen}
        assert resolve_transport(cfg) is True and cfg["kafkalite.transport"] == chosen
    # the clients take the default with CURVE keys (no ValueError)
    Consumer({"bootstrap.servers": "127.0.0.1:9", "curve.server.key": "x" * 40}).close()


def test_clients_left_to_their_default_use_tcp_links(server, topic_name):
    """A producer and a consumer given no transport reach the workers over
    TCP links: what the default buys (docs/performance.md, "Direct TCP links")."""
    create(server, topic_name, 2)
    p = Producer(server.config(**{"linger.ms": 1}))
    try:
        for i in range(200):
            p.produce(topic_name, b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        links = [node.link for node in p._sending.nodes.values()]
        assert len(links) == 2 and all(type(link) is TcpLink for link in links), links
    finally:
        p.close()
    c = Consumer(server.config())
    try:
        c.assign([TopicPartition(topic_name, part, OFFSET_BEGINNING) for part in range(2)])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 200 and time.monotonic() < deadline:
            got += c.consume(1_000, 0.5)
        assert sorted(int(m.value()) for m in got) == list(range(200))
        assert len(c._conns) == 2 and all(type(link) is TcpLink for link in c._conns.values())
    finally:
        c.close()


@pytest.fixture(scope="module")
def sasl_server(tmp_path_factory):
    """A server whose Kafka listeners want SASL: security on, so its native
    ports take the owner's CURVE key pair only (server/auth/security.py)."""
    srv = ServerProcess(str(tmp_path_factory.mktemp("sasl") / "data"),
                        extra_args=["--kafka-security-protocol", "SASL_PLAINTEXT"]).start()
    yield srv
    srv.stop()
    srv.kill()


def test_a_dropped_handshake_without_keys_is_told_apart_by_the_peers_greeting(sasl_server,
                                                                             server):
    """A client without CURVE keys whose handshake a native port drops is
    told the port requires CURVE, however libzmq reports the drop: a
    mechanism mismatch, or -- when the server's close comes first, as a
    fresh-clone run met -- a failure with no detail, which was answered
    'not a kafkalite native port'. The peer's own greeting decides: CURVE at
    the secured native port, NULL at an open server's ingest gateway (a PULL
    socket, really not a native port)."""
    def dropped(endpoint: str):
        endpoint = endpoint if endpoint.startswith("tcp://") else "tcp://" + endpoint
        conn = Connection(endpoint, watch=True)      # no handshake check of its own
        try:
            return conn._dropped_without_keys()
        finally:
            conn.close()
    refused = dropped(sasl_server.bootstrap)
    assert isinstance(refused, AuthenticationRefusedError) and "requires CURVE" in str(refused)
    ingest = dropped(server.info["ingest"])
    assert not isinstance(ingest, AuthenticationRefusedError)
    assert "not a kafkalite native port" in str(ingest)


def test_a_server_with_security_on_offers_native_clients_no_plaintext_path(sasl_server,
                                                                          topic_name):
    """With a SASL listener the workers offer no plaintext TCP link, and the
    native ports no unauthenticated ZeroMQ: a client without keys is refused
    at once; the owner's clients (the key pair the server wrote, which
    ``srv.config()`` names) stay on ZeroMQ by default and work, and asking
    for the plaintext TCP link with keys is refused as a contradiction."""
    srv = sasl_server
    with pytest.raises(AuthenticationRefusedError, match="requires CURVE"):
        Producer({"bootstrap.servers": srv.bootstrap}).list_topics(timeout=10)
    with pytest.raises(ValueError, match="plaintext"):
        Producer(srv.config(**TCP))
    create(srv, topic_name, 1)
    p = Producer(srv.config())
    try:
        for i in range(50):
            p.produce(topic_name, b"%d" % i, partition=0)
        assert p.flush(30) == 0
        assert all(type(node.link) is Connection for node in p._sending.nodes.values())
    finally:
        p.close()
    c = Consumer(srv.config())
    try:
        c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 50 and time.monotonic() < deadline:
            got += c.consume(100, 0.5)
        assert [int(m.value()) for m in got] == list(range(50))
        assert all(type(link) is Connection for link in c._conns.values())
    finally:
        c.close()


@pytest.fixture
def descriptors_past_1024():
    """Files held open until the next descriptor the process gets is
    numbered past 1024, where select(2) cannot go."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1300:
        pytest.skip(f"RLIMIT_NOFILE's hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1300) if hard == resource.RLIM_INFINITY
                                                else min(max(soft, 1300), hard), hard))
    held = []
    try:
        while True:
            fd = os.open(os.devnull, os.O_RDONLY)
            held.append(fd)
            if fd > 1030:
                break
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_links_on_descriptors_past_1024_wait_and_close(server, topic_name,
                                                       descriptors_past_1024):
    """A process with many files open: the links' sockets get descriptors
    past 1024, and waiting on them (a request answered in the caller's
    thread, a close that lets acks=0 requests out) must still work. The CI
    suite met this: select() refused them ("filedescriptor out of range")."""
    create(server, topic_name, 1)
    p = Producer(server.config(**TCP, **{"acks": 0, "linger.ms": 0}))
    try:
        for i in range(300):
            p.produce(topic_name, b"%d" % i, partition=0)
        assert p.flush(30) == 0
        assert all(node.link.sock.fileno() > 1024 for node in p._sending.nodes.values())
    finally:
        p.close()
    c = Consumer(server.config(**TCP))
    try:
        c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        wait_until(lambda: c.get_watermark_offsets(TopicPartition(topic_name, 0))[1] >= 300,
                   30, "the acks=0 records to be stored")
        assert all(type(link) is TcpLink and link.sock.fileno() > 1024
                   for link in c._conns.values())
        got, deadline = [], time.monotonic() + 30
        while len(got) < 300 and time.monotonic() < deadline:
            got += c.consume(1_000, 0.5)
        assert [int(m.value()) for m in got] == list(range(300))
    finally:
        c.close()


# ---- against a fake peer -------------------------------------------------------------------


class FakePeer:
    """A listening socket whose one accepted connection the test drives."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.conn = None

    def accept(self):
        self.listener.settimeout(10)
        self.conn, _ = self.listener.accept()
        return self.conn

    def read_request(self) -> int:
        """The correlation id of the next request."""
        (size,) = struct.unpack(">i", self._exact(4))
        frame = self._exact(size)
        return struct.unpack_from(">i", frame, 4)[0]

    def _exact(self, n):
        buf = b""
        while len(buf) < n:
            chunk = self.conn.recv(n - len(buf))
            assert chunk
            buf += chunk
        return buf

    def close(self):
        for s in (self.conn, self.listener):
            if s is not None:
                s.close()


def api_versions_answer(cid: int) -> bytes:
    body = encode_response(ApiKey.API_VERSIONS, 0, cid, {
        "error_code": 0, "api_keys": [{"api_key": 0, "min_version": 0, "max_version": 9}]})
    return struct.pack(">i", len(body)) + body


def ask(link) -> int:
    return link.send(ApiKey.API_VERSIONS, {}, version=0)


@pytest.fixture
def peer():
    p = FakePeer()
    yield p
    p.close()


def test_answers_split_anywhere_across_reads_are_decoded(peer):
    link = TcpLink("tcp://127.0.0.1:1", "127.0.0.1", peer.port)
    try:
        peer.accept()
        cids = [ask(link) for _ in range(3)]
        wire = b""
        for _ in cids:
            wire += api_versions_answer(peer.read_request())
        for i in range(len(wire)):                # one byte a write
            peer.conn.sendall(wire[i:i + 1])
            if i % 7 == 0:
                time.sleep(0.0005)
        got = wait_answers(link, 3)
        assert [cid for cid, _ in got] == cids
        assert all(body["api_keys"][0]["max_version"] == 9 for _, body in got)
        assert link.alive() and not link._in
    finally:
        link.close()


def big_api_versions_answer(cid: int, keys: int) -> bytes:
    """An answer of about 7 bytes a key: big enough to take the large-answer path."""
    body = encode_response(ApiKey.API_VERSIONS, 0, cid, {
        "error_code": 0, "api_keys": [{"api_key": k % 30000, "min_version": 0,
                                       "max_version": cid % 100} for k in range(keys)]})
    return struct.pack(">i", len(body)) + body


def test_large_answers_split_anywhere_are_read_into_their_own_buffers(peer):
    """Answers over DIRECT_MIN whose bodies are still coming are read straight
    into a buffer of their size (kept and reused once nothing refers to the
    answer decoded from it), mixed with small ones, cut at every kind of
    place: inside a size, right after one, inside a body, with the next
    answer in the same write."""
    from kafkalite.client import tcp_link
    link = TcpLink("tcp://127.0.0.1:1", "127.0.0.1", peer.port)
    try:
        peer.accept()
        sizes = [30_000, 0, 12_000, 30_000, 0, 0, 20_000, 30_000]   # 0: a small answer
        cids = [ask(link) for _ in sizes]
        wire = b""
        for keys, _ in zip(sizes, cids):
            cid = peer.read_request()
            wire += big_api_versions_answer(cid, keys) if keys else api_versions_answer(cid)
        assert len(wire) > 6 * tcp_link.DIRECT_MIN
        cuts = [0, 2, 4, 5, 70_000, 70_001, 200_000, 210_007, 210_011, 300_000, 409_600,
                len(wire) - 3, len(wire)]
        got = []
        for lo, hi in zip(cuts, cuts[1:]):
            peer.conn.sendall(wire[lo:hi])
            time.sleep(0.02)
            got += link.receive()       # decoded as they complete; nothing kept of them
        got += wait_answers(link, len(sizes) - len(got)) if len(got) < len(sizes) else []
        assert [cid for cid, _ in got] == cids
        for keys, (cid, body) in zip(sizes, got):
            want = keys or 1
            assert len(body["api_keys"]) == want
            assert body["api_keys"][-1]["max_version"] == (cid % 100 if keys else 9)
        assert link.alive() and not link._in and link._frame is None
        assert 1 <= len(link._buffers.kept) <= tcp_link.SPARE_BUFFERS
    finally:
        link.close()


def test_small_answers_are_read_into_the_links_buffer_not_a_new_one_a_read(peer):
    """Reads of small answers go into one scratch buffer the link keeps:
    ``sock.recv(READ_CHUNK)`` allocated READ_CHUNK bytes a read and freed
    them (a paced producer made an mmap, mremap and munmap for each of its
    reads, strace showed). Traced here by the memory each receive's peak
    adds, after the first read, which allocates the buffer."""
    import tracemalloc
    link = TcpLink("tcp://127.0.0.1:1", "127.0.0.1", peer.port)
    try:
        peer.accept()
        cids = [ask(link)]
        peer.conn.sendall(api_versions_answer(peer.read_request()))
        assert [cid for cid, _ in wait_answers(link, 1)] == cids
        tracemalloc.start()
        try:
            peaks = []
            for _ in range(20):
                cids.append(ask(link))
                peer.conn.sendall(api_versions_answer(peer.read_request()))
                got, peak = [], 0
                while not got:              # reads until the answer is whole
                    assert select.select([link.sock], [], [], 5)[0], "no answer in 5 s"
                    before = tracemalloc.get_traced_memory()[0]
                    tracemalloc.reset_peak()
                    got = link.receive()
                    peak = max(peak, tracemalloc.get_traced_memory()[1] - before)
                peaks.append(peak)
                assert [cid for cid, _ in got] == cids[-1:]
        finally:
            tracemalloc.stop()
        assert max(peaks) < 16 << 10, f"a receive's peak allocation: {max(peaks):,} B"
        assert link.alive()
    finally:
        link.close()


def test_records_held_from_earlier_fetches_stay_intact_over_tcp(server, topic_name):
    """A consumer over a TCP link keeps fetched answers it has not decoded
    yet (and may keep views of them): a buffer an answer was read into is
    reused only once nothing refers to it. Records of 50-100 KB, many
    large answers, read slowly so that answers wait: every value comes back
    as written, in order."""
    create(server, topic_name, 1)
    values = [bytes([i % 251]) * (50_000 + 997 * i) for i in range(60)]
    p = Producer(server.config(**{"linger.ms": 0, **TCP}))
    try:
        for v in values:
            p.produce(topic_name, v, partition=0)
        assert p.flush(30) == 0
    finally:
        p.close()
    c = Consumer(server.config(**{"max.partition.fetch.bytes": 300_000, **TCP}))
    try:
        c.assign([TopicPartition(topic_name, 0, OFFSET_BEGINNING)])
        held, deadline = [], time.monotonic() + 60
        while len(held) < len(values) and time.monotonic() < deadline:
            held += c.consume(3, 1.0)
            time.sleep(0.02)            # answers arrive meanwhile, into kept buffers
        assert [m.offset() for m in held] == list(range(len(values)))
        assert [bytes(m.value()) for m in held] == values
        assert all(type(link) is TcpLink for link in c._conns.values())
    finally:
        c.close()


def test_a_closed_consumers_buffers_go_to_the_next_and_its_records_stay_intact(
        server, topic_name):
    """A Spark worker reads each task's range through a new consumer: the
    buffers a closed consumer's links read large answers into are handed to
    the next link of the process (not zeroed and faulted in again), and a
    buffer is handed out only once nothing refers to it, so records the
    closed consumer returned (views of its answers) stay as they were while
    the next consumer reads other records into the same buffers."""
    from kafkalite.client import tcp_link
    create(server, topic_name, 2)
    p = Producer(server.config(**{"linger.ms": 5, **TCP}))
    try:
        for i in range(80):
            p.produce(topic_name, bytes([i]) * 100_000, partition=i % 2)
        assert p.flush(30) == 0
    finally:
        p.close()

    def read(partition, n):
        c = Consumer(server.config(**{"max.partition.fetch.bytes": 1 << 20, **TCP}))
        c.assign([TopicPartition(topic_name, partition, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + 60
        while len(got) < n and time.monotonic() < deadline:
            got += c.consume(n - len(got), 1.0)
        links = [link for link in c._conns.values() if type(link) is TcpLink]
        kept = {id(b) for link in links for b in link._buffers.kept}
        return c, got, kept

    tcp_link._SHELF.stock(tcp_link.BufferPool(8, 1 << 40))   # an empty shelf to start
    first, held, first_kept = read(0, 40)
    assert [m.value() for m in held] == [bytes([i]) * 100_000 for i in range(0, 80, 2)]
    assert first_kept                           # answers of ~1 MiB were read into kept buffers
    first.close()
    second, other, second_kept = read(1, 40)
    try:
        assert first_kept & second_kept         # the next consumer got the closed one's buffers
        assert [m.value() for m in other] == [bytes([i]) * 100_000 for i in range(1, 80, 2)]
        # what the first consumer returned is untouched by the second's reads
        assert [bytes(m.value()) for m in held] == [bytes([i]) * 100_000
                                                    for i in range(0, 80, 2)]
    finally:
        second.close()


@pytest.mark.parametrize("fault, reason", [
    (struct.pack(">i", 1 << 30), "answer of 1073741824 bytes"),
    (struct.pack(">i", -5), "answer of -5 bytes"),
    ("unknown", "which is not out"),
    (struct.pack(">i", 8) + struct.pack(">i", 1) + b"\xff\xff\xff\xff", "does not decode"),
    ("close", "closed the connection"),
])
def test_a_confused_or_hostile_peer_ends_the_link_with_its_reason(peer, fault, reason):
    link = TcpLink("tcp://127.0.0.1:1", "127.0.0.1", peer.port)
    try:
        peer.accept()
        cid = ask(link)
        assert peer.read_request() == cid
        if fault == "close":
            peer.conn.close()
            peer.conn = None
        elif fault == "unknown":
            peer.conn.sendall(api_versions_answer(cid + 1000))
        else:
            peer.conn.sendall(fault)
        started = time.monotonic()
        with pytest.raises(PeerLostError, match=reason):
            link.wait_for(cid, 10)
        assert time.monotonic() - started < 2 and not link.alive()
        assert len(link._in) < 1 << 20      # nothing was buffered for the huge size
    finally:
        link.close()


def test_a_silent_peer_times_out_a_wait(peer):
    link = TcpLink("tcp://127.0.0.1:1", "127.0.0.1", peer.port)
    try:
        peer.accept()
        with pytest.raises(KafkaTimeoutError, match="within 0.3 s"):
            link.request(ApiKey.API_VERSIONS, {}, timeout=0.3, version=0)
        assert link.alive()
    finally:
        link.close()


def test_a_refused_connect_is_a_network_error():
    from kafkalite import errors
    s = socket.create_server(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(errors.NetworkError, match="cannot connect to the Kafka listener"):
        TcpLink("tcp://127.0.0.1:1", "127.0.0.1", port)


# ---- Unix-domain sockets (kafkalite/local_socket.py) ---------------------------------------

def _round_trip(srv, topic, extra, n=300):
    """``n`` records produced and read back over links made with ``extra``;
    the socket families of the producer's and the consumer's links."""
    p = Producer(srv.config(**extra, **{"linger.ms": 1}))
    try:
        for i in range(n):
            p.produce(topic, b"%d" % i, partition=i % 2)
        assert p.flush(30) == 0
        produced = {node.link.sock.family for node in p._sending.nodes.values()}
    finally:
        p.close()
    c = Consumer(srv.config(**extra))
    try:
        c.assign([TopicPartition(topic, part, OFFSET_BEGINNING) for part in range(2)])
        got, deadline = [], time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            got += c.consume(1_000, 0.5)
        assert sorted(int(m.value()) for m in got) == list(range(n))
        assert all(type(link) is TcpLink for link in c._conns.values()), c._conns
        consumed = {link.sock.family for link in c._conns.values()}
    finally:
        c.close()
    return produced, consumed


def test_links_to_workers_on_this_host_go_over_their_unix_sockets(server, topic_name):
    """Left to their defaults, a producer's and a consumer's links to the
    workers are Unix-domain connections; ``kafkalite.local.socket`` false
    keeps them on loopback TCP. The same records either way."""
    create(server, topic_name, 2)
    create(server, topic_name + "-tcp", 2)
    assert _round_trip(server, topic_name, {}) == ({socket.AF_UNIX}, {socket.AF_UNIX})
    assert _round_trip(server, topic_name + "-tcp", {"kafkalite.local.socket": False}) == (
        {socket.AF_INET}, {socket.AF_INET})


@pytest.mark.processes
def test_a_server_without_unix_sockets_is_reached_over_tcp(tmp_path, topic_name):
    """``local_sockets = false``: the workers bind none and say so, and the
    clients use TCP."""
    config = tmp_path / "server.toml"
    config.write_text("local_sockets = false\n")
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(config)]).start()
    try:
        create(srv, topic_name, 2)
        assert _round_trip(srv, topic_name, {}) == ({socket.AF_INET}, {socket.AF_INET})
        conn = Connection(_worker_endpoint(srv), "t")
        try:
            assert kafka_endpoint_of(conn, 10)[2] is None
        finally:
            conn.close()
    finally:
        srv.stop()


def _worker_endpoint(srv) -> str:
    c = Consumer(srv.config())
    try:
        c.list_topics(timeout=10)
        return next(iter(c._meta.brokers.values()))
    finally:
        c.close()


def test_the_unix_socket_is_offered_only_in_the_same_network_namespace(server, monkeypatch):
    """The worker names its socket with its identity (boot id and network
    namespace); a client whose identity differs (another host, another
    namespace: its abstract sockets are other ones) is given none and
    uses TCP. A name that cannot be reached falls back to TCP too."""
    conn = Connection(_worker_endpoint(server), "t")
    try:
        host, port, name = kafka_endpoint_of(conn, 10)
        assert name and name.startswith("kafkalite/")
        monkeypatch.setattr(local_socket, "_identity", "another-boot/1")
        assert kafka_endpoint_of(conn, 10)[2] is None
    finally:
        conn.close()
    monkeypatch.undo()
    link = TcpLink("tcp://x", host, port, local_socket=name + "-gone")
    try:
        assert link.sock.family == socket.AF_INET
        cid = link.send(ApiKey.API_VERSIONS, {}, version=0)
        got = wait_answers(link, 1, 10)
        assert [answer[0] for answer in got] == [cid], got
    finally:
        link.close()


def test_a_unix_socket_connection_is_served_as_kafka_and_dies_with_its_worker(own_server):
    """A raw Kafka request over the abstract socket gets Kafka's answer;
    once the worker is killed its name is gone (the kernel removes an
    abstract socket with its last descriptor), and the restarted worker
    offers another, which clients then reach."""
    endpoint = _worker_endpoint(own_server)
    conn = Connection(endpoint, "t")
    try:
        _, _, name = kafka_endpoint_of(conn, 10)
    finally:
        conn.close()
    raw = local_socket.connect(name, 5)
    try:
        header = struct.pack(">hhih", ApiKey.API_VERSIONS, 0, 7, 1) + b"t"
        raw.sendall(struct.pack(">i", len(header)) + header)
        size = struct.unpack(">i", _recv_exactly(raw, 4))[0]
        answer = _recv_exactly(raw, size)
        correlation, error = struct.unpack(">ih", answer[:6])
        assert (correlation, error) == (7, 0)
    finally:
        raw.close()
    pid = int(name.split("/")[1])
    os.kill(pid, signal.SIGKILL)

    def gone():
        try:
            local_socket.connect(name, 1).close()
        except OSError:
            return True
        return False
    wait_until(gone, 30, f"{name} to stop accepting after its worker was killed")

    def offered():
        try:
            conn = Connection(_worker_endpoint(own_server), "t")
            try:
                fresh = kafka_endpoint_of(conn, 5)[2]
            finally:
                conn.close()
        except Exception:       # noqa: BLE001 - the worker is still restarting
            return None
        return fresh if fresh and fresh != name else None
    fresh = wait_until(offered, 60, "the restarted worker to offer another socket",
                       interval=0.2)
    local_socket.connect(fresh, 5).close()


def _recv_exactly(sock, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        assert chunk, "the worker closed the connection"
        out += chunk
    return out


def test_the_sender_reads_and_rearms_only_the_links_that_need_it(server, topic_name,
                                                                    monkeypatch):
    """The producer's sender wakes a thousand times a second and more under
    load: after a wake-up it reads only the links whose socket the poll
    reported (a link to an idle worker is not read: a failing recv per
    wake-up), and re-registers a link with its poller only when the events
    it waits for change (not before every sleep)."""
    create(server, topic_name, 2)
    p = Producer(server.config(acks=1, **TCP))
    try:
        for part in (0, 1):
            p.produce(topic_name, b"warm-up", partition=part)
        assert p.flush(10) == 0
        nodes = p._sending.nodes
        assert len(nodes) == 2, "the two partitions' leaders are the two workers"
        leader = p._sending.meta.leader(topic_name, 0)
        reads = {node_id: 0 for node_id in nodes}
        for node_id, node in nodes.items():
            def receive(real=node.link.receive, node_id=node_id):
                reads[node_id] += 1
                return real()
            monkeypatch.setattr(node.link, "receive", receive)
        modified = []
        real_modify = p._sending.poller.modify
        monkeypatch.setattr(p._sending.poller, "modify",
                            lambda sock, flags: (modified.append(flags), real_modify(sock, flags)))
        for i in range(20):
            p.produce(topic_name, b"%d" % i, partition=0)
            assert p.flush(10) == 0
    finally:
        p.close()
    (idle,) = [node_id for node_id in reads if node_id != leader]
    assert reads[leader] >= 20
    assert reads[idle] <= 2, f"the idle worker's link was read {reads[idle]} times"
    assert len(modified) <= 4, f"{len(modified)} poller registrations for 20 requests"
