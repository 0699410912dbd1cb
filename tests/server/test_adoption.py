"""A supervisor killed -9 leaves its workers running: they serve their
Kafka clients on, and the next supervisor on the data directory adopts
them instead of starting new ones (issue 47: "after a single-host worker
or supervisor kill, every client writing again within 1 s";
processes.take_workers, worker.py ``_check_supervisor``).

Servers of the tests' own: they kill them."""
from __future__ import annotations

import threading
import time

import confluent_kafka as ck

from harness import ServerProcess, create, pid_alive, read_all, wait_until
from kafkalite.client import AdminClient, NewTopic


class Writer(threading.Thread):
    """An idempotent acks=all confluent-kafka producer writing numbered
    values to two partitions, noting when each was acknowledged."""

    def __init__(self, srv: ServerProcess, topic: str):
        super().__init__(daemon=True)
        self.producer = ck.Producer({"bootstrap.servers": srv.kafka_bootstrap,
                                     "enable.idempotence": True, "acks": "all",
                                     "linger.ms": 5, "message.timeout.ms": 60_000})
        self.topic = topic
        self.acked: list[tuple[float, int, int, bytes]] = []   # (when, partition, offset, value)
        self.errors: list = []
        self.stopped = threading.Event()
        self.unacknowledged = -1

    def _done(self, err, msg) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.acked.append((time.monotonic(), msg.partition(), msg.offset(), msg.value()))

    def run(self) -> None:
        i = 0
        while not self.stopped.is_set():
            try:
                self.producer.produce(self.topic, b"v%06d" % i, partition=i % 2,
                                      on_delivery=self._done)
                i += 1
            except BufferError:
                pass
            self.producer.poll(0.002)
        self.unacknowledged = self.producer.flush(60)

    def acked_after(self, moment: float) -> int:
        return sum(1 for when, *_ in self.acked if when > moment)


def test_a_killed_supervisors_workers_serve_on_and_the_next_one_adopts_them(tmp_path):
    """Two replicas of each partition, both in sync for an acknowledgement:
    a follower must go on fetching from its leader through the adoption
    (the first worker to say hello to the new supervisor was told of no
    other broker, and its followers stopped: acks=all stalled)."""
    srv = ServerProcess(str(tmp_path / "data"), workers=2).start()
    writer = None
    try:
        admin = AdminClient(srv.config())
        admin.create_topics([NewTopic("t", 2, 2, config={"min.insync.replicas": "2"})])[
            "t"].result(30)
        admin.close()
        writer = Writer(srv, "t")
        writer.start()
        wait_until(lambda: len(writer.acked) > 200, 20, "the writer under way")
        workers = srv.worker_pids()
        srv.kill()
        killed = time.monotonic()
        # no supervisor for 1.5 s and more: the workers go on acknowledging
        # (before, they exited within a second of their supervisor)
        wait_until(lambda: writer.acked_after(killed + 1.5) > 0 or writer.errors, 15,
                   "an acknowledgement 1.5 s after the supervisor's death")
        assert not writer.errors, writer.errors[:3]
        assert all(pid_alive(p) for p in workers)
        started = time.monotonic()
        srv.start()
        print(f"restarted server ready in {time.monotonic() - started:.2f} s; "
              f"acknowledged while no supervisor ran: {writer.acked_after(killed)}")
        assert srv.worker_pids() == workers, "the new supervisor adopts the running workers"
        assert "adopting it" in srv.output()
        # the adopted workers serve what needs the supervisor again: a new
        # client's Metadata (relayed) and a group's coordinator
        restarted = time.monotonic()
        wait_until(lambda: writer.acked_after(restarted) > 100 or writer.errors, 20,
                   "acknowledgements after the restart")
        writer.stopped.set()
        writer.join(90)
        assert not writer.errors, writer.errors[:3]
        assert writer.unacknowledged == 0, f"{writer.unacknowledged} records unacknowledged"
        got = read_all(srv, "t", 2, len(writer.acked), timeout=30)
        by_offset = {(m.partition(), m.offset()): m.value() for m in got}
        assert len(got) == len(writer.acked), "a record was lost or written twice"
        for _, partition, offset, value in writer.acked:
            assert by_offset[(partition, offset)] == value
        for partition in (0, 1):
            values = [v for (p, _), v in sorted(by_offset.items()) if p == partition]
            assert values == sorted(values), "records were reordered"
    finally:
        if writer is not None:
            writer.stopped.set()
        srv.stop()
        srv.kill()


def test_a_worker_running_another_configuration_is_replaced(tmp_path):
    """A worker adopts only the configuration it was started with: one
    restarted with another setting gets new workers."""
    data = str(tmp_path / "data")
    srv = ServerProcess(data, workers=2, log_path=str(tmp_path / "server.log")).start()
    try:
        create(srv, "t", 2)
        workers = srv.worker_pids()
        srv.kill()
        srv.extra_args += ["--replica-lag-time-max-ms", "20000"]
        srv.start()
        assert not set(srv.worker_pids()) & set(workers)
        assert not any(pid_alive(p) for p in workers)
        assert "runs another configuration; replacing it" in srv.output()
        assert len(read_all(srv, "t", 2, 0)) == 0
    finally:
        srv.stop()
        srv.kill()
