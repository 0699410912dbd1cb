"""Failover across the nodes of a cluster (``--cluster``), on one machine.

    python benchmarks/bench_cluster.py            # about 2 minutes
    python benchmarks/bench_cluster.py --quick    # what the smoke test runs

A throwaway PostgreSQL (tests/postgres.py) and three kafkalite nodes, one
worker each, each with its own data directory and ports: node 1 is the
controller, nodes 2 and 3 its broker nodes. A topic with three partitions,
RF=3, min.insync.replicas=2; a probe producer sends one acks=all record at
a time to the partition led by the node about to be killed. Two faults,
``--kills`` times each, alternating between nodes 2 and 3:

1. the node's process killed (kill -9): its worker sees its parent gone and
   leaves, telling the controller so;
2. the whole node killed at once (kill -9 of the node process and its
   worker, as a host that loses power): the controller notices only the
   missing heartbeats, after ``--session-timeout-ms``.

Figure: seconds from the kill to the first acknowledged produce sent after
it, against the target of 3 s across nodes and the broker session timeout
it rests on (Kafka's defaults take 6-18 s).

3. the controller node killed whole (kill -9 of it and its worker), not
   restarted until the figure is taken: seconds until a producer that
   bootstraps from the node that took the lease over (its server.json, as
   a client that knows every node's address would find it) has an acks=all
   record acknowledged on a partition the dead node led, against the
   controller lease (``--lease-ms``) the takeover waits for. The dead node
   is then started again (it joins as a broker node) before the next kill.

And what the coordinators' copy in PostgreSQL costs: synchronous offset
commits per second on the cluster's controller against a single node
without ``--cluster`` started in the same run.

5. what replication across the nodes costs, before any kill: produce
   throughput (100-byte records, one partition, the native client's
   produce_batch, 1,000 a call) to a topic of replication factor 3 across
   the three nodes, acks=all and min.insync.replicas=2, against one of
   replication factor 1 with acks=1 on the same cluster; the same two
   through confluent-kafka's produce() over the Kafka listener, for
   reference. Target: >= 0.5x (bench_replication.py's, within one node).
   Each is the median of ``--rounds`` runs (the order alternating, the page
   cache synced before each).

Timing never fails anything: this prints figures and writes results.json /
results.md under benchmarks/results/.
"""
from __future__ import annotations

import argparse
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

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from postgres import PostgresServer  # noqa: E402

from bench_replication import ck_throughput, native_throughput  # noqa: E402

from kafkalite import launcher  # noqa: E402

HEADERS = ["#", "Figure", "kafkalite", "Compared with", "Ratio", "Target", "Met"]


def admin(server):
    from kafkalite.client import AdminClient
    return AdminClient({"bootstrap.servers": server.bootstrap})


def leaders(server, topic) -> dict:
    a = admin(server)
    try:
        md = a.list_topics(topic, timeout=10)
        return {p: (m.leader, sorted(m.isrs)) for p, m in md.topics[topic].partitions.items()}
    finally:
        a.close()


def wait_for(cond, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.05)
    raise RuntimeError("timed out")


def alive(pid) -> bool:
    try:
        os.kill(pid, 0)
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (ProcessLookupError, OSError):
        return False


