"""A bench producer's unacknowledged sends, without an object per send.

Each send call the runner makes takes a slot of a ring made once, before
the run: the slot keeps what the acknowledgement needs (how many messages,
their intended send times) in preallocated lists, and its ``on_ack`` is a
callable made with the ring. Sending allocates nothing the collector
tracks (a stamp is an int, several are an ndarray: neither is tracked).

Why: a callback made per send (a closure and its cells) lives until its
acknowledgement; CPython runs a collection whenever 700 more tracked
objects were made than freed since the last (its generation-0
threshold), and those still alive then move to older generations, which
later collections walk again. The
messages in flight grow with the acknowledgement latency, so a producer
that fell behind ran the collector more, fell further behind and held more
in flight (issue 46: 74-102 collections in runs with an end-to-end p99
under 27 ms, 851-1,357 with 4-9 full ones in runs over 100 ms).

Contract: ``take(stamp, count)`` returns a slot's ``on_ack`` for ``count``
messages whose intended send times are ``stamp`` (an int, count 1) or an
int64 array; the driver calls it once, in any order against other slots,
with no arguments or as a delivery callback ``(err, report)`` -- an error
raises, as a failed delivery fails the run; a report with a ``count``
below the send's (a client that cut it into several batches, reported in
order) acknowledges that many of its messages, the first. A slot is free again once its
acknowledgement came; ``take`` on a slot still in use is the caller's bug:
``free()`` says whether the next one is free (the runner polls until it
is, the back-pressure of a client with that many sends in flight).
Single-threaded: the runner's thread sends and serves acknowledgements.
"""
from __future__ import annotations

import functools
import gc
import time

SLOTS = 16_384      # sends in flight per producer, at most (3 s of 5,000 single sends)


class AckSlots:
    def __init__(self, slots: int = SLOTS):
        # made before the run (and before gc.freeze in a bench child): start() gives the rest
        self.warm_end = 0
        self.publish = None             # recorder.LatencyRecorder: ack time - intended time
        self.timeline = None            # recorder.LatencyTimeline: the same, warm-up too, by time
        self.outstanding = 0            # messages sent and not acknowledged
        self.acked = 0
        self._stamps: list = [None] * slots     # an int (one message) or an int64 array
        self._counts = [0] * slots              # 0: the slot is free
        self._next = 0
        ack = self._ack
        # C calls, a few ms; without the ~20 collections 16,384 new objects
        # would run, which in a process with a large heap (a test run's)
        # walk it too
        enabled = gc.isenabled()
        gc.disable()
        try:
            self.callbacks = [functools.partial(ack, i) for i in range(slots)]
        finally:
            if enabled:
                gc.enable()

    def start(self, warm_end: int, publish, timeline=None) -> "AckSlots":
        self.warm_end, self.publish, self.timeline = warm_end, publish, timeline
        self.acked = 0
        return self

    def free(self) -> bool:
        return self._counts[self._next] == 0

    def take(self, stamp, count: int):
        slot = self._next
        if self._counts[slot]:
            raise RuntimeError(f"ack slot {slot} is still in flight")
        self._stamps[slot] = stamp
        self._counts[slot] = count
        self._next = (slot + 1) % len(self._counts)
        self.outstanding += count
        return self.callbacks[slot]

    def _ack(self, slot: int, err=None, report=None) -> None:
        if err is not None:
            raise RuntimeError(f"delivery failed: {err}")
        count = self._counts[slot]
        if not count:
            raise RuntimeError(f"ack slot {slot} acknowledged twice")
        stamps = self._stamps[slot]
        part = getattr(report, "count", None)   # a client's BatchDelivery: its records
        if type(part) is int and 0 < part < count:
            # the client cut the send into several batches (batch.size), each
            # reported in order: this report is the first ``part`` messages
            self._stamps[slot], stamps = stamps[part:], stamps[:part]
            self._counts[slot] = count - part
            count = part
        else:
            self._counts[slot] = 0
            self._stamps[slot] = None
        self.outstanding -= count
        self.acked += count
        now = time.time_ns()
        if count == 1 and not hasattr(stamps, "shape"):
            if self.timeline is not None:
                self.timeline.add_one(now, now - stamps)
            if stamps >= self.warm_end:
                self.publish.add_one(now - stamps)
            return
        if self.timeline is not None:
            self.timeline.add(now, now - stamps)
        if stamps[0] >= self.warm_end and stamps[-1] >= self.warm_end:
            self.publish.add(now - stamps)
        else:
            self.publish.add(now - stamps[stamps >= self.warm_end])
