"""Rate-limited warnings for floods of bad input.

A client sending garbage must not turn into a log flood (or, with stderr
on a pipe nobody drains, a blocked server): the first few warnings of a
kind per interval are logged; the rest are counted and summarised once
the interval ends.

It lives beside errors.py, below every layer, because the servers' listeners
and the ingest gateway (a client) both take input from strangers.
"""
from __future__ import annotations

import logging
import time


class RateLimitedLog:
    def __init__(self, logger: logging.Logger, per_interval: int = 5, interval_s: float = 10.0):
        self.logger = logger
        self.per_interval = per_interval
        self.interval_s = interval_s
        self._window_start = time.monotonic()
        self._logged = 0
        self._suppressed = 0

    def warning(self, msg: str, *args, exc_info: bool = False) -> None:
        now = time.monotonic()
        if now - self._window_start >= self.interval_s:
            if self._suppressed:
                self.logger.warning("%d more like that in the last %.0f s", self._suppressed,
                                    now - self._window_start)
            self._window_start, self._logged, self._suppressed = now, 0, 0
        if self._logged < self.per_interval:
            self._logged += 1
            self.logger.warning(msg, *args, exc_info=exc_info)
        else:
            self._suppressed += 1

    def exception(self, msg: str, *args) -> None:
        """warning() with the traceback of the exception being handled."""
        self.warning(msg, *args, exc_info=True)
