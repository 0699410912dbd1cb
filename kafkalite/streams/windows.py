"""TimeWindows: tumbling and hopping windows with a grace period, as arrays.

A hopping window of ``size`` advancing by ``advance`` (tumbling: advance ==
size) starts at every multiple of ``advance`` >= 0; a record with timestamp t
belongs to every window with start <= t < start + size (Kafka's
TimeWindows.windowsFor). Windows are closed by stream time (the largest
timestamp the task has seen, the record's own included): a record is added
to a window only while window_end > stream_time - grace, as Kafka Streams'
windowed aggregate decides; otherwise it is dropped for that window and
counted in the task's ``dropped_records`` (Kafka's dropped-records metric).
"""
from __future__ import annotations

import datetime

import numpy as np


def _ms(d) -> int:
    if isinstance(d, datetime.timedelta):
        return int(d.total_seconds() * 1000)
    return int(d)


class TimeWindows:
    def __init__(self, size_ms: int, advance_ms: int, grace_ms: int):
        if size_ms <= 0:
            raise ValueError("a window's size must be positive")
        if not 0 < advance_ms <= size_ms:
            raise ValueError("a window's advance must be positive and at most its size")
        if grace_ms < 0:
            raise ValueError("the grace period cannot be negative")
        self.size_ms, self.advance_ms, self.grace_ms = size_ms, advance_ms, grace_ms

    @classmethod
    def of_size_with_no_grace(cls, size) -> TimeWindows:
        return cls(_ms(size), _ms(size), 0)

    @classmethod
    def of_size_and_grace(cls, size, grace) -> TimeWindows:
        return cls(_ms(size), _ms(size), _ms(grace))

    def advance_by(self, advance) -> TimeWindows:
        """Hopping windows."""
        return TimeWindows(self.size_ms, _ms(advance), self.grace_ms)

    def windows_for(self, timestamp: int) -> list[int]:
        """Window starts of one timestamp (the plain-Python reference)."""
        start = max(0, timestamp - self.size_ms + self.advance_ms) // self.advance_ms \
            * self.advance_ms
        out = []
        while start <= timestamp:
            out.append(start)
            start += self.advance_ms
        return out

    def assign(self, timestamps: np.ndarray, stream_times: np.ndarray):
        """Every (row, window start) pair of the records, and whether it is
        accepted (window_end > stream_time - grace). Returns (rows, starts,
        accepted), three arrays of one length."""
        ts = np.asarray(timestamps, dtype=np.int64)
        last = ts - ts % self.advance_ms          # the latest window holding each record
        per = -(-self.size_ms // self.advance_ms)
        rows = np.repeat(np.arange(len(ts)), per)
        starts = np.repeat(last, per) - np.tile(np.arange(per, dtype=np.int64) * self.advance_ms,
                                                len(ts))
        keep = (starts >= 0) & (starts + self.size_ms > ts[rows])
        rows, starts = rows[keep], starts[keep]
        accepted = starts + self.size_ms > np.asarray(stream_times, dtype=np.int64)[rows] \
            - self.grace_ms
        return rows, starts, accepted

    def __repr__(self):
        return (f"TimeWindows(size={self.size_ms}ms, advance={self.advance_ms}ms, "
                f"grace={self.grace_ms}ms)")
