"""A kafkalite Streams application run as its own process by the streams
tests (so that it can be killed with SIGKILL):

    python streams_counter_app.py BOOTSTRAP APP_ID INPUT STATE_DIR GUARANTEE INSTANCE [SESSION_MS]

It counts the records per key of INPUT (a RocksDB store backed by
``<APP_ID>-counts-changelog``) into ``INPUT-counts`` (long values), and
copies every input record unchanged to ``INPUT-copy``, so that a checker
can compare the copy with the input record for record. It prints
``started`` once running and stops cleanly (commit, leave) on SIGTERM,
printing ``summary {json}`` first: the tasks it held then and the records it
restored from changelogs over its life. SESSION_MS (default 6000) is its
consumer's session timeout: how long a killed instance's tasks wait for it
(it is a static member) before they move.
"""
from __future__ import annotations

import json
import signal
import sys
import threading

from kafkalite.streams import (KafkaStreams, Materialized, Produced, Serdes, StreamsBuilder)


def topology(input_topic: str):
    b = StreamsBuilder()
    s = b.stream(input_topic)
    s.group_by_key().count(Materialized.as_("counts")).to_stream().to(
        f"{input_topic}-counts", Produced.with_(Serdes.bytes(), Serdes.long()))
    s.to(f"{input_topic}-copy")
    return b.build()


def main(bootstrap, app_id, input_topic, state_dir, guarantee, instance,
         session_ms="6000") -> None:
    session_ms = int(session_ms)
    streams = KafkaStreams(topology(input_topic), {
        "application.id": app_id, "bootstrap.servers": bootstrap,
        "processing.guarantee": guarantee, "state.dir": state_dir, "instance.id": instance,
        "commit.interval.ms": 200, "consumer.session.timeout.ms": session_ms,
        "consumer.heartbeat.interval.ms": max(100, session_ms // 6)})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    streams.start()
    print("started", flush=True)
    while not stop.wait(0.1):
        if streams.state == KafkaStreams.ERROR:
            print(f"error {streams.error!r}", file=sys.stderr, flush=True)
            sys.exit(1)
    with streams._lock:
        tasks = sorted(f"{s}_{p}" for s, p in streams.tasks)
    print("summary " + json.dumps({"tasks": tasks, "restored": streams.restored_records}),
          flush=True)
    streams.close()


if __name__ == "__main__":
    main(*sys.argv[1:])
