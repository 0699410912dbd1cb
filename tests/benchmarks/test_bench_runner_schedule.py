"""The harness's producer loop (kafkalite/bench/runner.py ``_produce``) at a
fixed rate: every message goes out once, in order, to the partition and
with the key its key distributor gives, carrying the time the schedule says
it was due; a message due alone takes the path without numpy, several due
at once the numpy one, and both must send the same thing. Run against a
client that records what it is given and acknowledges at its next poll."""
import gc
import time

import numpy as np
import pytest

from kafkalite.bench import runner
from kafkalite.bench.recorder import LatencyRecorder, Payloads, stamps_of_block
from kafkalite.bench.workload import STAMP_BYTES, Workload

# The runs' t0 is this far ahead of the call: a run whose loop starts after
# its own end (0.45 s after t0) sends nothing, which a fresh-clone suite run
# on a loaded machine saw with 20 ms (a test process held up half a second
# between taking t0 and its first send).
LEAD_NS = 250_000_000


class RecordingClient:
    def __init__(self, stall_every=0):
        self.sent = []          # (partition, block, count, keys)
        self.pending = []
        self.stall_every = stall_every

    def send(self, topic, partition, block, count, keys, on_ack):
        self.sent.append((partition, block, count, keys))
        self.pending.append(on_ack)
        if self.stall_every and len(self.sent) % self.stall_every == 0:
            time.sleep(0.004)   # falls behind: the next messages are due together

    def poll(self, timeout):
        pending, self.pending = self.pending, []
        for on_ack in pending:
            on_ack()

    def flush(self, timeout):
        self.poll(0)


def _run(distributor, stall_every=0, rate=4_000.0, parts=7, size=64):
    w = Workload(name="t", path="t.yaml", message_size=size, partitions_per_topic=parts,
                 key_distributor=distributor, producer_rate=rate, warmup_seconds=0.05,
                 test_seconds=0.4)
    client = RecordingClient(stall_every)
    shared = {"sent": [0]}
    t0 = time.time_ns() + LEAD_NS
    out = runner._produce(client, w, 0, "t", rate, shared, t0)
    return w, client, out, t0, 1e9 / rate


@pytest.mark.parametrize("stall_every", [0, 50])
@pytest.mark.parametrize("distributor", ["KEY_ROUND_ROBIN", "NO_KEY"])
def test_messages_go_out_once_in_order_as_scheduled(distributor, stall_every):
    w, client, out, t0, interval = _run(distributor, stall_every)
    parts, size = w.partitions_per_topic, w.message_size
    stamps, singles, calls = [], 0, 0
    for partition, block, count, keys in client.sent:
        got = stamps_of_block(block, size).tolist()
        assert len(block) == count * size and len(got) == count
        if distributor == "KEY_ROUND_ROBIN":
            seq = [round((s - t0) / interval) for s in got]      # which message each is
            assert all(i % parts == partition for i in seq), (partition, seq)
            assert keys == [b"key-%d" % i for i in seq]
        else:
            assert keys is None and partition == (calls % parts)
        stamps += got
        singles += count == 1
        calls += 1
    # KEY_ROUND_ROBIN with several due spreads them over partitions, so
    # reassemble the order from the stamps there
    if distributor == "KEY_ROUND_ROBIN":
        stamps.sort()
    n = out["sent"]
    assert len(stamps) == n > 1000 and out["acked"] == n
    due = [t0 + i * interval for i in range(n)]
    # each carries its due time (numpy's path computes it in float64: 256 ns)
    assert max(abs(s - d) for s, d in zip(stamps, due)) <= 512
    # the path without numpy ran (how often depends on the machine's load: a
    # descheduled sender finds several messages due at once; a fresh-clone
    # run at load 9-19 had 237 singles of 1,798, under the n // 4 once asked)
    assert singles > 0
    if stall_every:
        assert any(count > 1 for _, _, count, _ in client.sent)   # and the numpy one
    assert 0 < out["measured"] <= n


