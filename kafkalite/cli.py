"""The ``kafkalite`` command line.

Subcommands:
  demo        append records to a partition log under a data directory and
              read them back (the storage demo; the broker comes later)
  dump-log    print the batches (and records) of segment files, like
              kafka-dump-log
  verify      check every batch CRC and index entry under a data directory

Errors print one line to stderr and exit non-zero.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from kafkalite import __version__
from kafkalite.errors import KafkaError


def _demo(args) -> int:
    from kafkalite.record import RecordBatchBuilder, decode_columns
    from kafkalite.storage import LogConfig, PartitionLog

    directory = os.path.join(args.data_dir, f"{args.topic}-0")
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
    print(f"closed cleanly; run `kafkalite verify {args.data_dir}` to check every CRC "
          f"and index entry, `kafkalite dump-log {directory}` to see the batches")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from kafkalite.tools import dump_log, verify

    parser = argparse.ArgumentParser(prog="kafkalite", description=__doc__.split("\n")[0])
    parser.add_argument("--version", action="version", version=f"kafkalite {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="append records to a local partition log and read them back")
    demo.add_argument("--data-dir", default="./kafkalite-data",
                      help="data directory (default: ./kafkalite-data)")
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
    demo.set_defaults(func=_demo)

    dump = sub.add_parser("dump-log", help=dump_log.DESCRIPTION,
                          description=dump_log.DESCRIPTION)
    dump_log.add_arguments(dump)
    dump.set_defaults(func=dump_log.run)

    ver = sub.add_parser("verify", help=verify.DESCRIPTION, description=verify.DESCRIPTION)
    verify.add_arguments(ver)
    ver.set_defaults(func=verify.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except KafkaError as exc:
        print(f"kafkalite {args.command}: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError) as exc:
        print(f"kafkalite {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"kafkalite {args.command}: interrupted", file=sys.stderr)
        return 130
