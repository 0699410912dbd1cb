"""Small state files written atomically, and the partition checkpoints.

Every checkpoint is replaced as a whole: write ``name.tmp``, fsync it, rename
over ``name``, fsync the directory. A crash leaves either the old or the new
file, never a mix; a leftover ``.tmp`` is ignored and removed on load.

Partition checkpoint (``partition.checkpoint``), text, one field per line:

    kafkalite-partition-checkpoint 1
    log-start-offset <int>
    recovery-point <int>        every offset below it is fsynced to disk
    high-watermark <int>
    cleaner-checkpoint <int>    the first offset the cleaner has not compacted

Broker checkpoint file (``broker-<id>.partition-checkpoints`` in the data
directory): the checkpoints of every partition one broker hosts, in one
file, as Kafka keeps one recovery-point-offset-checkpoint and
replication-offset-checkpoint per log directory. Text, one partition a line:

    kafkalite-partition-checkpoints 1
    <partition directory name> <topic id or -> <taken at, ns since the epoch> \
        <log-start-offset> <recovery-point> <high-watermark> <cleaner-checkpoint>

While a broker hosts a partition, the partition's checkpoints go here: a
change costs a line in memory, and the file is rewritten whole (atomically,
as above) on a background thread when anything changed, so a broker with
thousands of partitions pays one fsync per interval, never one per partition
and never on its event loop. What that means for a crash: a checkpoint is
durable at the next write of the file, not at once; every value in it may
lag (the log start, high watermark and cleaner checkpoint only go up, and a
recovery point that lags only means more recovery), except after a
truncation, whose lower recovery point the log writes to partition.checkpoint
at once (``PartitionLog.checkpoint(durable=True)``), as it does when it closes.
So at open the newer of the partition's line here and its partition.checkpoint
wins (by the time the line was taken and the file's modification time); a
line whose topic id is not the partition's (a topic deleted and created again)
is ignored. A partition that moved to another broker (a restart with fewer
workers) starts from its partition.checkpoint: exact after a clean stop, older
after a crash (more recovery, nothing lost).

Who may call: the partition's owner only (one writer per file); a broker
checkpoint file is owned by its broker's event-loop thread, and only its own
background thread writes the file.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass

from kafkalite.errors import KafkaStorageError

log = logging.getLogger(__name__)

PARTITION_CHECKPOINT = "partition.checkpoint"
_MAGIC = "kafkalite-partition-checkpoint"
_VERSION = 1


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """os.write until every byte is written (a write may be short)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def write_atomically(path: str, data: bytes, mode: int = 0o644) -> None:
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(os.path.dirname(path) or ".")
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise KafkaStorageError(f"cannot write {path}: {exc.strerror or exc}") from exc


@dataclass
class PartitionCheckpoint:
    log_start_offset: int = 0
    recovery_point: int = 0
    high_watermark: int = 0
    cleaner_checkpoint: int = 0

    _FIELDS = (("log-start-offset", "log_start_offset"), ("recovery-point", "recovery_point"),
               ("high-watermark", "high_watermark"), ("cleaner-checkpoint", "cleaner_checkpoint"))

    @classmethod
    def read(cls, directory: str) -> "PartitionCheckpoint | None":
        """The stored checkpoint, or None if there is none (a new partition) or it
        cannot be read (then the loader recovers from the segments alone)."""
        path = os.path.join(directory, PARTITION_CHECKPOINT)
        try:
            os.unlink(path + ".tmp")
        except FileNotFoundError:
            pass
        try:
            with open(path, "r", encoding="ascii") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return None
        try:
            magic, version = lines[0].split()
            if magic != _MAGIC or int(version) != _VERSION:
                raise ValueError(f"unknown header {lines[0]!r}")
            values = dict(line.split() for line in lines[1:] if line.strip())
            return cls(**{attr: int(values[key]) for key, attr in cls._FIELDS})
        except (ValueError, KeyError, IndexError) as exc:
            # The segments are the source of truth; losing this file only
            # costs a full recovery scan.
            log.warning("ignoring malformed %s (%s); recovering from the segments", path, exc)
            return None

    def write(self, directory: str) -> None:
        body = [f"{_MAGIC} {_VERSION}"]
        body += [f"{key} {getattr(self, attr)}" for key, attr in self._FIELDS]
        write_atomically(os.path.join(directory, PARTITION_CHECKPOINT),
                         ("\n".join(body) + "\n").encode("ascii"))