def test_the_recorder_and_payloads_take_one_value_as_a_block_of_one():
    w = Workload(name="t", path="t.yaml", message_size=100)
    for size in (STAMP_BYTES, 9, 100, 1024):
        w.message_size = size
        one, block = Payloads(w, seed=4), Payloads(w, seed=4)
        base = 1_795_000_000_000_000_000
        for i in range(2_100):                    # past the template's wrap-around, twice
            stamp = base + i * 100_000
            assert one.one(stamp) == block.block(np.array([stamp], dtype=np.int64))
    lat = np.random.default_rng(2).integers(0, 10**10, 5_000)
    a, b = LatencyRecorder(), LatencyRecorder()
    a.add(lat)
    for v in lat.tolist():
        b.add_one(v)
    a.fold()
    b.fold()
    assert list(a.hist.counts) == list(b.hist.counts) and b.hist.get_total_count() == 5_000


def test_add_one_folds_when_the_buffer_is_full(monkeypatch):
    from kafkalite.bench import recorder
    monkeypatch.setattr(recorder, "_CAPACITY", 10)
    rec = recorder.LatencyRecorder()
    for v in range(25):
        rec.add_one(1_000_000 + v)
    assert rec.hist.get_total_count() == 20         # two full buffers folded
    rec.fold()
    assert rec.hist.get_total_count() == 25


class StallingClient(RecordingClient):
    """Sends nothing for ``stall`` s at the first send: the producer is
    still behind when the warm-up ends."""

    def __init__(self, stall):
        super().__init__()
        self.stall = stall

    def send(self, topic, partition, block, count, keys, on_ack):
        if self.stall:
            time.sleep(self.stall)
            self.stall = 0
        super().send(topic, partition, block, count, keys, on_ack)


def test_a_producer_behind_at_the_end_of_the_warm_up_is_not_credited_its_messages():
    # issue 46: rates above the one scheduled. The warm-up's messages, sent
    # late inside the test period, are not the test period's publish rate.
    rate = 4_000.0
    w = Workload(name="t", path="t.yaml", message_size=64, partitions_per_topic=1,
                 key_distributor="NO_KEY", producer_rate=rate, warmup_seconds=0.05,
                 test_seconds=2.0)   # 0.4 ended before the first send in a loaded CI run
    client = StallingClient(stall=0.15)
    t0 = time.time_ns() + LEAD_NS
    out = runner._produce(client, w, 0, "t", rate, {"sent": [0]}, t0)
    stamps = np.concatenate([stamps_of_block(b, 64) for _, b, _, _ in client.sent])
    warm_end = t0 + int(w.warmup_seconds * 1e9)
    due_in_test = int(np.count_nonzero(stamps >= warm_end))
    assert out["sent"] - due_in_test >= 150          # the warm-up's, all sent after it ended
    assert out["measured"] == due_in_test <= rate * w.test_seconds + 1


class BacklogConsumer:
    """Gets, once the warm-up is over, everything due since t0 in one
    receive (a consumer that lagged through the warm-up catching up), then
    stops the run."""
    t0 = None

    def __init__(self, shared, workload):
        self.shared, self.workload, self.done = shared, workload, False

    def receive(self, timeout):
        if self.done:
            time.sleep(0.01)
            return np.zeros(0, dtype=np.int64), 0
        t0 = self.shared["t0"].value
        warm_end = t0 + int(self.workload.warmup_seconds * 1e9)
        while time.time_ns() < warm_end + 10_000_000:
            time.sleep(0.005)
        self.done = True
        self.shared["stop"].set()
        stamps = t0 + np.arange(0, time.time_ns() - t0, 250_000, dtype=np.int64)  # 4,000 msg/s
        return stamps, len(stamps) * self.workload.message_size

    def close(self):
        pass


