"""Fuzz the web console's JSON API (webconsole/app.py, api.py) on a server
with security on, where it sits behind the HTTP login
(server/http_login.py): every route the app's docstring lists, called with
fuzzed path parts, query parameters, bodies, content types and methods,
logged in as a super user with the console's header on changes, and now
and then with a fuzzed Authorization header.

Every answer must be a 2xx, a 302 (the bare mount), a 4xx with an error
(JSON ``{"error": ...}`` from the app; text from the login), or a 503 the
app documents -- never a 500 -- and come within ANSWER_BOUND_S; a fuzzed
login is answered 401. Afterwards the node runs the same processes with
its memory back, and the console still answers.

Requests go over a plain socket (HTTP/1.0, one request a connection), so
that a path, header or body may be any bytes. KAFKALITE_FUZZ_INPUTS sets
the size (tests/soak.py; one request per 10 inputs, 2,000 at the default,
about 10 s here); KAFKALITE_FUZZ_SEED replays a run. A module server of
its own: SASL_PLAINTEXT listeners, the authorizer on, User:admin a super
user, the console on.
"""
from __future__ import annotations

import base64
import json
import re
import socket
import time
import urllib.parse

import pytest

from fuzzing import INPUTS, Survival, fuzz_rng
from harness import ServerProcess, create, run_cli
from kafkalite.client import Consumer, Producer, TopicPartition
from kafkalite.webconsole import app as console_app

