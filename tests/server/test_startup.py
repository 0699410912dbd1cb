"""How `kafkalite server` starts: its processes in parallel, each importing
only what it needs (issue 19's start-up target).

Nothing here is timed (benchmarks/bench_startup.py measures): the tests
look at what the processes did. The supervisor is run through a wrapper
around the same entry point (``python -m kafkalite``) that notes, when the
supervisor spawns its first worker, which of its heavy modules it has
imported already; at the ready line, /proc/<pid>/maps says which shared
libraries each process of the server has loaded.
"""
import json
import os
import sys

import pytest

from harness import ServerProcess, free_port

from kafkalite.client import AdminClient, Consumer, NewTopic, Producer

# Run as `python -c WRAPPER server ...`: records, at the first spawn of a
# partition worker, which of the supervisor's heavy modules are loaded.
WRAPPER = """
import json, os, runpy, subprocess, sys
HEAVY = ("numpy", "kafkalite.server.controller.controller", "kafkalite.server.group.coordinator",
         "kafkalite.storage.log", "kafkalite.protocol.codec")
spawned = subprocess.Popen.__init__
def init(self, args, *a, **kw):
    if "kafkalite.server.node.worker" in args and not os.path.exists(os.environ["SPAWN_NOTE"]):
        with open(os.environ["SPAWN_NOTE"], "w") as f:
            json.dump(sorted(m for m in HEAVY if m in sys.modules), f)
    spawned(self, args, *a, **kw)
subprocess.Popen.__init__ = init
sys.argv[0] = "kafkalite"
runpy.run_module("kafkalite", run_name="__main__", alter_sys=True)
"""


def _libraries(pid: int) -> str:
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


@pytest.mark.processes
def test_workers_are_spawned_before_the_supervisor_imports_its_own_parts(tmp_path):
    note = tmp_path / "spawn.json"
    os.environ["SPAWN_NOTE"] = str(note)
    try:
        srv = ServerProcess(str(tmp_path / "data"), workers=2,
                            program=[sys.executable, "-c", WRAPPER]).start()
    finally:
        del os.environ["SPAWN_NOTE"]
    try:
        # the workers' interpreters start and import while the supervisor
        # imports the controller, the coordinators and the storage engine
        assert json.loads(note.read_text()) == []
        # and the workers it spawned early serve once it is ready: they were
        # told the relay (Kafka requests they do not serve) with their assignment
        admin = AdminClient({"bootstrap.servers": srv.bootstrap})
        admin.create_topics([NewTopic("early", 2)])["early"].result(10)
        producer = Producer({"bootstrap.servers": srv.bootstrap})
        for p in range(2):
            producer.produce("early", b"v%d" % p, partition=p)
        assert producer.flush(10) == 0
        producer.close()
        consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["early"])
        got = []
        for _ in range(100):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == 2:
                break
        consumer.close()
        admin.close()
        assert sorted(got) == [b"v0", b"v1"]
    finally:
        assert srv.stop() == 0


@pytest.mark.processes
def test_no_server_process_loads_pyarrow_or_numpy_before_it_is_ready(tmp_path):
    """The web console (and with it the client's Arrow paths) loads at its
    first request, and the ingest gateway imports the Producer alone; a
    fixed native port lets the gateway (on a free port) start early too."""
    srv = ServerProcess(str(tmp_path / "data"), workers=1,
                        extra_args=["--port", str(free_port())]).start()
    try:
        supervisor = srv.proc.pid
        processes = [supervisor, *_children(supervisor)]
        assert len(processes) == 3            # a worker and the ingest gateway
        for pid in processes:
            assert "pyarrow" not in _libraries(pid), f"pid {pid} loaded pyarrow"
            # nor numpy: appends and a clean start need none of it (batch_scan)
            assert "numpy" not in _libraries(pid), f"pid {pid} loaded numpy"
        assert srv.info["ingest"] is not None
        # the console is still served, once asked for
        import urllib.request
        with urllib.request.urlopen(srv.info["console"], timeout=30) as answer:
            assert answer.status == 200
        assert "pyarrow" in _libraries(supervisor)
    finally:
        assert srv.stop() == 0


@pytest.mark.processes
def test_a_gateway_on_a_fixed_port_starts_after_ready_and_loses_nothing(tmp_path):
    """With its port known the gateway is spawned once the node is ready:
    a publisher that connects and sends at the ready line, before the
    gateway has bound, has its messages queued by ZeroMQ, not lost."""
    import zmq
    port = free_port()
    srv = ServerProcess(str(tmp_path / "data"), workers=1,
                        extra_args=["--ingest-port", str(port)]).start()
    ctx = zmq.Context()
    push = ctx.socket(zmq.PUSH)
    push.setsockopt(zmq.LINGER, 0)
    try:
        assert srv.info["ingest"] == f"tcp://127.0.0.1:{port}"
        AdminClient({"bootstrap.servers": srv.bootstrap}).create_topics(
            [NewTopic("late", 1)])["late"].result(10)
        push.connect(srv.info["ingest"])
        for i in range(20):
            push.send_multipart([b"late", b"k%d" % i, b"v%d" % i])
        consumer = Consumer({"bootstrap.servers": srv.bootstrap, "group.id": "g",
                             "auto.offset.reset": "earliest"})
        consumer.subscribe(["late"])
        got = []
        for _ in range(150):
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value())
            if len(got) == 20:
                break
        consumer.close()
        assert got == [b"v%d" % i for i in range(20)]
    finally:
        push.close()
        ctx.term()
        assert srv.stop() == 0


@pytest.mark.processes
def test_a_supervisor_restarted_after_a_kill_serves_without_numpy(tmp_path):
    """A supervisor killed -9 leaves its internal topics' logs (offsets,
    transaction state) to recover: the next one reads their producer
    batches, and read them into a numpy table -- numpy's import, 0.2 s of
    CPU and more under load, on the way of the transactions its clients
    waited to commit (issue 68). No numpy in it when it is ready."""
    import confluent_kafka as ck
    from confluent_kafka.admin import AdminClient as KafkaAdminClient, NewTopic as KafkaNewTopic
    srv = ServerProcess(str(tmp_path / "data"), workers=1).start()
    try:
        admin = KafkaAdminClient({"bootstrap.servers": srv.kafka_bootstrap})
        admin.create_topics([KafkaNewTopic("t", 1, 1)])["t"].result(30)
        producer = ck.Producer({"bootstrap.servers": srv.kafka_bootstrap,
                                "transactional.id": "restarted"})
        group = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap,
                             "group.id": "g"}).consumer_group_metadata()
        producer.init_transactions(30)
        for n in range(5):      # records past the logs' last producer snapshot
            producer.begin_transaction()
            producer.produce("t", b"v%d" % n, partition=0)
            producer.send_offsets_to_transaction([ck.TopicPartition("t", 0, n + 1)], group, 30)
            producer.commit_transaction(30)
        srv.kill()
        srv.start()
        assert "adopting it" in srv.output()
        assert "numpy" not in _libraries(srv.proc.pid), "the restarted supervisor loaded numpy"
        producer.begin_transaction()         # and it serves the producer on
        producer.produce("t", b"after", partition=0)
        producer.commit_transaction(30)
    finally:
        assert srv.stop() == 0
