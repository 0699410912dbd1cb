"""A share group member in its own process, for tests that kill one.

Prints one JSON line per event to stdout, flushed:
  {"event": "started", "pid": ...}
  {"event": "records", "items": [[partition, offset, delivery count], ...]}   (delivered)
  {"event": "assigned"}                                  (first assignment)
  {"event": "acked", "items": [[partition, offset, type], ...], "error": null|"NAME"}
      (answers to acknowledgements; type 1 accept, 2 release, 3 reject)
Modes: "accept" (every record), "release" (release every record),
"release-once" (release a record delivered for the first time, accept
redeliveries), "reject" (reject every record), "hold" (never acknowledge:
explicit mode, records stay acquired until the process dies),
"release-then-idle" (release the first records it gets, commit, and fetch
no more).
Runs until stdin closes, then closes the consumer (which sends what is
pending) and prints {"event": "closed"}.
Usage: share_member.py BOOTSTRAP GROUP TOPIC MODE [CONFIG_JSON]
(CONFIG_JSON: more ShareConsumer settings.)
"""
import json
import os
import select
import sys
import time

from kafkalite.client import AcknowledgeType, ShareConsumer


def emit(**event):
    event["t"] = time.time()
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main():
    bootstrap, group, topic, mode = sys.argv[1:5]
    extra = json.loads(sys.argv[5]) if len(sys.argv) > 5 else {}

    def on_commit(offsets, error):
        emit(event="acked", items=[[tp[1], o, int(t)] for tp, got in offsets.items()
                                   for o, t in got],
             error=None if error is None else error.name)

    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "client.id": f"share-member-{os.getpid()}", "on_commit": on_commit,
                       "fetch.max.wait.ms": 200,
                       "share.acknowledgement.mode": "explicit" if mode == "hold" else "implicit",
                       **extra})
    c.subscribe([topic])
    emit(event="started", pid=os.getpid())
    assigned = False
    while True:
        if select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline():
            break
        if mode == "idle":
            time.sleep(0.1)
            continue
        msgs = c.consume(100, 0.2)
        if not assigned and c.assignment():
            assigned = True
            emit(event="assigned")
        if not msgs:
            continue
        emit(event="records", items=[[m.partition(), m.offset(), m.delivery_count()]
                                     for m in msgs])
        for m in msgs:
            if mode == "release" or (mode == "release-once" and m.delivery_count() == 1):
                c.acknowledge(m, AcknowledgeType.RELEASE)
            elif mode == "reject":
                c.acknowledge(m, AcknowledgeType.REJECT)
        if mode == "release-then-idle":
            for m in msgs:
                c.acknowledge(m, AcknowledgeType.RELEASE)
            c.commit_sync()
            mode = "idle"
    c.close()
    emit(event="closed")


if __name__ == "__main__":
    main()
