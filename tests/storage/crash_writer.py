"""Child process for the crash test: append until killed, printing each
acknowledged offset. Record content is a pure function of its offset so the
parent can check every acknowledged record after recovery.

usage: crash_writer.py <partition dir> <seed> <max records>
"""
import random
import sys

from kafkalite.record import RecordBatchBuilder
from kafkalite.storage import LogConfig, PartitionLog

CONFIG = LogConfig.from_properties({
    "segment.bytes": 256 * 1024, "index.interval.bytes": 1024, "retention.ms": -1})
CODECS = ["none", "none", "none", "lz4", "zstd", "gzip", "snappy"]


def key(offset):
    return b"k%d" % offset


def value(offset):
    return (b"%d-" % offset) * (1 + offset % 13)


def main():
    directory, seed, max_records = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    rng = random.Random(seed)
    plog = PartitionLog.open(directory, CONFIG)
    print("ready", plog.log_end_offset, flush=True)
    while plog.log_end_offset < max_records:
        start = plog.log_end_offset
        builder = RecordBatchBuilder(rng.choice(CODECS))
        for off in range(start, start + rng.randrange(1, 40)):
            builder.append(off, key(off), value(off), [("o", b"%d" % off)])
        info = plog.append(builder.build())
        assert info.first_offset == start
        sys.stdout.write("ack %d\n" % info.last_offset)
        sys.stdout.flush()
    print("done", flush=True)
    sys.stdin.read()  # wait to be killed; never close the log cleanly


if __name__ == "__main__":
    main()
