"""kafkalite/local_socket.py: the abstract Unix-domain sockets beside a
worker's PLAINTEXT listener (the links over them: client/test_tcp_link.py),
and the directory of the ingest gateway's door (a server's refusal to start
over it: security/test_same_host_users.py)."""
from __future__ import annotations

import os
import socket
import stat

import pytest

from kafkalite import local_socket


def test_a_listening_name_is_reachable_by_name_only_while_its_socket_lives():
    made = local_socket.listen(40123, 8)
    assert made is not None
    sock, name = made
    assert name.startswith("kafkalite/") and name.endswith("/40123")
    try:
        client = local_socket.connect(name, 2)
        server, _ = sock.accept()
        client.sendall(b"ping")
        assert server.recv(4) == b"ping"
        client.close()
        server.close()
    finally:
        sock.close()
    with pytest.raises(OSError):
        local_socket.connect(name, 2)


def test_a_second_listener_for_the_same_port_gets_none():
    first = local_socket.listen(40124, 8)
    try:
        assert local_socket.listen(40124, 8) is None
    finally:
        first[0].close()


def test_connections_get_a_send_buffer_as_loopback_tcp_grows_one():
    """Without it a Unix stream socket takes about 208 KiB before a send
    would block, and a larger fetch answer goes out in pieces."""
    with open("/proc/sys/net/core/wmem_max") as f:
        cap = int(f.read())
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        local_socket.tune(a)
        a.setblocking(False)
        taken = 0
        try:
            while True:
                taken += a.send(b"x" * 65536)
        except BlockingIOError:
            pass
        assert taken >= min(local_socket.SEND_BUFFER, cap) * 0.9, taken
    finally:
        a.close()
        b.close()


def test_identity_names_the_boot_and_the_network_namespace():
    ident = local_socket.identity()
    with open("/proc/sys/kernel/random/boot_id") as f:
        assert ident.startswith(f.read().strip() + "/")
    assert local_socket.same_namespace(ident)
    assert not local_socket.same_namespace(ident + "0")
    assert not local_socket.same_namespace("") and not local_socket.same_namespace(None)


# ---- the native ports' local doors ------------------------------------------------------------

SQUATTER = """
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.bind("\\0" + sys.argv[1])
s.listen(8)
print("bound", flush=True)
sys.stdin.read()
"""


def _squat(name: str, user: str | None):
    """A process of ``user`` (None: ours) listening on abstract ``name``."""
    import os
    import subprocess
    import sys
    # a system interpreter: another user may not be able to run ours
    python = "/usr/bin/python3" if user and os.path.exists("/usr/bin/python3") else sys.executable
    proc = subprocess.Popen([python, "-c", SQUATTER, name], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, user=user)
    assert proc.stdout.readline() == b"bound\n"
    return proc


@pytest.mark.processes
@pytest.mark.skipif(not hasattr(socket, "SO_PEERCRED"), reason="Linux's peer credentials")
def test_a_door_is_taken_only_from_the_user_who_listens_on_its_tcp_port():
    """Any local user can bind an abstract name: a keyless client must not
    hand its records to whoever took the door's name first. It takes the
    door only when the process behind it runs as the user listening on the
    TCP port the door stands beside."""
    import os
    import pwd
    tcp = socket.socket()
    tcp.bind(("127.0.0.1", 0))
    tcp.listen(1)
    port = tcp.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    name = local_socket.native_door_name(port)
    try:
        assert local_socket.native_door(endpoint) is None          # no door
        if os.getuid() == 0:
            stranger = _squat(name, pwd.getpwuid(65534).pw_name)   # nobody
            try:
                assert local_socket.native_door(endpoint) is None
            finally:
                stranger.kill()
                stranger.wait()
        ours = _squat(name, None)
        try:
            assert local_socket.native_door(endpoint) == f"ipc://@{name}"
            # a door only for what is on this host
            assert local_socket.native_door(f"tcp://10.1.2.3:{port}") is None
        finally:
            ours.kill()
            ours.wait()
    finally:
        tcp.close()


def test_a_door_directory_is_made_for_this_user_alone_to_add_to(tmp_path):
    """Made 0755 whatever the umask (the server's is 027: others could not
    reach the door), and taken again as it is."""
    old = os.umask(0o027)
    try:
        made = local_socket.door_directory(str(tmp_path / "doors"))
    finally:
        os.umask(old)
    assert made == str(tmp_path / "doors")
    st = os.stat(made)
    assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (os.geteuid(), 0o755)
    assert local_socket.door_directory(made) == made
    assert local_socket.ingest_door(made, 7091) == f"ipc://{made}/ingest-7091"


def test_a_door_directory_another_user_could_fill_or_swap_is_refused(tmp_path):
    """Anything that would let another user put a socket where publishers
    look: a directory others may write to, or one above it without the
    sticky bit, or -- as root can show -- a directory or a link of theirs."""
    open_to_all = tmp_path / "open"
    open_to_all.mkdir()
    open_to_all.chmod(0o777)
    with pytest.raises(OSError, match="writable by group or others"):
        local_socket.door_directory(str(open_to_all))
    with pytest.raises(OSError, match=f"under {open_to_all}, which another user could change"):
        local_socket.door_directory(str(open_to_all / "doors"))
    assert os.listdir(open_to_all) == []            # nothing made under it first
    open_to_all.chmod(0o1777)                       # as /tmp: others cannot move ours
    assert local_socket.door_directory(str(open_to_all / "doors"))
    if os.geteuid() != 0:
        return
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, 65534, 65534)
    with pytest.raises(OSError, match="belongs to uid 65534"):
        local_socket.door_directory(str(theirs))
    link = open_to_all / "link"                     # nobody's link to a directory of ours
    link.symlink_to(open_to_all / "doors")
    os.lchown(link, 65534, 65534)
    with pytest.raises(OSError, match=f"under {link}, which another user could change"):
        local_socket.door_directory(str(link))
