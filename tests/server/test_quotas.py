"""Client quotas on a real server: AlterClientQuotas / DescribeClientQuotas
over the Kafka wire (defaults, Kafka's matching filters, validate_only,
Kafka's errors for bad entities, keys and values), their survival across a
restart, and the native paths (ZeroMQ, shared-memory rings) holding a
producer over its quota back. Kafka's own clients against quotas:
tests/compat/test_client_quotas.py.
"""
from __future__ import annotations

import re
import sys
import time
import urllib.request

import pytest

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/compat")

from compat_helpers import KafkaWire  # noqa: E402
from harness import create  # noqa: E402

from kafkalite.client import Producer  # noqa: E402
from kafkalite.client.admin import (AdminClient, ClientQuotaAlteration,  # noqa: E402
                                    ClientQuotaEntity, ClientQuotaFilterComponent)
from kafkalite.protocol import ApiKey  # noqa: E402

INVALID_REQUEST = 42


def entity(**parts) -> list:
    return [{"entity_type": k.replace("_", "-"), "entity_name": v} for k, v in parts.items()]


def alter(wire, entries, validate_only=False, version=1) -> list:
    return wire.request(ApiKey.ALTER_CLIENT_QUOTAS, version, {
        "entries": [{"entity": e, "ops": [{"key": k, "value": v if v is not None else 0.0,
                                           "remove": v is None} for k, v in ops.items()]}
                    for e, ops in entries], "validate_only": validate_only})["entries"]


def describe(wire, components=(), strict=False, version=1) -> dict:
    resp = wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, version, {
        "components": [{"entity_type": t, "match_type": m, "match": n} for t, m, n in components],
        "strict": strict})
    assert resp["error_code"] == 0, resp
    return {tuple((e["entity_type"], e["entity_name"]) for e in entry["entity"]):
            {v["key"]: v["value"] for v in entry["values"]} for entry in resp["entries"]}


def test_alter_and_describe_over_the_wire_with_defaults_and_filters(own_server):
    wire = KafkaWire(own_server.kafka_bootstrap)
    try:
        answers = alter(wire, [
            (entity(user="alice"), {"producer_byte_rate": 1024}),
            (entity(user="alice", client_id=None), {"consumer_byte_rate": 2048}),
            (entity(user=None), {"request_percentage": 50.0}),
            (entity(client_id="app"), {"producer_byte_rate": 4096}),
            (entity(client_id=None), {"producer_byte_rate": 8192})])
        assert [a["error_code"] for a in answers] == [0] * 5
        every = describe(wire)
        assert every[(("user", "alice"),)] == {"producer_byte_rate": 1024.0}
        assert every[(("user", "alice"), ("client-id", None))] == {"consumer_byte_rate": 2048.0}
        assert every[(("user", None),)] == {"request_percentage": 50.0}
        assert len(every) == 5
        # exact name, default, any specified name; strict leaves out the user+client entity
        assert set(describe(wire, [("user", 0, "alice")])) == {
            (("user", "alice"),), (("user", "alice"), ("client-id", None))}
        assert set(describe(wire, [("user", 0, "alice")], strict=True)) == {(("user", "alice"),)}
        assert set(describe(wire, [("user", 1, None)])) == {(("user", None),)}
        assert set(describe(wire, [("client-id", 2, None)], strict=True)) == {
            (("client-id", "app"),)}
        # validate_only changes nothing; remove takes a key away
        assert alter(wire, [(entity(user="bob"), {"producer_byte_rate": 1})],
                     validate_only=True)[0]["error_code"] == 0
        assert (("user", "bob"),) not in describe(wire)
        assert alter(wire, [(entity(client_id="app"), {"producer_byte_rate": None})]
                     )[0]["error_code"] == 0
        assert (("client-id", "app"),) not in describe(wire)
        # v0 (not flexible) reads the same
        assert describe(wire, [("user", 0, "alice")], strict=True, version=0) == {
            (("user", "alice"),): {"producer_byte_rate": 1024.0}}
    finally:
        wire.close()
    own_server.stop()
    own_server.start()
    admin = AdminClient(own_server.config())
    try:
        after = admin.describe_client_quotas().result()
        assert after[ClientQuotaEntity({"user": "alice"})] == {"producer_byte_rate": 1024.0}
        assert after[ClientQuotaEntity({"client-id": None})] == {"producer_byte_rate": 8192.0}
        assert len(after) == 4
        only = admin.describe_client_quotas(
            [ClientQuotaFilterComponent("user", default=True)], strict=True).result()
        assert only == {ClientQuotaEntity({"user": None}): {"request_percentage": 50.0}}
    finally:
        admin.close()


