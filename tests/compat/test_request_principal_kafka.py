"""The server's own principal (``User:kafkalite-broker``, its CURVE key's:
a super user under an authorizer, and the only one whose Produce requests
may name another principal, ``request_principal``) cannot be taken through
a Kafka listener: no SASL user may have its name -- ``kafkalite users add``
refuses it, AlterUserScramCredentials answers UNACCEPTABLE_CREDENTIAL, and a
users file that has it anyway (written by hand) logs nobody in -- and a
Produce naming another principal from a Kafka-listener connection is
refused (the connection closed, as for any whole-request error of a
Produce) with nothing written. The same holds for the local doors' Unix
users' names (``User:unix:<name>``): no SASL user ``unix:root``.
"""
from __future__ import annotations

import confluent_kafka as ck
import pytest
from compat_helpers import KafkaWire, create_topic, first_client_error, native_read
from confluent_kafka.admin import (AdminClient, ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

from harness import ServerProcess, run_cli

from kafkalite.protocol import ApiKey
from kafkalite.protocol.curve import BROKER_PRINCIPAL
from kafkalite.record import RecordBatchBuilder
from kafkalite.server.auth import credentials

RESERVED = BROKER_PRINCIPAL.split(":", 1)[1]
# a SASL user of this name was User:unix:root, the local door's principal of the Unix root
# (issue 67): names in that namespace are reserved too
LOCAL_ROOT = "unix:root"
USER, PASSWORD = "frank", "frank-secret-1"

# the module's server is set up once: its tests go to one xdist worker
pytestmark = pytest.mark.xdist_group("request_principal_kafka")


def users_add(data: str, user: str, password: str):
    """``kafkalite users add`` (stdout and stderr as text)."""
    r = run_cli("users", "add", user, "--data-dir", data, stdin=password.encode() + b"\n")
    r.stdout, r.stderr = r.stdout.decode(), r.stderr.decode()
    return r


def login(address: str, user: str, password: str) -> KafkaWire:
    """A SASL/PLAIN connection (SaslHandshake v0, then the raw token)."""
    wire = KafkaWire(address)
    assert wire.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
    wire.send_frame(f"\0{user}\0{password}".encode())
    wire.recv_frame()
    return wire


def produce_body(topic: str, value: bytes, **extra) -> dict:
    b = RecordBatchBuilder(0)
    b.append(1_700_000_000_000, None, value)
    return {"transactional_id": None, "acks": 1, "timeout_ms": 10000,
            "topic_data": [{"name": topic, "partition_data": [
                {"index": 0, "records": bytes(b.build())}]}], **extra}


def log_end(srv, topic: str) -> int:
    """Partition 0's high watermark, as a SASL client asks it."""
    c = ck.Consumer({**sasl(srv, USER, PASSWORD), "group.id": f"{topic}-probe"})
    try:
        return c.get_watermark_offsets(ck.TopicPartition(topic, 0), timeout=10)[1]
    finally:
        c.close()


def sasl(srv, user: str, password: str) -> dict:
    return {"bootstrap.servers": srv.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN", "sasl.username": user, "sasl.password": password,
            "socket.timeout.ms": 10000}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    data = str(tmp_path_factory.mktemp("rp") / "data")
    r = users_add(data, USER, PASSWORD)
    assert r.returncode == 0, r.stderr
    r = users_add(data, RESERVED, "not-the-server-1")
    assert r.returncode == 1 and "is reserved for the server's own key" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    r = users_add(data, LOCAL_ROOT, "not-the-server-1")
    assert r.returncode == 1 and "are reserved for the local Unix users" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    # a users file that has the names anyway (by hand, or from an older kafkalite)
    path = credentials.users_file(data)
    users = credentials.read_users(path)
    for name in (RESERVED, LOCAL_ROOT):
        users[name] = {"PLAIN": credentials.make_credential("PLAIN", "not-the-server-1")}
    credentials.write_users(path, users)
    srv = ServerProcess(data, workers=1,
                        extra_args=["--kafka-security-protocol", "SASL_PLAINTEXT"]).start()
    try:
        yield srv
    finally:
        srv.stop()
        srv.kill()


def test_no_sasl_login_takes_the_servers_name(server):
    create_topic(server, "reserved")
    for name in (RESERVED, LOCAL_ROOT):
        err = first_client_error(sasl(server, name, "not-the-server-1"), "reserved")
        assert err.code() in (ck.KafkaError._AUTHENTICATION, ck.KafkaError._TRANSPORT,
                              ck.KafkaError._ALL_BROKERS_DOWN), (name, err)
        admin = AdminClient(sasl(server, USER, PASSWORD))
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            name, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"pw")])
        with pytest.raises(ck.KafkaException) as refused:
            futures[name].result(15)
        assert refused.value.args[0].code() == ck.KafkaError.UNACCEPTABLE_CREDENTIAL, name


def test_a_kafka_listener_produce_may_not_name_another_principal(server):
    create_topic(server, "rp")
    wire = login(server.kafka_bootstrap, USER, PASSWORD)
    meta = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": "rp"}],
                                              "allow_auto_topic_creation": False,
                                              "include_topic_authorized_operations": False})
    wire.close()
    leader = meta["topics"][0]["partitions"][0]["leader_id"]
    broker = next(b for b in meta["brokers"] if b["node_id"] == leader)
    address = f"{broker['host']}:{broker['port']}"

    wire = login(address, USER, PASSWORD)
    with pytest.raises(ConnectionError):        # refused: the broker closes the connection
        wire.request(ApiKey.PRODUCE, 9, produce_body("rp", b"as alice",
                                                     request_principal="User:alice"))
    wire.close()
    wire = login(address, USER, PASSWORD)
    answer = wire.request(ApiKey.PRODUCE, 9, produce_body("rp", b"as itself"))
    wire.close()
    assert answer["responses"][0]["partition_responses"][0]["error_code"] == 0
    # the refused record never landed: the accepted one is the log's first
    # and only record
    assert answer["responses"][0]["partition_responses"][0]["base_offset"] == 0
    assert [r[3] for r in native_read(server, "rp", 1, expect=1)] == [b"as itself"]
    assert log_end(server, "rp") == 1
