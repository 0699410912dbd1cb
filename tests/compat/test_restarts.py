"""Kafka clients across restarts of the server's processes.

A restarted process must look to Kafka's clients like one of Kafka's
brokers coming back: every API advertised from the first connection
(librdkafka keeps a connection's ApiVersions answer for its life, fails
Metadata as unsupported when it is missing, and makes transactional
producers fail fatally with _UNSUPPORTED_FEATURE), and what the process
cannot answer yet answered late rather than wrongly.

Each server here runs on fixed ports, as a deployment does, so that the
clients reconnect to the same addresses while the processes behind them
start again.
"""
from __future__ import annotations

import os
import signal
import socket
import threading
import time

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from compat_helpers import KafkaWire, create_topic

from harness import ServerProcess, free_port, pid_alive, wait_until
from kafkalite.protocol import SUPPORTED_VERSIONS, ApiKey

EVERY_API = set(SUPPORTED_VERSIONS) - {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}
# the clients reconnect as fast as they can: each reconnect is a chance to
# meet a process in the first moments of its start
FAST_RECONNECTS = {"reconnect.backoff.ms": 5, "reconnect.backoff.max.ms": 50}
TRANSACTIONAL = 8


def fixed_ports() -> list[str]:
    """Server flags with fixed Kafka ports: the supervisor's, and two
    consecutive ones for the workers."""
    kafka = free_port()
    while True:
        base = free_port()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", base + 1))
            break
        except OSError:
            continue
    return ["--kafka-port", str(kafka), "--kafka-worker-base-port", str(base)]


