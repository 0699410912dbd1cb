"""One background executor per job of the storage engine, made on first
use: the flushes of rolled segments (log.py), the remote log metadata's
writes and reads (remote/remote_log.py) each on one thread of their own,
the copies to remote storage on a small pool; all off the worker's loop.

Who may call: the storage engine, from any thread.
"""
from __future__ import annotations

import concurrent.futures
import threading


class BackgroundThread:
    """An executor of ``workers`` threads named ``name``, started by the
    first ``submit`` (a process that never needs it starts no thread).
    Tasks start in the order submitted (FIFO): a task that waits on one
    submitted before it to the same executor never deadlocks, that one is
    running or done by then."""

    def __init__(self, name: str, workers: int = 1):
        self.name = name
        self.workers = workers
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def resize(self, workers: int) -> None:
        """Take ``workers`` threads from the next start on (a broker's
        setting, given before its first task; a running pool keeps its size)."""
        if workers < 1:
            raise ValueError(f"{self.name}: {workers} threads, at least 1 needed")
        self.workers = workers

    def submit(self, fn, *args) -> concurrent.futures.Future:
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self.workers, thread_name_prefix=self.name)
        return self._executor.submit(fn, *args)
