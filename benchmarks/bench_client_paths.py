"""Per-message client paths: kafkalite's produce()/poll()/consume() beside confluent-kafka's.

    python benchmarks/bench_client_paths.py                    # 500,000 records, 3 rounds
    python benchmarks/bench_client_paths.py --before /work/main   # also the old client code
    python benchmarks/bench_client_paths.py --quick            # 20,000 records, 1 round

One broker (this checkout's server, 2 workers), and in every round, one after the other:

- confluent-kafka (Kafka's wire protocol, the broker's Kafka listener):
  ``produce()`` per record with and without a delivery callback, and
  ``consume(num_messages=10000)`` of what it produced;
- kafkalite's client from this checkout and, with ``--before``, from
  another checkout (the code before a change), each in a child process
  whose PYTHONPATH is that checkout: ``produce()`` with and without a
  callback, ``poll()`` and ``consume(10000)`` per message, and the bulk
  paths ``produce_batch()`` / ``consume_batch()``. Its links are
  ``--transport``'s (``tcp``, the clients' default: the direct TCP link to
  the worker's Kafka listener; or ``zmq``), the same for both checkouts.

Both clients also run the 100-partition workload's producer
(benchmarks/workloads/100p-4-producers.yaml): 5,000 records/s of 1 KB, one
``produce()`` each with a key and a delivery callback, partitions in turn,
woken every millisecond, linger.ms 1, for 4 s; its figure is the CPU time
of the whole process (every thread: kafkalite's sender, librdkafka's) per
record, the share of the machine a producer takes there.

Every other figure is timed with Python's cyclic garbage collector off, to time
the clients alone, except ``produce()`` with a callback and ``consume()``
timed again with it on (the ``gc on`` rows), as an application runs them:
for both clients there, since objects kept per record are what the
collector walks.

100-byte values, one partition, acks=1, linger.ms=5 and a queue of
1,000,000 records for both producers (confluent-kafka with large batches,
as bench_kafka_clients.py sets it; its consumer with large fetches). Every figure is the median of the
rounds, measured in the same run, so the ratios compare like with like on
a shared machine. Timing never fails anything: this prints the figures and
writes results.json / results.md under benchmarks/results/.
"""
from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import traceback

VALUE_BYTES = 100
CONSUME_N = 10_000
HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


# (figure, topic index, with a callback): the produce() loops both clients run.
# The ``_gc`` one runs with Python's cyclic garbage collector on, as in an
# application; the others with it off, to time the clients alone.
PRODUCE_LOOPS = [("produce_cb", 0, True), ("produce", 1, False), ("produce_cb_gc", 3, True)]