ADMIN, PASSWORD = "admin", "admin-secret"
REQUESTS = max(INPUTS // 10, 100)
# the longest an answer may take: a record read's budget (api.READ_BUDGET_S)
# plus a client call's timeout (10 s), and slack for a loaded machine
ANSWER_BOUND_S = 25.0
# the routes as app.py's docstring lists them: "GET /api/topics/<t>  ..."
ROUTES = [(m, p) for m, p in re.findall(r"^\s+(GET|POST|DELETE)\s+(/\S*)", console_app.__doc__,
                                        re.MULTILINE)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("console")
    (root / "data").mkdir()
    r = run_cli("users", "add", ADMIN, "--mechanism", "SCRAM-SHA-256", "--data-dir",
                str(root / "data"), stdin=PASSWORD.encode() + b"\n")
    assert r.returncode == 0, r.stderr.decode()
    config = root / "server.toml"
    config.write_text(f'authorizer_enabled = true\nsuper_users = "User:{ADMIN}"\n')
    srv = ServerProcess(str(root / "data"), extra_args=[
        "--config", str(config), "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--console"]).start()
    try:
        yield srv
    finally:
        if srv.proc.poll() is None:
            srv.stop()
        srv.kill()


def basic(user: str, password: str) -> bytes:
    return b"Basic " + base64.b64encode(f"{user}:{password}".encode())


LOGIN = basic(ADMIN, PASSWORD)


def http(srv, method: bytes, target: bytes, headers: dict | None = None,
         body: bytes | None = None) -> tuple[int, dict, bytes, float]:
    """(status, headers, body, seconds) of one request, sent as these bytes."""
    host, port = srv.info["console"].split("/")[2].rsplit(":", 1)
    head = [method + b" " + target + b" HTTP/1.0", b"Host: " + f"{host}:{port}".encode()]
    for name, value in (headers or {}).items():
        head.append(name + b": " + value)
    if body is not None and not any(n.lower() == b"content-length" for n in headers or {}):
        head.append(b"Content-Length: %d" % len(body))
    began = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=ANSWER_BOUND_S + 5) as s:
        s.sendall(b"\r\n".join(head) + b"\r\n\r\n" + (body or b""))
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    took = time.monotonic() - began
    top, _, payload = answer.partition(b"\r\n\r\n")
    lines = top.split(b"\r\n")
    assert lines and lines[0].startswith(b"HTTP/"), f"not an HTTP answer: {answer[:200]!r}"
    status = int(lines[0].split()[1])
    fields = {}
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        fields[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
    return status, fields, payload, took


def api_target(path: str, query: dict | None = None) -> bytes:
    target = "/console" + path
    if query:
        target += "?" + urllib.parse.urlencode(query)
    return target.encode()


@pytest.fixture(scope="module")
def names(server, tmp_path_factory):
    """A topic with records, a group with committed offsets on it, and a
    topic whose configs the fuzz may change."""
    topic = "console-fuzz-records"
    create(server, topic, 2)
    create(server, "console-fuzz-configs", 1)
    p = Producer(server.config())
    for i in range(50):
        p.produce(topic, b"value-%d" % i, key=b"key-%d" % (i % 5), partition=i % 2)
    assert p.flush(30) == 0
    p.close()
    c = Consumer(server.config(**{"group.id": "console-fuzz-group",
                                  "enable.auto.commit": False}))
    c.commit(offsets=[TopicPartition(topic, 0, 3), TopicPartition(topic, 1, 4)],
             asynchronous=False)
    c.close()
    return {"topic": topic, "configs_topic": "console-fuzz-configs",
            "group": "console-fuzz-group"}


def valid_call(route, names) -> tuple[str, str, dict, dict | None]:
    """(method, path, query, body) of a call of ``route`` that succeeds."""
    method, path = route
    path = path.replace("<t>", names["topic"]).replace("<g>", names["group"])
    if method == "POST" and path.endswith("/configs"):
        path = path.replace(names["topic"], names["configs_topic"])
        return method, path, {}, {"set": {"retention.ms": "3600000"}}
    if method == "POST" and path == "/api/topics":
        return method, path, {}, {"name": "console-fuzz-created", "partitions": 1}
    if method == "DELETE":
        return method, path.replace(names["topic"], "console-fuzz-created"), {}, None
    if path.endswith("/reset-offsets"):
        return method, path, {}, {"spec": "to-earliest", "dry_run": True}
    if path.endswith("/messages"):
        return method, path, {"limit": "5", "partition": "0"}, None
    return method, path, {}, None


def check(status: int, fields: dict, payload: bytes, took: float, what) -> None:
    assert status != 500 and (200 <= status < 500 or status == 503), \
        f"{what}: {status} {payload[:500]!r}"
    assert took < ANSWER_BOUND_S, f"{what}: answered after {took:.1f} s"
    if status >= 400 and fields.get("content-type", "").startswith("application/json"):
        assert "error" in json.loads(payload), f"{what}: {payload[:300]!r}"


def test_every_documented_route_answers_a_valid_call(server, names):
    assert len(ROUTES) >= 13, ROUTES
    for method, path in sorted(ROUTES, key=lambda r: r[0] == "DELETE"):   # created, then deleted
        method, path, query, body = valid_call((method, path), names)
        headers = {b"Authorization": LOGIN, b"X-Kafkalite-Console": b"1"}
        if body is not None:
            headers[b"Content-Type"] = b"application/json"
        status, fields, payload, took = http(
            server, method.encode(), api_target(path, query), headers,
            None if body is None else json.dumps(body).encode())
        assert status in (200, 302), (method, path, status, payload[:300])


def call(srv, method: str, path: str, body: bytes) -> tuple[int, dict]:
    status, _, payload, _ = http(srv, method.encode(), api_target(path), {
        b"Authorization": LOGIN, b"X-Kafkalite-Console": b"1",
        b"Content-Type": b"application/json"}, body)
    return status, json.loads(payload)


def test_a_reset_of_offsets_without_a_usable_value_is_a_bad_request(server, names):
    """Found by the fuzz: by-duration took any value (None, a list) to
    int(), and from-file (the command line's file of offsets) iterated
    whatever value came; both answered 500."""
    path = f"/api/groups/{names['group']}/reset-offsets"
    for body in ({"spec": "by-duration"}, {"spec": "by-duration", "value": [1]},
                 {"spec": "from-file", "value": 5}, {"spec": "from-file"}):
        status, answer = call(server, "POST", path, json.dumps({**body, "dry_run": True}).encode())
        assert status == 400 and answer["error"], (body, status, answer)


def test_a_number_past_a_floats_range_is_a_bad_request(server, names):
    """Found by the fuzz: JSON's 1e400 is a float infinity, which int()
    refuses with an OverflowError; the API answered 500."""
    status, answer = call(server, "POST", "/api/topics",
                          b'{"name": "console-fuzz-inf", "partitions": 1e400}')
    assert status == 400 and "partitions" in answer["error"], (status, answer)
    status, answer = call(server, "POST", f"/api/groups/{names['group']}/reset-offsets",
                          b'{"spec": "to-offset", "value": 1e400, "dry_run": true}')
    assert status == 400 and "value" in answer["error"], (status, answer)


def test_a_request_that_stops_short_is_let_go_within_the_bound(server, names):
    """Found by the fuzz: a body shorter than its Content-Length (or a
    connection that never sends its request) held an HTTP thread of the
    supervisor, and the connection, for good; now a read waits at most
    metrics.HTTP_IO_TIMEOUT_S and the request is answered 400."""
    host, port = server.info["console"].split("/")[2].rsplit(":", 1)
    head = (b"POST /console/api/topics HTTP/1.0\r\nHost: " + f"{host}:{port}".encode() +
            b"\r\nAuthorization: " + LOGIN + b"\r\nX-Kafkalite-Console: 1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n")
    began = time.monotonic()
    with socket.create_connection((host, int(port)), timeout=ANSWER_BOUND_S) as short, \
            socket.create_connection((host, int(port)), timeout=ANSWER_BOUND_S) as silent:
        short.sendall(head + b'{"name": ')
        answer = b""
        try:
            while chunk := short.recv(65536):
                answer += chunk
        except TimeoutError:
            raise AssertionError(f"no answer in {ANSWER_BOUND_S} s") from None
        assert answer.startswith(b"HTTP/1.0 400") and b"Content-Length" in answer, answer[:300]
        try:
            assert silent.recv(1) == b"", "a silent connection closed"
        except TimeoutError:
            raise AssertionError(f"a silent connection held {ANSWER_BOUND_S} s") from None
    assert time.monotonic() - began < ANSWER_BOUND_S
