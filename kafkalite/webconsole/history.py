"""Throughput and consumer-group lag over time, for the console's charts.

A sampler thread reads the node's metrics registry (prometheus_client's
``collect()``: the families /metrics serves, without rendering and
parsing text) every ``INTERVAL_S`` and keeps the last ``KEEP`` samples of
the node's counters (bytes in and out, records in, Produce and Fetch
requests) and of each group's lag per partition. Rates are differences of
consecutive samples, worked out when asked for.

It samples only while someone looks: it starts at the first call of
``touch()`` (every API request) and stops after ``IDLE_S`` without one, so
an unwatched node spends nothing on it.

Who may call: any thread (one lock around the samples).
"""
from __future__ import annotations

import collections
import threading
import time

INTERVAL_S = 1.0
KEEP = 300                  # samples kept: five minutes at one a second
IDLE_S = 120.0
MAX_LAG_SERIES = 500        # (group, topic, partition) lag series kept per sample

# counter families summed over their labels -> the name of the rate
COUNTERS = {
    "kafka_server_brokertopicmetrics_bytesin": "bytes_in",
    "kafka_server_brokertopicmetrics_messagesin": "messages_in",
    "kafka_server_brokertopicmetrics_bytesout": "bytes_out",
}
REQUESTS = {"Produce": "produce_requests", "Fetch": "fetch_requests"}
RATES = tuple(COUNTERS.values()) + tuple(REQUESTS.values())


def sample_registry(registry) -> tuple[dict, dict]:
    """({rate name: counter total}, {(group, topic, partition): lag}) now."""
    totals = dict.fromkeys(RATES, 0.0)
    lags = {}
    for family in registry.collect():
        name = COUNTERS.get(family.name)
        if name is not None:
            totals[name] += sum(s.value for s in family.samples if s.name.endswith("_total"))
        elif family.name == "kafka_network_requestmetrics_requests":
            for s in family.samples:
                rate = REQUESTS.get(s.labels.get("request"))
                if rate is not None and s.name.endswith("_total"):
                    totals[rate] += s.value
        elif family.name == "kafka_consumergroup_lag":
            for s in family.samples[:MAX_LAG_SERIES]:
                lags[(s.labels["consumergroup"], s.labels["topic"],
                      int(s.labels["partition"]))] = s.value
    return totals, lags


class History:
    def __init__(self, registry, interval_s: float = INTERVAL_S, keep: int = KEEP,
                 idle_s: float = IDLE_S):
        self.registry = registry
        self.interval_s = interval_s
        self.idle_s = idle_s
        self._samples: collections.deque = collections.deque(maxlen=keep)  # (epoch s, totals, lags)
        self._lock = threading.Lock()
        self._last_touch = 0.0
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def touch(self) -> None:
        """Someone is looking: sample (again) if not sampling."""
        with self._lock:
            self._last_touch = time.monotonic()
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(target=self._run, name="console-history",
                                                daemon=True)
                self._thread.start()

    def close(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.is_set():
            totals, lags = sample_registry(self.registry)
            with self._lock:
                self._samples.append((time.time(), totals, lags))
                if time.monotonic() - self._last_touch > self.idle_s:
                    self._thread = None
                    return
            self._stop.wait(self.interval_s)

    def throughput(self) -> dict:
        """{"t": [epoch s], rate name: [per second]}: one point per pair of
        consecutive samples. A counter that went down (a topic deleted takes
        its counters with it) counts as no traffic, not negative traffic."""
        with self._lock:
            samples = list(self._samples)
        out = {"t": [], **{name: [] for name in RATES}}
        for (t0, a, _), (t1, b, _) in zip(samples, samples[1:]):
            dt = max(t1 - t0, 1e-3)
            out["t"].append(round(t1, 3))
            for name in RATES:
                out[name].append(max(0.0, b[name] - a[name]) / dt)
        return out

    def lag(self, group: str, topic_visible=lambda topic: True) -> dict:
        """{"t": [epoch s], "series": {"topic-partition": [lag or None]}}:
        the partitions of topics ``topic_visible`` keeps."""
        with self._lock:
            samples = list(self._samples)
        keys = sorted({(t, p) for _, _, lags in samples for g, t, p in lags if g == group})
        visible = {t for t in {t for t, _ in keys} if topic_visible(t)}
        keys = [(t, p) for t, p in keys if t in visible]
        series = {f"{t}-{p}": [lags.get((group, t, p)) for _, _, lags in samples]
                  for t, p in keys}
        return {"t": [round(t, 3) for t, _, _ in samples], "series": series}
