"""Reading a region of another broker's segment file on the same host.

A follower whose leader runs on the same host (another worker of the same
server, or another node's worker on the same machine) can read the records
a Fetch would have carried straight from the leader's segment file: one
copy out of the page cache, instead of the leader's read, two socket copies
and ZeroMQ's work on both sides. The Fetch still goes to the leader, which
still decides what to answer (its high watermark, the follower's end, the
ISR); only the bytes take the short way (protocol/messages/fetch.py,
``local_region``).

``host_identity()`` names this host for that purpose: the kernel's boot id
and this process's mount namespace, so two processes that share the
identity see the same files under the same paths.

``LocalRegionReader.read`` opens the leader's file by path and keeps it
open, keyed by (device, inode): a file that is not the one the leader
described (deleted, renamed, replaced by the cleaner) is refused, and an
open descriptor keeps its inode, so a cached file can never turn into
another one. What the bytes are is for the caller to check (the leader may
have truncated and rewritten the region since it answered): the replica
fetcher appends them only if they are whole batches starting where it asked
and written under no leader epoch newer than the one it fetched at.
Descriptors unused for ``IDLE_CLOSE_S`` are closed (a deleted segment's
space is freed only when the last descriptor goes), and at most
``MAX_OPEN`` stay open.

Who may call: the replica fetcher, on its worker's event-loop thread.
"""
from __future__ import annotations

import os
import time

from kafkalite.errors import KafkaStorageError

IDLE_CLOSE_S = 10.0
MAX_OPEN = 16

_identity: str | None = None


def host_identity() -> str:
    """This host's boot id and this process's mount namespace."""
    global _identity
    if _identity is None:
        try:
            with open("/proc/sys/kernel/random/boot_id") as f:
                boot = f.read().strip()
            mounts = os.stat("/proc/self/ns/mnt").st_ino
            _identity = f"{boot}/{mounts}"
        except OSError:
            _identity = ""          # unknown: never matches (see same_host)
    return _identity


def same_host(identity: str | None) -> bool:
    """Whether a peer that named itself ``identity`` shares our files."""
    return bool(identity) and identity == host_identity()


class LocalRegionReader:
    def __init__(self):
        self._open: dict[tuple[int, int], list] = {}     # (dev, ino) -> [fd, last used]
        self._buffer = bytearray()

    def read(self, path: str, device: int, inode: int, position: int, length: int) -> memoryview:
        """``length`` bytes at ``position`` of the file at ``path``, which
        must be the file (``device``, ``inode``). The view is of a buffer
        the next call reuses. Raises KafkaStorageError when the file is not
        there, is another file, or is shorter than the region."""
        if length <= 0 or position < 0:
            raise KafkaStorageError(f"{path}: no region at {position} of {length} bytes")
        fd = self._fd(path, device, inode)
        if len(self._buffer) < length:
            self._buffer = bytearray(length)
        view = memoryview(self._buffer)[:length]
        try:
            n = os.preadv(fd, [view], position)
        except OSError as exc:
            self._close((device, inode))
            raise KafkaStorageError(f"{path}: {exc.strerror or exc}") from exc
        if n != length:
            raise KafkaStorageError(f"{path}: {n} of {length} bytes at {position}: the file is "
                                    f"shorter than the region")
        return view

    def _fd(self, path: str, device: int, inode: int) -> int:
        key = (device, inode)
        now = time.monotonic()
        held = self._open.get(key)
        if held is not None:
            held[1] = now
            return held[0]
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise KafkaStorageError(f"{path}: {exc.strerror or exc}") from exc
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != key:
            os.close(fd)
            raise KafkaStorageError(f"{path} is not the file the leader read (device {device}, "
                                    f"inode {inode})")
        while len(self._open) >= MAX_OPEN:
            self._close(min(self._open, key=lambda k: self._open[k][1]))
        self._open[key] = [fd, now]
        return fd

    def close_idle(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for key in [k for k, (_, used) in self._open.items() if now - used > IDLE_CLOSE_S]:
            self._close(key)

    def _close(self, key) -> None:
        held = self._open.pop(key, None)
        if held is not None:
            os.close(held[0])

    @property
    def open_count(self) -> int:
        return len(self._open)

    def close(self) -> None:
        for key in list(self._open):
            self._close(key)
        self._buffer = bytearray()
