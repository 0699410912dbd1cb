"""Replication on one host: replicated partitions across worker processes.

Real servers with three workers; faults are real signals: SIGKILL of a
leader's worker (the supervisor restarts it), SIGSTOP of a follower (alive
but silent, so it falls out of the ISR). Every run that claims no loss is
judged by the Jepsen-style checker (tests/jepsen.py), and the checker is
first shown to catch the loss an unclean election causes.

``KAFKALITE_REPLICATION_KILLS`` sets how many leader kills the long run
makes (tests/soak.py).
"""
import os
import random
import signal
import sys
import threading
import time
import urllib.request
import uuid

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import ServerProcess, run_cli, wait_until
from jepsen import History, ResentLog, check, kept_out_of_order
from replicas import Traffic, create, log_bounds, produce, read_log, segments, state, wait_for
from kafkalite import errors
from kafkalite.client import OFFSET_BEGINNING, AdminClient, Consumer, NewTopic, Producer, TopicPartition
from soak import setting

KILLS = setting("KAFKALITE_REPLICATION_KILLS")


@pytest.fixture
def cluster(tmp_path):
    servers = []

    def start(workers=3, lag_ms=1500, extra=(), data_dir=None):
        # Tests stop processes with SIGSTOP on purpose; a stopped worker is
        # fenced only where a test says so (its own --broker-session-timeout-ms)
        s = ServerProcess(data_dir or str(tmp_path / f"data{len(servers)}"), workers=workers,
                          extra_args=["--replica-lag-time-max-ms", str(lag_ms),
                                      "--broker-session-timeout-ms", "60000", *extra]).start()
        servers.append(s)
        return s
    yield start
    for s in servers:
        if getattr(s, "killed", False):
            continue                 # killed by the test; its data dir may serve another
        for pid in s.worker_pids():
            try:
                os.kill(pid, signal.SIGCONT)
            except OSError:
                pass
        s.stop()


def topics_cli(server, *args) -> str:
    out = run_cli("topics", *args, "--bootstrap-server", server.bootstrap)
    assert out.returncode == 0, out.stderr
    return out.stdout.decode()


def describe(server, topic, *flags) -> str:
    return topics_cli(server, "describe", topic, *flags)


# ---- the basics ----------------------------------------------------------------------------

def test_replicas_are_byte_identical_copies_and_metadata_shows_them(cluster):
    s = cluster()
    create(s, "copies", partitions=2, rf=3, **{"min.insync.replicas": "2"})
    st = state(s, "copies")
    for p, (leader, replicas, isr) in st.items():
        assert sorted(replicas) == [0, 1, 2] and isr == [0, 1, 2] and leader == replicas[0]
    assert {st[0][0], st[1][0]} == {st[0][1][0], st[1][1][0]}
    acked, failed = produce(s, "copies", [b"w-%d" % i for i in range(3000)],
                            **{"enable.idempotence": True})
    assert not failed and len(acked) == 3000
    # acks=all answered means every ISR member has the records; the copies
    # are the same bytes (followers append what the leader stored)
    for p in range(2):
        copies = wait_for(lambda: (lambda c: c if len(set(c)) == 1 and c[0] else None)(
            [segments(s.data_dir, b, "copies", p) for b in range(3)]), what="identical copies")
        assert len(copies[0]) > 1500 * 10           # 1,500 records of 11+ bytes each
    report = check(History(acked=acked), read_log(s, "copies", 2))
    assert report.ok, report


def _replica_fetched(server) -> dict:
    """{(broker, path): bytes} from the node's metrics."""
    text = urllib.request.urlopen(server.info["metrics"], timeout=5).read().decode()
    return {(int(s.labels["broker"]), s.labels["path"]): s.value
            for family in text_string_to_metric_families(text) for s in family.samples
            if s.name == "kafkalite_replica_fetched_bytes_total"}


@pytest.mark.parametrize("local_reads", [True, False], ids=["local", "network"])
def test_followers_on_the_leaders_host_read_its_files_unless_told_not_to(cluster, tmp_path,
                                                                        local_reads):
    # same bytes either way; the metric says which way they came
    config = tmp_path / f"local-{local_reads}.toml"
    config.write_text(f"replica_local_reads = {str(local_reads).lower()}\n")
    s = cluster(extra=["--config", str(config)])
    create(s, "ways", assignments=[[0, 1, 2]], **{"min.insync.replicas": "3"})
    acked, failed = produce(s, "ways", [b"w" * 200 + b"-%d" % i for i in range(5000)],
                            partition=0)
    assert not failed and len(acked) == 5000
    copies = wait_for(lambda: (lambda c: c if len(set(c)) == 1 else None)(
        [segments(s.data_dir, b, "ways", 0) for b in range(3)]), what="identical copies")
    way, other = ("local", "network") if local_reads else ("network", "local")
    fetched = wait_for(lambda: (lambda f: f if all(f.get((b, way), 0) >= len(copies[0])
                                                   for b in (1, 2)) else None)(
        _replica_fetched(s)), what="the followers' bytes in the metrics")
    assert fetched[(1, other)] == fetched[(2, other)] == 0
    report = check(History(acked=acked), read_log(s, "ways", 1))
    assert report.ok, report


