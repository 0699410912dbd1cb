"""Runs a workload on each driver in turn and measures it: the harness core.

For one (workload, driver): the driver's parent half starts its server and
makes the topics; then every consumer and every producer runs in a process
of its own (multiprocessing "spawn": a fresh interpreter, so no process
measures another's GIL and no forked ZeroMQ or asyncio state is shared).
Consumers start first and say when they are ready; producers connect and
say so; then the parent publishes t0 (a ``time.time_ns()`` a moment ahead)
and every process starts at t0.

Producers. With ``producerRate`` R > 0 each of the N producers owns the
schedule t_i = t0 + i * N / R; message i is due at t_i and carries t_i
(recorder.py). A producer sleeps until the next message is due, and when
it is behind it sends everything due at once (up to 512 KiB per call), so
falling behind is charged to the messages it delays: publish latency (ack
time - t_i) and end-to-end latency (arrival time - t_i) are measured from
the intended send time, never from when the producer got round to it (no
coordinated omission). With ``producerPacingMs`` P > 0 a producer wakes
only at t0 + k * P (and at the end of the run, for what fell due after the
last of those) and sends what was due by then: one wake-up per P ms
instead of one per message (a sleep and a wake-up cost about 21 µs of CPU
on the 2-core VM, on the cores the system under test needs), every
message still stamped with its t_i, so the up to P ms it waited are in
its latency. With R = 0 the producer sends as fast as the driver
accepts (closed loop): t_i is the time of the send call, and the publish
rate is the maximum rate. In both modes at most ``window`` messages may be
unacknowledged; past that the producer waits for acks (the back-pressure
a real client applies), still on the clock. Each send's acknowledgement
is a slot of a ring made before the run (acks.py): nothing per send for
the collector, whose work grew with the messages in flight (issue 46).

Keyless messages go one batch per partition in turn (sticky, as Kafka's
producer does); KEY_ROUND_ROBIN cycles keys and partitions message by
message; RANDOM_NANO picks a random key and partition per message.

Consumers own their partitions explicitly (a subscription's partitions are
dealt round-robin to its consumers), which every driver can do. After the
producers stop and flush, consumers run until everything sent has arrived
or ``drain`` seconds pass.

Backlog workloads (``consumerBacklogSizeGB``) run in two phases instead:
each producer writes its share of the backlog while the consumers wait,
then the parent publishes the drain start and the consumers read it all.
The publish rate is messages / (last acknowledgement - t0), the consume
rate messages / (last arrival - drain start): the same "first call to last
ack" timing a throughput test of a single client uses. A driver whose
system keeps no messages for a reader that is not there (raw PUSH/PULL)
is skipped.

Measured: messages due in the test period (after warm-up) and sent /
test seconds = publish rate; messages due in the test period and arrived
before its end / test seconds = consume rate (both by the time a message
was due, its stamp: a producer or consumer that was behind at the end of
the warm-up catches up on the warm-up's messages inside the test period,
and counting those by when they went out or arrived gave rates above the
one scheduled); in a closed loop the stamp is the send time. HdrHistograms
of publish and end-to-end latency of the messages due during the test
period; counts per time bucket for the throughput plots (warm-up
included, marked on the plot).

Who calls: kafkalite.bench.run (the ``kafkalite bench`` CLI) in the parent;
``_producer_main`` / ``_consumer_main`` in the child processes.
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import shutil
import signal
import sys
import tempfile
import time
import traceback

import numpy as np

from kafkalite.bench import drivers as driver_registry
from kafkalite.bench.acks import AckSlots
from kafkalite.bench.cpu import CpuWindow
from kafkalite.bench.cpu import summary as cpu_summary
from kafkalite.bench.measure import GcPauses, freeze_startup_objects, merge_gc_pauses, \
    precise_sleeps
from kafkalite.bench.recorder import (LatencyRecorder, LatencyTimeline, Payloads, RateSeries,
                                     merge, summary_ms, timeline_ms)

SEND_BYTES = 512 << 10          # values per send call, at most (under 1 MiB requests)
WINDOW_BYTES = 64 << 20         # unacknowledged bytes per producer, at most
WINDOW_MESSAGES = 100_000
READY_TIMEOUT = 60.0            # for a client process to connect
DRAIN_SECONDS = 10.0            # for consumers to catch up after the producers stop
BACKLOG_DRAIN_FLOOR = 20_000    # msg/s: a backlog drain slower than this is given up
START_DELAY_NS = 200_000_000    # t0 is this far ahead of the moment it is published
RECEIVE_TIMEOUT = 0.1


class DriverFailed(RuntimeError):
    """A driver's server or one of its client processes failed (not a timing matter)."""


