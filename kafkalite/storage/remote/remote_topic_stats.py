"""Kafka's tiered-storage BrokerTopicMetrics, per topic (remote_log.py
counts, the metrics endpoint reads).

Who may call: any thread.
"""
from __future__ import annotations

import threading


class RemoteTopicStats:
    """Kafka's tiered-storage BrokerTopicMetrics, per topic, as this
    process's RemoteLogs counted them since it started: bytes of segments
    copied and copies failed (RemoteCopyBytesPerSec, RemoteCopyErrorsPerSec),
    bytes of segments read from the store and reads failed
    (RemoteFetchBytesPerSec, RemoteFetchErrorsPerSec). A process-wide
    object, as Kafka's BrokerTopicStats is broker-wide: a partition's counts
    stay when its log closes (leadership moved), as counters must. Any
    thread may add (a log closes on a pool thread); the metrics snapshot
    reads."""

    COPY_BYTES, COPY_ERRORS, FETCH_BYTES, FETCH_ERRORS = range(4)

    def __init__(self):
        self._lock = threading.Lock()
        self._topics: dict[str, list[int]] = {}

    def add(self, topic: str, which: int, n: int = 1) -> None:
        with self._lock:
            counts = self._topics.get(topic)
            if counts is None:
                counts = self._topics[topic] = [0, 0, 0, 0]
            counts[which] += n

    def snapshot(self) -> dict[str, list[int]]:
        with self._lock:
            return {t: list(c) for t, c in self._topics.items()}


REMOTE_TOPIC_STATS = RemoteTopicStats()
