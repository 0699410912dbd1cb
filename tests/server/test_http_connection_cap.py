"""The HTTP port's cap on connections open at once (issue 40;
``http_max_connections``, kafkalite/http_server.py, counted by
kafkalite/server/metrics.py).

A connection to the port (/metrics, /health, the web console) waiting for
its first request is served on a thread, bounded in time by
HTTP_IO_TIMEOUT_S but not in number: before the cap, every idle TCP
connection anyone opened held a thread of the supervisor, so 10,000 of
them were 10,000 threads, and a connection over any number was left
waiting. Now the first ``http_max_connections`` are served; one more is
answered ``503 Service Unavailable`` with ``Retry-After`` by the accept
thread and closed at once (no thread of its own), counted in
kafkalite_http_connections_refused; once the idle ones go, /health
answers 200 again.

One server for the module, ``http_max_connections = 8``.
"""
from __future__ import annotations

import socket
import urllib.error
import urllib.parse
import urllib.request

import pytest

from harness import ServerProcess, scrape, wait_until

CAP = 8
EXTRA = 40


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("http-cap")
    config = root / "server.toml"
    config.write_text(f"http_max_connections = {CAP}\n")
    server = ServerProcess(str(root / "data"), extra_args=["--config", str(config)]).start()
    yield server
    if server.proc.poll() is None:
        assert server.stop() == 0
    server.kill()


def threads(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("Threads:"))


def settled_threads(pid: int) -> int:
    """The thread count once it holds still for 0.3 s (the last probe's
    connection thread gone)."""
    counts = []

    def still() -> bool:
        counts.append(threads(pid))
        return len(counts) >= 4 and len(set(counts[-4:])) == 1
    wait_until(still, 10, "the thread count to settle", interval=0.1)
    return counts[-1]


def connect(srv) -> socket.socket:
    url = urllib.parse.urlsplit(srv.info["health"])
    return socket.create_connection((url.hostname, url.port), timeout=5)


def answer_of(sock: socket.socket) -> bytes:
    """Everything the server sent before it closed ``sock``."""
    data = b""
    while True:
        chunk = sock.recv(4096)
        if not chunk:
            return data
        data += chunk


def probe_refused(srv) -> bool:
    """Whether a new connection is answered 503 at once."""
    with connect(srv) as sock:
        try:
            return answer_of(sock).startswith(b"HTTP/1.1 503")
        except socket.timeout:
            return False


def health(srv) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(srv.info["health"], timeout=5) as resp:
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def test_connections_over_the_cap_are_answered_503_without_a_thread_each(srv):
    pid = srv.info["pid"]
    wait_until(lambda: health(srv)[0] == 200, 20, "the server healthy")
    before = settled_threads(pid)
    idle = [connect(srv) for _ in range(CAP)]
    try:
        # the port is full once a probe is refused: each served connection
        # then has its thread, waiting for a request (less 2: the baseline's
        # other threads come and go, and one that ended made the count stall
        # one short of before + CAP in a fresh-clone run)
        wait_until(lambda: probe_refused(srv), 10, "the port full: a probe refused")
        assert threads(pid) >= before + CAP - 2, (threads(pid), before)
        extra = [connect(srv) for _ in range(EXTRA)]
        try:
            for sock in extra:
                head = answer_of(sock).split(b"\r\n\r\n", 1)[0].decode()
                assert head.startswith("HTTP/1.1 503 Service Unavailable"), head
                assert "Retry-After: 1" in head.splitlines()
        finally:
            for sock in extra:
                sock.close()
        assert threads(pid) <= before + CAP + 2         # + what the loop starts meanwhile
        code, headers = health(srv)                     # a probe too, while the port is full
        assert code == 503 and headers.get("Retry-After") == "1"
    finally:
        for sock in idle:
            sock.close()
    wait_until(lambda: health(srv)[0] == 200, 10, "/health answered 200 again")
    refused = next(float(line.split()[1]) for line in scrape(srv).splitlines()
                   if line.startswith("kafkalite_http_connections_refused_total "))
    # and the probes refused while the idle connections' threads were ending
    assert refused >= EXTRA + 1
