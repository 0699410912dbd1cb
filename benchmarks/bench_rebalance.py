"""Rebalance time: KIP-848 (``group.protocol=consumer``) against the classic
protocol with cooperative-sticky, in the same run on the same server.

    python benchmarks/bench_rebalance.py [--members 1,10,50] [--partitions 100]
                                         [--client confluent|native]

For each member count N and each protocol: N consumers (threads of this
process: confluent-kafka's, or with ``--client native`` kafkalite's own
Consumer over the native protocol, its group.protocol=consumer against its
classic cooperative-sticky) subscribe at once to a topic of --partitions
partitions that a producer keeps writing to (one record per partition every
20 ms); then one more member joins. Measured:

- join: from the subscribes until every partition has one owner, the
  assignment is balanced (sizes differ by at most one) and every member has
  consumed a record from each partition it owns since it got it;
- +1: the same from the extra member's subscribe;
- pause: during the +1 rebalance, the longest time a partition that kept its
  owner went without a record reaching it (the baseline is the producer's
  20 ms and the consume loop).

Heartbeats every 100 ms for both (the classic member's heartbeat.interval.ms,
the server's group_consumer_heartbeat_interval_ms). Nothing here fails on
timing; figures print as a table.
"""
from __future__ import annotations

import os
import sys
import tempfile
import threading
import time

import confluent_kafka as ck

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from report import say  # noqa: E402

from kafkalite.client import AdminClient, NewTopic  # noqa: E402
from kafkalite.launcher import ServerProcess  # noqa: E402

HEARTBEAT_MS = 100


class Producing(threading.Thread):
    def __init__(self, bootstrap, topic, partitions):
        super().__init__(daemon=True)
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
        self.topic, self.partitions, self.stop = topic, partitions, threading.Event()

    def run(self):
        while not self.stop.is_set():
            for p in range(self.partitions):
                self.producer.produce(self.topic, b"x" * 100, partition=p)
            self.producer.poll(0)
            time.sleep(0.02)
        self.producer.flush(10)


class Member(threading.Thread):
    """A consumer whose owned partitions, when it got each, and the time of
    the last record of each are read by the main thread."""

    def __init__(self, bootstrap, group, topic, protocol, client="confluent"):
        super().__init__(daemon=True)
        conf = {"bootstrap.servers": bootstrap, "group.id": group,
                "auto.offset.reset": "latest", "enable.auto.commit": False}
        if protocol == "consumer":
            conf["group.protocol"] = "consumer"
        else:
            conf.update({"partition.assignment.strategy": "cooperative-sticky",
                         "heartbeat.interval.ms": HEARTBEAT_MS, "session.timeout.ms": 10_000})
        if client == "native":
            from kafkalite.client import Consumer
            self.consumer = Consumer(conf)
        else:
            self.consumer = ck.Consumer(conf)
        self.topic = topic
        self.owned: dict = {}          # partition -> when assigned
        self.last: dict = {}           # partition -> last record time
        self.max_gap: dict = {}        # partition -> longest gap while measuring
        self.measuring = False
        self.stop = threading.Event()

    def _assigned(self, c, parts):
        now = time.monotonic()
        for tp in parts:
            self.owned[tp.partition] = now

    def _revoked(self, c, parts):
        for tp in parts:
            self.owned.pop(tp.partition, None)

    def run(self):
        self.consumer.subscribe([self.topic], on_assign=self._assigned,
                                on_revoke=self._revoked, on_lost=self._revoked)
        while not self.stop.is_set():
            for m in self.consumer.consume(1000, 0.05):
                if m.error() is None:
                    now, p = time.monotonic(), m.partition()
                    if self.measuring and p in self.last:
                        self.max_gap[p] = max(self.max_gap.get(p, 0.0), now - self.last[p])
                    self.last[p] = now
        self.consumer.close()

    def consuming_all(self) -> bool:
        return all(self.last.get(p, 0) > t for p, t in list(self.owned.items()))


def settled(members, partitions) -> bool:
    owned = [set(m.owned) for m in members]
    every = [p for o in owned for p in o]
    sizes = [len(o) for o in owned]
    return (len(every) == partitions and len(set(every)) == partitions
            and max(sizes) - min(sizes) <= 1 and all(m.consuming_all() for m in members))


