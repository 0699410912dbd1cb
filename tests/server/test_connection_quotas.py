"""Connection-rate quotas (KIP-612) on a real server, over real sockets:
``ip`` client quota entities with ``connection_creation_rate`` set and read
back with Kafka's own encoding (kafka-python's protocol classes), Kafka's
INVALID_REQUEST for bad entities and keys, and enforcement on the Kafka
ports of the supervisor and a worker: a burst of new connections from one
IP is cut to about its quota (the rest closed unanswered, counted in the
metrics), the window passing lets it in again, the default IP entity
applies to every IP without its own quota, removing the quota lifts the
limit, ``max_connection_creation_rate`` slows a listener's accepts down,
and a client already connected (a confluent-kafka producer) is never
affected.

The connections come from two loopback addresses, 127.0.0.1 and
127.0.0.2 (Linux routes all of 127/8 to lo), so one test has two client
IPs. Rates are asserted with wide slack (the machine is loaded): a quota of
5/s lets a burst of about one window's worth (5) through, here accepted as
2 to 10 of 30.
"""
from __future__ import annotations

import re
import socket
import struct
import sys
import time
import urllib.request

import pytest

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/compat")

from compat_helpers import KafkaWire  # noqa: E402
from harness import ServerProcess, wait_until  # noqa: E402

from kafkalite.protocol import ApiKey, decode_response, encode_request  # noqa: E402

INVALID_REQUEST = 42
RATE = "connection_creation_rate"
BURST = 30


@pytest.fixture(scope="module")
def server(module_server):
    """Sets the default ip entity's connection quota (every client's) and
    asserts on the whole set of ip quotas."""
    return module_server


def alter(wire, entity: list, ops: dict) -> dict:
    """One AlterClientQuotas entry; its answer (error_code, error_message)."""
    return wire.request(ApiKey.ALTER_CLIENT_QUOTAS, 1, {
        "entries": [{"entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                     "ops": [{"key": k, "value": v if v is not None else 0.0,
                              "remove": v is None} for k, v in ops.items()]}],
        "validate_only": False})["entries"][0]


def set_ip_quota(server, ip, rate) -> None:
    """``rate`` None removes it; the control connection is made before
    any quota applies to it, from an address the tests do not limit."""
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        answer = alter(wire, [("ip", ip)], {RATE: rate})
        assert answer["error_code"] == 0, answer
    finally:
        wire.close()


def connect(address: str, source: str = "127.0.0.1") -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5, source_address=(source, 0))


def api_versions_frame(correlation: int) -> bytes:
    frame = encode_request(ApiKey.API_VERSIONS, 0, correlation, "ipquota-test", {})
    return struct.pack(">i", len(frame)) + frame


def answered(sock: socket.socket, timeout: float = 5.0) -> bool:
    """True when ``sock`` gets its ApiVersions answer, False when the
    broker closed it instead."""
    sock.settimeout(timeout)
    try:
        head = sock.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return False
        size, = struct.unpack(">i", head)
        body = sock.recv(size, socket.MSG_WAITALL)
        return decode_response(ApiKey.API_VERSIONS, 0, body)[1]["error_code"] == 0
    except (ConnectionError, OSError):
        return False


def burst(address: str, n: int = BURST, source: str = "127.0.0.1") -> int:
    """Open ``n`` connections at once, each asking ApiVersions; how many
    were answered."""
    socks = []
    try:
        for i in range(n):
            try:
                s = connect(address, source)
                s.sendall(api_versions_frame(i))
            except (ConnectionError, OSError):
                continue        # closed before the request went out: refused too
            socks.append(s)
        return sum(answered(s) for s in socks)
    finally:
        for s in socks:
            s.close()


def one_connection_works(address: str, source: str = "127.0.0.1") -> bool:
    s = connect(address, source)
    try:
        s.sendall(api_versions_frame(1))
        return answered(s)
    except (ConnectionError, OSError):
        return False
    finally:
        s.close()


