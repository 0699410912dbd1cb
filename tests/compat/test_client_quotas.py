"""Client quotas with Kafka's own clients (confluent-kafka over the Kafka port).

A producer over its ``producer_byte_rate`` is throttled to the quota while
another client, with no quota, writes at full speed beside it; the
throttle reaches librdkafka as ``throttle_time_ms`` (its ``throttle_cb``).
The topic's partitions are led by both workers, so the quota holds for the
whole node, not per worker process. A consumer over its
``consumer_byte_rate`` is held likewise. kafka-python's own encoding of
AlterClientQuotas / DescribeClientQuotas is answered as Kafka would.

The run's length is QUOTA_TEST_SECONDS (tests/soak.py: 6 s by default, the
issue's 30 s and more under tools/soak): the rate delivered over the whole
run must be at most 10 % above the quota (a new client bursts at most one
window's worth, quotas.py) and at least 80 % of it (a client short of CPU
falls behind its throttle). The client ids are the test's own: the quotas
and the metrics are the shared server's.
"""
from __future__ import annotations

import threading
import time
import urllib.request

import confluent_kafka as ck
import pytest

from harness import create, wait_until

from kafkalite.client.admin import AdminClient, ClientQuotaAlteration, ClientQuotaEntity
from soak import setting

SECONDS = setting("QUOTA_TEST_SECONDS")
PRODUCE_QUOTA = 200_000          # bytes/s
FETCH_QUOTA = 300_000
VALUE = b"q" * 1000
WINDOWS_S = 2               # a new client's burst (one window) and fetches in flight


def set_quota(server, entity: dict, **values) -> None:
    """Set (a value) or remove (None) quotas of ``entity``."""
    admin = AdminClient(server.config())
    try:
        for f in admin.alter_client_quotas(
                [ClientQuotaAlteration(ClientQuotaEntity(entity), values)]).values():
            f.result()
    finally:
        admin.close()


@pytest.fixture
def quotas(server):
    """``set_quota`` on the shared server, each quota removed again after
    the test (quotas switch the server's accounting on for everyone)."""
    entities = []

    def setter(entity: dict, **values) -> None:
        entities.append((entity, dict.fromkeys(values)))
        set_quota(server, entity, **values)
    yield setter
    for entity, removal in entities:
        set_quota(server, entity, **removal)


def produce_for(server, topic: str, client_id: str, seconds: float, **config) -> dict:
    """Write as fast as the client may for ``seconds`` (64 KB queued at
    most): delivery times and sizes, and the throttles librdkafka
    reported."""
    throttles, deliveries, failed = [], [], []
    p = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "client.id": client_id,
                     "linger.ms": 5, "queue.buffering.max.kbytes": 64, **config,
                     "throttle_cb": lambda ev: throttles.append((time.monotonic(),
                                                                 ev.throttle_time))})

    def delivered(err, msg):
        if err is not None:
            failed.append(err)
        else:
            deliveries.append((time.monotonic(), len(msg.value())))
    start = time.monotonic()
    end = start + seconds
    while time.monotonic() < end:
        try:
            p.produce(topic, VALUE, on_delivery=delivered)
        except BufferError:
            p.poll(0.005)
        p.poll(0)
    p.flush(60)
    return {"start": start, "end": end, "throttles": throttles, "deliveries": deliveries,
            "failed": failed}


def metric(server, name: str, client_id: str) -> float | None:
    """A client id's sample of ``name`` in the node's /metrics (None: absent)."""
    text = urllib.request.urlopen(server.info["metrics"], timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name + "{") and f'client_id="{client_id}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return None


def rate(run: dict, since: float) -> float:
    """Bytes/s delivered from ``since`` until the run's last delivery: a
    throttled client waits between deliveries, and a wait that the end of
    the run cuts short would count as time without bytes."""
    inside = sorted((t, n) for t, n in run["deliveries"] if since <= t < run["end"])
    if not inside or inside[-1][0] <= since:
        return 0.0
    return sum(n for _, n in inside) / (inside[-1][0] - since)


