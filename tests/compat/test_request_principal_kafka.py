"""``request_principal`` (the ingest gateway's "produce on behalf of") is
the server's own CURVE key's alone: a Kafka-listener login that carries the
broker's principal name -- here a SASL user named ``kafkalite-broker`` --
is not the server, and its Produce naming another principal is refused
(the connection closed, as for any whole-request error of a Produce) with
nothing written, while the same user's plain Produce is served.
"""
from __future__ import annotations

import subprocess
import sys

import pytest
from compat_helpers import KafkaWire, create_topic, native_read

from harness import ServerProcess, child_env

from kafkalite.protocol import ApiKey
from kafkalite.protocol.curve import BROKER_PRINCIPAL
from kafkalite.record import RecordBatchBuilder

USER = BROKER_PRINCIPAL.split(":", 1)[1]
PASSWORD = "not-the-server-1"


def login(address: str) -> KafkaWire:
    """A SASL/PLAIN connection as USER (SaslHandshake v0, then the raw token)."""
    wire = KafkaWire(address)
    assert wire.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
    wire.send_frame(f"\0{USER}\0{PASSWORD}".encode())
    wire.recv_frame()
    return wire


def produce_body(topic: str, value: bytes, **extra) -> dict:
    b = RecordBatchBuilder(0)
    b.append(1_700_000_000_000, None, value)
    return {"transactional_id": None, "acks": 1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": bytes(b.build())}]}], **extra}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("rp") / "data")
    r = subprocess.run([sys.executable, "-m", "kafkalite", "users", "add", USER, "--data-dir",
                        data], input=PASSWORD + "\n", capture_output=True, text=True,
                       env=child_env(), timeout=60)
    assert r.returncode == 0, r.stderr
    srv = ServerProcess(data, workers=1,
                        extra_args=["--kafka-security-protocol", "SASL_PLAINTEXT"]).start()
    try:
        yield srv
    finally:
        srv.stop()
        srv.kill()


def test_a_sasl_user_with_the_brokers_name_may_not_act_for_others(server):
    create_topic(server, "rp")
    wire = login(server.kafka_bootstrap)
    meta = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": "rp"}],
                                              "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
    wire.close()
    leader = meta["topics"][0]["partitions"][0]["leader_id"]
    broker = next(b for b in meta["brokers"] if b["node_id"] == leader)
    address = f"{broker['host']}:{broker['port']}"

    wire = login(address)
    with pytest.raises(ConnectionError):        # refused: the broker closes the connection
        wire.request(ApiKey.PRODUCE, 9, produce_body("rp", b"as alice",
                                                     request_principal="User:alice"))
    wire.close()
    wire = login(address)
    answer = wire.request(ApiKey.PRODUCE, 9, produce_body("rp", b"as itself"))
    wire.close()
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    # the refused record never landed (a second one would show within 3 s)
    assert [r[3] for r in native_read(server, "rp", 1, expect=2, timeout=3)] == [b"as itself"]
