"""One background thread per job of the storage engine, made on first use:
the flushes of rolled segments (log.py) and the copies to remote storage
(remote/remote_log.py) each run on their own, off the worker's loop.

Who may call: the storage engine, from any thread.
"""
from __future__ import annotations

import concurrent.futures
import threading


class BackgroundThread:
    """A one-thread executor named ``name``, started by the first ``submit``
    (a process that never needs it starts no thread)."""

    def __init__(self, name: str):
        self.name = name
        self._lock = threading.Lock()
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None

    def submit(self, fn, *args) -> concurrent.futures.Future:
        with self._lock:
            if self._executor is None:
                self._executor = concurrent.futures.ThreadPoolExecutor(
                    max_workers=1, thread_name_prefix=self.name)
        return self._executor.submit(fn, *args)
