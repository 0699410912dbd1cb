"""TLS on the HTTP port (issue 40): with ``http_tls`` the port of
``/metrics``, ``/health`` and the web console speaks https with the server's
certificate, so Prometheus's ``tls_config`` (``ca_file``) and ``basic_auth``
scrape it as they would any exporter, and the login's password never
crosses the wire in clear.

Before, the port was plain HTTP whatever the listeners were: a Basic login
went in clear, and an https scrape failed.

One server for the module: SASL_PLAINTEXT listeners, the authorizer, the
HTTP port over TLS with a dev CA's certificate (kafkalite.tools.dev_certs).
"""
from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.request

import pytest

from harness import run_cli, scrape, secured_server, stop_server
from kafkalite.tools.dev_certs import make_certs

PASSWORDS = {"admin": "admin-secret"}


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("http-tls-certs")))


@pytest.fixture(scope="module")
def server(tmp_path_factory, certs):
    root = tmp_path_factory.mktemp("http-tls")
    tls = root / "tls.toml"
    tls.write_text(f'http_tls = true\nssl_certfile = "{certs["server"]}"\n'
                   f'ssl_keyfile = "{certs["server_key"]}"\n')
    srv = secured_server(root, PASSWORDS, ["--config", str(tls)])
    yield srv
    stop_server(srv)


def test_the_http_port_is_https_and_scrapes_with_the_ca_and_a_login(server, certs):
    assert server.info["metrics"].startswith("https://127.0.0.1:")
    assert server.info["health"].startswith("https://")
    text = scrape(server, "admin", PASSWORDS["admin"], cafile=certs["ca"])
    assert "kafka_server_" in text
    # a client that does not trust the CA stops at the certificate
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        scrape(server, "admin", PASSWORDS["admin"])
    # and plain HTTP gets no answer: the port speaks TLS only
    plain = server.info["metrics"].replace("https://", "http://")
    with pytest.raises((urllib.error.URLError, ConnectionError, http.client.HTTPException)):
        urllib.request.urlopen(plain, timeout=10).read()


def test_kafkalite_health_checks_the_certificate(server, certs):
    r = run_cli("health", "--data-dir", server.data_dir, "--http-cafile", certs["ca"])
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert r.stdout.startswith(b"kafkalite health: ok") and b"https://" in r.stdout
    r = run_cli("health", "--data-dir", server.data_dir)
    assert r.returncode == 1
    assert b"unreachable" in r.stdout and b"CERTIFICATE_VERIFY_FAILED" in r.stdout


def test_a_client_that_never_says_hello_holds_no_one_up(server, certs):
    """The handshake runs in the connection's own thread: a TCP connection
    that never starts TLS does not stop the next scrape."""
    host, port = server.info["metrics"].split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
    silent = [socket.create_connection((host, int(port))) for _ in range(5)]
    try:
        began = time.monotonic()
        assert "kafka_server_" in scrape(server, "admin", PASSWORDS["admin"], cafile=certs["ca"])
        assert time.monotonic() - began < 5.0
    finally:
        for s in silent:
            s.close()


def test_http_tls_without_a_certificate_is_refused_in_one_line(tmp_path):
    config = tmp_path / "server.toml"
    config.write_text("http_tls = true\n")
    r = run_cli("server", "--data-dir", str(tmp_path / "data"), "--config", str(config))
    assert r.returncode == 1
    lines = r.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and "http_tls needs ssl_certfile" in lines[0], lines
