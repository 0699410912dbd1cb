"""Child process for the tiered storage crash test: append, copy rolled
segments to a local-directory remote store and delete the local copies
past local.retention.bytes, until killed, printing each acknowledged
offset. Record content is a pure function of its offset (crash_writer's).

usage: tiered_copier.py <partition dir> <store dir> <seed>
"""
import random
import sys

from kafkalite.record import RecordBatchBuilder
from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage

from crash_writer import key, value

CONFIG = LogConfig.from_properties({
    "remote.storage.enable": "true", "segment.bytes": 4096, "local.retention.bytes": 8192,
    "retention.ms": -1, "index.interval.bytes": 512})


def main():
    directory, store, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rng = random.Random(seed)
    plog = PartitionLog.open(directory, CONFIG, remote_storage=LocalDirectoryRemoteStorage(store))
    print("ready", plog.log_end_offset, flush=True)
    while True:
        start = plog.log_end_offset
        builder = RecordBatchBuilder("none")
        for off in range(start, start + rng.randrange(1, 20)):
            builder.append(off, key(off), value(off), [("o", b"%d" % off)])
        info = plog.append(builder.build())
        plog.high_watermark = plog.log_end_offset
        sys.stdout.write("ack %d\n" % info.last_offset)
        sys.stdout.flush()
        plog.copy_to_remote()
        plog.delete_old_segments()


if __name__ == "__main__":
    main()