def wait_settled(members, partitions, timeout) -> float | None:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if settled(members, partitions):
            return time.monotonic() - start
        time.sleep(0.01)
    return None


def run_case(bootstrap, topic, partitions, n, protocol, timeout, client="confluent"):
    group = f"bench-{protocol}-{n}-{time.monotonic_ns()}"
    members = [Member(bootstrap, group, topic, protocol, client) for _ in range(n)]
    try:
        for m in members:
            m.start()
        joined = wait_settled(members, partitions, timeout)
        before = {p: i for i, m in enumerate(members) for p in m.owned}
        for m in members:
            m.max_gap.clear()
            m.measuring = True
        extra = Member(bootstrap, group, topic, protocol, client)
        members.append(extra)
        extra.start()
        plus_one = wait_settled(members, partitions, timeout)
        for m in members:
            m.measuring = False
        after = {p: i for i, m in enumerate(members) for p in m.owned}
        kept = [p for p, i in before.items() if after.get(p) == i]
        pause = max((members[before[p]].max_gap.get(p, 0.0) for p in kept), default=None)
        return joined, plus_one, pause, len(kept)
    finally:
        for m in members:
            m.stop.set()
        for m in members:
            m.join(60)


def main():
    ap = common.parser(__doc__)
    ap.add_argument("--members", default="1,10,50")
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--timeout", type=float, default=60.0)
    ap.add_argument("--client", choices=("confluent", "native"), default="confluent",
                    help="confluent-kafka's consumers (Kafka listener) or kafkalite's own "
                         "(native protocol)")
    args = common.parse(ap)
    counts = [int(x) for x in args.members.split(",")]
    prefix = "native " if args.client == "native" else ""
    names = {"consumer": prefix + "KIP-848 (uniform)",
             "classic": prefix + "classic cooperative-sticky"}
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, "server.toml")
        with open(conf, "w") as f:
            f.write(f"group_consumer_heartbeat_interval_ms = {HEARTBEAT_MS}\n")
        srv = ServerProcess(os.path.join(tmp, "data"), extra_args=["--config", conf]).start()
        try:
            admin = AdminClient({"bootstrap.servers": srv.bootstrap})
            for fut in admin.create_topics([NewTopic("rebalance", args.partitions)]).values():
                fut.result()
            admin.close()
            producing = Producing(srv.kafka_bootstrap, "rebalance", args.partitions)
            producing.start()
            now = {}

            def case(protocol: str) -> tuple:
                n = now["n"]
                joined, plus_one, pause, kept = run_case(
                    srv.bootstrap if args.client == "native" else srv.kafka_bootstrap,
                    "rebalance", args.partitions, n, protocol, args.timeout, args.client)
                say(f"{n:>3} members, {names[protocol]}: join {fmt(joined)} s, "
                    f"+1 {fmt(plus_one)} s, longest pause of a kept partition {fmt(pause)} s "
                    f"({kept} kept)")
                return joined, plus_one, pause, kept
            # a round a member count; the protocol going first swapped each round
            rounds = common.alternating(("consumer", "classic"), len(counts), case,
                                        each_round=lambda r: now.update(n=counts[r]))
            producing.stop.set()
            producing.join(30)
        finally:
            srv.stop()
    print()
    rows = []
    for r, n in enumerate(counts):
        ours, peer = rounds.values["consumer"][r], rounds.values["classic"][r]
        for i, what in enumerate(("join", "+1 member", "longest pause, kept partitions")):
            rows.append(common.Row(f"{n} members, {what}", ours[i], "s", peer[i],
                                   names["classic"], fmt=".2f"))
        rows.append(common.Row(f"{n} members, kept partitions", ours[3], "", peer[3],
                               names["classic"]))
    say(f"{names['consumer']} beside {names['classic']} (n/a: timed out)")
    common.say_table(rows)
    common.say_load(rounds)


def fmt(x) -> str:
    return "timeout" if x is None else f"{x:.2f}"

if __name__ == "__main__":
    main()
