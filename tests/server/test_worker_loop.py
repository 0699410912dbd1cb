"""The partition worker's loop (kafkalite/server/node/worker.py) hears its
control channel while Kafka traffic keeps it busy: since issue 72 it polls
its ZeroMQ sockets only when their ZMQ_FD signals or they were used
(server/network/poller.py), and a control message the loop's own sends
(heartbeats, metrics, "done") hid from ZMQ_FD must still be taken in the
next pass, not when the supervisor next happens to write.

On the shared server (two workers), with our codec against each worker's
Kafka listener (tests/compat/compat_helpers.py's KafkaWire)."""
from __future__ import annotations

import struct
import sys
import threading
import time

sys.path.insert(0, __file__.rsplit("/tests/", 1)[0] + "/tests/compat")

from compat_helpers import KafkaWire  # noqa: E402
from harness import wait_until  # noqa: E402
from replicas import create, state  # noqa: E402

from kafkalite.client import AdminClient, NewTopic  # noqa: E402
from kafkalite.protocol import ApiKey, decode_response, encode_request  # noqa: E402
from kafkalite.record import RecordBatchBuilder  # noqa: E402

WORKERS = 2             # the shared server's
ROUNDS = 4
BURST = 16              # Produce requests a write, as a linger-free producer sends them
# A worker that lost a control message confirms nothing until the
# supervisor writes to it again: the change waits out its timeout
# (OPERATION_TIMEOUT_S) and fails with REQUEST_TIMED_OUT. A confirmation
# takes milliseconds; the bound leaves room for a loaded machine.
OPERATION_TIMEOUT_S = 20.0
CONFIRMED_WITHIN_S = 10.0


def produce_burst(topic: str, partition: int, first: int) -> bytes:
    b = RecordBatchBuilder()
    b.append(1_700_000_000_000, None, b"v" * 1024)
    body = {"transactional_id": None, "acks": 1, "timeout_ms": 30_000, "topic_data": [
        {"name": topic, "partition_data": [{"index": partition, "records": bytes(b.build())}]}]}
    frames = []
    for i in range(BURST):
        frame = encode_request(ApiKey.PRODUCE, 9, first + i, "worker-loop-test", body)
        frames.append(struct.pack(">i", len(frame)) + frame)
    return b"".join(frames)


class Load(threading.Thread):
    """Produce requests to one partition's leader, a burst at a time, until
    stopped; ``answered`` counts the answers without error."""

    def __init__(self, port: int, topic: str, partition: int):
        super().__init__(daemon=True)
        self.wire = KafkaWire(f"127.0.0.1:{port}", timeout=30)
        self.topic, self.partition = topic, partition
        self.answered = 0
        self.failure: BaseException | None = None
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.wire.sock.sendall(produce_burst(self.topic, self.partition, self.answered))
                for _ in range(BURST):
                    _, body = decode_response(ApiKey.PRODUCE, 9, self.wire.recv_frame())
                    assert body["responses"][0]["partition_responses"][0]["error_code"] == 0
                    self.answered += 1
        except BaseException as exc:        # reported by the test
            self.failure = exc
        finally:
            self.wire.close()


def confirmed_in(admin_call) -> float:
    """Seconds until every worker confirmed the change ``admin_call()``
    starts (its futures, by topic), which must succeed."""
    start = time.monotonic()
    for future in admin_call().values():
        future.result()
    return time.monotonic() - start


def test_topic_changes_reach_workers_kept_busy_by_produce_requests(server, topic_name):
    create(server, topic_name, partitions=WORKERS, rf=1)
    leaders = {p: leader for p, (leader, _, _) in state(server, topic_name).items()}
    ports = {b["node_id"]: b["port"] for b in server.refresh()["kafka_brokers"]}
    assert len(set(leaders.values())) == WORKERS        # a partition each: both busy
    loads = [Load(ports[leader], topic_name, p) for p, leader in leaders.items()]
    admin = AdminClient(server.config())
    try:
        for load in loads:
            load.start()
        for i in range(ROUNDS):
            seen = [load.answered for load in loads]
            name = f"{topic_name}-{i}"
            # an assign to each worker, confirmed by each ("done"), then an unassign
            took = confirmed_in(lambda: admin.create_topics(
                [NewTopic(name, WORKERS, 1)], operation_timeout=OPERATION_TIMEOUT_S))
            assert took < CONFIRMED_WITHIN_S, f"the workers confirmed a new topic in {took:.1f} s"
            took = confirmed_in(lambda: admin.delete_topics(
                [name], operation_timeout=OPERATION_TIMEOUT_S))
            assert took < CONFIRMED_WITHIN_S, f"the workers confirmed a deletion in {took:.1f} s"
            # the workers served Kafka traffic all along
            for load, before in zip(loads, seen):
                assert load.failure is None, load.failure
                wait_until(lambda: load.answered > before, CONFIRMED_WITHIN_S,
                           "a worker's Produce answers")
    finally:
        for load in loads:
            load.stop.set()
        for load in loads:
            load.join(30)
        admin.close()
    assert all(load.failure is None for load in loads), [load.failure for load in loads]
