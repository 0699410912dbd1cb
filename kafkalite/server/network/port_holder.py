"""Which process listens on a TCP port: named in the error a listener that
cannot bind gives (issue 42: a user who starts a second server, or one on
a port another program took, is told which process to look at, not only
that the address is in use).

Linux only (``/proc``): the listening socket's inode from
``/proc/net/tcp`` and ``tcp6``, then the process holding a descriptor on
that inode. Processes whose descriptors this user may not read are not
found; then nothing is named. Runs on the error path only, in whichever
process failed to bind; imports nothing of kafkalite.
"""
from __future__ import annotations

import os

_LISTEN = "0A"      # TCP_LISTEN in /proc/net/tcp's st column


def _listening_inodes(port: int) -> set[str]:
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                rows = f.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            # local_address is HEXADDR:HEXPORT; st; ...; inode is the 10th
            if len(fields) > 9 and fields[3] == _LISTEN \
                    and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes


def port_holder(port: int) -> str | None:
    """``pid N (its command line)`` of a process listening on TCP ``port``
    on any address, or None when none is found."""
    inodes = {f"socket:[{i}]" for i in _listening_inodes(port)}
    if not inodes:
        return None
    for pid in filter(str.isdigit, os.listdir("/proc")):
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"{fd_dir}/{fd}") in inodes:
                    if int(pid) == os.getpid():     # e.g. --kafka-port the same as --port
                        return f"this server (pid {pid})"
                    return f"pid {pid} ({_command_line(pid)})"
            except OSError:
                continue
    return None


def _command_line(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            words = f.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return "?"
    line = " ".join(w.decode("utf-8", "replace") for w in words)
    return line if len(line) <= 120 else line[:117] + "..."


def held_by(port: int) -> str:
    """``held by ...; `` for an error message, or nothing when no holder is
    found."""
    holder = port_holder(port)
    return f"held by {holder}; " if holder else ""
