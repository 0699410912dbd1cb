"""Child process for the producer-state crash test: several idempotent
producers append to one log until killed, printing each acknowledged batch.

Producer p writes batches of 1-9 records with consecutive sequences; segments
are small so the log rolls (and snapshots its producer state) often.

usage: producer_writer.py <partition dir> <seed>
"""
import random
import sys

from kafkalite.record import RecordBatchBuilder
from kafkalite.storage import LogConfig, PartitionLog

CONFIG = LogConfig.from_properties({"segment.bytes": 16 * 1024, "retention.ms": -1})
PRODUCERS = {1000 + i: i % 3 for i in range(6)}          # producer id -> epoch


def main():
    directory, seed = sys.argv[1], int(sys.argv[2])
    rng = random.Random(seed)
    plog = PartitionLog.open(directory, CONFIG)
    next_seq = {pid: (e.batches[-1][1] + 1 if e.batches else 0)
                for pid, e in plog.producer_state.producers.items()}
    print("ready", flush=True)
    while True:
        pid = rng.choice(list(PRODUCERS))
        seq = next_seq.get(pid, 0)
        b = RecordBatchBuilder(producer_id=pid, producer_epoch=PRODUCERS[pid], base_sequence=seq)
        n = rng.randrange(1, 10)
        for i in range(n):
            b.append(None, b"%d" % pid, b"%d-%d" % (pid, seq + i))
        info = plog.append(b.build())
        next_seq[pid] = seq + n
        sys.stdout.write(f"ack {pid} {seq} {seq + n - 1} {info.first_offset} {info.last_offset}\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
