"""The remote store of tiered segments (Kafka's RemoteStorageManager).

Contract (Kafka's, KIP-405): the store keeps a segment's files under a
``RemoteLogSegmentId`` that is unique per copy (a topic-partition and a
random id), so a copy retried after a crash never overwrites or mixes with
an earlier attempt. It knows nothing of offsets: which copies exist and
which are complete is the remote log metadata's business (metadata.py),
which records COPY_SEGMENT_STARTED before ``copy_log_segment_data`` and
COPY_SEGMENT_FINISHED after it; a copy started and never finished is
deleted by id. ``delete_log_segment_data`` of a copy that is not there (or
only partly there) succeeds. Errors are RemoteStorageError.

Who may call: the partition's owner (its RemoteLog), from its thread; an
implementation keeps no per-partition state of its own.

LocalDirectoryRemoteStorage layout (``<root>``, a second disk or any
directory; kafkalite's embedded default is ``<data_dir>/remote-storage``):

    <root>/<topic>-<partition>/<base offset %020d>-<id>/
        segment.log          the segment's batches, as in the local log
        offset.index         its offset index (index.py's format)
        time.index           its time index
        transaction.index    its aborted transactions (txn_index.py), if any
        producer.snapshot    producer state at the segment's end, if taken
        leader-epoch-checkpoint  the epochs up to the segment's end

A copy is written into ``.<name>.tmp`` beside it (the bytes copied in the
kernel, every file written before any is fsynced), fsynced, and renamed to
its name: a kill mid-copy leaves a hidden ``.tmp`` directory that is never
listed and that ``delete_log_segment_data`` removes (the copy's id is
COPY_SEGMENT_STARTED in the metadata before any file is written). A
reader on the same file system links ``segment.log`` into its cache
(``link_log_segment``) instead of copying it: the store never writes to
a file once it is renamed into place, and deletes by unlinking, so a read
from the link sees the whole file whatever the store does meanwhile.
"""
from __future__ import annotations

import errno
import os
import shutil
import uuid
from dataclasses import dataclass
from typing import Protocol

from kafkalite.errors import KafkaStorageError
from kafkalite.storage.checkpoint import fsync_dir, write_all

SEGMENT_FILE = "segment.log"
OFFSET_INDEX_FILE = "offset.index"
TIME_INDEX_FILE = "time.index"
TRANSACTION_INDEX_FILE = "transaction.index"
PRODUCER_SNAPSHOT_FILE = "producer.snapshot"
LEADER_EPOCH_FILE = "leader-epoch-checkpoint"
# Kafka's RemoteStorageManager.IndexType, by the file each is kept in
INDEX_FILES = {"OFFSET": OFFSET_INDEX_FILE, "TIMESTAMP": TIME_INDEX_FILE,
               "TRANSACTION": TRANSACTION_INDEX_FILE, "PRODUCER_SNAPSHOT": PRODUCER_SNAPSHOT_FILE,
               "LEADER_EPOCH": LEADER_EPOCH_FILE}
_TMP_SUFFIX = ".tmp"
_COPY_CHUNK = 1 << 20


class RemoteStorageError(KafkaStorageError):
    """A remote store failed (Kafka's RemoteStorageException): the copy or
    read is retried later or answered KAFKA_STORAGE_ERROR. ``refused``: the
    store's error code when it refused the call outright (no such bucket,
    access denied: no retry succeeds until the store or the credentials
    change), None for a failure that may pass (a store down, a timeout)."""

    refused: str | None = None


@dataclass(frozen=True)
class RemoteLogSegmentId:
    """Kafka's RemoteLogSegmentId: the partition (its log directory's name,
    ``topic-N``) and an id unique to this copy."""
    partition: str
    id: str

    @classmethod
    def generate(cls, partition: str) -> "RemoteLogSegmentId":
        return cls(partition, uuid.uuid4().hex)


@dataclass(frozen=True)
class LogSegmentData:
    """The local files of one rolled segment to copy (Kafka's
    LogSegmentData). ``transaction_index`` and ``producer_snapshot`` are
    None when the segment has none; ``leader_epochs`` is the checkpoint's
    text, cut at the segment's end."""
    log_segment: str
    offset_index: str
    time_index: str
    transaction_index: str | None
    producer_snapshot: str | None
    leader_epochs: bytes


