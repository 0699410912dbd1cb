"""protocol/curve.py over real ZeroMQ sockets: the authorized-keys formats
(a directory of ``kafkalite curve keygen`` files, a text file of
``<key> <principal>`` lines), the ZAP User-Id a server reads as the
principal, and a key added to the file while the server runs."""
from __future__ import annotations

import os
import time

import pytest
import zmq

from kafkalite.protocol import curve


def _server(ctx, keypair, authorized: str):
    cs = curve.CurveServer(*keypair, authorized, curve.BROKER_PRINCIPAL)
    cs.start(ctx)
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    cs.secure_server(sock)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    return cs, sock, port


def _principal_seen(ctx, sock, port, server_public, client_pair, wait_s: float = 3.0):
    """The principal the server reads from a message of a client with
    ``client_pair``; None when nothing got through."""
    client = ctx.socket(zmq.DEALER)
    client.setsockopt(zmq.LINGER, 0)
    curve.secure_client(client, server_public, *client_pair)
    client.connect(f"tcp://127.0.0.1:{port}")
    try:
        client.send(b"hello")
        if not sock.poll(int(wait_s * 1000)):
            return None
        _, payload = sock.recv_multipart(copy=False)
        return curve.principal_of(payload)
    finally:
        client.close()


def test_keygen_files_in_a_directory_map_to_their_principals(tmp_path):
    server = curve.load_keypair_file(curve.write_keypair(str(tmp_path), "server")[1])
    pub, sec = curve.write_keypair(str(tmp_path / "clients"), "alice", "User:alice")
    assert os.stat(sec).st_mode & 0o777 == 0o600
    alice = curve.load_keypair_file(sec)
    assert curve.load_authorized_keys(str(tmp_path / "clients")) == {alice[0]: "User:alice"}
    ctx = zmq.Context()
    try:
        cs, sock, port = _server(ctx, server, str(tmp_path / "clients"))
        assert _principal_seen(ctx, sock, port, server[0], alice) == "User:alice"
        assert _principal_seen(ctx, sock, port, server[0], zmq.curve_keypair(), 1.0) is None
        # the server's own key pair is its processes' principal
        assert _principal_seen(ctx, sock, port, server[0], server) == curve.BROKER_PRINCIPAL
        sock.close()
        cs.stop()
    finally:
        ctx.destroy(linger=0)


def test_a_key_added_to_the_file_is_accepted_without_a_restart(tmp_path):
    server = zmq.curve_keypair()
    bob = zmq.curve_keypair()
    listing = tmp_path / "authorized"
    listing.write_text("# clients\n")
    ctx = zmq.Context()
    try:
        cs, sock, port = _server(ctx, server, str(listing))
        assert _principal_seen(ctx, sock, port, server[0], bob, 1.0) is None
        time.sleep(curve.RELOAD_CHECK_S)
        listing.write_text(f"# clients\n{bob[0].decode()} User:bob\n")
        assert _principal_seen(ctx, sock, port, server[0], bob) == "User:bob"
        sock.close()
        cs.stop()
    finally:
        ctx.destroy(linger=0)


@pytest.mark.parametrize("line", ["tooshort User:x", "0" * 40 + " nocolon", "0" * 40])
def test_a_bad_authorized_keys_line_is_named(tmp_path, line):
    listing = tmp_path / "authorized"
    listing.write_text(line + "\n")
    with pytest.raises(curve.CurveKeyError, match=":1: expected"):
        curve.load_authorized_keys(str(listing))