def test_a_consumer_catching_up_on_the_warm_up_is_not_credited_its_messages(monkeypatch):
    # issue 46: 10,313 msg/s consumed of 10,000 published, each message
    # received once: the warm-up's backlog, arriving in the test period,
    # was counted as consumed in it
    import multiprocessing
    import queue
    import threading

    from kafkalite.bench import drivers
    w = Workload(name="t", path="t.yaml", message_size=64, producer_rate=4_000.0,
                 warmup_seconds=0.1, test_seconds=5.0)
    shared = {"t0": multiprocessing.Value("q", 0, lock=False), "stop": threading.Event(),
              "received": [0]}

    class Driver:
        @classmethod
        def consumer(cls, endpoint, workload, assignment):
            return BacklogConsumer(shared, workload)
    monkeypatch.setattr(runner, "_child_signals", lambda: None)
    monkeypatch.setattr(drivers, "driver_class", lambda name: Driver)
    shared["t0"].value = t0 = time.time_ns() + LEAD_NS
    results = queue.Queue()
    runner._consumer_main("test", {}, w, 0, [("t", 0)], shared, results)
    reports = [results.get_nowait() for _ in range(results.qsize())]
    done = [r[3] for r in reports if r[0] == "done"]
    assert done, reports
    warm_end = t0 + int(w.warmup_seconds * 1e9)
    due_in_test = (time.time_ns() - warm_end) // 250_000     # at least those of the backlog
    assert done[0]["received"] > 400                          # the warm-up's, and a few after
    assert done[0]["measured"] < min(done[0]["received"] - 300, due_in_test + 1)


class TimedFileProducer:
    """The file-append driver's producer, noting each send call: when it
    came, its partition, keys and stamps."""

    def __init__(self, endpoint, workload):
        from kafkalite.bench.drivers.file_append import FileProducer
        self.producer = FileProducer(endpoint, workload)
        self.calls = []
        self.size = workload.message_size

    def send(self, topic, partition, block, count, keys, on_ack):
        self.calls.append((time.time_ns(), partition, keys, stamps_of_block(block, self.size)))
        self.producer.send(topic, partition, block, count, keys, on_ack)

    def poll(self, timeout):
        pass

    def flush(self, timeout):
        pass


def _paced_run(tmp_path, pacing_ms, distributor="NO_KEY", parts=4, rate=4_000.0):
    from kafkalite.bench.drivers.file_append import FileAppendDriver
    w = Workload(name="t", path="t.yaml", message_size=64, partitions_per_topic=parts,
                 key_distributor=distributor, producer_rate=rate, warmup_seconds=0.05,
                 test_seconds=0.5)
    w.producer_pacing_ms = pacing_ms     # set, not passed: the code before pacing ignores it
    client = TimedFileProducer(FileAppendDriver().setup(w, ["t"], str(tmp_path)), w)
    t0 = time.time_ns() + LEAD_NS
    out = runner._produce(client, w, 0, "t", rate, {"sent": [0]}, t0)
    client.producer.close()
    return w, client, out, t0, 1e9 / rate


