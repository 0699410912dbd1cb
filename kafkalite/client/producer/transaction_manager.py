"""The producer's side of its transactions (Kafka's TransactionManager):
the transaction state machine (UNINITIALIZED -> READY <-> IN_TXN, FATAL
once fenced), the coordinator requests that move it (InitProducerId,
AddOffsetsToTxn, TxnOffsetCommit, EndTxn: asked again while the
coordinator answers "not now"), and what dooms a transaction (a batch
that failed for good, a fenced epoch). The producer id and epoch stay the
producer's (an idempotent producer without transactions has them too);
the manager hands them new ones. AddPartitionsToTxn (transactions v1) is
sent by the sender, which stamps and routes the batches (sender.py).

Which process runs it: the application's, on the thread that calls the
producer's transaction methods (one at a time); ``batch_failed`` on the
sender thread, which also reads ``generation`` and sets ``added``.

What it may import: kafkalite.errors and kafkalite.protocol (ApiKey), and
the standard library; the producer it serves is handed in (api.py).
"""
from __future__ import annotations

import time

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey

# Transaction states (the producer's side of them)
UNINITIALIZED, READY, IN_TXN, FATAL = "uninitialized", "ready", "in transaction", "fatal"
# CONCURRENT_TRANSACTIONS mostly means the previous transaction's markers
# are still being written (a millisecond or two here): ask again after this,
# doubling up to retry.backoff.ms (Kafka's producer uses 20 ms).
SHORT_TXN_BACKOFF_S = 0.002
# Transactions v2 (KIP-890 part 2): the request versions that speak it
TXN_V2_PRODUCE_VERSION = 12
TXN_V2_END_TXN_VERSION = 5
TXN_V2_OFFSET_COMMIT_VERSION = 5
# Coordinator answers that mean "ask again shortly"
TXN_RETRIABLE = {errors.ConcurrentTransactionsError.code,
                 errors.CoordinatorLoadInProgressError.code,
                 errors.CoordinatorNotAvailableError.code, errors.NotCoordinatorError.code,
                 errors.RequestTimedOutError.code}
FENCED = {errors.ProducerFencedError.code, errors.InvalidProducerEpochError.code,
          errors.TransactionalIdAuthorizationFailedError.code}


