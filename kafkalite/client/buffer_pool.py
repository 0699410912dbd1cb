"""Buffers kept for reuse once nothing refers to them any more.

A client writes large byte runs into fresh memory over and over: the
producer's sender a built batch, a TCP link a fetch answer. On a VM that
hands freed memory back to its host, every first touch of a page faults
(and bytearray(n) zeroes it first). A ``BufferPool`` keeps a few
bytearrays and hands one out again when its refcount says nothing else
holds it: every memoryview of it (a batch being sent zero-copy by ZeroMQ,
an answer's records being decoded) keeps a reference, so a buffer still in
use is never given out.

Who may call: one thread per pool (its owner: the sender thread, a link's
owner). It imports nothing of kafkalite.
"""
from __future__ import annotations

import sys

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
        smallest such kept one, or a new one (a power of two long, so that
        about the same sizes share buffers), kept in place of a free one
        when ``count`` are kept, not kept when all are in use or it is over
        ``max_bytes``."""
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
        buf = bytearray(min(1 << (size - 1).bit_length(), self.max_bytes))
        if len(kept) >= self.count:
            for i in range(len(kept)):
                if sys.getrefcount(kept[i]) <= _FREE_REFS:
                    del kept[i]
                    break
            else:
                return buf
        kept.append(buf)
        return buf
