"""A consumer group member in its own process, for tests that kill one.

Prints one JSON line per event to stdout, flushed, before acting on it:
  {"event": "assign"|"revoke"|"lost", "partitions": [[topic, p], ...], "t": time}
  {"event": "records", "items": [[p, offset], ...], "t": time}   (then commits them)
Runs until killed or until stdin closes.
Usage: group_member.py BOOTSTRAP GROUP TOPIC STRATEGY [max_per_poll] [pause_s]
STRATEGY "consumer" makes it a KIP-848 member (group.protocol=consumer:
the coordinator assigns, and sets the session timeout and heartbeats).
"""
import json
import os
import select
import sys
import time

from kafkalite.client import Consumer
from kafkalite.errors import KafkaError


def emit(**event):
    event["t"] = time.time()
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main():
    bootstrap, group, topic, strategy = sys.argv[1:5]
    max_per_poll = int(sys.argv[5]) if len(sys.argv) > 5 else 50
    pause = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    config = {"bootstrap.servers": bootstrap, "group.id": group,
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "client.id": f"member-{os.getpid()}"}
    if strategy == "consumer":
        config["group.protocol"] = "consumer"
    else:
        config.update({"partition.assignment.strategy": strategy, "session.timeout.ms": 2000,
                       "heartbeat.interval.ms": 200})
    c = Consumer(config)
    c.subscribe([topic],
                on_assign=lambda _, tps: emit(event="assign", partitions=[[t.topic, t.partition] for t in tps]),
                on_revoke=lambda _, tps: emit(event="revoke", partitions=[[t.topic, t.partition] for t in tps]),
                on_lost=lambda _, tps: emit(event="lost", partitions=[[t.topic, t.partition] for t in tps]))
    emit(event="started", pid=os.getpid())
    while True:
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
            break
        msgs = c.consume(max_per_poll, 0.1)
        if msgs:
            emit(event="records", items=[[m.partition(), m.offset()] for m in msgs])
            try:
                c.commit(asynchronous=False)
            except KafkaError as exc:   # e.g. REBALANCE_IN_PROGRESS: the next commit covers it
                emit(event="commit_failed", error=exc.name)
            if pause:
                time.sleep(pause)
    c.close()
    emit(event="closed")


if __name__ == "__main__":
    main()
