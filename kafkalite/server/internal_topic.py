"""The partitions of a coordinator's internal topic, led by the supervisor.

The group coordinator keeps its state in ``__consumer_offsets`` and the
transaction coordinator in ``__transaction_state``: compacted topics of
versioned key/value records (Kafka's formats), written through the same
log engine as every topic and replayed when the supervisor starts. This
class is what both have in common:

- ``partition_for(key)``: a key's partition, Kafka's way
  (``abs(String.hashCode) % partitions``), so all of a group's or a
  transactional id's records are in one partition, in order;
- ``append``: one batch of records (transactional when the group
  coordinator writes a transaction's offsets), and ``append_marker``: a
  COMMIT/ABORT marker ending such a transaction (the transaction
  coordinator's WriteTxnMarkers, delivered in-process);
- ``replay``: every record and marker, in log order, per partition;
- ``housekeeping`` (compaction, checkpoints) and ``close``. Checkpoint
  files are written (two fsyncs each) by a thread of their own, in order:
  on the supervisor's thread a busy disk stalled every coordinator
  request behind them (up to 0.8 s seen).

Each partition is a ``Partition`` (partition.py) this process leads, as a
worker's are: appends go through it with ``AppendOrigin.COORDINATOR`` and
it owns the high watermark.

In a cluster (``--cluster``) the controller's node may die and another
take over (broker_node.py), so the logs on its disk cannot be the only
copy: ``mirror`` (cluster_store.PostgresMetadataStore) keeps every batch in
PostgreSQL too. A batch is written there first, under the controller lease,
then to the local log, with the offset and leader epoch the local append
gives it, so both hold the same bytes; a batch PostgreSQL has and the log
lacks is an unanswered write that survives, never the other way round. At
start each partition's local log is compared with PostgreSQL's batches and,
if they differ (another node wrote them, or this node's copy is stale), is
rebuilt from them, keeping their offsets, with the leader epoch (the
coordinator epoch of transaction markers) one higher, so that markers of
the node that was the controller before are fenced. ``housekeeping``
rewrites PostgreSQL's batches from the compacted log when they have grown
to twice what it held after the last rewrite (plus ``MIRROR_SLACK``).

Who may call: the coordinators, on the supervisor's single thread.
Workers never open these partitions.
"""
from __future__ import annotations

import logging
import os
import shutil
import struct
from concurrent.futures import ThreadPoolExecutor

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.record import RecordBatchBuilder, build_control_batch, iter_batches
from kafkalite.record.layout import CONTROL_COMMIT
from kafkalite.server.replica.partition import Partition
from kafkalite.storage import AppendOrigin
from kafkalite.storage.config import LogConfig
from kafkalite.storage.log import PartitionLog

log = logging.getLogger("kafkalite.coordinator")

# The supervisor's broker id for its own partitions' replica lists.
COORDINATOR_BROKER_ID = -1
_READ_CHUNK = 4 << 20
# RecordBatch v2: base offset at byte 0, partition leader epoch at 12, the
# CRC at 17, which covers everything from 21 on
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
_CRC_AT = 17
MIRROR_SLACK = 1000
IO_THREADS = 16         # opening a topic's partitions: they wait on fsyncs


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, int32 wrap-around)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    h = java_string_hash(key)
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def _iter_log(plog: PartitionLog):
    """Every batch of a log, in offset order."""
    position = plog.log_start_offset
    while position < plog.log_end_offset:
        data = plog.read(position, _READ_CHUNK).read()
        if not data:
            break
        for batch in iter_batches(data):
            yield batch
            position = batch.next_offset


def _batches(plog: PartitionLog) -> list[tuple[int, bytes]]:
    """(base offset, bytes) of every batch of a log."""
    return [(batch.base_offset, batch.tobytes()) for batch in _iter_log(plog)]