def test_producer_over_its_byte_rate_is_throttled_to_the_quota_node_wide(server, topic_name,
                                                                          group_name, quotas):
    create(server, topic_name, partitions=4)      # partitions on both workers
    limited_id, unlimited_id = f"{group_name}-limited", f"{group_name}-unlimited"
    alone = produce_for(server, topic_name, unlimited_id, 2.0)
    baseline = rate(alone, alone["start"])
    quotas({"client-id": limited_id}, producer_byte_rate=PRODUCE_QUOTA)
    runs = {}
    # the throttled client in small batches (16 KB, 80 ms of the quota):
    # the throttle holds it in steps that small, so a run of a few seconds
    # measures the quota and not where the steps happen to fall (64 KB
    # requests left the rate of a 6 s run anywhere from 0.65 to 1.3 times
    # the quota on a loaded machine)
    threads = [threading.Thread(target=lambda c=c, s=s, k=k: runs.__setitem__(
        c, produce_for(server, topic_name, c, s, **k)))
        for c, s, k in ((limited_id, SECONDS, {"batch.size": 16384}), (unlimited_id, 5.0, {}))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    limited, unlimited = runs[limited_id], runs[unlimited_id]
    assert not limited["failed"] and not unlimited["failed"]
    assert limited["throttles"], "librdkafka never reported a throttle"
    assert max(ms for _, ms in limited["throttles"]) > 0
    # Never above the quota over the whole run (a new client's burst of one
    # window included: the throttle then holds the client below the quota
    # until the windows average it out, about 0.8 x from its first throttle
    # on). Below it only as far as a client with too little CPU falls
    # behind its throttle: a fresh-clone run with four test processes on
    # two cores had 0.89 x; the lower bound catches a throttle gone wrong
    # (holding a client at half its quota), not a busy machine.
    achieved = rate(limited, limited["start"])
    assert 0.8 * PRODUCE_QUOTA <= achieved <= 1.1 * PRODUCE_QUOTA, \
        f"{achieved:.0f} B/s against a quota of {PRODUCE_QUOTA}"
    # the other client: no throttle, and its rate of its own, far above the quota
    assert not unlimited["throttles"]
    other = rate(unlimited, unlimited["start"])
    assert other > 5 * PRODUCE_QUOTA
    assert other > 0.3 * baseline, f"{other:.0f} B/s beside the throttled one, {baseline:.0f} alone"
    # and in the metrics: the time it was throttled, its node-wide byte rate
    wait_until(lambda: (metric(server, "kafka_server_produce_throttle_time_ms_total",
                               limited_id) or 0) > 0, message="produce throttle time in /metrics",
               interval=0.5)
    assert metric(server, "kafka_server_produce_throttle_time_ms_total", unlimited_id) is None
    assert (metric(server, "kafka_server_produce_byte_rate", limited_id) or 0) > 0


def test_consumer_over_its_fetch_byte_rate_is_throttled(server, topic_name, group_name, quotas):
    create(server, topic_name, partitions=2)
    seconds = SECONDS
    # small batches: a fetch returns at least one whole batch, and the
    # throttle follows each answer, so 1 MB batches would move in 1 MB steps
    p = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 20,
                     "batch.size": 16384})
    # twice what the run may fetch: unthrottled, it would all come in well
    # under a second
    for _ in range(int(2 * FETCH_QUOTA * (seconds + WINDOWS_S) / len(VALUE))):
        p.produce(topic_name, VALUE)
        p.poll(0)
    assert p.flush(60) == 0
    reader = f"{group_name}-slow-reader"
    quotas({"client-id": reader}, consumer_byte_rate=FETCH_QUOTA)
    throttles, received = [], []
    c = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "client.id": reader,
                     "group.id": group_name, "auto.offset.reset": "earliest",
                     "max.partition.fetch.bytes": 32768,
                     "throttle_cb": lambda ev: throttles.append((time.monotonic(),
                                                                 ev.throttle_time))})
    try:
        c.subscribe([topic_name])
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            for m in c.consume(500, 0.2):
                if m.error() is None:
                    received.append((time.monotonic(), len(m.value())))
    finally:
        c.close()
    assert throttles, "librdkafka never reported a fetch throttle"
    # librdkafka prefetches, so what the application sees lags what was
    # fetched: the bound is on the total, the quota over the run plus a
    # new client's burst (one window) and what librdkafka's fetches had in
    # flight, with 10 % slack
    got = sum(n for _, n in received)
    allowed = FETCH_QUOTA * (seconds + WINDOWS_S)
    assert got <= 1.1 * allowed, f"{got} bytes in {seconds} s against a quota of {FETCH_QUOTA}/s"
    assert got >= 0.5 * FETCH_QUOTA * seconds, f"{got} bytes: held far below the quota"


