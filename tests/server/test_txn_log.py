"""``__transaction_state``'s load (kafkalite/server/txn/txn_log.py): each
transactional id's last durable state, whatever the log holds before it.
The load decodes only each key's last record (issue 68: decoding every
record was most of a restarted supervisor's wait); these pin that it gives
what a replay record by record gives. In-process: files, no server."""
from __future__ import annotations

import os

from kafkalite.server.txn.txn_log import TransactionStateLog


def state(producer_id: int, epoch: int, status: int) -> dict:
    return {"producer_id": producer_id, "producer_epoch": epoch,
            "transaction_timeout_ms": 60000, "transaction_status": status,
            "transaction_partitions": [{"topic": "t", "partition_ids": [0, 1]}],
            "transaction_last_update_timestamp_ms": 1, "transaction_start_timestamp_ms": 1}


def test_the_load_gives_each_ids_last_state_tombstones_applied(tmp_path):
    data = str(tmp_path)
    store = TransactionStateLog(data, 4)
    for epoch in range(50):                 # many changes of the same ids
        for i in range(6):
            store.write(f"tx-{i}", state(100 + i, epoch, epoch % 4), 1000 + epoch)
    store.write("tx-2", None, 2000)         # expired
    store.write("tx-3", None, 2000)
    store.write("tx-3", state(203, 0, 0), 2001)      # expired, then used again
    expected = store._load_each()
    assert store.load() == expected
    store.close()
    reopened = TransactionStateLog(data, 4)
    try:
        loaded = reopened.load()
    finally:
        reopened.close()
    assert loaded == expected
    assert sorted(loaded) == ["tx-0", "tx-1", "tx-3", "tx-4", "tx-5"]
    assert loaded["tx-0"]["producer_epoch"] == 49 and loaded["tx-3"]["producer_id"] == 203


def test_an_unreadable_last_record_leaves_the_ids_state_before_it(tmp_path):
    """A damaged last record is skipped, as record by record: the id keeps
    its state before it."""
    data = str(tmp_path)
    store = TransactionStateLog(data, 1)
    store.write("tx", state(7, 1, 0), 1000)
    store.write("tx", state(7, 2, 0), 1001)
    # the same key with a value that does not decode
    key = next(iter(_keys(store)))
    store.append(0, [(key, b"\x00\x01\xff")], 1002)
    loaded = store.load()
    assert list(loaded) == ["tx"] and loaded["tx"]["producer_epoch"] == 2
    store.close()
    assert os.path.isdir(os.path.join(data, "__transaction_state-0"))


def _keys(store: TransactionStateLog) -> list[bytes]:
    keys: list[bytes] = []
    store.replay(lambda index, pid, transactional, key, value: keys.append(bytes(key)))
    return keys
