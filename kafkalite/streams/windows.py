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


class JoinWindows:
    """The time bound of a stream-stream join (Kafka's JoinWindows): a
    left record at t joins right records of its key with timestamps in
    [t - before, t + after] (a right record at t: left records in
    [t - after, t + before]). ``grace``: how long after a window closes a
    late record is still taken; a record whose timestamp is at or before
    stream time - (before + after + grace) is dropped, and the join's
    stores keep records that long (their retention)."""

    def __init__(self, before_ms: int, after_ms: int, grace_ms: int):
        if before_ms < 0 or after_ms < 0 or before_ms + after_ms <= 0:
            raise ValueError("a join window's time difference must be positive")
        if grace_ms < 0:
            raise ValueError("the grace period cannot be negative")
        self.before_ms, self.after_ms, self.grace_ms = before_ms, after_ms, grace_ms

    @classmethod
    def of_time_difference_and_grace(cls, difference, grace) -> JoinWindows:
        return cls(_ms(difference), _ms(difference), _ms(grace))

    @classmethod
    def of_time_difference_without_grace(cls, difference) -> JoinWindows:
        return cls(_ms(difference), _ms(difference), 0)

    def before(self, before) -> JoinWindows:
        return JoinWindows(_ms(before), self.after_ms, self.grace_ms)

    def after(self, after) -> JoinWindows:
        return JoinWindows(self.before_ms, _ms(after), self.grace_ms)

    @property
    def retention_ms(self) -> int:
        return self.before_ms + self.after_ms + self.grace_ms

    def __repr__(self):
        return (f"JoinWindows(before={self.before_ms}ms, after={self.after_ms}ms, "
                f"grace={self.grace_ms}ms)")


class SessionWindows:
    """Session windows (Kafka's SessionWindows): a key's records closer than
    ``gap`` to each other form one session [first timestamp, last
    timestamp]; a record that falls within ``gap`` of two sessions merges
    them into one. A record is late, dropped and counted, when the session
    it would end up in ends before stream time - grace (Kafka's
    KStreamSessionWindowAggregate)."""

    def __init__(self, gap_ms: int, grace_ms: int):
        if gap_ms <= 0:
            raise ValueError("a session window's inactivity gap must be positive")
        if grace_ms < 0:
            raise ValueError("the grace period cannot be negative")
        self.gap_ms, self.grace_ms = gap_ms, grace_ms

    @classmethod
    def of_inactivity_gap_with_no_grace(cls, gap) -> SessionWindows:
        return cls(_ms(gap), 0)

    @classmethod
    def of_inactivity_gap_and_grace(cls, gap, grace) -> SessionWindows:
        return cls(_ms(gap), _ms(grace))

    with_inactivity_gap_and_grace = of_inactivity_gap_and_grace

    @property
    def least_retention_ms(self) -> int:
        return self.gap_ms + self.grace_ms

    def __repr__(self):
        return f"SessionWindows(gap={self.gap_ms}ms, grace={self.grace_ms}ms)"


class SlidingWindows:
    """Sliding windows (Kafka's SlidingWindows, KIP-450): windows of
    ``time_difference`` defined by the records, not by the epoch: a record
    at t has a left window [t - difference, t] and, once a later record of
    its key falls within difference + 1 after it, a right window [t + 1,
    t + 1 + difference]; both ends are inclusive. Records earlier than the
    difference share the window [0, difference]. A record is dropped when
    t + 1 + difference <= stream time - grace; a window ending before
    stream time - grace is no longer updated (the record counted as
    dropped for it)."""

    def __init__(self, difference_ms: int, grace_ms: int):
        if difference_ms <= 0:
            raise ValueError("a sliding window's time difference must be positive")
        if grace_ms < 0:
            raise ValueError("the grace period cannot be negative")
        self.difference_ms, self.grace_ms = difference_ms, grace_ms

    @classmethod
    def of_time_difference_with_no_grace(cls, difference) -> SlidingWindows:
        return cls(_ms(difference), 0)

    @classmethod
    def of_time_difference_and_grace(cls, difference, grace) -> SlidingWindows:
        return cls(_ms(difference), _ms(grace))

    @property
    def least_retention_ms(self) -> int:
        # Kafka's rule: the store is searched back to t - 2 * difference
        return 2 * self.difference_ms + self.grace_ms

    def __repr__(self):
        return f"SlidingWindows(difference={self.difference_ms}ms, grace={self.grace_ms}ms)"
