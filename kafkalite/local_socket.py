"""Unix-domain sockets beside a worker's PLAINTEXT Kafka listener.

A native client's direct link (client/tcp_link.py) to a worker on the same
host need not cross the loopback TCP stack. On the 2-core development VM a
`send` of 1 KB on a loopback TCP connection costs the sender 12 µs of CPU
(the whole TCP receive path runs in the sender's context) against 1.5 µs
on a Unix-domain socket, and an idle round trip between two Python
processes 56 µs against 42 µs (README, "Unix-domain links"). Every
produce, its answer, every fetch and its answer is such a send.

The worker binds a socket in Linux's abstract namespace (a name, no file:
nothing to clean up, it goes when the process does) and says where it is,
with ``identity()``, in its answer to the ``kafka_endpoint`` extension. A
client whose own ``identity()`` is the same shares the worker's network
namespace, so the name is the worker's; any other client (another host,
another namespace) uses TCP. The listener behind it is the same PLAINTEXT
listener, serving the same protocol with the same quotas and ACLs; the
peer's host is taken to be 127.0.0.1 (it is on this host and namespace,
as a loopback TCP peer would be).

It lives beside errors.py, below every layer: the server's listener binds
these sockets and the client's link connects to them.
"""
from __future__ import annotations

import os
import socket

# What a connection from a Unix-domain socket counts as where a TCP peer's
# address is used (ACL hosts, connection quotas, logs).
PEER = ("127.0.0.1", 0)

# A Unix stream socket's send buffer stays at net.core.wmem_default (208 KiB
# on most systems), where loopback TCP grows its own up to tcp_wmem's
# maximum (4 MiB): a fetch answer bigger than the buffer would go out in
# pieces, each waiting for the reader to make room, a wake-up of both
# processes per piece. Asked for once per connection; the kernel caps it
# at net.core.wmem_max for processes without CAP_NET_ADMIN.
SEND_BUFFER = 4 << 20

_identity: str | None = None


def identity() -> str:
    """This host's boot id and this process's network namespace: two
    processes with the same identity reach the same abstract sockets.
    "" when it cannot be told (never matches)."""
    global _identity
    if _identity is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot = f.read().strip()
            _identity = f"{boot}/{os.stat('/proc/self/ns/net').st_ino}"
        except OSError:
            _identity = ""
    return _identity


def same_namespace(peer_identity: str | None) -> bool:
    return bool(peer_identity) and peer_identity == identity()


def listen(port: int, backlog: int) -> tuple[socket.socket, str] | None:
    """A listening, non-blocking Unix-domain socket in the abstract
    namespace named after this process and ``port`` (the TCP listener it
    stands beside), and that name; None where there is none to be had (not
    Linux, or the name is taken)."""
    if not hasattr(socket, "AF_UNIX") or not identity():
        return None
    name = f"kafkalite/{os.getpid()}/{port}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind("\0" + name)
        sock.listen(backlog)
    except OSError:
        sock.close()
        return None
    sock.setblocking(False)
    return sock, name


def tune(sock: socket.socket) -> None:
    """Give a connected Unix-domain socket a send buffer as loopback TCP
    would grow (SEND_BUFFER)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SEND_BUFFER)
    except OSError:
        pass


def connect(name: str, timeout: float) -> socket.socket:
    """A connected Unix-domain socket to the abstract ``name``; OSError
    when nothing listens there."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout)
    try:
        sock.connect("\0" + name)
    except OSError:
        sock.close()
        raise
    tune(sock)
    return sock
