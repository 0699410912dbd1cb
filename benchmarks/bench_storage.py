#!/usr/bin/env python
"""Storage and codec benchmark: kafkalite's write, read, checksum and
large-log paths, each measured next to a baseline or peer in the same run.

    python benchmarks/bench_storage.py             # full run (10M records, 10 GiB log)
    python benchmarks/bench_storage.py --quick     # seconds; what the smoke test runs

What is measured (see benchmarks/README.md for the meaning of every figure):

1. PartitionLog.append of prebuilt RecordBatch v2 batches (1,000 records of
   100-byte values each) against a plain ``os.write`` loop of the same
   bytes to a plain file; the cost of building the batches
   (RecordBatchBuilder.append_values + build); build + append together.
2. Reading the whole log back with PartitionLog.read + FileRegion.read +
   decode_columns, against read-only, decode-only and a plain ``os.pread``
   loop over the segment files.
3. CRC-32C GB/s: our hardware path, our software path, our dispatcher and
   the ``crc32c`` PyPI package on the same buffer.
4. Append throughput over the same window of bytes on a ~1 MB log and on a
   --big-log-bytes (default 10 GiB) log.
5. One-record appends (issue 46: 100 partitions of one-record batches):
   microseconds of CPU per PartitionLog.append of a batch of one
   ``--one-record-value-bytes`` (1 KB) record, plain and from an idempotent
   producer (increasing sequences, so every append goes through the
   producer-state check and update), beside an ``os.pwrite`` of the same
   bytes at the file's end: the ceiling, what any append must cost. To one
   log, and to ``--one-record-partitions`` (100) logs (files) in turn, as
   a worker's appends go: each then finds its log's objects out of cache.

Timing uses time.perf_counter with the garbage collector paused (as timeit
does); every figure is the best of --repeats runs. fsync and log close are
outside the timed sections. A benchmark never fails on timing: the exit
status is 0 whenever the run completed, non-zero only for real errors.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import common  # noqa: E402
import report  # noqa: E402
from report import (GB, MB, GiB, KiB, MiB, Progress, Results, human_bytes,  # noqa: E402
                    parse_size, quiesce, say, timed, timed_both, warn)

from kafkalite._ext import crc32c as kl_crc  # noqa: E402
from kafkalite.record import RecordBatchBuilder, decode_columns  # noqa: E402
from kafkalite.storage import LogConfig, PartitionLog  # noqa: E402

try:
    import crc32c as crc32c_pkg
except ImportError:  # the peer is optional; its row then says so
    crc32c_pkg = None

HEADROOM = 2 * GiB         # free disk kept beyond the big log

TARGET_RECORDS_PER_S = 5_000_000
TARGET_APPEND_VS_WRITE = 0.80
TARGET_CRC_GB_PER_S = 5.0
TARGET_BIG_LOG_TOLERANCE = 0.10

QUICK = dict(records=200_000, big_log_bytes=4 * MiB, small_log_bytes=256 * KiB,
             window_bytes=1 * MiB, crc_bytes=8 * MiB, pool_bytes=16 * MiB,
             one_record_appends=2_000, one_record_partitions=10)

HEADERS = ["#", "Figure", "kafkalite", "Baseline / peer", "vs base", "Target", "Met"]


# ---- the data -------------------------------------------------------------------------

class Workload:
    """Prebuilt batches: ``pool_bytes`` (bytes, what a producer request
    hands the broker) and ``pool_mut`` (bytearray copies of the same, which
    PartitionLog.append patches in place without copying), cycled through
    when more batches are appended than the pool holds."""

    def __init__(self, batch_records: int, value_bytes: int, pool_bytes: int, n_batches: int):
        self.batch_records = batch_records
        self.value_bytes = value_bytes
        self.timestamp = int(time.time() * 1000)
        # A handful of distinct value lists feeds the builder.
        self.values = [[os.urandom(value_bytes) for _ in range(batch_records)]
                       for _ in range(4)]
        builder = RecordBatchBuilder(0)
        first = self.build(builder, 0)
        self.batch_size = len(first)
        pool_n = max(1, min(n_batches, pool_bytes // self.batch_size))
        self.pool_bytes = [first] + [self.build(builder, i) for i in range(1, pool_n)]
        self.pool_mut = [bytearray(b) for b in self.pool_bytes]
        if any(len(b) != self.batch_size for b in self.pool_bytes):
            raise RuntimeError("batches of one workload must have one size")

    def build(self, builder: RecordBatchBuilder, i: int) -> bytes:
        builder.reset()
        vals = self.values[i % len(self.values)]
        if i >= len(self.values):  # rotate so that pool entries are distinct
            r = (i // len(self.values)) % len(vals)
            vals = vals[r:] + vals[:r]
        builder.append_values(vals, timestamp=self.timestamp)
        return builder.build()

    @property
    def record_bytes(self) -> float:
        return self.batch_size / self.batch_records


def log_config(segment_bytes: int) -> LogConfig:
    return LogConfig.from_properties({"segment.bytes": segment_bytes})


def append_batches(log: PartitionLog, pool, n: int) -> None:
    append, p = log.append, len(pool)
    for i in range(n):
        append(pool[i % p])


def fill_log(log: PartitionLog, pool, target_bytes: int, batch_size: int,
             progress: Progress | None = None) -> int:
    """Append batches until the log holds >= target_bytes; returns batches appended."""
    n = max(1, -(-target_bytes // batch_size))
    append, p = log.append, len(pool)
    step = max(1, n // 200)
    for i in range(n):
        append(pool[i % p])
        if progress is not None and i % step == 0:
            progress.update(i * batch_size)
    if progress is not None:
        progress.finish(n * batch_size)
    return n


# ---- 1. append -------------------------------------------------------------------------

def bench_append(args, wl: Workload, work: str, res: Results) -> str:
    """Returns the directory of a log holding the whole data set (for test 2)."""
    n = args.records // args.batch_records
    data_bytes = n * wl.batch_size
    cfg = log_config(args.segment_bytes)
    say(f"[1] append: {n:,} batches x {args.batch_records:,} records "
        f"({wl.batch_size:,} bytes/batch, {human_bytes(data_bytes)}), pool of "
        f"{len(wl.pool_bytes):,} distinct batches, best of {args.repeats}")
    runs = {k: [] for k in ("plain", "append_mut", "append_bytes", "build", "build_append")}
    builder = RecordBatchBuilder(0)
    values, ts = wl.values, wl.timestamp

    # Untimed warm-up of every path (first-touch of code, allocator, files).
    warm = min(n, 64)
    wpath = os.path.join(work, "warmup.bin")
    with open(wpath, "wb") as f:
        for b in wl.pool_bytes[:warm]:
            f.write(b)
    os.unlink(wpath)
    wlog = PartitionLog.open(os.path.join(work, "warmup", "bench-0"), cfg)
    append_batches(wlog, wl.pool_mut, warm)
    append_batches(wlog, wl.pool_bytes, warm)
    wlog.close()
    shutil.rmtree(os.path.join(work, "warmup"))

    keep = [None]  # the latest bytearray-append log, read back by test 2

    def discard(path):
        # Deleted right away, between runs: the kernel then reuses the freed
        # page-cache pages for the next run, which (on VMs that hand free memory
        # back to the host) is much faster than touching fresh memory, and it
        # keeps disk use at two copies of the data set.
        if os.path.isdir(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)

    def plain(r):
        """A plain os.write loop of the same bytes to a plain file."""
        path = os.path.join(work, f"plain-{r}.bin")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            def plain_loop(pool=wl.pool_bytes, p=len(wl.pool_bytes)):
                write = os.write
                for i in range(n):
                    b = pool[i % p]
                    if write(fd, b) != len(b):
                        raise OSError("short write to the plain file")
            quiesce()
            runs["plain"].append(timed(plain_loop))
            os.fsync(fd)
        finally:
            os.close(fd)
        discard(path)

    def append_mut(r):
        """PartitionLog.append of bytearrays (patched in place, no copy)."""
        d = os.path.join(work, f"append-{r}", "bench-0")
        log = PartitionLog.open(d, cfg)
        quiesce()
        runs["append_mut"].append(timed(lambda: append_batches(log, wl.pool_mut, n)))
        if log.log_end_offset != n * args.batch_records:
            raise RuntimeError(f"log end {log.log_end_offset}, expected {n * args.batch_records}")
        log.close()
        if keep[0] is not None:
            discard(os.path.dirname(keep[0]))
        keep[0] = d

    def append_bytes(r):
        """PartitionLog.append of bytes (append copies each into a bytearray)."""
        d = os.path.join(work, f"append-bytes-{r}", "bench-0")
        log = PartitionLog.open(d, cfg)
        quiesce()
        runs["append_bytes"].append(timed(lambda: append_batches(log, wl.pool_bytes, n)))
        log.close()
        discard(os.path.dirname(d))

    def build(r):
        """RecordBatchBuilder.append_values + build, no I/O."""
        def build_loop():
            for i in range(n):
                builder.reset()
                builder.append_values(values[i % len(values)], timestamp=ts)
                builder.build()
        runs["build"].append(timed(build_loop))

    def build_append(r):
        """Build, then append the bytes from build() (so append copies them)."""
        d = os.path.join(work, f"build-append-{r}", "bench-0")
        log = PartitionLog.open(d, cfg)
        quiesce()

        def build_append_loop():
            append = log.append
            for i in range(n):
                builder.reset()
                builder.append_values(values[i % len(values)], timestamp=ts)
                append(builder.build())
        runs["build_append"].append(timed(build_append_loop))
        log.close()
        discard(os.path.dirname(d))

    variants = [plain, append_mut, append_bytes, build, build_append]
    for r in range(args.repeats):
        # rotate the order each run, so that no variant always follows the same one
        k = r % len(variants)
        for variant in variants[k:] + variants[:k]:
            variant(r)
        say(f"    run {r + 1}: plain {data_bytes / runs['plain'][-1] / MB:,.0f} MB/s, "
            f"append {n * args.batch_records / runs['append_mut'][-1] / 1e6:.2f} M rec/s "
            f"({data_bytes / runs['append_mut'][-1] / MB:,.0f} MB/s)")
    keep_dir = keep[0]

    recs = n * args.batch_records
    best = {k: min(v) for k, v in runs.items()}
    plain_mbs = data_bytes / best["plain"] / MB
    res.add("plain_write_mb_per_s", 1, "plain os.write loop", plain_mbs, "MB/s",
            runs=runs["plain"], note="same batch bytes, plain file, no fsync")
    res.add("plain_write_records_per_s", 1, "plain os.write loop", recs / best["plain"],
            "records/s", runs=runs["plain"])
    rps = recs / best["append_mut"]
    res.add("append_records_per_s", 1, "append (bytearray in, no copy)", rps, "records/s",
            baseline_key="plain_write_records_per_s", target=TARGET_RECORDS_PER_S,
            target_text=">= 5.00 M rec/s", meets=rps >= TARGET_RECORDS_PER_S,
            runs=runs["append_mut"])
    mbs = data_bytes / best["append_mut"] / MB
    res.add("append_mb_per_s", 1, "append (bytearray in, no copy)", mbs, "MB/s",
            baseline_key="plain_write_mb_per_s", target=TARGET_APPEND_VS_WRITE * plain_mbs,
            target_text=">= 0.80x plain write", meets=mbs >= TARGET_APPEND_VS_WRITE * plain_mbs,
            runs=runs["append_mut"])
    res.add("append_vs_plain_write_ratio", 1, "append MB/s / plain write MB/s", mbs / plain_mbs,
            "ratio", target=TARGET_APPEND_VS_WRITE, target_text=">= 0.80x",
            meets=mbs / plain_mbs >= TARGET_APPEND_VS_WRITE)
    res.add("append_bytes_records_per_s", 1, "append (bytes in, copied once)",
            recs / best["append_bytes"], "records/s", baseline_key="plain_write_records_per_s",
            target_text="info", runs=runs["append_bytes"])
    res.add("append_bytes_mb_per_s", 1, "append (bytes in, copied once)",
            data_bytes / best["append_bytes"] / MB, "MB/s", baseline_key="plain_write_mb_per_s",
            target_text="info", runs=runs["append_bytes"])
    res.add("build_records_per_s", 1, "build (append_values + build)", recs / best["build"],
            "records/s", target_text="info", runs=runs["build"])
    res.add("build_append_records_per_s", 1, "build + append", recs / best["build_append"],
            "records/s", target_text="info", runs=runs["build_append"])
    return keep_dir


# ---- 2. read + decode ------------------------------------------------------------------

def bench_read(args, wl: Workload, log_dir: str, res: Results) -> None:
    log = PartitionLog.open(log_dir, log_config(args.segment_bytes))
    try:
        expected = log.log_end_offset - log.log_start_offset
        fetch = args.fetch_bytes
        say(f"[2] read: {expected:,} records, {human_bytes(log.size_in_bytes)} in "
            f"{len(log.segments)} segment(s), fetch max_bytes {human_bytes(fetch)}, from the page "
            f"cache, best of {args.repeats}")

        # An untimed pass: checks the data and records the fetch offsets, so
        # that the read-only pass replays exactly the same reads.
        offsets, datas, kept = [], [], 0
        off, end, total = log.log_start_offset, log.log_end_offset, 0
        while off < end:
            info = log.read(off, fetch)
            data = info.region.read()
            cols = decode_columns(data)
            if len(cols) == 0 or int(cols.offsets[0]) != off or cols.next_offset <= off:
                raise RuntimeError(f"read at offset {off} decoded {len(cols)} records "
                                   f"(next {cols.next_offset})")
            if len(cols.value_data) != len(cols) * wl.value_bytes:
                raise RuntimeError(f"read at offset {off}: value bytes do not add up")
            offsets.append(off)
            if kept + len(data) <= args.decode_memory_bytes:
                datas.append(data)
                kept += len(data)
            total += len(cols)
            off = cols.next_offset
        if total != expected:
            raise RuntimeError(f"decoded {total} records, the log holds {expected}")
        datas_records = sum(len(decode_columns(d)) for d in datas)
        datas_bytes = sum(len(d) for d in datas)

        segs = [(s.path, s.size) for s in log.segments if s.size]
        runs = {k: [] for k in ("pread", "read", "decode", "read_decode")}
        nbytes_read = [0]
        for _ in range(args.repeats):
            fds = [(os.open(p, os.O_RDONLY | os.O_CLOEXEC), size) for p, size in segs]
            try:
                def pread_loop():
                    pread = os.pread
                    for fd, size in fds:
                        pos = 0
                        while pos < size:
                            pos += len(pread(fd, min(fetch, size - pos), pos))
                runs["pread"].append(timed(pread_loop))
            finally:
                for fd, _ in fds:
                    os.close(fd)

            def read_loop():
                rd, got = log.read, 0
                for o in offsets:
                    got += len(rd(o, fetch).region.read())
                nbytes_read[0] = got
            runs["read"].append(timed(read_loop))

            def decode_loop():
                for d in datas:
                    decode_columns(d)
            runs["decode"].append(timed(decode_loop))

            def read_decode_loop():
                rd, o, stop = log.read, log.log_start_offset, log.log_end_offset
                while o < stop:
                    o = decode_columns(rd(o, fetch).region.read()).next_offset
            runs["read_decode"].append(timed(read_decode_loop))

        best = {k: min(v) for k, v in runs.items()}
        log_bytes = sum(size for _, size in segs)
        got = nbytes_read[0]
        res.add("plain_pread_mb_per_s", 2, "plain os.pread loop", log_bytes / best["pread"] / MB,
                "MB/s", runs=runs["pread"], note="segment files in fetch-sized chunks")
        res.add("plain_pread_records_per_s", 2, "plain os.pread loop",
                expected / best["pread"], "records/s", runs=runs["pread"])
        rps = expected / best["read_decode"]
        res.add("read_decode_records_per_s", 2, "read + decode_columns", rps, "records/s",
                target=TARGET_RECORDS_PER_S, target_text=">= 5.00 M rec/s",
                meets=rps >= TARGET_RECORDS_PER_S, runs=runs["read_decode"])
        res.add("read_decode_mb_per_s", 2, "read + decode_columns",
                nbytes_read[0] / best["read_decode"] / MB, "MB/s", target_text="info",
                runs=runs["read_decode"])
        res.add("read_only_mb_per_s", 2, "read only (PartitionLog.read + region.read)",
                got / best["read"] / MB, "MB/s", baseline_key="plain_pread_mb_per_s",
                target_text="info", runs=runs["read"])
        res.add("read_only_records_per_s", 2, "read only (PartitionLog.read + region.read)",
                expected / best["read"], "records/s", baseline_key="plain_pread_records_per_s",
                target_text="info", runs=runs["read"])
        res.add("decode_only_records_per_s", 2, "decode_columns only (in memory)",
                datas_records / best["decode"], "records/s", target_text="info",
                runs=runs["decode"])
        res.add("decode_only_mb_per_s", 2, "decode_columns only (in memory)",
                datas_bytes / best["decode"] / MB, "MB/s", target_text="info",
                runs=runs["decode"])
        del datas
    finally:
        log.close()


# ---- 3. CRC-32C ------------------------------------------------------------------------

def bench_crc(args, res: Results) -> None:
    size = args.crc_bytes
    reps = max(args.repeats, 5)
    say(f"[3] CRC-32C: {human_bytes(size)} buffer, best of {reps}")
    buf = os.urandom(size)
    impls = []
    if kl_crc.HARDWARE:
        impls.append(("crc_hw_gb_per_s", "kafkalite crc32c_hw (SSE4.2)", kl_crc.crc32c_hw))
    impls.append(("crc_sw_gb_per_s", "kafkalite crc32c_sw (software)", kl_crc.crc32c_sw))
    impls.append(("crc_dispatch_gb_per_s", "kafkalite crc32c (dispatch)", kl_crc.crc32c))
    if crc32c_pkg is not None:
        impls.append(("crc_peer_gb_per_s", "crc32c package", crc32c_pkg.crc32c))
    values, best = {}, {}
    for key, _, fn in impls:
        values[key] = fn(buf)
        runs = []
        for _ in range(reps):
            runs.append(timed(lambda fn=fn: fn(buf)))
        best[key] = runs
    if len(set(values.values())) != 1:
        raise RuntimeError(f"CRC-32C implementations disagree: {values}")
    peer = "crc_peer_gb_per_s" if crc32c_pkg is not None else None
    if peer:
        res.add(peer, 3, "crc32c package", size / min(best[peer]) / GB, "GB/s",
                runs=best[peer],
                note=f"crc32c {crc32c_pkg.__version__}, hardware_based="
                     f"{getattr(crc32c_pkg, 'hardware_based', None)}")
    else:
        warn("the crc32c package is not installed: no peer for CRC-32C (pip install crc32c)")
    for key, label, _ in impls:
        if key == peer:
            continue
        v = size / min(best[key]) / GB
        if key == "crc_hw_gb_per_s":
            res.add(key, 3, label, v, "GB/s", baseline_key=peer, target=TARGET_CRC_GB_PER_S,
                    target_text=">= 5.00 GB/s", meets=v >= TARGET_CRC_GB_PER_S, runs=best[key])
        else:
            res.add(key, 3, label, v, "GB/s", baseline_key=peer, target_text="info",
                    runs=best[key])
    if not kl_crc.HARDWARE:
        res.add("crc_hw_gb_per_s", 3, "kafkalite crc32c_hw (SSE4.2)", None, "GB/s",
                target=TARGET_CRC_GB_PER_S, target_text=">= 5.00 GB/s (no SSE4.2 here)",
                meets=None)


# ---- 4. small log vs big log -----------------------------------------------------------

def bench_big_log(args, wl: Workload, work: str, res: Results) -> None:
    big = args.big_log_bytes
    rounds = max(8, 4 * args.repeats)
    window = max(args.window_bytes // 4, wl.batch_size)
    window_batches = max(1, window // wl.batch_size)
    window = window_batches * wl.batch_size
    free = shutil.disk_usage(work).free
    need = big + window * (rounds + 2) + args.small_log_bytes + HEADROOM
    if free < need:
        scaled = free - HEADROOM - window * (rounds + 2) - args.small_log_bytes
        scaled = (scaled // wl.batch_size) * wl.batch_size
        if scaled <= 4 * max(args.small_log_bytes, wl.batch_size):
            warn(f"only {human_bytes(free)} free in {work}: not enough for a big log "
                 f"(asked {human_bytes(big)} + {human_bytes(HEADROOM)} headroom); test 4 skipped")
            res.skipped_big_log = (f"not enough disk: {human_bytes(free)} free")
            return
        warn(f"only {human_bytes(free)} free in {work}; the big log is scaled down from "
             f"{human_bytes(big)} to {human_bytes(scaled)} (keeping {human_bytes(HEADROOM)} "
             f"headroom)")
        big = scaled
    res.big_log_bytes_used = big
    cfg = log_config(args.segment_bytes)
    say(f"[4] big log: fill {human_bytes(big)} (segment.bytes {human_bytes(args.segment_bytes)}), "
        f"then append a {human_bytes(window)} window ({window_batches:,} batches) to it and to a "
        f"{human_bytes(args.small_log_bytes)} log, {rounds} paired rounds, median ratio")

    big_dir = os.path.join(work, "big", "bench-0")
    big_log = PartitionLog.open(big_dir, cfg)
    try:
        t0 = time.perf_counter()
        fill_log(big_log, wl.pool_mut, big, wl.batch_size, Progress("filling big log", big))
        fill_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        big_log.flush()
        say(f"    filled {human_bytes(big_log.size_in_bytes)} in {len(big_log.segments)} "
            f"segment(s) at {big_log.size_in_bytes / fill_s / MB:,.0f} MB/s; fsync took "
            f"{time.perf_counter() - t1:.1f} s")
        res.add("big_log_fill_mb_per_s", 4, f"filling the big log (whole {human_bytes(big)})",
                big_log.size_in_bytes / fill_s / MB, "MB/s", target_text="info",
                note="one pass, includes segment rolls and their background fsyncs")
        runs_small, runs_big, runs_plain, small_sizes, big_sizes = [], [], [], [], []
        cpu_small, cpu_big = [], []

        def time_small(r):
            small_dir = os.path.join(work, f"small-{r}", "bench-0")
            small = PartitionLog.open(small_dir, cfg)
            fill_log(small, wl.pool_mut, args.small_log_bytes, wl.batch_size)
            small.flush()
            quiesce()
            small_sizes.append(small.size_in_bytes)
            wall, cpu = timed_both(lambda: append_batches(small, wl.pool_mut, window_batches))
            runs_small.append(wall)
            cpu_small.append(cpu)
            small.close()
            shutil.rmtree(os.path.dirname(small_dir))

        def time_big(r):
            # Start the window in a new segment, as the small log's window is
            # in a new file: both logs then write to a just-created file.
            big_log.roll()
            big_log.flush()
            quiesce()
            big_sizes.append(big_log.size_in_bytes)
            wall, cpu = timed_both(lambda: append_batches(big_log, wl.pool_mut, window_batches))
            runs_big.append(wall)
            cpu_big.append(cpu)
            big_log.flush()

        def time_plain(r):
            path = os.path.join(work, f"plain-window-{r}.bin")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
            try:
                def loop(pool=wl.pool_bytes, p=len(wl.pool_bytes)):
                    write = os.write
                    for i in range(window_batches):
                        if write(fd, pool[i % p]) != wl.batch_size:
                            raise OSError("short write to the plain file")
                quiesce()
                runs_plain.append(timed(loop))
                os.fsync(fd)
            finally:
                os.close(fd)
                os.unlink(path)

        steps = [time_small, time_big, time_plain]
        # Many short paired rounds rather than a few long ones: the ratio is
        # taken per round (small and big measured back to back) and the
        # median over rounds reported, so drift in the machine's speed
        # between rounds cancels out.
        for r in range(rounds):
            # rotate the order, so that no step always follows the same one
            k = r % len(steps)
            for step in steps[k:] + steps[:k]:
                step(r)
            say(f"    run {r + 1}: {human_bytes(small_sizes[-1])} log "
                f"{window / runs_small[-1] / MB:,.0f} MB/s, {human_bytes(big_sizes[-1])} log "
                f"{window / runs_big[-1] / MB:,.0f} MB/s, plain write "
                f"{window / runs_plain[-1] / MB:,.0f} MB/s")
    finally:
        big_log.close()
        shutil.rmtree(os.path.dirname(big_dir), ignore_errors=True)

    res.add("window_plain_write_mb_per_s", 4, "plain os.write (same window)",
            window / min(runs_plain) / MB, "MB/s", target_text="info", runs=runs_plain,
            note="the machine's page-cache write speed at this point of the run")
    small_mbs = window / statistics.median(runs_small) / MB
    big_mbs = window / statistics.median(runs_big) / MB
    # per-round throughput ratios big/small (= small time / big time)
    ratio = statistics.median(s / b for s, b in zip(runs_small, runs_big))
    cpu_ratio = statistics.median(s / b for s, b in zip(cpu_small, cpu_big))
    small_txt, big_txt = human_bytes(small_sizes[0]), human_bytes(big_sizes[0])
    res.small_log_label, res.big_log_label = small_txt, big_txt
    res.add("small_log_append_mb_per_s", 4, f"append at a {small_txt} log",
            small_mbs, "MB/s", baseline_key="window_plain_write_mb_per_s", target_text="info",
            runs=runs_small,
            note=f"log sizes at start of each run: {small_sizes}")
    res.add("small_log_append_records_per_s", 4, f"append at a {small_txt} log",
            window_batches * wl.batch_records / statistics.median(runs_small), "records/s", target_text="info",
            runs=runs_small)
    res.add("big_log_append_mb_per_s", 4, f"append at a {big_txt} log", big_mbs, "MB/s",
            baseline_key="small_log_append_mb_per_s",
            target=(1 - TARGET_BIG_LOG_TOLERANCE) * small_mbs, target_text="within 10% of small",
            meets=abs(ratio - 1) <= TARGET_BIG_LOG_TOLERANCE, runs=runs_big,
            note=f"log sizes at start of each run: {big_sizes}")
    res.add("big_log_append_records_per_s", 4, f"append at a {big_txt} log",
            window_batches * wl.batch_records / statistics.median(runs_big), "records/s",
            baseline_key="small_log_append_records_per_s", target_text="info", runs=runs_big)
    res.add("big_vs_small_log_ratio", 4, "big-log / small-log append speed (wall, median)",
            ratio, "ratio", target=1.0, target_text="0.90x .. 1.10x",
            meets=abs(ratio - 1) <= TARGET_BIG_LOG_TOLERANCE)
    res.add("big_vs_small_log_cpu_ratio", 4, "big-log / small-log append speed (CPU time)",
            cpu_ratio, "ratio", target=1.0, target_text="0.90x .. 1.10x",
            meets=abs(cpu_ratio - 1) <= TARGET_BIG_LOG_TOLERANCE,
            note="process CPU time per window: immune to other processes on the machine")


# ---- 5. one-record appends ------------------------------------------------------------

ONE_RECORD_PRODUCER_ID = 4242


def one_record_batches(n: int, value: bytes, idempotent: bool) -> list[bytearray]:
    """``n`` batches of one record each, as a producer's request hands them
    to the log (writable: append patches them in place); an idempotent
    producer's carry sequences 0, 1, 2, ... of one producer id and epoch."""
    builder, ts, out = RecordBatchBuilder(0), int(time.time() * 1000), []
    for i in range(n):
        builder.reset()
        if idempotent:
            builder.set_producer(ONE_RECORD_PRODUCER_ID, 0, i)
        builder.append(ts, None, value)
        out.append(bytearray(builder.build()))
    return out