def first_answer(port: int, timeout: float = 30.0) -> tuple[KafkaWire, set]:
    """The first connection to ``port`` that answers ApiVersions, as soon as
    anything accepts one there, and the APIs it advertised (a connection
    reset before the answer, by a process going away, is retried, as a
    client would)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            wire = KafkaWire(f"127.0.0.1:{port}", timeout=30.0)
            answer = wire.request(ApiKey.API_VERSIONS, 3, {"client_software_name": "test",
                                                           "client_software_version": "1"})
            assert answer["error_code"] == 0
            return wire, {k["api_key"] for k in answer["api_keys"]}
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.002)


@pytest.fixture
def fixed_server(tmp_path):
    args = fixed_ports()
    srv = ServerProcess(str(tmp_path / "data"), extra_args=args)
    srv.ports = args
    yield srv
    if srv.proc is not None and srv.proc.poll() is None:
        srv.stop()
    srv.kill()


def test_a_starting_worker_advertises_every_api_and_answers_metadata(fixed_server):
    """The first connection to a worker, made while the server starts (before
    the supervisor has bound its relay and assigned the worker anything),
    is told every API, and its Metadata request is answered once the
    supervisor is there."""
    worker_port = int(fixed_server.ports[3])
    starter = threading.Thread(target=fixed_server.start)
    starter.start()
    try:
        wire, apis = first_answer(worker_port)
        assert apis == EVERY_API
        meta = wire.request(ApiKey.METADATA, 12, {"topics": None,
                                                 "allow_auto_topic_creation": False,
                                                 "include_topic_authorized_operations": False})
        assert meta["brokers"]
    finally:
        starter.join()


def test_a_restarted_worker_advertises_every_api_from_its_first_connection(fixed_server):
    fixed_server.start()
    worker_port = int(fixed_server.ports[3])
    for _ in range(3):
        old = fixed_server.worker_pid(0)
        os.kill(old, signal.SIGKILL)
        wait_until(lambda: not pid_alive(old), 10, "the killed worker to be gone")
        wire, apis = first_answer(worker_port)
        assert apis == EVERY_API
        coordinator = wire.request(ApiKey.FIND_COORDINATOR, 4, {
            "key_type": 0, "coordinator_keys": ["g"]})
        assert coordinator["coordinators"][0]["error_code"] in (0, 15)  # or not available yet
        fixed_server.wait_for_worker_restart(0, old)


def test_a_restarting_worker_stays_in_metadata_leading_nothing(fixed_server, topic_name):
    """While a killed worker is started again, Metadata moves its
    leaderships to the other in-sync replicas and still lists it among the
    brokers: an answer that dropped it made librdkafka decommission the
    broker's handle, which took the moved partitions back to no broker
    until the client's next leader query (0.5-1 s of a producer's stall
    after a worker kill)."""
    fixed_server.start()
    admin = AdminClient({"bootstrap.servers": fixed_server.kafka_bootstrap})
    admin.create_topics([NewTopic(topic_name, 2, 2)])[topic_name].result(30)
    wire = KafkaWire(fixed_server.kafka_bootstrap)

    def metadata() -> tuple[set, dict]:
        md = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic_name}]})
        return ({b["node_id"] for b in md["brokers"]},
                {p["partition_index"]: p["leader_id"] for p in md["topics"][0]["partitions"]})
    wait_until(lambda: set(metadata()[1].values()) == {0, 1}, 30, "a leader on each worker")
    old = fixed_server.worker_pid(0)
    os.kill(old, signal.SIGKILL)
    # the answers of the window: worker 0 dead (fenced: its leadership
    # moved) and not registered again (server.json names its new pid then)
    moved, deadline = [], time.monotonic() + 30
    while not moved or fixed_server.worker_pid(0) == old:
        brokers, leaders = metadata()
        if set(leaders.values()) == {1}:
            moved.append(brokers)
        assert time.monotonic() < deadline, "worker 0 restarted, its leadership moved"
    assert all(brokers == {0, 1} for brokers in moved), moved


def test_transactional_and_idempotent_producers_live_through_restarts(fixed_server, topic_name):
    """Transactional producers and an idempotent one write while a worker is
    killed -9 twice and then the whole server is stopped and started again on
    the same ports: none gets a fatal error, and every one commits more after
    each restart."""
    fixed_server.start()
    create_topic(fixed_server, topic_name, 2)
    stop = threading.Event()
    progress = {}                       # producer -> transactions committed (or records acked)
    failures = []

    def transactional(i):
        name = f"tx{i}"
        try:
            p = ck.Producer({"bootstrap.servers": fixed_server.kafka_bootstrap,
                             "transactional.id": f"{topic_name}-{i}",
                             "transaction.timeout.ms": 60000, "socket.timeout.ms": 5000,
                             **FAST_RECONNECTS})
            p.init_transactions(60)
            while not stop.is_set():
                p.begin_transaction()
                for j in range(5):
                    p.produce(topic_name, b"%d-%d" % (i, j), partition=j % 2)
                try:
                    p.commit_transaction(30)
                    progress[name] = progress.get(name, 0) + 1
                except ck.KafkaException as exc:
                    err = exc.args[0]
                    if err.fatal():
                        raise
                    if err.txn_requires_abort():
                        p.abort_transaction(30)
                    # a retriable error: try the transaction again
        except Exception as exc:         # noqa: BLE001 (reported by the test)
            failures.append(f"{name}: {exc!r}")

    def idempotent():
        def report(err, msg):
            if err is not None:
                failures.append(f"idempotent: {err}")
            else:
                progress["idempotent"] = progress.get("idempotent", 0) + 1
        try:
            p = ck.Producer({"bootstrap.servers": fixed_server.kafka_bootstrap,
                             "enable.idempotence": True, "socket.timeout.ms": 5000,
                             "message.timeout.ms": 60000, "linger.ms": 5, **FAST_RECONNECTS})
            while not stop.is_set():
                p.produce(topic_name, b"i", on_delivery=report)
                p.poll(0.005)
            assert p.flush(60) == 0
        except Exception as exc:         # noqa: BLE001
            failures.append(f"idempotent: {exc!r}")

    threads = [threading.Thread(target=transactional, args=(i,)) for i in range(TRANSACTIONAL)]
    threads.append(threading.Thread(target=idempotent))
    for t in threads:
        t.start()
    names = [f"tx{i}" for i in range(TRANSACTIONAL)] + ["idempotent"]
    try:
        def moved_on(before):
            return all(progress.get(n, 0) > before.get(n, 0) for n in names) or failures
        wait_until(lambda: moved_on({}), 60, "every producer to start writing")
        for _ in range(2):
            before = dict(progress)
            old = fixed_server.worker_pid(0)
            os.kill(old, signal.SIGKILL)
            fixed_server.wait_for_worker_restart(0, old)
            wait_until(lambda: moved_on(before), 60,
                       lambda: f"every producer to write again after a worker kill: {progress}")
        before = dict(progress)
        assert fixed_server.stop() == 0
        fixed_server.start()
        wait_until(lambda: moved_on(before), 90,
                   lambda: f"every producer to write again after a server restart: {progress}")
    finally:
        stop.set()
        for t in threads:
            t.join(120)
    assert not failures, failures[:5]


def test_topics_created_while_a_worker_restarts_are_created_not_timed_out(own_server,
                                                                          topic_name):
    """CreateTopics answered while a worker dies and comes back: the topics
    are in the metadata, so the answer is success (it said REQUEST_TIMED_OUT
    after the request's timeout, waiting for the dead process to confirm)."""
    admin = AdminClient({"bootstrap.servers": own_server.kafka_bootstrap})
    for round_ in range(3):
        old = own_server.worker_pid(1)
        os.kill(old, signal.SIGKILL)
        names = [f"{topic_name}-{round_}-{i}" for i in range(3)]
        started = time.monotonic()
        futures = admin.create_topics([NewTopic(n, 4, 1) for n in names],
                                      operation_timeout=20, request_timeout=30)
        for name, f in futures.items():
            f.result(40)                # raises on REQUEST_TIMED_OUT
        assert time.monotonic() - started < 15
        own_server.wait_for_worker_restart(1, old)
    listed = admin.list_topics(timeout=10).topics
    assert all(f"{topic_name}-{r}-{i}" in listed for r in range(3) for i in range(3))
