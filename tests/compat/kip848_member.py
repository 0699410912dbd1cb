"""One member of a KIP-848 consumer group, in its own process (so a test can
kill it with SIGKILL): a confluent-kafka consumer with
``group.protocol=consumer`` that commits what it consumed every 300 ms and
before giving partitions up. Used by test_kip848_confluent.py.

    python kip848_member.py BOOTSTRAP TOPIC GROUP LOG

It appends one line per event to LOG, written at once (a SIGKILL loses
nothing it logged):

    S <time>                 started
    A <time> <p,p,...>       partitions assigned (incrementally)
    R <time> <p,p,...>       partitions revoked (after committing them)
    L <time> <p,p,...>       partitions lost
    M <time> <p> <offset>    a record consumed
    C <time> <p> <offset>    a commit acknowledged: p's committed offset is now <offset>
    E <time> <error>         an error the consumer reported
    X <time>                 closed (left the group)

SIGTERM closes the consumer (a last commit, revocation, leaving the group).
``KIP848_PROTOCOL=classic`` makes it a classic-protocol member instead
(JoinGroup/SyncGroup, session timeout 4 s), with the assignor in
``KIP848_ASSIGNOR`` (cooperative-sticky unless set): the members of a
mixed group (test_kip848_migration.py).
``KIP848_PLANTED_DROP=1`` is the planted fault: the member forgets one
record it consumed (partition 0, offset 5) but still commits past it.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import confluent_kafka as ck


def main() -> None:
    bootstrap, topic, group, path = sys.argv[1:5]
    out = open(path, "a", buffering=1)

    def log(kind, *fields) -> None:
        out.write(" ".join([kind, f"{time.time():.6f}", *map(str, fields)]) + "\n")

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    drop = os.environ.get("KIP848_PLANTED_DROP") == "1"
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
            "socket.timeout.ms": 10000}
    if os.environ.get("KIP848_PROTOCOL") == "classic":
        conf.update({"group.protocol": "classic", "session.timeout.ms": 4000,
                     "heartbeat.interval.ms": 300,
                     "partition.assignment.strategy":
                         os.environ.get("KIP848_ASSIGNOR", "cooperative-sticky")})
    consumer = ck.Consumer(conf)

    def commit() -> None:
        try:
            for tp in consumer.commit(asynchronous=False) or ():
                if tp.error is None and tp.offset >= 0:
                    log("C", tp.partition, tp.offset)
        except ck.KafkaException as exc:
            if exc.args[0].code() != ck.KafkaError._NO_OFFSET:
                log("E", str(exc.args[0]).replace("\n", " "))

    def partitions(parts) -> str:
        return ",".join(str(tp.partition) for tp in parts) or "-"

    def on_revoke(c, parts) -> None:
        commit()
        log("R", partitions(parts))

    consumer.subscribe([topic], on_assign=lambda c, parts: log("A", partitions(parts)),
                       on_revoke=on_revoke, on_lost=lambda c, parts: log("L", partitions(parts)))
    log("S")
    last_commit = time.monotonic()
    while not stop:
        for m in consumer.consume(500, 0.1):
            if m.error() is not None:
                log("E", str(m.error()).replace("\n", " "))
            elif not (drop and m.partition() == 0 and m.offset() == 5):
                log("M", m.partition(), m.offset())
        if time.monotonic() - last_commit > 0.3:
            commit()
            last_commit = time.monotonic()
    commit()
    consumer.close()
    log("X")


if __name__ == "__main__":
    main()
