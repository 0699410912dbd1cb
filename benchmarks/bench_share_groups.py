"""Share-group throughput: 4 share consumers on one partition, accepting every
record, against a classic group with one consumer on the same partition, in
the same run on the same server.

    python benchmarks/bench_share_groups.py [--records 200000] [--consumers 4] [--rounds 3]
                                            [--max-record-locks 2000]

Each round writes --records records (100 bytes) to two fresh one-partition
topics, then, in alternating order:

- share: --consumers ShareConsumers (kafkalite's native client, each in its
  own process) of one share group, joined before the clock starts, poll
  until every record was delivered, each accepted implicitly at the next
  poll, and end with ``commit_sync()``: the time until the last process
  has its acknowledgements answered;
- classic: one Consumer (kafkalite's native client, in its own process) of
  a classic group, ``subscribe``d, reads every record and commits at the
  end: the time until its commit is answered.

The share group's pace is bound by --max-record-locks: the members'
records in flight (acquired, not yet acknowledged) share that window, and
the share-partition start offset moves only as the oldest are accepted.

Reported: records/s per round and the median. Nothing here fails on
timing; figures print as a table, and results.json is written to --out.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from report import machine_info, say  # noqa: E402

from kafkalite.client import AdminClient, NewTopic, Producer  # noqa: E402
from kafkalite.launcher import ServerProcess  # noqa: E402

VALUE = b"x" * 100


def share_member(bootstrap, group, topic, total, delivered, ready, start, done):
    from kafkalite.client import ShareConsumer
    c = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "fetch.max.wait.ms": 100})
    c.subscribe([topic])
    while not c.assignment():
        c.consume(1, 0.05)           # joins; the topic is empty until the clock starts
    ready.release()
    start.wait()
    while delivered.value < total:
        got = c.consume(500, 0.1)
        if got:
            with delivered.get_lock():
                delivered.value += len(got)
    c.commit_sync()
    done.put(time.perf_counter())
    c.close()


def classic_member(bootstrap, group, topic, total, ready, start, done):
    from kafkalite.client import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    ready.release()
    start.wait()
    n = 0
    while n < total:
        n += len(c.consume(500, 0.1))
    c.commit(asynchronous=False)
    done.put(time.perf_counter())
    c.close()


def run(target, args, members: int, fill) -> float:
    """Seconds from the start signal until the last member is done."""
    ctx = mp.get_context("spawn")
    ready, start, done = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, ready, start, done), daemon=True)
             for _ in range(members)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    fill()
    t0 = time.perf_counter()
    start.set()
    ends = [done.get(timeout=600) for _ in procs]
    for p in procs:
        p.join(60)
    return max(ends) - t0


def produce(bootstrap, topic, n):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for _ in range(n):
        while True:
            try:
                p.produce(topic, VALUE, partition=0)
                break
            except BufferError:          # the local queue is full: let it drain
                p.poll(0.05)
    p.flush()


def main():
    ap = common.parser(__doc__)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--consumers", type=int, default=4)
    common.add_rounds(ap, 3)
    ap.add_argument("--max-record-locks", type=int, default=2000,
                    help="the server's group_share_partition_max_record_locks: records in "
                         "flight per share-partition (Kafka's default 2000)")
    ap.add_argument("--out", default=None, help="directory for results.json")
    args = common.parse(ap)
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, "server.toml")
        with open(conf, "w") as f:
            f.write('share_auto_offset_reset = "earliest"\n'
                    f"group_share_partition_max_record_locks = {args.max_record_locks}\n")
        srv = ServerProcess(os.path.join(tmp, "data"), extra_args=["--config", conf]).start()
        try:
            admin = AdminClient({"bootstrap.servers": srv.bootstrap})
            now = {}

            def each_round(r: int) -> None:
                now.update(r=r, topics={"share": f"share-{r}", "classic": f"classic-{r}"})
                for fut in admin.create_topics([NewTopic(t, 1)
                                                for t in now["topics"].values()]).values():
                    fut.result()

            def round_of(kind: str) -> float:
                r, topic = now["r"], now["topics"][kind]
                if kind == "share":
                    counter = mp.get_context("spawn").Value("q", 0)
                    # the share group joins an empty topic ("earliest" then
                    # starts at 0); the records are written before the clock
                    seconds = run(share_member,
                                  (srv.bootstrap, f"g-{r}", topic, args.records, counter),
                                  args.consumers,
                                  lambda: produce(srv.bootstrap, topic, args.records))
                else:
                    produce(srv.bootstrap, topic, args.records)
                    seconds = run(classic_member, (srv.bootstrap, f"c-{r}", topic,
                                                   args.records), 1, lambda: None)
                say(f"round {r + 1}, {kind}: {args.records} records in {seconds:.2f} s, "
                    f"{args.records / seconds:,.0f} records/s")
                return args.records / seconds
            rounds = common.alternating(("share", "classic"), args.rounds, round_of,
                                        each_round=each_round)
            admin.close()
        finally:
            srv.stop()
    share_rates, classic_rates = rounds.values["share"], rounds.values["classic"]
    share_median, classic_median = rounds.median("share"), rounds.median("classic")
    classic = "classic group, 1 consumer"
    print()
    say(f"share group of {args.consumers} consumers, records/s")
    common.say_table([common.Row(f"round {r + 1}", share, "records/s", other, classic)
                      for r, (share, other) in enumerate(zip(share_rates, classic_rates))]
                     + [common.Row("median", share_median, "records/s", classic_median,
                                   classic)])
    common.say_load(rounds)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        common.write_json(os.path.join(args.out, "results.json"), {
            "benchmark": "share_groups", "settings": vars(args),
            "machine": machine_info(args.out),
            "results": {"share_records_per_s": share_rates,
                        "classic_records_per_s": classic_rates,
                        "share_median": share_median,
                        "classic_median": classic_median}}, rounds=rounds)

if __name__ == "__main__":
    main()
