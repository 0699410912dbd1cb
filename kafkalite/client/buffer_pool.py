"""Buffers kept for reuse once nothing refers to them any more.

A client writes large byte runs into fresh memory over and over: the
producer's sender a built batch, a TCP link a fetch answer. On a VM that
hands freed memory back to its host, every first touch of a page faults
(and bytearray(n) zeroes it first). A ``BufferPool`` keeps a few
bytearrays and hands one out again when its refcount says nothing else
holds it: every memoryview of it (a batch being sent zero-copy by ZeroMQ,
an answer's records being decoded) keeps a reference, so a buffer still in
use is never given out.

A ``SpareShelf`` carries buffers from a pool whose owner is done to the
next pool made in the process: a Spark worker reads each task's offset
range through a new consumer, and each new TCP link zeroed (and faulted
in) buffers of its own for the first answers, some 10-20 ms a task on
the development VM.

Who may call: one thread per pool (its owner: the sender thread, a link's
owner); a shelf from any thread (it has a lock). It imports nothing of
kafkalite.
"""
from __future__ import annotations

import sys
import threading

# sys.getrefcount(self.kept[i]) of a kept buffer nothing else refers to:
# the pool's list and getrefcount's own argument
_FREE_REFS = 2


class BufferPool:
    def __init__(self, count: int, max_bytes: int):
        """At most ``count`` buffers kept, none over ``max_bytes``."""
        self.count = count
        self.max_bytes = max_bytes
        self.kept: list[bytearray] = []

    def take(self, size: int) -> bytearray:
        """A bytearray of at least ``size`` bytes that nothing refers to: the
        smallest such kept one, or a new one (``size`` rounded up to an
        eighth of the next power of two, so that about the same sizes share
        buffers while a new one is at most a quarter larger than asked:
        every byte of it is zeroed, that is touched), kept in place of a free
        one when ``count`` are kept, not kept when all are in use or it is
        over ``max_bytes``."""
        kept = self.kept
        best = -1
        for i in range(len(kept)):
            if len(kept[i]) >= size and sys.getrefcount(kept[i]) <= _FREE_REFS and (
                    best < 0 or len(kept[i]) < len(kept[best])):
                best = i
        if best >= 0:
            return kept[best]
        if size > self.max_bytes:
            return bytearray(size)
        buf = bytearray(min(rounded(size), self.max_bytes))
        if len(kept) >= self.count:
            for i in range(len(kept)):
                if sys.getrefcount(kept[i]) <= _FREE_REFS:
                    del kept[i]
                    break
            else:
                return buf
        kept.append(buf)
        return buf


def rounded(size: int) -> int:
    """``size`` rounded up to a multiple of an eighth of the power of two at
    or above it (1000 -> 1024, 5000 -> 5120, 16.7 MB -> 20 MiB)."""
    step = max(1, (1 << (max(size, 1) - 1).bit_length()) >> 3)
    return -(-size // step) * step


class SpareShelf:
    """Buffers of pools whose owners are done, for the next pools made."""

    def __init__(self, count: int):
        """At most ``count`` buffers on the shelf."""
        self.count = count
        self._lock = threading.Lock()
        self._buffers: list[bytearray] = []

    def put(self, pool: BufferPool) -> None:
        """What ``pool`` keeps, onto the shelf while there is room (its owner
        is done with it; a buffer something still refers to goes too: a
        pool hands out only free ones)."""
        with self._lock:
            room = self.count - len(self._buffers)
            if room > 0:
                self._buffers += pool.kept[:room]
        pool.kept = []

    def stock(self, pool: BufferPool) -> BufferPool:
        """``pool`` (a new one) given up to its count of the shelf's buffers
        under its size cap; the pool, for chaining."""
        with self._lock:
            fits, rest = [], []
            for b in self._buffers:
                (fits if len(fits) < pool.count and len(b) <= pool.max_bytes else rest).append(b)
            self._buffers = rest
        pool.kept = fits
        return pool
