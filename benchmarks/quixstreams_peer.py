"""bench_streams.py's quixstreams peer: one quixstreams application over the
benchmark's input, in its own process. It runs with the python of a
virtualenv holding quixstreams (quixstreams pins confluent-kafka below 2.13,
the project's environment does not: tests/venvs.py), so it imports nothing
of kafkalite or of the benchmark harness.

    python quixstreams_peer.py SPEC

SPEC is a JSON object: ``broker`` (the Kafka listener), ``source``,
``sink``, ``kind`` (``stateless``: filter + map to the first 50 bytes;
``stateful``: a count per key in quixstreams' default RocksDB state),
``guarantee`` (quixstreams' processing_guarantee), ``records``,
``consumer_group``, ``state_dir``, ``commit_interval`` (seconds),
``partitions`` (the sink's, created by the application) and ``result`` (a
path). Timed from ``app.run(count=records)`` until it returns, the group
join, topic creation and last commit included; the seconds are written to
``result`` as ``{"seconds": s}``.
"""
from __future__ import annotations

import json
import sys
import time

from quixstreams import Application
from quixstreams.models import TopicConfig


def main(spec: dict) -> None:
    app = Application(
        broker_address=spec["broker"], consumer_group=spec["consumer_group"],
        auto_offset_reset="earliest", processing_guarantee=spec["guarantee"],
        state_dir=spec["state_dir"], loglevel="WARNING",
        commit_interval=spec["commit_interval"])
    sdf = app.dataframe(app.topic(spec["source"], value_deserializer="bytes",
                                  key_deserializer="bytes"))
    stateless = spec["kind"] == "stateless"
    if stateless:
        sdf = sdf.filter(lambda v: v[0] < 110).apply(lambda v: v[:50])
    else:
        def count(value, state):
            n = state.get("count", 0) + 1
            state.set("count", n)
            return n
        sdf = sdf.apply(count, stateful=True)
    sdf.to_topic(app.topic(spec["sink"], value_serializer="bytes" if stateless else "json",
                           key_serializer="bytes",
                           config=TopicConfig(num_partitions=spec["partitions"],
                                              replication_factor=1)))
    start = time.perf_counter()
    app.run(count=spec["records"], timeout=60)
    seconds = time.perf_counter() - start
    with open(spec["result"], "w") as f:
        json.dump({"seconds": seconds}, f)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
