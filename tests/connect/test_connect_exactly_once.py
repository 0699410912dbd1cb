"""Exactly-once source tasks (KIP-618) on a real server: records and their
source offsets committed in one transaction; an aborted transaction's
records are invisible to read_committed consumers and its offsets never
stored, so the task resends them and a read_committed reader sees every
record exactly once."""
from __future__ import annotations

from connect_helpers import Connect
from harness import create, read_all, wait_until

from kafkalite.connect.offsets import KafkaOffsetStore


def test_aborted_transaction_records_and_offsets_do_not_count(server, topic_name):
    create(server, topic_name)
    store_topic = f"{topic_name}-offsets"
    c = Connect(server, offsets=KafkaOffsetStore(server.config(), store_topic, 1),
                **{"exactly.once.source.support": "enabled", "group.id": f"eos-{topic_name}"})
    try:
        c.create("txn", **{"connector.class": "connect_plugins:TransactionalSourceConnector",
                           "transaction.boundary": "connector", "topic": topic_name,
                           "count": "30", "abort.at": "12",
                           "value.converter": "org.apache.kafka.connect.storage.StringConverter"})
        want = [b"r%d" % n for n in range(30)]
        got = wait_until(lambda: (m := read_all(server, topic_name, 1, 30, timeout=2,
                                              **{"isolation.level": "read_committed"}))
                         and len(m) >= 30 and m, timeout=60, message="30 committed records")
        assert [m.value() for m in got] == want
        # the aborted records are in the log, only read_uncommitted shows them
        raw = [m.value() for m in read_all(server, topic_name, 1, 33, timeout=5)]
        assert sorted(raw) == sorted(want + [b"r10", b"r11", b"r12"])
        assert c.http("GET", "/connectors/txn/offsets").json() == {"offsets": [
            {"partition": {"source": "r"}, "offset": {"n": 29}}]}
        assert c.state("txn")["tasks"][0]["state"] == "RUNNING"
    finally:
        c.close()
    # a second worker reading the offsets topic (read_committed) resumes after r29
    fresh = KafkaOffsetStore(server.config(), store_topic, 1)
    fresh.start()
    try:
        assert fresh.offsets_of("txn") == [({"source": "r"}, {"n": 29})]
    finally:
        fresh.stop()
