"""Ceiling: a plain file append of the same bytes, and a reader tailing it.

One file per partition in the run's temporary directory. A producer
``os.write``s each batch's values (the same bytes a broker would get) to
the partition's file opened with O_APPEND; write() returning is the
acknowledgement (page cache, no fsync, as kafkalite acknowledges). A
consumer tails its files with ``os.read`` of up to 4 MiB, polling every
0.2 ms when there is nothing new (so end-to-end latency includes up to
that). No protocol, no process in between: what the disk path of this
machine allows.
"""
from __future__ import annotations

import os
import time

import numpy as np

from kafkalite.bench.drivers.base import ConsumerClient, Driver, ProducerClient
from kafkalite.bench.recorder import stamps_of_block

READ_BYTES = 4 << 20
IDLE_SLEEP = 0.0002


def partition_file(endpoint, topic, partition) -> str:
    return os.path.join(endpoint["dir"], f"{topic}-{partition}.log")


class FileProducer(ProducerClient):
    def __init__(self, endpoint, workload):
        self.endpoint, self.fds = endpoint, {}

    def send(self, topic, partition, block, count, keys, on_ack):
        fd = self.fds.get((topic, partition))
        if fd is None:
            fd = self.fds[(topic, partition)] = os.open(
                partition_file(self.endpoint, topic, partition), os.O_WRONLY | os.O_APPEND)
        view = memoryview(block)
        while view:
            view = view[os.write(fd, view):]
        on_ack()

    def close(self):
        for fd in self.fds.values():
            os.close(fd)
        self.fds = {}


class FileConsumer(ConsumerClient):
    def __init__(self, endpoint, workload, assignment):
        self.size = workload.message_size
        self.files = [[os.open(partition_file(endpoint, t, p), os.O_RDONLY), b""]
                      for t, p in assignment]

    def receive(self, timeout):
        deadline = time.monotonic() + timeout
        while True:
            stamps, nbytes = [], 0
            for f in self.files:
                data = os.read(f[0], READ_BYTES)
                if not data:
                    continue
                data = f[1] + data if f[1] else data
                whole = len(data) - len(data) % self.size
                f[1] = data[whole:]
                if whole:
                    stamps.append(stamps_of_block(memoryview(data)[:whole], self.size))
                    nbytes += whole
            if stamps or time.monotonic() >= deadline:
                return (np.concatenate(stamps) if stamps else np.empty(0, np.int64)), nbytes
            time.sleep(IDLE_SLEEP)

    def close(self):
        for f in self.files:
            os.close(f[0])
        self.files = []


class FileAppendDriver(Driver):
    name = "file-append"
    label = "ceiling: os.write appends of the same bytes to a file, a reader tailing it"
    kind = "ceiling"

    def setup(self, workload, topics, work_dir):
        d = os.path.join(work_dir, "files")
        os.makedirs(d, exist_ok=True)
        for t in topics:
            for p in range(workload.partitions_per_topic):
                open(os.path.join(d, f"{t}-{p}.log"), "wb").close()
        return {"dir": d}

    @classmethod
    def producer(cls, endpoint, workload):
        return FileProducer(endpoint, workload)

    @classmethod
    def consumer(cls, endpoint, workload, assignment):
        return FileConsumer(endpoint, workload, assignment)