def bench_one_record(args, work: str, res: Results) -> None:
    n = args.one_record_appends
    value = os.urandom(args.one_record_value_bytes)
    cfg = log_config(args.segment_bytes)
    # at least three runs a figure, but --quick's one: each run opens and
    # closes (fsyncs) its logs, 100 of them, which took the smoke test 30 s
    reps = 1 if args.quick else max(args.repeats, 3)
    spreads = sorted({1, max(1, args.one_record_partitions)})
    say(f"[5] one-record appends: {n:,} batches of one {args.one_record_value_bytes:,}-byte "
        f"record, plain and idempotent, beside os.pwrite, to 1 and to "
        f"{spreads[-1]} logs in turn; CPU time, best of {reps}")
    runs = {(k, m): [] for k in ("pwrite", "plain", "idempotent") for m in spreads}
    size = len(one_record_batches(1, value, False)[0])

    def pwrite(m, r):
        paths = [os.path.join(work, f"one-pwrite-{r}-{i}.bin") for i in range(m)]
        fds = [os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
               for p in paths]
        pool = one_record_batches(n, value, False)
        try:
            def loop(pw=os.pwrite):
                ends = [0] * m
                for i, b in enumerate(pool):
                    f = i % m
                    ends[f] += pw(fds[f], b, ends[f])
            quiesce()
            runs["pwrite", m].append(timed_both(loop)[1])
        finally:
            for fd in fds:
                os.close(fd)
            for p in paths:
                os.unlink(p)

    def appends(kind):
        def run(m, r):
            # each log's batches are its own producer's sequence (one
            # producer per partition, as the workload's keyed records give)
            pools = [one_record_batches(1 + -(-n // m), value, kind == "idempotent")
                     for _ in range(m)]
            top = os.path.join(work, f"one-{kind}-{r}")
            logs = [PartitionLog.open(os.path.join(top, f"bench-{i}"), cfg) for i in range(m)]
            try:
                # Untimed, each log's first append: it writes the leader epoch's
                # checkpoint (fsynced), which a broker's log has from becoming
                # leader, before any Produce.
                for log, pool in zip(logs, pools):
                    log.append(pool[0])
                order = [(logs[i % m].append, pools[i % m][1 + i // m]) for i in range(n)]

                def loop():
                    for append, b in order:
                        append(b)
                quiesce()
                runs[kind, m].append(timed_both(loop)[1])
                held = sum(log.log_end_offset for log in logs)
                if held != n + m:
                    raise RuntimeError(f"the logs hold {held} records, expected {n + m}")
            finally:
                for log in logs:
                    log.close()
                shutil.rmtree(top)
        return run

    variants = [pwrite, appends("plain"), appends("idempotent")]
    for r in range(reps):
        k = r % len(variants)
        for m in spreads:
            for variant in variants[k:] + variants[:k]:
                variant(m, r)
    us = {key: min(v) / n * 1e6 for key, v in runs.items()}
    for m in spreads:
        say(f"    {m} log(s), best: pwrite {us['pwrite', m]:.2f} us, append "
            f"{us['plain', m]:.2f} us, idempotent append {us['idempotent', m]:.2f} us "
            f"({size:,} bytes a batch)")
        sfx, where = ("", "") if m == 1 else (f"_{m}_logs", f", {m} logs in turn")
        res.add(f"one_record_pwrite_us{sfx}", 5,
                f"os.pwrite of a one-record batch (ceiling){where}", us["pwrite", m], "us",
                runs=runs["pwrite", m], note="process CPU time per call")
        res.add(f"one_record_append_us{sfx}", 5, f"append of a one-record batch{where}",
                us["plain", m], "us", baseline_key=f"one_record_pwrite_us{sfx}",
                target_text="info", runs=runs["plain", m], note="process CPU time per append")
        res.add(f"one_record_idempotent_append_us{sfx}", 5,
                f"append of a one-record batch, idempotent producer{where}",
                us["idempotent", m], "us", baseline_key=f"one_record_pwrite_us{sfx}",
                target_text="info", runs=runs["idempotent", m],
                note="process CPU time per append")


# ---- plot ------------------------------------------------------------------------------

def plot(res: Results, path: str, wl: Workload) -> bool:
    plt = report.pyplot()
    if plt is None:
        return False
    g = res.get
    panels = []
    rows1 = [("plain os.write\n(baseline)", g("plain_write_records_per_s"), "#999999"),
             ("append\nbytearray", g("append_records_per_s"), "#1f77b4"),
             ("append\nbytes", g("append_bytes_records_per_s"), "#6baed6"),
             ("build", g("build_records_per_s"), "#ff7f0e"),
             ("build +\nappend", g("build_append_records_per_s"), "#fdae6b")]
    lines1 = [(TARGET_RECORDS_PER_S / 1e6, "target 5 M rec/s", "red")]
    if g("plain_write_records_per_s"):
        lines1.append((TARGET_APPEND_VS_WRITE * g("plain_write_records_per_s") / 1e6,
                       "80% of plain write", "purple"))
    panels.append(("1. Append (M records/s)", rows1, 1e6, lines1))
    rows2 = [("plain os.pread\n(baseline)", g("plain_pread_records_per_s"), "#999999"),
             ("read only", g("read_only_records_per_s"), "#6baed6"),
             ("decode only", g("decode_only_records_per_s"), "#fdae6b"),
             ("read +\ndecode", g("read_decode_records_per_s"), "#1f77b4")]
    panels.append(("2. Read + decode (M records/s)", rows2, 1e6,
                   [(TARGET_RECORDS_PER_S / 1e6, "target 5 M rec/s", "red")]))
    rows3 = [("crc32c pkg\n(peer)", g("crc_peer_gb_per_s"), "#999999"),
             ("ours hw", g("crc_hw_gb_per_s"), "#1f77b4"),
             ("ours sw", g("crc_sw_gb_per_s"), "#6baed6"),
             ("ours\ndispatch", g("crc_dispatch_gb_per_s"), "#9ecae1")]
    panels.append(("3. CRC-32C (GB/s)", rows3, 1, [(TARGET_CRC_GB_PER_S, "target 5 GB/s", "red")]))
    if g("small_log_append_mb_per_s") is not None:
        s = g("small_log_append_mb_per_s")
        rows4 = [("plain write\n(machine)", g("window_plain_write_mb_per_s"), "#cccccc"),
                 (f"{res.small_log_label} log\n(baseline)", s, "#999999"),
                 (f"{res.big_log_label} log", g("big_log_append_mb_per_s"), "#1f77b4")]
        panels.append(("4. Append at small vs big log (MB/s)", rows4, 1,
                       [(0.9 * s, "-10%", "red"), (1.1 * s, "+10%", "red")]))
    fig, axes = plt.subplots(2, 2, figsize=(13, 9))
    for ax, (title, rows, scale, lines) in zip(axes.flat, panels):
        rows = [r for r in rows if r[1] is not None]
        xs = range(len(rows))
        vals = [r[1] / scale for r in rows]
        bars = ax.bar(xs, vals, color=[r[2] for r in rows])
        ax.set_xticks(list(xs))
        ax.set_xticklabels([r[0] for r in rows], fontsize=8)
        ax.set_title(title)
        for b, v in zip(bars, vals):
            ax.annotate(f"{v:,.2f}" if v < 100 else f"{v:,.0f}",
                        (b.get_x() + b.get_width() / 2, v), ha="center", va="bottom", fontsize=8)
        for y, label, color in lines:
            ax.axhline(y, color=color, linestyle="--", linewidth=1, label=label)
        if lines:
            ax.legend(fontsize=8, loc="upper right")
        ax.set_ylim(0, max(vals + [y for y, _, _ in lines]) * 1.2 if vals else 1)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"kafkalite storage benchmark ({wl.batch_records} x {wl.value_bytes}-byte "
                 f"records per batch)")
    report.save_figure(plt, fig, path)
    return True


# ---- main ------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(
        description="kafkalite storage/codec benchmark (see benchmarks/README.md)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--records", type=int, default=10_000_000,
                   help="records appended and read back in tests 1-2")
    p.add_argument("--batch-records", type=int, default=1000, help="records per batch")
    p.add_argument("--value-bytes", type=int, default=100, help="bytes per record value")
    p.add_argument("--big-log-bytes", type=parse_size, default=10 * GiB,
                   help="size of the big log in test 4 (e.g. 10GiB, 512MiB)")
    p.add_argument("--small-log-bytes", type=parse_size, default=1 * MiB,
                   help="size of the small log in test 4")
    p.add_argument("--window-bytes", type=parse_size, default=256 * MiB,
                   help="bytes appended to each log in each timed run of test 4")
    p.add_argument("--segment-bytes", type=parse_size, default=LogConfig().segment_bytes,
                   help="segment.bytes of every log (Kafka's default 1 GiB)")
    p.add_argument("--fetch-bytes", type=parse_size, default=4 * MiB,
                   help="max_bytes of each PartitionLog.read in test 2")
    p.add_argument("--crc-bytes", type=parse_size, default=64 * MiB,
                   help="buffer size of the CRC-32C test")
    p.add_argument("--pool-bytes", type=parse_size, default=256 * MiB,
                   help="memory of distinct prebuilt batches, cycled through")
    p.add_argument("--decode-memory-bytes", type=parse_size, default=2 * GiB,
                   help="at most this much fetched data is kept in memory for decode-only")
    common.add_rounds(p, 3, flag="--repeats", help="runs per measurement (best kept)")
    common.add_quick(p, "tiny sizes for CI smoke tests (200k records, 4 MiB big log)")
    p.add_argument("--skip-big-log", action="store_true", help="skip test 4")
    p.add_argument("--one-record-appends", type=int, default=50_000,
                   help="one-record batches appended in each run of test 5")
    p.add_argument("--one-record-value-bytes", type=int, default=1024,
                   help="bytes of the one record's value in test 5")
    p.add_argument("--one-record-partitions", type=int, default=100,
                   help="test 5 also appends to this many logs in turn (the workload's "
                        "partitions: a worker's appends go from one log to the next)")
    p.add_argument("--only-one-record", action="store_true",
                   help="run test 5 alone (seconds)")
    p.add_argument("--work-dir", default=None,
                   help="parent of the temporary data directory (default: the system temp "
                        "dir if it is on the repository's disk and not tmpfs, else benchmarks/)")
    p.add_argument("--output-dir", default=None,
                   help="where results go (default benchmarks/results/storage-<timestamp>)")
    args = common.parse(p, argv, quick=QUICK)
    if args.batch_records < 1 or args.value_bytes < 0 or args.records < args.batch_records:
        p.error("need --records >= --batch-records >= 1 and --value-bytes >= 0")
    if args.repeats < 1:
        p.error("--repeats must be >= 1")
    return args


def main(argv=None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    out_dir, work = report.make_dirs("storage", args.output_dir, args.work_dir)
    info = report.machine_info(work, sse4_2=True, extra={
        "kafkalite_crc32c_hardware": bool(kl_crc.HARDWARE),
        "crc32c_package": getattr(crc32c_pkg, "__version__", None),
        "crc32c_package_hardware": getattr(crc32c_pkg, "hardware_based", None),
    })
    say("kafkalite storage benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores, "
        f"SSE4.2 {info['cpu_sse4_2']})")
    report.say_memory(info)
    say(f"  Python     {info['python']} ({info['python_implementation']}), numpy {info['numpy']}, "
        f"{info['platform']}")
    report.say_load(info)
    say(f"  kafkalite  hardware CRC-32C: {info['kafkalite_crc32c_hardware']}")
    say(f"  crc32c pkg {info['crc32c_package']} (hardware_based={info['crc32c_package_hardware']})")
    say(f"  data dir   {work} ({info['work_dir_fstype']} at {info['work_dir_mount']}, "
        f"{human_bytes(shutil.disk_usage(work).free)} free)")
    say(f"  output     {out_dir}")
    report.warn_if_memory_fs(info, work, "appends measure memory, not a disk filesystem")
    say()

    res = Results()
    res.skipped_big_log = "--skip-big-log" if args.skip_big_log else None
    res.big_log_bytes_used = None
    started = time.perf_counter()
    try:
        n_batches = args.records // args.batch_records
        wl = Workload(args.batch_records, args.value_bytes, args.pool_bytes,
                      1 if args.only_one_record else n_batches)
        if args.only_one_record:
            say("[1-4] skipped (--only-one-record)")
        else:
            data_bytes = n_batches * wl.batch_size
            free = shutil.disk_usage(work).free
            if free < 2 * data_bytes + HEADROOM:
                fit = max(1, int((free - HEADROOM) // (2 * wl.batch_size)))
                if fit < 1 or free <= HEADROOM:
                    raise RuntimeError(f"only {human_bytes(free)} free in {work}")
                warn(f"only {human_bytes(free)} free: tests 1-2 scaled down from {args.records:,} "
                     f"to {fit * args.batch_records:,} records")
                args.records = fit * args.batch_records
            log_dir = bench_append(args, wl, work, res)
            bench_read(args, wl, log_dir, res)
            shutil.rmtree(os.path.dirname(log_dir), ignore_errors=True)
            bench_crc(args, res)
            if not args.skip_big_log:
                bench_big_log(args, wl, work, res)
            else:
                say("[4] big log: skipped (--skip-big-log)")
        bench_one_record(args, work, res)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)
        return 130
    except Exception:
        traceback.print_exc()
        shutil.rmtree(work, ignore_errors=True)
        return 1
    shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    report.machine_info_at_end(info)

    rows = report.table_rows(res)
    say()
    say(report.text_table(rows, HEADERS))
    say()
    report.say_targets_met(res.targets_met())
    report.say_targets_informational()

    settings = {k: v for k, v in vars(args).items()}
    settings["batch_size_bytes"] = wl.batch_size
    settings["record_bytes_on_wire"] = wl.record_bytes
    settings["pool_batches"] = len(wl.pool_bytes)
    settings["big_log_bytes_used"] = res.big_log_bytes_used
    settings["big_log_skipped"] = res.skipped_big_log
    doc = report.results_doc(
        "kafkalite storage/codec", elapsed, info, settings,
        units={"MB/s": "10^6 bytes/s", "GB/s": "10^9 bytes/s",
               "records/s": "records per second", "ratio": "dimensionless"},
        targets={
            "append_records_per_s": TARGET_RECORDS_PER_S,
            "append_vs_plain_write_ratio": TARGET_APPEND_VS_WRITE,
            "read_decode_records_per_s": TARGET_RECORDS_PER_S,
            "crc_hw_gb_per_s": TARGET_CRC_GB_PER_S,
            "big_vs_small_log_ratio_tolerance": TARGET_BIG_LOG_TOLERANCE,
        },
        res=res)
    report.write_json(out_dir, doc)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("# kafkalite storage benchmark\n\n")
        f.write(f"- command: `{doc['command']}`\n- date: {doc['timestamp']}\n")
        f.write(f"- CPU: {info['cpu_model']}, {info['logical_cores']} logical cores; "
                f"Python {info['python']}; kafkalite hardware CRC-32C: "
                f"{info['kafkalite_crc32c_hardware']}\n")
        f.write(f"- {args.records:,} records of {args.value_bytes} bytes in batches of "
                f"{args.batch_records:,} ({wl.batch_size:,} bytes/batch); best of "
                f"{args.repeats}; data dir on {info['work_dir_fstype']}; reads are served "
                f"from the page cache\n")
        if res.big_log_bytes_used:
            f.write(f"- big log: {human_bytes(res.big_log_bytes_used)}; window "
                    f"{human_bytes(args.window_bytes)}\n")
        elif res.skipped_big_log:
            f.write(f"- big log test skipped: {res.skipped_big_log}\n")
        f.write("\n" + report.markdown_table(rows, HEADERS) + "\n")
    report.finish(out_dir, lambda png: plot(res, png, wl), elapsed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
