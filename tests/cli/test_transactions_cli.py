"""`kafkalite transactions` against a running server: list and describe a
transactional producer, and find and abort a hanging transaction (one its
coordinator does not know, here written straight to the partition as a
producer's late retry would), after which read_committed consumers move on."""
import time

from test_console import _one_line_error, cli

from kafkalite.client import (OFFSET_BEGINNING, Consumer, Producer, TopicPartition)
from kafkalite.client.connection import Connection, parse_bootstrap
from kafkalite.client.metadata import Metadata
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder


def rows(out) -> list[list[str]]:
    return [line.split() for line in out.stdout.decode().splitlines()[1:]]


def committed_values(server, topic):
    c = Consumer(server.config(**{"isolation.level": "read_committed"}))
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out, deadline = [], time.monotonic() + 3
        while time.monotonic() < deadline:
            out += [m.value() for m in c.consume(100, 0.2)]
        return out
    finally:
        c.close()


def test_list_and_describe_a_transactional_producer(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, *bs).returncode == 0
    p = Producer(server.config(**{"transactional.id": f"{topic_name}-tx"}))
    try:
        p.init_transactions(15)
        p.begin_transaction()
        p.produce(topic_name, b"x")
        assert p.flush(15) == 0
        listed = rows(cli("transactions", "list", "--state", "Ongoing", *bs))
        assert [r[0] for r in listed if r[0] == f"{topic_name}-tx"] == [f"{topic_name}-tx"]
        desc = cli("transactions", "describe", f"{topic_name}-tx", *bs)
        assert desc.returncode == 0, desc.stderr
        (row,) = rows(desc)
        assert row[3] == "Ongoing" and row[-1] == f"{topic_name}-0"
        p.commit_transaction(15)
        (row,) = rows(cli("transactions", "describe", f"{topic_name}-tx", *bs))
        assert row[3] == "CompleteCommit"
    finally:
        p.close()
    missing = cli("transactions", "describe", "no-such-id", *bs)
    assert missing.returncode == 1
    assert "TRANSACTIONAL_ID_NOT_FOUND" in _one_line_error(missing)
    bad = cli("transactions", "list", "--state", "Sideways", *bs)
    assert bad.returncode == 1 and "Sideways" in _one_line_error(bad)


def test_find_and_abort_a_hanging_transaction(server, topic_name):
    bs = ["--bootstrap-server", server.bootstrap]
    assert cli("topics", "create", topic_name, *bs).returncode == 0
    # a transactional batch of a producer id that no coordinator has a
    # transaction for: nothing will ever end it
    meta = Metadata(parse_bootstrap(server.bootstrap), "t")
    ids = meta.admin_request(ApiKey.INIT_PRODUCER_ID, {"transactional_id": None,
                                                       "transaction_timeout_ms": -1,
                                                       "producer_id": -1, "producer_epoch": -1})
    meta.refresh([topic_name])
    leader = Connection(meta.brokers[meta.leader(topic_name, 0)])
    b = RecordBatchBuilder(producer_id=ids["producer_id"], producer_epoch=ids["producer_epoch"],
                           base_sequence=0, transactional=True)
    b.append(None, None, b"hanging")
    resp = leader.request(ApiKey.PRODUCE, {"transactional_id": None, "acks": -1, "timeout_ms": 5000,
                                           "topic_data": [{"name": topic_name, "partition_data": [
                                               {"index": 0, "records": b.build()}]}]})
    assert resp["responses"][0]["partition_responses"][0]["error_code"] == 0
    leader.close()
    meta.close()
    plain = Producer(server.config())
    plain.produce(topic_name, b"after", partition=0)
    plain.flush(10)
    plain.close()
    assert committed_values(server, topic_name) == []          # held back by the hang

    producers = rows(cli("transactions", "describe-producers", "--topic", topic_name, *bs))
    assert [int(r[-1]) for r in producers if int(r[1]) == ids["producer_id"]] == [0]
    found = cli("transactions", "find-hanging", "--topic", topic_name,
                "--max-transaction-timeout", "0", *bs)
    assert found.returncode == 0, found.stderr
    hanging = [r for r in rows(found) if r and r[0] == topic_name]
    assert [(int(r[1]), int(r[2]), int(r[4])) for r in hanging] == [(0, ids["producer_id"], 0)]
    none_yet = cli("transactions", "find-hanging", "--topic", topic_name, *bs)  # 15 min default
    assert [r for r in rows(none_yet) if r and r[0] == topic_name] == []

    wrong = cli("transactions", "abort", "--topic", topic_name, "--partition", "0",
                "--start-offset", "7", *bs)
    assert wrong.returncode == 1 and "offset 7" in _one_line_error(wrong)
    done = cli("transactions", "abort", "--topic", topic_name, "--partition", "0",
               "--start-offset", "0", *bs)
    assert done.returncode == 0, done.stderr
    assert committed_values(server, topic_name) == [b"after"]
    again = cli("transactions", "find-hanging", "--topic", topic_name,
                "--max-transaction-timeout", "0", *bs)
    assert [r for r in rows(again) if r and r[0] == topic_name] == []
