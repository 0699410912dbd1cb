"""bootstrap.servers may name a Kafka listener as well as the native port,
and a server that is down is reported at once (client/bootstrap.py).

Real servers (the session's shared ``server``: the log lines these tests
look for are those written after they started), real sockets.
"""
import socket
import time

import pytest
import zmq
from harness import create, free_port, wait_until

from kafkalite.client import OFFSET_BEGINNING, AdminClient, Consumer, Producer, TopicPartition
from kafkalite.errors import KafkaError
from kafkalite.protocol.native import NATIVE_BOOTSTRAP_CONFIG


def _round_trip(bootstrap: str, topic: str, n: int = 5) -> list[bytes]:
    p = Producer({"bootstrap.servers": bootstrap})
    try:
        for i in range(n):
            p.produce(topic, f"v{i}".encode())
        assert p.flush(20) == 0
    finally:
        p.close()
    c = Consumer({"bootstrap.servers": bootstrap})
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        got, deadline = [], time.monotonic() + 20
        while len(got) < n and time.monotonic() < deadline:
            got += [m.value() for m in c.consume(100, 0.5)]
        return got
    finally:
        c.close()


def test_clients_given_a_kafka_listener_address_use_the_native_port(server, topic_name):
    before = server.output().count("request size")
    # the supervisor's Kafka listener, and a worker's (which relays DescribeConfigs)
    worker_kafka = f"127.0.0.1:{server.info['kafka_brokers'][0]['port']}"
    for bootstrap in (server.kafka_bootstrap, worker_kafka):
        started = time.monotonic()
        admin = AdminClient({"bootstrap.servers": bootstrap})
        try:
            assert "__no_such_topic" not in admin.list_topics(timeout=10).topics
        finally:
            admin.close()
        # a second's the greeting wait; the old code timed out after 10 s
        assert time.monotonic() - started < 5
    create(server, topic_name)
    assert _round_trip(server.kafka_bootstrap, topic_name) == [f"v{i}".encode() for i in range(5)]
    assert server.output().count("request size") == before


@pytest.mark.parametrize("client", ["admin", "producer", "consumer"])
def test_a_server_that_is_down_is_reported_within_a_second(client):
    address = f"127.0.0.1:{free_port()}"
    cfg = {"bootstrap.servers": address}
    started = time.monotonic()
    with pytest.raises(KafkaError) as caught:
        if client == "admin":
            admin = AdminClient(cfg)
            try:
                admin.list_topics(timeout=10)
            finally:
                admin.close()
        elif client == "producer":
            p = Producer(cfg)
            try:
                p.produce("orders", b"x")
            finally:
                p.close()
        else:
            c = Consumer({**cfg, "group.id": "g"})
            try:
                c.subscribe(["orders"])
                c.poll(10)
            finally:
                c.close()
    assert time.monotonic() - started < 1.0
    assert f"cannot connect to {address}: connection refused" in str(caught.value)


def test_a_zeromq_client_on_the_kafka_port_gets_one_log_line(own_server):
    """An old native client pointed at the Kafka port reconnects ten times a
    second; the listener used to log "request size -16777216" for each. (A
    server of its own: the line comes once a minute, and a fuzz elsewhere on
    a shared server may have used that minute.)"""
    server = own_server
    before = server.output()
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.RECONNECT_IVL, 50)
    try:
        sock.connect(f"tcp://{server.kafka_bootstrap}")
        time.sleep(1.5)             # some 15-30 handshakes, each closed by the listener
    finally:
        sock.close(0)
        ctx.term()

    def logged():
        new = server.output()[len(before):]
        return new if "it speaks ZeroMQ (ZMTP), not Kafka's protocol" in new else ""
    new = wait_until(logged, 10, "the listener's log line")
    assert "request size" not in new
    assert new.count("it speaks ZeroMQ (ZMTP), not Kafka's protocol") == 1, new


def test_a_kafka_client_finds_the_native_port_in_the_broker_configs(server):
    """What the native client asks, as a Kafka user sees it (kafka-configs
    --describe --entity-type brokers)."""
    from confluent_kafka.admin import AdminClient as KafkaAdmin
    from confluent_kafka.admin import ConfigResource
    admin = KafkaAdmin({"bootstrap.servers": server.kafka_bootstrap})
    for broker in ("0", "1"):
        resource = ConfigResource(ConfigResource.Type.BROKER, broker)
        configs = admin.describe_configs([resource])[resource].result(20)
        entry = configs[NATIVE_BOOTSTRAP_CONFIG]
        assert entry.value == server.bootstrap and entry.is_read_only


def test_a_producer_whose_server_stopped_logs_its_retries_rate_limited(own_server, caplog):
    """Refused at once, the sender's metadata retries come every
    retry.backoff.ms: dozens a second, each once a warning line."""
    p = Producer(own_server.config(**{"request.timeout.ms": 1000}))
    try:
        p.produce("orders", b"before")
        assert p.flush(20) == 0
        own_server.stop()
        with caplog.at_level("WARNING", logger="kafkalite.client.producer"):
            p.produce("orders", b"after")         # the topic's metadata is cached
            assert p.flush(3) == 1
        retries = [r for r in caplog.records if "metadata refresh failed" in r.getMessage()]
        assert 1 <= len(retries) <= 5, [r.getMessage() for r in retries]
    finally:
        p.close(0)


def test_an_http_port_is_named_as_one_at_once(server):
    """The metrics port (HTTP) answers a Kafka frame's first byte with a 400
    at once, and the client says it is an HTTP port: the old code waited for
    a request line until the HTTP server's 10 s timeout (issue 74), then
    guessed "a TLS or SASL listener?"."""
    metrics = server.info["metrics"].split("//")[1].split("/")[0]
    admin = AdminClient({"bootstrap.servers": metrics})
    started = time.monotonic()
    try:
        with pytest.raises(KafkaError, match=f"{metrics} is an HTTP port"):
            admin.list_topics(timeout=20)
    finally:
        admin.close()
    assert time.monotonic() - started < 5


def test_an_http_server_answers_bytes_that_start_no_request_line_at_once(server):
    """Any peer, not only kafkalite's client: a byte no request line starts
    with gets the 400 and the close, while a request still works on the
    same port."""
    host, port = server.info["metrics"].split("//")[1].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"\x00\x00\x00\x10kafka")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 Bad Request")
    assert b"not an HTTP request" in answer
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(b"\r\nGET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := sock.recv(4096):
            answer += chunk
    assert answer.split(b"\r\n")[0] in (b"HTTP/1.1 200 OK", b"HTTP/1.1 503 Service Unavailable")


def test_a_native_port_whose_greeting_comes_late_is_still_told_apart(server, monkeypatch):
    """Waiting no time for the greeting, the probe asks the native port in
    Kafka's protocol; the ZMTP signature still comes first, and tells it."""
    from kafkalite.client import bootstrap
    monkeypatch.setattr(bootstrap, "GREETING_WAIT_S", 1e-6)
    assert bootstrap.native_endpoint(f"tcp://{server.bootstrap}", 10) == \
        f"tcp://{server.bootstrap}"
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        assert "__no_such_topic" not in admin.list_topics(timeout=10).topics
    finally:
        admin.close()