def failovers(nodes, node_of, kills: int, whole: bool) -> list:
    from kafkalite.client import Producer
    c = nodes[1]
    p = Producer({"bootstrap.servers": c.bootstrap, "acks": "all", "enable.idempotence": True,
                  "retry.backoff.ms": 20})
    target = {"partition": None}
    acks: list = []
    stop = threading.Event()

    def probe():
        while not stop.is_set():
            part = target["partition"]
            if part is None:
                time.sleep(0.01)
                continue
            sent, done = time.monotonic(), []
            p.produce("fo", b"probe", partition=part, on_delivery=lambda e, m: done.append(e))
            p.flush(30)
            if done and done[0] is None:
                acks.append((part, sent, time.monotonic()))
            time.sleep(0.002)

    t = threading.Thread(target=probe)
    t.start()
    out = []
    try:
        for k in range(kills):
            wait_for(lambda: all(len(isr) == 3 for _, isr in leaders(c, "fo").values()))
            victim, led = victim_and_partitions(c, node_of, prefer=2 + k % 2)
            target["partition"] = led[0]
            time.sleep(0.5)
            node = nodes[victim]
            workers = [w["pid"] for w in node.info["workers"]]
            killed = time.monotonic()
            os.kill(node.proc.pid, signal.SIGKILL)
            if whole:
                for pid in workers:
                    os.kill(pid, signal.SIGKILL)
            wait_for(lambda: any(s >= killed and q == led[0] for q, s, _ in acks), 60)
            out.append(min(a for q, s, a in acks if s >= killed and q == led[0]) - killed)
            target["partition"] = None
            node.proc.wait(10)
            wait_for(lambda: not any(alive(w) for w in workers), 15)
            node.start()
    finally:
        stop.set()
        t.join(30)
        p.close()
    return out


def controller_failovers(nodes, node_of, kills: int, dsn: str) -> list:
    """Seconds from the controller node's kill -9 to an acknowledged
    produce, through the node that took over, on a partition it led."""
    from kafkalite.client import Producer
    from kafkalite.server.controller import cluster_store
    out = []
    for _ in range(kills):
        ctl = cluster_store.read_controller(dsn)["node_id"]
        node = nodes[ctl]
        node.refresh()
        wait_for(lambda: all(len(isr) == 3 for _, isr in leaders(node, "fo").values()))
        led = [q for q, (leader, _) in leaders(node, "fo").items() if node_of[leader] == ctl]
        workers = [w["pid"] for w in node.info["workers"]]
        killed = time.monotonic()
        os.kill(node.proc.pid, signal.SIGKILL)
        for pid in workers:
            os.kill(pid, signal.SIGKILL)
        acked = None
        while acked is None and time.monotonic() - killed < 120:
            c = cluster_store.read_controller(dsn)
            other = nodes.get(c["node_id"]) if c and c["live"] and c["node_id"] != ctl else None
            if other is None or not c["endpoints"]:
                time.sleep(0.02)
                continue
            try:
                info = other.refresh()
            except (OSError, ValueError):
                time.sleep(0.02)
                continue
            if info.get("role") == "broker":
                time.sleep(0.02)
                continue
            p = Producer({"bootstrap.servers": info["bootstrap.servers"], "acks": "all",
                          "retry.backoff.ms": 20, "message.timeout.ms": 5000})
            done = []
            p.produce("fo", b"probe", partition=(led or [0])[0],
                      on_delivery=lambda e, m: done.append(e))
            p.flush(10)
            p.close()
            if done and done[0] is None:
                acked = time.monotonic()
        if acked is None:
            raise RuntimeError("no produce was acknowledged within 120 s of the kill")
        out.append(acked - killed)
        node.proc.wait(10)
        wait_for(lambda: not any(alive(w) for w in workers), 15)
        node.start()                                     # it joins as a broker node
    return out


def throughput(nodes, seconds: float, rounds: int = 1) -> dict:
    """Records/s to an RF=3 topic across the nodes (acks=all) and an RF=1
    one (acks=1), native and confluent-kafka, each on its own topic."""
    from kafkalite.client import NewTopic
    c = nodes[1]
    a = admin(c)
    try:
        for name, rf in (("rf3-native", 3), ("rf1-native", 1), ("rf3-ck", 3), ("rf1-ck", 1)):
            configs = {"min.insync.replicas": "2"} if rf == 3 else {}
            a.create_topics([NewTopic(name, 1, rf, config=configs)])[name].result()
    finally:
        a.close()
    wait_for(lambda: len(leaders(c, "rf3-native")[0][1]) == 3
             and len(leaders(c, "rf3-ck")[0][1]) == 3)
    def run(rf):
        acks = "1" if rf == "rf1" else "all"
        return {f"{client}_{rf}": fn(c, f"{rf}-{client}", acks, seconds)
                for client, fn in (("native", native_throughput), ("ck", ck_throughput))}
    # each the median of ``rounds`` runs (common.alternating_medians)
    return common.alternating_medians(rounds, ("rf1", "rf3"), run)