def test_bad_entities_keys_and_values_get_invalid_request(server):
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        answers = alter(wire, [
            (entity(user="carol"), {"no_such_quota": 5}),
            (entity(user="carol"), {"producer_byte_rate": -1}),
            (entity(user="carol"), {"producer_byte_rate": 10.5}),
            ([{"entity_type": "tenant", "entity_name": "x"}], {"producer_byte_rate": 5}),
            ([{"entity_type": "ip", "entity_name": "10.0.0.1"}], {"producer_byte_rate": 5}),
            (entity(user="carol") + entity(user="dave"), {"producer_byte_rate": 5}),
            (entity(user="carol"), {"consumer_byte_rate": 64})])
        codes = [a["error_code"] for a in answers]
        assert codes == [INVALID_REQUEST] * 6 + [0], answers
        assert all(a["error_message"] for a in answers[:6])
        # the good entry went in, none of the bad ones did
        assert describe(wire, [("user", 0, "carol")], strict=True) == {
            (("user", "carol"),): {"consumer_byte_rate": 64.0}}
        bad = wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {
            "components": [{"entity_type": "user", "match_type": 7, "match": None}],
            "strict": False})
        assert bad["error_code"] == INVALID_REQUEST and bad["error_message"]
        bad = wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {
            "components": [{"entity_type": "group", "match_type": 0, "match": "g"}],
            "strict": False})
        assert bad["error_code"] == INVALID_REQUEST
        # the broker keeps serving the connection
        assert describe(wire, [("user", 0, "carol")])
    finally:
        wire.close()


def native_rate(server, topic: str, client_id: str, seconds: float,
                transport: str = "zmq") -> float:
    """Bytes/s a native producer (ZeroMQ, or a shared-memory ring) gets
    acknowledged for ``seconds``."""
    p = Producer(server.config(**{"client.id": client_id, "linger.ms": 5, "batch.size": 65536,
                                  "queue.buffering.max.messages": 1000,
                                  "kafkalite.transport": transport}))
    acked = [0]

    def delivered(err, msg):
        if err is None:
            acked[0] += len(msg.value())
    value = b"n" * 1000
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            try:
                p.produce(topic, value, on_delivery=delivered)
            except BufferError:
                p.poll(0.01)
            p.poll(0)
        rate = acked[0] / seconds
    finally:
        p.close(timeout=20)
    return rate


@pytest.mark.parametrize("transport", ["zmq", "shm"])
def test_native_producer_over_its_quota_is_slowed(server, topic_name, transport):
    create(server, topic_name, partitions=2)
    quota = 500_000
    admin = AdminClient(server.config())
    try:
        for f in admin.alter_client_quotas([ClientQuotaAlteration(
                ClientQuotaEntity({"client-id": f"native-limited-{transport}"}),
                {"producer_byte_rate": quota})]).values():
            f.result()
    finally:
        admin.close()
    free = native_rate(server, topic_name, "native-free", 3.0, transport)
    limited = native_rate(server, topic_name, f"native-limited-{transport}", 15.0, transport)
    # the run at the quota plus a new client's burst (one window) and what
    # it had in flight, with slack; unthrottled, the same producer is far faster
    assert limited <= 1.2 * quota * (15.0 + 2) / 15.0, f"{limited:.0f} B/s, quota {quota}"
    assert free > 3 * limited, f"unlimited {free:.0f} B/s vs limited {limited:.0f} B/s"