@pytest.mark.parametrize("transport", ["shm", "tcp", "zmq"])
def test_acks_all_with_many_batches_in_flight_acknowledges_each_once_in_order(cluster,
                                                                              transport):
    """produce_batch keeps many acks=all batches in flight over two
    partitions whose high watermarks move at their followers' pace. Over a
    shared-memory ring, acknowledgements completed out of the ring's order
    were refused by it and lost: the producer waited for ever for acks of
    records that were in the log."""
    BATCHES = 400                  # of 1,000 records of 100 bytes: 40 MB

    def value(i, j):
        return b"%06d-%04d" % (i, j) + b"v" * 89
    s = cluster()
    create(s, "inflight", partitions=2, **{"min.insync.replicas": "2"})
    # a lost acknowledgement fails its batch after 20 s rather than block the test
    p = Producer(s.config(acks="all", **{"enable.idempotence": True,
                                         "kafkalite.transport": transport,
                                         "delivery.timeout.ms": 20_000}))
    acked, failed = [], []

    def done(err, report):
        (failed if err else acked).append(report)
    try:
        for i in range(BATCHES):
            p.produce_batch("inflight", [value(i, j) for j in range(1000)], partition=i % 2,
                            on_delivery=done)
        assert p.flush(60) == 0, "acknowledgements missing"
    finally:
        p.close()
    assert not failed and len(acked) == BATCHES
    log = read_log(s, "inflight", 2)
    for part in range(2):
        assert [v for _, v in log[part]] == [value(i, j) for i in range(part, BATCHES, 2)
                                             for j in range(1000)]


def test_create_topics_checks_replication_factor_and_assignments(cluster):
    s = cluster()
    admin = AdminClient(s.config())
    try:
        with pytest.raises(errors.InvalidReplicationFactorError, match="1 to 3"):
            admin.create_topics([NewTopic("rf4", 1, 4)])["rf4"].result()
        with pytest.raises(errors.InvalidReplicaAssignmentError, match="distinct"):
            admin.create_topics([NewTopic("dup", replica_assignment=[[1, 1]])])["dup"].result()
        with pytest.raises(errors.InvalidReplicaAssignmentError, match="do not exist"):
            admin.create_topics([NewTopic("nob", replica_assignment=[[0, 7]])])["nob"].result()
        admin.create_topics([NewTopic("manual", replica_assignment=[[2, 0], [1, 2]])])[
            "manual"].result()
    finally:
        admin.close()
    assert state(s, "manual") == {0: (2, [2, 0], [0, 2]), 1: (1, [1, 2], [1, 2])}


# ---- faults ----------------------------------------------------------------------------------

def test_a_silent_follower_leaves_the_isr_and_acks_all_needs_min_insync(cluster):
    s = cluster(lag_ms=1000)
    create(s, "minisr", assignments=[[0, 1]], **{"min.insync.replicas": "2"})
    acked, failed = produce(s, "minisr", [b"a-%d" % i for i in range(10)], partition=0)
    assert len(acked) == 10 and not failed
    follower = s.worker_pid(1)
    os.kill(follower, signal.SIGSTOP)
    try:
        wait_for(lambda: state(s, "minisr")[0][2] == [0], what="the ISR to shrink")
        under = describe(s, "minisr", "--under-replicated-partitions")
        # one line, the partition's; the offset, record and size columns follow the ISR
        assert under.count("\n") == 1 and under.startswith(
            "\tTopic: minisr\tPartition: 0\tLeader: 0\tReplicas: 0,1\tIsr: 0\t"), under
        acked, failed = produce(s, "minisr", [b"b-0"], partition=0,
                                **{"delivery.timeout.ms": 2000, "retries": 1})
        assert not acked and failed
        assert failed[0].code == errors.NotEnoughReplicasError.code, failed[0]
        acked, failed = produce(s, "minisr", [b"c-0"], partition=0, acks="1")
        assert len(acked) == 1 and not failed          # acks=1 does not need the ISR
    finally:
        os.kill(follower, signal.SIGCONT)
    wait_for(lambda: state(s, "minisr")[0][2] == [0, 1], what="the follower to rejoin")
    assert describe(s, "minisr", "--under-replicated-partitions") == ""
    assert "ReplicationFactor: 2\tConfigs: min.insync.replicas=2" in describe(s, "minisr")
    acked, failed = produce(s, "minisr", [b"d-%d" % i for i in range(10)], partition=0)
    assert len(acked) == 10 and not failed


