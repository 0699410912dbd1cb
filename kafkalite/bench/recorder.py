"""What a benchmark process measures, without Python work per message.

Every message value is ``messageSize`` bytes and starts with its intended
send time (``time.time_ns()``, int64 little-endian, 8 bytes): for a fixed
rate the time the schedule says it is due, not when the producer got round
to it, so a stall is charged to every message it delays (no coordinated
omission). All processes read the same clock, so a consumer in another
process subtracts it from its own ``time.time_ns()``.

``Payloads`` builds a batch of values as one contiguous block (numpy rows);
``stamps_of_block`` / ``stamps_of_values`` read the stamps back;
``LatencyRecorder`` folds latencies into an HdrHistogram (microseconds,
3 significant digits, up to an hour) in bulk, counted per bucket with
``np.bincount``, so 10^6 messages/s cost a few numpy calls, not 10^6
``record_value`` calls;
``RateSeries`` counts messages per time bucket for the throughput plots;
``LatencyTimeline`` counts latencies per time bucket in log-spaced bins,
so a run's p50, p99 and max can be read second by second (a run slow all
through, or one stall).

Who calls: kafkalite.bench.runner (in the producer and consumer processes)
and the drivers (to decode what they received).
"""
from __future__ import annotations

import numpy as np

from kafkalite.bench.workload import STAMP_BYTES, Workload

HIST_LOW_US, HIST_HIGH_US, HIST_DIGITS = 1, 3_600_000_000, 3
PERCENTILES = (("p50", 50.0), ("p99", 99.0), ("p999", 99.9))
# Latencies buffered before they are folded into the histogram: 8 MiB, 100 s
# at 10,000 msg/s, so a latency run folds after its measured period, not in
# it. A fold stalls the recording process: about 8 ms for a million here (the
# fold before this one took 48 ms for 200,000, every 200,000).
_CAPACITY = 1 << 20
_DENSE_US = 1 << 22      # latencies counted in one dense array up to 4.2 s (32 MiB at most)
_TEMPLATE_ROWS = 1024    # distinct values cycled through
_SMALL_BLOCK = 16        # values up to which a block is joined from bytes, not built in numpy


def new_histogram():
    from hdrh.histogram import HdrHistogram
    return HdrHistogram(HIST_LOW_US, HIST_HIGH_US, HIST_DIGITS)


class _Buffered:
    """Latencies (ns) buffered in one int64 array and handed to ``_record``
    in bulk: when the buffer fills, at ``fold``, or at once when one add is
    larger than the buffer."""

    def __init__(self, capacity: int):
        self._buf = np.empty(capacity, dtype=np.int64)   # untouched pages cost nothing
        self._n = 0

    def _push(self, latencies_ns) -> None:
        n = len(latencies_ns)
        if not n:
            return
        if self._n + n > len(self._buf):
            self.fold()
            if n > len(self._buf):
                self._record(np.asarray(latencies_ns, dtype=np.int64))
                return
        self._buf[self._n:self._n + n] = latencies_ns
        self._n += n

    def _push_one(self, latency_ns: int) -> None:
        if self._n == len(self._buf):
            self.fold()
        self._buf[self._n] = latency_ns
        self._n += 1

    def fold(self) -> None:
        if self._n:
            n, self._n = self._n, 0
            self._record(self._buf[:n])

    def _record(self, latencies_ns: np.ndarray) -> None:
        raise NotImplementedError


class LatencyRecorder(_Buffered):
    """Latencies (ns in, recorded as µs) into an HdrHistogram, folded in bulk:
    buffered, then counted per histogram bucket with ``np.bincount`` and
    recorded once per bucket that has any."""

    def __init__(self):
        super().__init__(_CAPACITY)
        self.hist = new_histogram()

    def add(self, latencies_ns: np.ndarray) -> None:
        self._push(latencies_ns)

    def add_one(self, latency_ns: int) -> None:
        """add() of a single latency, without building an array for it."""
        self._push_one(latency_ns)

    def _record(self, latencies_ns: np.ndarray) -> None:
        us = latencies_ns // 1000
        np.clip(us, HIST_LOW_US, HIST_HIGH_US, out=us)
        # how many of each value: counted densely below _DENSE_US (one pass,
        # no sort), the rare longer ones one by one
        longer = us >= _DENSE_US
        if longer.any():
            rest, us = us[longer], us[~longer]
        else:
            rest = us[:0]
        dense = np.bincount(us)
        values = np.flatnonzero(dense)
        counts = np.concatenate([dense[values], np.ones(len(rest), dtype=np.int64)])
        values = np.concatenate([values, rest])
        # HdrHistogram's bucket of a value (its counts index): with 3 digits,
        # 2,048 sub-buckets of 1 µs, then each bucket twice as wide with its
        # upper 1,024 sub-buckets; a value's bucket is its bit length past 11.
        # (HIST_LOW_US = 1: the histogram's unit is 1, unshifted.)
        half = self.hist.sub_bucket_half_count_magnitude
        shift = np.maximum(np.frexp(values.astype(np.float64))[1] - (half + 1), 0)
        per_index = np.bincount(((shift + 1) << half) + (values >> shift) - (1 << half),
                                weights=counts).astype(np.int64)
        index = np.flatnonzero(per_index)
        bucket = np.maximum((index >> half) - 1, 0)
        lowest = (index - (bucket << half)) << bucket
        for v, c in zip(lowest.tolist(), per_index[index].tolist()):
            self.hist.record_value(v, c)

    def encoded(self) -> str:
        """The histogram in HdrHistogram's compressed form (base64 text, picklable)."""
        self.fold()
        raw = self.hist.encode()
        return raw.decode() if isinstance(raw, bytes) else raw


