"""Client quotas with Kafka's own clients (confluent-kafka over the Kafka port).

A producer over its ``producer_byte_rate`` is throttled to the quota while
another client, with no quota, writes at full speed beside it; the
throttle reaches librdkafka as ``throttle_time_ms`` (its ``throttle_cb``).
The topic's partitions are led by both workers, so the quota holds for the
whole node, not per worker process. A consumer over its
``consumer_byte_rate`` is held likewise. kafka-python's own encoding of
AlterClientQuotas / DescribeClientQuotas is answered as Kafka would.

The issue's setting is 30 s (QUOTA_TEST_SECONDS, default 30): the rate
delivered over the whole run must be within 10 % of the quota (a new client
bursts at most one window's worth, quotas.py).
"""
from __future__ import annotations

import os
import threading
import time
import urllib.request

import confluent_kafka as ck

from harness import create

from kafkalite.client.admin import AdminClient, ClientQuotaAlteration, ClientQuotaEntity
from soak import setting

SECONDS = setting("QUOTA_TEST_SECONDS")
PRODUCE_QUOTA = 200_000          # bytes/s
FETCH_QUOTA = 300_000
VALUE = b"q" * 1000
WINDOWS_S = 2               # a new client's burst (one window) and fetches in flight


def set_quota(server, entity: dict, **values) -> None:
    admin = AdminClient(server.config())
    try:
        for f in admin.alter_client_quotas(
                [ClientQuotaAlteration(ClientQuotaEntity(entity), values)]).values():
            f.result()
    finally:
        admin.close()


def produce_for(server, topic: str, client_id: str, seconds: float) -> dict:
    """Write as fast as the client may for ``seconds``: delivery times and
    sizes, and the throttles librdkafka reported."""
    throttles, deliveries, failed = [], [], []
    p = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "client.id": client_id,
                     "linger.ms": 5, "queue.buffering.max.kbytes": 64,
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
    """Bytes/s delivered from ``since`` to the end of the run."""
    total = sum(n for t, n in run["deliveries"] if since <= t < run["end"])
    return total / (run["end"] - since)


def test_producer_over_its_byte_rate_is_throttled_to_the_quota_node_wide(server, topic_name):
    create(server, topic_name, partitions=4)      # partitions on both workers
    baseline = rate(produce_for(server, topic_name, "unlimited", 3.0), 0) or 1.0
    set_quota(server, {"client-id": "limited"}, producer_byte_rate=PRODUCE_QUOTA)
    runs = {}
    threads = [threading.Thread(target=lambda c=c, s=s: runs.__setitem__(
        c, produce_for(server, topic_name, c, s))) for c, s in (("limited", SECONDS),
                                                                 ("unlimited", 5.0))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    limited, unlimited = runs["limited"], runs["unlimited"]
    assert not limited["failed"] and not unlimited["failed"]
    assert limited["throttles"], "librdkafka never reported a throttle"
    assert max(ms for _, ms in limited["throttles"]) > 0
    achieved = rate(limited, limited["start"])
    assert abs(achieved - PRODUCE_QUOTA) <= 0.1 * PRODUCE_QUOTA, \
        f"{achieved:.0f} B/s against a quota of {PRODUCE_QUOTA}"
    # the other client: no throttle, and its rate of its own, far above the quota
    assert not unlimited["throttles"]
    other = rate(unlimited, unlimited["start"])
    assert other > 5 * PRODUCE_QUOTA
    assert other > 0.3 * baseline, f"{other:.0f} B/s beside the throttled one, {baseline:.0f} alone"
    # and in the metrics: the time it was throttled, its node-wide byte rate
    deadline = time.monotonic() + 10
    while (metric(server, "kafka_server_produce_throttle_time_ms_total", "limited") or 0) <= 0:
        assert time.monotonic() < deadline, "no produce throttle time in /metrics"
        time.sleep(0.5)
    assert metric(server, "kafka_server_produce_throttle_time_ms_total", "unlimited") is None
    assert (metric(server, "kafka_server_produce_byte_rate", "limited") or 0) > 0


def test_consumer_over_its_fetch_byte_rate_is_throttled(server, topic_name):
    create(server, topic_name, partitions=2)
    # small batches: a fetch returns at least one whole batch, and the
    # throttle follows each answer, so 1 MB batches would move in 1 MB steps
    p = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "linger.ms": 20,
                     "batch.size": 16384})
    for _ in range(8000):                       # 8 MB: more than the run can fetch
        p.produce(topic_name, VALUE)
        p.poll(0)
    assert p.flush(60) == 0
    set_quota(server, {"client-id": "slow-reader"}, consumer_byte_rate=FETCH_QUOTA)
    throttles, received = [], []
    c = ck.Consumer({"bootstrap.servers": server.kafka_bootstrap, "client.id": "slow-reader",
                     "group.id": topic_name, "auto.offset.reset": "earliest",
                     "max.partition.fetch.bytes": 32768,
                     "throttle_cb": lambda ev: throttles.append((time.monotonic(),
                                                                 ev.throttle_time))})
    try:
        c.subscribe([topic_name])
        seconds = max(10.0, SECONDS / 2)
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
    # flight, with 10 % slack; unthrottled, the whole 8 MB comes in well
    # under a second
    got = sum(n for _, n in received)
    allowed = FETCH_QUOTA * (seconds + WINDOWS_S)
    assert got <= 1.1 * allowed, f"{got} bytes in {seconds} s against a quota of {FETCH_QUOTA}/s"
    assert got >= 0.5 * FETCH_QUOTA * seconds, f"{got} bytes: held far below the quota"


def test_kafka_pythons_own_encoding_of_the_quota_apis(server):
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
            user = f"kafka-python-{version}"
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
