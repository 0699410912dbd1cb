"""v2 consumer instances' idle timer and the server's stop
(kafkalite/rest_proxy/consumers.py): an instance nothing used for
``rest_proxy_consumer_instance_timeout_ms`` is closed (later calls 40403)
and leaves its group; one in use lives on; a server stopped with an
instance open exits 0 at once (its close once waited out the consumer's
request timeout against the stopped coordinator).

A server of the module's own: a 1 s instance timeout.
"""
from __future__ import annotations

import time

import pytest

from harness import ServerProcess, stop_server, wait_until
from proxy_client import V2, V2_BINARY, call

TIMEOUT_MS = 1000


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("proxy-idle")
    config = root / "server.toml"
    config.write_text(f"rest_proxy_consumer_instance_timeout_ms = {TIMEOUT_MS}\n")
    srv = ServerProcess(str(root / "data"), extra_args=["--config", str(config)]).start()
    url = srv.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    assert call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                {"topic_name": "idle", "partitions_count": 1})[0] == 201
    yield srv
    stop_server(srv)


def start_instance(url, group, name):
    assert call(f"{url}/consumers/{group}", "POST", {"name": name}, content_type=V2)[0] == 200
    assert call(f"{url}/consumers/{group}/instances/{name}/subscription", "POST",
                {"topics": ["idle"]}, content_type=V2)[0] == 204
    assert call(f"{url}/consumers/{group}/instances/{name}/records?timeout=500",
                accept=V2_BINARY)[0] == 200      # joined its group


def test_an_idle_instance_is_closed_and_leaves_its_group(server):
    url = server.info["rest_proxy"]
    cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
    start_instance(url, "g-idle", "sleepy")
    started = time.monotonic()
    # watched through v3 (a call on the instance itself would keep it alive)
    wait_until(lambda: call(f"{url}/v3/clusters/{cluster}/consumer-groups/g-idle")[1]
               .get("state") == "EMPTY", timeout=10,
               message="the idle instance is still a member of its group")
    assert time.monotonic() - started >= TIMEOUT_MS / 1000 * 0.5
    assert call(f"{url}/consumers/g-idle/instances/sleepy/records", accept=V2_BINARY)[:2] == \
        (404, {"error_code": 40403, "message": "Consumer instance not found."})


def test_an_instance_in_use_lives_on(server):
    url = server.info["rest_proxy"]
    start_instance(url, "g-busy", "busy")
    until = time.monotonic() + 3 * TIMEOUT_MS / 1000
    while time.monotonic() < until:
        status, _, _ = call(f"{url}/consumers/g-busy/instances/busy/records?timeout=200",
                            accept=V2_BINARY)
        assert status == 200
    assert call(f"{url}/consumers/g-busy/instances/busy", "DELETE")[0] == 204


@pytest.mark.processes
def test_a_server_stops_at_once_with_an_instance_open(tmp_path):
    srv = ServerProcess(str(tmp_path / "data")).start()
    try:
        url = srv.info["rest_proxy"]
        cluster = call(f"{url}/v3/clusters")[1]["data"][0]["cluster_id"]
        assert call(f"{url}/v3/clusters/{cluster}/topics", "POST",
                    {"topic_name": "idle", "partitions_count": 1})[0] == 201
        start_instance(url, "g-open", "open")
        started = time.monotonic()
        assert srv.stop(timeout=15) == 0
        assert time.monotonic() - started < 10
    finally:
        srv.kill()