def test_a_deposed_leader_truncates_its_uncommitted_tail_by_leader_epoch(cluster):
    # Followers silent (but still in the ISR: the lag limit is long), the
    # leader takes acks=1 writes nobody copied; it dies; a follower is
    # elected; the old leader comes back as a follower and must drop that
    # tail -- and no consumer ever saw it, since it was above the high
    # watermark.
    s = cluster(lag_ms=60_000)
    create(s, "diverge", assignments=[[0, 1, 2]])
    acked, _ = produce(s, "diverge", [b"c-%d" % i for i in range(100)], partition=0)
    assert len(acked) == 100
    seen = History()
    for offset, value in read_log(s, "diverge", 1)[0]:
        seen.read(0, offset, value)
    f1, f2 = s.worker_pid(1), s.worker_pid(2)
    os.kill(f1, signal.SIGSTOP)
    os.kill(f2, signal.SIGSTOP)
    try:
        # a fetch the followers sent before they stopped waits at the leader
        # for up to replica_fetch_wait_max_ms; answered with the tail, it
        # would hand them the tail (legitimately: it would then survive)
        time.sleep(1.0)
        tail, _ = produce(s, "diverge", [b"u-%d" % i for i in range(50)], partition=0, acks="1")
        assert len(tail) == 50
        for offset, value in read_log(s, "diverge", 1)[0]:   # below the high watermark only
            seen.read(0, offset, value)
        assert len(seen.reads) == 100
        old = s.worker_pid(0)
        os.kill(old, signal.SIGKILL)
        # the election (the ISR loses 0 in its step); Metadata names the new
        # leader once its process, stopped here, leads
        wait_for(lambda: 0 not in state(s, "diverge")[0][2], what="the election")
    finally:
        os.kill(f1, signal.SIGCONT)
        os.kill(f2, signal.SIGCONT)
    wait_for(lambda: state(s, "diverge")[0][0] in (1, 2), what="a new leader")
    s.wait_for_worker_restart(0, old)
    wait_for(lambda: state(s, "diverge")[0][2] == [0, 1, 2], what="the old leader to rejoin")
    acked2, failed = produce(s, "diverge", [b"n-%d" % i for i in range(20)], partition=0)
    assert len(acked2) == 20 and not failed
    final = read_log(s, "diverge", 1)
    values = [v for _, v in final[0]]
    assert not [v for v in values if v.startswith(b"u-")]      # the uncopied tail is gone
    report = check(History(acked=acked + acked2, reads=seen.reads), final)
    assert report.ok, report
    copies = wait_for(lambda: (lambda c: c if len(set(c)) == 1 else None)(
        [segments(s.data_dir, b, "diverge", 0) for b in range(3)]), what="identical copies")
    assert copies[0]
    assert "truncating" in s.output()


