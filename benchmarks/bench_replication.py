"""What replication costs, and how fast it recovers, on one host.

    python benchmarks/bench_replication.py            # about 2.5 minutes
    python benchmarks/bench_replication.py --quick    # what the smoke test runs

One server with three workers (three brokers); every figure beside its
peer or ceiling measured in the same run. The followers share the leader's
host, so they read fetched records from its segment files
(``replica_local_reads``); ``--network-fetch`` makes them fetch over the
network, as followers on other hosts do. On a VM with free page reporting
on (the header says), page-cache writes into memory the host took back
pay a host fault per page: the RF=3 side writes three times the bytes
and pays three times that.

1. produce throughput, 100-byte records, one partition, the native client's
   produce_batch (1,000 records a call, idempotent with acks=all) over
   ``--transport`` (the clients' default, the direct TCP link, unless told
   otherwise; ``shm`` is a shared-memory ring): replication factor 3 with
   acks=all and min.insync.replicas=2 against replication factor 1 with
   acks=1. Target: >= 0.5x. The same two through confluent-kafka's produce()
   over the Kafka listener, for reference.
   Each figure is the median of ``--rounds`` runs (the order alternating,
   the page cache synced before each).
2. end-to-end latency at ``--rate`` records/s of 1 KB (a paced native
   producer, acks as above; a consumer process stamps arrival), p50/p99:
   RF=3 acks=all against RF=1 acks=1.
3. failover: kill -9 of the leader's worker, to the first acknowledged
   acks=all produce on the new leader (a probe producer sending one record
   at a time), ``--kills`` times. Target: under 1 s.
4. catch-up: a follower stopped (SIGSTOP) while ``--catchup-mb`` MB are
   written, then let go: its copying rate until its log end reaches the
   leader's, against copying the same segment files with shutil in the
   same run (page cache to page cache).

Timing never fails anything: this prints figures and writes results.json /
results.md under benchmarks/results/.
"""
from __future__ import annotations

import argparse
import glob
import multiprocessing
import os
import shutil
import signal
import statistics
import sys
import threading
import time
import traceback

import common
import report
from report import Results, say

from kafkalite import launcher

VALUE = b"v" * 100
HEADERS = ["#", "Figure", "kafkalite", "Compared with", "Ratio", "Target", "Met"]


def admin_call(server, fn):
    from kafkalite.client import AdminClient
    admin = AdminClient({"bootstrap.servers": server.bootstrap})
    try:
        return fn(admin)
    finally:
        admin.close()


def create_topic(server, name: str, rf: int, assignments=None) -> None:
    from kafkalite.client import NewTopic
    configs = {"min.insync.replicas": "2"} if rf > 1 else {}
    new = (NewTopic(name, replica_assignment=assignments, config=configs) if assignments
           else NewTopic(name, 1, rf, config=configs))
    admin_call(server, lambda a: a.create_topics([new])[name].result())


def leader_of(server, topic: str) -> tuple[int, list]:
    md = admin_call(server, lambda a: a.list_topics(topic, timeout=10))
    p = md.topics[topic].partitions[0]
    return p.leader, sorted(p.isrs)


def wait_for(cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise RuntimeError("timed out")


# ---- 1. throughput -----------------------------------------------------------------------------

def native_throughput(server, topic: str, acks: str, seconds: float,
                      transport: str | None = None) -> float:
    from kafkalite.client import Producer
    conf = {"bootstrap.servers": server.bootstrap, "acks": acks,
            "enable.idempotence": acks == "all"}
    if transport:
        conf["kafkalite.transport"] = transport
    p = Producer(conf)
    values = [VALUE] * 1_000
    try:
        for _ in range(20):                       # warm up: links, rings, producer id
            p.produce_batch(topic, values, partition=0)
        assert p.flush(60) == 0
        sent, start = 0, time.monotonic()
        while time.monotonic() - start < seconds:
            p.produce_batch(topic, values, partition=0)
            sent += 1_000
        assert p.flush(120) == 0
        return sent / (time.monotonic() - start)
    finally:
        p.close()


def ck_throughput(server, topic: str, acks: str, seconds: float) -> float:
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": server.kafka_bootstrap, "acks": acks,
                     "enable.idempotence": acks == "all", "linger.ms": 5})
    sent, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        for _ in range(1_000):
            try:
                p.produce(topic, VALUE, partition=0)
            except BufferError:
                p.poll(0.01)
                continue
            sent += 1
        p.poll(0)
    assert p.flush(120) == 0
    return sent / (time.monotonic() - start)


def throughput_rounds(server, args, fig: dict) -> None:
    """Figure 1, each figure the median of ``--rounds`` runs
    (common.alternating_medians)."""
    for name, rf in (("rf1", 1), ("rf3", 3)):
        for client in ("tp", "ck"):
            create_topic(server, f"{client}-{name}", rf)

    def run(side):
        name, acks = side
        out = {}
        out[("native", name)] = native_throughput(server, f"tp-{name}", acks, args.seconds,
                                                  args.transport)
        out[("ck", name)] = ck_throughput(server, f"ck-{name}", acks, args.seconds)
        for client in ("native", "ck"):
            say(f"  {client} {name} acks={acks}: {out[(client, name)]:,.0f} rec/s")
        return out
    fig.update(common.alternating_medians(args.rounds, (("rf1", "1"), ("rf3", "all")), run))


