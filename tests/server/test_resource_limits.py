"""A worker out of file descriptors keeps running.

With its descriptor limit lowered (prlimit, as a tight ``ulimit -n`` or a
descriptor leak elsewhere would leave it) and its Kafka port flooded with
idle connections until accept() fails with EMFILE, a worker must go on
serving the connections it has, refuse or close what it cannot take, and
come back to full service once descriptors are free again, without being
restarted: requests that need a descriptor get errors, never a crash.
Housekeeping that opens files (segment rolls, checkpoints, metrics
snapshots) meets the same limit meanwhile, and a clean stop at the limit
must still stop cleanly.
"""
from __future__ import annotations

import os
import resource
import socket
import time

import confluent_kafka as ck
import confluent_kafka.admin  # noqa: F401 (ck.admin)
import pytest

from harness import create, wait_until
from kafkalite.client import Producer


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def flood(address: str, limit: int) -> list[socket.socket]:
    """Connections to ``address`` until ``limit`` are open or none is taken."""
    host, port = address.rsplit(":", 1)
    socks = []
    for _ in range(limit):
        try:
            s = socket.create_connection((host, int(port)), timeout=2)
        except OSError:
            break
        socks.append(s)
    return socks


@pytest.mark.skipif(os.geteuid() != 0, reason="lowering another process's limit needs root")
def test_a_worker_at_its_descriptor_limit_serves_on_and_recovers(own_server, topic_name):
    srv = own_server
    create(srv, topic_name, 2, **{"segment.bytes": "16384"})   # rolls: files to open
    pid = srv.worker_pid(0)
    broker = ck.admin.AdminClient({"bootstrap.servers": srv.kafka_bootstrap}).list_topics(
        timeout=10).brokers[0]            # worker 0 is broker 0
    address = f"{broker.host}:{broker.port}"
    # room for what it has open now and a few more: the flood takes the rest
    limit = open_fds(pid) + 40
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (limit, limit))
    producer = Producer(srv.config(**{"linger.ms": 5}))
    try:
        producer.produce_batch(topic_name, [b"before-%d" % i for i in range(500)], partition=0)
        assert producer.flush(30) == 0
        hogs = flood(address, 2 * limit)
        try:
            wait_until(lambda: open_fds(pid) >= limit - 2, 20,
                       lambda: f"the worker to reach its limit ({open_fds(pid)} of {limit})")
            # the limit reached: requests on existing connections and
            # housekeeping (rolls of 4 KB segments) go on for a while
            failed = []
            for chunk in range(40):
                producer.produce_batch(topic_name, [b"during-%d-%d" % (chunk, i) * 8
                                                    for i in range(50)], partition=0,
                                       on_delivery=lambda err, m: err and failed.append(m.count))
            producer.flush(20)
            time.sleep(2.5)     # housekeeping and metrics intervals pass at the limit
            assert srv.worker_pid(0) == pid, "the worker was restarted"
        finally:
            for s in hogs:
                s.close()
        # descriptors free again: full service, same process
        wait_until(lambda: open_fds(pid) < limit - 10, 20, "the flood's connections to close")
        producer.produce_batch(topic_name, [b"after-%d" % i for i in range(500)], partition=0)
        assert producer.flush(30) == 0
        c = ck.Consumer({"bootstrap.servers": srv.kafka_bootstrap, "group.id": topic_name,
                         "auto.offset.reset": "earliest"})
        try:
            c.assign([ck.TopicPartition(topic_name, 0, 0)])
            got = 0
            deadline = time.monotonic() + 30
            # on_delivery runs once a batch: failed holds the records' counts
            while got < 1000 + 2000 - sum(failed) and time.monotonic() < deadline:
                got += sum(1 for m in c.consume(1000, 0.5) if m.error() is None)
        finally:
            c.close()
        assert got >= 1000
        assert srv.worker_pid(0) == pid, "the worker was restarted"
        assert "Traceback" not in srv.output()
    finally:
        producer.close()
    # a clean stop, at a lower limit again: the stop writes snapshots
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_fds(pid) + 2, limit))
    assert srv.stop() == 0
    assert "Traceback" not in srv.output()
