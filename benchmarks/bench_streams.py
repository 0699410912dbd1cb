"""What kafkalite Streams processes, beside quixstreams on the same broker and input.

    python benchmarks/bench_streams.py                     # 1,000,000 records, a few minutes
    python benchmarks/bench_streams.py --quick             # what a smoke run needs
    python benchmarks/bench_streams.py --records 10000000  # the issue's size
    python benchmarks/bench_streams.py --records 10000000 --kinds stateful \
        --guarantees exactly_once_v2 --impls columnar,quix  # one figure and its peer
    python benchmarks/bench_streams.py --records 10000000 --kinds stateless,stateful \
        --repeat 3                                         # the issue's table, 3 runs each

One input topic of ``--records`` records (100-byte values, ``--keys``
distinct keys, 4 partitions), written once; each figure is one application
(its own application.id / consumer group) reading it from the beginning
with one instance, timed from start until it has processed the input and
closed (group join, restore of empty stores and the last commit included),
in records of input per second:

1. stateless: filter (about half the records) + map_values (the first 50
   bytes) to an output topic;
2. stateful: a count per key (RocksDB store with its changelog) to an
   output topic;

3. join: each record joined with a table of ``--keys`` 20-byte values (read
   from a compacted-style topic, one record per key, in the same run) into
   the first 50 bytes + the table's value: kafkalite only (quixstreams has no
   stream-table join to compare with);

each under at_least_once and exactly_once_v2, for kafkalite Streams
columnar (pyarrow.compute expressions; the count is columnar anyway),
kafkalite Streams per record (Python lambdas; the count as
``aggregate(lambda: 0, lambda k, v, a: a + 1)``), quixstreams (through
the Kafka listener, its default RocksDB state, ``app.run(count=...)`` over
the first ``--quix-records`` records of the same topic: it is about 100x
slower, and the rate is what is compared; in its own process,
quixstreams_peer.py, with the python of a virtualenv holding quixstreams,
built on first use under ``--venv-cache`` and kept, or ``--quix-python``:
quixstreams pins confluent-kafka below 2.13, the project does not) and
faust (faust-streaming, through the Kafka listener with aiokafka, in its
own process because a faust worker owns its event loop and signals: one
agent, a RocksDB (rocksdict) table for the count, ``processing_guarantee``
at_least_once or exactly_once; timed from the worker's start until it has
processed ``--faust-records`` records, flushed its producer and committed;
debug logging turned off, which faust's worker leaves on; the producer
lingers 5 ms like librdkafka's, not aiokafka's 0). A peer's run that
fails is printed as a warning and tried once more; a second failure leaves
that figure out (kafkalite's own figures never are).
Targets (issue 20): columnar >= 20x quixstreams on the stateful count,
per record >= 2x.

Timing never fails anything: this prints figures and writes results.json /
results.md under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import time
import traceback

import numpy as np

import common
import report
from report import Results, say

from kafkalite import launcher

HERE = os.path.dirname(os.path.abspath(__file__))
# tests/venvs.py: the quixstreams virtualenv, the same one its tests use
sys.path.append(os.path.join(HERE, "..", "tests"))
from venvs import CACHE, QUIXSTREAMS, VenvBuildFailed, VenvUnavailable, venv_python  # noqa: E402

QUIX_PEER = os.path.join(HERE, "quixstreams_peer.py")

HEADERS = ["#", "Figure", "kafkalite", "Compared with", "Ratio", "Target", "Met"]
PARTITIONS = 4
GUARANTEES = {"at_least_once": "at-least-once", "exactly_once_v2": "exactly-once"}
KINDS = ("stateless", "stateful", "join")
IMPLS = ("columnar", "per_record", "quix", "faust")
PEERS = ("quix", "faust")
FAUST_GUARANTEES = {"at_least_once": "at_least_once", "exactly_once_v2": "exactly_once"}


def create_topic(server, name: str) -> None:
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        admin.create_topics([NewTopic(name, PARTITIONS)])[name].result()
    finally:
        admin.close()


def fill(server, topic: str, records: int, keys: int) -> None:
    """``records`` 100-byte values over ``keys`` keys, produce_batch of 10,000."""
    from kafkalite.client import Producer
    rng = np.random.default_rng(20)
    p = Producer({"bootstrap.servers": server.bootstrap})
    key_names = [b"key-%08d" % i for i in range(keys)]
    step = 10_000
    for start in range(0, records, step):
        n = min(step, records - start)
        values = rng.integers(ord("a"), ord("z") + 1, size=(n, 100), dtype=np.uint8)
        idx = rng.integers(0, keys, size=n)
        p.produce_batch(topic, values, [key_names[i] for i in idx])
    assert p.flush(300) == 0
    p.close()


def fill_table(server, topic: str, keys: int) -> None:
    """One 20-byte value per key (the join's table)."""
    from kafkalite.client import Producer
    p = Producer({"bootstrap.servers": server.bootstrap})
    for start in range(0, keys, 10_000):
        n = min(10_000, keys - start)
        p.produce_batch(topic, [b"user-%015d" % i for i in range(start, start + n)],
                        [b"key-%08d" % i for i in range(start, start + n)])
    assert p.flush(300) == 0
    p.close()


def kafkalite_topology(kind: str, columnar: bool, source: str, sink: str):
    import pyarrow.compute as pc

    from kafkalite.streams import Materialized, Produced, Serdes, StreamsBuilder
    b = StreamsBuilder()
    s = b.stream(source)
    if kind == "join":
        table = b.table("table", materialized=Materialized.as_("table"))
        joiner = pc.binary_join_element_wise(
            pc.binary_slice(pc.field("left_value"), 0, 50), pc.field("right_value"), b"") \
            if columnar else (lambda lv, rv: lv[:50] + rv)
        s.join(table, joiner).to(sink)
    elif kind == "stateless":
        if columnar:
            s = s.filter(pc.less(pc.binary_slice(pc.field("value"), 0, 1), b"n")) \
                .map_values(pc.binary_slice(pc.field("value"), 0, 50))
        else:
            s = s.filter(lambda k, v: v[0] < 110).map_values(lambda v: v[:50])
        s.to(sink)
    else:
        g = s.group_by_key()
        table = g.count() if columnar else g.aggregate(
            lambda: 0, lambda k, v, a: a + 1, Materialized.with_(None, Serdes.long()))
        table.to_stream().to(sink, Produced.with_(Serdes.bytes(), Serdes.long()))
    return b.build()


def run_kafkalite(server, work, source, records, kind, columnar, guarantee, tag,
                  table_records=0) -> float:
    from kafkalite.streams import KafkaStreams
    sink = f"out-{tag}"
    create_topic(server, sink)
    streams = KafkaStreams(kafkalite_topology(kind, columnar, source, sink), {
        "application.id": f"bench-{tag}", "bootstrap.servers": server.bootstrap,
        "processing.guarantee": guarantee, "state.dir": os.path.join(work, f"state-{tag}"),
        "commit.interval.ms": 100 if guarantee == "exactly_once_v2" else 1000})
    start = time.perf_counter()
    streams.start()
    try:
        while streams.metrics()["processed"] < records + table_records:
            if streams.state == KafkaStreams.ERROR:
                raise RuntimeError(f"{tag}: {streams.error!r}")
            time.sleep(0.01)
    finally:
        streams.close()
    return records / (time.perf_counter() - start)


def run_quix(server, work, source, records, kind, guarantee, tag, python) -> float:
    """quixstreams' rate: quixstreams_peer.py run with ``python``."""
    spec = dict(broker=server.kafka_bootstrap, source=source, sink=f"out-{tag}", kind=kind,
                guarantee=GUARANTEES[guarantee], records=records, consumer_group=f"bench-{tag}",
                state_dir=os.path.join(work, f"quix-{tag}"),
                commit_interval=0.1 if guarantee == "exactly_once_v2" else 1.0,
                partitions=PARTITIONS, result=os.path.join(work, f"quix-{tag}.json"))
    log_path = os.path.join(work, f"quix-{tag}.log")
    with open(log_path, "w") as log:
        proc = subprocess.run([str(python), QUIX_PEER, json.dumps(spec)], stdout=log,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              timeout=120 + records / 100)
    if proc.returncode != 0 or not os.path.exists(spec["result"]):
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"quixstreams {tag} exited {proc.returncode}:\n{tail}")
    with open(spec["result"]) as f:
        return records / json.load(f)["seconds"]


