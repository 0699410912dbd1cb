"""kafkalite.server.network.tls.TlsConnection against Python's own TLS client over
real loopback sockets: small records, big writes into a full socket
buffer (ciphertext left ``unsent`` and flushed later), a client that is
not speaking TLS, and ends of the stream with and without close_notify."""
from __future__ import annotations

import os
import select
import socket
import ssl
import threading

import pytest

from kafkalite.server.network.tls import TlsConnection
from kafkalite.tools.dev_certs import make_certs


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return make_certs(str(tmp_path_factory.mktemp("tls-certs")))


def pair(certs, handshake=True):
    """(server TlsConnection, client SSLSocket) on loopback, the handshake
    driven as the listener drives it (non-blocking, on poll)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(certs["server"], certs["server_key"])
    client_ctx = ssl.create_default_context(cafile=certs["ca"])
    box = {}

    def connect():
        raw = socket.create_connection(ls.getsockname())
        box["client"] = client_ctx.wrap_socket(raw, server_hostname="127.0.0.1") \
            if handshake else raw
    t = threading.Thread(target=connect)
    t.start()
    raw, _ = ls.accept()
    ls.close()
    raw.setblocking(False)
    server = TlsConnection(raw, ctx)
    if handshake:
        drive_handshake(server)
    t.join(10)
    return server, box["client"]


def drive_handshake(server):
    for _ in range(200):
        try:
            server.do_handshake()
            return
        except ssl.SSLWantReadError:
            select.select([server.fileno()], [], [], 5)
        except ssl.SSLWantWriteError:
            select.select([], [server.fileno()], [], 5)
    raise AssertionError("the handshake did not finish")


def read_all(server, size, timeout=10.0) -> bytes:
    out = bytearray()
    buf = bytearray(1 << 20)
    while len(out) < size:
        try:
            n = server.recv_into(buf)
        except ssl.SSLWantReadError:
            if not select.select([server.fileno()], [], [], timeout)[0]:
                raise AssertionError(f"stalled at {len(out)} of {size} bytes") from None
            continue
        if n == 0:
            break
        out += buf[:n]
    return bytes(out)


def test_many_small_records_arrive_whole_and_in_order(certs):
    server, client = pair(certs)
    sent = b"".join(os.urandom(1) * 1041 for _ in range(2000))

    def write():                   # one TLS record per 1041 bytes, as librdkafka writes
        for i in range(0, len(sent), 1041):
            client.sendall(sent[i:i + 1041])
    t = threading.Thread(target=write)
    t.start()
    assert read_all(server, len(sent)) == sent
    t.join(10)
    assert server.pending() == 0
    client.close()
    server.close()


def test_reads_of_small_records_allocate_no_read_sized_buffer(certs):
    """Ciphertext is read into a buffer of the thread's: ``sock.recv(RAW_CHUNK)``
    allocated 256 KiB for every read of what is mostly one small record.
    Traced by the memory each read's peak adds, after a first read."""
    import tracemalloc
    server, client = pair(certs)
    buf = bytearray(4096)
    try:
        client.sendall(b"x" * 100)
        assert read_all(server, 100) == b"x" * 100
        peaks = []
        tracemalloc.start()
        try:
            for i in range(20):
                client.sendall(bytes([i]) * 100)
                n, peak = 0, 0
                while not n:                # reads until the record is whole
                    assert select.select([server.fileno()], [], [], 5)[0], "no record in 5 s"
                    before = tracemalloc.get_traced_memory()[0]
                    tracemalloc.reset_peak()
                    try:
                        n = server.recv_into(buf)
                    except ssl.SSLWantReadError:
                        pass
                    peak = max(peak, tracemalloc.get_traced_memory()[1] - before)
                peaks.append(peak)
                assert buf[:n] == bytes([i]) * 100
        finally:
            tracemalloc.stop()
        assert max(peaks) < 16 << 10, f"a read's peak allocation: {max(peaks):,} B"
    finally:
        client.close()
        server.close()


def test_a_big_write_into_a_full_socket_is_kept_and_flushed(certs):
    server, client = pair(certs)
    server.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    data = os.urandom(4 << 20)
    got = bytearray()
    client.settimeout(10)

    def read():                     # a slow reader: the server's socket fills up
        while len(got) < len(data):
            chunk = client.recv(16 * 1024)
            if not chunk:
                return
            got.extend(chunk)
    t = threading.Thread(target=read)
    t.start()
    accepted, refused = 0, 0
    while accepted < len(data) or server.unsent:
        # as the listener does: write while the socket takes it, else wait for POLLOUT
        if accepted < len(data):
            try:
                accepted += server.send(data[accepted:accepted + 256 * 1024])
                continue
            except ssl.SSLWantWriteError:
                refused += 1        # earlier ciphertext still waits: nothing new was taken
        elif server.flush():
            break
        assert select.select([], [server.fileno()], [], 10)[1], "the socket never drained"
    t.join(20)
    assert bytes(got) == data
    assert refused > 0              # the socket did fill up: the waiting path was taken
    client.close()
    server.close()


def test_a_client_not_speaking_tls_fails_the_handshake(certs):
    server, raw = pair(certs, handshake=False)
    raw.sendall(b"\x00\x00\x00\x10not a TLS client hello")
    with pytest.raises(ssl.SSLError):
        drive_handshake(server)
    raw.close()
    server.close()


@pytest.mark.parametrize("close_notify", [True, False])
def test_the_end_of_the_stream_reads_as_zero(certs, close_notify):
    server, client = pair(certs)
    client.sendall(b"last words")
    if close_notify:
        client.settimeout(0.5)
        try:
            client.unwrap()         # sends close_notify (then waits for the server's)
        except (TimeoutError, OSError):
            pass
        client.close()
    else:
        client.shutdown(socket.SHUT_RDWR)
        client.close()
    assert read_all(server, 1 << 20) == b"last words"   # then 0: the end, no error
    server.close()
