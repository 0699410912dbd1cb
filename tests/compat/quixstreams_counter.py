"""A quixstreams application with exactly-once processing: a running count
per key, kept in RocksDB state (with its changelog topic), written to an
output topic. Run as a process by tests/compat/test_quixstreams.py:

    python quixstreams_counter.py BOOTSTRAP INPUT OUTPUT STATE_DIR MODE RECORDS

MODE ``run`` processes RECORDS input records, commits and exits (or exits
after IDLE_TIMEOUT seconds without input, having processed fewer). MODE
``hold`` never commits (its commit interval is longer than the test): once it
has processed RECORDS it prints ``processed`` and keeps its transaction open
until it is killed. Every run uses the same consumer group and the same
``transactional.id``, so a new run fences one that was killed.

Input values are ``{"user": u, "i": i}`` keyed by user; each output value is
``{"user": u, "i": i, "count": n}``, n being the user's count after record i.
"""
from __future__ import annotations

import sys

from quixstreams import Application
from quixstreams.models import TopicConfig

IDLE_TIMEOUT = 20.0


def main(bootstrap: str, input_topic: str, output_topic: str, state_dir: str, mode: str,
         records: str) -> None:
    app = Application(
        broker_address=bootstrap, consumer_group=f"{input_topic}-counter",
        auto_offset_reset="earliest", processing_guarantee="exactly-once",
        state_dir=state_dir, loglevel="WARNING",
        commit_interval=3600.0 if mode == "hold" else 0.5,
        # a killed run's member leaves the group after this, not Kafka's 45 s
        # (the next run's join waits for it)
        consumer_extra_config={"session.timeout.ms": 3000, "heartbeat.interval.ms": 500},
        producer_extra_config={"transactional.id": f"{input_topic}-counter"},
    )
    sdf = app.dataframe(app.topic(input_topic, value_deserializer="json"))

    def count(value: dict, state) -> dict:
        n = state.get("count", 0) + 1
        state.set("count", n)
        return {**value, "count": n}

    sdf = sdf.apply(count, stateful=True)
    if mode == "hold":
        processed, target = [0], int(records)

        def progress(_value) -> None:
            processed[0] += 1
            if processed[0] == target:
                print("processed", flush=True)
        sdf = sdf.update(progress)
    # created by the application (admin API) with two partitions, so that a
    # transaction spans both
    sdf.to_topic(app.topic(output_topic, value_serializer="json",
                           config=TopicConfig(num_partitions=2, replication_factor=1)))
    if mode == "hold":
        app.run()                                   # until killed
    else:
        app.run(count=int(records), timeout=IDLE_TIMEOUT)


if __name__ == "__main__":
    main(*sys.argv[1:])
