"""A consumer's link that the broker closed as idle is made again.

A worker closes a connection idle for ``connections.max.idle.ms`` (10
minutes by default), as Kafka's broker does. A consumer that only asks
ListOffsets now and then (the schema registry's reader of ``_schemas``
asks for the partition's end before each catch-up) met the closed link at
its next call: the write failed with a broken pipe, and every later call
failed on the same dead link, so after a quiet 10 minutes every schema
registration answered 500 until the server restarted (found in a suite run
whose shared server outlived the bound). Here a server with a 1 s bound,
one module of its own.
"""
from __future__ import annotations

import json
import select
import socket
import time
import urllib.request

import pytest

from harness import ServerProcess, wait_until
from kafkalite.client import Consumer, Producer, TopicPartition

IDLE_MS = 1000
TOPIC = "idle-links"

pytestmark = pytest.mark.xdist_group("client_idle_links")


@pytest.fixture(scope="module")
def idle_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("idle-links")
    config = root / "server.toml"
    config.write_text(f'"connections.max.idle.ms" = {IDLE_MS}\nworkers = 1\n')
    srv = ServerProcess(str(root / "data"), extra_args=["--config", str(config)]).start()
    yield srv
    srv.stop()
    srv.kill()


def closed_by_peer(sock: socket.socket) -> bool:
    """The other end closed: readable, and a peek reads end of file; or the
    client already closed its end, having seen the close itself (its fd
    is then -1, which select refuses)."""
    if sock.fileno() == -1:
        return True
    if not select.select([sock], [], [], 0)[0]:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_list_offsets_after_the_broker_closed_the_idle_link(idle_server):
    p = Producer(idle_server.config())
    for i in range(3):
        p.produce(TOPIC, value=b"v%d" % i, partition=0)
    assert p.flush(10) == 0
    p.close()
    c = Consumer(idle_server.config(**{"group.id": "idle-links", "enable.auto.commit": False}))
    try:
        tp = TopicPartition(TOPIC, 0)
        assert c.get_watermark_offsets(tp) == (0, 3)
        links = [link for link in c._conns.values() if hasattr(link, "sock")]
        assert links, "the consumer's ListOffsets went over a socket link"
        # the worker closes it once it has been idle for the bound
        wait_until(lambda: all(closed_by_peer(link.sock) for link in links), timeout=15,
                   interval=0.1)
        assert c.get_watermark_offsets(tp) == (0, 3)
        assert c.get_watermark_offsets(tp) == (0, 3)
    finally:
        c.close()


def test_a_schema_registration_after_the_registrys_links_went_idle(idle_server):
    url = idle_server.info["schema_registry"]

    def register(n: int) -> dict:
        schema = {"type": "record", "name": f"R{n}", "fields": [{"name": "a", "type": "int"}]}
        req = urllib.request.Request(
            f"{url}/subjects/idle-{n}-value/versions",
            data=json.dumps({"schema": json.dumps(schema)}).encode(),
            headers={"Content-Type": "application/vnd.schemaregistry.v1+json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            return {"status": e.code, **json.loads(e.read())}

    first = register(1)
    assert "id" in first, first
    # nothing asked for three times the bound: the time passing is the
    # condition (the registry's links are inside the server, out of sight),
    # after which the worker has closed each of them
    time.sleep(3 * IDLE_MS / 1000)
    second = register(2)
    assert second.get("id", 0) > first["id"], second
    third = register(3)
    assert third.get("id", 0) > second["id"], third
