"""The transaction coordinator: transactional ids, their producers and their transactions.

Kafka's transaction protocol (KIP-98), served by the supervisor beside the
group coordinator:

- InitProducerId: without a transactional id, a fresh producer id for an
  idempotent producer. With one, the id's producer id and a new epoch:
  the previous epoch is fenced, and a transaction it left open is aborted
  first (with an epoch bumped past it; the caller is told
  CONCURRENT_TRANSACTIONS and retries).
- AddPartitionsToTxn / AddOffsetsToTxn: the partitions a transaction
  writes to (a group's offsets live in a ``__consumer_offsets``
  partition); the first of them starts the transaction (Ongoing).
- EndTxn: PrepareCommit or PrepareAbort is made durable and answered;
  then a marker is written to every partition of the transaction
  (WriteTxnMarkers to the workers through broker_requests.py; the group
  coordinator's own partitions in-process) and, once all are written, the
  transaction is CompleteCommit or CompleteAbort. A marker that cannot be
  written is retried until it is (a partition whose topic was deleted is
  skipped).
- A transaction open longer than its ``transaction.timeout.ms`` is
  aborted with a bumped epoch, which fences the producer that let it run
  over. Ids idle for ``transactional_id_expiration_ms`` are forgotten.
- DescribeTransactions and ListTransactions; ``verify_offsets`` lets the
  group coordinator check a TxnOffsetCommit against the transaction.

Transactions v2 (KIP-890 part 2), beside v1, chosen per transaction by the
requests that make it: EndTxn v5 bumps the producer epoch of every
transaction it ends -- the markers carry the bumped epoch, so a late write
of the ended transaction is refused by every partition it reached -- and
answers with the producer id and epoch of the next transaction (a new
producer id once the epoch would pass MAX_PRODUCER_EPOCH: the markers then
carry the old id at epoch 32767). Its partitions are added by their
leaders (AddPartitionsToTxn v5 with ``verify_only`` false, on the
producer's Produce v12) and its group offsets by TxnOffsetCommit v5. An add
for the next transaction that arrives while the markers of the previous
one are being written waits for them instead of being refused. An abort
with nothing to abort still bumps the epoch (the producer cannot know
whether a produce reached a leader).

States are Kafka's (Empty, Ongoing, PrepareCommit, PrepareAbort,
CompleteCommit, CompleteAbort, Dead, PrepareEpochFence) and every change is
written to ``__transaction_state`` (txn_log.py) before it is acted on; after
a restart the coordinator reloads them and completes the transactions it
had prepared.

Who may call: the supervisor, on its single thread: it registers
``handlers()``, calls ``tick()`` from its poll loop, and provides the marker
sender and the group coordinator.
"""
from __future__ import annotations

import enum
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.server.topic import OFFSETS_TOPIC
from kafkalite.server.controller.producer_ids import ProducerIdManager
from kafkalite.server.network.requests import DEFERRED, RequestContext
from kafkalite.server.txn.txn_log import TransactionStateLog

log = logging.getLogger("kafkalite.txn")

NONE = 0
# An id is a string of Kafka's protocol (int16 length); kafkalite bounds it
# lower so that one id cannot cost the coordinator more than a little memory.
MAX_TRANSACTIONAL_ID_BYTES = 4096
# Kafka bumps to a new producer id before the epoch reaches Short.MAX_VALUE.
MAX_PRODUCER_EPOCH = 32767 - 1
MARKER_RETRY_BACKOFF_S = 0.2
# Implicit adds held per transactional id while its markers are written
# (each a leader's request; more than this many means leaders are retrying
# against markers that cannot be written: they get CONCURRENT_TRANSACTIONS)
MAX_WAITING_ADDS = 256
WRITE_TXN_MARKERS_VERSION = 1