def rejected_metric(server) -> dict:
    """{listener: connections refused for ip_quota} from /metrics."""
    text = urllib.request.urlopen(server.info["metrics"], timeout=10).read().decode()
    return {m.group(1): float(m.group(2)) for m in re.finditer(
        r'^kafkalite_connections_rejected_total\{listener="([^"]*)",reason="ip_quota"\} (\S+)',
        text, re.M)}


def worker_kafka_address(server) -> str:
    """A worker's Kafka port: a broker in Metadata other than the bootstrap."""
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        brokers = wire.request(ApiKey.METADATA, 1, {"topics": []})["brokers"]
    finally:
        wire.close()
    ports = {b["port"] for b in brokers} - {int(server.kafka_bootstrap.rsplit(":", 1)[1])}
    return f"{server.kafka_bootstrap.rsplit(':', 1)[0]}:{min(ports)}"


def test_ip_quotas_are_set_and_described_with_kafka_pythons_encoding(server):
    """kafka-python's AlterClientQuotas / DescribeClientQuotas classes
    (Kafka's message JSON) with ip entities: a specific IPv4 and IPv6
    address and the default, an ip filter, and strict matching."""
    from kafka.protocol.admin.client_quotas import (AlterClientQuotasRequest as Alter,
                                                    AlterClientQuotasResponse,
                                                    DescribeClientQuotasRequest as Describe,
                                                    DescribeClientQuotasResponse)
    sock = connect(server.kafka_bootstrap)

    def call(request, response_class, correlation_id: int):
        request.API_VERSION = 1
        request.with_header(correlation_id=correlation_id, client_id="kafka-python")
        sock.sendall(request.encode(version=1, header=True, framed=True))
        size, = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        return response_class.decode(sock.recv(size, socket.MSG_WAITALL), version=1,
                                     header=True).to_dict()

    def entry(ip, rate):
        return Alter.EntryData(entity=[Alter.EntryData.EntityData(entity_type="ip",
                                                                  entity_name=ip)],
                               ops=[Alter.EntryData.OpData(key=RATE, value=rate, remove=False)])
    try:
        answer = call(Alter(entries=[entry("192.0.2.7", 50.0), entry("2001:db8::1", 60.0),
                                     entry(None, 100.0)], validate_only=False),
                      AlterClientQuotasResponse, 1)
        assert [e["error_code"] for e in answer["entries"]] == [0, 0, 0], answer
        every = call(Describe(components=[Describe.ComponentData(
            entity_type="ip", match_type=2, match=None)], strict=False),
            DescribeClientQuotasResponse, 2)
        found = {e["entity"][0]["entity_name"]: e["values"] for e in every["entries"]}
        assert found == {"192.0.2.7": [{"key": RATE, "value": 50.0}],
                         "2001:db8::1": [{"key": RATE, "value": 60.0}]}
        default = call(Describe(components=[Describe.ComponentData(
            entity_type="ip", match_type=1, match=None)], strict=True),
            DescribeClientQuotasResponse, 3)
        assert default["entries"] == [{"entity": [{"entity_type": "ip", "entity_name": None}],
                                       "values": [{"key": RATE, "value": 100.0}]}]
        # a user filter finds no ip entity
        users = call(Describe(components=[Describe.ComponentData(
            entity_type="user", match_type=2, match=None)], strict=False),
            DescribeClientQuotasResponse, 4)
        assert all(e["entity"][0]["entity_type"] != "ip" for e in users["entries"])
    finally:
        sock.close()
        wire = KafkaWire(server.kafka_bootstrap)
        for ip in ("192.0.2.7", "2001:db8::1", None):
            assert alter(wire, [("ip", ip)], {RATE: None})["error_code"] == 0
        wire.close()