class RemoteStorageManager(Protocol):
    """What a remote store does; see the module docstring for the contract."""

    def copy_log_segment_data(self, segment_id: RemoteLogSegmentId, base_offset: int,
                              data: LogSegmentData) -> None:
        """Store the segment's files under ``segment_id``, all or nothing."""

    def fetch_log_segment(self, segment_id: RemoteLogSegmentId, base_offset: int,
                          start_position: int, end_position: int | None = None) -> bytes:
        """Bytes [start_position, end_position) of the segment's ``.log``
        (to its end when ``end_position`` is None)."""

    def fetch_index(self, segment_id: RemoteLogSegmentId, base_offset: int,
                    index_type: str) -> bytes | None:
        """One of INDEX_FILES' files whole; None for an optional one not copied."""

    def delete_log_segment_data(self, segment_id: RemoteLogSegmentId, base_offset: int) -> None:
        """Remove the copy (idempotent)."""

    # the partitions' remote log metadata (metadata_store.py), by name under the store

    def create_metadata(self, name: str, data: bytes) -> bool:
        """Create ``name`` holding ``data``, whole or not at all; False
        (nothing written) when ``name`` exists."""

    def fetch_metadata(self, name: str) -> bytes | None:
        """``name``'s bytes, None when it does not exist."""

    def list_metadata(self, prefix: str) -> list[str]:
        """The names under ``prefix`` (a directory's, ending in ``/``)."""

    def delete_metadata(self, *names: str) -> None:
        """Remove each of ``names`` (idempotent), in one request where the
        store has one for several (S3's DeleteObjects)."""


def object_name(base_offset: int, segment_id: RemoteLogSegmentId) -> str:
    return "%020d-%s" % (base_offset, segment_id.id)


