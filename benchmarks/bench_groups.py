"""Consumer group benchmarks: rebalance time and group consume throughput.

    python benchmarks/bench_groups.py [--members 10] [--records 2000000] [--quick]

1. Rebalance time: a 100-partition topic with a producer process writing to
   every partition; N members (1..--members) consume it; one more member
   joins. Measured: time from the new member's subscribe() until every member
   consumes again, i.e. has its final assignment and has received a record
   since the join, for eager (range) and cooperative (cooperative-sticky)
   rebalancing. Members are threads of this process (heartbeat.interval.ms
   100), so the figure includes their contention for the GIL.
2. Consume throughput: --records 100-byte records over 8 partitions, read by
   a 4-member group (4 processes, consume_batch) and by one consumer
   (consume_batch), same data, same run: records/s.

Figures print as a table and go to benchmarks/results/groups/ (JSON,
Markdown, PNG). Nothing here fails on timing.
"""
from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import report  # noqa: E402
from report import machine_info, markdown_table, say  # noqa: E402

from kafkalite.client import AdminClient, Consumer, NewTopic, Producer  # noqa: E402
from kafkalite.launcher import ServerProcess  # noqa: E402

# spawn, not fork: ZeroMQ contexts and client threads do not survive a fork
mp = multiprocessing.get_context("spawn")
STRATEGIES = ("range", "cooperative-sticky")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "groups")


def _keep_producing(bootstrap, topic, partitions, stop):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    values = [b"x" * 100] * 20
    while not stop.is_set():
        for part in range(partitions):
            p.produce_batch(topic, values, partition=part)
        p.flush(10)
        time.sleep(0.05)
    p.close()


class Member(threading.Thread):
    def __init__(self, bootstrap, group, topic, strategy):
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                                  "auto.offset.reset": "latest", "enable.auto.commit": False,
                                  "partition.assignment.strategy": strategy,
                                  "heartbeat.interval.ms": 100, "session.timeout.ms": 10_000})
        self.topic = topic
        self.last_record = 0.0
        self.assigned_at = 0.0
        self.stop = threading.Event()
        self.gaps = []

    def run(self):
        c = self.consumer

        def changed(_, tps):
            self.assigned_at = time.monotonic()
        c.subscribe([self.topic], on_assign=changed, on_revoke=changed)
        while not self.stop.is_set():
            if c.consume(100, 0.05):
                now = time.monotonic()
                if self.last_record:
                    self.gaps.append((self.last_record, now))
                self.last_record = now
        c.close()


def rebalance_time(bootstrap, topic, n, strategy, partitions) -> dict:
    group = f"bench-{strategy}-{n}-{time.monotonic_ns()}"
    members = [Member(bootstrap, group, topic, strategy) for _ in range(n)]
    for m in members:
        m.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        owned = sum(len(m.consumer.assignment()) for m in members)
        if owned == partitions and all(m.last_record for m in members[:partitions]):
            break
        time.sleep(0.02)
    time.sleep(0.5)
    joined = time.monotonic()
    newcomer = Member(bootstrap, group, topic, strategy)
    newcomer.start()
    everyone = members + [newcomer]
    done = None
    while time.monotonic() < joined + 60:
        owned = sorted(len(m.consumer.assignment()) for m in everyone)
        if (sum(owned) == partitions and owned[-1] - owned[0] <= 1
                and all(m.last_record > max(joined, m.assigned_at) for m in everyone
                        if m.consumer.assignment())):
            done = time.monotonic()
            break
        time.sleep(0.005)
    pauses = []
    for m in members:
        inside = [b - a for a, b in list(m.gaps) if b >= joined and (done is None or a <= done)]
        pauses.append(max(inside, default=0.0))
    for m in everyone:
        m.stop.set()
    for m in everyone:
        m.join(30)
    return {"members_before": n, "strategy": strategy,
            "seconds": None if done is None else done - joined,
            "max_pause_s": max(pauses, default=0.0)}


def _group_reader(bootstrap, topic, group, total, out):
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, "heartbeat.interval.ms": 100,
                  "fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 4 << 20})
    c.subscribe([topic])
    got, first = 0, None
    deadline = time.monotonic() + 300
    while out["done"].value < total and time.monotonic() < deadline:
        n = c.consume_batch(0.2).num_rows
        if n:
            first = first or time.monotonic()
            got += n
            with out["done"].get_lock():
                out["done"].value += n
    out["q"].put((first, time.monotonic(), got))
    c.close()


