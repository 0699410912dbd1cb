"""Helpers for tests of replicated topics: create one, see its leaders and
ISRs, produce and read it whole, look at a replica's segment files, and
``Traffic``: a writer and a reader running while a test makes faults.

Who may call: tests (tests/server/test_replication.py, tests/compat/, and
tests/client/ for a producer's log under faults).
"""
import glob
import os
import threading
import time

from kafkalite.client import (OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, Producer,
                              TopicPartition)
from kafkalite.errors import KafkaError


def create(server, name, partitions=1, rf=3, assignments=None, **configs):
    admin = AdminClient(server.config())
    try:
        if assignments:
            new = NewTopic(name, replica_assignment=assignments, config=configs)
        else:
            new = NewTopic(name, partitions, rf, config=configs)
        for f in admin.create_topics([new]).values():
            f.result()
    finally:
        admin.close()


def state(server, topic) -> dict:
    """partition -> (leader, replicas, isr)."""
    admin = AdminClient(server.config())
    try:
        md = admin.list_topics(topic, timeout=10)
        return {p: (m.leader, list(m.replicas), sorted(m.isrs))
                for p, m in md.topics[topic].partitions.items()}
    finally:
        admin.close()


def wait_for(cond, timeout=30.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def log_bounds(server, topic, partitions) -> dict:
    """partition -> (log start offset, high watermark)."""
    c = Consumer(server.config())
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
                for p in range(partitions)}
    finally:
        c.close()


def read_log(server, topic, partitions) -> dict:
    """partition -> [(offset, value)] of everything from the log start (records
    deleted by DeleteRecords or retention are gone) below the high watermark."""
    bounds = log_bounds(server, topic, partitions)
    c = Consumer(server.config())
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out = {p: [] for p in range(partitions)}
        # 120 s: generous for a loaded machine (a lookup sent to a leader killed
        # just before ends after at most connection.PEER_DOWN_GRACE_S)
        deadline = time.monotonic() + 120
        while any((out[p][-1][0] + 1 if out[p] else bounds[p][0]) < bounds[p][1] for p in out):
            assert time.monotonic() < deadline, "could not read the whole log"
            for m in c.consume(10_000, 0.5):
                if m.error() is None:
                    out[m.partition()].append((m.offset(), m.value()))
        return out
    finally:
        c.close()


def segments(data_dir, broker, topic, partition) -> bytes:
    files = sorted(glob.glob(os.path.join(data_dir, f"broker-{broker}", f"{topic}-{partition}",
                                          "*.log")))
    return b"".join(open(f, "rb").read() for f in files)


def describe_replica(data_dir, broker, topic, partition) -> str:
    """What a replica holds on disk, for a failure's report: each file's
    size; each segment's offsets (first batch, log end by a scan) and leader
    epochs, and the first damage the scan met; the partition's checkpoints
    and leader-epoch cache -- so a log that lacks records (a log start
    moved, a gap) shows apart from a read that skipped them."""
    from kafkalite._ext.batch_scan import batch_header, scan_log
    name = f"{topic}-{partition}"
    where = os.path.join(data_dir, f"broker-{broker}", name)
    if not os.path.isdir(where):
        return f"  broker {broker}: no {name}"
    lines = [f"  broker {broker}: " + ", ".join(
        f"{f} {os.path.getsize(os.path.join(where, f))}" for f in sorted(os.listdir(where)))]
    for f in sorted(glob.glob(os.path.join(where, "*.log"))):
        data = open(f, "rb").read()
        if not data:
            lines.append(f"    {os.path.basename(f)}: empty")
            continue
        scan = scan_log(data, min_offset=0)
        lines.append(f"    {os.path.basename(f)}: first batch at {batch_header(data)[0]}, "
                     f"scanned to {scan.next_offset} ({scan.valid_bytes} of {len(data)} bytes), "
                     f"epochs {scan.epoch_starts}, error {scan.error}")
    for f in ("partition.checkpoint", "leader-epoch-checkpoint"):
        if os.path.exists(os.path.join(where, f)):
            text = open(os.path.join(where, f)).read().split()
            lines.append(f"    {f}: {' '.join(text)}")
    shared = os.path.join(data_dir, f"broker-{broker}.partition-checkpoints")
    if os.path.exists(shared):
        lines += [f"    broker checkpoint: {line}" for line in open(shared).read().splitlines()
                  if line.split(" ", 1)[0] == name]
    return "\n".join(lines)


def produce(server, topic, values, *, acks="all", partition=None, **config):
    """Produce ``values``; returns [(partition, offset, value)] acknowledged
    and the errors of those that were not."""
    acked, failed = [], []
    p = Producer(server.config(acks=acks, **config))

    def done(err, msg):
        if err is None:
            acked.append((msg.partition(), msg.offset(), msg.value()))
        else:
            failed.append(err)
    for i, v in enumerate(values):
        p.produce(topic, v, partition=i % 2 if partition is None else partition,
                  on_delivery=done)
    p.flush(60)
    p.close()
    return acked, failed


class Traffic:
    """An acks=all idempotent producer writing ``w-<seq>`` round-robin over
    ``partitions`` and a consumer reading from the beginning, each on a
    thread, both noted in ``history`` (jepsen.History) until ``stop()``.
    ``watch[p] = (t, None)`` asks for the time of the first acknowledgement
    on partition ``p`` of a record produced after ``t`` (a failover's end):
    it is filled in as ``(t, acked_at)``."""

    def __init__(self, server, topic: str, partitions: int, history, transport=None):
        self.topic, self.partitions, self.history = topic, partitions, history
        self.watch: dict = {}
        self._stop = threading.Event()
        config = {"enable.idempotence": True, "delivery.timeout.ms": 60_000, "linger.ms": 2}
        if transport:                 # the producer's link (kafkalite.transport); default: tcp
            config["kafkalite.transport"] = transport
        self.producer = Producer(server.config(acks="all", **config))
        self._server = server
        self._threads = [threading.Thread(target=self._write), threading.Thread(target=self._read)]
        for t in self._threads:
            t.start()

    def _write(self) -> None:
        seq, watch, history = 0, self.watch, self.history
        while not self._stop.is_set():
            value = b"w-%d" % seq

            def done(err, msg, value=value, produced=time.monotonic()):
                if err is None:
                    history.ack(msg.partition(), msg.offset(), value)
                    w = watch.get(msg.partition())
                    if w is not None and w[1] is None and produced > w[0]:
                        watch[msg.partition()] = (w[0], time.monotonic())
            try:
                self.producer.produce(self.topic, value, partition=seq % self.partitions,
                                      on_delivery=done)
            except BufferError:           # a failover holds records back: wait for room
                self.producer.poll(0.05)
                continue
            seq += 1
            if seq % 50 == 0:
                self.producer.poll(0.005)

    def _read(self) -> None:
        c = Consumer(self._server.config())
        try:
            c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING)
                      for p in range(self.partitions)])
            while not self._stop.is_set():
                try:
                    batch = c.consume(5000, 0.2)
                except KafkaError:
                    # a request to a killed leader's old endpoint ends with
                    # PeerLostError; the reader samples reads, so it carries on
                    continue
                for m in batch:
                    if m.error() is None:
                        self.history.read(m.partition(), m.offset(), m.value())
        finally:
            c.close()

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)
        self.producer.flush(60)
        self.producer.close()