BROKER_CHECKPOINTS = "broker-%d.partition-checkpoints"
_BROKER_MAGIC = "kafkalite-partition-checkpoints"


class CheckpointFile:
    """The checkpoints of the partitions one broker hosts (format above).
    ``PartitionLog.open(..., checkpoints=this)`` reads and writes through it."""

    def __init__(self, path: str):
        self.path = path
        # directory name -> (topic id or "-", taken at ns, PartitionCheckpoint)
        self._entries: dict[str, tuple[str, int, PartitionCheckpoint]] = {}
        self._topic_ids: dict[str, str] = {}
        self._dirty = False
        self._lock = threading.Lock()          # one write of the file at a time
        self._wake = threading.Condition()
        self._queued: bytes | None = None
        self._writer: threading.Thread | None = None
        self._closed = False
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, "r", encoding="ascii") as f:
                lines = f.read().splitlines()
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("ignoring %s (%s): the partitions recover from their own files",
                        self.path, exc)
            return
        try:
            magic, version = lines[0].split()
            if magic != _BROKER_MAGIC or int(version) != _VERSION:
                raise ValueError(f"unknown header {lines[0]!r}")
            for line in lines[1:]:
                name, topic_id, at, *values = line.split()
                self._entries[name] = (topic_id, int(at),
                                       PartitionCheckpoint(*(int(v) for v in values)))
        except (ValueError, IndexError, TypeError) as exc:
            log.warning("ignoring malformed %s (%s): the partitions recover from their own "
                        "files", self.path, exc)
            self._entries.clear()

    def bind(self, directory: str, topic_id) -> None:
        """The topic id of the partition in ``directory`` (before it is opened)."""
        self._topic_ids[os.path.basename(directory)] = str(topic_id) if topic_id else "-"

    def read(self, directory: str) -> PartitionCheckpoint | None:
        """The newer of the partition's line here (if its topic id matches)
        and its own partition.checkpoint."""
        name = os.path.basename(directory)
        own = PartitionCheckpoint.read(directory)
        entry = self._entries.get(name)
        if entry is None or entry[0] != self._topic_ids.get(name, "-"):
            return own
        if own is not None:
            try:
                mtime = os.stat(os.path.join(directory, PARTITION_CHECKPOINT)).st_mtime_ns
            except OSError:
                mtime = 0
            if mtime >= entry[1]:
                return own
        return entry[2]

    def write(self, directory: str, checkpoint: PartitionCheckpoint) -> None:
        name = os.path.basename(directory)
        self._entries[name] = (self._topic_ids.get(name, "-"), time.time_ns(), checkpoint)
        self._dirty = True

    def forget(self, directory: str) -> None:
        """The partition is gone (deleted): its line goes at the next write."""
        name = os.path.basename(directory)
        self._topic_ids.pop(name, None)
        if self._entries.pop(name, None) is not None:
            self._dirty = True

    def _encode(self) -> bytes:
        out = [f"{_BROKER_MAGIC} {_VERSION}"]
        for name, (topic_id, at, c) in list(self._entries.items()):
            out.append(f"{name} {topic_id} {at} {c.log_start_offset} {c.recovery_point} "
                       f"{c.high_watermark} {c.cleaner_checkpoint}")
        return ("\n".join(out) + "\n").encode("ascii")

    def flush(self, wait: bool = False) -> None:
        """Write the file if anything changed: on the background thread
        (``wait`` False: the caller never blocks on the fsyncs), or now."""
        if not self._dirty:
            return
        self._dirty = False
        data = self._encode()
        if wait:
            with self._wake:
                self._queued = None           # superseded by this write
            self._write(data)
            return
        with self._wake:
            self._queued = data
            if self._writer is None:
                self._writer = threading.Thread(target=self._run, daemon=True,
                                                name="kafkalite-checkpoints")
                self._writer.start()
            self._wake.notify()

    def _write(self, data: bytes) -> None:
        with self._lock:
            try:
                write_atomically(self.path, data)
            except KafkaStorageError as exc:
                log.error("%s; trying again at the next checkpoint", exc)
                self._dirty = True

    def _run(self) -> None:
        while True:
            with self._wake:
                while self._queued is None and not self._closed:
                    self._wake.wait()
                data, self._queued = self._queued, None
                if data is None:
                    return
            self._write(data)

    def close(self) -> None:
        """Write what changed, now, and stop the background thread."""
        self.flush(wait=True)
        with self._wake:
            self._closed = True
            self._wake.notify()
        if self._writer is not None:
            self._writer.join()
