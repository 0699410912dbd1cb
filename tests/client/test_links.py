"""The client's links (kafkalite/client/link.py) against a real server.

Each link (ZeroMQ, ring, direct TCP) is driven as the producer's sender
and the consumer drive it: requests sent, a zmq.Poller woken by what the
link registered, answers taken with ``receive()``, and ``alive()`` turning
False when the worker process behind it is killed (on a one-worker server
of the test's own; the other tests share the session's server).
"""
from __future__ import annotations

import os
import signal
import time

import pytest
import zmq

from harness import ServerProcess, shm_entries, wait_answers, wait_until
from kafkalite import errors
from kafkalite.client import AdminClient, NewTopic, Producer
from kafkalite.client.connection import Connection, endpoint_host_port, parse_bootstrap
from kafkalite.client.metadata import Metadata
from kafkalite.client.ring_link import RingLink
from kafkalite.client.tcp_link import TcpLink, tcp_link_or
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder, decode_columns


@pytest.fixture
def one_worker_server(tmp_path):
    """A one-worker server of the test's own: the test kills its worker."""
    srv = ServerProcess(str(tmp_path / "data"), workers=1).start()
    yield srv
    srv.kill()


def leader_endpoint(srv, topic, partitions=2):
    admin = AdminClient({"bootstrap.servers": srv.bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions)]).values():
        f.result()
    admin.close()
    meta = Metadata(parse_bootstrap(srv.bootstrap), "test", zmq.Context.instance())
    meta.refresh([topic])
    leader = meta.leader(topic, 0)
    endpoint = meta.brokers[leader]
    meta.close()
    return endpoint


def batch(values):
    b = RecordBatchBuilder()
    for v in values:
        b.append(None, None, v)
    return b.build()


def produce_body(topic, parts, acks=1):
    return {"transactional_id": None, "acks": acks, "timeout_ms": 5000, "topic_data": [
        {"name": topic, "partition_data": [{"index": p, "records": batch(vals)}
                                           for p, vals in parts.items()]}]}


def offsets(body):
    return {(t["name"], p["index"]): (p["error_code"], p["base_offset"])
            for t in body["responses"] for p in t["partition_responses"]}


def make_link(conn, kind):
    if kind == "zmq":
        return conn
    if kind == "ring":
        return RingLink(conn, 1 << 20, 10.0)
    link = tcp_link_or(conn, 10.0, conn.max_in_flight)
    assert type(link) is TcpLink      # not ZeroMQ by a fall-back
    return link


@pytest.mark.parametrize("kind", ["zmq", "ring", "tcp"])
def test_a_link_carries_produce_and_wakes_its_poller(server, topic_name, kind):
    topic = topic_name
    # partitions 0 and 2 have one leader (a topic's partitions go round the workers)
    endpoint = leader_endpoint(server, topic, partitions=3)
    conn = Connection(endpoint, "test", watch=True, max_in_flight=2)
    link = make_link(conn, kind)
    try:
        cids = [link.send(ApiKey.PRODUCE, produce_body(topic, {0: [b"a", b"b"], 2: [b"c"]}))
                for _ in range(3)]
        answers = dict(wait_answers(link, 3))
        assert sorted(answers) == sorted(cids)
        assert [offsets(answers[c]) for c in cids] == [
            {(topic, 0): (0, 0), (topic, 2): (0, 0)},
            {(topic, 0): (0, 2), (topic, 2): (0, 1)},
            {(topic, 0): (0, 4), (topic, 2): (0, 2)}]
        assert link.alive() and link.ready()
        # acks=0: nothing comes back, the records are stored all the same
        link.send(ApiKey.PRODUCE, produce_body(topic, {0: [b"quiet"]}, acks=0),
                  expect_response=False)
        assert wait_answers(link, 1, timeout=0.5) == []
    finally:
        link.close()
        if link is not conn:
            conn.close()
    reader = Connection(endpoint, "test")
    fetched = reader.request(ApiKey.FETCH, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": 0,
            "last_fetched_epoch": -1, "log_start_offset": -1, "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": ""}, 10)
    reader.close()
    values = decode_columns(bytes(fetched["responses"][0]["partitions"][0]["records"])).values()
    assert values == [b"a", b"b"] * 3 + [b"quiet"]


@pytest.mark.parametrize("endpoint, expected", [
    ("tcp://127.0.0.1:7092", ("127.0.0.1", 7092)),
    ("tcp://[::1]:9092", ("::1", 9092)),
    ("tcp://broker-1.example:19092", ("broker-1.example", 19092)),
])
def test_an_endpoints_host_and_port(endpoint, expected):
    assert endpoint_host_port(endpoint) == expected


def test_auto_puts_a_producer_on_this_hosts_worker_on_a_ring(server, topic_name):
    """``kafkalite.transport: auto``: the worker is on this host, so the
    producer's link to it is a ring (its files appear in /dev/shm while the
    producer is open, and go with it)."""
    leader_endpoint(server, topic_name, partitions=1)
    before = shm_entries()
    p = Producer(server.config(**{"kafkalite.transport": "auto"}))
    try:
        p.produce(topic_name, b"x", partition=0)
        assert p.flush(20) == 0
        assert shm_entries() - before, "no ring was made for a worker on this host"
    finally:
        p.close()
    wait_until(lambda: not shm_entries() - before, 10,
               lambda: f"the ring's files to go: {shm_entries() - before}", interval=0.1)


