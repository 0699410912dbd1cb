"""kafkalite.client.blocking_kafka_client: a blocking Kafka-protocol connection
(TLS, SASL PLAIN/SCRAM through scramp, ApiVersions negotiated) against a
real server's SASL_PLAINTEXT listener."""
from __future__ import annotations

import pytest

from harness import ServerProcess, run_cli

from kafkalite import errors
from kafkalite.client.blocking_kafka_client import BlockingKafkaClient, parse_servers
from kafkalite.errors import InvalidConfigurationError
from kafkalite.protocol import ApiKey

USER, PASSWORD = "gina", "gina-secret-1"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A server of the module's own: its Kafka listener wants SASL, with a user."""
    data = str(tmp_path_factory.mktemp("kc") / "data")
    r = run_cli("users", "add", USER, "--data-dir", data, stdin=PASSWORD.encode() + b"\n")
    assert r.returncode == 0, r.stderr
    srv = ServerProcess(data, workers=1, extra_args=[
        "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "PLAIN,SCRAM-SHA-512"]).start()
    try:
        yield srv
    finally:
        srv.stop()
        srv.kill()


def connect(srv, **conf) -> BlockingKafkaClient:
    host, port = parse_servers(srv.kafka_bootstrap)[0]
    return BlockingKafkaClient(host, port, {"security.protocol": "SASL_PLAINTEXT",
                                            "sasl.username": USER, "sasl.password": PASSWORD,
                                            **conf}, "test", 10)


def test_parse_servers():
    assert parse_servers("a:1, SASL_SSL://b:2,[::1]:3") == [("a", 1), ("b", 2), ("::1", 3)]
    for bad in ("", "a", "a:b"):
        with pytest.raises(InvalidConfigurationError):
            parse_servers(bad)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_logs_in_and_sends_in_the_highest_common_version(server, mechanism):
    conn = connect(server, **{"sasl.mechanism": mechanism})
    try:
        assert conn.version(ApiKey.METADATA) >= 9
        meta = conn.request(ApiKey.METADATA, {"topics": None,
                                              "allow_auto_topic_creation": False}, 10)
        assert meta["brokers"]
    finally:
        conn.close()


def test_refusals_name_the_broker(server):
    with pytest.raises(errors.SaslAuthenticationFailedError, match="authentication failed"):
        connect(server, **{"sasl.mechanism": "SCRAM-SHA-512", "sasl.password": "wrong"})
    with pytest.raises(errors.UnsupportedSaslMechanismError, match="SCRAM-SHA-256 refused"):
        connect(server, **{"sasl.mechanism": "SCRAM-SHA-256"})
    with pytest.raises(InvalidConfigurationError, match="GSSAPI"):
        connect(server)                          # librdkafka's default mechanism
    with pytest.raises(OSError):                 # TLS spoken to a plaintext listener
        connect(server, **{"security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN"})