@pytest.mark.parametrize("distributor, parts", [("NO_KEY", 4), ("KEY_ROUND_ROBIN", 100)])
@pytest.mark.parametrize("pacing_ms", [1, 10])
def test_a_paced_producer_sends_at_most_every_pacing_ms_each_message_stamped_when_due(
        tmp_path, monkeypatch, pacing_ms, distributor, parts):
    from kafkalite.bench.recorder import merge, summary_ms
    # its wake-ups counted as its sleeps (the producer's one sleep is until
    # the next message, or with pacing the next wake-up point, is due): not
    # by the gaps between send calls, which a loaded machine's preemptions
    # split (a CI rehearsal at load 9 counted 73 bursts for 57 wake-ups)
    sleeps = []
    real_sleep = runner.time.sleep
    monkeypatch.setattr(runner.time, "sleep", lambda s: (sleeps.append(s), real_sleep(s)))
    w, client, out, t0, interval = _paced_run(tmp_path, pacing_ms, distributor, parts)
    monkeypatch.setattr(runner.time, "sleep", real_sleep)
    span_ms = (w.warmup_seconds + w.test_seconds) * 1e3
    wake_ups = span_ms / pacing_ms + 2
    # one sleep per wake-up point (4,000 msg/s: 4 resp. 40 messages each),
    # where sending each message when due slept about 2,200 times
    assert len(sleeps) <= wake_ups, len(sleeps)
    if distributor == "NO_KEY":       # the burst in one call
        assert len(client.calls) <= wake_ups, len(client.calls)
    sent_at = np.concatenate([np.full(len(s), at) for at, _p, _k, s in client.calls])
    stamps = np.concatenate([s for *_, s in client.calls])
    n = out["sent"]
    assert len(stamps) == n and out["acked"] == n
    # the end of the run is the last wake-up: what fell due since the one
    # before goes out then, all of it (a producer further behind than a
    # call's 1,000 values, on a busy machine, sends several calls)
    end = t0 + int((w.warmup_seconds + w.test_seconds) * 1e9)
    after = int(np.count_nonzero(sent_at >= end))
    assert n == 2_200 and after > 0, (n, after)
    if distributor == "KEY_ROUND_ROBIN":
        for _at, partition, keys, s in client.calls:
            seq = [round((x - t0) / interval) for x in s.tolist()]     # which message each is
            assert keys == [b"key-%d" % i for i in seq] and all(
                i % parts == partition for i in seq), (partition, keys, seq)
        # a producer more than 100 messages behind (a busy machine) sends them
        # grouped by partition: the order from the stamps
        order = np.argsort(stamps, kind="stable")
        stamps, sent_at = stamps[order], sent_at[order]
    # every message once, carrying its due time, not its send time
    due = t0 + np.arange(n) * interval
    assert np.abs(stamps - due).max() <= 512
    lateness = sent_at - stamps
    assert lateness.min() >= -512                   # none goes out before it is due
    assert np.median(lateness) >= pacing_ms * 1e6 / 4   # they wait for the wake-up point
    # and that wait is in the publish latency (acknowledged after the send)
    measured = lateness[stamps >= t0 + int(w.warmup_seconds * 1e9)]
    publish = summary_ms(merge([out["publish"]]))
    assert publish["count"] == len(measured) == out["measured"]
    assert publish["mean"] * 1e6 >= measured.mean() * 0.99
    assert publish["p50"] * 1e6 >= np.median(measured) * 0.99


def test_without_pacing_a_producer_sends_each_message_when_due(tmp_path):
    w, client, out, t0, interval = _paced_run(tmp_path, 0)
    span_ms = (w.warmup_seconds + w.test_seconds) * 1e3
    # one call per message on an idle machine; a busy one finds several due
    # at once now and then (issue 46: 237 singles of 1,798 at load 9-19), so
    # ask only for far more calls than 10 ms pacing would make
    assert len(client.calls) > 4 * (span_ms / 10 + 2), len(client.calls)
    assert sum(len(s) == 1 for *_, s in client.calls) > 0
    lateness = np.concatenate([at - s for at, _p, _k, s in client.calls])
    assert lateness.min() >= -512