def rate_labels(server) -> set:
    """(user, client_id) of every kafka_server_produce_byte_rate sample in /metrics."""
    text = urllib.request.urlopen(server.info["metrics"], timeout=10).read().decode()
    return set(re.findall(r'^kafka_server_produce_byte_rate\{client_id="([^"]*)",user="([^"]*)"\}',
                          text, re.M))


def produce_some(server, topic: str, client_id: str) -> None:
    p = Producer(server.config(**{"client.id": client_id}))
    try:
        for _ in range(20):
            p.produce(topic, b"v" * 100)
        assert p.flush(20) == 0
    finally:
        p.close()


def wait_for(check, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "not seen in time"
        time.sleep(0.3)


def test_kafka_matching_order_decides_which_entity_a_client_counts_against(own_server,
                                                                          topic_name):
    """The metric's labels name the entity a client's bytes count against:
    /users/<default> comes before /clients/<client-id> in Kafka's order,
    and /users/<default>/clients/<default> before /users/<default>."""
    create(own_server, topic_name)
    admin = AdminClient(own_server.config())

    def set_quota(parts: dict, value: float) -> None:
        for f in admin.alter_client_quotas([ClientQuotaAlteration(
                ClientQuotaEntity(parts), {"producer_byte_rate": value})]).values():
            f.result()
    try:
        set_quota({"client-id": "app"}, 10_000_000)
        set_quota({"user": None}, 1_000_000_000)
        produce_some(own_server, topic_name, "app")
        # counted per user (each user its own rate under the default), client id not a part
        wait_for(lambda: ("", "ANONYMOUS") in rate_labels(own_server))
        assert not any(c == "app" for c, _ in rate_labels(own_server))
        set_quota({"user": None, "client-id": None}, 1_000_000_000)
        produce_some(own_server, topic_name, "app")
        wait_for(lambda: ("app", "ANONYMOUS") in rate_labels(own_server))
        # a client id with a quota of its own and no user quotas: counted by client id
        for parts in ({"user": None}, {"user": None, "client-id": None}):
            for f in admin.alter_client_quotas([ClientQuotaAlteration(
                    ClientQuotaEntity(parts), {"producer_byte_rate": None})]).values():
                f.result()
        produce_some(own_server, topic_name, "app")
        wait_for(lambda: ("app", "") in rate_labels(own_server))
    finally:
        admin.close()


@pytest.mark.parametrize("where", ["supervisor", "worker"])
def test_request_percentage_throttles_and_mutes_the_connection(server, where):
    """A client over its request_percentage (handler time) is told
    throttle_time_ms and its connection muted: its next request waits. On
    a worker's listener Metadata is relayed to the supervisor, which
    counts it; the relay's reply carries the throttle, and the worker
    mutes the connection."""
    address = server.kafka_bootstrap
    if where == "worker":
        port = next(b["port"] for b in server.refresh()["kafka_brokers"] if b["node_id"] == 0)
        address = f"{address.rsplit(':', 1)[0]}:{port}"
    wire = KafkaWire(address, timeout=30.0)    # client id "compat-test"
    metadata = {"topics": [], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}
    try:
        assert alter(wire, [(entity(client_id="compat-test"),
                             {"request_percentage": 0.003})])[0]["error_code"] == 0
        throttle_ms = 0
        for _ in range(2000):
            throttle_ms = wire.request(ApiKey.METADATA, 12, metadata)["throttle_time_ms"]
            if throttle_ms >= 20:       # long enough to see the mute
                break
        assert throttle_ms >= 20, f"never throttled long enough ({throttle_ms} ms)"
        began = time.monotonic()
        wire.request(ApiKey.METADATA, 12, metadata)
        assert time.monotonic() - began >= 0.5 * throttle_ms / 1000.0, "the connection was not muted"
    finally:
        alter(wire, [(entity(client_id="compat-test"), {"request_percentage": None})])
        wire.close()
