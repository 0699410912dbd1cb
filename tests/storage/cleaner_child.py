"""Child process for cleaner crash tests: open a compacted log and clean it.

usage: cleaner_child.py <partition dir> <max map entries>
KAFKALITE_CRASH_AT (see kafkalite/storage/faults.py) makes it die at a probe.
"""
import sys

from kafkalite.storage import LogConfig, PartitionLog

CONFIG = LogConfig.from_properties({
    "cleanup.policy": "compact", "segment.bytes": 100_000, "segment.ms": 10,
    "delete.retention.ms": 3_600_000, "retention.ms": -1})


def main():
    plog = PartitionLog.open(sys.argv[1], CONFIG)
    plog.high_watermark = plog.log_end_offset
    print("cleaning", flush=True)
    stats = plog.compact(max_map_entries=int(sys.argv[2]))
    print("cleaned", stats.segments_cleaned, flush=True)
    plog.close()


if __name__ == "__main__":
    main()
