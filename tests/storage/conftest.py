"""Fixtures for storage tests: real logs in tmp dirs, batches built with the
real codec, and a controllable clock for retention/compaction timing."""
import os

import pytest

from kafkalite._ext.batch_scan import scan_log
from kafkalite.record import RecordBatchBuilder, decode_columns
from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.tools.verify import verify_partition


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def child_env(**extra):
    """Environment for child Python processes: this checkout importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = REPO_ROOT + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


class Clock:
    """Milliseconds that only move when a test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000):
        self.now = now_ms

    def __call__(self) -> int:
        return self.now

    def advance(self, ms: int) -> None:
        self.now += ms


@pytest.fixture
def clock():
    return Clock()


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


@pytest.fixture
def open_log(tmp_path, clock):
    """open_log(name="t-0", clock=..., **topic_config) -> PartitionLog; all closed at teardown."""
    opened = []

    def _open(name="t-0", use_clock=None, **props):
        cfg = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
        plog = PartitionLog.open(str(tmp_path / name), cfg, clock=use_clock or clock)
        opened.append(plog)
        return plog

    yield _open
    for plog in opened:
        try:
            plog.close()
        except Exception:
            pass