def merge(encoded: list[str]):
    """One histogram from the encoded histograms of several processes."""
    from hdrh.histogram import HdrHistogram
    hist = new_histogram()
    for e in encoded:
        if e:
            hist.add(HdrHistogram.decode(e))
    return hist


def summary_ms(hist) -> dict:
    """count, p50 / p99 / p99.9 / max and mean in milliseconds (None when empty)."""
    n = hist.get_total_count()
    out = {"count": n}
    for name, q in PERCENTILES:
        out[name] = hist.get_value_at_percentile(q) / 1000 if n else None
    out["max"] = hist.get_max_value() / 1000 if n else None
    out["mean"] = hist.get_mean_value() / 1000 if n else None
    return out


class RateSeries:
    """Messages counted per ``width_s`` bucket from ``t0_ns``."""

    def __init__(self, t0_ns: int, width_s: float):
        self.t0, self.width = t0_ns, int(width_s * 1e9)
        self.counts: list[int] = []

    def add(self, now_ns: int, n: int) -> None:
        b = max(0, (now_ns - self.t0) // self.width)
        if b >= len(self.counts):
            self.counts.extend([0] * (b + 1 - len(self.counts)))
        self.counts[b] += n


# The timeline's latency bins: 10 µs to 100 s, 20 a decade (each 12% wider
# than the one before), and one past each end.
TIMELINE_EDGES_NS = np.round(10.0 ** np.arange(4.0, 11.0001, 0.05)).astype(np.int64)
_TIMELINE_BUFFER = 1 << 16


class LatencyTimeline(_Buffered):
    """Latencies by when they were recorded, in buckets of ``width_s`` from
    ``t0_ns``: per bucket a count per bin of TIMELINE_EDGES_NS and the
    largest. Latencies are buffered while their bucket is current and
    counted when it changes (or the buffer fills): one ``np.searchsorted``
    and ``np.bincount`` a bucket, not a numpy call per message."""

    def __init__(self, t0_ns: int, width_s: float):
        super().__init__(_TIMELINE_BUFFER)
        self.t0, self.width = t0_ns, int(width_s * 1e9)
        self.bins: list[np.ndarray] = []
        self.maxima: list[int] = []
        self._bucket = 0        # the bucket what is buffered belongs to

    def add(self, now_ns: int, latencies_ns) -> None:
        if len(latencies_ns):
            self._at(now_ns)
            self._push(latencies_ns)

    def add_one(self, now_ns: int, latency_ns: int) -> None:
        self._at(now_ns)
        self._push_one(latency_ns)

    def _at(self, now_ns: int) -> None:
        b = max(0, (now_ns - self.t0) // self.width)
        if b != self._bucket:
            self.fold()
            self._bucket = b

    def _record(self, latencies_ns: np.ndarray) -> None:
        b = self._bucket
        while b >= len(self.bins):
            self.bins.append(np.zeros(len(TIMELINE_EDGES_NS) + 1, dtype=np.int64))
            self.maxima.append(0)
        self.bins[b] += np.bincount(np.searchsorted(TIMELINE_EDGES_NS, latencies_ns,
                                                    side="right"),
                                    minlength=len(TIMELINE_EDGES_NS) + 1)
        self.maxima[b] = max(self.maxima[b], int(latencies_ns.max()))

    def encoded(self) -> dict:
        """Picklable: {"bins": [per bucket, its counts], "max": [ns]}."""
        self.fold()
        return {"bins": [b.tolist() for b in self.bins], "max": self.maxima}


def timeline_ms(encoded: list[dict]) -> dict:
    """Timelines of several processes merged: per bucket the count, p50 and
    p99 in ms (the upper edge of the bin each falls in, so up to 12% above
    the latency itself) and the max (exact); None in a bucket with none."""
    n = max((len(e["bins"]) for e in encoded), default=0)
    counts = np.zeros((n, len(TIMELINE_EDGES_NS) + 1), dtype=np.int64)
    maxima = np.zeros(n, dtype=np.int64)
    for e in encoded:
        if e["bins"]:
            counts[:len(e["bins"])] += np.asarray(e["bins"], dtype=np.int64)
            maxima[:len(e["max"])] = np.maximum(maxima[:len(e["max"])], e["max"])
    upper = np.append(TIMELINE_EDGES_NS, maxima.max() if n else 0) / 1e6
    out: dict = {"count": counts.sum(axis=1).tolist(), "p50": [], "p99": [],
                 "max": [None] * n}
    for i in range(n):
        total = int(counts[i].sum())
        if not total:
            out["p50"].append(None)
            out["p99"].append(None)
            continue
        cumulative = np.cumsum(counts[i])
        for name, q in (("p50", 0.5), ("p99", 0.99)):
            k = int(np.searchsorted(cumulative, q * total))
            out[name].append(min(float(upper[k]), float(maxima[i]) / 1e6))
        out["max"][i] = float(maxima[i]) / 1e6
    return out


class Payloads:
    """Values of ``messageSize`` bytes, a batch at a time as one block:
    rows of a random (or payloadFile) template with the stamp written over
    the first 8 bytes of each."""

    def __init__(self, workload: Workload, seed: int):
        size = workload.message_size
        rng = np.random.default_rng(seed)
        if workload.payload:
            src = np.frombuffer(workload.payload, dtype=np.uint8)
            reps = -(-size * _TEMPLATE_ROWS // len(src))
            flat = np.tile(src, reps)[:size * _TEMPLATE_ROWS]
        else:
            flat = rng.integers(0, 256, size * _TEMPLATE_ROWS, dtype=np.uint8)
        self.template = flat.reshape(_TEMPLATE_ROWS, size)
        self.size = size
        self._next = 0
        # each row past its stamp, as bytes: a block of a few values is
        # joined from these (at 10,000 msg/s a producer sends one at a time,
        # and numpy's fixed cost per call would be most of the harness's CPU)
        self._tails = [row[STAMP_BYTES:].tobytes() for row in self.template] \
            if size > STAMP_BYTES else None

    def one(self, stamp: int) -> bytes:
        """block() of a single value stamped ``stamp``."""
        row, self._next = self._next, (self._next + 1) % _TEMPLATE_ROWS
        head = stamp.to_bytes(STAMP_BYTES, "little", signed=True)
        if self._tails is None:
            return head[:self.size]
        return head + self._tails[row]

    def block(self, stamps: np.ndarray) -> bytes:
        n = len(stamps)
        if n <= _SMALL_BLOCK and self._tails is not None:
            first, tails = self._next, self._tails
            self._next = (first + n) % _TEMPLATE_ROWS
            return b"".join(stamp.to_bytes(STAMP_BYTES, "little", signed=True)
                            + tails[(first + i) % _TEMPLATE_ROWS]
                            for i, stamp in enumerate(stamps.tolist()))
        rows = self.template[(self._next + np.arange(n)) % _TEMPLATE_ROWS]
        self._next = (self._next + n) % _TEMPLATE_ROWS
        rows[:, :STAMP_BYTES] = np.asarray(stamps, dtype="<i8").view(np.uint8).reshape(n, STAMP_BYTES)
        return rows.tobytes()


def split(block, size: int) -> list[bytes]:
    """The values of a block (for clients that take one value per call)."""
    mv = memoryview(block)
    return [bytes(mv[i:i + size]) for i in range(0, len(mv), size)]


def stamps_of_block(block, size: int) -> np.ndarray:
    """The stamps of a block of whole ``size``-byte values (a multiple of size)."""
    rows = np.frombuffer(block, dtype=np.uint8).reshape(-1, size)
    return np.ascontiguousarray(rows[:, :STAMP_BYTES]).view("<i8").ravel()


def stamps_of_values(values) -> np.ndarray:
    """The stamps of separate values (bytes-like, each at least 8 bytes)."""
    if not values:
        return np.empty(0, dtype=np.int64)
    return np.frombuffer(b"".join(bytes(v[:STAMP_BYTES]) for v in values), dtype="<i8")


def stamps_of_arrow(column) -> np.ndarray:
    """The stamps of a pyarrow binary column, from its buffers (no per-row Python)."""
    import pyarrow as pa
    if isinstance(column, pa.ChunkedArray):
        parts = [stamps_of_arrow(c) for c in column.chunks]
        return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)
    n = len(column)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    bufs = column.buffers()
    offsets = np.frombuffer(bufs[1], dtype=np.int32)[column.offset:column.offset + n]
    data = np.frombuffer(bufs[2], dtype=np.uint8)
    idx = offsets[:, None] + np.arange(STAMP_BYTES)
    return np.ascontiguousarray(data[idx]).view("<i8").ravel()