def test_a_connection_caps_requests_in_flight():
    conn = Connection("tcp://127.0.0.1:9", "test", max_in_flight=2)   # nobody listens
    try:
        assert conn.ready()
        conn.send(ApiKey.API_VERSIONS, {"client_software_name": "t", "client_software_version": "1"})
        conn.send(ApiKey.API_VERSIONS, {"client_software_name": "t", "client_software_version": "1"})
        assert not conn.ready()
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["zmq", "ring", "tcp"])
def test_alive_turns_false_when_the_worker_is_killed(one_worker_server, kind):
    own_server = one_worker_server
    endpoint = leader_endpoint(own_server, "dies")
    conn = Connection(endpoint, "test", watch=True)
    link = make_link(conn, kind)
    try:
        link.send(ApiKey.PRODUCE, produce_body("dies", {0: [b"x"]}))
        assert len(wait_answers(link, 1)) == 1
        # a request whose answer will never come, then the worker dies
        link.send(ApiKey.PRODUCE, produce_body("dies", {0: [b"y"]}))
        wait_answers(link, 1, timeout=2)
        os.kill(own_server.info["workers"][0]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 10
        if kind == "ring":
            link.send(ApiKey.PRODUCE, produce_body("dies", {0: [b"z"]}))
        while link.alive() and time.monotonic() < deadline:
            poller = zmq.Poller()
            link.register(poller)
            poller.poll(100)
            link.unregister(poller)
            link.receive()
        assert not link.alive()
    finally:
        link.close()
        if link is not conn:
            conn.close()


def test_a_ring_carries_produce_only_and_queues_what_does_not_fit(server, topic_name):
    endpoint = leader_endpoint(server, topic_name)
    conn = Connection(endpoint, "test")
    link = RingLink(conn, 64 * 1024, 10.0)
    conn.close()
    try:
        with pytest.raises(errors.UnsupportedVersionError, match="Produce only"):
            link.send(ApiKey.METADATA, {"topics": None})
        # far more than the ring holds at once: the rest waits in the link.
        # The bodies are built first so that the sends follow each other
        # faster than the worker drains (built between sends, a loaded test
        # process let the worker keep the ring empty).
        big = [b"v" * 1000] * 20
        bodies = [produce_body(topic_name, {0: big}) for _ in range(20)]
        cids, full = [], []
        for body in bodies:
            cids.append(link.send(ApiKey.PRODUCE, body))
            full.append(not link.ready())
        # the ring was full after some send (asked after each: a test process
        # descheduled before one look at the end let the worker drain it all)
        assert any(full), full
        answers = dict(wait_answers(link, 20, timeout=30))
        assert sorted(answers) == sorted(cids) and link.ready()
        bases = sorted(offsets(a)[(topic_name, 0)] for a in answers.values())
        assert bases == [(0, 20 * i) for i in range(20)]
    finally:
        link.close()


def test_a_ring_has_its_transactional_writes_verified_or_added(server, topic_name):
    """A ring attached without a transactional id may not carry
    transactional batches (INVALID_RECORD); attached with one, the first
    transactional batch of a partition is verified with the coordinator
    (transactions v1: refused when the partition was never added) or added
    to the transaction (v2), and the ring's entries behind it keep their
    order while the coordinator answers."""
    topic = topic_name
    endpoint = leader_endpoint(server, topic, partitions=1)
    meta = Metadata(parse_bootstrap(server.bootstrap), "test", zmq.Context.instance())
    admin = AdminClient({"bootstrap.servers": server.bootstrap})

    def init(tid):
        r = meta.admin_request(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": tid, "transaction_timeout_ms": 60000,
            "producer_id": -1, "producer_epoch": -1})
        return r["producer_id"], r["producer_epoch"]

    def txn_body(pid, epoch, seq, values):
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=seq,
                               transactional=True)
        for v in values:
            b.append(None, None, v)
        return {"transactional_id": None, "acks": 1, "timeout_ms": 5000, "topic_data": [
            {"name": topic, "partition_data": [{"index": 0, "records": b.build()}]}]}

    def codes(link, bodies):
        cids = [link.send(ApiKey.PRODUCE, body) for body in bodies]
        answers = dict(wait_answers(link, len(cids)))
        return [offsets(answers[c])[(topic, 0)][0] for c in cids]

    links = []

    def ring(tid, version):
        """A ring attached as the producer of ``tid`` (None: no id); its
        producer id and epoch."""
        pid, epoch = init(tid or f"{topic}-none")
        conn = Connection(endpoint, "test")
        links.append(RingLink(conn, 1 << 20, 10.0, tid, version))
        conn.close()
        return links[-1], pid, epoch

    try:
        link, pid, epoch = ring(None, 1)
        assert codes(link, [txn_body(pid, epoch, 0, [b"x"])]) == [errors.InvalidRecordError.code]
        link, pid, epoch = ring(f"{topic}-v1", 1)
        assert codes(link, [txn_body(pid, epoch, 0, [b"never added"])]) == \
            [errors.InvalidTxnStateError.code]
        link, pid, epoch = ring(f"{topic}-v2", 2)
        bodies = [txn_body(pid, epoch, 3 * i, [b"v%d-%d" % (i, j) for j in range(3)])
                  for i in range(5)]
        assert codes(link, bodies) == [0] * 5
        described = admin.describe_transactions([f"{topic}-v2"])[f"{topic}-v2"].result()
        assert described.state == "Ongoing"
        assert [(tp.topic, tp.partition) for tp in described.topic_partitions] == [(topic, 0)]
    finally:
        for link in links:
            link.close()
        meta.close()
        admin.close()
