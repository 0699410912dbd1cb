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

Who may call: the coordinators, on the supervisor's single thread.
Workers never open these partitions.
"""
from __future__ import annotations

import logging
import os
from concurrent.futures import ThreadPoolExecutor

from kafkalite.errors import KafkaError
from kafkalite.record import RecordBatchBuilder, build_control_batch, iter_batches
from kafkalite.record.layout import CONTROL_COMMIT
from kafkalite.server.partition import Partition
from kafkalite.storage import AppendOrigin
from kafkalite.storage.config import LogConfig
from kafkalite.storage.log import PartitionLog

log = logging.getLogger("kafkalite.coordinator")

# The supervisor's broker id for its own partitions' replica lists.
COORDINATOR_BROKER_ID = -1
_READ_CHUNK = 4 << 20


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


class InternalTopicLog:
    def __init__(self, data_dir: str, topic: str, partitions: int, properties: dict):
        if partitions < 1:
            raise ValueError(f"{topic} needs at least 1 partition")
        self.topic = topic
        self.partitions = partitions
        config = LogConfig.from_properties(properties)
        self.parts: list[Partition] = []
        for i in range(partitions):
            plog = PartitionLog.open(os.path.join(data_dir, f"{topic}-{i}"), config)
            part = Partition(topic, i, None, plog, COORDINATOR_BROKER_ID)
            part.make_leader(max(plog.leader_epoch, 0))
            self.parts.append(part)
        self._checkpoint_writer = ThreadPoolExecutor(1, thread_name_prefix=f"{topic}-checkpoints")

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
        self.parts[index].append_as_leader(builder.build(), AppendOrigin.COORDINATOR)

    def append_marker(self, index: int, producer_id: int, producer_epoch: int, commit: bool,
                      coordinator_epoch: int) -> None:
        self.parts[index].append_as_leader(
            bytearray(build_control_batch(commit, producer_id, producer_epoch, coordinator_epoch)),
            AppendOrigin.COORDINATOR)

    # ---- loading ----------------------------------------------------------------------------

    def replay(self, on_record, on_marker=None) -> None:
        """Every record of every partition, in log order:
        ``on_record(index, producer_id, transactional, key, value)`` and, for
        markers, ``on_marker(index, producer_id, commit)``."""
        for index, plog in enumerate(self.logs):
            position = plog.log_start_offset
            while position < plog.log_end_offset:
                data = plog.read(position, _READ_CHUNK).read()
                if not data:
                    break
                for batch in iter_batches(data):
                    if batch.is_control:
                        if on_marker is not None:
                            key = batch.records()[0].key
                            commit = int.from_bytes(bytes(key[2:4]), "big") == CONTROL_COMMIT
                            on_marker(index, batch.producer_id, commit)
                    else:
                        for record in batch.records():
                            on_record(index, batch.producer_id, batch.is_transactional,
                                      record.key, record.value)
                    position = batch.next_offset

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