def test_metadata_names_an_elected_leader_only_once_it_leads(cluster):
    """Until the elected leader's process applies the election it answers
    NOT_LEADER_OR_FOLLOWER; Metadata names it only once it confirmed. A
    fresh-clone run of test_replication_clients lost librdkafka's first
    5,600 records of a partition, most likely that way (with the assign
    held back 0.3 s in the worker, the old code did it to two pipelined
    batches sent as Metadata named the leader): its retried first batch was
    refused by the leader Metadata named, a batch pipelined behind it
    arrived after the election was applied and was written (a leader with
    no state for a producer takes any first sequence, as Kafka's does), and
    librdkafka counted the refused batch delivered by the later one's
    success. Here the elected leader's process is stopped (SIGSTOP), so it
    cannot apply the election: Metadata must not name it meanwhile; resumed,
    it is named and takes a producer's pipelined first batches in order."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
    from compat_helpers import KafkaWire
    from kafkalite.protocol import ApiKey, decode_response, encode_request
    from kafkalite.record import RecordBatchBuilder

    s = cluster()
    create(s, "elected", assignments=[[0, 1, 2]], **{"min.insync.replicas": "2"})
    acked, failed = produce(s, "elected", [b"before-%d" % i for i in range(10)], partition=0)
    assert len(acked) == 10 and not failed
    wait_for(lambda: state(s, "elected")[0][2] == [0, 1, 2], what="a full ISR")
    boot = KafkaWire(s.kafka_bootstrap)

    def described() -> tuple[dict, dict]:
        """(partition 0 as librdkafka's Metadata sees it, brokers by id)."""
        md = boot.request(ApiKey.METADATA, 12, {
            "topics": [{"name": "elected", "topic_id": uuid.UUID(int=0)}],
            "allow_auto_topic_creation": False, "include_topic_authorized_operations": False})
        return md["topics"][0]["partitions"][0], {b["node_id"]: b for b in md["brokers"]}

    elected = s.worker_pid(1)       # the first live in-sync replica after 0 is elected
    os.kill(elected, signal.SIGSTOP)
    try:
        os.kill(s.worker_pid(0), signal.SIGKILL)
        # the controller drops 0 from the ISR in the step that elects 1
        wait_for(lambda: described()[0]["isr_nodes"] == [1, 2], what="the election")
        part = described()[0]
        assert (part["error_code"], part["leader_id"]) == (
            errors.LeaderNotAvailableError.code, -1), part
    finally:
        os.kill(elected, signal.SIGCONT)
    part, brokers = wait_for(lambda: (lambda d: d if d[0]["leader_id"] == 1 else None)(
        described()), what="Metadata to name the elected leader")
    assert part["error_code"] == 0, part
    init = boot.request(ApiKey.INIT_PRODUCER_ID, 4, {
        "transactional_id": None, "transaction_timeout_ms": 60000, "producer_id": -1,
        "producer_epoch": -1})
    boot.close()
    assert init["error_code"] == 0, init

    def batch(values, sequence) -> bytes:
        b = RecordBatchBuilder(producer_id=init["producer_id"],
                               producer_epoch=init["producer_epoch"], base_sequence=sequence)
        for v in values:
            b.append(1_700_000_000_000, None, v)
        return bytes(b.build())

    # the producer's first two batches, the second sent before the first is
    # answered, as librdkafka pipelines them
    leader = KafkaWire(f"{brokers[1]['host']}:{brokers[1]['port']}", timeout=30)
    try:
        for correlation, records in ((1, batch([b"a", b"b", b"c"], 0)), (2, batch([b"d"], 3))):
            leader.send_frame(encode_request(ApiKey.PRODUCE, 9, correlation, "t", {
                "acks": -1, "timeout_ms": 20000, "topic_data": [
                    {"name": "elected", "partition_data": [{"index": 0, "records": records}]}]}))
        answers = [decode_response(ApiKey.PRODUCE, 9, leader.recv_frame()) for _ in range(2)]
    finally:
        leader.close()
    assert [(c, body["responses"][0]["partition_responses"][0]["error_code"],
             body["responses"][0]["partition_responses"][0]["base_offset"])
            for c, body in answers] == [(1, 0, 10), (2, 0, 13)], answers
    assert [v for _, v in read_log(s, "elected", 1)[0]] == \
        [b"before-%d" % i for i in range(10)] + [b"a", b"b", b"c", b"d"]


def test_a_stopped_follower_catches_up_through_fetches_cut_mid_batch(cluster):
    # 12 MB of ~1 MB batches while the follower is stopped: its fetches of
    # 4 MB end inside a batch, which it must leave for the next fetch
    s = cluster(lag_ms=60_000)
    create(s, "catchup", assignments=[[0, 1]])
    follower = s.worker_pid(1)
    os.kill(follower, signal.SIGSTOP)
    try:
        p = Producer(s.config(acks="1"))
        for _ in range(12):
            p.produce_batch("catchup", [b"%07d" % i + b"c" * 993 for i in range(990)],
                            partition=0)
            p.flush(30)
        p.close()
    finally:
        os.kill(follower, signal.SIGCONT)
    copies = wait_for(lambda: (lambda c: c if len(set(c)) == 1 else None)(
        [segments(s.data_dir, b, "catchup", 0) for b in range(2)]), what="identical copies")
    assert len(copies[0]) > 11_800_000
    assert "truncated" not in s.output()


def test_reassignment_copies_the_data_before_the_old_replicas_go(cluster):
    s = cluster()
    create(s, "move", assignments=[[0, 1]], **{"min.insync.replicas": "2"})
    acked, _ = produce(s, "move", [b"m-%d" % i for i in range(2000)], partition=0)
    joining = s.worker_pid(2)
    os.kill(joining, signal.SIGSTOP)          # the new replica cannot catch up yet
    try:
        assert topics_cli(s, "reassign", "move", "--partition", "0", "--replicas", "2,1") == \
            "Reassigning move-0 to 2,1.\n"
        assert topics_cli(s, "reassignments") == \
            "Topic: move\tPartition: 0\tReplicas: 2,1,0\tAdding: 2\tRemoving: 0\n"
        more, failed = produce(s, "move", [b"n-%d" % i for i in range(500)], partition=0)
        assert len(more) == 500 and not failed         # the old replicas serve meanwhile
        acked += more
        assert state(s, "move")[0][0] == 0
    finally:
        os.kill(joining, signal.SIGCONT)
    wait_for(lambda: topics_cli(s, "reassignments") == "", what="the reassignment to finish")
    # Metadata names the new leader once its worker leads (a moment later)
    wait_for(lambda: state(s, "move") == {0: (2, [2, 1], [1, 2])},
             what=f"broker 2 leading move-0 alone with 1: {state(s, 'move')}")
    wait_for(lambda: not os.path.exists(os.path.join(s.data_dir, "broker-0", "move-0")),
             what="the old replica's log to go")
    copies = wait_for(lambda: (lambda c: c if len(set(c)) == 1 else None)(
        [segments(s.data_dir, b, "move", 0) for b in (1, 2)]), what="identical copies")
    assert copies[0]
    report = check(History(acked=acked), read_log(s, "move", 1))
    assert report.ok and report.acked == 2500, report


def test_a_reassignment_can_be_cancelled_and_a_single_replica_can_move(cluster):
    s = cluster()
    create(s, "cancel", assignments=[[0, 1]])
    produce(s, "cancel", [b"c-%d" % i for i in range(100)], partition=0)
    joining = s.worker_pid(2)
    os.kill(joining, signal.SIGSTOP)
    try:
        topics_cli(s, "reassign", "cancel", "--partition", "0", "--replicas", "0,2")
        assert topics_cli(s, "reassign", "cancel", "--partition", "0", "--cancel") == \
            "Cancelled the reassignment of cancel-0.\n"
    finally:
        os.kill(joining, signal.SIGCONT)
    assert state(s, "cancel") == {0: (0, [0, 1], [0, 1])}
    wait_for(lambda: not os.path.exists(os.path.join(s.data_dir, "broker-2", "cancel-0")),
             what="the cancelled replica's log to go")
    # a topic created with one replica keeps its log in the shared layout:
    # it may move to another worker, and gain replicas
    create(s, "single", partitions=1, rf=1)
    acked, _ = produce(s, "single", [b"s-%d" % i for i in range(100)], partition=0)
    leader = state(s, "single")[0][0]
    other = (leader + 1) % 3
    topics_cli(s, "reassign", "single", "--partition", "0", "--replicas", str(other))
    # the metadata names the new leader before its worker has taken the
    # partition (it answers NOT_LEADER_OR_FOLLOWER meanwhile)
    wait_for(lambda: state(s, "single")[0][0] == other and serving(s, "single", 1),
             what="the move")
    report = check(History(acked=acked), read_log(s, "single", 1))
    assert report.ok, report
    # gaining a replica (Kafka allows it; this answered INVALID_REPLICA_ASSIGNMENT):
    # the moved log stays in the shared layout, the new replica copies it
    # into broker-<id>/ and joins the ISR
    third = (other + 1) % 3
    topics_cli(s, "reassign", "single", "--partition", "0", "--replicas", f"{other},{third}")
    wait_for(lambda: state(s, "single")[0] == (other, [other, third], sorted([other, third])),
             what="the new replica in sync")
    more, _ = produce(s, "single", [b"t-%d" % i for i in range(100)], partition=0)
    assert len(more) == 100
    wait_for(lambda: segments(s.data_dir, third, "single", 0), what="the new replica's log")
    # and dropping the replica whose log is the shared one: the new one leads
    topics_cli(s, "reassign", "single", "--partition", "0", "--replicas", str(third))
    wait_for(lambda: state(s, "single")[0] == (third, [third], [third])
             and serving(s, "single", 1), what="the move to the new replica")
    wait_for(lambda: not os.path.exists(os.path.join(s.data_dir, "single-0")),
             what="the shared log of the dropped replica to go")
    report = check(History(acked=acked + more), read_log(s, "single", 1))
    assert report.ok and report.acked == 200, report


def serving(s, topic, partitions) -> bool:
    """Whether every partition's leader answers ListOffsets."""
    try:
        log_bounds(s, topic, partitions)
        return True
    except errors.KafkaError:
        return False


def _kill_and_rejoin(s, topic, broker):
    pid = s.worker_pid(broker)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: state(s, topic)[0][0] not in (broker, -1), what="a new leader")
    s.wait_for_worker_restart(broker, pid)
    wait_for(lambda: state(s, topic)[0][2] == [0, 1, 2], what="the old leader back in sync")