# ---- 2. latency ----------------------------------------------------------------------------------

def _latency_consumer(bootstrap: str, topic: str, count: int, out) -> None:
    from kafkalite.client import OFFSET_END, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, OFFSET_END)])
    out.put("ready")
    lat, deadline = [], time.monotonic() + 120
    while len(lat) < count and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                lat.append(time.time_ns() - int.from_bytes(m.value()[:8], "big"))
    c.close()
    out.put(lat)


def latency(server, topic: str, acks: str, rate: int, seconds: float) -> list:
    """End-to-end latencies (ns) of ``rate`` records/s of 1 KB for ``seconds``."""
    from kafkalite.client import Producer
    count = int(rate * seconds)
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    consumer = ctx.Process(target=_latency_consumer, args=(server.bootstrap, topic, count, q))
    consumer.start()
    assert q.get(timeout=60) == "ready"
    time.sleep(0.5)
    p = Producer({"bootstrap.servers": server.bootstrap, "acks": acks, "linger.ms": 0,
                  "enable.idempotence": acks == "all"})
    pad = b"x" * (1024 - 8)
    start = time.monotonic()
    for i in range(count):
        due = start + i / rate
        while True:
            now = time.monotonic()
            if now >= due:
                break
            p.poll(min(due - now, 0.001))
        p.produce(topic, time.time_ns().to_bytes(8, "big") + pad, partition=0)
    p.flush(60)
    p.close()
    lat = q.get(timeout=180)
    consumer.join(30)
    return lat


# ---- 3. failover ---------------------------------------------------------------------------------

def failover(server, topic: str, kills: int) -> list:
    """Seconds from kill -9 of the leader to the first acknowledged produce
    sent after it, ``kills`` times."""
    from kafkalite.client import Producer
    p = Producer({"bootstrap.servers": server.bootstrap, "acks": "all",
                  "enable.idempotence": True, "retry.backoff.ms": 20})
    acks: list = []                       # (sent at, acked at)
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            sent = time.monotonic()
            done = []
            p.produce(topic, b"probe", partition=0, on_delivery=lambda e, m: done.append(e))
            p.flush(30)
            if done and done[0] is None:
                acks.append((sent, time.monotonic()))
            time.sleep(0.002)

    t = threading.Thread(target=probe)
    t.start()
    out = []
    try:
        for _ in range(kills):
            wait_for(lambda: leader_of(server, topic)[1] == [0, 1, 2])
            time.sleep(0.5)
            leader = leader_of(server, topic)[0]
            pid = server.worker_pid(leader)
            killed = time.monotonic()
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: any(s >= killed for s, _ in acks), 30)
            out.append(min(a for s, a in acks if s >= killed) - killed)
            server.wait_for_worker_restart(leader, pid)
    finally:
        stop.set()
        t.join(30)
        p.close()
    return out


# ---- 4. catch-up ---------------------------------------------------------------------------------

def log_bytes(data_dir: str, broker: int, topic: str) -> int:
    return sum(os.path.getsize(f) for f in glob.glob(
        os.path.join(data_dir, f"broker-{broker}", f"{topic}-0", "*.log")))


def catch_up(server, data_dir: str, topic: str, megabytes: int, work: str) -> tuple[float, float]:
    """(follower catch-up MB/s, shutil copy MB/s) for ``megabytes`` written
    while the follower was stopped."""
    from kafkalite.client import Producer
    follower = server.worker_pid(1)
    os.kill(follower, signal.SIGSTOP)
    try:
        p = Producer({"bootstrap.servers": server.bootstrap, "acks": "1"})
        values = [b"c" * 1000] * 1_000
        for _ in range(megabytes):
            p.produce_batch(topic, values, partition=0)
        assert p.flush(120) == 0
        p.close()
        target = log_bytes(data_dir, 0, topic)
        before = log_bytes(data_dir, 1, topic)
        started = time.monotonic()
    finally:
        os.kill(follower, signal.SIGCONT)
    wait_for(lambda: log_bytes(data_dir, 1, topic) >= target, 300)
    rate = (target - before) / (time.monotonic() - started) / 1e6
    copy_dir = os.path.join(work, "copy")
    os.makedirs(copy_dir, exist_ok=True)
    files = sorted(glob.glob(os.path.join(data_dir, "broker-0", f"{topic}-0", "*.log")))
    started = time.monotonic()
    for f in files:
        shutil.copyfile(f, os.path.join(copy_dir, os.path.basename(f)))
    copied = sum(os.path.getsize(f) for f in files)
    return rate, copied / (time.monotonic() - started) / 1e6