def quix_python(args) -> tuple[str, str]:
    """The python that runs the quixstreams peer (``--quix-python``, or that
    of the virtualenv built on first use under ``--venv-cache``) and the
    version of quixstreams it has."""
    python = args.quix_python or str(venv_python(QUIXSTREAMS, args.venv_cache))
    r = subprocess.run([python, "-c", "import importlib.metadata as m; "
                        "print(m.version('quixstreams'))"],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise VenvBuildFailed(f"{python} has no quixstreams: {r.stderr.strip()[-500:]}")
    return python, r.stdout.strip()


def run_faust(server, work, source, records, kind, guarantee, tag) -> float:
    """faust's rate: this file run again as ``--faust-worker`` (faust_worker)."""
    sink = f"out-{tag}"
    create_topic(server, sink)
    spec = dict(broker=server.kafka_bootstrap, source=source, sink=sink, kind=kind,
                guarantee=FAUST_GUARANTEES[guarantee], records=records, app_id=f"bench-{tag}",
                datadir=os.path.join(work, f"faust-{tag}"),
                result=os.path.join(work, f"faust-{tag}.json"))
    log_path = os.path.join(work, f"faust-{tag}.log")
    with open(log_path, "w") as log:
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--faust-worker",
                               json.dumps(spec)], stdout=log, stderr=subprocess.STDOUT,
                              stdin=subprocess.DEVNULL, timeout=120 + records / 100)
    if proc.returncode != 0 or not os.path.exists(spec["result"]):
        with open(log_path) as f:
            tail = f.read()[-3000:]
        raise RuntimeError(f"faust {tag} exited {proc.returncode}:\n{tail}")
    with open(spec["result"]) as f:
        return records / json.load(f)["seconds"]


