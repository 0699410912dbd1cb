"""Every HTTP port of a node keeps its connections alive (issue 69;
kafkalite/http_server.py): /metrics and /health, the web console, the
schema registry, the REST proxy and the Iceberg REST catalog answer
HTTP/1.1 requests one after another on one connection, as their clients
(Prometheus, confluent-kafka's registry client, pyiceberg) expect. Before,
each port spoke HTTP/1.0 and closed the connection after each answer, so
every request paid a TCP handshake and a thread of its own.
"""
from __future__ import annotations

import http.client
import urllib.parse

import pytest

PATHS = {"health": "", "metrics": "", "console": "/api/cluster", "schema_registry": "/subjects",
         "rest_proxy": "/v3/clusters", "iceberg_rest": "/v1/config"}


@pytest.mark.parametrize("port", sorted(PATHS))
def test_three_requests_are_answered_on_one_connection(server, port):
    url = urllib.parse.urlsplit(server.info[port].rstrip("/") + PATHS[port])
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=20)
    try:
        sockets = []
        for _ in range(3):
            conn.request("GET", url.path or "/")
            resp = conn.getresponse()
            resp.read()
            assert resp.status == 200, (port, resp.status)
            assert resp.version == 11 and not resp.will_close, (port, resp.getheaders())
            sockets.append(conn.sock.getsockname())
        assert len(set(sockets)) == 1       # one connection: the same local port each time
    finally:
        conn.close()
