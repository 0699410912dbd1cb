"""Produce order through a network cut of a cluster (issue 68 item 6).

Two writers send to the partitions one broker node leads: an idempotent
one (acks=all) and a plain one (acks=1, retries=0, librdkafka's default
in-flight cap). The node is cut off, its partitions move to the other
nodes and the writers follow them; the node is healed, catches up and
gets its leaderships back (a preferred-replica election, what the
controller's rebalance does on its own a while later). acks=1 may lose
what a deposed leader acknowledged (Kafka's semantics). What each
partition keeps must hold the idempotent writer's records, every one it
was acknowledged, in produce order. The plain writer has Kafka's weaker
promise: what it was acknowledged is stored at the offset it was told,
or lost with a leadership (never moved, never stored twice), but not
always in produce order. Its records may be out of order only where its
client explains it: a send it was told had failed (a timed-out request
that its host's TCP delivered late), or a batch a deposed leader refused
(NOT_LEADER_OR_FOLLOWER) that librdkafka sent again to the new leader
after later ones, whatever ``retries`` says (counted from its debug log:
jepsen.ResentLog). See the test's docstring. The checks are first shown
to catch a planted reorder in the same run.

``KAFKALITE_ORDER_ROUNDS`` sets the number of cut/heal rounds (1 by
default, 20 under tools/soak). Uses the cluster tests' harness
(tests/server/test_cluster_partitions.py: network namespaces, PostgreSQL;
skipped without them).
"""
import subprocess
import threading
import time
from collections import Counter

import pytest

from jepsen import History, ResentLog, check, kept_out_of_order
from replicas import state, wait_for
from soak import setting
from test_cluster_nodes import read_log_settled
import test_cluster_partitions
from test_cluster_partitions import PARTITIONS, cluster, create, full_isr  # noqa: F401 (fixture)
from kafkalite.client import AdminClient, TopicPartition

ROUNDS = setting("KAFKALITE_ORDER_ROUNDS")
pytestmark = test_cluster_partitions.pytestmark


PLAIN = {"acks": 1, "retries": 0, "enable.idempotence": False}
IDEMPOTENT = {"acks": "all", "enable.idempotence": True}


class OrderWriter:
    """confluent-kafka with ``settings`` (PLAIN: acks=1, retries=0 and
    librdkafka's default in-flight cap; or IDEMPOTENT), ``<name>-<seq>``
    round-robin over ``partitions``; every outcome noted with its time,
    and (PLAIN) the batches its client sent again (``resends``)."""

    def __init__(self, bootstrap: str, topic: str, partitions, history: History, name: str,
                 settings: dict):
        import confluent_kafka as ck
        self.topic, self.partitions, self.history, self.name = topic, partitions, history, name
        self.acks: dict[bytes, tuple] = {}        # value -> (partition, offset, time)
        self.failed: dict[bytes, tuple] = {}      # value -> (error, time)
        self.produced_at: dict[bytes, float] = {}
        self._stop = threading.Event()
        self.t0 = time.monotonic()
        self.resends = ResentLog()
        # a plain producer's resends are only in librdkafka's debug log
        logs = ({"debug": "msg", "log_level": 7, "logger": self.resends.logger(name)}
                if settings is PLAIN else {"log_level": 2})
        self.producer = ck.Producer({"bootstrap.servers": bootstrap, **settings,
                                     "linger.ms": 2, "socket.timeout.ms": 6000, **logs})
        self.thread = threading.Thread(target=self._write)
        self.thread.start()

    def _write(self) -> None:
        seq = 0
        while not self._stop.is_set():
            value = b"%s-%d" % (self.name.encode(), seq)

            def done(err, msg, value=value):
                now = time.monotonic()
                if err is None:
                    self.acks[value] = (msg.partition(), msg.offset(), now)
                    self.history.ack(msg.partition(), msg.offset(), value)
                else:
                    self.failed[value] = (str(err), now)
            try:
                self.producer.produce(self.topic, value,
                                      partition=self.partitions[seq % len(self.partitions)],
                                      on_delivery=done)
                self.produced_at[value] = time.monotonic()
                seq += 1
            except BufferError:
                pass
            self.producer.poll(0.005)

    def acked_on(self, partitions, since: float) -> bool:
        return {p for p, _, t in list(self.acks.values()) if t > since} >= set(partitions)

    def stop(self) -> None:
        self._stop.set()
        self.thread.join(60)
        self.producer.flush(120)