def _same(local: list, mirrored: list) -> bool:
    """The same batches at the same offsets (leader epochs aside)."""
    return len(local) == len(mirrored) and all(
        a[0] == b[0] and a[1][_CRC_AT:] == b[1][_CRC_AT:] for a, b in zip(local, mirrored))


class InternalTopicLog:
    def __init__(self, data_dir: str, topic: str, partitions: int, properties: dict,
                 mirror=None):
        if partitions < 1:
            raise ValueError(f"{topic} needs at least 1 partition")
        self.topic = topic
        self.partitions = partitions
        self.mirror = mirror            # PostgreSQL's copy in a cluster (module docstring)
        self._mirror_rows = [0] * partitions           # batches PostgreSQL holds
        self._mirror_rewritten = [0] * partitions      # ... just after the last rewrite
        config = LogConfig.from_properties(properties)
        self.parts: list[Partition] = []
        mirrored = mirror.read_internal(topic) if mirror is not None else {}
        directories = [os.path.join(data_dir, f"{topic}-{i}") for i in range(partitions)]

        def open_log(directory: str) -> PartitionLog:
            # after a crash, what recovery found intact is not fsynced here
            # (four fsyncs a partition, on a disk other processes keep busy:
            # the next coordinator's start waited on them, issue 68); the
            # page cache outlives a killed process, and an unclean open scans
            # the active segment again whatever the recovery point says
            plog = PartitionLog.open(directory, config, flush_recovered=False)
            # the leader epoch's checkpoint fsyncs here, in parallel, rather
            # than one by one in make_leader below (as a worker's assign)
            plog.leader_epoch_cache.assign(max(plog.leader_epoch, 0), plog.log_end_offset)
            return plog
        # Opened on a pool: each log's open and epoch write two files with
        # fsyncs, and one by one the 50 partitions of each topic took
        # 0.2-0.8 s of every start, a controller takeover's included
        # (a pool's error is raised here, as the loop's was)
        with ThreadPoolExecutor(min(IO_THREADS, partitions),
                                thread_name_prefix=f"{topic}-open") as pool:
            plogs = list(pool.map(open_log, directories))
        for i, (directory, plog) in enumerate(zip(directories, plogs)):
            bump = 0
            if mirror is not None:
                plog, bump = self._restore(i, plog, directory, config, mirrored.get(i, []))
            part = Partition(topic, i, None, plog, COORDINATOR_BROKER_ID)
            part.make_leader(max(plog.leader_epoch, 0) + bump)
            self.parts.append(part)
        self._checkpoint_writer = ThreadPoolExecutor(1, thread_name_prefix=f"{topic}-checkpoints")

    def _restore(self, index: int, plog: PartitionLog, directory: str, config: LogConfig,
                 mirrored: list[tuple[int, bytes]]) -> tuple[PartitionLog, int]:
        """Make partition ``index``'s log hold PostgreSQL's batches
        (``mirrored``); returns the log and how much to raise its leader
        epoch by."""
        local = _batches(plog)
        if _same(local, mirrored):
            self._mirror_rows[index] = self._mirror_rewritten[index] = len(mirrored)
            return plog, 0
        if not mirrored:
            # a log from before its batches were kept in PostgreSQL: seed them
            self.mirror.rewrite_internal(self.topic, index, local)
            self._mirror_rows[index] = self._mirror_rewritten[index] = len(local)
            return plog, 0
        log.warning("%s-%d: rebuilding this node's copy from the cluster's (%d batches, "
                    "%d here)", self.topic, index, len(mirrored), len(local))
        plog.close()
        shutil.rmtree(directory)
        plog = PartitionLog.open(directory, config)
        for _, batch in mirrored:
            plog.append_as_follower(bytearray(batch))
        self._mirror_rows[index] = self._mirror_rewritten[index] = len(mirrored)
        return plog, 1

    @property
    def logs(self) -> list[PartitionLog]:
        return [p.log for p in self.parts]

    def partition_for(self, key: str) -> int:
        return partition_for(key, self.partitions)

    # ---- writing ----------------------------------------------------------------------------

    def append(self, index: int, entries: list[tuple[bytes, bytes | None]], now_ms: int, *,
               producer_id: int = -1, producer_epoch: int = -1) -> None:
        """One batch of (key, value) records in partition ``index``; with a
        producer id, a transactional batch of that producer's transaction."""
        if producer_id >= 0:
            builder = RecordBatchBuilder(producer_id=producer_id, producer_epoch=producer_epoch,
                                         transactional=True)
        else:
            builder = RecordBatchBuilder()
        for key, value in entries:
            builder.append(now_ms, key, value)
        self._append(index, builder.build())

    def append_marker(self, index: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int) -> None:
        self._append(index, bytearray(build_control_batch(commit, producer_id, producer_epoch,
                                                          coordinator_epoch)))

    def _append(self, index: int, batch) -> None:
        part = self.parts[index]
        if self.mirror is not None:
            # PostgreSQL first, with the offset and epoch the append below
            # stamps (this thread is the log's only writer); raises, and
            # nothing is appended, when it cannot be written
            batch = bytearray(batch)
            base = part.log.log_end_offset
            _BASE_OFFSET.pack_into(batch, 0, base)
            _LEADER_EPOCH.pack_into(batch, 12, part.leader_epoch)
            try:
                self.mirror.append_internal(self.topic, index, base, batch)
            except KafkaError as exc:
                # retriable for the client (Kafka answers a coordinator
                # write it cannot replicate so too)
                raise errors.CoordinatorNotAvailableError(
                    f"{self.topic}-{index} cannot be written to the cluster's PostgreSQL: "
                    f"{exc.message}") from None
            self._mirror_rows[index] += 1
        part.append_as_leader(batch, AppendOrigin.COORDINATOR)

    # ---- loading ----------------------------------------------------------------------------

    def replay(self, on_record, on_marker=None) -> None:
        """Every record of every partition, in log order:
        ``on_record(index, producer_id, transactional, key, value)`` and, for
        markers, ``on_marker(index, producer_id, commit)``."""
        for index, plog in enumerate(self.logs):
            for batch in _iter_log(plog):
                if batch.is_control:
                    if on_marker is not None:
                        key = batch.records()[0].key
                        commit = int.from_bytes(bytes(key[2:4]), "big") == CONTROL_COMMIT
                        on_marker(index, batch.producer_id, commit)
                else:
                    for record in batch.records():
                        on_record(index, batch.producer_id, batch.is_transactional,
                                  record.key, record.value)

    # ---- housekeeping -----------------------------------------------------------------------

    def housekeeping(self) -> None:
        """Each log's periodic work (compaction by the topic's policy) and
        checkpoint, as a worker does for its partitions."""
        for plog in self.logs:
            try:
                plog.housekeeping()
            except KafkaError as exc:
                log.error("housekeeping of %s failed: %s", plog.name, exc)
            state = plog.take_checkpoint()
            if state is not None:
                self._checkpoint_writer.submit(self._write_checkpoint, plog.name, state,
                                               plog.directory)
        if self.mirror is not None:
            for index, plog in enumerate(self.logs):
                if self._mirror_rows[index] <= 2 * self._mirror_rewritten[index] + MIRROR_SLACK:
                    continue
                batches = _batches(plog)
                try:
                    self.mirror.rewrite_internal(self.topic, index, batches)
                except KafkaError as exc:
                    log.error("cannot rewrite %s's copy in PostgreSQL: %s", plog.name, exc)
                    continue
                self._mirror_rows[index] = self._mirror_rewritten[index] = len(batches)

    @staticmethod
    def _write_checkpoint(name: str, state, directory: str) -> None:
        try:
            state.write(directory)
        except (KafkaError, OSError) as exc:
            log.error("checkpoint of %s failed: %s", name, exc)

    def close(self) -> None:
        self._checkpoint_writer.shutdown(wait=True)     # then each log's last, durable one
        for plog in self.logs:
            plog.close()