class LocalDirectoryRemoteStorage:
    """A RemoteStorageManager over a directory (see the module docstring)."""

    def __init__(self, root: str):
        self.root = root

    def _dir(self, segment_id: RemoteLogSegmentId, base_offset: int) -> str:
        return os.path.join(self.root, segment_id.partition, object_name(base_offset, segment_id))

    def copy_log_segment_data(self, segment_id: RemoteLogSegmentId, base_offset: int,
                              data: LogSegmentData) -> None:
        final = self._dir(segment_id, base_offset)
        parent = os.path.dirname(final)
        tmp = os.path.join(parent, "." + os.path.basename(final) + _TMP_SUFFIX)
        try:
            os.makedirs(parent, exist_ok=True)
            shutil.rmtree(tmp, ignore_errors=True)
            os.mkdir(tmp)
            # every file written before any is fsynced: the fsyncs that follow
            # find the others' data under way (one journal commit carries
            # several), where a write-then-fsync per file waited for each in turn
            fds = []
            try:
                for source, name in ((data.log_segment, SEGMENT_FILE),
                                     (data.offset_index, OFFSET_INDEX_FILE),
                                     (data.time_index, TIME_INDEX_FILE),
                                     (data.transaction_index, TRANSACTION_INDEX_FILE),
                                     (data.producer_snapshot, PRODUCER_SNAPSHOT_FILE)):
                    if source is not None:
                        fds.append(_create(os.path.join(tmp, name)))
                        _copy_file(source, fds[-1])
                fds.append(_create(os.path.join(tmp, LEADER_EPOCH_FILE)))
                write_all(fds[-1], data.leader_epochs)
                for fd in fds:
                    os.fsync(fd)
            finally:
                for fd in fds:
                    os.close(fd)
            fsync_dir(tmp)
            os.rename(tmp, final)
            fsync_dir(parent)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RemoteStorageError(
                f"cannot copy segment {base_offset} of {segment_id.partition} to {final}: "
                f"{exc.strerror or exc}") from exc

    def fetch_log_segment(self, segment_id: RemoteLogSegmentId, base_offset: int,
                          start_position: int, end_position: int | None = None) -> bytes:
        path = os.path.join(self._dir(segment_id, base_offset), SEGMENT_FILE)
        try:
            with open(path, "rb") as f:
                f.seek(start_position)
                return f.read(-1 if end_position is None else max(end_position - start_position, 0))
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def link_log_segment(self, segment_id: RemoteLogSegmentId, base_offset: int,
                         target: str) -> bool:
        """Make ``target`` a hard link to the copy's ``segment.log``, for a
        read in place: no byte copied, and a delete of the copy meanwhile
        only removes the store's name, so a read from the link is never cut
        short. False where no link can be made (``target`` on another file
        system): the caller fetches the bytes instead. The file is the
        store's: whoever holds the link never writes to it."""
        path = os.path.join(self._dir(segment_id, base_offset), SEGMENT_FILE)
        try:
            os.link(path, target)
        except OSError as exc:
            if exc.errno in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EROFS):
                return False
            raise RemoteStorageError(f"cannot read {path}: {exc.strerror or exc}") from exc
        return True

    def fetch_index(self, segment_id: RemoteLogSegmentId, base_offset: int,
                    index_type: str) -> bytes | None:
        path = os.path.join(self._dir(segment_id, base_offset), INDEX_FILES[index_type])
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            if index_type in ("TRANSACTION", "PRODUCER_SNAPSHOT"):
                return None
            raise RemoteStorageError(f"{path} is not in the remote store") from None
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def delete_log_segment_data(self, segment_id: RemoteLogSegmentId, base_offset: int) -> None:
        final = self._dir(segment_id, base_offset)
        tmp = os.path.join(os.path.dirname(final),
                           "." + os.path.basename(final) + _TMP_SUFFIX)
        for path in (final, tmp):
            try:
                shutil.rmtree(path)
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise RemoteStorageError(f"cannot delete {path}: {exc.strerror or exc}") from exc

    def create_metadata(self, name: str, data: bytes) -> bool:
        # a fsynced hidden file, linked to its name: link fails if the name
        # exists, and a crash before it leaves only the hidden file
        path = os.path.join(self.root, name)
        directory = os.path.dirname(path)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.{uuid.uuid4().hex}{_TMP_SUFFIX}")
        try:
            os.makedirs(directory, exist_ok=True)
            fd = _create(tmp)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            try:
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            fsync_dir(directory)
            return True
        except OSError as exc:
            raise RemoteStorageError(f"cannot write {path}: {exc.strerror or exc}") from exc

    def fetch_metadata(self, name: str) -> bytes | None:
        path = os.path.join(self.root, name)
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise RemoteStorageError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def list_metadata(self, prefix: str) -> list[str]:
        try:
            names = os.listdir(os.path.join(self.root, prefix))
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise RemoteStorageError(f"cannot list {prefix}: {exc.strerror or exc}") from exc
        return [prefix + n for n in names if not n.startswith(".")]

    def delete_metadata(self, *names: str) -> None:
        for name in names:
            try:
                os.unlink(os.path.join(self.root, name))
            except FileNotFoundError:
                pass
            except OSError as exc:
                raise RemoteStorageError(f"cannot delete {name}: {exc.strerror or exc}") from exc

    def list_segments(self, partition: str) -> list[str]:
        """The complete copies of ``partition`` (object names), for tools and tests."""
        try:
            names = os.listdir(os.path.join(self.root, partition))
        except FileNotFoundError:
            return []
        return sorted(n for n in names if not n.startswith("."))


def _create(path: str) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)


def _copy_file(source: str, dst: int) -> None:
    """Copy ``source`` whole into the descriptor ``dst``: in the kernel
    (copy_file_range, no byte through Python), by reads and writes where
    the kernel cannot (another file system on an old kernel)."""
    src = os.open(source, os.O_RDONLY | os.O_CLOEXEC)
    try:
        remaining = os.fstat(src).st_size
        try:
            while remaining > 0:
                n = os.copy_file_range(src, dst, remaining)
                if n == 0:
                    break       # the file ended early: what there was is copied
                remaining -= n
            return
        except OSError as exc:
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
        # by hand, from where the kernel stopped (it moved both offsets)
        while chunk := os.read(src, _COPY_CHUNK):
            write_all(dst, chunk)
    finally:
        os.close(src)
