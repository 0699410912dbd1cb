"""Unix-domain sockets beside a worker's PLAINTEXT Kafka listener.

A native client's direct link (client/tcp_link.py) to a worker on the same
host need not cross the loopback TCP stack. On the 2-core development VM a
`send` of 1 KB on a loopback TCP connection costs the sender 12 µs of CPU
(the whole TCP receive path runs in the sender's context) against 1.5 µs
on a Unix-domain socket, and an idle round trip between two Python
processes 56 µs against 42 µs (docs/performance.md, "Unix-domain links"). Every
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

With security on, the native ports (ZeroMQ, CURVE) have a door of this
kind too, for same-host clients without keys: a ZeroMQ ``ipc://`` socket
in the abstract namespace named after the TCP port it stands beside
(``native_door_name``), whose peer's user id -- the kernel's SO_PEERCRED,
which a client cannot forge -- is its principal (protocol/curve.py
``local_principal``). Its name cannot be told over an authenticated
channel (the client has no keys), and any local user can bind an abstract
name, so a client takes the door only when the process behind it runs as
the user whose process listens on that TCP port (``native_door``): a
stranger who took the name first gets no one's records.

The ingest gateway's local door (client/ingest.py) takes publishers in
any language, a plain ZeroMQ PUSH that checks nothing, so a name anyone
could bind first will not do (issue 67: another local user who bound the
door's abstract name before the gateway received local publishers'
records). It is a socket file instead, ``ingest-<port>`` in a directory
only the server's user can add entries to (``door_directory``: made 0755,
or refused when another user owns it, others may write to it, or so may
they to a directory above it without the sticky bit): ``/run/kafkalite``
for a server run by root, ``/tmp/kafkalite-<uid>`` for another user
(``default_door_dir``), or the ``local_door_dir`` setting.

It lives beside errors.py, below every layer: the server's listener binds
these sockets and the client's link connects to them.
"""
from __future__ import annotations

import os
import socket
import stat
import struct

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


# ---- the native ports' local doors -------------------------------------------------------------

NATIVE_DOOR_PREFIX = "kafkalite-native-"
LOOPBACK_HOSTS = ("localhost", "::1")
_UCRED = struct.Struct("3i")        # struct ucred: pid, uid, gid


def native_door_name(port: int) -> str:
    """The abstract name of the local door beside native TCP port ``port``."""
    return f"{NATIVE_DOOR_PREFIX}{port}"


def native_door(endpoint: str) -> str | None:
    """For a client without CURVE keys: the ``ipc://`` endpoint of the local
    door of native endpoint ``tcp://<loopback host>:<port>``, when one
    listens under its name and its process runs as the user whose process
    listens on that TCP port in this network namespace; else None (no door:
    the server has security off, or is not on this host)."""
    host, _, port = endpoint.rpartition("/")[2].rpartition(":")
    host = host.strip("[]")
    if not port.isdigit() or not (host.startswith("127.") or host in LOOPBACK_HOSTS):
        return None
    name = native_door_name(int(port))
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(1.0)
            sock.connect("\0" + name)
            _pid, uid, _gid = _UCRED.unpack(
                sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    except (OSError, AttributeError):      # nothing there; not Linux
        return None
    return f"ipc://@{name}" if uid in tcp_listener_uids(int(port)) else None


def tcp_listener_uids(port: int) -> set[int]:
    """The user ids of the sockets listening on TCP ``port`` in this
    network namespace (/proc/net/tcp and tcp6: local address, state 0A is
    LISTEN, the eighth field the owner's uid)."""
    uids = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 7 and fields[3] == "0A" and \
                    int(fields[1].rsplit(":", 1)[1], 16) == port:
                uids.add(int(fields[7]))
    return uids


# ---- the ingest gateway's local door ----------------------------------------------------------

ROOT_DOOR_DIR = "/run/kafkalite"
# sun_path holds 108 bytes, the terminating NUL among them
MAX_SOCKET_PATH = 107


def default_door_dir() -> str:
    """Where this user's server puts its door socket files: /run/kafkalite
    for root (only root may add to /run), else a directory of its own in
    /tmp (whose sticky bit keeps it ours once made)."""
    uid = os.geteuid()
    return ROOT_DOOR_DIR if uid == 0 else f"/tmp/kafkalite-{uid}"


def ingest_door(directory: str, port: int) -> str:
    """The ``ipc://`` endpoint of the ingest gateway's local door beside its
    TCP ``port``: publishers in any language connect a PUSH socket there."""
    return f"ipc://{os.path.join(directory, f'ingest-{port}')}"


def door_directory(path: str) -> str:
    """``path`` with its links resolved, once it is a directory only this
    process's user can add entries to, which others may enter: made 0755
    when missing (whatever the umask); an existing one is taken as it is.
    OSError naming what is wrong otherwise: it is not a directory, another
    user owns it or may write to it, or a directory above it (or a link on
    the way) is neither root's nor ours, or is writable by others without
    the sticky bit -- any of which would let another user put a socket
    where publishers look for the door, or swap the directory for theirs."""
    uid = os.geteuid()
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    _check_above(path, {*_prefixes(parent), *_prefixes(os.path.realpath(parent))}, uid)
    try:
        os.mkdir(path, 0o755)
        os.chmod(path, 0o755)
    except FileExistsError:
        pass
    real = os.path.realpath(path)
    st = os.lstat(real)
    if not stat.S_ISDIR(st.st_mode):
        raise OSError(f"the local door directory {path} is not a directory")
    if st.st_uid != uid:
        raise OSError(f"the local door directory {path} belongs to uid {st.st_uid}, not to this "
                      f"server's user (uid {uid}): remove it, or set local_door_dir")
    if st.st_mode & 0o022:
        raise OSError(f"the local door directory {path} is writable by group or others (mode "
                      f"{stat.S_IMODE(st.st_mode):04o}): chmod go-w it, or set local_door_dir")
    _check_above(path, {*_prefixes(path), *_prefixes(real)} - {real}, uid)
    if len(ingest_door(real, 65535)) - len("ipc://") > MAX_SOCKET_PATH:
        raise OSError(f"the local door directory {path} is too long a path for a Unix socket")
    return real


def _check_above(path: str, above: set, uid: int) -> None:
    """OSError unless each of ``above`` (what lies on the way to the door
    directory ``path``) is root's or ours, and a directory among them that
    others may write to has the sticky bit (they cannot move ours then)."""
    for d in sorted(above):
        st = os.lstat(d)
        if st.st_uid not in (0, uid) or (not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022
                                         and not st.st_mode & stat.S_ISVTX):
            raise OSError(f"the local door directory {path} is under {d}, which another user "
                          f"could change (uid {st.st_uid}, mode {stat.S_IMODE(st.st_mode):04o}):"
                          f" set local_door_dir")


def _prefixes(path: str) -> list[str]:
    """"/", "/a", "/a/b" of "/a/b"."""
    out = ["/"]
    for part in path.strip("/").split("/"):
        if part:
            out.append(os.path.join(out[-1], part))
    return out


def listening(path: str) -> bool:
    """Whether a process accepts connections on the Unix socket ``path``."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(path)
        except OSError:
            return False
    return True