def _produce_loop(p, topic: str, n: int, with_callback: bool, gc_on: bool = False) -> float:
    """Records/s of ``n`` produce() calls and the flush() after them: the
    same loop for both clients (their produce() and poll() take the same
    arguments). Returns the rate; every callback must have run."""
    import gc
    (gc.enable if gc_on else gc.disable)()
    value = b"v" * VALUE_BYTES
    delivered = [0]

    def on_delivery(err, msg):
        delivered[0] += 1

    produce, poll = p.produce, p.poll
    t0 = time.perf_counter()
    if with_callback:
        for _ in range(n):
            while True:
                try:
                    produce(topic, value, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:
                    poll(0.01)
    else:
        for _ in range(n):
            while True:
                try:
                    produce(topic, value, partition=0)
                    break
                except BufferError:
                    poll(0.01)
    assert p.flush(120) == 0
    rate = n / (time.perf_counter() - t0)
    assert not with_callback or delivered[0] == n, f"{delivered[0]} of {n} callbacks"
    return rate


# The 100-partition workload's producer (benchmarks/workloads/100p-4-producers.yaml):
# one produce() per 1 KB record, keys spread over the partitions round-robin,
# at a fixed rate, woken every millisecond, a delivery callback each.
PACED_RATE = 5_000
PACED_PARTITIONS = 100
PACED_VALUE_BYTES = 1024
PACED_SECONDS = 4.0


def _paced_loop(p, topic: str, seconds: float) -> float:
    """CPU (all the process's threads) per record, in µs, of a producer
    sending PACED_RATE records/s for ``seconds``: each millisecond what
    fell due, one produce() each, then poll(0), as the bench harness's
    producer does. Its delivery reports are served by poll(); every record
    must be delivered."""
    value = b"v" * PACED_VALUE_BYTES
    delivered = [0]

    def on_delivery(err, msg):
        assert err is None, err
        delivered[0] += 1

    produce, poll = p.produce, p.poll
    n = int(seconds * PACED_RATE)
    interval = 1.0 / PACED_RATE
    sent = 0
    cpu0, t0 = time.process_time(), time.monotonic()
    while sent < n:
        due = min(n, int((time.monotonic() - t0) / interval) + 1)
        while sent < due:
            produce(topic, value, b"key-%d" % sent, partition=sent % PACED_PARTITIONS,
                    on_delivery=on_delivery)
            sent += 1
        poll(0)
        wake = t0 + (sent * interval // 0.001 + 1) * 0.001
        time.sleep(max(0.0, wake - time.monotonic()))
    assert p.flush(60) == 0
    cpu = time.process_time() - cpu0
    assert delivered[0] == n, f"{delivered[0]} of {n} callbacks"
    return cpu / n * 1e6


def _paced(make, config: dict, topic: str, n: int) -> float:
    """_paced_loop's figure for a producer made by ``make(config)``: a
    half-second first (links, metadata), then PACED_SECONDS measured (a
    tenth of that with fewer than 100,000 records: --quick)."""
    p = make(config)
    try:
        _paced_loop(p, topic, 0.5)
        return _paced_loop(p, topic, PACED_SECONDS if n >= 100_000 else PACED_SECONDS / 10)
    finally:
        getattr(p, "close", p.flush)()    # confluent-kafka's has no close(): flush() ends it


def _consume_loop(c, n: int) -> float:
    """Records/s of consume(CONSUME_N) until ``n`` records came."""
    seen, deadline = 0, time.monotonic() + 300
    t0 = time.perf_counter()
    while seen < n and time.monotonic() < deadline:
        seen += len(c.consume(CONSUME_N, 1.0))
    assert seen >= n, f"consumed {seen} of {n}"
    return n / (time.perf_counter() - t0)


def _poll_loop(c, n: int) -> float:
    seen, deadline = 0, time.monotonic() + 300
    poll = c.poll
    t0 = time.perf_counter()
    while seen < n and time.monotonic() < deadline:
        if poll(1.0) is not None:
            seen += 1
    assert seen >= n, f"polled {seen} of {n}"
    return n / (time.perf_counter() - t0)


# ---- kafkalite's client, in a child process (its PYTHONPATH picks the code) -----------

def kafkalite_phase(bootstrap: str, prefix: str, n: int, transport: str) -> dict:
    import gc

    from kafkalite.client import (OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, Producer,
                                  TopicPartition)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = [f"{prefix}-cb", f"{prefix}-nocb", f"{prefix}-batch", f"{prefix}-cbgc"]
    for name, fut in admin.create_topics([NewTopic(t, 1) for t in names] +
                                         [NewTopic(f"{prefix}-paced", PACED_PARTITIONS)]).items():
        fut.result()
    admin.close()
    out = {}
    for key, name, cb in PRODUCE_LOOPS:
        p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 5,
                      "queue.buffering.max.messages": 1_000_000,
                      "kafkalite.transport": transport})
        try:
            out[key] = _produce_loop(p, names[name], n, cb, gc_on=key.endswith("_gc"))
        finally:
            p.close()
    out["paced_cpu_us"] = _paced(
        Producer, {"bootstrap.servers": bootstrap, "acks": 1, "linger.ms": 1,
                   "kafkalite.transport": transport}, f"{prefix}-paced", n)
    gc.disable()
    p = Producer({"bootstrap.servers": bootstrap, "acks": 1, "kafkalite.transport": transport})
    values = [b"v" * VALUE_BYTES] * 5_000
    try:
        t0 = time.perf_counter()
        for start in range(0, n, len(values)):
            p.produce_batch(names[2], values[:min(len(values), n - start)], partition=0)
        assert p.flush(120) == 0
        out["produce_batch"] = n / (time.perf_counter() - t0)
    finally:
        p.close()
    for key, loop in (("poll", _poll_loop), ("consume", _consume_loop),
                      ("consume_gc", _consume_loop), ("consume_batch", None)):
        (gc.enable if key.endswith("_gc") else gc.disable)()
        c = Consumer({"bootstrap.servers": bootstrap, "kafkalite.transport": transport})
        c.assign([TopicPartition(names[0], 0, OFFSET_BEGINNING)])
        try:
            if loop is not None:
                out[key] = loop(c, n)
            else:
                seen, t0 = 0, time.perf_counter()
                while seen < n:
                    seen += c.consume_batch(1.0).num_rows
                out[key] = n / (time.perf_counter() - t0)
        finally:
            c.close()
    gc.enable()
    return out