def bucket_seconds(workload) -> float:
    """Width of a throughput-over-time bucket: ~60 buckets a run, 0.1 s .. 1 s."""
    total = workload.warmup_seconds + workload.test_seconds
    return float(min(1.0, max(0.1, round(total / 60, 1))))


def topic_names(workload) -> list[str]:
    return [f"{workload.slug}-{i}" for i in range(workload.topics)]


def assignments(workload, topics) -> list[list[tuple[str, int]]]:
    """The partitions of each consumer process (consumers with none are dropped)."""
    out = []
    for t in topics:
        for _s in range(workload.subscriptions_per_topic):
            c_n = workload.consumers_per_subscription
            for c in range(c_n):
                parts = [(t, p) for p in range(workload.partitions_per_topic) if p % c_n == c]
                if parts:
                    out.append(parts)
    return out


# ---- child processes -----------------------------------------------------------------------

def _child_signals() -> None:
    # Ctrl-C reaches the whole process group: the parent decides, and stops
    # children with SIGTERM, which unwinds (closing clients, unlinking rings).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))


def _wait_for_t0(shared) -> int:
    """Until t0 is published, and then until it comes: every process starts at t0."""
    while shared["t0"].value == 0:
        if shared["stop"].is_set():
            raise SystemExit(0)
        time.sleep(0.001)
    t0 = shared["t0"].value
    wait = t0 - time.time_ns()
    if wait > 0:
        time.sleep(wait / 1e9)
    return t0


def _producer_main(name, endpoint, workload, index, topic, rate, shared, results) -> None:
    _child_signals()
    precise_sleeps()
    client = None
    try:
        client = driver_registry.driver_class(name).producer(endpoint, workload)
        acks = AckSlots()           # before the freeze: its callbacks live all run
        freeze_startup_objects()
        pauses = GcPauses().start()
        results.put(("ready", "producer", index, None))
        out = _produce(client, workload, index, topic, rate, shared, _wait_for_t0(shared), acks)
        out["gc"] = pauses.summary()
        results.put(("done", "producer", index, out))
    except BaseException as exc:  # noqa: BLE001 - every failure goes to the parent
        if not isinstance(exc, SystemExit):
            results.put(("error", "producer", index, traceback.format_exc()))
    finally:
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass


def _produce(client, workload, index, topic, rate, shared, t0, acks=None) -> dict:
    size, parts = workload.message_size, workload.partitions_per_topic
    warm_end = t0 + int(workload.warmup_seconds * 1e9)
    end = warm_end + int(workload.test_seconds * 1e9)
    quota = workload.backlog_messages(workload.producers) if workload.backlog else None
    per_call = max(1, min(1000, SEND_BYTES // size))
    window = max(2 * per_call, min(WINDOW_MESSAGES, WINDOW_BYTES // size))
    interval = 1e9 / rate if rate > 0 else 0.0
    pacing = int(workload.producer_pacing_ms * 1e6) if interval else 0
    payloads = Payloads(workload, seed=index)
    rng = np.random.default_rng(index)
    publish = LatencyRecorder()
    # what each send's acknowledgement needs, in slots made before the run:
    # no object per send for the collector (acks.py)
    timeline = LatencyTimeline(t0, bucket_seconds(workload))
    acks = (acks or AckSlots()).start(warm_end, publish, timeline)
    series = RateSeries(t0, bucket_seconds(workload))
    sent = measured = calls = 0
    sent_slot = shared["sent"]

    def room(n):
        """Until ``n`` more messages fit the window and a send slot is free
        (the back-pressure of a client with that much in flight)."""
        while ((acks.outstanding + n > window or not acks.free())
               and time.time_ns() < end):
            client.poll(0.005)
        if not acks.free():
            client.flush(30.0)

    # One message due, the steady state of a fixed rate a producer keeps up
    # with, is sent without numpy: numpy's fixed cost per call was most of a
    # producer's CPU at 5,000 msg/s (about 20 µs a message, on the cores the
    # system under test needs too). So is a paced wake-up's burst under
    # KEY_ROUND_ROBIN while it spans no more messages than there are
    # partitions: each message goes to a partition of its own, a call each
    # either way. (The loop alone, a client doing nothing, 5,000 msg/s over
    # 100 partitions, 1 ms pacing: 22-24 µs of CPU a message through numpy,
    # 11-13 through this; 27-33 without pacing.) RANDOM_NANO keeps the
    # general path, for its draws from ``rng``.
    one_fast = workload.key_distributor != "RANDOM_NANO"
    round_robin = workload.key_distributor == "KEY_ROUND_ROBIN"
    final = False
    while True:
        now = time.time_ns()
        if quota is not None and sent >= quota:
            break
        if now >= end:
            # paced, the end of the run is a last wake-up point, for what fell
            # due after the one before it (not sent at all, those would be
            # missing from the rates), all of it: one call's worth (512 KiB)
            # left a producer behind by more than that without the rest
            if not pacing or t0 + int(sent * interval) >= end:   # its stamp: exact
                break
            final = True
        if interval:
            if pacing:
                # what was due by the last wake-up point goes out; what fell
                # due since waits for the next one
                since = end - 1 - t0 if final else (now - t0) // pacing * pacing
                due = int(since / interval) + 1 - sent
                if due <= 0 and (final or int(sent * interval) <= since):
                    due = 1    # float rounding put the message just past the wake-up point
            else:
                due = int((now - t0) / interval) + 1 - sent
            if due <= 0:
                client.poll(0)
                # until the next message is due, or with pacing the first
                # wake-up point at or after that
                wake = (t0 - (-int(sent * interval) // pacing) * pacing if pacing
                        else t0 + sent * interval)
                wait = wake - time.time_ns()
                if wait > 0:
                    time.sleep(wait / 1e9)
                continue
            n = min(due, per_call)
            if one_fast and (n == 1 or (pacing and round_robin and n <= parts)):
                if quota is not None:
                    n = min(n, quota - sent)
                for _ in range(n):
                    room(1)
                    stamp = t0 + int(sent * interval)
                    part = sent % parts if round_robin else (calls + index) % parts
                    sent_now = time.time_ns()
                    client.send(topic, part, payloads.one(stamp), 1,
                                [b"key-%d" % sent] if round_robin else None,
                                acks.take(stamp, 1))
                    calls += 1
                    sent += 1
                    if stamp >= warm_end:
                        measured += 1
                    series.add(sent_now, 1)
                sent_slot[index] = sent
                client.poll(0)
                continue
            # the same stamps as the one-message path's t0 + int(i * interval):
            # t0 itself in float64 would round them to 256 ns
            stamps = t0 + (np.arange(sent, sent + n) * interval).astype(np.int64)
        else:
            n = per_call
            stamps = np.full(n, now, dtype=np.int64)
        if quota is not None:
            n = min(n, quota - sent)
            stamps = stamps[:n]
        room(n)
        block = payloads.block(stamps)
        sent_now = time.time_ns()
        if workload.key_distributor == "NO_KEY":
            room(0)
            client.send(topic, (calls + index) % parts, block, n, None, acks.take(stamps, n))
        elif workload.key_distributor == "KEY_ROUND_ROBIN":
            # message sent + r goes to partition (sent + r) % parts: each
            # partition's messages are every parts-th row from its first, a
            # strided view of the block and of the stamps (no grouping)
            rows = np.frombuffer(block, dtype=np.uint8).reshape(n, size)
            for r in range(min(n, parts)):
                first = sent + r
                count = len(range(r, n, parts))
                room(0)
                if count == 1:
                    client.send(topic, first % parts, block[r * size:(r + 1) * size], 1,
                                [b"key-%d" % first], acks.take(int(stamps[r]), 1))
                else:
                    client.send(topic, first % parts, rows[r::parts].tobytes(), count,
                                [b"key-%d" % k for k in range(first, sent + n, parts)],
                                acks.take(stamps[r::parts], count))
        else:  # RANDOM_NANO
            pick = rng.integers(0, parts, n)
            rows = np.frombuffer(block, dtype=np.uint8).reshape(n, size)
            for p in np.unique(pick).tolist():
                idx = np.flatnonzero(pick == p)
                keys = [b"%d" % k for k in rng.integers(0, 1 << 62, len(idx)).tolist()]
                room(0)
                client.send(topic, p, rows[idx].tobytes(), len(idx), keys,
                            acks.take(stamps[idx], len(idx)))
        calls += 1
        sent += n
        measured += n if stamps[0] >= warm_end else int(np.count_nonzero(stamps >= warm_end))
        series.add(sent_now, n)
        sent_slot[index] = sent
        client.poll(0)
    client.flush(30.0 if quota is None else 600.0)
    return {"sent": sent, "measured": measured, "acked": acks.acked,
            "last_ack_ns": time.time_ns(), "publish": publish.encoded(),
            "series": series.counts, "timeline": timeline.encoded()}


def measured_arrivals(stamps: np.ndarray, warm_end: int) -> int:
    """How many of the messages that just arrived count towards the consume
    rate: those due in the test period. One due during the warm-up that
    arrives after it is the warm-up's backlog being caught up: counted,
    a consumer that lagged at the end of the warm-up would show a rate
    above what was published (issue 46: 10,313 msg/s consumed of 10,000
    published, every message received once)."""
    return int(np.count_nonzero(stamps >= warm_end))   # several partitions' stamps: unsorted


def _consumer_main(name, endpoint, workload, index, assignment, shared, results) -> None:
    _child_signals()
    client = None
    try:
        client = driver_registry.driver_class(name).consumer(endpoint, workload, assignment)
        freeze_startup_objects()
        pauses = GcPauses().start()
        results.put(("ready", "consumer", index, None))
        t0 = _wait_for_t0(shared)
        warm_end = t0 + int(workload.warmup_seconds * 1e9)
        end = warm_end + int(workload.test_seconds * 1e9)
        e2e = LatencyRecorder()
        series = RateSeries(t0, bucket_seconds(workload))
        timeline = LatencyTimeline(t0, bucket_seconds(workload))
        received = measured = nbytes = last_arrival = 0
        slot, stop = shared["received"], shared["stop"]
        if workload.backlog:
            # the backlog is being written: read nothing until it is complete
            while shared["drain_t0"].value == 0 and not stop.is_set():
                time.sleep(0.001)
        while not stop.is_set():
            stamps, got = client.receive(RECEIVE_TIMEOUT)
            if not len(stamps):
                continue
            now = last_arrival = time.time_ns()
            received += len(stamps)
            nbytes += got
            if workload.backlog:
                measured += len(stamps)
            elif now < end:
                measured += measured_arrivals(stamps, warm_end)
            series.add(now, len(stamps))
            if not workload.backlog:
                latencies = now - stamps
                timeline.add(now, latencies)
                e2e.add(latencies[stamps >= warm_end])
            slot[index] = received
        results.put(("done", "consumer", index,
                     {"received": received, "measured": measured, "bytes": nbytes,
                      "last_arrival_ns": last_arrival, "e2e": e2e.encoded(),
                      "series": series.counts, "timeline": timeline.encoded(),
                      "gc": pauses.summary()}))
    except BaseException as exc:  # noqa: BLE001
        if not isinstance(exc, SystemExit):
            results.put(("error", "consumer", index, traceback.format_exc()))
    finally:
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001
                pass


# ---- the parent ------------------------------------------------------------------------------

class _Bar:
    """One line on stderr per (workload, driver): redrawn in place on a TTY,
    else printed at each quarter of the run."""

    def __init__(self, label: str, total_s: float, enabled: bool):
        self.label, self.total, self.enabled = label, total_s, enabled
        self.tty = sys.stderr.isatty()
        self.next_quarter = 25
        self.last = (time.monotonic(), 0, 0)
        self.rates = (0.0, 0.0)

    def draw(self, elapsed: float, phase: str, sent: int, received: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        t, s, r = self.last
        if now - t >= 0.5:
            self.rates = ((sent - s) / (now - t), (received - r) / (now - t))
            self.last = (now, sent, received)
        pct = max(0.0, min(100.0, 100.0 * elapsed / self.total)) if self.total else 100.0
        fill = int(pct / 5)
        line = (f"  {self.label:<16} [{'#' * fill}{'.' * (20 - fill)}] {pct:3.0f}% {phase:<7} "
                f"pub {self.rates[0]:>10,.0f}/s  cons {self.rates[1]:>10,.0f}/s")
        if self.tty:
            sys.stderr.write("\r" + line)
            sys.stderr.flush()
        elif pct >= self.next_quarter:
            while pct >= self.next_quarter:
                self.next_quarter += 25
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def done(self, text: str) -> None:
        if self.enabled:
            sys.stderr.write(("\r" if self.tty else "") + f"  {self.label:<16} {text}" +
                             (" " * 40 if self.tty else "") + "\n")
            sys.stderr.flush()


def run_driver(workload, name: str, work_parent: str | None = None,
               progress: bool = True) -> dict:
    """Runs ``workload`` on driver ``name``: its result dict (status "ok",
    "skipped" with a reason, or "failed" with the error)."""
    driver = driver_registry.driver_class(name)()
    base = {"driver": name, "label": driver.label, "kind": driver.kind}
    why = driver.unavailable()
    if why is None and workload.subscriptions_per_topic > 1 and not driver.fan_out:
        why = "cannot give every subscription every message (subscriptionsPerTopic > 1)"
    if why is None and workload.backlog and not driver.holds_backlog:
        why = "keeps no messages for a reader that is not there (no backlog to drain)"
    if why is not None:
        return {**base, "status": "skipped", "reason": why}
    work = tempfile.mkdtemp(prefix=f"kafkalite-bench-{name}-", dir=work_parent)
    ctx = multiprocessing.get_context("spawn")
    procs: list = []
    shared = None
    bar = _Bar(name, workload.warmup_seconds + workload.test_seconds,
               progress)
    try:
        topics = topic_names(workload)
        endpoint = driver.setup(workload, topics, work)
        owned = assignments(workload, topics)
        producers = [(t, j) for t in topics for j in range(workload.producers_per_topic)]
        shared = {"t0": ctx.Value("q", 0, lock=False), "drain_t0": ctx.Value("q", 0, lock=False),
                  "stop": ctx.Event(),
                  "sent": ctx.Array("q", len(producers), lock=False),
                  "received": ctx.Array("q", len(owned), lock=False)}
        results = ctx.Queue()
        rate = workload.producer_rate / len(producers)
        consumers = [ctx.Process(target=_consumer_main, name=f"bench-consumer-{i}", daemon=True,
                                 args=(name, endpoint, workload, i, a, shared, results))
                     for i, a in enumerate(owned)]
        for p in consumers:
            p.start()
        procs += consumers
        _await(results, procs, "ready", len(consumers), READY_TIMEOUT, name)
        prods = [ctx.Process(target=_producer_main, name=f"bench-producer-{i}", daemon=True,
                             args=(name, endpoint, workload, i, t, rate, shared, results))
                 for i, (t, _j) in enumerate(producers)]
        for p in prods:
            p.start()
        procs += prods
        _await(results, procs, "ready", len(prods), READY_TIMEOUT, name)
        t0 = time.time_ns() + START_DELAY_NS
        shared["t0"].value = t0
        total_s = workload.warmup_seconds + workload.test_seconds

        def tick(phase):
            elapsed = (time.time_ns() - t0) / 1e9
            bar.draw(elapsed, phase, sum(shared["sent"]), sum(shared["received"]))

        done: dict = {}
        deadline = t0 / 1e9 + total_s + 60 + READY_TIMEOUT
        # the measured seconds' CPU (cpu.py): opened as the warm-up ends, closed as the
        # producers' test seconds end (before the drain)
        cpu = CpuWindow(driver.server_pids(), [p.pid for p in procs], driver.server_requests)
        test_from = t0 + workload.warmup_seconds * 1e9
        test_until = t0 + total_s * 1e9
        while len([k for k in done if k[0] == "producer"]) < len(prods):
            _collect(results, done, procs, name, timeout=0.25)
            now = time.time_ns()
            if cpu.start is None and now >= test_from:
                cpu.open(sum(shared["sent"]))
            elif cpu.start is not None and now >= test_until:
                cpu.close(sum(shared["sent"]))
            tick("warm-up" if now < test_from else "test")
            if time.time() > deadline:
                raise DriverFailed(f"{name}: producers did not finish")
        cpu.close(sum(shared["sent"]))
        sent = sum(v["sent"] for k, v in done.items() if k[0] == "producer")
        expected = sent * workload.subscriptions_per_topic
        drain_seconds = DRAIN_SECONDS
        if workload.backlog:
            shared["drain_t0"].value = time.time_ns()
            drain_seconds = max(60.0, expected / BACKLOG_DRAIN_FLOOR)
        drain_until = time.monotonic() + drain_seconds
        while sum(shared["received"]) < expected and time.monotonic() < drain_until:
            _collect(results, done, procs, name, timeout=0.1)
            tick("drain")
        shared["stop"].set()
        end_by = time.monotonic() + 30
        while len(done) < len(procs):
            _collect(results, done, procs, name, timeout=0.25)
            if time.monotonic() > end_by:
                raise DriverFailed(f"{name}: consumers did not stop")
        for p in procs:
            p.join(10)
        result = _summarize(base, workload, done, expected, t0, shared["drain_t0"].value)
        result["cpu"] = cpu.result()
        bar.done(f"publish {result['publish_rate']:,.0f} msg/s, consume "
                 f"{result['consume_rate']:,.0f} msg/s, e2e p99 "
                 f"{_ms(result['e2e_latency_ms']['p99'])}"
                 + (f"; {cpu_summary(result['cpu'])}" if result["cpu"] else ""))
        return result
    except DriverFailed as exc:
        bar.done(f"FAILED: {exc}")
        return {**base, "status": "failed", "reason": str(exc)}
    except (OSError, RuntimeError, ValueError) as exc:
        bar.done(f"FAILED: {exc}")
        return {**base, "status": "failed", "reason": f"{name}: {exc}"}
    finally:
        if shared is not None:
            shared["stop"].set()
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        try:
            driver.teardown()
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _ms(v) -> str:
    return "n/a" if v is None else f"{v:.2f} ms"


def _await(results, procs, kind, count, timeout, name) -> None:
    seen: dict = {}
    deadline = time.monotonic() + timeout
    while len(seen) < count:
        _collect(results, seen, procs, name, timeout=0.1, want=kind)
        if time.monotonic() > deadline:
            raise DriverFailed(f"{name}: client processes were not ready in {timeout:.0f} s")


def _collect(results, into: dict, procs, name, timeout: float, want: str = "done") -> None:
    """Takes reports from the children; a child's error or death is the driver's failure."""
    try:
        kind, role, index, payload = results.get(timeout=timeout)
    except queue.Empty:
        dead = [p for p in procs if p.exitcode not in (None, 0)]
        if dead:
            raise DriverFailed(f"{name}: {dead[0].name} exited with {dead[0].exitcode}")
        return
    if kind == "error":
        last = payload.strip().splitlines()[-1]
        raise DriverFailed(f"{name}: {role} {index} failed: {last}\n{payload}"
                           if os.environ.get("KAFKALITE_BENCH_DEBUG") else
                           f"{name}: {role} {index} failed: {last}")
    if kind == want:
        into[(role, index)] = payload


def _series(lists: list[list[int]]) -> list[int]:
    n = max((len(s) for s in lists), default=0)
    out = np.zeros(n, dtype=np.int64)
    for s in lists:
        out[:len(s)] += np.asarray(s, dtype=np.int64)
    return out.tolist()


def _summarize(base: dict, workload, done: dict, expected: int, t0: int, drain_t0: int) -> dict:
    prods = [v for k, v in done.items() if k[0] == "producer"]
    cons = [v for k, v in done.items() if k[0] == "consumer"]
    size, test = workload.message_size, workload.test_seconds
    width = bucket_seconds(workload)
    received = sum(c["received"] for c in cons)
    if workload.backlog:
        fill_s = (max(p["last_ack_ns"] for p in prods) - t0) / 1e9
        drain_s = (max(c["last_arrival_ns"] for c in cons) - drain_t0) / 1e9 if received else 0
        pub_rate = sum(p["measured"] for p in prods) / fill_s if fill_s > 0 else 0.0
        con_rate = sum(c["measured"] for c in cons) / drain_s if drain_s > 0 else 0.0
        phases = {"fill_s": fill_s, "drain_s": drain_s}
    else:
        pub_rate = sum(p["measured"] for p in prods) / test
        con_rate = sum(c["measured"] for c in cons) / test
        phases = {}
    return {
        **base, "status": "ok", **phases,
        "publish_rate": pub_rate, "publish_mb_s": pub_rate * size / 1e6,
        "consume_rate": con_rate, "consume_mb_s": con_rate * size / 1e6,
        "publish_latency_ms": summary_ms(merge([p["publish"] for p in prods])),
        "e2e_latency_ms": summary_ms(merge([c["e2e"] for c in cons])),
        "sent": sum(p["sent"] for p in prods), "acked": sum(p["acked"] for p in prods),
        "expected": expected, "received": received, "missing": max(0, expected - received),
        "client_gc": {"producers": merge_gc_pauses([p["gc"] for p in prods if "gc" in p]),
                      "consumers": merge_gc_pauses([c["gc"] for c in cons if "gc" in c])},
        "series": {"bucket_s": width,
                   "publish": [c / width for c in _series([p["series"] for p in prods])],
                   "consume": [c / width for c in _series([c["series"] for c in cons])],
                   # latency by second (by bucket), warm-up included: a slow
                   # run tells whether it was slow all through or stalled
                   "publish_ms": timeline_ms([p["timeline"] for p in prods if "timeline" in p]),
                   "e2e_ms": timeline_ms([c["timeline"] for c in cons if "timeline" in c])},
    }
