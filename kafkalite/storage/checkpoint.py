"""Small state files written atomically, and the partition checkpoint.

Every checkpoint is replaced as a whole: write ``name.tmp``, fsync it, rename
over ``name``, fsync the directory. A crash leaves either the old or the new
file, never a mix; a leftover ``.tmp`` is ignored and removed on load.

Partition checkpoint (``partition.checkpoint``), text, one field per line:

    kafkalite-partition-checkpoint 1
    log-start-offset <int>
    recovery-point <int>        every offset below it is fsynced to disk
    high-watermark <int>
    cleaner-checkpoint <int>    the first offset the cleaner has not compacted

Who may call: the partition's owner only (one writer per file).
"""
from __future__ import annotations

import logging
import os
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


def write_atomically(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
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
