"""Helpers for storage tests: batches built with the real codec, reading a
log back, verifying it with the verify tool, and a controllable clock."""
import os

from kafkalite._ext.batch_scan import scan_log
from kafkalite.record import RecordBatchBuilder, decode_columns
from kafkalite.tools.verify import verify_partition
from harness import child_env  # noqa: F401  (re-exported for the storage tests)


class Clock:
    """Milliseconds that only move when a test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now = now_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


def batch(values, keys=None, timestamp=1_000, compression=0, headers=None):
    """One RecordBatch v2 (bytes) with the given values (and keys)."""
    b = RecordBatchBuilder(compression)
    for i, v in enumerate(values):
        ts = timestamp[i] if isinstance(timestamp, (list, tuple)) else timestamp
        b.append(ts, None if keys is None else keys[i], v, headers)
    return b.build()


def read_all(plog, start=None, max_bytes=1 << 20, max_offset=None):
    """Every record from ``start`` (default: log start) to the end, as
    (offset, timestamp, key, value, headers) tuples, through read() + decode."""
    offset = plog.log_start_offset if start is None else start
    out = []
    while offset < plog.log_end_offset:
        fetched = plog.read(offset, max_bytes, max_offset=max_offset)
        if fetched.region is None:
            break
        cols = decode_columns(fetched.read(), verify_crc=True)
        for o, ts, _tt, k, v, h in cols.to_records():
            if o >= offset:
                out.append((o, ts, k, v, h))
        if cols.next_offset <= offset:
            raise AssertionError(f"read at {offset} made no progress")
        offset = cols.next_offset
    return out


def verify_segments(plog_or_dir, contiguous=True):
    """Every problem ``kafkalite verify --deep`` finds in the partition
    (CRCs, record framing, every index entry, checkpoints), plus offset
    contiguity when ``contiguous``; an empty list for a healthy log."""
    directory = plog_or_dir if isinstance(plog_or_dir, (str, os.PathLike)) else plog_or_dir.directory
    report = verify_partition(str(directory), deep=True)
    problems = list(report.errors)
    logs = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    for name in logs:
        with open(os.path.join(directory, name), "rb") as f:
            data = f.read()
        scan = scan_log(data, min_offset=int(name[:20]), contiguous=contiguous, deep=True)
        if scan.error:
            problems.append(f"{name}: {scan.error}")
    return problems


