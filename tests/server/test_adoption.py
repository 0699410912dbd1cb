"""A supervisor killed -9 leaves its workers running: they serve their
Kafka clients on, and the next supervisor on the data directory adopts
them instead of starting new ones (issue 47: "after a single-host worker
or supervisor kill, every client writing again within 1 s";
processes.take_workers, worker.py ``_check_supervisor``).

Servers of the tests' own: they kill them."""
from __future__ import annotations

import os
import random
import signal
import socket
import struct
import sys
import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic as KafkaNewTopic

from harness import ServerProcess, create, pid_alive, read_all, wait_until
from soak import setting
from kafkalite.client import AdminClient, NewTopic
from kafkalite.protocol import ApiKey, decode_response, encode_request
from kafkalite.server.node.loop_clock import FAULT_ENV, SLOW_START_FAULT


class Writer(threading.Thread):
    """An idempotent acks=all confluent-kafka producer writing numbered
    values to two partitions, noting when each was acknowledged."""

    def __init__(self, srv: ServerProcess, topic: str, pause_s: float = 0.0):
        super().__init__(daemon=True)
        self.producer = ck.Producer({"bootstrap.servers": srv.kafka_bootstrap,
                                     "enable.idempotence": True, "acks": "all",
                                     "linger.ms": 5, "message.timeout.ms": 60_000})
        self.topic = topic
        self.pause_s = pause_s          # between records: a steady trickle, not a flood
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
            if self.pause_s:
                self.stopped.wait(self.pause_s)
        self.unacknowledged = self.producer.flush(60)

    def acked_after(self, moment: float) -> int:
        return sum(1 for when, *_ in self.acked if when > moment)


@pytest.mark.processes
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


@pytest.mark.processes
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


def _read_frame(sock: socket.socket) -> bytes:
    """One size-prefixed Kafka frame; b"" if the connection closed first."""
    buf = b""
    while len(buf) < 4 or len(buf) < 4 + struct.unpack(">i", buf[:4])[0]:
        chunk = sock.recv(65536)
        if not chunk:
            return b""
        buf += chunk
    return buf[4:]


@pytest.mark.processes
def test_a_request_relayed_to_a_supervisor_that_dies_is_answered_by_the_next(tmp_path):
    """A request a worker relayed to its supervisor (here Metadata) and the
    supervisor died before answering is sent again to the next supervisor,
    and the client gets its answer on the same connection. The old worker
    closed such connections: librdkafka then took its transaction
    coordinator for down and waited out its 500 ms coordinator query timer
    (the transactional producer's stall after a supervisor kill, issue 47)."""
    srv = ServerProcess(str(tmp_path / "data"), workers=1).start()
    try:
        port = srv.info["kafka_brokers"][0]["port"]
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        # the supervisor stopped: the request waits in it, unanswered
        os.kill(srv.proc.pid, signal.SIGSTOP)
        frame = encode_request(ApiKey.METADATA, 12, 4242, "t", {"topics": None})
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        # (nothing to wait for: an answer cannot come from a stopped
        # supervisor; the worker relays the request as soon as it reads it)
        time.sleep(0.3)
        srv.kill()
        wait_until(lambda: "is gone; serving on" in srv.output(), 15,
                   "the worker to notice its supervisor's death")
        srv.start()
        answer = _read_frame(sock)
        assert answer, "the worker closed the connection instead of sending the request again"
        correlation_id, body = decode_response(ApiKey.METADATA, 12, answer)
        assert correlation_id == 4242
        # the broker list is whatever the next supervisor knows when it
        # answers: the adopted worker, or (before its hello) the supervisor
        # itself as the node to ask again
        assert body["brokers"], body
        sock.close()
    finally:
        srv.stop()
        srv.kill()


