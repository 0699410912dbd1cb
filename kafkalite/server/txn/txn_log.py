"""Transaction state, kept in ``__transaction_state``.

On-disk format: the internal topic ``__transaction_state`` with
``transaction_state_num_partitions`` partitions in
``<data_dir>/__transaction_state-N``, compacted, a transactional id living
in partition ``abs(String.hashCode(id)) % partitions`` as in Kafka. One
record per state change of a transactional id (kafkalite/protocol/messages/txn_records.py):

    key (v0: transactional id) -> TransactionLogValue v1, or null (expired id)

The transaction coordinator writes a record *before* it acts on the state
change (answers the producer, writes markers), so after a restart
``load()`` gives every id's last durable state and the coordinator finishes
what was under way: a PrepareCommit or PrepareAbort is completed by
writing its markers again.

Who may call: the transaction coordinator (txn_coordinator.py), on the
supervisor's single thread.
"""
from __future__ import annotations

import logging

from kafkalite.protocol.codec import decode_data, encode_data
from kafkalite.protocol.errors import ProtocolError
from kafkalite.protocol.messages.txn_records import (TRANSACTION_LOG_KEY_VERSION,
                                                     TRANSACTION_LOG_VALUE_VERSION,
                                                     TransactionLogKey, TransactionLogValue)
from kafkalite.server.internal_topic import InternalTopicLog
from kafkalite.server.topic import TRANSACTION_STATE_TOPIC

log = logging.getLogger("kafkalite.txn")

_LOG_PROPERTIES = {
    "cleanup.policy": "compact",
    "segment.bytes": str(100 << 20),
    "delete.retention.ms": str(86_400_000),
}


class TransactionStateLog(InternalTopicLog):
    def __init__(self, data_dir: str, partitions: int, mirror=None):
        super().__init__(data_dir, TRANSACTION_STATE_TOPIC, partitions, _LOG_PROPERTIES, mirror)

    def write(self, transactional_id: str, value: dict | None, now_ms: int) -> None:
        """Append the id's state (a TransactionLogValue body), or its tombstone."""
        key = encode_data(TransactionLogKey, TRANSACTION_LOG_KEY_VERSION,
                          {"transactional_id": transactional_id})
        data = None if value is None else encode_data(TransactionLogValue,
                                                      TRANSACTION_LOG_VALUE_VERSION, value)
        self.append(self.partition_for(transactional_id), [(key, data)], now_ms)

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The epoch markers carry: the leader epoch of the id's partition."""
        return max(self.parts[self.partition_for(transactional_id)].leader_epoch, 0)

    def load(self) -> dict[str, dict]:
        """{transactional id: TransactionLogValue body}, tombstones applied.

        Only each key's last record is decoded: an id has a record per
        state change, and until the cleaner compacts a segment (the active
        one never) the log holds them all. Decoding every one was nearly
        all of the load -- 0.07-0.4 s for a few thousand records -- and it
        is the restarted supervisor's transactional clients that wait for
        it (issue 68). Keys are compared as bytes: two encodings of one id
        (other key versions) are each decoded, the later one in the log
        winning, as record by record."""
        last: dict[bytes, tuple[int, bytes | None]] = {}   # key -> (its last record's rank, value)
        rank = iter(range(1 << 62))

        def on_record(index, producer_id, transactional, key, value):
            last[bytes(key)] = (next(rank), None if value is None else bytes(value))

        self.replay(on_record)
        states: dict[str, tuple[int, dict | None]] = {}
        for key, (at, value) in last.items():
            try:
                tid = decode_data(TransactionLogKey, key)[1]["transactional_id"]
                state = None if value is None else decode_data(TransactionLogValue, value)[1]
            except (ProtocolError, TypeError) as exc:
                # an id's earlier records are what a skipped last one leaves:
                # the slow replay, record by record, for this rare case
                log.error("an unreadable %s record (%s): loading record by record",
                          TRANSACTION_STATE_TOPIC, exc)
                return self._load_each()
            if tid not in states or states[tid][0] < at:
                states[tid] = (at, state)
        return {tid: state for tid, (_, state) in states.items() if state is not None}

    def _load_each(self) -> dict[str, dict]:
        """load(), decoding every record in log order."""
        states: dict[str, dict] = {}

        def on_record(index, producer_id, transactional, key, value):
            try:
                _, k = decode_data(TransactionLogKey, key)
                if value is None:
                    states.pop(k["transactional_id"], None)
                else:
                    states[k["transactional_id"]] = decode_data(TransactionLogValue, value)[1]
            except (ProtocolError, TypeError) as exc:
                log.error("skipped an unreadable %s record: %s", TRANSACTION_STATE_TOPIC, exc)

        self.replay(on_record)
        return states