class TransactionManager:
    """The transactions of one producer; ``transactional_id`` None: a
    producer without transactions, always READY. ``v2``: transactions v2
    (KIP-890 part 2), partitions and offsets join by their writes and every
    EndTxn hands out a new epoch."""

    def __init__(self, producer, transactional_id: str | None, v2: bool):
        self._producer = producer
        self.transactional_id = transactional_id
        self.v2 = v2
        self.state = READY if transactional_id is None else UNINITIALIZED
        self.generation = 0         # one per begin_transaction: the sender's partition set
        self.added = False          # the coordinator knows partitions of this transaction
        self.error: KafkaError | None = None   # a failure that dooms the transaction

    def state_error(self, what: str) -> KafkaError:
        """The error of a call ``what`` the state does not allow."""
        if self.state == FATAL:
            err = errors.ProducerFencedError(
                f"{what}: the producer is fenced or failed fatally ({self.error}); "
                f"close it and create a new one")
            err.fatal = True
            return err
        return errors.InvalidTxnStateError(f"{what} is not possible in state {self.state}")

    def _coordinator(self, api_key: int, body: dict, deadline: float, what: str,
                     version: int | None = None) -> dict:
        """A request to the transaction (or group) coordinator, asked again
        while it answers "not now"; returns the body, whose ``error_code``
        the caller checks (for APIs that have one)."""
        producer = self._producer
        backoff = producer.config["retry.backoff.ms"] / 1000.0
        request_timeout = producer.config["request.timeout.ms"] / 1000.0
        wait = SHORT_TXN_BACKOFF_S
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                err = errors.RequestTimedOutError(f"{what} did not complete in time")
                err.retriable = True
                raise err
            try:
                with producer._meta_lock:
                    resp = producer._meta.admin_request(
                        api_key, body, min(remaining, request_timeout), version)
            except KafkaError as exc:
                if not exc.retriable:
                    raise
                time.sleep(min(backoff, max(remaining, 0)))
                continue
            code = resp.get("error_code", 0)
            # TxnOffsetCommit has no top-level error: its partitions' say "not now"
            partition_codes = {p["error_code"] for t in resp.get("topics") or ()
                               for p in t.get("partitions") or ()} - {0} \
                if api_key == ApiKey.TXN_OFFSET_COMMIT else set()
            if code in TXN_RETRIABLE or (partition_codes and partition_codes <= TXN_RETRIABLE):
                # usually the previous transaction's markers, a few ms away
                time.sleep(min(wait, max(remaining, 0)))
                wait = min(wait * 2, backoff)
                continue
            return resp

    def _failure(self, code: int, what: str, abortable: bool = True) -> KafkaError:
        err = errors.error_for_code(code)(f"{what} failed: {errors.error_for_code(code).name}")
        if code in FENCED:
            self.state = FATAL
            self.error = err
            err.fatal = True
        else:
            err.txn_requires_abort = abortable
        return err

    def _new_producer_id(self, resp: dict) -> None:
        """The producer id and epoch the coordinator handed out: the
        sender's batches are stamped with them, its sequences start again."""
        producer = self._producer
        with producer._lock:
            producer._pid, producer._epoch = resp["producer_id"], resp["producer_epoch"]
            producer._pid_generation += 1

    def _deadline(self, timeout) -> float:
        return time.monotonic() + (self._producer.config["transaction.timeout.ms"] / 1000.0
                                   if timeout is None or timeout < 0 else timeout)

    def init_transactions(self, timeout: float | None = None) -> None:
        if self.transactional_id is None:
            raise errors.InvalidTxnStateError("init_transactions() needs transactional.id")
        if self.state not in (UNINITIALIZED, READY):
            raise self.state_error("init_transactions")
        resp = self._coordinator(ApiKey.INIT_PRODUCER_ID, {
            "transactional_id": self.transactional_id,
            "transaction_timeout_ms": self._producer.config["transaction.timeout.ms"],
            "producer_id": -1, "producer_epoch": -1}, self._deadline(timeout), "init_transactions")
        if resp["error_code"]:
            raise self._failure(resp["error_code"], "init_transactions", abortable=False)
        self._new_producer_id(resp)
        self.state = READY

    def begin_transaction(self) -> None:
        if self.transactional_id is None or self.state != READY:
            raise self.state_error("begin_transaction")
        self.error = None
        self.added = False
        self.generation += 1
        self.state = IN_TXN

    def send_offsets_to_transaction(self, positions, group_metadata, timeout: float | None = None):
        if self.state != IN_TXN:
            raise self.state_error("send_offsets_to_transaction")
        deadline = self._deadline(timeout)
        tid, pid, epoch = self.transactional_id, self._producer._pid, self._producer._epoch
        if not self.v2:
            resp = self._coordinator(ApiKey.ADD_OFFSETS_TO_TXN, {
                "transactional_id": tid, "producer_id": pid, "producer_epoch": epoch,
                "group_id": group_metadata.group_id}, deadline, "send_offsets_to_transaction")
            if resp["error_code"]:
                raise self._failure(resp["error_code"], "AddOffsetsToTxn")
            self.added = True
        topics: dict[str, list] = {}
        for tp in positions:
            if tp.offset < 0:
                continue
            topics.setdefault(tp.topic, []).append({
                "partition_index": tp.partition, "committed_offset": tp.offset,
                "committed_leader_epoch": -1, "committed_metadata": tp.metadata or ""})
        if not topics:
            return
        resp = self._coordinator(ApiKey.TXN_OFFSET_COMMIT, {
            "transactional_id": tid, "group_id": group_metadata.group_id, "producer_id": pid,
            "producer_epoch": epoch, "generation_id": group_metadata.generation_id,
            "member_id": group_metadata.member_id,
            "group_instance_id": group_metadata.group_instance_id,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()]},
            deadline, "send_offsets_to_transaction",
            TXN_V2_OFFSET_COMMIT_VERSION if self.v2 else None)
        self.added = True      # v2: the commit itself added the offsets
        for t in resp["topics"]:
            for p in t["partitions"]:
                if p["error_code"]:
                    raise self._failure(p["error_code"], f"TxnOffsetCommit of {t['name']}-"
                                                         f"{p['partition_index']}")

    def commit_transaction(self, timeout: float | None = None) -> None:
        if self.state != IN_TXN:
            raise self.state_error("commit_transaction")
        deadline = self._deadline(timeout)
        left = self._producer.flush(max(deadline - time.monotonic(), 0))
        if left:
            err = errors.RequestTimedOutError(
                f"commit_transaction: {left} message(s) still undelivered; call it again, or "
                f"abort_transaction()")
            err.retriable = True
            raise err
        if self.error is not None:
            err = self.error
            err.txn_requires_abort = self.state != FATAL
            raise err
        self._end(True, deadline)

    def abort_transaction(self, timeout: float | None = None) -> None:
        if self.state != IN_TXN:
            raise self.state_error("abort_transaction")
        deadline = self._deadline(timeout)
        self._producer.flush(max(deadline - time.monotonic(), 0))   # failures are expected here
        self._end(False, deadline)

    def _end(self, commit: bool, deadline: float) -> None:
        what = "commit_transaction" if commit else "abort_transaction"
        if self.added:
            resp = self._coordinator(ApiKey.END_TXN, {
                "transactional_id": self.transactional_id, "producer_id": self._producer._pid,
                "producer_epoch": self._producer._epoch, "committed": commit}, deadline, what,
                TXN_V2_END_TXN_VERSION if self.v2 else None)
            if resp["error_code"]:
                raise self._failure(resp["error_code"], what, abortable=commit)
            if self.v2:
                # the next transaction's producer id and epoch: sequences
                # start again at 0
                self._new_producer_id(resp)
        self.state = READY

    def batch_failed(self, err: KafkaError) -> None:
        """Sender side: a batch of the open transaction failed for good."""
        if self.transactional_id is None or self.state != IN_TXN:
            return
        if err.code in FENCED:
            self.state = FATAL
            err.fatal = True
        if self.error is None:
            self.error = err
