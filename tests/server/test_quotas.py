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
from harness import create, wait_until  # noqa: E402

from kafkalite.client import Producer  # noqa: E402
from kafkalite.client.admin import (AdminClient, ClientQuotaAlteration,  # noqa: E402
                                    ClientQuotaEntity, ClientQuotaFilterComponent)
from kafkalite.protocol import ApiKey  # noqa: E402

INVALID_REQUEST = 42


class Wire(KafkaWire):
    """KafkaWire with a client id of the test's own: quotas set on the
    session's shared server for KafkaWire's "compat-test" would throttle
    every other test's wire."""

    def __init__(self, address: str, client_id: str, timeout: float = 10.0):
        super().__init__(address, timeout)
        self.client_id = client_id

    def request(self, api_key: int, version: int, body: dict) -> dict:
        from kafkalite.protocol import decode_response, encode_request
        self.correlation += 1
        self.send_frame(encode_request(api_key, version, self.correlation, self.client_id, body))
        correlation, response = decode_response(api_key, version, self.recv_frame())
        assert correlation == self.correlation
        return response


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


def test_bad_entities_keys_and_values_get_invalid_request(server, group_name):
    carol, dave = f"{group_name}-carol", f"{group_name}-dave"     # the shared server's users
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        answers = alter(wire, [
            (entity(user=carol), {"no_such_quota": 5}),
            (entity(user=carol), {"producer_byte_rate": -1}),
            (entity(user=carol), {"producer_byte_rate": 10.5}),
            ([{"entity_type": "tenant", "entity_name": "x"}], {"producer_byte_rate": 5}),
            ([{"entity_type": "ip", "entity_name": "10.0.0.1"}], {"producer_byte_rate": 5}),
            (entity(user=carol) + entity(user=dave), {"producer_byte_rate": 5}),
            (entity(user=carol), {"consumer_byte_rate": 64})])
        codes = [a["error_code"] for a in answers]
        assert codes == [INVALID_REQUEST] * 6 + [0], answers
        assert all(a["error_message"] for a in answers[:6])
        # the good entry went in, none of the bad ones did
        assert describe(wire, [("user", 0, carol)], strict=True) == {
            (("user", carol),): {"consumer_byte_rate": 64.0}}
        bad = wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {
            "components": [{"entity_type": "user", "match_type": 7, "match": None}],
            "strict": False})
        assert bad["error_code"] == INVALID_REQUEST and bad["error_message"]
        bad = wire.request(ApiKey.DESCRIBE_CLIENT_QUOTAS, 1, {
            "components": [{"entity_type": "group", "match_type": 0, "match": "g"}],
            "strict": False})
        assert bad["error_code"] == INVALID_REQUEST
        # the broker keeps serving the connection
        assert describe(wire, [("user", 0, carol)])
    finally:
        alter(wire, [(entity(user=carol), {"consumer_byte_rate": None})])
        wire.close()


