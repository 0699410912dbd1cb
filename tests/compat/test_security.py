"""TLS and SASL on the Kafka listeners, with Kafka's own clients.

Real servers started with --kafka-security-protocol SSL, SASL_PLAINTEXT and
SASL_SSL; certificates made by the test (kafkalite.tools.dev_certs: a CA, a
server certificate for 127.0.0.1/localhost, an expired one); users added
with ``kafkalite users add``. confluent-kafka, kafka-python, aiokafka and
kcat produce and consume through every mechanism; wrong passwords, unknown
users, an expired certificate, a plaintext client on a TLS port and
requests before authentication are refused, and the next client on the same
server is served.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import time

import confluent_kafka as ck
import pytest
from compat_helpers import KafkaWire, add_user, create_topic, first_client_error

from harness import ServerProcess, child_env, run_cli, wait_until

from kafkalite.protocol import ApiKey, encode_request
from kafkalite.tools.dev_certs import make_certs

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
USER, PASSWORD = "alice", "alice-secret-1"
N = 50
SASL_CASES = [("SASL_PLAINTEXT", "PLAIN"), ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
              ("SASL_PLAINTEXT", "SCRAM-SHA-512"), ("SASL_SSL", "SCRAM-SHA-512"),
              ("SASL_SSL", "PLAIN")]
CASES = [("SSL", None)] + SASL_CASES

# the module's servers are set up once: its tests go to one xdist worker
pytestmark = pytest.mark.xdist_group("security")


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("certs")))


def _start(root, protocol: str, certs: dict, cert: str = "server", extra=()) -> ServerProcess:
    data = str(root / "data")
    args = ["--kafka-security-protocol", protocol, *extra]
    if protocol.endswith("SSL"):
        args += ["--ssl-certfile", certs[cert], "--ssl-keyfile", certs[cert + "_key"]]
    if protocol.startswith("SASL"):
        add_user(data, USER, PASSWORD)
    return ServerProcess(data, extra_args=args).start()


@pytest.fixture(scope="module")
def servers(tmp_path_factory, certs):
    """One server per security protocol, shared by the module."""
    started = {}
    try:
        for protocol in ("SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            started[protocol] = _start(tmp_path_factory.mktemp(protocol.lower()), protocol, certs)
        yield started
    finally:
        for srv in started.values():
            if srv.proc.poll() is None:
                srv.stop()
            srv.kill()


# ---- each client's configuration --------------------------------------------------------------

def ck_conf(srv, protocol, mechanism, certs, password=PASSWORD, user=USER, **extra) -> dict:
    conf = {"bootstrap.servers": srv.kafka_bootstrap, "security.protocol": protocol,
            "socket.timeout.ms": 10000, **extra}
    if protocol.endswith("SSL"):
        conf["ssl.ca.location"] = certs["ca"]
    if mechanism:
        conf.update({"sasl.mechanisms": mechanism, "sasl.username": user,
                     "sasl.password": password})
    return conf


def kp_conf(srv, protocol, mechanism, certs, password=PASSWORD, user=USER) -> dict:
    conf = {"bootstrap_servers": srv.kafka_bootstrap, "security_protocol": protocol,
            "request_timeout_ms": 15000}
    if protocol.endswith("SSL"):
        conf["ssl_cafile"] = certs["ca"]
    if mechanism:
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user,
                     "sasl_plain_password": password})
    return conf


def aio_conf(srv, protocol, mechanism, certs, password=PASSWORD, user=USER) -> dict:
    from aiokafka.helpers import create_ssl_context
    conf = {"bootstrap_servers": srv.kafka_bootstrap, "security_protocol": protocol,
            "request_timeout_ms": 15000}
    if protocol.endswith("SSL"):
        conf["ssl_context"] = create_ssl_context(cafile=certs["ca"])
    if mechanism:
        conf.update({"sasl_mechanism": mechanism, "sasl_plain_username": user,
                     "sasl_plain_password": password})
    return conf


def values(tag: str) -> list[bytes]:
    # 40 KiB values: a fetch answer spans several TLS records and file-region chunks.
    return [b"%s-%03d-" % (tag.encode(), i) + bytes([i % 251]) * (40 * 1024) for i in range(N)]


# ---- each client's round trip ----------------------------------------------------------------

def confluent_round_trip(srv, protocol, mechanism, certs, topic) -> list[bytes]:
    sent = values("ck")
    p = ck.Producer(ck_conf(srv, protocol, mechanism, certs, **{"linger.ms": 5}))
    for v in sent:
        p.produce(topic, v)
    assert p.flush(20) == 0
    c = ck.Consumer(ck_conf(srv, protocol, mechanism, certs, **{
        "group.id": f"g-{topic}", "auto.offset.reset": "earliest"}))
    got, deadline = [], time.monotonic() + 20
    try:
        c.subscribe([topic])
        while len(got) < N and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        c.close()
    return sent, got


def kafka_python_round_trip(srv, protocol, mechanism, certs, topic):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    sent = values("kp")
    p = KafkaProducer(**kp_conf(srv, protocol, mechanism, certs), max_request_size=4 << 20)
    try:
        for v in sent:
            p.send(topic, v, partition=0)
        p.flush(20)
    finally:
        p.close(5)
    c = KafkaConsumer(**kp_conf(srv, protocol, mechanism, certs), auto_offset_reset="earliest",
                      enable_auto_commit=False)
    got, deadline = [], time.monotonic() + 20
    try:
        c.assign([TopicPartition(topic, 0)])
        c.seek_to_beginning()
        while len(got) < N and time.monotonic() < deadline:
            for records in c.poll(500).values():
                got += [r.value for r in records]
    finally:
        c.close()
    return sent, got


def aiokafka_round_trip(srv, protocol, mechanism, certs, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    sent = values("aio")

    async def run():
        p = AIOKafkaProducer(**aio_conf(srv, protocol, mechanism, certs), max_request_size=4 << 20)
        await p.start()
        try:
            for v in sent:
                await p.send(topic, v, partition=0)
            await p.flush()
        finally:
            await p.stop()
        c = AIOKafkaConsumer(**aio_conf(srv, protocol, mechanism, certs),
                             auto_offset_reset="earliest", enable_auto_commit=False)
        await c.start()
        got = []
        try:
            c.assign([TopicPartition(topic, 0)])
            await c.seek_to_beginning(TopicPartition(topic, 0))
            deadline = time.monotonic() + 20
            while len(got) < N and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records]
        finally:
            await c.stop()
        return got

    return sent, asyncio.run(asyncio.wait_for(run(), 25))


CLIENTS = {"confluent": confluent_round_trip, "kafka-python": kafka_python_round_trip,
           "aiokafka": aiokafka_round_trip}


@pytest.mark.timeout(30)
@pytest.mark.parametrize("protocol,mechanism", CASES,
                         ids=[f"{p}-{m}" if m else p for p, m in CASES])
@pytest.mark.parametrize("client", list(CLIENTS))
def test_clients_produce_and_consume(servers, certs, topic_name, client, protocol, mechanism):
    srv = servers[protocol]
    create_topic(srv, topic_name)
    sent, got = CLIENTS[client](srv, protocol, mechanism, certs, topic_name)
    assert got == sent


def kcat(srv, protocol, mechanism, certs, *args, input=None, password=PASSWORD):
    conf = ["-X", f"security.protocol={protocol}"]
    if protocol.endswith("SSL"):
        conf += ["-X", f"ssl.ca.location={certs['ca']}"]
    if mechanism:
        conf += ["-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={USER}",
                 "-X", f"sasl.password={password}"]
    return subprocess.run([KCAT, "-b", srv.kafka_bootstrap, *conf, *args], input=input,
                          capture_output=True, text=True, timeout=25)


@pytest.mark.processes
@pytest.mark.skipif(KCAT is None, reason="kcat is not installed (tools/install-system-deps)")
@pytest.mark.timeout(30)
@pytest.mark.parametrize("protocol,mechanism", [("SSL", None), ("SASL_SSL", "SCRAM-SHA-256"),
                                                ("SASL_PLAINTEXT", "PLAIN")])
def test_kcat_produces_and_consumes(servers, certs, topic_name, protocol, mechanism):
    srv = servers[protocol]
    create_topic(srv, topic_name)
    lines = "".join(f"kcat-{i}\n" for i in range(N))
    r = kcat(srv, protocol, mechanism, certs, "-P", "-t", topic_name, "-p", "0", input=lines)
    assert r.returncode == 0, r.stderr
    r = kcat(srv, protocol, mechanism, certs, "-C", "-t", topic_name, "-o", "beginning", "-e",
             "-q")
    assert r.returncode == 0, r.stderr
    assert r.stdout == lines


# ---- refusals: each is answered, and the next client is served ---------------------------------

def still_serves(srv, protocol, mechanism, certs, topic):
    sent, got = confluent_round_trip(srv, protocol, mechanism, certs, topic)
    assert got == sent


@pytest.mark.timeout(30)
@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_wrong_password_and_unknown_user_are_authentication_errors(servers, certs, topic_name,
                                                                   mechanism):
    srv = servers["SASL_PLAINTEXT"]
    create_topic(srv, topic_name)
    for user, password in ((USER, "wrong-password"), ("mallory", PASSWORD)):
        err = first_client_error(
            ck_conf(srv, "SASL_PLAINTEXT", mechanism, certs, password=password, user=user),
            topic_name)
        assert err.code() == ck.KafkaError._AUTHENTICATION, err
        assert "Invalid username or password" in err.str()
    still_serves(srv, "SASL_PLAINTEXT", mechanism, certs, topic_name)


@pytest.mark.timeout(30)
def test_wrong_password_kafka_python_and_aiokafka(servers, certs, topic_name, caplog):
    """kafka-python gives up bootstrapping and logs the cause (it does not
    raise it from bootstrap); aiokafka's connection raises it: Kafka's
    SASL_AUTHENTICATION_FAILED either way."""
    import aiokafka
    import kafka
    srv = servers["SASL_SSL"]
    create_topic(srv, topic_name)
    caplog.set_level("INFO")
    with pytest.raises(kafka.errors.KafkaTimeoutError):
        kafka.KafkaProducer(**{**kp_conf(srv, "SASL_SSL", "SCRAM-SHA-256", certs, password="wrong"),
                               "bootstrap_timeout_ms": 3000})
    assert any("SaslAuthenticationFailed" in r.getMessage() and r.name.startswith("kafka")
               for r in caplog.records), [r.getMessage() for r in caplog.records][:20]

    # aiokafka's connection, as its clients open one to every broker: the
    # SASL exchange raises the broker's error.
    conf = aio_conf(srv, "SASL_SSL", "SCRAM-SHA-512", certs, password="wrong")
    host, port = conf.pop("bootstrap_servers").rsplit(":", 1)
    with pytest.raises(aiokafka.errors.KafkaError) as info:
        asyncio.run(asyncio.wait_for(aiokafka.conn.create_conn(host, int(port), **conf), 20))
    assert isinstance(info.value, (aiokafka.errors.SaslAuthenticationFailed,
                                   aiokafka.errors.AuthenticationFailedError)), repr(info.value)
    assert "Invalid username or password" in str(info.value), repr(info.value)
    still_serves(srv, "SASL_SSL", "SCRAM-SHA-512", certs, topic_name)


def test_users_added_to_a_running_server_can_log_in(servers, certs, topic_name):
    srv = servers["SASL_PLAINTEXT"]
    create_topic(srv, topic_name)
    r = run_cli("users", "add", "bob", "--mechanism", "SCRAM-SHA-256", "--password", "bob-pw",
                "--data-dir", srv.data_dir)
    assert r.returncode == 0, r.stderr.decode()
    conf = ck_conf(srv, "SASL_PLAINTEXT", "SCRAM-SHA-256", certs, user="bob", password="bob-pw")
    p = ck.Producer(conf)
    p.produce(topic_name, b"from bob")
    assert p.flush(15) == 0
    # bob has no PLAIN credential: PLAIN with his password fails.
    err = first_client_error({**conf, "sasl.mechanisms": "PLAIN"}, topic_name)
    assert err.code() == ck.KafkaError._AUTHENTICATION


def test_users_file_keeps_no_password_and_users_can_be_listed_and_deleted(servers, certs,
                                                                          topic_name):
    srv = servers["SASL_PLAINTEXT"]
    path = os.path.join(srv.data_dir, "sasl-users.json")
    text = open(path).read()
    assert PASSWORD not in text and os.stat(path).st_mode & 0o077 == 0
    assert set(json.loads(text)["users"][USER]) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

    def users(*args):
        r = run_cli("users", *args, "--data-dir", srv.data_dir)
        assert r.returncode == 0, r.stderr.decode()
        return r.stdout.decode()
    users("add", "carol", "--mechanism", "PLAIN", "--password", "carol-pw")
    assert "carol\tPLAIN" in users("list")
    create_topic(srv, topic_name)
    conf = ck_conf(srv, "SASL_PLAINTEXT", "PLAIN", certs, user="carol", password="carol-pw")
    p = ck.Producer(conf)
    p.produce(topic_name, b"from carol")
    assert p.flush(15) == 0
    users("delete", "carol")
    assert "carol" not in users("list")
    err = first_client_error(conf, topic_name)      # a deleted user can no longer log in
    assert err.code() == ck.KafkaError._AUTHENTICATION


@pytest.mark.processes
@pytest.mark.timeout(30)
def test_expired_server_certificate_is_refused_by_clients(tmp_path, certs, topic_name):
    import kafka
    srv = _start(tmp_path, "SSL", certs, cert="expired")
    try:
        err = first_client_error(ck_conf(srv, "SSL", None, certs), topic_name)
        # librdkafka files the same handshake failure under _SSL or, when it
        # meets it on its read path, _TRANSPORT (both seen, in full runs on
        # a loaded machine); its message is what says why
        assert err.code() in (ck.KafkaError._SSL, ck.KafkaError._TRANSPORT), err
        assert "certificate verify failed" in err.str(), err
        with pytest.raises(kafka.errors.KafkaTimeoutError):
            kafka.KafkaProducer(**{**kp_conf(srv, "SSL", None, certs),
                                   "bootstrap_timeout_ms": 2000})
        context = ssl.create_default_context(cafile=certs["ca"])
        with pytest.raises(ssl.SSLCertVerificationError, match="expired"):
            with socket.create_connection(srv.kafka_bootstrap.rsplit(":", 1), timeout=10) as s:
                context.wrap_socket(s, server_hostname="127.0.0.1")
        # A client that does not check the certificate is still served.
        p = ck.Producer(ck_conf(srv, "SSL", None, certs, **{
            "enable.ssl.certificate.verification": False}))
        p.produce(topic_name, b"unchecked")
        assert p.flush(15) == 0
    finally:
        srv.stop()
        srv.kill()


@pytest.mark.timeout(30)
def test_plaintext_client_on_a_tls_port_is_closed_and_others_are_served(servers, certs,
                                                                         topic_name):
    srv = servers["SSL"]
    create_topic(srv, topic_name)
    before = srv.output().count("TLS handshake failed")
    wire = KafkaWire(srv.kafka_bootstrap)
    try:
        wire.send_frame(encode_request(ApiKey.API_VERSIONS, 3, 1, "plain", {
            "client_software_name": "t", "client_software_version": "1"}))
        with pytest.raises((ConnectionError, OSError)):
            wire.recv_frame()
    finally:
        wire.close()
    err = first_client_error(ck_conf(srv, "PLAINTEXT", None, certs), topic_name)
    assert err.code() in (ck.KafkaError._TRANSPORT, ck.KafkaError._ALL_BROKERS_DOWN), err
    still_serves(srv, "SSL", None, certs, topic_name)
    wait_until(lambda: srv.output().count("TLS handshake failed") > before, 5,
               "the failed handshake in the server's log")


@pytest.mark.timeout(30)
@pytest.mark.parametrize("api_key,body", [
    (ApiKey.METADATA, {"topics": None}),
    (ApiKey.PRODUCE, {"acks": -1, "timeout_ms": 1000, "topic_data": []})],
    ids=["metadata", "produce"])
def test_sasl_listener_closes_a_connection_that_skips_authentication(servers, certs, api_key,
                                                                      body):
    srv = servers["SASL_PLAINTEXT"]
    addresses = [srv.kafka_bootstrap] + [f"127.0.0.1:{b['port']}"
                                         for b in srv.refresh()["kafka_brokers"]]
    for address in addresses:    # the supervisor's listener and every worker's
        wire = KafkaWire(address)
        try:
            versions = wire.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                             "client_software_version": "1"})
            keys = {k["api_key"] for k in versions["api_keys"]}
            assert {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} <= keys
            version = 12 if api_key == ApiKey.METADATA else 9
            wire.send_frame(encode_request(api_key, version, 2, "sneaky", body))
            with pytest.raises((ConnectionError, OSError)):
                wire.recv_frame()
        finally:
            wire.close()
    still_serves(srv, "SASL_PLAINTEXT", "SCRAM-SHA-256", certs, f"t-after-skip-{int(api_key)}")


def test_plaintext_listener_is_unchanged_by_default(server, topic_name):
    """The embedded default needs no certificates or users: PLAINTEXT, and
    SaslHandshake is not advertised (a client cannot try to log in)."""
    wire = KafkaWire(server.kafka_bootstrap)
    try:
        versions = wire.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                         "client_software_version": "1"})
        assert ApiKey.SASL_HANDSHAKE not in {k["api_key"] for k in versions["api_keys"]}
        assert wire.request(ApiKey.METADATA, 12, {"topics": None})["controller_id"] in (0, 1)
    finally:
        wire.close()
    assert server.refresh()["kafka.security.protocol"] == "PLAINTEXT"


@pytest.mark.processes
@pytest.mark.timeout(30)
def test_mutual_tls_requires_a_client_certificate_from_the_ca(tmp_path, certs, topic_name):
    srv = _start(tmp_path, "SSL", certs, extra=["--ssl-client-auth", "required",
                                                "--ssl-cafile", certs["ca"]])
    try:
        create_topic(srv, topic_name)
        err = first_client_error(ck_conf(srv, "SSL", None, certs), topic_name)
        assert err.code() in (ck.KafkaError._SSL, ck.KafkaError._TRANSPORT,
                              ck.KafkaError._ALL_BROKERS_DOWN), err
        conf = ck_conf(srv, "SSL", None, certs, **{"ssl.certificate.location": certs["client"],
                                                   "ssl.key.location": certs["client_key"]})
        p = ck.Producer(conf)
        p.produce(topic_name, b"with a client certificate")
        assert p.flush(15) == 0
    finally:
        srv.stop()
        srv.kill()


@pytest.mark.processes
def test_server_refuses_to_start_with_tls_and_no_certificate(tmp_path):
    r = subprocess.run([sys.executable, "-m", "kafkalite", "server", "--data-dir",
                        str(tmp_path / "data"), "--kafka-security-protocol", "SASL_SSL"],
                       capture_output=True, text=True, env=child_env(), timeout=60)
    assert r.returncode != 0
    assert "needs ssl_certfile" in r.stderr


@pytest.mark.parametrize("password,served", [(PASSWORD, True), ("wrong", False)])
def test_sasl_handshake_v0_takes_a_raw_plain_token(servers, password, served):
    """SaslHandshake v0 (before KIP-152): the token follows as a bare
    size-prefixed frame, answered by one (empty for PLAIN); a wrong password
    closes the connection, raw SASL having no error frame."""
    srv = servers["SASL_PLAINTEXT"]
    wire = KafkaWire(srv.kafka_bootstrap)
    try:
        assert wire.request(ApiKey.SASL_HANDSHAKE, 0, {"mechanism": "PLAIN"})["error_code"] == 0
        wire.send_frame(f"\0{USER}\0{password}".encode())
        if served:
            assert wire.recv_frame() == b""
            assert wire.request(ApiKey.METADATA, 12, {"topics": None})["controller_id"] in (0, 1)
        else:
            with pytest.raises((ConnectionError, OSError)):
                wire.recv_frame()
    finally:
        wire.close()


def test_unknown_mechanism_is_answered_with_the_enabled_ones_then_closed(servers):
    srv = servers["SASL_PLAINTEXT"]
    wire = KafkaWire(srv.kafka_bootstrap)
    try:
        resp = wire.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "GSSAPI"})
        assert resp["error_code"] == 33     # UNSUPPORTED_SASL_MECHANISM
        assert resp["mechanisms"] == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        with pytest.raises((ConnectionError, OSError)):
            wire.request(ApiKey.METADATA, 12, {"topics": None})
    finally:
        wire.close()