def test_elect_leaders_gives_leadership_back_to_the_preferred_replica(cluster):
    s = cluster(extra=["--no-auto-leader-rebalance"])
    create(s, "pref", assignments=[[0, 1, 2]])
    _kill_and_rejoin(s, "pref", 0)
    assert state(s, "pref")[0][0] in (1, 2)
    time.sleep(1.5)         # nothing may move it back within a while on its own
    assert state(s, "pref")[0][0] in (1, 2)
    assert topics_cli(s, "elect-leaders", "pref") == "Elected a leader for pref-0.\n"
    # Metadata names the new leader once its worker leads (a moment later)
    wait_for(lambda: state(s, "pref")[0][0] == 0, what="broker 0 leading pref-0")
    again = topics_cli(s, "elect-leaders", "pref", "--partition", "0")
    assert "ELECTION_NOT_NEEDED" in again, again
    acked, failed = produce(s, "pref", [b"p-%d" % i for i in range(20)], partition=0)
    assert len(acked) == 20 and not failed


def test_leaderships_go_back_to_preferred_replicas_automatically(cluster):
    s = cluster(extra=["--leader-imbalance-check-interval-seconds", "1"])
    create(s, "auto", assignments=[[0, 1, 2]])
    _kill_and_rejoin(s, "auto", 0)
    wait_for(lambda: state(s, "auto")[0][0] == 0, timeout=10, what="the preferred leader back")