def parse_args(argv):
    p = common.parser(__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--seconds", type=float, default=6.0, help="seconds per throughput run")
    common.add_rounds(p, 3, help="throughput runs per figure (their median; the order alternates)")
    p.add_argument("--rate", type=int, default=10_000, help="records/s of the latency figure")
    p.add_argument("--latency-seconds", type=float, default=8.0)
    p.add_argument("--kills", type=int, default=5, help="leader kills timed for failover")
    p.add_argument("--catchup-mb", type=int, default=300, help="MB written while a follower waits")
    p.add_argument("--transport", choices=("tcp", "zmq", "shm"), default=None,
                   help="the native producer's link (kafkalite.transport); default: the "
                        "clients' default (tcp)")
    p.add_argument("--network-fetch", action="store_true",
                   help="followers fetch over the network although they share the leader's "
                        "host (replica_local_reads = false), to compare with the default")
    common.add_dirs(p)
    common.add_quick(p, "1 s figures, 1 s of latency, 1 kill, 20 MB of catch-up")
    args = common.parse(p, argv, quick={"seconds": 1.0, "rounds": 1, "latency_seconds": 1.0,
                                        "kills": 1, "catchup_mb": 20, "rate": 2_000})
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out_dir, work = report.make_dirs("replication", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    say("kafkalite replication benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    say("  server     3 workers (brokers); RF=3 topics with min.insync.replicas=2; followers "
        + ("fetch over the network (--network-fetch)" if args.network_fetch
           else "read the leader's files (replica_local_reads)"))
    say(f"  producer   native over {args.transport or 'tcp (the clients default)'}")
    report.say_load(info)
    res = Results()
    data_dir = os.path.join(work, "data")
    extra = []
    if args.network_fetch:
        config = os.path.join(work, "network-fetch.toml")
        with open(config, "w") as f:
            f.write("replica_local_reads = false\n")
        extra = ["--config", config]
    server = launcher.ServerProcess(data_dir, workers=3, extra_args=extra)
    started = time.perf_counter()
    fig: dict = {}
    try:
        server.start()
        throughput_rounds(server, args, fig)
        for name, rf, acks in (("rf1", 1, "1"), ("rf3", 3, "all")):
            create_topic(server, f"lat-{name}", rf)
            fig[("lat", name)] = latency(server, f"lat-{name}", acks, args.rate,
                                         args.latency_seconds)
        create_topic(server, "failover", 3)
        fig["failover"] = failover(server, "failover", args.kills)
        say(f"  failover: {', '.join(f'{x:.3f}' for x in fig['failover'])} s")
        create_topic(server, "catchup", 2, assignments=[[0, 1]])
        fig["catchup"] = catch_up(server, data_dir, "catchup", args.catchup_mb, work)
    except Exception:
        traceback.print_exc()
        print(server.output()[-3000:], file=sys.stderr)
        return 1
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started

    native_label = f"native produce_batch over {args.transport or 'tcp'}"
    for client, label in (("native", native_label), ("ck", "confluent-kafka produce()")):
        base = f"{client}_rf1_records_per_s"
        res.add(base, 1, f"{label}, RF=1, acks=1", fig[(client, "rf1")], "records/s")
        ratio = fig[(client, "rf3")] / fig[(client, "rf1")]
        res.add(f"{client}_rf3_records_per_s", 1, f"{label}, RF=3, acks=all",
                fig[(client, "rf3")], "records/s", baseline_key=base,
                **({"target_text": ">= 0.5x RF=1 acks=1", "meets": ratio >= 0.5}
                   if client == "native" else {}))
    for q, tag in ((0.5, "p50"), (0.99, "p99")):
        base = f"latency_rf1_{tag}_ms"
        res.add(base, 2, f"end to end {tag}, {args.rate:,}/s of 1 KB, RF=1 acks=1",
                common.percentile(fig[("lat", "rf1")], q) / 1e6, "ms")
        res.add(f"latency_rf3_{tag}_ms", 2, f"end to end {tag}, {args.rate:,}/s of 1 KB, "
                f"RF=3 acks=all", common.percentile(fig[("lat", "rf3")], q) / 1e6, "ms",
                baseline_key=base)
    fo = fig["failover"]
    res.add("failover_median_s", 3, f"failover median of {len(fo)} (kill -9 -> ack)",
            statistics.median(fo), "s", target_text="< 1 s", meets=statistics.median(fo) < 1.0)
    res.add("failover_max_s", 3, f"failover max of {len(fo)}", max(fo), "s",
            target_text="< 1 s", meets=max(fo) < 1.0)
    rate, copy = fig["catchup"]
    res.add("copy_mb_per_s", 4, f"shutil copy of the leader's {args.catchup_mb} MB", copy, "MB/s")
    res.add("catchup_mb_per_s", 4, "follower catch-up", rate, "MB/s", baseline_key="copy_mb_per_s")
    report.write_tables(out_dir, "kafkalite replication", res, HEADERS, elapsed=elapsed, info=info,
                        settings=vars(args),
                        units={"records/s": "records per second", "ms": "milliseconds",
                               "s": "seconds", "MB/s": "megabytes per second"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