class HoldingClient:
    """Acknowledges nothing until flush and keeps only what the collector
    does not track (ints, stamp arrays, the callbacks it is given), so the
    tracked objects alive between its first send and its last are those the
    producer loop holds for what is in flight. Its first send stalls, so the
    loop starts behind; each send's partition and keys are checked against
    the messages its stamps say it carries."""

    def __init__(self, size, parts, t0, interval, stall):
        self.size, self.parts, self.t0, self.interval, self.stall = size, parts, t0, interval, stall
        self.stamps, self.counts, self.acks = [], [], []
        self.misrouted = 0
        self.messages = 0
        self.first = None           # (tracked objects alive, messages sent) at the first send
        self.last = None

    def send(self, topic, partition, block, count, keys, on_ack):
        if self.first is None:
            time.sleep(self.stall)
            self.first = (gc.get_count()[0], 0)
        self.last = (gc.get_count()[0], self.messages)
        stamps = stamps_of_block(block, self.size)
        seq = [round((s - self.t0) / self.interval) for s in stamps.tolist()]
        self.misrouted += (len(stamps) != count or keys != [b"key-%d" % i for i in seq]
                           or any(i % self.parts != partition for i in seq))
        self.stamps.append(stamps)
        self.counts.append(count)
        self.acks.append(on_ack)
        self.messages += count

    def poll(self, timeout):
        pass

    def flush(self, timeout):
        for on_ack in self.acks:
            on_ack()
        self.acks.clear()


def test_a_producer_behind_sends_each_message_once_when_due_holding_no_object_per_send():
    # issue 46: a producer behind by more than a wake-up's 100 messages went
    # through the path that made a callback (a closure and its cell) per send;
    # those alive until their acknowledgement ran the collector 851-1,357
    # times a run, the runs with an end-to-end p99 over 100 ms
    rate, parts, size = 20_000.0, 100, 64
    w = Workload(name="t", path="t.yaml", message_size=size, partitions_per_topic=parts,
                 key_distributor="KEY_ROUND_ROBIN", producer_rate=rate, warmup_seconds=0.05,
                 test_seconds=0.3)
    w.producer_pacing_ms = 1
    interval = 1e9 / rate
    t0 = time.time_ns() + LEAD_NS
    # 60 ms stalled: 1,200 messages behind, caught up in sends of several per partition
    client = HoldingClient(size, parts, t0, interval, stall=0.06)
    enabled = gc.isenabled()
    gc.disable()        # the count of tracked objects alive then only grows with them
    try:
        out = runner._produce(client, w, 0, "t", rate, {"sent": [0]}, t0)
    finally:
        if enabled:
            gc.enable()
    n = out["sent"]
    assert n == 7_000                       # every message due in the run, the last ones too
    assert client.misrouted == 0
    assert max(client.counts) > 1           # the catch-up's path ran
    stamps = np.sort(np.concatenate(client.stamps))
    # each once, carrying exactly the time it was due (t0 + int(i * interval))
    assert np.array_equal(stamps, t0 + (np.arange(n) * interval).astype(np.int64))
    assert out["acked"] == n
    assert out["measured"] == int(np.count_nonzero(stamps >= t0 + int(w.warmup_seconds * 1e9)))
    (alive_first, _), (alive_last, messages) = client.first, client.last
    per_message = (alive_last - alive_first) / messages
    assert per_message < 0.05, f"{per_message:.2f} tracked objects held per message in flight"


def test_a_paced_producer_sends_everything_due_at_the_end_of_the_run():
    # the end of the run is a last wake-up point: what fell due since the
    # one before is more than a call's 1,000 values here (300 ms pacing at
    # 8,000 msg/s: 1,600), and all of it goes out, none is left unsent
    rate = 8_000.0
    w = Workload(name="t", path="t.yaml", message_size=64, partitions_per_topic=1,
                 key_distributor="NO_KEY", producer_rate=rate, warmup_seconds=0,
                 test_seconds=0.5)
    w.producer_pacing_ms = 300
    client = RecordingClient()
    t0 = time.time_ns() + LEAD_NS
    out = runner._produce(client, w, 0, "t", rate, {"sent": [0]}, t0)
    stamps = np.concatenate([stamps_of_block(b, 64) for _, b, _, _ in client.sent])
    assert out["sent"] == len(stamps) == 4_000 == out["acked"]
    assert np.array_equal(stamps, t0 + (np.arange(4_000) * (1e9 / rate)).astype(np.int64))
