"""kafkalite's one HTTP server (kafkalite/http_server.py), on real sockets in
the test's process: what every HTTP service relies on beyond plain WSGI.
Each node port's and Connect's keep-alive is tested on a real server
(tests/server/test_http_keep_alive.py, tests/connect/test_connect_rest_api.py),
the cap under load by tests/server/test_http_connection_cap.py, TLS by
tests/security/test_http_tls.py."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from kafkalite.http_server import serve, send_room


@pytest.fixture
def served():
    servers = []

    def start(app, **kw):
        srv = serve("127.0.0.1", 0, app, name="test", **kw)
        servers.append(srv)
        return srv.server_port
    yield start
    for srv in servers:
        srv.close()
    _LEFT.clear()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


_LEFT: dict[int, bytes] = {}      # socket fileno -> bytes of the next answer already read


def read_answer(sock: socket.socket) -> bytes:
    """One whole answer with a Content-Length (what came after it is kept
    for the next call)."""
    data = _LEFT.pop(sock.fileno(), b"")
    while b"\r\n\r\n" not in data:
        data += sock.recv(4096)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(4096)
    _LEFT[sock.fileno()] = body[length:]
    return head + b"\r\n\r\n" + body[:length]


def echo(environ, start_response):
    body = environ["wsgi.input"].read()
    start_response("200 OK", [("Content-Length", str(len(body)))])
    return [body]


def test_a_chunked_body_is_read_as_its_chunks_come(served):
    """An app reading a stream gets each chunk while the client still holds
    the next (the REST proxy answers records before the body ends)."""
    got = []

    def app(environ, start_response):
        body = environ["wsgi.input"]
        got.append(body.read(1 << 16))
        got.append(body.read(1 << 16))
        got.append(body.read(1 << 16))
        start_response("200 OK", [("Content-Length", "0")])
        return []
    sock = connect(served(app))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
    deadline = time.monotonic() + 5
    while not got and time.monotonic() < deadline:
        time.sleep(0.01)
    assert got == [b"first"]                # before the second chunk was sent
    sock.sendall(b"6\r\nsecond\r\n0\r\n\r\n")
    assert read_answer(sock).startswith(b"HTTP/1.1 200")
    assert got == [b"first", b"second", b""]


def test_a_body_left_unread_closes_the_connection_after_the_answer(served):
    def refuse(environ, start_response):
        start_response("401 Unauthorized", [("Content-Length", "0")])
        return []
    sock = connect(served(refuse))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nfirst\r\n")
    assert read_answer(sock).startswith(b"HTTP/1.1 401")
    assert sock.recv(100) == b""            # not read as the next request: closed


def test_answers_go_on_one_connection_and_a_streamed_one_as_it_comes(served):
    release = threading.Event()

    def app(environ, start_response):
        if environ["PATH_INFO"] == "/echo":
            return echo(environ, start_response)
        start_response("200 OK", [("Content-Type", "text/plain")])

        def pieces():
            yield b"one"
            release.wait(10)
            yield b"two"
        return pieces()
    sock = connect(served(app))
    for body in (b"a", b"bc"):
        sock.sendall(b"POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n%s"
                     % (len(body), body))
        assert read_answer(sock).endswith(b"\r\n\r\n" + body)
    sock.sendall(b"GET /stream HTTP/1.1\r\nHost: x\r\n\r\n")
    first = b""
    while not first.endswith(b"3\r\none\r\n"):
        first += sock.recv(4096)            # the first piece, while the app holds the second
    assert b"Transfer-Encoding: chunked" in first
    release.set()
    rest = b""
    while not rest.endswith(b"0\r\n\r\n"):
        rest += sock.recv(4096)
    assert rest == b"3\r\ntwo\r\n0\r\n\r\n"


def test_two_requests_sent_at_once_are_both_answered(served):
    """HTTP/1.1 pipelining: the second request is already read into the
    connection's buffer when the first is answered, not left waiting for
    more bytes on the socket."""
    sock = connect(served(echo))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na"
                 b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nb")
    first = read_answer(sock)
    assert first.endswith(b"\r\n\r\na")
    sock.settimeout(3)                  # not the server's 10 s idle wait
    assert read_answer(sock).endswith(b"\r\n\r\nb")


def test_expect_100_continue_is_answered_before_the_body(served):
    sock = connect(served(echo))
    sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n"
                 b"Expect: 100-continue\r\n\r\n")
    assert sock.recv(100) == b"HTTP/1.1 100 Continue\r\n\r\n"
    sock.sendall(b"abc")
    assert read_answer(sock).endswith(b"\r\n\r\nabc")


def test_a_connection_over_the_cap_is_answered_503_and_closed(served):
    port = served(echo, max_connections=2)
    held = [connect(port) for _ in range(2)]
    try:
        for sock in held:                       # both counted before the third comes
            sock.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\na")
            read_answer(sock)
        with connect(port) as third:
            answer = b""
            while chunk := third.recv(4096):
                answer += chunk
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n")
        assert b"Retry-After: 1\r\n" in answer
    finally:
        for sock in held:
            sock.close()


def test_send_room_falls_while_the_client_reads_nothing():
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    conn, _ = server.accept()
    try:
        room = send_room(conn)
        assert room > 0
        conn.setblocking(False)
        try:
            while True:                     # until a send would wait
                conn.send(b"x" * 65536)
        except BlockingIOError:
            pass
        assert send_room(conn) <= 0
    finally:
        for s in (conn, client, server):
            s.close()
