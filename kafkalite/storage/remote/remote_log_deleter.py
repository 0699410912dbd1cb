"""The remote deletes of deleted partitions (DeleteTopics of a tiered topic).

A deleted partition's directory goes at once, but the store's deletes of
its remote segments may not be made yet (the store down: each try waits on
the client's retries, seconds). They outlive the partition, so no RemoteLog
owns them: ``RemoteLog.delete_all`` hands them over here, to one deleter per
process, which keeps them in a file under the data directory until the
store confirms every delete, tries again later while it fails, and takes up
at the next start what a stopped process left:

    <data_dir>/remote-log-deletes/<partition directory>.<random hex>
        {"partition": "t-0", "segments": [{"id": "<hex>", "base_offset": 0}, ...]}

Written (atomically) before the partition's directory is removed, so a
crash leaves the deletes on disk; the file goes once its last delete is
confirmed. A delete of a copy not there succeeds (the store's contract), so
a delete made twice (a crash after the store's delete, two processes of a
node picking up the same file) does no harm; a pass over a file holds an
exclusive lock on it, so the workers sharing a data directory do not make
the same deletes at once.

Who may call: any thread. The deletes run on this module's own thread
(``kafkalite-remote-delete``), started when there is work and ending when
none is left; the worker's loop never waits on the store.
"""
from __future__ import annotations

import concurrent.futures
import fcntl
import json
import logging
import os
import threading
import time
import uuid

from kafkalite.storage.checkpoint import write_atomically
from kafkalite.storage.remote.metadata_store import SharedRemoteLogMetadata
from kafkalite.storage.remote.storage_manager import RemoteLogSegmentId
from kafkalite.storage.remote.store_backoff import StoreBackoff

log = logging.getLogger(__name__)

PENDING_DIR = "remote-log-deletes"


class _Pending:
    __slots__ = ("path", "storage", "after", "tried")

    def __init__(self, path, storage, after):
        self.path = path
        self.storage = storage
        self.after = after          # copies still running on the copier thread: deleted after
        # a failed pass is tried again after a backoff; logged as the passes
        # start failing and as one succeeds, not at each pass
        partition = os.path.basename(path).rsplit(".", 1)[0]
        self.tried = StoreBackoff(log, f"deleted partition {partition}", "remote deletes")


class _PassFailed(Exception):
    """A pass over a file of deletes failed (its cause: the store's error)."""

    def __str__(self):
        return f"{self.args[0]}: {self.__cause__}" if self.__cause__ else self.args[0]


class RemoteLogDeleter:
    def __init__(self):
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending: dict[str, _Pending] = {}
        self._resumed: set[str] = set()
        self._thread: threading.Thread | None = None

    def hand_over(self, data_dir: str, storage, partition: str, segments, after=(),
                  metadata: str | None = None) -> str:
        """Delete ``segments`` (metadata entries: id and base offset) of the
        deleted ``partition`` (its directory's name) from ``storage``, once
        the copies ``after`` (futures) have ended; returns the file that
        keeps them meanwhile. ``metadata``: the partition's shared metadata
        key (metadata_store.py): the segments its newest version lists are
        deleted too, then its versions."""
        directory = os.path.join(data_dir, PENDING_DIR)
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, f"{partition}.{uuid.uuid4().hex}")
        doc = {"partition": partition,
               "segments": [{"id": s.id, "base_offset": s.base_offset} for s in segments]}
        if metadata is not None:
            doc["metadata"] = metadata
        write_atomically(path, json.dumps(doc, separators=(",", ":")).encode())
        self._add(path, storage, list(after))
        return path

    def resume(self, data_dir: str, storage) -> None:
        """Take up the deletes a stopped process left under ``data_dir``
        (once per data directory and process)."""
        directory = os.path.join(data_dir, PENDING_DIR)
        with self._lock:
            if directory in self._resumed:
                return
            self._resumed.add(directory)
        try:
            names = os.listdir(directory)
        except FileNotFoundError:
            return
        for name in names:
            if not name.endswith(".tmp"):
                self._add(os.path.join(directory, name), storage, [])

    def pending(self) -> int:
        """Files of deletes not all confirmed yet, in this process."""
        with self._lock:
            return len(self._pending)

    def _add(self, path, storage, after) -> None:
        with self._lock:
            if path not in self._pending:
                self._pending[path] = _Pending(path, storage, after)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="kafkalite-remote-delete")
                self._thread.start()
            self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._pending:
                    self._thread = None
                    return
                now = time.monotonic()
                due = [p for p in self._pending.values() if p.tried.due(now)]
                if not due:
                    self._wake.wait(min(p.tried.retry_at for p in self._pending.values()) - now)
                    continue
            for p in due:
                try:
                    done = self._delete(p)
                except _PassFailed as exc:
                    done = False
                    p.tried.failed(exc)
                else:
                    if done:
                        p.tried.succeeded()
                    else:
                        p.tried.defer()     # another process is at it: looked at later
                with self._lock:
                    if done:
                        self._pending.pop(p.path, None)

    def _delete(self, p: _Pending) -> bool:
        """One pass over ``p``'s file: True once every delete is confirmed
        (the file then removed) or another process has it done."""
        concurrent.futures.wait(p.after)
        try:
            f = open(p.path, "rb")
        except FileNotFoundError:
            return True         # done by another process of the node
        with f:
            try:
                fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False    # another process is at it: looked at again later
            if os.fstat(f.fileno()).st_nlink == 0:
                return True
            try:
                doc = json.loads(f.read())
            except ValueError as exc:
                log.error("%s: unreadable, its remote deletes are left: %s", p.path, exc)
                return True
            partition = doc["partition"]
            shared = None
            if doc.get("metadata"):
                shared = SharedRemoteLogMetadata(p.storage, doc["metadata"])
                try:
                    newest = shared.latest()
                except Exception as exc:
                    raise _PassFailed("cannot read its remote log metadata") from exc
                listed = {s["id"] for s in doc["segments"]}
                doc["segments"] += [{"id": s.id, "base_offset": s.base_offset}
                                    for s in (newest.segments if newest else ())
                                    if s.id not in listed]
            for s in doc["segments"]:
                try:
                    p.storage.delete_log_segment_data(RemoteLogSegmentId(partition, s["id"]),
                                                      int(s["base_offset"]))
                except Exception as exc:
                    raise _PassFailed(f"the delete of segment {s['id']}") from exc
            if shared is not None:
                try:
                    shared.delete_all()
                except Exception as exc:
                    raise _PassFailed("the delete of its remote log metadata") from exc
            os.unlink(p.path)
            log.info("deleted partition %s: its %d remote segment(s) deleted", partition,
                     len(doc["segments"]))
            return True


NODE_DELETER = RemoteLogDeleter()
