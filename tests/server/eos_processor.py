"""A consume-transform-produce processor for the exactly-once test.

    python eos_processor.py BOOTSTRAP IN_TOPIC OUT_TOPIC ABORTED_LOG

Reads IN_TOPIC as member ``proc`` (static) of group ``eos`` with
read_committed, and for each batch of input writes one output record per
input record to the same partition of OUT_TOPIC, inside a transaction that
also commits the input offsets. An output value is
``<input partition>:<input offset>|<transaction tag>|<records in the
transaction>`` so that the checker can tell duplicates, partial
transactions and aborted ones. About one transaction in ten is aborted on
purpose (its tag is appended to ABORTED_LOG first) and the consumer rewinds
to the committed offsets. Any error ends the process with exit code 2: the
test restarts it, and the new producer fences whatever the old one left.
"""
from __future__ import annotations

import os
import random
import sys
import traceback

from kafkalite.client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition


def main(bootstrap: str, source: str, sink: str, aborted_log: str) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "eos",
                         "group.instance.id": "proc", "isolation.level": "read_committed",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 300,
                         "request.timeout.ms": 10_000})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "eos-processor",
                         "transaction.timeout.ms": 10_000, "linger.ms": 2,
                         "request.timeout.ms": 10_000})
    producer.init_transactions(60)
    consumer.subscribe([source])
    rnd = random.Random(os.getpid())
    count = 0
    while True:
        msgs = [m for m in consumer.consume(300, 0.3) if m.error() is None]
        if not msgs:
            continue
        count += 1
        tag = f"{os.getpid()}-{count}"
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, f"{m.partition()}:{m.offset()}|{tag}|{len(msgs)}".encode(),
                             partition=m.partition())
        producer.send_offsets_to_transaction(consumer.position(consumer.assignment()),
                                             consumer.consumer_group_metadata(), 60)
        if count % 10 == 3 or rnd.random() < 0.05:
            with open(aborted_log, "a") as f:
                f.write(tag + "\n")
                f.flush()
                os.fsync(f.fileno())
            producer.abort_transaction(60)
            # back to what the group committed, as an exactly-once processor must
            for tp in consumer.committed(consumer.assignment()):
                consumer.seek(TopicPartition(tp.topic, tp.partition,
                                             tp.offset if tp.offset >= 0 else OFFSET_BEGINNING))
        else:
            producer.commit_transaction(60)


if __name__ == "__main__":
    try:
        sys.exit(main(*sys.argv[1:5]))
    except KeyboardInterrupt:
        sys.exit(0)
    except Exception:
        traceback.print_exc()
        sys.exit(2)
