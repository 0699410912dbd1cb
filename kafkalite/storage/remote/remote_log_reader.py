"""Remote reads off the owner's thread (Kafka's RemoteLogReader and the
reader pool of its RemoteLogManager, ``remote.log.reader.threads``).

A read below a tiered partition's local log start needs the remote
segment holding its offset in the partition's cache (remote_log.py).
Filling the cache is a download, seconds for a large segment from S3, and
the owner's thread is a worker's event loop serving every partition of
the worker. So the download runs on one of READER_THREADS threads here,
and the read that needed it waits (the replica manager parks the fetch in
its purgatory as Kafka's DelayedRemoteFetch, a ListOffsets by timestamp as
its DelayedRemoteListOffsets) until it is done:

- the owner reads within ``RemoteLog.reading_in_background(reader)``: a
  segment not cached raises RemoteReadPending, naming the purgatory key of
  the download, which ``submit`` started (one per segment at a time);
- a reader thread fetches the segment's files into the cache directory and
  opens them as a LogSegment (or a read_committed read's transaction index
  alone), then queues the outcome and writes a byte to
  ``wakeup_fd``, which the owner's loop polls;
- the owner calls ``completed()``: each finished download is handed to its
  RemoteLog (``finish_read``: the segment goes into the cache, on the
  owner's thread, the only one that touches the cache), and the keys come
  back for the purgatory to wake the reads waiting on them.

At most MAX_PENDING_TASKS downloads are queued or running (Kafka's
``remote.log.reader.max.pending.tasks``); a read past that waits in the
purgatory like the others and is answered without records at its
deadline, for the client to fetch again.

Who may call: ``submit``, ``completed`` and ``close`` from the owner's
thread; the reader threads only run the downloads
(``RemoteLog.fetch_segment``, ``fetch_txn_index``) and the done callback, which touches the queue under its lock and the pipe.
"""
from __future__ import annotations

import concurrent.futures
import os
import threading

READER_THREADS = 10             # Kafka's remote.log.reader.threads default
MAX_PENDING_TASKS = 100         # Kafka's remote.log.reader.max.pending.tasks default


class RemoteLogReader:
    def __init__(self, threads: int = READER_THREADS,
                 max_pending_tasks: int = MAX_PENDING_TASKS):
        self.threads = threads
        self.max_pending_tasks = max_pending_tasks
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        self._lock = threading.Lock()
        self._done: list = []           # (remote log, key), as they finish
        self._pending = 0               # submitted and not yet taken by completed()
        self._wakeup_r, self._wakeup_w = os.pipe()
        os.set_blocking(self._wakeup_r, False)
        os.set_blocking(self._wakeup_w, False)

    @property
    def wakeup_fd(self) -> int:
        """Readable when a download finished: the owner's loop polls it."""
        return self._wakeup_r

    @property
    def pending(self) -> int:
        return self._pending

    def submit(self, remote_log, key, fetch, meta) -> concurrent.futures.Future | None:
        """Run the download ``fetch(meta)`` for ``remote_log`` on a reader
        thread, ``key`` naming it; None when MAX_PENDING_TASKS are pending."""
        if self._pending >= self.max_pending_tasks:
            return None
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.threads, thread_name_prefix="kafkalite-remote-read")
        self._pending += 1
        future = self._executor.submit(fetch, meta)
        future.add_done_callback(lambda _: self._finished(remote_log, key))
        return future

    def _finished(self, remote_log, key) -> None:
        with self._lock:
            self._done.append((remote_log, key))
        try:
            os.write(self._wakeup_w, b"\0")
        except BlockingIOError:
            pass                # the pipe is full: the owner is woken already

    def completed(self) -> list:
        """The keys of the downloads finished since the last call, each
        handed to its RemoteLog first (owner's thread)."""
        try:
            while os.read(self._wakeup_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            done, self._done = self._done, []
        self._pending -= len(done)
        for remote_log, key in done:
            remote_log.finish_read(key)
        return [key for _, key in done]

    def close(self) -> None:
        """Wait for the downloads under way (their logs are closed first,
        which waits for their own), and release the pipe."""
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
        os.close(self._wakeup_r)
        os.close(self._wakeup_w)