@pytest.mark.parametrize("entity, ops, words", [
    ([("ip", "127.0.0.1"), ("user", "alice")], {RATE: 5.0}, "combined"),
    ([("client-id", "app"), ("ip", None)], {RATE: 5.0}, "combined"),
    ([("ip", "not-an-ip")], {RATE: 5.0}, "not a valid IP address"),
    ([("ip", "300.1.1.1")], {RATE: 5.0}, "not a valid IP address"),
    ([("ip", "127.0.0.1")], {"producer_byte_rate": 1024.0}, "only quota"),
    ([("user", "alice")], {RATE: 5.0}, "quota of ip entities"),
    ([("client-id", None)], {RATE: 5.0}, "quota of ip entities"),
    ([("ip", "127.0.0.1")], {RATE: 2.5}, "Int value"),
    ([("ip", "127.0.0.1")], {RATE: -1.0}, "whole number"),
    ([("ip", "127.0.0.1"), ("ip", "127.0.0.2")], {RATE: 5.0}, "duplicate"),
])
def test_bad_ip_entities_and_keys_get_invalid_request(server, entity, ops, words):
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        answer = alter(wire, entity, ops)
        assert answer["error_code"] == INVALID_REQUEST, answer
        assert words in answer["error_message"], answer
        # nothing was stored
        every = wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1,
                             {"components": [], "strict": False})
        assert not any(RATE in [v["key"] for v in e["values"]] for e in every["entries"])
    finally:
        wire.close()


def test_describe_filter_mixing_ip_and_user_gets_invalid_request(server):
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        resp = wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {"components": [
            {"entity_type": "ip", "match_type": 0, "match": "127.0.0.1"},
            {"entity_type": "user", "match_type": 1, "match": None}], "strict": False})
        assert resp["error_code"] == INVALID_REQUEST
        assert "ip filter" in resp["error_message"]
    finally:
        wire.close()


def test_ip_quota_cuts_a_burst_of_new_connections_and_only_new_ones(own_server):
    """5 connections/s for 127.0.0.1: of 30 opened at once, about 5 are
    answered and the rest closed unanswered, on the supervisor's and a
    worker's Kafka port; a connection opened before keeps working; a
    window later new connections are let in again; the refusals are in
    /metrics; removing the quota lifts the limit."""
    kept = KafkaWire(own_server.kafka_bootstrap)
    worker = worker_kafka_address(own_server)
    try:
        set_ip_quota(own_server, "127.0.0.1", 5)
        got = burst(own_server.kafka_bootstrap)
        assert 2 <= got <= 10, f"{got} of {BURST} connections answered at 5/s"
        # the kept connection is no new connection: it is served as before
        assert kept.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
        got = burst(worker)
        assert 2 <= got <= 10, f"worker: {got} of {BURST} connections answered at 5/s"
        time.sleep(2.5)         # the burst's window passes: the rate is back under 5/s
        assert one_connection_works(own_server.kafka_bootstrap)
        wait_until(lambda: sum(rejected_metric(own_server).values()) >= 2 * (BURST - 10), 15,
                   lambda: f"the refusals in /metrics ({rejected_metric(own_server)})",
                   interval=0.3)
        # logged, but at most once a second per IP and process: not once per refusal
        logged = own_server.output().count("over its connection_creation_rate quota")
        assert 1 <= logged <= 6, f"{logged} log lines for about 50 refusals"
        set_ip_quota(own_server, "127.0.0.1", None)
        assert burst(own_server.kafka_bootstrap) == BURST
        assert burst(worker) == BURST
    finally:
        kept.close()


