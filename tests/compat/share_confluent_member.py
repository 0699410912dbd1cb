"""One share-group member written with confluent-kafka's ShareConsumer
(librdkafka's KIP-932 client, confluent-kafka 2.16 or later), in its own
process: run by test_share_confluent.py. It imports nothing of kafkalite.

    python share_confluent_member.py BOOTSTRAP GROUP TOPIC MODE

Prints one JSON line per event to stdout, flushed at once (a SIGKILL loses
nothing it printed):
  {"event": "started", "pid": ...}
  {"event": "records", "items": [[partition, offset, delivery count], ...]}
  {"event": "acked", "items": [[partition, offset, type], ...], "error": null|"..."}
      (the broker's answers to acknowledgements, from the acknowledgement
      commit callback; type 1 accept, 2 release, 3 reject)
  {"event": "error", "error": "..."}          (an error poll() returned)
  {"event": "closed"}
Modes: "accept" (implicit acknowledgement: the next poll accepts what the
last one returned), and with ``share.acknowledgement.mode=explicit``:
"release" (release every record), "release-once" (release a record
delivered for the first time, accept redeliveries), "reject" (reject every
record), "hold" (never acknowledge: records stay acquired until the process
dies).
Runs until stdin closes, then closes the consumer (which sends what is
pending and leaves the group).
"""
import json
import os
import select
import sys
import time

import confluent_kafka as ck


def emit(**event):
    event["t"] = time.time()
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()


def main():
    bootstrap, group, topic, mode = sys.argv[1:5]
    explicit = mode != "accept"
    c = ck.ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                          "client.id": f"ck-share-{os.getpid()}",
                          "share.acknowledgement.mode": "explicit" if explicit else "implicit"})
    kinds: dict = {}            # (partition, offset) -> acknowledge type sent

    def on_commit(offsets, error):
        items = [[tp.partition, o, kinds.pop((tp.partition, o), 1)]
                 for tp, got in offsets.items() for o in sorted(got)]
        emit(event="acked", items=items, error=None if error is None else str(error))

    c.set_acknowledgement_commit_callback(on_commit)
    c.subscribe([topic])
    emit(event="started", pid=os.getpid())
    while not (select.select([sys.stdin], [], [], 0)[0] and not sys.stdin.readline()):
        msgs = [m for m in c.poll(0.2)]
        records = [m for m in msgs if m.error() is None]
        for m in msgs:
            if m.error() is not None:
                emit(event="error", error=str(m.error()))
        if not records:
            continue
        emit(event="records", items=[[m.partition(), m.offset(), m.delivery_count()]
                                     for m in records])
        if mode == "hold":
            while not select.select([sys.stdin], [], [], 0.2)[0]:
                pass                 # no poll again: explicit mode wants them acknowledged
            break
        if explicit:
            for m in records:
                kind = (ck.AcknowledgeType.REJECT if mode == "reject" else
                        ck.AcknowledgeType.RELEASE
                        if mode == "release" or m.delivery_count() == 1
                        else ck.AcknowledgeType.ACCEPT)
                kinds[(m.partition(), m.offset())] = int(kind)
                c.acknowledge(m, kind)
            c.commit_async()
    c.close()
    emit(event="closed")


if __name__ == "__main__":
    main()