def planted_reorder(final: dict, acked: set) -> dict:
    """``final`` with two acknowledged records of one writer swapped (the
    longest partition's, from its middle on)."""
    p = max(final, key=lambda q: len(final[q]))
    recs = list(final[p])
    i = next(k for k in range(len(recs) // 2, len(recs)) if recs[k][1] in acked)
    writer = recs[i][1].rpartition(b"-")[0]
    j = next(k for k in range(i + 1, len(recs))
             if recs[k][1] in acked and recs[k][1].rpartition(b"-")[0] == writer)
    (o1, v1), (o2, v2) = recs[i], recs[j]
    recs[i], recs[j] = (o1, v2), (o2, v1)
    return {**final, p: recs}


def unexplained(report, final: dict, plain: list, idempotent: list) -> list:
    """What the writers were not promised, as (what, details): for the
    idempotent ones, an acknowledged record lost, moved or out of order, or
    a record stored twice; for the plain ones, an acknowledged record
    moved, a record stored twice, an unacknowledged one kept out of
    produce order that it was not told had failed, or in a partition more
    acknowledged ones kept out of produce order than its client sent
    again (an out-of-order acknowledged record is one the new leader
    appended after later ones: only a resent batch is)."""
    def writer(value: bytes) -> bytes:
        return value.rpartition(b"-")[0]
    ours = {w.name.encode() for w in idempotent}
    mine = {w.name.encode() for w in plain}
    out = [("idempotent", x) for x in report.lost + report.reordered + report.moved
           if writer(x[2]) in ours]
    out += [("plain, moved", x) for x in report.moved if writer(x[2]) in mine]
    out += [("stored twice", d) for d in report.duplicates if writer(d[0]) in ours | mine]
    for w in plain:
        acked = set(w.acks)
        out += [("plain, out of order and not told failed", b) for b in report.reordered
                if writer(b[2]) == w.name.encode() and b[2] not in acked
                and b[2] not in w.failed]
        kept = Counter(p for p, _, v in kept_out_of_order(final, acked)
                       if writer(v) == w.name.encode())
        out += [("plain, acknowledged out of order beyond what its client resent",
                 (w.name, p, n, w.resends.resent.get(p, 0)))
                for p, n in kept.items() if n > w.resends.resent.get(p, 0)]
    return out


def elect_preferred(s, topic) -> bool:
    admin = AdminClient(s.config())
    try:
        # each partition's error (leads already, not in sync yet) is ignored:
        # what counts is the state read below
        admin.elect_leaders(0, [TopicPartition(topic, p) for p in range(PARTITIONS)]).result()
    finally:
        admin.close()
    return all(leader == replicas[0] for leader, replicas, _ in state(s, topic).values())


def leader_epochs(s, topic, bad: list) -> dict:
    """(partition, offset) -> the leader epoch its batch was written at, for
    ``bad`` and the few records before each."""
    import confluent_kafka as ck
    want = {}
    for p, offset, _ in bad:
        want[p] = min(want.get(p, offset), offset - 3)
    c = ck.Consumer({"bootstrap.servers": s.kafka_bootstrap, "group.id": "epochs",
                     "enable.auto.commit": False, "log_level": 2})
    out = {}
    try:
        c.assign([ck.TopicPartition(topic, p, max(o, 0)) for p, o in want.items()])
        deadline = time.monotonic() + 30
        ends = {p: max(o for q, o, _ in bad if q == p) for p in want}
        while time.monotonic() < deadline and any((p, e) not in out for p, e in ends.items()):
            for m in c.consume(1000, 0.5):
                if m.error() is None:
                    out[(m.partition(), m.offset())] = m.leader_epoch()
    finally:
        c.close()
    return out


def describe_reorder(writer: OrderWriter, final: dict, bad: list, epochs: dict) -> str:
    """Where each out-of-order record came from: produced when, what the
    writer was told (ack at an offset, or an error) and when, and the
    leader epoch it was written at beside the record before it."""
    lines = []
    for p, offset, value in bad[:3]:
        ack = writer.acks.get(value)
        told = (f"acked at {ack[1]} {ack[2] - writer.t0:.2f} s" if ack else
                f"failed {writer.failed[value][0]!r} {writer.failed[value][1] - writer.t0:.2f} s"
                if value in writer.failed else "never told")
        lines.append(f"p{p}@{offset} {value!r} epoch {epochs.get((p, offset))} (the record "
                     f"before: epoch {epochs.get((p, offset - 1))}): produced "
                     f"{writer.produced_at.get(value, 0) - writer.t0:.2f} s, {told}")
    return "; ".join(lines)


def unsent_to(address: str) -> list[str]:
    """This namespace's TCP connections to ``address`` closed by their
    process with bytes still unacknowledged (FIN-WAIT-1): what the kernel
    will go on sending once the link is back."""
    out = subprocess.run(["ss", "-tnoH", "state", "fin-wait-1", "dst", address],
                         capture_output=True, text=True, check=False).stdout
    return [" ".join(line.split()) for line in out.splitlines() if line.strip()]


def cut_heal_and_return(c, r: int, where: dict, brokers: str, history: History) -> list:
    """One round: a plain and an idempotent writer on the partitions node
    2 or 3 leads; that node cut off until both were acknowledged by the new
    leaders, healed, back in every ISR and given its leaderships back;
    both writers acknowledged by it again. Returns the two writers."""
    ctl = c.nodes[1]
    victim = 2 + r % 2
    mine = [b for b, n in where.items() if n == victim]
    led = [p for p, (leader, _, _) in state(ctl, "order").items() if where.get(leader) == victim]
    assert led, "the victim leads no partition"
    w = OrderWriter(brokers, "order", led, history, f"o{r}", PLAIN)
    i = OrderWriter(brokers, "order", led, history, f"i{r}", IDEMPOTENT)
    try:
        wait_for(lambda: w.acked_on(led, 0) and i.acked_on(led, 0),
                 what="acknowledgements before the cut")
        c.net.cut(f"node{victim}")
        cut_at = time.monotonic()
        wait_for(lambda: all(leader >= 0 and leader not in mine
                             for leader, _, _ in state(ctl, "order").values()),
                 timeout=60, what=f"node {victim}'s partitions moved")
        wait_for(lambda: w.acked_on(led, cut_at) and i.acked_on(led, cut_at), timeout=60,
                 what="acknowledgements by the new leaders")
        unsent = unsent_to(c.net.namespaces[f"node{victim}"].address)
        c.net.heal(f"node{victim}")
        healed_at = time.monotonic()
        wait_for(lambda: full_isr(ctl, "order"), timeout=90, what="a full ISR again")
        wait_for(lambda: elect_preferred(ctl, "order"), timeout=60,
                 what="leaderships back on their preferred replicas")
        back = time.monotonic()
        print(f"round {r}: node {victim} (partitions {led}) cut {cut_at - w.t0:.2f} s into "
              f"the writes, healed {healed_at - cut_at:.2f} s later, leading again "
              f"{back - healed_at:.2f} s after that; at the heal, {len(unsent)} closed "
              f"connection(s) to it still sending: {unsent[:3]}", flush=True)
        wait_for(lambda: w.acked_on(led, back) and i.acked_on(led, back), timeout=60,
                 what="acknowledgements by the returned leaders")
    finally:
        w.stop()
        i.stop()
    return [w, i]


@pytest.mark.slow
def test_records_stay_in_the_order_each_writer_was_promised_through_a_cut_and_a_return(cluster):
    """Two writers on the partitions a broker node leads, while that node
    is cut off, healed, and given its leaderships back: an idempotent one
    (acks=all) and a plain one (acks=1, retries=0). Every partition keeps
    the idempotent writer's acknowledged records, once each, in produce
    order. The plain writer's acknowledged records are where it was told,
    or lost with a deposed leader's acknowledgements, and stored once; two
    things put its records out of produce order, as on Kafka's brokers (a
    Produce without a producer id carries nothing a broker could order or
    refuse it by):

    - requests on the wire to the cut-off leader are timed out by the
      client (it reports them failed, and moves on to the new leader), but
      its host's TCP goes on sending them (the socket closed, the bytes
      still unacknowledged) and, once the link is back, the node that
      leads again appends them after what the writer sent later;
    - at a leadership change, a metadata refresh (one partition's refusal
      is enough to ask for all of them) moves a partition to its new
      leader while requests are still in flight to the old one, which
      refuses them NOT_LEADER_OR_FOLLOWER once it knows; librdkafka puts
      those batches back in the queue and sends them to the new leader
      without counting a retry (retries=0 or not: "not persisted"), after
      the records it sent there meanwhile. Those are acknowledged, out of
      produce order (seen in a CI run: p1@2111-2113 acknowledged 0.5 s
      after they were produced, after later ones at lower offsets).

    Out-of-order records of the first kind must each be one the writer
    was told had failed; of the second, no more in a partition than
    librdkafka's log says it sent again there."""
    c = cluster
    ctl = c.nodes[1]
    create(ctl, "order")
    wait_for(lambda: full_isr(ctl, "order"), what="a full ISR")
    where = c.node_of()
    brokers = ",".join(c.kafka_brokers(ctl).values())
    history = History()
    writers = []
    for r in range(ROUNDS):
        writers += cut_heal_and_return(c, r, where, brokers, history)
    plain, idempotent = writers[0::2], writers[1::2]
    final = read_log_settled(lambda: ctl, "order", PARTITIONS)
    acked = {v for w in writers for v in w.acks}
    planted = planted_reorder(final, acked)
    assert unexplained(check(history, planted), planted, plain, idempotent), \
        "the checks missed a planted reorder"
    report = check(history, final)
    late = [b for b in report.reordered if b[2].rpartition(b"-")[0] in {w.name.encode()
                                                                         for w in plain}]
    epochs = leader_epochs(ctl, "order", late) if late else {}
    print(f"{len(late)} of the plain writers' records kept out of produce order: " + "; ".join(
        describe_reorder(w, final, [b for b in late if b[2].startswith(w.name.encode() + b"-")],
                         epochs) for w in plain), flush=True)
    print("batches the plain writers' clients sent again: " + "; ".join(
        f"{w.name} {sorted(w.resends.resent.items())} {dict(w.resends.errors)}" for w in plain),
        flush=True)
    wrong = unexplained(report, final, plain, idempotent)
    assert not wrong, (wrong[:10], report)
