"""A Consumer's fetch state per partition (consumer.py): where the
application is and where fetching is (``_Assigned``), and the fetched
bytes of a partition consumed batch by batch (``_Chunk``). Who uses it: the
Consumer, on the application's thread; nothing here is thread-safe."""
from __future__ import annotations

from kafkalite.record import AbortedFilter


class _Assigned:
    """Per partition: where the application is (``position``, the next
    offset to deliver) and where fetching is (``fetch_position``, the next
    offset to request); fetched-but-undelivered chunks sit between them."""
    __slots__ = ("position", "fetch_position", "paused", "high_watermark", "log_start",
                 "buffered")

    def __init__(self, position):
        self.position = position      # None or < 0: to be resolved (auto.offset.reset / -1 / -2)
        self.fetch_position = position
        self.paused = False
        self.high_watermark = -1
        self.log_start = -1
        self.buffered = 0             # bytes of chunks not yet delivered


class _Chunk:
    """Fetched bytes of one partition, consumed batch by batch. With
    read_committed, ``aborted`` is the fetch's aborted transactions for the
    partition (their batches are dropped, by ``skip``)."""

    __slots__ = ("tp", "data", "pos", "current", "pending", "taken", "after", "aborted", "skip")

    def __init__(self, tp, data, aborted=None):
        self.tp = tp
        self.data = data
        self.pos = 0                         # byte position of the next undecoded batch
        self.current = 0                     # byte position of the batch ``pending`` came from
        self.pending = []                    # Messages of that batch ...
        self.taken = 0                       # ... of which this many were returned
        self.after = None                    # the position after that batch, until applied
        self.aborted = aborted
        self.skip = None if aborted is None else AbortedFilter(aborted)

    def unfinished(self) -> bool:
        """Part-way through a batch (poll() returned some of it)."""
        return self.taken < len(self.pending) or self.after is not None
