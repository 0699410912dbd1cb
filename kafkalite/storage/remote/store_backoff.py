"""How one kind of a partition's calls to the remote store is faring (its
copies, its deletes, its metadata writes or reads), as Kafka's
RemoteLogManager backs its tasks off (``remote.log.manager.task.retry.backoff.ms``
doubling up to ``...backoff.max.ms``):

- after a failure the calls wait RETRY_MIN_S before they are tried again,
  doubling at each failed try up to RETRY_MAX_S, so that a store down for
  long is neither hammered nor keeps the copier thread busy failing; the
  failures of one try (a batch of deletes handed over together) count as
  one try for the backoff;
- the log says when the calls start failing (one line, with the error)
  and when they succeed again (one line, with how many failed and for how
  long), never a line per failed call or per retry: an outage is two lines
  per partition and kind, however long it lasts;
- a kind whose last call the store refused outright (RemoteStorageError's
  ``refused``: no such bucket, access denied) is listed in REFUSED until
  one succeeds: the node's health says so (metrics.py), where a store that
  will never take a call used to leave it healthy.

Who may call: the owner of the partition's RemoteLog, from its thread (or
the node's deleter, from its own); not thread-safe.
"""
from __future__ import annotations

import logging
import threading
import time

RETRY_MIN_S = 1.0       # a failed call is tried again after this,
RETRY_MAX_S = 30.0      # doubling up to this (a store down for long is not hammered)


class RefusedCalls:
    """The kinds of call (partition, what) whose last try the store
    refused outright, with its error; any thread (the owners, the deleter)
    adds and removes, the metrics snapshot reads."""

    def __init__(self):
        self._lock = threading.Lock()
        self._calls: dict[tuple[str, str], str] = {}

    def set(self, key: tuple[str, str], error: str | None) -> None:
        with self._lock:
            if error is None:
                self._calls.pop(key, None)
            else:
                self._calls[key] = error

    def forget(self, name: str) -> None:
        """A partition's remote log closed: its calls are no more."""
        with self._lock:
            for key in [k for k in self._calls if k[0] == name]:
                del self._calls[key]

    def snapshot(self) -> list[str]:
        """One line per kind refused: "<partition>: <what>: <error>"."""
        with self._lock:
            return [f"{name}: {what}: {error}" for (name, what), error in self._calls.items()]


REFUSED = RefusedCalls()


class StoreBackoff:
    """One kind of call (``what``, e.g. "copies to remote storage") of one
    partition (``name``), logged through ``log``."""

    def __init__(self, log: logging.Logger, name: str, what: str):
        self._log = log
        self.name = name
        self.what = what
        self.failures = 0           # failed calls since the last success
        self._since = 0.0           # time.monotonic() of the first of them
        self._retry_at = 0.0        # not tried again before this time.monotonic()
        self._backoff = RETRY_MIN_S

    @property
    def failing(self) -> bool:
        """The last call failed (nothing succeeded since)."""
        return self.failures > 0

    @property
    def retry_at(self) -> float:
        """The time.monotonic() before which the calls are not tried again."""
        return self._retry_at

    def due(self, now: float | None = None) -> bool:
        """Whether the calls may be tried (not backing off)."""
        return (time.monotonic() if now is None else now) >= self._retry_at

    def failed(self, exc: BaseException) -> None:
        """A call failed with ``exc``: the calls back off (once per try,
        however many calls of it failed); the first failure is logged."""
        now = time.monotonic()
        if not self.failures:
            self._since = now
            self._log.warning("%s: %s failing, tried again with a backoff of %.0f s up to "
                              "%.0f s (logged again once they succeed): %s", self.name,
                              self.what, RETRY_MIN_S, RETRY_MAX_S, exc)
        self.failures += 1
        refused = getattr(exc, "refused", None)
        REFUSED.set((self.name, self.what), str(exc) if refused else None)
        if now >= self._retry_at:
            self._retry_at = now + self._backoff
            self._backoff = min(self._backoff * 2, RETRY_MAX_S)

    def defer(self) -> None:
        """Not tried now for a reason of the caller's (not the store's):
        looked at again after the current backoff, nothing logged."""
        self._retry_at = time.monotonic() + self._backoff

    def succeeded(self) -> None:
        """A call succeeded: no more backoff, and the failures before it logged."""
        if self.failures:
            self._log.warning("%s: %s succeed again, after %d failed call(s) over %.0f s",
                              self.name, self.what, self.failures,
                              time.monotonic() - self._since)
            REFUSED.set((self.name, self.what), None)
        self.failures = 0
        self.retry_now()

    def retry_now(self) -> None:
        """The store answers other calls: these are tried again at once
        (their failures logged when one succeeds)."""
        self._retry_at = 0.0
        self._backoff = RETRY_MIN_S