def test_kafka_pythons_own_encoding_of_the_quota_apis(server, group_name):
    """AlterClientQuotas / DescribeClientQuotas as kafka-python's protocol
    classes (generated from Kafka's message JSON) encode and decode them,
    both versions, over a bare Kafka connection."""
    import socket
    import struct

    from kafka.protocol.admin.client_quotas import (AlterClientQuotasRequest as Alter,
                                                    AlterClientQuotasResponse,
                                                    DescribeClientQuotasRequest as Describe,
                                                    DescribeClientQuotasResponse)
    host, port = server.kafka_bootstrap.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=10)

    def call(request, response_class, version: int, correlation_id: int):
        request.API_VERSION = version
        request.with_header(correlation_id=correlation_id, client_id="kafka-python")
        sock.sendall(request.encode(version=version, header=True, framed=True))
        size, = struct.unpack(">i", sock.recv(4, socket.MSG_WAITALL))
        return response_class.decode(sock.recv(size, socket.MSG_WAITALL), version=version,
                                     header=True).to_dict()
    try:
        for version in (0, 1):
            user = f"{group_name}-kafka-python-{version}"
            answer = call(Alter(entries=[Alter.EntryData(
                entity=[Alter.EntryData.EntityData(entity_type="user", entity_name=user),
                        Alter.EntryData.EntityData(entity_type="client-id", entity_name=None)],
                ops=[Alter.EntryData.OpData(key="consumer_byte_rate", value=4096.0,
                                            remove=False),
                     Alter.EntryData.OpData(key="bogus_rate", value=1.0, remove=False)])],
                validate_only=False), AlterClientQuotasResponse, version, 1)
            assert answer["entries"][0]["error_code"] == 42          # INVALID_REQUEST: bogus_rate
            answer = call(Alter(entries=[Alter.EntryData(
                entity=[Alter.EntryData.EntityData(entity_type="user", entity_name=user),
                        Alter.EntryData.EntityData(entity_type="client-id", entity_name=None)],
                ops=[Alter.EntryData.OpData(key="consumer_byte_rate", value=4096.0,
                                            remove=False)])],
                validate_only=False), AlterClientQuotasResponse, version, 2)
            assert answer["entries"][0]["error_code"] == 0
            found = call(Describe(components=[
                Describe.ComponentData(entity_type="user", match_type=0, match=user)],
                strict=False), DescribeClientQuotasResponse, version, 3)
            assert found["error_code"] == 0
            assert found["entries"] == [{
                "entity": [{"entity_type": "user", "entity_name": user},
                           {"entity_type": "client-id", "entity_name": None}],
                "values": [{"key": "consumer_byte_rate", "value": 4096.0}]}]
    finally:
        sock.close()
        for version in (0, 1):          # the shared server's quotas as they were
            set_quota(server, {"user": f"{group_name}-kafka-python-{version}",
                               "client-id": None}, consumer_byte_rate=None)