def throughput(bootstrap, topic, total, members) -> dict:
    done = mp.Value("q", 0)
    q = mp.Queue()
    group = f"bench-tp-{members}-{time.monotonic_ns()}"
    procs = [mp.Process(target=_group_reader, args=(bootstrap, topic, group, total,
                                                    {"done": done, "q": q}))
             for _ in range(members)]
    for p in procs:
        p.start()
    results = [q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    start = min(r[0] for r in results if r[0]) if any(r[0] for r in results) else 0
    end = max(r[1] for r in results)
    got = sum(r[2] for r in results)
    return {"members": members, "records": got, "seconds": end - start,
            "records_per_s": got / (end - start) if end > start else 0}


def main(argv=None) -> int:
    ap = common.parser(__doc__)
    ap.add_argument("--members", type=int, default=10, help="largest group size before the join")
    ap.add_argument("--records", type=int, default=2_000_000, help="records for the throughput test")
    common.add_quick(ap, "small run (smoke test)")
    ap.add_argument("--out", default=RESULTS)
    args = common.parse(ap, argv, quick={"members": 2, "records": 50_000})
    os.makedirs(args.out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="kafkalite-bench-groups-")
    try:
        return measure(args, work)
    finally:
        # the server's data directory (about 20 MB); the results are in --out
        shutil.rmtree(work, ignore_errors=True)


def measure(args, work: str) -> int:
    """Run the benchmark with a server whose data lives under ``work``; write the reports."""
    srv = ServerProcess(os.path.join(work, "data")).start()
    rows, results = [], {"rebalance": [], "throughput": []}
    try:
        boot = srv.bootstrap
        with AdminClient({"bootstrap.servers": boot}) as admin:
            for name, parts in (("rebalance", 100), ("throughput", 8)):
                admin.create_topics([NewTopic(name, parts)])[name].result()
        stop = mp.Event()
        prod = mp.Process(target=_keep_producing, args=(boot, "rebalance", 100, stop))
        prod.start()
        now = {}

        def join(strategy: str) -> dict:
            n = now["n"]
            r = rebalance_time(boot, "rebalance", n, strategy, 100)
            took = "timeout" if r["seconds"] is None else f"{r['seconds']:.3f} s"
            say(f"  {n:2d} member(s) + 1 joining, {strategy:18s}: {took}  (longest "
                f"pause of a member {r['max_pause_s'] * 1000:.0f} ms)")
            return r
        try:
            # a round a group size; the assignor going first swapped each round
            rounds = common.alternating(STRATEGIES, args.members, join,
                                        each_round=lambda r: now.update(n=r + 1))
            results["rebalance"] = [r for pair in zip(*rounds.values.values()) for r in pair]
        finally:
            stop.set()
            prod.join(30)
        say(f"filling 'throughput' with {args.records:,} records of 100 bytes")
        p = Producer({"bootstrap.servers": boot, "linger.ms": 5})
        chunk = [b"y" * 100] * 5_000
        failed = []
        for i in range(0, args.records, len(chunk)):
            p.produce_batch("throughput", chunk[:min(len(chunk), args.records - i)],
                            partition=(i // len(chunk)) % 8,
                            on_delivery=lambda err, d: err and failed.append(err))
        p.flush(120)
        p.close()
        if failed:
            raise SystemExit(f"filling the topic failed: {failed[0]}")
        for members in (1, 4):
            r = throughput(boot, "throughput", args.records, members)
            results["throughput"].append(r)
            say(f"  {members} consumer(s): {r['records_per_s']:,.0f} records/s "
                f"({r['records']:,} in {r['seconds']:.2f} s)")
    finally:
        srv.stop()
        srv.kill()
    for r in results["rebalance"]:
        rows.append([f"{r['members_before']} + 1", r["strategy"],
                     "timeout" if r["seconds"] is None else f"{r['seconds'] * 1000:.0f} ms",
                     f"{r['max_pause_s'] * 1000:.0f} ms"])
    md = ["## Rebalance: a member joins a group on a 100-partition topic", "",
          markdown_table(rows, ["members", "assignor", "until all consume again",
                                "longest pause of an existing member"]), "",
          "## Consume throughput, 8 partitions, 100-byte records", "",
          markdown_table([[str(r["members"]), f"{r['records_per_s']:,.0f}", f"{r['seconds']:.2f} s"]
                          for r in results["throughput"]], ["consumers", "records/s", "time"])]
    doc = {"benchmark": "groups", "machine": machine_info(work), "results": results,
           "settings": vars(args)}
    common.write_json(os.path.join(args.out, "results.json"), doc, rounds=rounds)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    plt = report.pyplot()
    if plt is not None:
        fig, ax = plt.subplots(figsize=(7, 4))
        for strategy in ("range", "cooperative-sticky"):
            pts = [(r["members_before"] + 1, r["seconds"]) for r in results["rebalance"]
                   if r["strategy"] == strategy and r["seconds"] is not None]
            ax.plot([x for x, _ in pts], [y * 1000 for _, y in pts], marker="o",
                    label="eager (range)" if strategy == "range" else strategy)
        ax.set_xlabel("members after the join")
        ax.set_ylabel("join -> all consuming (ms)")
        ax.set_title("Rebalance time, 100 partitions")
        ax.legend()
        report.save_figure(plt, fig, os.path.join(args.out, "rebalance.png"))
    say("\nrebalance: a member joins a group on a 100-partition topic, until all consume "
        "again; consume throughput: 8 partitions, 100-byte records")
    ms = {"fmt": ",.0f", "unit": "ms"}
    table = []
    for eager, sticky in zip(*rounds.values.values()):
        n = f"{eager['members_before']} + 1"
        table += [common.Row(f"{n} members, cooperative-sticky", _ms(sticky["seconds"]),
                             peer=_ms(eager["seconds"]), peer_name="eager (range)", **ms),
                  common.Row(f"{n} members, cooperative-sticky: longest pause",
                             _ms(sticky["max_pause_s"]), peer=_ms(eager["max_pause_s"]),
                             peer_name="eager (range)", **ms)]
    one, four = results["throughput"]
    table.append(common.Row("consume, 4 consumers", four["records_per_s"], "records/s",
                            one["records_per_s"], "1 consumer"))
    common.say_table(table)
    common.say_load(rounds)
    say(f"results in {args.out}")
    return 0


def _ms(seconds):
    return None if seconds is None else seconds * 1000


if __name__ == "__main__":
    sys.exit(main())
