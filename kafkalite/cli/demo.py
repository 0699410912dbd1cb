"""``kafkalite demo``: append records to a local partition log and read them
back, CRCs checked, without a server: the storage layer on its own.

Runs in the ``kafkalite`` process; kafkalite.record and kafkalite.storage
are imported when it runs.
"""
from __future__ import annotations

import argparse
import os
import time


HELP = "append records to a local partition log and read them back (no server needed)"
DESCRIPTION = None


def add_arguments(demo: argparse.ArgumentParser) -> None:
    demo.add_argument("--data-dir",
                      help="where the log is kept (default: a temporary directory, removed "
                           "at the end)")
    demo.add_argument("--topic", default="demo", help="topic name (default: demo)")
    demo.add_argument("--records", type=int, default=1_000_000,
                      help="records to append (default: 1,000,000)")
    demo.add_argument("--batch-size", type=int, default=1000,
                      help="records per batch (default: 1000)")
    demo.add_argument("--value-bytes", type=int, default=100,
                      help="bytes per record value (default: 100)")
    demo.add_argument("--compression", default="none",
                      choices=["none", "gzip", "snappy", "lz4", "zstd"])
    demo.add_argument("--segment-bytes", type=int, default=64 << 20,
                      help="segment.bytes of the demo topic (default: 64 MiB)")


def run(args) -> int:
    if args.data_dir is not None:
        return _demo_in(args, args.data_dir)
    # By default nowhere a user keeps data: it wrote 115 MB into
    # ./kafkalite-data, the server's own default data directory.
    import shutil
    import tempfile
    data_dir = tempfile.mkdtemp(prefix="kafkalite-demo-")
    try:
        return _demo_in(args, data_dir)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        print(f"removed {data_dir} (give --data-dir to keep the log)")


def _demo_in(args, data_dir: str) -> int:
    from kafkalite.record import RecordBatchBuilder, decode_columns
    from kafkalite.storage import LogConfig, PartitionLog

    directory = os.path.join(data_dir, f"{args.topic}-0")
    plog = PartitionLog.open(directory, LogConfig.from_properties({"segment.bytes": args.segment_bytes}))
    state = "recovered after an unclean stop" if not plog.had_clean_shutdown and plog.log_end_offset else "opened"
    print(f"{state} {directory}: offsets [{plog.log_start_offset}, {plog.log_end_offset}), "
          f"{len(plog.segments)} segment(s)")
    first = plog.log_end_offset
    value = b"x" * args.value_bytes
    started = time.perf_counter()
    remaining, batches = args.records, 0
    builder = RecordBatchBuilder(args.compression)
    while remaining > 0:
        n = min(args.batch_size, remaining)
        builder.reset()
        base = plog.log_end_offset
        keys = [b"key-%d" % ((base + i) % 16) for i in range(n)]
        builder.append_values([value] * n, keys=keys)
        plog.append(builder.build())
        remaining -= n
        batches += 1
    plog.high_watermark = plog.log_end_offset
    took = time.perf_counter() - started
    print(f"appended {args.records:,} records of {args.value_bytes} bytes in {batches:,} "
          f"{args.compression} batches: offsets {first}..{plog.log_end_offset - 1} "
          f"({args.records / took:,.0f} records/s)")

    started = time.perf_counter()
    offset, read, sample = first, 0, None
    while offset < plog.log_end_offset:
        fetched = plog.read(offset, 4 << 20)
        if fetched.region is None:
            break
        cols = decode_columns(fetched.read(), verify_crc=True)
        if sample is None and len(cols):
            sample = (int(cols.offsets[0]), cols.key(0), cols.value(0)[:16])
        read += int((cols.offsets >= first).sum())
        offset = cols.next_offset
    took = time.perf_counter() - started
    print(f"read back {read:,} records from offset {first} with CRCs checked "
          f"({read / took:,.0f} records/s); first: offset {sample[0]}, key {sample[1]!r}, "
          f"value {sample[2]!r}...")
    found = plog.offset_for_timestamp(0)
    print(f"offset for timestamp 0 (earliest record): {found[0] if found else None}; "
          f"log end offset {plog.log_end_offset}; {plog.size_in_bytes:,} bytes on disk "
          f"in {len(plog.segments)} segment(s)")
    plog.close()
    print("closed cleanly" + (f"; run `kafkalite verify {data_dir}` to check every CRC and "
                              f"index entry, `kafkalite dump-log {directory}` to see the batches"
                              if args.data_dir is not None else ""))
    return 0
