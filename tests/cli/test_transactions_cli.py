"""`kafkalite transactions` against a running server: list and describe a
transactional producer, and find and abort a hanging transaction (one its
coordinator does not know), after which read_committed consumers move on."""
import os
import shutil
import time

import pytest

from test_cli import _one_line_error, cli

from harness import ServerProcess, wait_until
from kafkalite.client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition


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
        # as in Kafka, EndTxn is answered once PrepareCommit is logged; the
        # coordinator completes the commit after writing the markers
        wait_until(lambda: rows(cli("transactions", "describe", f"{topic_name}-tx",
                                    *bs))[0][3] == "CompleteCommit",
                   message="the transaction's state CompleteCommit")
    finally:
        p.close()
    missing = cli("transactions", "describe", "no-such-id", *bs)
    assert missing.returncode == 1
    assert "TRANSACTIONAL_ID_NOT_FOUND" in _one_line_error(missing)
    bad = cli("transactions", "list", "--state", "Sideways", *bs)
    assert bad.returncode == 1 and "Sideways" in _one_line_error(bad)


@pytest.mark.processes
def test_find_and_abort_a_hanging_transaction(tmp_path):
    """A transaction its coordinator has forgotten (its __transaction_state
    lost with the disk it was on) hangs: it holds the LSO and nothing will
    end it. Partition leaders verify transactional writes with the
    coordinator, so a stray write cannot cause this; losing the
    coordinator's state still can."""
    srv = ServerProcess(str(tmp_path / "data"), workers=1).start()
    topic = "hang"
    try:
        bs = ["--bootstrap-server", srv.bootstrap]
        assert cli("topics", "create", topic, *bs).returncode == 0
        p = Producer(srv.config(**{"transactional.id": "forgotten"}))
        p.init_transactions(15)
        p.begin_transaction()
        p.produce(topic, b"hanging", partition=0)
        assert p.flush(15) == 0
        pid = p._pid
        p.close(0)
        assert srv.stop() == 0
        for name in os.listdir(srv.data_dir):
            if name.startswith("__transaction_state-"):
                shutil.rmtree(os.path.join(srv.data_dir, name))
        srv.start()
        bs = ["--bootstrap-server", srv.bootstrap]
        plain = Producer(srv.config())
        plain.produce(topic, b"after", partition=0)
        plain.flush(10)
        plain.close()
        assert committed_values(srv, topic) == []          # held back by the hang

        producers = rows(cli("transactions", "describe-producers", "--topic", topic, *bs))
        assert [int(r[-1]) for r in producers if int(r[1]) == pid] == [0]
        found = cli("transactions", "find-hanging", "--topic", topic,
                    "--max-transaction-timeout", "0", *bs)
        assert found.returncode == 0, found.stderr
        hanging = [r for r in rows(found) if r and r[0] == topic]
        assert [(int(r[1]), int(r[2]), int(r[4])) for r in hanging] == [(0, pid, 0)]
        none_yet = cli("transactions", "find-hanging", "--topic", topic, *bs)  # 15 min default
        assert [r for r in rows(none_yet) if r and r[0] == topic] == []

        wrong = cli("transactions", "abort", "--topic", topic, "--partition", "0",
                    "--start-offset", "7", *bs)
        assert wrong.returncode == 1 and "offset 7" in _one_line_error(wrong)
        done = cli("transactions", "abort", "--topic", topic, "--partition", "0",
                   "--start-offset", "0", *bs)
        assert done.returncode == 0, done.stderr
        assert committed_values(srv, topic) == [b"after"]
        again = cli("transactions", "find-hanging", "--topic", topic,
                    "--max-transaction-timeout", "0", *bs)
        assert [r for r in rows(again) if r and r[0] == topic] == []
    finally:
        srv.stop()
