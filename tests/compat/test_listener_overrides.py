"""Per-listener TLS and SASL settings (``listener_overrides``, Kafka's
``listener.name.<listener>.*``), with confluent-kafka.

One real server with three listeners from one config file: OPEN (TLS, no
client certificate asked), MTLS (TLS, client certificates required through
``listener.name.mtls.ssl.client.auth``) and SCRAM (SASL_PLAINTEXT that
allows only SCRAM-SHA-512, through a ``[listener_overrides.SCRAM]`` table,
where the server-wide setting allows PLAIN too). Every broker process opens
all three with its own settings, so a client is held to its listener's
rules by the partition leaders and the coordinators alike.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import confluent_kafka as ck
import pytest
from compat_helpers import add_user, first_client_error

from harness import ServerProcess, child_env

from kafkalite.tools.dev_certs import make_certs

USER, PASSWORD = "erin", "erin-secret-1"

# the module's server is set up once: its tests go to one xdist worker
pytestmark = pytest.mark.xdist_group("listener_overrides")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("overrides")
    certs = make_certs(str(root / "certs"))
    data = str(root / "data")
    add_user(data, USER, PASSWORD)
    config = root / "server.toml"
    config.write_text(
        'listeners = "OPEN://127.0.0.1:0,MTLS://127.0.0.1:0,SCRAM://127.0.0.1:0"\n'
        '"listener.security.protocol.map" = "OPEN:SSL,MTLS:SSL,SCRAM:SASL_PLAINTEXT"\n'
        f'ssl_certfile = "{certs["server"]}"\n'
        f'ssl_keyfile = "{certs["server_key"]}"\n'
        '"listener.name.mtls.ssl.client.auth" = "required"\n'
        f'"listener.name.mtls.ssl_cafile" = "{certs["ca"]}"\n'
        '[listener_overrides.SCRAM]\n'
        'sasl_enabled_mechanisms = "SCRAM-SHA-512"\n')
    srv = ServerProcess(data, workers=2, extra_args=["--config", str(config)]).start()
    srv.certs = certs
    try:
        yield srv
    finally:
        if srv.proc.poll() is None:
            srv.stop()
        srv.kill()


def bootstrap(srv, listener: str) -> str:
    with open(os.path.join(srv.data_dir, "server.json")) as f:
        return json.load(f)["kafka_listeners"][listener]["bootstrap.servers"]


def round_trip(conf: dict, topic: str) -> None:
    """Produce 20 records and read them back through ``conf``'s listener."""
    p = ck.Producer({**conf, "message.timeout.ms": 15000})
    for i in range(20):
        p.produce(topic, b"%d" % i)
    assert p.flush(20) == 0
    c = ck.Consumer({**conf, "group.id": f"g-{topic}", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    got, deadline = [], time.monotonic() + 30
    while len(got) < 20 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [b"%d" % i for i in range(20)]


def tls(srv, listener: str, **extra) -> dict:
    return {"bootstrap.servers": bootstrap(srv, listener), "security.protocol": "SSL",
            "ssl.ca.location": srv.certs["ca"], "socket.timeout.ms": 10000, **extra}


def scram(srv, mechanism: str) -> dict:
    return {"bootstrap.servers": bootstrap(srv, "SCRAM"), "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": mechanism, "sasl.username": USER, "sasl.password": PASSWORD,
            "socket.timeout.ms": 10000}


@pytest.mark.timeout(120)
def test_only_the_mtls_listener_asks_for_a_client_certificate(server):
    round_trip(tls(server, "OPEN"), "open-topic")       # no certificate: served
    err = first_client_error(tls(server, "MTLS"), "mtls-topic")
    assert err.code() in (ck.KafkaError._SSL, ck.KafkaError._TRANSPORT,
                          ck.KafkaError._ALL_BROKERS_DOWN), err
    round_trip(tls(server, "MTLS", **{"ssl.certificate.location": server.certs["client"],
                                      "ssl.key.location": server.certs["client_key"]}),
               "mtls-topic")


@pytest.mark.timeout(120)
def test_the_scram_listener_allows_only_its_own_mechanism(server):
    err = first_client_error(scram(server, "PLAIN"), "scram-topic")
    assert err.code() in (ck.KafkaError._AUTHENTICATION, ck.KafkaError._TRANSPORT,
                          ck.KafkaError._ALL_BROKERS_DOWN), err
    assert "PLAIN" in err.str() or "mechanism" in err.str().lower(), err
    round_trip(scram(server, "SCRAM-SHA-512"), "scram-topic")


@pytest.mark.processes
def test_a_bad_override_is_one_line_and_exit_1(tmp_path):
    config = tmp_path / "server.toml"
    config.write_text('listeners = "A://127.0.0.1:0"\n'
                      '"listener.security.protocol.map" = "A:PLAINTEXT"\n'
                      '"listener.name.b.ssl.client.auth" = "required"\n')
    r = subprocess.run([sys.executable, "-m", "kafkalite", "server", "--config", str(config),
                        "--data-dir", str(tmp_path / "data")],
                       capture_output=True, text=True, env=child_env(), timeout=60)
    assert r.returncode == 1
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "names listener B, which is not one of" in lines[0], r.stderr