def run_kafkalite(root: str, bootstrap: str, prefix: str, n: int, transport: str) -> dict:
    env = dict(os.environ, PYTHONPATH=f"{root}:{os.path.join(root, 'spark')}")
    got = subprocess.run([sys.executable, os.path.abspath(__file__), "--phase", bootstrap,
                          prefix, str(n), transport], env=env, capture_output=True, text=True, timeout=900,
                         cwd=root)
    if got.returncode:
        raise RuntimeError(f"kafkalite phase ({root}) failed:\n{got.stderr[-3000:]}")
    return json.loads(got.stdout.strip().splitlines()[-1])


# ---- confluent-kafka, in this process ---------------------------------------------------

def run_confluent(kafka_bootstrap: str, admin_bootstrap: str, prefix: str, n: int) -> dict:
    import gc

    import confluent_kafka as ck

    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": admin_bootstrap})
    names = [f"{prefix}-cb", f"{prefix}-nocb", None, f"{prefix}-cbgc"]
    for fut in admin.create_topics([NewTopic(t, 1) for t in names if t] +
                                   [NewTopic(f"{prefix}-paced", PACED_PARTITIONS)]).values():
        fut.result()
    admin.close()
    out = {}
    try:
        out["paced_cpu_us"] = _paced(ck.Producer, {"bootstrap.servers": kafka_bootstrap,
                                                   "acks": 1, "linger.ms": 1},
                                     f"{prefix}-paced", n)
        for key, name, cb in PRODUCE_LOOPS:
            p = ck.Producer({"bootstrap.servers": kafka_bootstrap, "acks": 1, "linger.ms": 5,
                             "batch.num.messages": 10000, "batch.size": 1_000_000,
                             "queue.buffering.max.messages": 1_000_000})
            out[key] = _produce_loop(p, names[name], n, cb, gc_on=key.endswith("_gc"))
        gc.disable()
        for key in ("consume", "consume_gc"):
            (gc.enable if key.endswith("_gc") else gc.disable)()
            c = ck.Consumer({"bootstrap.servers": kafka_bootstrap,
                             "group.id": f"{prefix}-bench-{key}", "enable.auto.commit": False,
                             "fetch.max.bytes": 52428800, "max.partition.fetch.bytes": 10485760})
            c.assign([ck.TopicPartition(names[0], 0, ck.OFFSET_BEGINNING)])
            try:
                out[key] = _consume_loop(c, n)
            finally:
                c.close()
    finally:
        gc.enable()
    return out


# ---- the run ------------------------------------------------------------------------------

FIGURES = [  # (key, label)
    ("produce_cb", "produce() per record, delivery callback"),
    ("produce_cb_gc", "produce() per record, delivery callback, gc on"),
    ("produce", "produce() per record, no callback"),
    ("poll", "poll() per message"),
    ("consume", f"consume(num_messages={CONSUME_N:,})"),
    ("consume_gc", f"consume(num_messages={CONSUME_N:,}), gc on"),
    ("produce_batch", "produce_batch() (bulk)"),
    ("consume_batch", "consume_batch() (bulk)"),
]
PACED_LABEL = (f"paced produce(): {PACED_RATE:,} records/s of {PACED_VALUE_BYTES} B over "
               f"{PACED_PARTITIONS} partitions, linger.ms 1, a callback each")