@pytest.mark.processes
def test_a_transactional_produce_verified_while_no_supervisor_runs_waits_for_the_next(tmp_path):
    """A transactional Produce needs the transaction coordinator, in the
    supervisor, to verify (KIP-890; Produce v12 adds the partition). One
    that arrives while there is no supervisor waits for the next (up to
    worker.AWAIT_COORDINATOR_S) and is written. The old worker answered it
    at once with a retriable error (NOT_ENOUGH_REPLICAS), over and over
    while the supervisor restarted, and librdkafka's growing backoff held
    its first retry up to 0.45 s past the restart (issue 47)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
    from compat_helpers import KafkaWire
    from kafkalite.record import RecordBatchBuilder
    srv = ServerProcess(str(tmp_path / "data"), workers=1).start()
    try:
        create(srv, "t", 1)
        coord = KafkaWire(srv.kafka_bootstrap)
        init = coord.request(ApiKey.INIT_PRODUCER_ID, 5, {
            "transactional_id": "tx", "transaction_timeout_ms": 60000, "producer_id": -1,
            "producer_epoch": -1})
        coord.close()
        assert init["error_code"] == 0
        builder = RecordBatchBuilder(producer_id=init["producer_id"],
                                     producer_epoch=init["producer_epoch"], base_sequence=0,
                                     transactional=True)
        builder.append(None, None, b"v")
        leader = KafkaWire(f"127.0.0.1:{srv.info['kafka_brokers'][0]['port']}", timeout=60)
        srv.kill()
        wait_until(lambda: "is gone; serving on" in srv.output(), 15,
                   "the worker to notice its supervisor's death")
        leader.send_frame(encode_request(ApiKey.PRODUCE, 12, 9, "t", {
            "transactional_id": "tx", "acks": -1, "timeout_ms": 30000, "topic_data": [
                {"name": "t", "partition_data": [{"index": 0,
                                                   "records": bytes(builder.build())}]}]}))
        started = time.monotonic()
        srv.start()
        correlation_id, body = decode_response(ApiKey.PRODUCE, 12, leader.recv_frame())
        answered = body["responses"][0]["partition_responses"][0]
        print(f"next supervisor ready in {time.monotonic() - started:.2f} s; answer {answered}")
        assert correlation_id == 9 and answered["error_code"] == 0, answered
        leader.close()
    finally:
        srv.stop()
        srv.kill()


TXN_KILLS = int(setting("KAFKALITE_TXN_SUPERVISOR_KILLS"))


def writable_within_s(load: float) -> float | None:
    """Issue 68's target for the first transactional write after a
    supervisor kill, at this load (the 1-minute load average); None past
    the loads it names."""
    return 1.0 if load <= 4 else 3.0 if load <= 20 else None


class Transactions(threading.Thread):
    """A confluent-kafka transactional producer committing small
    transactions back to back, each with records on two partitions and a
    group's offsets (the group coordinator's part of a transaction), and
    noting when each commit returned."""

    def __init__(self, srv: ServerProcess, topic: str):
        super().__init__(daemon=True)
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
        from test_restarts import FAST_RECONNECTS
        self.producer = ck.Producer({"bootstrap.servers": srv.kafka_bootstrap,
                                     "transactional.id": f"{topic}-tx",
                                     "transaction.timeout.ms": 60_000,
                                     "socket.timeout.ms": 5000, **FAST_RECONNECTS})
        member = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap,
                              "group.id": f"{topic}-offsets"})
        self.group = member.consumer_group_metadata()
        member.close()
        self.topic = topic
        self.commits: list[float] = []
        self.committed: list[bytes] = []
        self.aborted: list[bytes] = []
        self.offset = -1            # the group's offset in the last committed transaction
        self.failure: Exception | None = None
        self.stopped = threading.Event()

    def run(self) -> None:
        try:
            self.producer.init_transactions(60)
            n = 0
            while not self.stopped.is_set():
                values = [b"tx-%d" % (n + i) for i in range(4)]
                n += len(values)
                self.producer.begin_transaction()
                for i, value in enumerate(values):
                    self.producer.produce(self.topic, value, partition=i % 2)
                self.producer.send_offsets_to_transaction(
                    [ck.TopicPartition(self.topic, 0, n)], self.group, 30)
                if self._commit(values):
                    self.offset = n
        except Exception as exc:        # noqa: BLE001 (the test reports it)
            self.failure = exc

    def _commit(self, values: list[bytes]) -> bool:
        """Commit (True), or abort what cannot be (False)."""
        while True:
            try:
                self.producer.commit_transaction(30)
                self.commits.append(time.monotonic())
                self.committed += values
                return True
            except ck.KafkaException as exc:
                if exc.args[0].fatal():
                    raise
                if exc.args[0].txn_requires_abort():
                    self.producer.abort_transaction(60)
                    self.aborted += values
                    return False
                # retriable: committed again

    def stall_around(self, killed: float, settled: float) -> float:
        """The longest time between two commits from the last one before
        ``killed`` to those up to ``settled``."""
        times = [max((t for t in self.commits if t <= killed), default=killed)]
        times += [t for t in self.commits if killed < t <= settled]
        return max(b - a for a, b in zip(times, times[1:]))


@pytest.mark.processes
@pytest.mark.slow
def test_a_transactional_producer_commits_again_soon_after_each_supervisor_kill(tmp_path):
    """Issue 68: after a supervisor kill, a transactional producer commits
    again within 1 s at load up to 4 and within 3 s up to 20 (the server
    started again at once, as systemd would). Its coordinators live in the
    supervisor: the stall is the next one's start, from exec to the loop's
    first turn (its steps are in the log: supervisor_start._Steps). It
    stalled 1.0-1.4 s at load 1-3, and 2.2-4.9 s at load 8-18. Every
    committed record is read once by read_committed, none of an aborted
    transaction, and the group's offsets are the last transaction's.
    ``KAFKALITE_TXN_SUPERVISOR_KILLS`` kills (3 by default)."""
    srv = ServerProcess(str(tmp_path / "data"), workers=2).start()
    tx = None
    try:
        admin = KafkaAdminClient({"bootstrap.servers": srv.kafka_bootstrap})
        admin.create_topics([KafkaNewTopic("t", 2, 1)])["t"].result(30)
        tx = Transactions(srv, "t")
        tx.start()
        wait_until(lambda: len(tx.commits) > 20 or tx.failure, 60, "transactions under way")
        rounds = []
        for _ in range(TXN_KILLS):
            time.sleep(0.5)         # commits before the kill
            load = os.getloadavg()[0]
            before = len(tx.commits)
            killed = time.monotonic()
            srv.kill()
            srv.start()
            wait_until(lambda: len(tx.commits) > before + 5 or tx.failure, 60,
                       "commits after the restart")
            assert tx.failure is None, tx.failure
            stall = tx.stall_around(killed, tx.commits[-1])
            rounds.append((stall, max(load, os.getloadavg()[0])))
        tx.stopped.set()
        tx.join(60)
        assert tx.failure is None, tx.failure
        print("transactional stall after each supervisor kill: " + ", ".join(
            f"{s:.2f} s at load {load:.1f}" for s, load in rounds))
        checked = [(s, load, writable_within_s(load)) for s, load in rounds
                   if writable_within_s(load) is not None]
        late = [f"{s:.2f} s at load {load:.1f} (target {target:g} s)"
                for s, load, target in checked if s > target]
        assert not late, f"commits stalled past the target after a supervisor kill: {late}"
        committed = read_all(srv, "t", 2, len(tx.committed), timeout=30,
                             **{"isolation.level": "read_committed"})
        values = [m.value() for m in committed]
        assert sorted(values) == sorted(tx.committed), "read_committed: not the committed records"
        member = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap, "group.id": "t-offsets"})
        offsets = member.committed([ck.TopicPartition("t", 0)], 30)
        member.close()
        assert offsets[0].offset == tx.offset, "the group's offsets are not the last commit's"
        if not checked:
            pytest.skip(f"load over 20 at every kill ({[round(l, 1) for _, l in rounds]}): "
                        f"issue 68 sets no target there")
    finally:
        if tx is not None:
            tx.stopped.set()
        srv.stop()
        srv.kill()


GROUP_KILLS = int(setting("KAFKALITE_GROUP_SUPERVISOR_KILLS"))
# what a member that lost its membership needs once the coordinator is back:
# its next heartbeat (librdkafka's heartbeat.interval.ms, 3 s) or JoinGroup,
# the JoinGroup and SyncGroup round, an OffsetFetch and the first fetch
REJOIN_S = 5.0
# each restart held this long (loop_clock's planted slow start), as at load
# 20 (10.5 s): past a 10 s session, within librdkafka's default 45 s
SLOW_START_S = 12.0


class Member(threading.Thread):
    """A confluent-kafka group member polling topic ``t``, noting when
    each record of each partition arrived; ``debug=cgrp`` lines into
    ``lines`` (librdkafka's own account of its membership, written beside
    the server's log at the end)."""

    def __init__(self, srv: ServerProcess, name: str, session_timeout_ms: int | None):
        super().__init__(daemon=True)
        self.name = name
        self.lines: list[str] = []
        sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
        from test_restarts import FAST_RECONNECTS
        session = {} if session_timeout_ms is None else {"session.timeout.ms": session_timeout_ms}
        self.consumer = ck.Consumer({
            "bootstrap.servers": srv.kafka_bootstrap, "group.id": "g", "client.id": name,
            "auto.offset.reset": "earliest", "isolation.level": "read_committed",
            "debug": "cgrp", "logger": self, **session, **FAST_RECONNECTS})
        self.consumer.subscribe(["t"])
        self.arrivals: dict[int, list[float]] = {}
        self.stopped = threading.Event()

    def log(self, level, fmt, *args) -> None:
        """librdkafka's log lines (confluent-kafka's ``logger`` calls it
        as it would call logging.Logger.log)."""
        self.lines.append(f"{time.monotonic():.3f} " + fmt % args)

    def run(self) -> None:
        while not self.stopped.is_set():
            for m in self.consumer.consume(100, 0.2):
                if m.error() is None:
                    self.arrivals.setdefault(m.partition(), []).append(time.monotonic())
        self.consumer.close()


def gaps_after(arrivals: list[float], kills: list[float], end: float) -> list[tuple]:
    """For each kill, a partition's longest time without a record between
    that kill and the next (``end`` after the last), as (start, end): a gap
    that spans several kills counts in each, as the group starved through
    them."""
    times = sorted(arrivals)
    stops = kills[1:] + [end]
    return [max(((a, b) for a, b in zip(times, times[1:]) if b > kill and a < stop),
                key=lambda gap: gap[1] - gap[0], default=(kill, stop))
            for kill, stop in zip(kills, stops)]


# librdkafka's own 45 s session outlasts these restarts, so that case passes
# on the code before the fix too (0.2 s gaps): a guard for the soak
# (KAFKALITE_GROUP_SUPERVISOR_KILLS set), not a minute of every default run
GROUP_SESSIONS = [pytest.param(10_000, id="session-10s")] + (
    [pytest.param(None, id="session-45s")]
    if os.environ.get("KAFKALITE_GROUP_SUPERVISOR_KILLS") else [])


@pytest.mark.processes
@pytest.mark.slow
@pytest.mark.parametrize("session_timeout_ms", GROUP_SESSIONS)
def test_a_consumer_group_reads_on_through_repeated_slow_supervisor_restarts(
        tmp_path, monkeypatch, session_timeout_ms):
    """Issue 68 item 4: group members keep their membership through
    coordinator restarts, so repeated restarts never starve a group. Two
    librdkafka read_committed members (session 10 s, or librdkafka's 45 s)
    read a steadily written topic while the supervisor, their group
    coordinator, is killed ``KAFKALITE_GROUP_SUPERVISOR_KILLS`` times (2 by
    default) 8-25 s apart and started again at once, each start held
    SLOW_START_S as a start at load 20 is. A partition that goes more than
    REJOIN_S without a record reads again within REJOIN_S of the restart
    (the next supervisor ready): a member that kept its membership never
    stops (it fetches from the workers, which serve on), one whose own
    session ran out meanwhile rejoins as soon as the coordinator answers.
    Before, that rejoin waited until the coordinator expired the member's
    old self, a whole session after the restart (10 s here), and each
    kill started that wait again (20-21 s lost per kill at load 20;
    nothing read for 244 s and 356 s in the issue's runs)."""
    seed = int(os.environ.get("KAFKALITE_SEED") or random.randrange(1 << 30))
    rng = random.Random(seed)
    # INFO: the group's rebalances and each start's steps, for a failure's reader
    srv = ServerProcess(str(tmp_path / "data"), workers=2,
                        extra_args=["--log-level", "INFO"]).start()
    writer, members = None, []
    try:
        admin = KafkaAdminClient({"bootstrap.servers": srv.kafka_bootstrap})
        admin.create_topics([KafkaNewTopic("t", 2, 1)])["t"].result(30)
        writer = Writer(srv, "t", pause_s=0.01)
        writer.start()
        members = [Member(srv, f"m{i}", session_timeout_ms) for i in range(2)]
        for m in members:
            m.start()

        def arrivals(partition: int) -> list[float]:
            return [t for m in members for t in m.arrivals.get(partition, ())]
        wait_until(lambda: all(arrivals(p) for p in (0, 1)), 60, "both partitions read")
        monkeypatch.setenv(FAULT_ENV, f"{SLOW_START_FAULT}{SLOW_START_S:g}")
        kills, restarts, loads = [], [], []
        for _ in range(GROUP_KILLS):
            time.sleep(rng.uniform(8, 25))     # the interval is the fault: no condition to await
            loads.append(os.getloadavg()[0])
            kills.append(time.monotonic())
            srv.kill()
            srv.start(timeout=120)
            restarts.append(time.monotonic() - kills[-1])
        time.sleep(rng.uniform(8, 25))
        settled = time.monotonic()
        wait_until(lambda: all(max(arrivals(p)) > settled for p in (0, 1)), 120,
                   "both partitions read again after the last kill")
        end = time.monotonic()
        # per kill, the longer of the two partitions' gaps
        gaps = [max(pair, key=lambda gap: gap[1] - gap[0]) for pair in zip(
            *(gaps_after(arrivals(p), kills, end) for p in (0, 1)))]
        rounds = [(b - a, b - kill - r, r, load)
                  for (a, b), kill, r, load in zip(gaps, kills, restarts, loads)]
        said = [f"{gap:.2f} s" + (f", over {resumed:.2f} s after the restart" if gap > REJOIN_S
                                  else "") + f" (restart {r:.2f} s, load {load:.1f})"
                for gap, resumed, r, load in rounds]
        print(f"seed {seed}, session {session_timeout_ms or 'default'} ms; longest gap in "
              f"reading after each supervisor kill: " + "; ".join(said))
        for m in members:
            (tmp_path / f"{m.name}.log").write_text("\n".join(m.lines))
        # a gap of REJOIN_S or less is no interruption, wherever it falls
        late = [line for line, (gap, resumed, *_) in zip(said, rounds)
                if gap > REJOIN_S and resumed > REJOIN_S]
        assert not late, f"the group read again only past {REJOIN_S:g} s after a restart: {late}"
        assert not writer.errors, writer.errors[:3]
    finally:
        if writer is not None:
            writer.stopped.set()
        for m in members:
            m.stopped.set()
        for m in members:
            m.join(30)
        srv.stop()
        srv.kill()