def native_rate(server, topic: str, client_id: str, seconds: float, transport: str = "zmq",
                before_close=None) -> float:
    """Bytes/s a native producer (ZeroMQ, or a shared-memory ring) gets
    acknowledged for ``seconds``; ``before_close`` runs before its close
    (which flushes what it still has)."""
    p = Producer(server.config(**{"client.id": client_id, "linger.ms": 5, "batch.size": 65536,
                                  "queue.buffering.max.messages": QUEUED,
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
        if before_close is not None:
            before_close()
        p.close(timeout=20)
    return rate


def set_producer_quota(server, client_id: str, rate: float | None) -> None:
    admin = AdminClient(server.config())
    try:
        for f in admin.alter_client_quotas([ClientQuotaAlteration(
                ClientQuotaEntity({"client-id": client_id}),
                {"producer_byte_rate": rate})]).values():
            f.result()
    finally:
        admin.close()


# What the broker guarantees a producer over its quota (server/network/quotas.py):
# each throttle brings the rate it counted back to the quota, and the rate
# of a new client is taken over at least one window, so what it counted in
# the first T seconds is at most quota * (T + one window); the topic's two
# partitions sit on two workers that learn each other's rates only after
# their first exchange, so each may let one window's burst through:
# quota * (T + 2 windows). What the producer is told of is what was counted,
# but for a throttle's release, which answers at once whatever it held
# meanwhile: at most what the producer had in flight (QUEUED records).
# T stays within the 11 windows (nothing purged).
QUOTA = 100_000
QUOTA_SECONDS = 6.0
WINDOW_S = 1.0
QUEUED = 200        # records of 1,000 bytes a producer may have unacknowledged


@pytest.mark.parametrize("transport", ["zmq", "shm"])
def test_native_producer_over_its_quota_is_slowed(server, topic_name, group_name, transport):
    create(server, topic_name, partitions=2)
    free_id, limited_id = f"{group_name}-free", f"{group_name}-limited"
    set_producer_quota(server, limited_id, QUOTA)
    free = native_rate(server, topic_name, free_id, 1.0, transport)
    # the quota goes before the close, so that the close's flush of what
    # the limited producer still holds is not throttled too
    limited = native_rate(server, topic_name, limited_id, QUOTA_SECONDS, transport,
                          before_close=lambda: set_producer_quota(server, limited_id, None))
    # 1.2: the workers' rates reach each other every 0.1 s or later (loaded)
    allowed = 1.2 * (QUOTA * (QUOTA_SECONDS + 2 * WINDOW_S) + QUEUED * 1000) / QUOTA_SECONDS
    print(f"{transport}: free {free:.0f} B/s, limited {limited:.0f} B/s, allowed {allowed:.0f} B/s")
    assert limited <= allowed, f"{limited:.0f} B/s, quota {QUOTA}, allowed {allowed:.0f}"
    # unthrottled, the same producer is far faster: the bound above would
    # catch a quota that did not hold
    assert free > 3 * allowed, f"unlimited {free:.0f} B/s vs limited {limited:.0f} B/s"


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
        wait_until(lambda: ("", "ANONYMOUS") in rate_labels(own_server), 15,
                   "the produce rate counted per user", interval=0.3)
        assert not any(c == "app" for c, _ in rate_labels(own_server))
        set_quota({"user": None, "client-id": None}, 1_000_000_000)
        produce_some(own_server, topic_name, "app")
        wait_until(lambda: ("app", "ANONYMOUS") in rate_labels(own_server), 15,
                   "the produce rate counted per user and client id", interval=0.3)
        # a client id with a quota of its own and no user quotas: counted by client id
        for parts in ({"user": None}, {"user": None, "client-id": None}):
            for f in admin.alter_client_quotas([ClientQuotaAlteration(
                    ClientQuotaEntity(parts), {"producer_byte_rate": None})]).values():
                f.result()
        produce_some(own_server, topic_name, "app")
        wait_until(lambda: ("app", "") in rate_labels(own_server), 15,
                   "the produce rate counted per client id", interval=0.3)
    finally:
        admin.close()


@pytest.mark.parametrize("where", ["supervisor", "worker"])
def test_request_percentage_throttles_and_mutes_the_connection(server, group_name, where):
    """A client over its request_percentage (handler time) is told
    throttle_time_ms and its connection muted: its next request waits. On
    a worker's listener Metadata is relayed to the supervisor, which
    counts it; the relay's reply carries the throttle, and the worker
    mutes the connection."""
    address = server.kafka_bootstrap
    if where == "worker":
        port = next(b["port"] for b in server.refresh()["kafka_brokers"] if b["node_id"] == 0)
        address = f"{address.rsplit(':', 1)[0]}:{port}"
    client_id = f"{group_name}-wire"
    wire = Wire(address, client_id, timeout=30.0)
    metadata = {"topics": [], "allow_auto_topic_creation": False,
                "include_topic_authorized_operations": False}
    # Once over the quota, each request earns about its own handler time
    # over the quota (quotas.py): h * 100 / 0.05 s, 0.2 s for a Metadata
    # request of 0.1 ms (Kafka's request_percentage counts percent of one
    # thread), long enough to see the mute and short enough not to be
    # waited for long
    try:
        assert alter(wire, [(entity(client_id=client_id),
                             {"request_percentage": 0.05})])[0]["error_code"] == 0
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
        alter(wire, [(entity(client_id=client_id), {"request_percentage": None})])
        wire.close()
