"""The harness's payloads: a block of a few values is joined from bytes
(the cheap path every message at a moderate rate takes), a larger one built
in numpy; both must be the same bytes, and each value must carry its stamp."""
import numpy as np
import pytest

from kafkalite.bench.recorder import Payloads, stamps_of_block
from kafkalite.bench.workload import Workload


@pytest.mark.parametrize("size", [8, 9, 100, 1024])
def test_small_blocks_are_the_bytes_numpy_builds(size):
    w = Workload(name="t", path="t.yaml", message_size=size)
    joined, built = Payloads(w, seed=3), Payloads(w, seed=3)
    built._tails = None            # every block through numpy
    base = 1_795_000_000_000_000_000
    sent = 0
    for n in [1, 2, 16, 17, 1, 300, 5, 1000, 3]:     # across the template's wrap-around
        stamps = base + np.arange(sent, sent + n, dtype=np.int64) * 100_000
        a, b = joined.block(stamps), built.block(stamps)
        assert a == b
        assert len(a) == n * size
        assert stamps_of_block(a, size).tolist() == stamps.tolist()
        sent += n


def _reference(latencies_ns):
    """The histogram recording each value on its own: the slow, plain way."""
    from kafkalite.bench.recorder import HIST_HIGH_US, HIST_LOW_US, new_histogram
    hist = new_histogram()
    for ns in latencies_ns.tolist():
        hist.record_value(min(max(ns // 1000, HIST_LOW_US), HIST_HIGH_US))
    return hist


def _latencies(n, seed=5):
    rng = np.random.default_rng(seed)
    # every magnitude from below 1 µs to past the histogram's hour, each
    # bucket boundary (2**k µs) and its neighbours, and a dense 1-5 ms band
    edges = np.array([2 ** k + d for k in range(0, 43) for d in (-1, 0, 1)], dtype=np.int64) * 1000
    spread = (10 ** rng.uniform(0, 13.7, n)).astype(np.int64)
    band = rng.integers(1_000_000, 5_000_000, n)
    return np.concatenate([edges, spread, band, [0, 999, 1000, 4_000_000_000_000_000]])


def test_latency_recorder_counts_what_recording_each_value_counts():
    from kafkalite.bench.recorder import LatencyRecorder
    lat = _latencies(20_000)
    rec = LatencyRecorder()
    for part in np.array_split(lat, 37):       # many adds, one of one value
        rec.add(part)
    rec.add(lat[:1])
    ref = _reference(np.concatenate([lat, lat[:1]]))
    rec.fold()
    assert rec.hist.get_total_count() == ref.get_total_count() == len(lat) + 1
    assert list(rec.hist.counts) == list(ref.counts)
    assert rec.hist.get_max_value() == ref.get_max_value()
    assert rec.hist.get_min_value() == ref.get_min_value()


def test_latency_recorder_folds_when_its_buffer_fills(monkeypatch):
    from kafkalite.bench import recorder
    monkeypatch.setattr(recorder, "_CAPACITY", 1000)
    lat = _latencies(3_000, seed=9)[:4500]
    rec = recorder.LatencyRecorder()
    rec.add(lat[:600])
    rec.add(lat[600:1500])                 # past the buffer: folds first
    assert rec.hist.get_total_count() == 600
    rec.add(lat[1500:4000])                # larger than the buffer: recorded at once
    assert rec.hist.get_total_count() == 4000
    rec.add(lat[4000:])                    # buffered
    assert rec.hist.get_total_count() == 4000
    encoded = rec.encoded()                # folds what is buffered
    assert rec.hist.get_total_count() == len(lat)
    assert list(rec.hist.counts) == list(_reference(lat).counts)
    assert recorder.merge([encoded]).get_total_count() == len(lat)


def test_the_latency_timeline_gives_each_buckets_own_quantiles():
    """Latencies by when they were recorded: a bucket's p50/p99 are those of
    its own latencies (to the top of their bin: at most 12% above), its max
    exact; a stall in one bucket shows there alone; timelines of several
    processes merge by adding their counts; a bucket with none is None."""
    from kafkalite.bench.recorder import LatencyTimeline, timeline_ms
    rng = np.random.default_rng(3)
    t0 = 1_795_000_000_000_000_000
    a, b = LatencyTimeline(t0, 0.5), LatencyTimeline(t0, 0.5)
    everything = {k: [] for k in range(6)}
    for k in (0, 1, 2, 3, 5):                  # nothing recorded in bucket 4
        for i in range(40):
            slow = k == 2
            lat = rng.integers(50_000_000, 80_000_000, 25) if slow else \
                rng.integers(1_000_000, 4_000_000, 25)
            now = t0 + k * 500_000_000 + i * 10_000_000
            (a if i % 2 else b).add(now, lat)
            everything[k].append(lat)
        a.add_one(t0 + k * 500_000_000 + 499_000_000, 2_000_000)
        everything[k].append(np.array([2_000_000]))
    merged = timeline_ms([a.encoded(), b.encoded()])
    assert merged["count"] == [1001, 1001, 1001, 1001, 0, 1001]
    assert merged["p50"][4] is None and merged["p99"][4] is None and merged["max"][4] is None
    for k in (0, 1, 2, 3, 5):
        lat = np.concatenate(everything[k]) / 1e6
        for name, q in (("p50", 50), ("p99", 99)):
            want = float(np.percentile(lat, q, method="inverted_cdf"))
            assert want <= merged[name][k] <= want * 1.13, (k, name, merged[name][k], want)
        assert merged["max"][k] == lat.max()
    assert merged["p99"][2] > 50 > max(merged["p99"][k] for k in (0, 1, 3, 5))
    json_ready = __import__("json").dumps(merged)       # results.json takes it as it is
    assert "NaN" not in json_ready


def test_the_latency_timeline_folds_when_its_buffer_fills(monkeypatch):
    from kafkalite.bench import recorder
    monkeypatch.setattr(recorder, "_TIMELINE_BUFFER", 100)
    t = recorder.LatencyTimeline(0, 1.0)
    t.add(10, np.full(60, 5_000_000))
    t.add(20, np.full(60, 7_000_000))              # past the buffer: folds first
    t.add(30, np.full(250, 9_000_000))             # larger than the buffer: counted at once
    t.add(1_000_000_010, np.full(10, 1_000_000))   # the next bucket
    out = recorder.timeline_ms([t.encoded()])
    assert out["count"] == [370, 10]
    assert out["max"] == [9.0, 1.0]