def commit_rate(server, n: int) -> float:
    """Synchronous offset commits per second of one consumer."""
    from kafkalite.client import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": server.bootstrap, "group.id": "commit-rate",
                  "enable.auto.commit": False})
    try:
        c.commit(offsets=[TopicPartition("fo", 0, 0)], asynchronous=False)   # warm up
        start = time.perf_counter()
        for i in range(n):
            c.commit(offsets=[TopicPartition("fo", 0, i + 1)], asynchronous=False)
        return n / (time.perf_counter() - start)
    finally:
        c.close()


def victim_and_partitions(c, node_of, prefer: int) -> tuple[int, list]:
    """A broker node (2 or 3, ``prefer`` first) leading a partition, and
    what it leads; leaderships go back to the preferred replicas (one on
    each node) if kills left them all on node 1."""
    for attempt in range(2):
        now = leaders(c, "fo")
        for victim in (prefer, 5 - prefer):
            led = [q for q, (leader, _) in now.items() if node_of[leader] == victim]
            if led:
                return victim, led
        a = admin(c)
        try:
            a.elect_leaders(0, None).result()
        finally:
            a.close()
        time.sleep(1.0)
    raise RuntimeError("no broker node leads a partition")


def parse_args(argv):
    p = common.parser(__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--kills", type=int, default=4, help="kills timed per fault")
    p.add_argument("--session-timeout-ms", type=int, default=2000,
                   help="--broker-session-timeout-ms of the nodes")
    p.add_argument("--lease-ms", type=int, default=3000,
                   help="--controller-lease-ms of the nodes")
    p.add_argument("--commits", type=int, default=500, help="commits timed per server")
    p.add_argument("--seconds", type=float, default=5.0, help="seconds per throughput run")
    common.add_rounds(p, 3, help="throughput runs per figure 5 figure (their median; the order "
                                 "alternates)")
    common.add_dirs(p)
    common.add_quick(p, "1 kill per fault")
    args = common.parse(p, argv, quick={"kills": 1, "commits": 100, "seconds": 1.0, "rounds": 1})
    return args


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    out_dir, work = report.make_dirs("cluster", args.output_dir, args.work_dir)
    info = report.machine_info(work)
    say("kafkalite cluster failover benchmark")
    say(f"  CPU        {info['cpu_model']} ({info['logical_cores']} logical cores)")
    say(f"  cluster    3 nodes of 1 worker on this machine, PostgreSQL metadata, "
        f"session timeout {args.session_timeout_ms} ms")
    report.say_load(info)
    pg = PostgresServer().start()
    nodes: dict = {}
    started = time.perf_counter()
    fig: dict = {}
    try:
        for n in (1, 2, 3):
            nodes[n] = launcher.ServerProcess(
                os.path.join(work, f"node{n}"), workers=1,
                extra_args=["--cluster", pg.dsn, "--node-id", str(n),
                            "--broker-session-timeout-ms", str(args.session_timeout_ms),
                            "--controller-lease-ms", str(args.lease_ms),
                            "--replica-lag-time-max-ms", "2000"]).start()
        wait_for(lambda: len(admin_brokers(nodes[1])) == 3)
        from kafkalite.client import NewTopic
        a = admin(nodes[1])
        try:
            a.create_topics([NewTopic("fo", 3, 3, config={"min.insync.replicas": "2"})])["fo"] \
                .result()
        finally:
            a.close()
        import psycopg
        with psycopg.connect(pg.dsn) as conn:
            node_of = dict(conn.execute("SELECT broker_id, node_id FROM kafkalite_brokers")
                           .fetchall())
        fig["throughput"] = throughput(nodes, args.seconds, args.rounds)
        say("  produce records/s: " + ", ".join(f"{k} {v:,.0f}" for k, v in
                                               fig["throughput"].items()))
        fig["process"] = failovers(nodes, node_of, args.kills, whole=False)
        say(f"  node process killed: {', '.join(f'{x:.3f}' for x in fig['process'])} s")
        fig["whole"] = failovers(nodes, node_of, args.kills, whole=True)
        say(f"  whole node killed: {', '.join(f'{x:.3f}' for x in fig['whole'])} s")
        fig["commits_cluster"] = commit_rate(nodes[1], args.commits)
        single = launcher.ServerProcess(os.path.join(work, "single"), workers=1).start()
        try:
            sa = admin(single)
            try:
                sa.create_topics([NewTopic("fo", 3, 1)])["fo"].result()
            finally:
                sa.close()
            fig["commits_single"] = commit_rate(single, args.commits)
        finally:
            single.stop()
        say(f"  synchronous commits/s: cluster {fig['commits_cluster']:.0f}, "
            f"single node {fig['commits_single']:.0f}")
        fig["controller"] = controller_failovers(nodes, node_of, args.kills, pg.dsn)
        say(f"  controller node killed: {', '.join(f'{x:.3f}' for x in fig['controller'])} s")
    except Exception:
        traceback.print_exc()
        for s in nodes.values():
            print(s.output()[-2000:], file=sys.stderr)
        return 1
    finally:
        for s in nodes.values():
            if s.proc is not None and s.proc.poll() is None:
                s.stop()
        pg.stop()
        shutil.rmtree(work, ignore_errors=True)
    elapsed = time.perf_counter() - started
    res = Results()
    timeout_s = args.session_timeout_ms / 1000.0
    res.add("session_timeout_s", 1, "broker session timeout (the nodes' setting)", timeout_s, "s")
    for key, label in (("process", "node process killed"), ("whole", "whole node killed")):
        fo = fig[key]
        res.add(f"{key}_median_s", 1, f"failover median of {len(fo)}, {label}",
                statistics.median(fo), "s", baseline_key="session_timeout_s",
                target_text="< 3 s", meets=statistics.median(fo) < 3.0)
        res.add(f"{key}_max_s", 1, f"failover max of {len(fo)}, {label}", max(fo), "s",
                baseline_key="session_timeout_s", target_text="< 3 s", meets=max(fo) < 3.0)
    lease_s = args.lease_ms / 1000.0
    res.add("lease_s", 3, "controller lease (the nodes' setting)", lease_s, "s")
    fo = fig["controller"]
    res.add("controller_median_s", 3, f"controller failover median of {len(fo)}, "
            f"controller node killed", statistics.median(fo), "s", baseline_key="lease_s",
            target_text="< lease + 3 s", meets=statistics.median(fo) < lease_s + 3.0)
    res.add("controller_max_s", 3, f"controller failover max of {len(fo)}", max(fo), "s",
            baseline_key="lease_s", target_text="< lease + 3 s", meets=max(fo) < lease_s + 3.0)
    res.add("commits_single", 4, "synchronous commits/s, single node (no --cluster)",
            fig["commits_single"], "commits/s")
    res.add("commits_cluster", 4, "synchronous commits/s, cluster controller (copy in "
            "PostgreSQL)", fig["commits_cluster"], "commits/s", baseline_key="commits_single")
    tp = fig["throughput"]
    for client in ("native", "ck"):
        name = "native produce_batch" if client == "native" else "confluent-kafka produce()"
        res.add(f"{client}_rf1", 5, f"{name}, RF=1 acks=1 (one node)", tp[f"{client}_rf1"],
                "records/s")
        res.add(f"{client}_rf3", 5, f"{name}, RF=3 acks=all across the 3 nodes",
                tp[f"{client}_rf3"], "records/s", baseline_key=f"{client}_rf1",
                target_text=">= 0.5x" if client == "native" else "",
                meets=tp[f"{client}_rf3"] >= 0.5 * tp[f"{client}_rf1"]
                if client == "native" else None)
    report.write_tables(out_dir, "kafkalite cluster failover", res, HEADERS, elapsed=elapsed,
                        info=info, settings=vars(args), units={"s": "seconds"})
    return 0


def admin_brokers(server) -> list:
    a = admin(server)
    try:
        return list(a.list_topics(timeout=10).brokers)
    finally:
        a.close()


if __name__ == "__main__":
    sys.exit(main())