def parse_args(argv):
    import common      # here: a --phase child imports only the kafkalite it measures
    p = common.parser(__doc__)
    p.add_argument("--records", type=int, default=None,
                   help="records per figure (default 500,000; --quick: 20,000)")
    common.add_rounds(p, 3, help="rounds (figures are medians)")
    p.add_argument("--before", default=None,
                   help="a checkout of the code to compare with (e.g. /work/main)")
    common.add_dirs(p)
    common.add_quick(p, "20,000 records, 1 round")
    p.add_argument("--transport", choices=("tcp", "zmq"), default="tcp",
                   help="kafkalite's links, for every checkout (default tcp, the clients' default)")
    args = common.parse(p, argv, quick={"records": 20_000, "rounds": 1})
    if args.records is None:
        args.records = 500_000
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--phase":
        print(json.dumps(kafkalite_phase(argv[1], argv[2], int(argv[3]), argv[4])))
        return 0
    args = parse_args(argv)
    import report
    from report import say

    from kafkalite import launcher
    out_dir, work = report.make_dirs("client-paths", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    import confluent_kafka
    trees = [("after", REPO)] + ([("before", os.path.abspath(args.before))] if args.before else [])
    say("kafkalite per-message client paths")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    say(f"  clients    confluent-kafka {confluent_kafka.version()[0]} (librdkafka "
        f"{confluent_kafka.libversion()[0]}); kafkalite from {', '.join(r for _, r in trees)}")
    say(f"  workload   {args.records:,} records of {VALUE_BYTES} bytes per figure, one partition, "
        f"acks=1, linger.ms=5; median of {args.rounds} round(s); kafkalite over "
        f"{args.transport}")
    report.say_load(info)
    runs: dict[str, list[dict]] = {"confluent": []}
    for name, _ in trees:
        runs[name] = []
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=2)
    started = time.perf_counter()
    try:
        server.start()
        for r in range(args.rounds):
            runs["confluent"].append(run_confluent(server.kafka_bootstrap, server.bootstrap,
                                                   f"ck{r}", args.records))
            # the two checkouts take turns going first: on this VM the first
            # process after a pause can run 20% slower (its fresh memory faults)
            for name, root in (trees if r % 2 == 0 else trees[::-1]):
                runs[name].append(run_kafkalite(root, server.bootstrap, f"{name}{r}",
                                                args.records, args.transport))
            say(f"  round {r + 1}: " + "; ".join(
                f"{k} " + ", ".join(f"{f}={v[-1][f]:.1f}" if f == "paced_cpu_us" else
                                    f"{f}={v[-1][f] / 1e3:,.0f}k" for f in sorted(v[-1]))
                for k, v in runs.items()))
    except Exception:
        traceback.print_exc()
        print(server.output()[-3000:], file=sys.stderr)
        return 1
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = {k: {f: statistics.median(run[f] for run in v) for f in v[0]} for k, v in runs.items()}
    ck = med["confluent"]
    peer = {"produce_cb": "produce_cb", "produce_cb_gc": "produce_cb_gc", "produce": "produce",
            "poll": "consume", "consume": "consume", "consume_gc": "consume_gc"}
    headers = ["Figure", "kafkalite"] + (["kafkalite before"] if args.before else []) + \
        ["confluent-kafka", "Ratio to confluent-kafka"]
    rows = []
    for key, label in FIGURES:
        row = [label, f"{med['after'][key]:,.0f}"]
        if args.before:
            row.append(f"{med['before'][key]:,.0f}" if key in med["before"] else "-")
        if key in peer:
            row += [f"{ck[peer[key]]:,.0f}" + (" (consume)" if key == "poll" else ""),
                    f"{med['after'][key] / ck[peer[key]]:.2f}x"]
        else:
            row += ["-", "-"]
        rows.append(row)
    paced = [PACED_LABEL, f"{med['after']['paced_cpu_us']:.1f}"] + \
        ([f"{med['before']['paced_cpu_us']:.1f}" if "paced_cpu_us" in med["before"] else "-"]
         if args.before else []) + \
        [f"{ck['paced_cpu_us']:.1f}", f"{med['after']['paced_cpu_us'] / ck['paced_cpu_us']:.2f}x"]
    say()
    say(report.text_table(rows, headers))
    say()
    say(report.text_table([paced], ["CPU per record, µs (all threads)"] + headers[1:]))
    say("(records/s, medians; targets: produce() >= 2x confluent-kafka's produce(), "
        "poll()/consume() >= 3x its consume(num_messages))")
    elapsed = time.perf_counter() - started
    doc = {"benchmark": "kafkalite per-message client paths", "command": " ".join(
        ["python", "benchmarks/bench_client_paths.py"] + argv), "elapsed_s": elapsed,
        "machine": info, "records": args.records, "rounds": args.rounds, "medians": med,
        "runs": runs}
    report.write_json(out_dir, doc)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write("# kafkalite per-message client paths\n\n")
        f.write(f"- command: `{doc['command']}`\n- {args.records:,} records of {VALUE_BYTES} "
                f"bytes per figure, one partition, acks=1; median of {args.rounds} rounds; "
                f"kafkalite over {args.transport}\n\n")
        f.write(report.markdown_table(rows, headers) + "\n\n")
        f.write(report.markdown_table([paced], ["CPU per record, µs (all threads)"] + headers[1:])
                + "\n")
    say(f"results: {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