def _run_with_leader_kills(s, topic, partitions, kills, pause_s=0.8, transport=None):
    """Write and read concurrently while killing the leader (every third
    time a follower) of a random partition ``kills`` times; returns the
    history, the final log and the failover times of the leader kills (kill
    -> acknowledgement of the first record of that partition produced after
    the kill)."""
    history = History()
    traffic = Traffic(s, topic, partitions, history, transport)
    watch = traffic.watch            # partition -> (killed at, first ack of a later record)
    failovers = []
    rng = random.Random(7)
    try:
        for k in range(kills):
            time.sleep(pause_s)          # traffic between the kills
            p = rng.randrange(partitions)
            leader, replicas, _ = state(s, topic)[p]
            if leader < 0:
                continue
            # every third kill takes a follower of the partition instead
            victim = leader if k % 3 != 2 else rng.choice([b for b in replicas if b != leader])
            pid = s.worker_pid(victim)
            watch[p] = (time.monotonic(), None)
            os.kill(pid, signal.SIGKILL)
            try:
                wait_for(lambda: watch[p][1] is not None, timeout=20,
                         what=f"an acknowledgement on partition {p} after the kill")
                if victim == leader:
                    failovers.append(watch[p][1] - watch[p][0])
                del watch[p]
            finally:
                s.wait_for_worker_restart(victim, pid)
    finally:
        traffic.stop()
    wait_for(lambda: all(isr == [0, 1, 2] for _, _, isr in state(s, topic).values()),
             what="every replica back in the ISR")
    return history, read_log(s, topic, partitions), failovers


def test_a_whole_node_killed_mid_write_keeps_every_acknowledged_record(cluster):
    # kill -9 of the supervisor and every worker at once while a producer
    # writes with acks=all and a consumer reads; the node restarted on the
    # same data directory must hold every acknowledged record, and nothing
    # a consumer saw may have gone
    s = cluster()
    create(s, "node", partitions=2, rf=3, **{"min.insync.replicas": "2"})
    history, stop = History(), threading.Event()
    producer = Producer(s.config(acks="all", **{"enable.idempotence": True, "linger.ms": 2,
                                                 "delivery.timeout.ms": 3000,
                                                 "request.timeout.ms": 2000}))
    consumer = Consumer(s.config(**{"request.timeout.ms": 2000}))
    consumer.assign([TopicPartition("node", p, OFFSET_BEGINNING) for p in range(2)])

    def write():
        seq = 0
        while not stop.is_set():
            value = b"n-%d" % seq
            try:
                producer.produce("node", value, partition=seq % 2, on_delivery=lambda err, msg,
                                 value=value: err is None and history.ack(
                                     msg.partition(), msg.offset(), value))
                seq += 1
            except BufferError:
                pass
            if seq % 50 == 0:
                producer.poll(0.005)

    def read():
        while not stop.is_set():
            try:
                for m in consumer.consume(5000, 0.2):
                    if m.error() is None:
                        history.read(m.partition(), m.offset(), m.value())
            except Exception:        # the node is gone: only what was read counts
                time.sleep(0.05)

    threads = [threading.Thread(target=write), threading.Thread(target=read)]
    for t in threads:
        t.start()
    # mid-write: acknowledged records and more in flight
    wait_until(lambda: len(history.acked) > 1500, 30, "1,500 acknowledgements before the kill")
    pids = s.worker_pids()
    os.kill(s.proc.pid, signal.SIGKILL)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    s.proc.wait()
    s.killed = True
    time.sleep(0.5)         # the clients run on against the dead node: errors, no acks
    stop.set()
    for t in threads:
        t.join(30)
    producer.flush(10)
    producer.close()
    consumer.close()
    s2 = cluster(data_dir=s.data_dir)
    wait_for(lambda: all(isr == [0, 1, 2] for _, _, isr in state(s2, "node").values()),
             what="every replica in sync after the restart")
    report = check(history, read_log(s2, "node", 2))
    assert report.acked > 1000 and report.ok, report


@pytest.mark.slow
@pytest.mark.parametrize("transport", [None, "shm"], ids=["tcp", "shm"])
def test_leader_and_follower_kills_lose_no_acknowledged_record(cluster, transport):
    # over a shared-memory ring too: its acks=all acknowledgements wait for
    # the high watermark in the worker, in the ring's order
    s = cluster()
    create(s, "jepsen", partitions=3, rf=3, **{"min.insync.replicas": "2"})
    history, final, failovers = _run_with_leader_kills(s, "jepsen", 3, KILLS, transport=transport)
    report = check(history, final)
    print(f"{KILLS} kills ({KILLS - KILLS // 3} of leaders): {report}; failover (kill -> ack "
          f"of the next record) "
          f"max {max(failovers):.2f} s, median {sorted(failovers)[len(failovers) // 2]:.2f} s")
    assert report.acked > 1000
    assert report.ok, report
    assert len(failovers) == KILLS - KILLS // 3


