"""Ceiling: raw pyzmq PUSH -> PULL of the same bytes over tcp:// loopback.

Each partition has a loopback port (picked by the parent); the consumer
owning the partition binds a PULL socket there, producers connect PUSH
sockets. A batch's values travel as one ZeroMQ message (zero-copy send);
send() returning is the acknowledgement (there are no acks, no broker, no
disk; PUSH blocks at its high-water mark, which is the back-pressure). No
broker can beat this; the ratio shows what the protocol, the server and
the disk cost. PUSH/PULL splits messages between receivers rather than
copying them, so a workload with several subscriptions skips this driver.
"""
from __future__ import annotations

import numpy as np

from kafkalite.bench.drivers.base import ConsumerClient, Driver, ProducerClient, free_ports
from kafkalite.bench.recorder import stamps_of_block

HWM = 1000   # messages (= batches) queued per socket before send() blocks


class PyzmqProducer(ProducerClient):
    def __init__(self, endpoint, workload):
        import zmq
        self.ctx = zmq.Context()
        self.ports, self.socks = endpoint["ports"], {}

    def send(self, topic, partition, block, count, keys, on_ack):
        import zmq
        s = self.socks.get((topic, partition))
        if s is None:
            s = self.socks[(topic, partition)] = self.ctx.socket(zmq.PUSH)
            s.setsockopt(zmq.SNDHWM, HWM)
            s.connect(f"tcp://127.0.0.1:{self.ports[f'{topic}/{partition}']}")
        s.send(block, copy=False)
        on_ack()

    def close(self):
        for s in self.socks.values():
            s.close(linger=2000)   # let queued batches reach the consumer
        self.ctx.term()


class PyzmqConsumer(ConsumerClient):
    def __init__(self, endpoint, workload, assignment):
        import zmq
        self.size = workload.message_size
        self.ctx = zmq.Context()
        self.poller = zmq.Poller()
        self.socks = []
        for t, p in assignment:
            s = self.ctx.socket(zmq.PULL)
            s.setsockopt(zmq.RCVHWM, HWM)
            s.bind(f"tcp://127.0.0.1:{endpoint['ports'][f'{t}/{p}']}")
            self.poller.register(s, zmq.POLLIN)
            self.socks.append(s)

    def receive(self, timeout):
        import zmq
        ready = self.poller.poll(int(timeout * 1000))
        stamps, nbytes = [], 0
        for s, _ in ready:
            for _ in range(64):       # drain a little per socket, fairly
                try:
                    frame = s.recv(zmq.NOBLOCK, copy=False)
                except zmq.Again:
                    break
                stamps.append(stamps_of_block(frame.buffer, self.size))
                nbytes += len(frame.buffer)
        return (np.concatenate(stamps) if stamps else np.empty(0, np.int64)), nbytes

    def close(self):
        for s in self.socks:
            s.close(linger=0)
        self.ctx.term()


class PyzmqDriver(Driver):
    name = "pyzmq"
    label = "ceiling: raw pyzmq PUSH -> PULL of the same bytes (tcp loopback, no acks)"
    kind = "ceiling"
    fan_out = False
    holds_backlog = False

    def setup(self, workload, topics, work_dir):
        names = [f"{t}/{p}" for t in topics for p in range(workload.partitions_per_topic)]
        return {"ports": dict(zip(names, free_ports(len(names))))}

    @classmethod
    def producer(cls, endpoint, workload):
        return PyzmqProducer(endpoint, workload)

    @classmethod
    def consumer(cls, endpoint, workload, assignment):
        return PyzmqConsumer(endpoint, workload, assignment)
