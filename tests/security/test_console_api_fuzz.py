"""Fuzz the web console's JSON API (webconsole/app.py, api.py) on a server
with security on, where it sits behind the HTTP login
(server/auth/http_login.py): every route the app's docstring lists, called with
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
from harness import create, secured_server, stop_server
from kafkalite.client import Consumer, Producer, TopicPartition
from kafkalite.webconsole import app as console_app

ADMIN, PASSWORD = "admin", "admin-secret"
REQUESTS = max(INPUTS // 10, 100)
# the longest an answer may take: a record read's budget (api.READ_BUDGET_S)
# plus a client call's timeout (10 s), and slack for a loaded machine
ANSWER_BOUND_S = 25.0
# the routes as app.py's docstring lists them: "GET /api/topics/<t>  ..."
ROUTES = [(m, p.split("?")[0]) for m, p in re.findall(r"^\s+(GET|POST|DELETE)\s+(/\S*)",
                                                      console_app.__doc__, re.MULTILINE)]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("console"), {ADMIN: PASSWORD}, ["--console"])
    try:
        yield srv
    finally:
        stop_server(srv)


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
def names(server):
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
    """Met writing the fuzz (whose every request is whole): a body shorter
    than its Content-Length (or a connection that never sends its request)
    held an HTTP thread of the supervisor, and the connection, for good;
    now a read waits at most
    http_server.HTTP_IO_TIMEOUT_S and the request is answered 400."""
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
        assert answer.split(b" ", 2)[1] == b"400" and b"Content-Length" in answer, answer[:300]
        said = b""
        try:
            while chunk := silent.recv(65536):      # closed, with at most a 408
                said += chunk
        except TimeoutError:
            raise AssertionError(f"a silent connection held {ANSWER_BOUND_S} s") from None
        assert said == b"" or said.startswith(b"HTTP/1.1 408 "), said[:300]
    assert time.monotonic() - began < ANSWER_BOUND_S


# ---- the fuzz ------------------------------------------------------------------------------

TEXT = ["", "x", "-1", "0", "1", "1.5", "1e3", "0x10", " 7", "７", "NaN", "inf", "-0",
        str(2**63), str(-2**63 - 1), str(10**40), "é", "\u202e", "\x00", "a" * 5000,
        "%", "%ff", "../..", "//", "a/b", "__consumer_offsets"]
JUNK = [None, True, False, 0, -1, 1.5, 2**63, -2**70, 10**30, "", "x", "é" * 300, [], {}, [1],
        {"a": None}, ["a", "b"], "a" * 40_000, float("nan")]
QUERY_NAMES = ["partition", "limit", "offset", "timestamp", "key", "key_hex", "filter", "x",
               "partition[]", ""]


def path_part(rng, names) -> str:
    r = rng.random()
    if r < 0.5:
        return rng.choice([names["topic"], names["group"], names["configs_topic"]])
    if r < 0.7:
        return "console-fuzz-" + rng.choice(TEXT)
    return rng.choice(TEXT + ["a" * 40_000, "%2F", "%00", "%e9", "%c3%28", "a%2Fb"])


def fuzz_body(rng, path: str, names) -> bytes:
    r = rng.random()
    if r < 0.15:                                  # not JSON, or not an object
        return rng.choice([b"{", b"[]", b"null", b"\xff\xfe", b'"s"', b"1", b"{'a': 1}",
                           b"[" * 100_000 + b"]" * 100_000, b'{"a": ' * 50_000,
                           b"{}" + b" " * (70 << 10), rng.randbytes(rng.randrange(100)),
                           b'{"name": NaN}', b'{"partitions": Infinity}'])
    if path.endswith("/configs"):
        body = {"set": {"retention.ms": "3600000"}, "delete": ["segment.ms"]}
        junk = {"set": JUNK + [{"retention.ms": rng.choice(JUNK)},
                               {rng.choice(TEXT): rng.choice(TEXT)}],
                "delete": JUNK + [[rng.choice(TEXT)], [rng.choice(JUNK)]]}
    elif path.endswith("/reset-offsets"):
        body = {"spec": rng.choice(["to-earliest", "to-latest", "to-current", "to-datetime",
                                    "by-duration", "to-offset", "shift-by"]),
                "value": rng.choice([0, 3, 10**12]), "topics": [names["topic"]],
                "dry_run": True}
        junk = {"spec": ["from-file", *JUNK], "value": JUNK + ["12", "-3"],
                "topics": JUNK + [["no-such"], [names["topic"], 7]],
                "dry_run": [False, None, "no", 1, [], {}]}
    else:                                         # a topic to create: never a big one
        body = {"name": "console-fuzz-" + rng.choice(TEXT), "partitions": rng.choice([1, 2]),
                "replication_factor": rng.choice([1, -1]), "configs": {"retention.ms": "1000"}}
        junk = {"name": JUNK, "partitions": JUNK + [0, 10_001, "2"],
                "replication_factor": JUNK + [0, 33], "configs": JUNK + [
                    {"retention.ms": rng.choice(JUNK)}, {rng.choice(TEXT): "1"}]}
    for key in rng.sample(sorted(body), rng.randint(1, len(body))):
        body[key] = rng.choice(junk[key])
    if isinstance(body.get("partitions"), int) and 2 < body["partitions"] <= 10_000:
        body["partitions"] = 2
    for key in list(body):
        if rng.random() < 0.2:
            del body[key]
    raw = json.dumps(body, allow_nan=True).encode()
    if rng.random() < 0.1:                       # a number past a float's range: inf
        raw = re.sub(rb"(?<=: )-?\d+", b"1e400", raw, count=1)
    return raw


def fuzz_request(rng, names) -> tuple[bytes, bytes, dict, bytes | None]:
    method, path = rng.choice(ROUTES)
    if rng.random() < 0.15:
        method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS",
                             "BREW", "get"])
    for hole in ("<t>", "<g>"):
        while hole in path:
            part = path_part(rng, names)
            if method == "DELETE" and part in (names["topic"], names["configs_topic"]):
                part = "console-fuzz-" + part    # the module's own stay
            if path.endswith("/configs") and part == names["topic"]:
                part = names["configs_topic"]    # the records keep their configs
            if part.startswith("__"):
                part = "x" + part                # internal topics are not the fuzz's
            quoted = part if "%" in part and rng.random() < 0.5 else urllib.parse.quote(part,
                                                                                        safe="")
            path = path.replace(hole, quoted, 1)
    if rng.random() < 0.05:                      # a path of the API's that does not exist
        path = rng.choice(["/api", "/api/", "/api//", "/api/topics//", "/api/x/y/z",
                           "/api/groups/%2F/reset-offsets/x", "/api/topics/" + "a/" * 500,
                           "/../../etc/passwd", "/static/../../app.py", ""])
    query = {}
    if path.endswith("/messages"):              # a valid read, a parameter or two damaged
        query = rng.choice([{"limit": "5"}, {"partition": "1", "offset": "2"},
                            {"timestamp": "0", "limit": "3"}, {"key": "key-1"},
                            {"key_hex": "6b65792d31", "partition": "0"}])
    for _ in range(rng.choice([0, 1, 1, 2, 4])):
        query[rng.choice(QUERY_NAMES)] = rng.choice(TEXT)
    target = ("/console" + path).encode()
    if query:
        target += b"?" + urllib.parse.urlencode(query).encode()
    if rng.random() < 0.03:
        target += rng.choice([b"?%", b"?a=%zz&&=&b", b"?" + b"&".join([b"a=1"] * 5000),
                              b"#frag", "?é=é".encode()])
    headers = {b"Authorization": LOGIN, b"X-Kafkalite-Console": b"1"}
    body = None
    if method in ("POST", "PUT", "PATCH") or rng.random() < 0.05:
        body = fuzz_body(rng, path, names)
        headers[b"Content-Type"] = rng.choice([b"application/json"] * 8 + [
            b"text/plain", b"application/json; charset=latin-1", b"APPLICATION/JSON",
            b"multipart/form-data; boundary=x", b"", b"\xff"])
        if rng.random() < 0.05:
            headers[b"Content-Length"] = rng.choice([b"-5", b"abc", b"0", b"99999999999999999999",
                                                     b"%d" % (len(body) - 1)])
    if rng.random() < 0.05:
        del headers[b"X-Kafkalite-Console"]
    return method.encode(), target, headers, body


def fuzz_login(rng) -> bytes:
    """An Authorization header that names no user with a right password."""
    return rng.choice([
        b"", b"Basic", b"Basic ", b"Basic !!!", b"Basic " + base64.b64encode(b"no colon"),
        b"Basic " + base64.b64encode(b":"), b"Basic " + base64.b64encode(b":" + PASSWORD.encode()),
        b"Basic " + base64.b64encode(b"\xff\xfe:\xff"), b"Basic " + base64.b64encode(b"admin:"),
        b"Basic " + base64.b64encode(ADMIN.encode() + b":" + PASSWORD.encode() + b"x"),
        b"Basic " + base64.b64encode(b"admin:" + PASSWORD.encode())[:-2],
        b"Basic " + b"A" * 60_000, b"Bearer " + base64.b64encode(b"admin:admin-secret")[::-1],
        b"basic\t" + base64.b64encode(b"admin:nope"), b"\xff\xfe\xfd", "Basic é".encode(),
        b"Basic " + base64.b64encode(rng.randbytes(rng.randrange(1, 80))),
        b"Digest username=admin", b"Basic =" * 3,
    ])


@pytest.mark.slow
def test_fuzzed_console_api_calls_never_fail_500_nor_hang(server, names):
    rng = fuzz_rng("console API")
    survival = Survival(server)
    statuses: dict = {}
    failures: list = []
    slowest = 0.0
    started = time.monotonic()
    for i in range(REQUESTS):
        method, target, headers, body = fuzz_request(rng, names)
        login_fuzzed = rng.random() < 0.1
        if login_fuzzed:
            headers[b"Authorization"] = fuzz_login(rng)
        what = (method, target[:300], {k: v[:100] for k, v in headers.items()},
                None if body is None else body[:300])
        try:
            status, fields, payload, took = http(server, method, target, headers, body)
            check(status, fields, payload, took, what)
            if login_fuzzed:
                # the login guards the console; a path the port does not
                # serve at all ('/console#frag' is not under /console/) is
                # answered 404 by the port's router before it, naming only
                # the port's public paths
                path = target.split(b"?")[0]
                served = path == b"/console" or path.startswith(b"/console/")
                allowed = (400, 401, 431) if served else (400, 401, 404, 431)
                assert status in allowed, f"{what}: {status} {payload[:200]!r}"
        except (OSError, AssertionError) as exc:
            failures.append(f"{exc!r}"[:1500])     # all of them: each may be its own bug
            continue
        statuses[status] = statuses.get(status, 0) + 1
        slowest = max(slowest, took)
    elapsed = time.monotonic() - started
    print(f"{REQUESTS} console API calls in {elapsed:.1f} s, slowest {slowest:.2f} s; "
          f"statuses {dict(sorted(statuses.items()))}, {len(failures)} failures")
    assert not failures, "\n".join(failures[:10])
    assert statuses.get(200, 0) > REQUESTS // 10, "the fuzz reached the API's work"
    survival.check("console API fuzz")
    status, _, payload, _ = http(server, b"GET", b"/console/api/topics", {b"Authorization": LOGIN})
    assert status == 200 and names["topic"] in [t["name"] for t in json.loads(payload)]