def test_a_connected_confluent_kafka_producer_keeps_producing_under_an_ip_quota(
        own_server, topic_name):
    """librdkafka's connections, opened before the quota, are no new
    connections: with 127.0.0.1 held to 1 connection/s and a burst from it
    refused, the producer's next 200 records are all delivered."""
    import confluent_kafka as ck

    from harness import create
    create(own_server, topic_name, partitions=2)
    producer = ck.Producer({"bootstrap.servers": own_server.kafka_bootstrap, "linger.ms": 5})
    for partition in (0, 1):        # a connection to each partition's leader, now
        producer.produce(topic_name, b"before", partition=partition)
    assert producer.flush(30) == 0
    set_ip_quota(own_server, "127.0.0.1", 1)
    assert burst(own_server.kafka_bootstrap) <= 3
    delivered = []
    for i in range(200):
        producer.produce(topic_name, b"v%d" % i, partition=i % 2,
                         on_delivery=lambda err, msg: delivered.append(err))
    assert producer.flush(30) == 0
    assert delivered == [None] * 200


def test_default_ip_quota_applies_to_ips_without_their_own(own_server):
    """The default ip entity limits 127.0.0.2; 127.0.0.1, with a quota of
    its own that is high, is not limited; removing the default lifts it."""
    set_ip_quota(own_server, "127.0.0.1", 10_000)
    set_ip_quota(own_server, None, 5)
    assert burst(own_server.kafka_bootstrap) == BURST
    got = burst(own_server.kafka_bootstrap, source="127.0.0.2")
    assert 2 <= got <= 10, f"{got} of {BURST} connections from 127.0.0.2 answered at 5/s"
    set_ip_quota(own_server, None, None)
    assert burst(own_server.kafka_bootstrap, source="127.0.0.2") == BURST


def test_ip_quotas_survive_a_restart(own_server):
    set_ip_quota(own_server, "127.0.0.2", 5)
    assert own_server.stop() == 0
    own_server.start()
    got = burst(own_server.kafka_bootstrap, source="127.0.0.2")
    assert 2 <= got <= 10, f"{got} of {BURST} connections answered at 5/s after a restart"


def test_max_connection_creation_rate_is_read_under_kafkas_name_and_checked(tmp_path):
    """``max.connection.creation.rate`` in a config file sets it; a negative
    one is refused with a message naming it."""
    from kafkalite.errors import InvalidConfigurationError
    from kafkalite.server.config import ServerConfig
    path = tmp_path / "server.toml"
    path.write_text('"max.connection.creation.rate" = 50\n')
    assert ServerConfig.load(str(path)).max_connection_creation_rate == 50
    assert ServerConfig.load().max_connection_creation_rate == 0     # unlimited
    path.write_text("max_connection_creation_rate = -3\n")
    with pytest.raises(InvalidConfigurationError, match="max_connection_creation_rate"):
        ServerConfig.load(str(path))


@pytest.mark.processes
def test_max_connection_creation_rate_slows_a_listeners_accepts(tmp_path):
    """max_connection_creation_rate = 5: 20 connections opened at once are
    all answered (none refused: the listener waits, as Kafka's acceptor
    does), but at about 5 a second, not at once; a connection made before
    is answered at once meanwhile."""
    config = tmp_path / "server.toml"
    config.write_text("max_connection_creation_rate = 5\n")
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(config)]).start()
    try:
        time.sleep(1.5)          # the start-up's own connections leave the windows' first second
        kept = KafkaWire(srv.kafka_bootstrap)
        socks = []
        try:
            started = time.monotonic()
            for i in range(20):
                s = connect(srv.kafka_bootstrap)
                s.sendall(api_versions_frame(i))
                socks.append(s)
            t0 = time.monotonic()
            assert kept.request(ApiKey.API_VERSIONS, 0, {})["error_code"] == 0
            assert time.monotonic() - t0 < 2.0, "a connection made before waited on the rate"
            assert all(answered(s, timeout=30) for s in socks)
            took = time.monotonic() - started
            # 20 at 5/s after a first window's burst of 5: about 3 s; at once would be ~0.1 s
            assert took > 1.5, f"20 connections accepted in {took:.2f} s at 5/s"
            assert took < 25, f"20 connections took {took:.2f} s at 5/s"
        finally:
            kept.close()
            for s in socks:
                s.close()
    finally:
        srv.stop()