def faust_worker(spec: dict) -> None:
    """One faust application over ``spec``'s input, in this process: an
    agent filters + maps or counts per key into a table, sends to the sink;
    after ``records`` records it stops taking more, flushes, commits and
    writes the seconds taken to ``spec["result"]``, then leaves at once
    (faust's own shutdown under exactly_once sends buffered records after
    ending the transactions and crashes; the figure does not need it)."""
    import asyncio
    import logging

    import faust
    app = faust.App(spec["app_id"], broker=f"kafka://{spec['broker']}", store="rocksdb://",
                    datadir=spec["datadir"], processing_guarantee=spec["guarantee"],
                    topic_partitions=PARTITIONS, topic_replication_factor=1,
                    web_enabled=False, consumer_auto_offset_reset="earliest",
                    broker_commit_interval=0.1 if spec["guarantee"] == "exactly_once" else 1.0,
                    producer_linger=0.005)
    raw = dict(key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    source = app.topic(spec["source"], **raw)
    sink = app.topic(spec["sink"], partitions=PARTITIONS, **raw)
    counts = app.Table("counts", default=int, partitions=PARTITIONS, key_type=bytes,
                       value_type=int)
    records, stateless = spec["records"], spec["kind"] == "stateless"
    done = asyncio.Event()

    async def finish():
        await app.producer.flush()
        await app.consumer.commit(start_new_transaction=False)
        with open(spec["result"], "w") as f:
            json.dump({"seconds": time.perf_counter() - start}, f)
        os._exit(0)

    @app.agent(source)
    async def process(stream):
        # faust's worker sets the root logger to DEBUG and filters in the
        # handler: every aiokafka/faust debug call builds a record
        logging.getLogger().setLevel(logging.WARNING)
        seen = 0
        async for key, value in stream.items():
            if stateless:
                if value[0] < 110:
                    await sink.send(key=key, value=value[:50])
            else:
                counts[key] += 1
                await sink.send(key=key, value=b"%d" % counts[key])
            seen += 1
            if seen == records:
                asyncio.ensure_future(finish())
                await done.wait()  # takes no more input (never set: finish exits)

    worker = faust.Worker(app, loglevel="WARNING", redirect_stdouts=False)
    start = time.perf_counter()
    worker.execute_from_commandline()


def parse_args(argv):
    p = common.parser(__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--records", type=int, default=1_000_000, help="input records")
    p.add_argument("--keys", type=int, default=100_000, help="distinct keys")
    p.add_argument("--quix-records", type=int, default=100_000,
                   help="records quixstreams processes (a prefix of the same input)")
    p.add_argument("--faust-records", type=int, default=50_000,
                   help="records faust processes (a prefix of the same input)")
    common.add_rounds(p, 1, flag="--repeat", help="runs of each figure (the table gives the "
                      "best; the range is printed and in results.json)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--no-quix", action="store_true", help="no quixstreams figures")
    p.add_argument("--quix-python", default=None,
                   help="a python with quixstreams to run its peer with, instead of that of "
                        "the virtualenv built on first use under --venv-cache")
    p.add_argument("--venv-cache", default=str(CACHE),
                   help="where quixstreams' virtualenv is built on first use and kept "
                        "(the tests' cache, $KAFKALITE_TEST_CACHE or ~/.cache/kafkalite-tests)")
    p.add_argument("--no-faust", action="store_true", help="no faust figures")
    common.add_dirs(p)
    common.add_quick(p, "50,000 records, 5,000 keys, quixstreams over 10,000, faust over 3,000")
    p.add_argument("--kinds", default=",".join(KINDS), help="which applications")
    p.add_argument("--guarantees", default=",".join(GUARANTEES), help="which guarantees")
    p.add_argument("--impls", default=",".join(IMPLS), help="which implementations")
    args = common.parse(p, argv, quick={"records": 50_000, "keys": 5_000,
                                        "quix_records": 10_000, "faust_records": 3_000})
    args.kinds = [k for k in KINDS if k in args.kinds.split(",")]
    args.guarantees = [g for g in GUARANTEES if g in args.guarantees.split(",")]
    args.impls = [i for i in IMPLS if i in args.impls.split(",")
                  and not (i == "quix" and args.no_quix) and not (i == "faust" and args.no_faust)]
    args.quix_records = min(args.quix_records, args.records)
    args.faust_records = min(args.faust_records, args.records)
    return args


def run_figure(server, work, args, kind, guarantee, impl, tag) -> float:
    if impl == "quix":
        return run_quix(server, work, "input", args.quix_records, kind, guarantee, tag,
                        args.quix_python)
    if impl == "faust":
        return run_faust(server, work, "input", args.faust_records, kind, guarantee, tag)
    return run_kafkalite(server, work, "input", args.records, kind, impl == "columnar",
                         guarantee, tag, args.keys if kind == "join" else 0)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--faust-worker"]:
        faust_worker(json.loads(argv[1]))
        return 1  # faust_worker leaves through os._exit(0) once it has its figure
    args = parse_args(argv)
    out_dir, work = report.make_dirs("streams", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    say("kafkalite Streams benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    if "quix" in args.impls:
        try:
            args.quix_python, quix_version = quix_python(args)
        except (VenvUnavailable, VenvBuildFailed) as exc:
            # a peer that cannot run is a finding to print, not the end of
            # kafkalite's figures
            report.warn(f"no quixstreams figures: {exc}")
            args.impls.remove("quix")
        else:
            say(f"  peer       quixstreams {quix_version} (Kafka listener, its own process: "
                f"{args.quix_python}), over the first {args.quix_records:,} records")
    if "faust" in args.impls:
        from importlib.metadata import version
        say(f"  peer       faust-streaming {version('faust-streaming')} (Kafka listener, "
            f"aiokafka {version('aiokafka')}), over the first {args.faust_records:,} records")
    say(f"  input      {args.records:,} records of 100 bytes, {args.keys:,} keys, "
        f"{PARTITIONS} partitions; each figure the best of {args.repeat} run(s)")
    report.say_load(info)
    res = Results()
    server = launcher.ServerProcess(os.path.join(work, "data"), workers=args.workers)
    started = time.perf_counter()
    runs: dict[tuple, list[float]] = {}
    failed: dict[tuple, str] = {}
    try:
        server.start()
        create_topic(server, "input")
        t = time.perf_counter()
        fill(server, "input", args.records, args.keys)
        if "join" in args.kinds:
            create_topic(server, "table")
            fill_table(server, "table", args.keys)
        say(f"  filled the input and the table in {time.perf_counter() - t:.1f} s")
        for run in range(args.repeat):
            for kind in args.kinds:
                for guarantee in args.guarantees:
                    for impl in args.impls:
                        if impl in PEERS and (kind == "join" or (kind, guarantee, impl) in failed):
                            continue  # the peers have no stream-table join to compare with
                        tag = f"{kind}-{guarantee}-{impl}-{run}".replace("_", "-")
                        try:
                            rate = run_figure(server, work, args, kind, guarantee, impl, tag)
                        except Exception as exc:
                            if impl not in PEERS:
                                raise
                            # a peer that cannot run is a finding to print, not the
                            # end of kafkalite's figures; it gets one more try, as
                            # a peer failing once on a loaded machine (faust under
                            # exactly_once did in a CI run) says nothing of speed
                            report.warn(f"{tag} failed: {exc}")
                            try:
                                rate = run_figure(server, work, args, kind, guarantee, impl,
                                                  tag + "-again")
                            except Exception as again:
                                failed[(kind, guarantee, impl)] = repr(again)[:2000]
                                report.warn(f"{tag} failed again: {again}")
                                continue
                        runs.setdefault((kind, guarantee, impl), []).append(rate)
                        say(f"  {tag}: {rate:,.0f} records/s")
    except Exception:
        traceback.print_exc()
        print(server.output()[-3000:], file=sys.stderr)
        return 1
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started

    labels = {"stateless": "filter + map_values", "stateful": "count per key",
              "join": "stream-table join"}
    impl_labels = {"columnar": "kafkalite columnar", "per_record": "kafkalite per record",
                   "quix": "quixstreams", "faust": "faust"}
    targets = {("stateful", "columnar"): 20, ("stateful", "per_record"): 2}

    def note(key):
        rates = runs[key]
        return f"{len(rates)} run(s): {min(rates):,.0f}..{max(rates):,.0f} records/s"

    def best(key):
        # in thousands: report.fmt_value's "records/s" shows millions, and the
        # peers' few thousand would read 0.00; one decimal, or three
        # significant figures below 1 (faust's 44 records/s on a loaded
        # machine was rounded to 0.0, a figure the smoke test took for none)
        k = max(runs[key]) / 1000
        return round(k, max(1, 2 - math.floor(math.log10(k)))) if k > 0 else 0.0

    for n, kind in enumerate(args.kinds, 1):
        for guarantee in args.guarantees:
            base = f"{kind}_{guarantee}_quix" if (kind, guarantee, "quix") in runs else None
            for peer in PEERS:
                key = (kind, guarantee, peer)
                if key in failed:
                    say(f"  {impl_labels[peer]}, {labels[kind]}, {guarantee}: failed "
                        f"({failed[key][:300]})")
                if key not in runs:
                    continue
                res.add(f"{kind}_{guarantee}_{peer}", n,
                        f"{impl_labels[peer]}, {labels[kind]}, {guarantee}", best(key),
                        "k records/s", note=note(key), runs=runs[key])
            for impl in ("columnar", "per_record"):
                key = (kind, guarantee, impl)
                if key not in runs:
                    continue
                want = targets.get((kind, impl))
                meets = None
                if want and base:
                    meets = max(runs[key]) / max(runs[(kind, guarantee, "quix")]) >= want
                res.add(f"{kind}_{guarantee}_{impl}", n,
                        f"{impl_labels[impl]}, {labels[kind]}, {guarantee}", best(key),
                        "k records/s", baseline_key=base,
                        target_text=f">= {want}x quixstreams" if want else "", meets=meets,
                        note=note(key), runs=runs[key])
    say()
    for key in res.order:  # the ranges behind the best figures of the table
        say(f"  {res.figures[key]['label']}: {res.figures[key]['note']}")
    intro = (f"{args.records:,} records of 100 bytes, {args.keys:,} keys, {PARTITIONS} "
             f"partitions, one instance; quixstreams over the first {args.quix_records:,} "
             f"and faust over the first {args.faust_records:,} records of the same input; "
             f"each figure the best of {args.repeat} run(s), ranges in results.json")
    report.write_tables(out_dir, "kafkalite Streams", res, HEADERS, elapsed=elapsed, info=info,
                        settings=vars(args),
                        units={"k records/s": "thousands of input records per second"},
                        intro=intro)
    return 0


if __name__ == "__main__":
    sys.exit(main())