def test_a_hung_leader_loses_its_leadership_and_follows_when_it_resumes(cluster):
    # SIGSTOP: the leader's process is alive but silent (a hung loop, a
    # machine pause); it stops heartbeating, is fenced, and an in-sync
    # replica takes over; resumed, it follows the new leader
    s = cluster(extra=["--broker-session-timeout-ms", "1500"])
    create(s, "hung", partitions=1, rf=3, **{"min.insync.replicas": "2"})
    acked, _ = produce(s, "hung", [b"h-%d" % i for i in range(500)], partition=0)
    leader = state(s, "hung")[0][0]
    pid = s.worker_pid(leader)
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        wait_for(lambda: state(s, "hung")[0][0] not in (leader, -1), timeout=15,
                 what="a new leader")
        took = time.monotonic() - started
        more, failed = produce(s, "hung", [b"i-%d" % i for i in range(500)], partition=0,
                               **{"enable.idempotence": True})
        assert len(more) == 500 and not failed
    finally:
        os.kill(pid, signal.SIGCONT)
    assert 1.0 < took < 10, took
    wait_for(lambda: state(s, "hung")[0][2] == [0, 1, 2], what="the old leader back in sync")
    assert s.worker_pid(leader) == pid                    # the same process, not a restart
    report = check(History(acked=acked + more), read_log(s, "hung", 1))
    assert report.ok and report.acked == 1000, report
    assert "no heartbeat" in s.output() and "responsive again" in s.output()


def test_transactions_on_a_replicated_topic_survive_leader_kills(cluster):
    # committed transactions are exactly what read_committed shows, aborted
    # ones never, through kill -9 of the partitions' leaders between and
    # during transactions (markers and producer state are replicated too)
    s = cluster()
    create(s, "txn", partitions=2, rf=3, **{"min.insync.replicas": "2"})
    p = Producer(s.config(**{"transactional.id": "repl-txn", "transaction.timeout.ms": 30_000,
                             "delivery.timeout.ms": 60_000}))
    p.init_transactions(30)
    committed, aborted = [], []
    for t in range(12):
        values = [b"t%d-%d" % (t, i) for i in range(200)]
        while True:
            try:
                p.begin_transaction()
                for i, v in enumerate(values):
                    p.produce("txn", v, partition=i % 2)
                if t % 3 == 1:                       # kill a leader mid-transaction
                    leader = state(s, "txn")[t % 2][0]
                    pid = s.worker_pid(leader)
                    os.kill(pid, signal.SIGKILL)
                    s.wait_for_worker_restart(leader, pid)
                if t % 4 == 3:
                    p.abort_transaction(60)
                    aborted += values
                else:
                    p.commit_transaction(60)
                    committed += values
                break
            except errors.KafkaError as exc:
                if exc.fatal or not (exc.retriable or exc.txn_requires_abort):
                    raise
                p.abort_transaction(60)              # then the whole transaction again
    p.close()
    wait_for(lambda: all(isr == [0, 1, 2] for _, _, isr in state(s, "txn").values()),
             what="every replica in sync")
    c = Consumer(s.config(**{"isolation.level": "read_committed"}))
    c.assign([TopicPartition("txn", q, OFFSET_BEGINNING) for q in range(2)])
    seen, deadline = [], time.monotonic() + 30
    while len(seen) < len(committed) and time.monotonic() < deadline:
        seen += [m.value() for m in c.consume(5000, 0.5) if m.error() is None]
    seen += [m.value() for m in c.consume(5000, 1.0) if m.error() is None]
    c.close()
    assert sorted(seen) == sorted(committed), (len(seen), len(committed))
    assert not set(seen) & set(aborted)


def _unclean_run(s, topic, unclean: bool):
    """The follower falls out of the ISR, the leader alone acknowledges,
    then dies: an unclean election makes the out-of-sync follower leader."""
    create(s, topic, assignments=[[0, 1]],
           **{"unclean.leader.election.enable": "true" if unclean else "false",
              "min.insync.replicas": "1"})
    acked, _ = produce(s, topic, [b"a-%d" % i for i in range(50)], partition=0)
    follower = s.worker_pid(1)
    os.kill(follower, signal.SIGSTOP)
    try:
        wait_for(lambda: state(s, topic)[0][2] == [0], what="the ISR to shrink")
        more, _ = produce(s, topic, [b"b-%d" % i for i in range(50)], partition=0)
        acked += more
        leader = s.worker_pid(0)
        os.kill(leader, signal.SIGKILL)
        if unclean:
            # the election makes the out-of-sync follower the ISR; Metadata
            # names it leader once its process, stopped here, leads
            wait_for(lambda: state(s, topic)[0][2] == [1], what="the unclean election")
    finally:
        os.kill(follower, signal.SIGCONT)
    if unclean:
        wait_for(lambda: state(s, topic)[0][0] == 1, what="the unclean leader")
    s.wait_for_worker_restart(0, leader)
    wait_for(lambda: state(s, topic)[0][2] == [0, 1], what="both replicas in sync")
    return check(History(acked=acked), read_log(s, topic, 1))


def test_the_checker_catches_the_loss_of_an_unclean_election_and_a_clean_one_has_none(cluster):
    s = cluster(lag_ms=1000)
    planted = _unclean_run(s, "unclean", unclean=True)
    assert not planted.ok and len(planted.lost) == 50, planted   # the checker sees the loss
    clean = _unclean_run(s, "clean", unclean=False)
    assert clean.ok and clean.acked == 100, clean