class TxnState(enum.IntEnum):
    """Kafka's transaction states, with its on-disk numbering."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def display(self) -> str:
        return _DISPLAY[self]


_DISPLAY = {TxnState.EMPTY: "Empty", TxnState.ONGOING: "Ongoing",
            TxnState.PREPARE_COMMIT: "PrepareCommit", TxnState.PREPARE_ABORT: "PrepareAbort",
            TxnState.COMPLETE_COMMIT: "CompleteCommit", TxnState.COMPLETE_ABORT: "CompleteAbort",
            TxnState.DEAD: "Dead", TxnState.PREPARE_EPOCH_FENCE: "PrepareEpochFence"}
_BY_DISPLAY = {name.lower(): state for state, name in _DISPLAY.items()}
_PREPARED = (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)
_COMPLETE = (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class TransactionMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: set = field(default_factory=set)       # {(topic, partition)}
    start_ms: int = -1
    last_update_ms: int = -1
    # while prepared: the partitions whose marker is not written yet
    pending_markers: set = field(default_factory=set)
    markers_in_flight: set = field(default_factory=set)
    retry_at: float = 0.0
    # transactions v2: the producer id the next transaction takes when the
    # epoch ran out (-1: the same id), the client's transaction version of
    # the current transaction, the (id, epoch) an EndTxn v5 ended the last
    # transaction with (its retry is answered again), and the implicit adds
    # waiting for the markers of the previous transaction
    next_producer_id: int = -1
    previous_producer_id: int = -1
    client_version: int = 0
    ended_as: tuple = (-1, -1)
    waiting_adds: list = field(default_factory=list)

    def client_identity(self) -> tuple[int, int]:
        """The producer id and epoch the producer uses now."""
        if self.next_producer_id >= 0:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch

    def value(self) -> dict:
        """The TransactionLogValue body of this state."""
        return {"producer_id": self.producer_id, "producer_epoch": self.producer_epoch,
                "previous_producer_id": self.previous_producer_id,
                "next_producer_id": self.next_producer_id,
                "client_transaction_version": self.client_version,
                "transaction_timeout_ms": self.timeout_ms, "transaction_status": int(self.state),
                "transaction_partitions": [{"topic": t["topic"], "partition_ids": t["partitions"]}
                                           for t in self.topics()],
                "transaction_last_update_timestamp_ms": self.last_update_ms,
                "transaction_start_timestamp_ms": self.start_ms}

    def topics(self) -> list[dict]:
        by_topic: dict[str, list] = {}
        for topic, index in sorted(self.partitions):
            by_topic.setdefault(topic, []).append(index)
        return [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]


class TransactionCoordinator:
    def __init__(self, data_dir: str, *, producer_ids: ProducerIdManager, partition_count,
                 leader_of, markers, group_coordinator, partitions: int = 4,
                 max_timeout_ms: int = 900_000, id_expiration_ms: int = 604_800_000,
                 abort_check_interval_ms: int = 1_000,
                 clock: Callable[[], int] = _now_ms, internal_mirror=None):
        self.producer_ids = producer_ids
        self.partition_count = partition_count  # topic -> partition count, or None if unknown
        self.leader_of = leader_of              # (topic, partition) -> broker id, or None if gone
        self.markers = markers                  # BrokerRequests: WriteTxnMarkers to the workers
        self.groups = group_coordinator         # the __consumer_offsets partitions' owner
        self.max_timeout_ms = max_timeout_ms
        self.id_expiration_ms = id_expiration_ms
        self.abort_check_interval_s = abort_check_interval_ms / 1000.0
        self._clock = clock
        # internal_mirror: PostgreSQL's copy of __transaction_state in a cluster
        self.store = TransactionStateLog(data_dir, partitions, internal_mirror)
        self.txns: dict[str, TransactionMetadata] = {}
        self._next_check = 0.0
        self._load()

    def handlers(self) -> dict:
        return {
            ApiKey.INIT_PRODUCER_ID: self._init_producer_id,
            ApiKey.ADD_PARTITIONS_TO_TXN: self._add_partitions_to_txn,
            ApiKey.ADD_OFFSETS_TO_TXN: self._add_offsets_to_txn,
            ApiKey.END_TXN: self._end_txn,
            ApiKey.DESCRIBE_TRANSACTIONS: self._describe_transactions,
            ApiKey.LIST_TRANSACTIONS: self._list_transactions,
        }

    # ---- persistence -------------------------------------------------------------------------

    def _load(self) -> None:
        for tid, v in self.store.load().items():
            try:
                state = TxnState(v["transaction_status"])
            except ValueError:
                log.error("transactional id %r has unknown state %d; skipped", tid,
                          v["transaction_status"])
                continue
            if state == TxnState.DEAD:
                continue
            meta = self.txns[tid] = TransactionMetadata(
                tid, v["producer_id"], v["producer_epoch"], v["transaction_timeout_ms"], state,
                {(p["topic"], i) for p in v["transaction_partitions"] or () for i in p["partition_ids"]},
                v["transaction_start_timestamp_ms"], v["transaction_last_update_timestamp_ms"])
            meta.next_producer_id = v.get("next_producer_id", -1)
            meta.previous_producer_id = v.get("previous_producer_id", -1)
            meta.client_version = v.get("client_transaction_version", 0)
            if (meta.client_version >= 2 and meta.previous_producer_id >= 0
                    and state in (*_PREPARED, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)):
                # what the last v2 EndTxn was sent with (its retry after a
                # restart gets the same answer): the id before the bump, and
                # the epoch the markers carry minus one
                meta.ended_as = (meta.previous_producer_id, meta.producer_epoch - 1)
            if state in _COMPLETE:
                self._settle_next_producer_id(meta)
            if state in _PREPARED:
                meta.pending_markers = set(meta.partitions)
            elif state == TxnState.PREPARE_EPOCH_FENCE:
                # fenced while ongoing, its abort not yet prepared: prepare it
                # now (``tick`` writes the markers)
                meta.state = TxnState.ONGOING
                self._abort_fenced(meta, send=False)
        if self.txns:
            log.info("transaction coordinator loaded %d transactional id(s); %d to complete",
                     len(self.txns), sum(1 for m in self.txns.values() if m.pending_markers))

    def _persist(self, meta: TransactionMetadata, state: TxnState) -> None:
        """Write ``meta`` in ``state`` to the log, then adopt it; a failed
        write (KafkaStorageError) leaves ``meta`` as it was."""
        previous = meta.state
        meta.state = state
        meta.last_update_ms = self._clock()
        try:
            self.store.write(meta.transactional_id, meta.value(), meta.last_update_ms)
        except KafkaError:
            meta.state = previous
            raise

    def close(self) -> None:
        self.store.close()

    # ---- checks shared by the APIs -----------------------------------------------------------

    def _known(self, transactional_id: str, producer_id: int, producer_epoch: int,
               api_version: int, fenced_code_from: int | None) -> TransactionMetadata:
        """The id's metadata after checking that the caller is its current
        producer; ``fenced_code_from`` is the first version of the API that
        knows PRODUCER_FENCED (older ones, and every version when None, get
        INVALID_PRODUCER_EPOCH)."""
        meta = self.txns.get(transactional_id)
        current_pid, current_epoch = (-1, -1) if meta is None else meta.client_identity()
        if meta is None or producer_id not in (current_pid, meta.producer_id):
            raise errors.InvalidProducerIdMappingError(
                f"transactional id {transactional_id!r} is not mapped to producer id {producer_id}")
        if (producer_id, producer_epoch) != (current_pid, current_epoch):
            fenced = (errors.ProducerFencedError
                      if fenced_code_from is not None and api_version >= fenced_code_from
                      else errors.InvalidProducerEpochError)
            raise fenced(f"producer {producer_id} epoch {producer_epoch} of "
                         f"{transactional_id!r} is fenced by producer {current_pid} epoch "
                         f"{current_epoch}")
        return meta

    @staticmethod
    def _check_id(transactional_id) -> None:
        if not transactional_id:
            raise errors.InvalidRequestError("the transactional id must not be empty")
        if len(transactional_id.encode()) > MAX_TRANSACTIONAL_ID_BYTES:
            raise errors.InvalidRequestError(
                f"the transactional id is {len(transactional_id.encode())} bytes; at most "
                f"{MAX_TRANSACTIONAL_ID_BYTES} are allowed")

    # ---- InitProducerId ----------------------------------------------------------------------

    def _init_producer_id(self, ctx: RequestContext, body: dict):
        tid = body.get("transactional_id")
        if tid is None:
            # Without a transactional id Kafka always hands out a new producer
            # id (epoch 0), even when the producer names its old id and epoch.
            return self._producer_id_answer(NONE, self.producer_ids.next_id(), 0)
        try:
            self._check_id(tid)
            timeout = body["transaction_timeout_ms"]
            if not 0 < timeout <= self.max_timeout_ms:
                raise errors.InvalidTransactionTimeoutError(
                    f"transaction.timeout.ms {timeout} is outside 1..{self.max_timeout_ms} "
                    f"(transaction_max_timeout_ms)")
            meta = self.txns.get(tid)
            if meta is None:
                meta = TransactionMetadata(tid, self.producer_ids.next_id(), -1, timeout)
                self._bump(meta, timeout)
                self.txns[tid] = meta
                return self._producer_id_answer(NONE, meta.producer_id, meta.producer_epoch)
            given_pid, given_epoch = body.get("producer_id", -1), body.get("producer_epoch", -1)
            if given_pid >= 0 and (given_pid, given_epoch) != (meta.producer_id, meta.producer_epoch):
                # KIP-360: a producer re-initialising names the epoch it had;
                # an older one is a zombie
                raise (errors.ProducerFencedError if ctx.api_version >= 4
                       else errors.InvalidProducerEpochError)(
                    f"producer {given_pid} epoch {given_epoch} of {tid!r} is fenced")
            if meta.state in _PREPARED or meta.state == TxnState.PREPARE_EPOCH_FENCE:
                raise errors.ConcurrentTransactionsError(
                    f"the previous transaction of {tid!r} is still completing")
            if meta.state == TxnState.ONGOING:
                # fence the old producer and abort its transaction first; the
                # caller retries and gets an epoch past the one used to abort
                self._abort_fenced(meta)
                raise errors.ConcurrentTransactionsError(
                    f"aborting the open transaction of {tid!r} before a new producer takes it")
            self._bump(meta, timeout)
            return self._producer_id_answer(NONE, meta.producer_id, meta.producer_epoch)
        except KafkaError as exc:
            return self._producer_id_answer(exc.code, -1, -1)

    @staticmethod
    def _producer_id_answer(code: int, producer_id: int, epoch: int) -> dict:
        return {"throttle_time_ms": 0, "error_code": code, "producer_id": producer_id,
                "producer_epoch": epoch}

    def _bump(self, meta: TransactionMetadata, timeout_ms: int) -> None:
        """A new epoch (or, when epochs run out, a new producer id) for a new
        producer of ``meta``, durably, in state Empty."""
        pid, epoch = meta.client_identity()
        epoch += 1
        if epoch > MAX_PRODUCER_EPOCH:
            pid, epoch = self.producer_ids.next_id(), 0
        old = (meta.producer_id, meta.producer_epoch, meta.timeout_ms, set(meta.partitions),
               meta.start_ms, meta.next_producer_id, meta.client_version)
        meta.producer_id, meta.producer_epoch, meta.timeout_ms = pid, epoch, timeout_ms
        meta.partitions, meta.start_ms, meta.next_producer_id = set(), -1, -1
        meta.client_version, meta.ended_as = 0, (-1, -1)
        try:
            self._persist(meta, TxnState.EMPTY)
        except KafkaError:
            (meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.partitions,
             meta.start_ms, meta.next_producer_id, meta.client_version) = old
            raise

    # ---- AddPartitionsToTxn / AddOffsetsToTxn ------------------------------------------------

    def _add_partitions_to_txn(self, ctx: RequestContext, body: dict):
        if ctx.api_version >= 4:
            # broker-side batching (KIP-890): several transactions per request
            txns = body["transactions"]
            if len(txns) == 1 and not txns[0]["verify_only"]:
                meta = self.txns.get(txns[0]["transactional_id"])
                if (meta is not None and meta.state in _PREPARED
                        and (txns[0]["producer_id"], txns[0]["producer_epoch"])
                        == meta.client_identity() and meta.ended_as != (-1, -1)
                        and len(meta.waiting_adds) < MAX_WAITING_ADDS):
                    # the next v2 transaction's first write, while the markers
                    # of the last one are being written: answered once they are
                    meta.waiting_adds.append((ctx, body))
                    return DEFERRED
            return self._add_partitions_v4(ctx, txns)
        topics = self._add_partitions(ctx, body["v3_and_below_transactional_id"],
                                      body["v3_and_below_producer_id"],
                                      body["v3_and_below_producer_epoch"],
                                      body["v3_and_below_topics"])
        return {"throttle_time_ms": 0, "results_by_topic_v3_and_below": topics}

    def _add_partitions_v4(self, ctx: RequestContext, txns: list) -> dict:
        """A leader's AddPartitionsToTxn (v4+): several transactions, each to
        verify or (v2) to add to."""
        results = []
        for txn in txns:
            topics = self._add_partitions(ctx, txn["transactional_id"], txn["producer_id"],
                                          txn["producer_epoch"], txn["topics"],
                                          verify_only=txn["verify_only"])
            results.append({"transactional_id": txn["transactional_id"], "topic_results": [
                {"name": t["name"], "results_by_partition": t["results_by_partition"]}
                for t in topics]})
        return {"throttle_time_ms": 0, "error_code": NONE, "results_by_transaction": results}

    def _add_partitions(self, ctx: RequestContext, tid: str, pid: int, epoch: int, topics: list,
                        verify_only: bool = False) -> list:
        wanted: list[tuple[str, int]] = []
        unknown: set = set()
        for t in topics:
            count = self.partition_count(t["name"])
            for index in t["partitions"]:
                wanted.append((t["name"], index))
                if count is None or not 0 <= index < count:
                    unknown.add((t["name"], index))
        code = NONE
        if unknown:
            code = errors.OperationNotAttemptedError.code
        else:
            try:
                meta = self._known(tid, pid, epoch, ctx.api_version, 2)
                if verify_only:
                    if meta.state != TxnState.ONGOING or not set(wanted) <= meta.partitions:
                        raise errors.InvalidTxnStateError(
                            f"the partitions are not part of the transaction of {tid!r}")
                else:
                    self._add(meta, wanted, client_version=2 if ctx.api_version >= 4 else 1)
            except KafkaError as exc:
                code = exc.code
        by_topic: dict[str, list] = {}
        for tp in wanted:
            by_topic.setdefault(tp[0], []).append({
                "partition_index": tp[1],
                "partition_error_code": errors.UnknownTopicOrPartitionError.code
                if tp in unknown else code})
        return [{"name": t, "results_by_partition": ps} for t, ps in by_topic.items()]

    def _add(self, meta: TransactionMetadata, wanted, client_version: int = 1) -> None:
        """Add partitions to the transaction, starting it if needed (durably
        before the producer may write to them: a coordinator that forgot a
        partition could never end the transaction there). ``client_version``
        2: added by a leader or TxnOffsetCommit v5 (transactions v2)."""
        if meta.state in _PREPARED:
            raise errors.ConcurrentTransactionsError(
                f"the previous transaction of {meta.transactional_id!r} is still completing")
        if meta.state == TxnState.PREPARE_EPOCH_FENCE:
            raise errors.ProducerFencedError(f"{meta.transactional_id!r} is being fenced")
        new = set(wanted) - meta.partitions if meta.state == TxnState.ONGOING else set(wanted)
        if not new and meta.state == TxnState.ONGOING:
            return
        old = (set(meta.partitions), meta.start_ms, meta.client_version)
        if meta.state != TxnState.ONGOING:
            meta.partitions, meta.start_ms = set(), self._clock()
            meta.client_version = client_version
        meta.partitions |= new
        try:
            self._persist(meta, TxnState.ONGOING)
        except KafkaError:
            meta.partitions, meta.start_ms, meta.client_version = old
            raise

    def _add_offsets_to_txn(self, ctx: RequestContext, body: dict):
        try:
            if not body["group_id"]:
                raise errors.InvalidGroupIdError("the group id must not be empty")
            meta = self._known(body["transactional_id"], body["producer_id"],
                               body["producer_epoch"], ctx.api_version, 2)
            self._add(meta, [self.offsets_partition(body["group_id"])])
            code = NONE
        except KafkaError as exc:
            code = exc.code
        return {"throttle_time_ms": 0, "error_code": code}

    def offsets_partition(self, group: str) -> tuple[str, int]:
        return OFFSETS_TOPIC, self.groups.store.partition_for(group)

    def verify_offsets(self, tid: str, pid: int, epoch: int, group: str,
                       add: bool = False) -> int:
        """For TxnOffsetCommit: 0 when the producer's open transaction
        includes the group's offsets partition, else the error code. With
        ``add`` (TxnOffsetCommit v5, transactions v2) the partition is added."""
        try:
            meta = self._known(tid, pid, epoch, 0, None)
            if add:
                self._add(meta, [self.offsets_partition(group)], client_version=2)
        except KafkaError as exc:
            return exc.code
        if meta.state != TxnState.ONGOING or self.offsets_partition(group) not in meta.partitions:
            return errors.InvalidTxnStateError.code
        return NONE

    # ---- EndTxn ------------------------------------------------------------------------------

    def _end_txn(self, ctx: RequestContext, body: dict):
        identity = (-1, -1)
        try:
            if ctx.api_version >= 5:
                identity = self._end_v2(body["transactional_id"], body["producer_id"],
                                        body["producer_epoch"], bool(body["committed"]))
            else:
                meta = self._known(body["transactional_id"], body["producer_id"],
                                   body["producer_epoch"], ctx.api_version, 2)
                self._end(meta, bool(body["committed"]))
            code = NONE
        except KafkaError as exc:
            code = exc.code
        return {"throttle_time_ms": 0, "error_code": code, "producer_id": identity[0],
                "producer_epoch": identity[1]}

    def _end_v2(self, tid: str, pid: int, epoch: int, commit: bool) -> tuple[int, int]:
        """EndTxn v5: end the transaction with the epoch bumped; returns the
        producer id and epoch of the producer's next transaction."""
        meta = self.txns.get(tid)
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if meta is not None and (pid, epoch) == meta.ended_as and meta.state in (preparing, done):
            return meta.client_identity()        # a retry of the EndTxn that ended it
        meta = self._known(tid, pid, epoch, 5, 2)
        state = meta.state
        if state in _PREPARED or state == TxnState.PREPARE_EPOCH_FENCE:
            raise errors.ConcurrentTransactionsError(
                f"the transaction of {tid!r} is already completing")
        if state != TxnState.ONGOING and (commit or state not in _COMPLETE):
            raise errors.InvalidTxnStateError(
                f"cannot {'commit' if commit else 'abort'} {tid!r}: it is {state.display}, "
                f"not Ongoing")
        old = (meta.producer_id, meta.producer_epoch, meta.next_producer_id,
               meta.previous_producer_id, meta.ended_as, meta.client_version)
        if meta.next_producer_id >= 0:           # not possible while Ongoing; defensive
            meta.producer_id, meta.producer_epoch = meta.next_producer_id, 0
        # the markers carry the bumped epoch; past the last epoch a producer
        # may use, the next transaction takes a new producer id
        meta.previous_producer_id = meta.producer_id
        meta.producer_epoch += 1
        meta.next_producer_id = (self.producer_ids.next_id()
                                 if meta.producer_epoch > MAX_PRODUCER_EPOCH else -1)
        meta.ended_as = (pid, epoch)
        meta.client_version = 2
        try:
            if state == TxnState.ONGOING:
                self._prepare(meta, preparing)
            else:
                # nothing to abort: only the epoch moves on
                meta.partitions, meta.start_ms = set(), -1
                self._persist(meta, TxnState.COMPLETE_ABORT)
                self._settle_next_producer_id(meta)
        except KafkaError:
            (meta.producer_id, meta.producer_epoch, meta.next_producer_id,
             meta.previous_producer_id, meta.ended_as, meta.client_version) = old
            raise
        return meta.client_identity()

    def _settle_next_producer_id(self, meta: TransactionMetadata) -> None:
        """After a v2 transaction is complete: its producer continues under
        the new producer id, if the epoch ran out (in memory; the record
        just written names it as next_producer_id, which load() honours)."""
        if meta.next_producer_id >= 0:
            meta.producer_id, meta.producer_epoch = meta.next_producer_id, 0
            meta.next_producer_id = -1

    def _end(self, meta: TransactionMetadata, commit: bool) -> None:
        state = meta.state
        done = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        preparing = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        if state == done:
            return                      # a retry of an EndTxn that completed
        if state == preparing:
            raise errors.ConcurrentTransactionsError(
                f"the transaction of {meta.transactional_id!r} is already completing")
        if state != TxnState.ONGOING:
            raise errors.InvalidTxnStateError(
                f"cannot {'commit' if commit else 'abort'} {meta.transactional_id!r}: it is "
                f"{state.display}, not Ongoing")
        self._prepare(meta, preparing)

    def _prepare(self, meta: TransactionMetadata, state: TxnState, send: bool = True) -> None:
        self._persist(meta, state)
        meta.pending_markers = set(meta.partitions)
        meta.retry_at = 0.0
        if send:
            self._send_markers(meta)

    def _abort_fenced(self, meta: TransactionMetadata, send: bool = True) -> None:
        """Abort an Ongoing transaction with the epoch bumped past its
        producer's: that producer's later writes and EndTxn are refused.
        Kafka writes PrepareEpochFence first when it cannot prepare at once;
        here both are one step on one thread."""
        epoch = meta.producer_epoch + 1
        if epoch > MAX_PRODUCER_EPOCH:
            epoch = meta.producer_epoch     # the next InitProducerId moves to a new id
        previous, meta.producer_epoch = meta.producer_epoch, epoch
        try:
            self._prepare(meta, TxnState.PREPARE_ABORT, send)
        except KafkaError:
            meta.producer_epoch = previous
            raise

    # ---- markers -----------------------------------------------------------------------------

    def _send_markers(self, meta: TransactionMetadata) -> None:
        """Write the markers still pending (not in flight) of a prepared
        transaction; completes it when none are left."""
        commit = meta.state == TxnState.PREPARE_COMMIT
        coordinator_epoch = self.store.coordinator_epoch(meta.transactional_id)
        by_broker: dict[int, dict[str, list]] = {}
        local: list = []
        for tp in sorted(meta.pending_markers - meta.markers_in_flight):
            topic, index = tp
            if topic == OFFSETS_TOPIC:
                local.append(tp)
                continue
            count = self.partition_count(topic)
            if count is None or index >= count:
                log.warning("no marker for %s-%d of %r: the topic is gone", topic, index,
                            meta.transactional_id)
                meta.pending_markers.discard(tp)
                continue
            leader = self.leader_of(tp)
            if leader is None:
                continue                     # no leader now: the next tick retries
            by_broker.setdefault(leader, {}).setdefault(topic, []).append(index)
        for tp in local:
            try:
                self.groups.complete_transaction(tp[1], meta.producer_id, meta.producer_epoch,
                                                 commit, coordinator_epoch)
                meta.pending_markers.discard(tp)
            except KafkaError as exc:
                log.error("marker for %s-%d of %r failed: %s", *tp, meta.transactional_id, exc)
        for broker, topics in by_broker.items():
            sent = {(t, i) for t, ids in topics.items() for i in ids}
            meta.markers_in_flight |= sent
            body = {"markers": [{"producer_id": meta.producer_id,
                                 "producer_epoch": meta.producer_epoch,
                                 "transaction_result": commit, "coordinator_epoch": coordinator_epoch,
                                 "topics": [{"name": t, "partition_indexes": ids}
                                            for t, ids in topics.items()]}]}
            self.markers.send(broker, ApiKey.WRITE_TXN_MARKERS, WRITE_TXN_MARKERS_VERSION, body,
                              lambda result, m=meta, s=sent: self._on_markers(m, s, result))
        self._maybe_complete(meta)

    def _on_markers(self, meta: TransactionMetadata, sent: set, result) -> None:
        meta.markers_in_flight -= sent
        if isinstance(result, KafkaError):
            log.warning("WriteTxnMarkers for %r failed (%s); retrying", meta.transactional_id,
                        result)
            meta.retry_at = time.monotonic() + MARKER_RETRY_BACKOFF_S
            return
        for marker in result["markers"]:
            for topic in marker["topics"]:
                for p in topic["partitions"]:
                    tp = (topic["name"], p["partition_index"])
                    code = p["error_code"]
                    if code == NONE or code == errors.UnknownTopicOrPartitionError.code:
                        meta.pending_markers.discard(tp)
                    else:
                        log.warning("marker for %s-%d of %r: error %d; retrying", *tp,
                                    meta.transactional_id, code)
                        meta.retry_at = time.monotonic() + MARKER_RETRY_BACKOFF_S
        self._maybe_complete(meta)

    def _maybe_complete(self, meta: TransactionMetadata) -> None:
        if meta.state not in _PREPARED or meta.pending_markers or meta.markers_in_flight:
            return
        done = (TxnState.COMPLETE_COMMIT if meta.state == TxnState.PREPARE_COMMIT
                else TxnState.COMPLETE_ABORT)
        try:
            self._persist(meta, done)
        except KafkaError as exc:
            log.error("cannot record the end of %r: %s; retrying", meta.transactional_id, exc)
            meta.pending_markers = set()      # nothing left to write: only the record
            meta.retry_at = time.monotonic() + MARKER_RETRY_BACKOFF_S
            return
        meta.partitions = set()
        self._settle_next_producer_id(meta)
        waiting, meta.waiting_adds = meta.waiting_adds, []
        for ctx, body in waiting:
            ctx.respond(self._add_partitions_v4(ctx, body["transactions"]))

    # ---- time --------------------------------------------------------------------------------

    def tick(self) -> None:
        """From the supervisor's loop: retry markers, abort transactions past
        their timeout, forget expired ids."""
        now = time.monotonic()
        for meta in list(self.txns.values()):
            if meta.state in _PREPARED and now >= meta.retry_at:
                if meta.pending_markers - meta.markers_in_flight:
                    self._send_markers(meta)
                elif not meta.markers_in_flight:
                    self._maybe_complete(meta)
        if now < self._next_check:
            return
        self._next_check = now + self.abort_check_interval_s
        wall = self._clock()
        for tid, meta in list(self.txns.items()):
            try:
                if meta.state == TxnState.ONGOING and wall - meta.start_ms > meta.timeout_ms:
                    log.info("aborting the transaction of %r: open for %d ms, its timeout is "
                             "%d ms", tid, wall - meta.start_ms, meta.timeout_ms)
                    ended_as = (meta.producer_id, meta.producer_epoch)
                    if meta.client_version >= 2:
                        meta.previous_producer_id = meta.producer_id
                    self._abort_fenced(meta)
                    if meta.client_version >= 2:
                        # a v2 producer's EndTxn(abort) with the epoch it had
                        # is answered as its retry: it carries on, bumped
                        meta.ended_as = ended_as
                elif (meta.state in _COMPLETE
                      and wall - meta.last_update_ms > self.id_expiration_ms):
                    self.store.write(tid, None, wall)
                    del self.txns[tid]
                    log.info("transactional id %r expired", tid)
            except KafkaError as exc:
                log.error("transaction housekeeping of %r failed: %s", tid, exc)
        self.store.housekeeping()

    # ---- admin -------------------------------------------------------------------------------

    def _describe_transactions(self, ctx: RequestContext, body: dict):
        out = []
        for tid in body["transactional_ids"]:
            meta = self.txns.get(tid)
            if meta is None:
                out.append({"error_code": errors.TransactionalIdNotFoundError.code,
                            "transactional_id": tid, "transaction_state": "",
                            "transaction_timeout_ms": 0, "transaction_start_time_ms": -1,
                            "producer_id": -1, "producer_epoch": -1, "topics": []})
                continue
            out.append({"error_code": NONE, "transactional_id": tid,
                        "transaction_state": meta.state.display,
                        "transaction_timeout_ms": meta.timeout_ms,
                        "transaction_start_time_ms": meta.start_ms,
                        "producer_id": meta.producer_id, "producer_epoch": meta.producer_epoch,
                        "topics": meta.topics()})
        return {"throttle_time_ms": 0, "transaction_states": out}

    def _list_transactions(self, ctx: RequestContext, body: dict):
        states, unknown = set(), []
        for name in body.get("state_filters") or ():
            state = _BY_DISPLAY.get(name.lower())
            if state is None:
                unknown.append(name)
            else:
                states.add(state)
        pids = set(body.get("producer_id_filters") or ())
        min_duration = body.get("duration_filter", -1)
        pattern = body.get("transactional_id_pattern")
        if pattern:
            # v2 (KIP-1152): a regular expression the whole id must match
            try:
                matcher = re.compile(pattern)
            except re.error as exc:
                log.info("ListTransactions: invalid transactional_id_pattern %r: %s", pattern, exc)
                return {"throttle_time_ms": 0,
                        "error_code": errors.InvalidRegularExpressionError.code,
                        "unknown_state_filters": [], "transaction_states": []}
        wall = self._clock()
        out = []
        for tid, meta in sorted(self.txns.items()):
            if pattern and not matcher.fullmatch(tid):
                continue
            if (states or unknown) and meta.state not in states:
                continue
            if pids and meta.producer_id not in pids:
                continue
            if min_duration >= 0 and (meta.state != TxnState.ONGOING
                                      or wall - meta.start_ms < min_duration):
                continue
            out.append({"transactional_id": tid, "producer_id": meta.producer_id,
                        "transaction_state": meta.state.display})
        return {"throttle_time_ms": 0, "error_code": NONE, "unknown_state_filters": unknown,
                "transaction_states": out}