def _write_plain(s, topic: str, partitions: int, acks: dict, stop: threading.Event,
                 resends: ResentLog):
    """A confluent-kafka producer without idempotence (acks=1, retries=0,
    librdkafka's default in-flight cap) writing ``o-<seq>`` round-robin over
    ``partitions`` until ``stop``, noting each acknowledgement in ``acks``
    (value -> (partition, offset)); returns it and its thread."""
    import confluent_kafka as ck
    p = ck.Producer({"bootstrap.servers": s.kafka_bootstrap, "acks": 1, "retries": 0,
                     "enable.idempotence": False, "linger.ms": 2, "socket.timeout.ms": 30000,
                     "debug": "msg", "log_level": 7, "logger": resends.logger("plain")})

    def write():
        seq = 0
        while not stop.is_set():
            def done(err, msg, v=b"o-%d" % seq):
                if err is None:
                    acks[v] = (msg.partition(), msg.offset())
            try:
                p.produce(topic, b"o-%d" % seq, partition=seq % partitions, on_delivery=done)
                seq += 1
            except BufferError:
                pass
            p.poll(0.005)
    t = threading.Thread(target=write)
    t.start()
    return p, t


def test_a_plain_producers_batches_a_deposed_leader_refused_land_after_later_ones(cluster):
    """Issue 68 item 6, planted: a producer without idempotence has
    requests in flight to a partition's leader (broker 0, stopped) when the
    leadership moves to broker 1 and a metadata refresh tells the client;
    it sends its next records to broker 1. Broker 0, resumed, applies the
    change first and refuses what waited NOT_LEADER_OR_FOLLOWER, as
    Kafka's broker would; librdkafka sends those batches again to broker
    1 without counting a retry (retries=0: "not persisted"), after the
    later ones. So acknowledged records end out of produce order; each is
    one librdkafka's log says it sent again, none moved or stored twice.
    (tests/server/test_cluster_partition_order.py holds a cut's writers to
    that, where it happens without help.)"""
    import confluent_kafka as ck
    s = cluster(workers=2)
    create(s, "moved", assignments=[[0, 1], [1, 0]])    # partition 1: a broker 1 to talk to
    tp = TopicPartition("moved", 0)
    wait_for(lambda: all(isr == [0, 1] for _, _, isr in state(s, "moved").values()),
             what="both replicas in sync")
    admin = AdminClient(s.config())
    assert admin.alter_partition_reassignments({tp: [1, 0]}).result() == {tp: None}
    wait_for(lambda: state(s, "moved")[0][:2] == (0, [1, 0]), what="broker 1 preferred")
    acks, stop, resends = {}, threading.Event(), ResentLog()
    p, writer = _write_plain(s, "moved", 2, acks, stop, resends)
    stopped = s.worker_pid(0)
    try:
        wait_for(lambda: len(acks) > 50, what="acknowledgements")
        os.kill(stopped, signal.SIGSTOP)
        elect = threading.Thread(target=lambda: admin.elect_leaders(0, [tp]).result())
        elect.start()
        wait_for(lambda: state(s, "moved")[0][0] == 1, what="broker 1 named leader")
        def on_0():
            return sum(1 for q, _ in list(acks.values()) if q == 0)
        before = on_0()
        # a metadata refresh the client makes anyway (another partition's
        # refusal, a connection coming up); here, asked until one reached
        # broker 1 and partition 0 was acknowledged there (broker 0 answers
        # nothing)
        deadline = time.monotonic() + 20      # before the requests to broker 0 time out
        while on_0() == before:
            assert time.monotonic() < deadline, "the client never wrote to broker 1"
            try:
                p.list_topics("moved", timeout=1)
            except ck.KafkaException:
                pass        # asked of the stopped broker
        os.kill(stopped, signal.SIGCONT)
        elect.join(60)
        try:
            wait_for(lambda: resends.resent, what="librdkafka's resends")
        except AssertionError:
            # the fault this test plants did not arise: on a loaded machine the
            # requests that waited at broker 0 can fail for good (timed out)
            # instead of being refused and sent again; nothing to check then
            # (seen in 2 of 4 runs beside the SQL tests, in none of 11 alone)
            pytest.skip("no batch was refused NOT_LEADER_OR_FOLLOWER and sent again "
                        "(the requests at the stopped broker failed otherwise)")
    finally:
        os.kill(stopped, signal.SIGCONT)
        stop.set()
        writer.join(30)
        p.flush(30)
    admin.close()
    final = read_log(s, "moved", 2)
    history = History(acked=[(q, o, v) for v, (q, o) in acks.items()])
    report = check(history, final)
    late = kept_out_of_order(final, set(acks))
    assert late and {q for q, _, _ in late} == {0}, (late[:5], resends.lines[:3])
    assert len(late) <= resends.resent.get(0, 0), (len(late), resends.resent)
    assert not report.moved and not report.duplicates, report
