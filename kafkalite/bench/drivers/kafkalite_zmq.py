"""kafkalite over its native protocol on ZeroMQ (``kafkalite.transport: zmq``).

The parent starts a server with kafkalite.launcher.ServerProcess
(supervisor + the workload's kafkaliteWorkers partition workers, the
server's own default when unset; free loopback ports; data in the run's
temporary directory) and
creates the topics with the AdminClient. Producers use
``Producer.produce_batch`` with the values as rows of one array (one
Cython-encoded RecordBatch per call, no Python object per value,
acks=1, linger.ms 1, one delivery report per batch), and ``produce`` for a
single record (into its partition's open batch, batched by linger.ms); consumers
``Consumer.assign`` their partitions from the beginning and read with
``consume_batch`` (pyarrow; the stamps come straight from the value
column's buffers). The workload's ``producerConfig`` / ``consumerConfig``
are laid over these settings. kafkalite_shm.py, kafkalite_tcp.py,
kafkalite_records.py and kafka_protocol.py reuse the server half.
"""
from __future__ import annotations

import os

import numpy as np

from kafkalite.bench.drivers.base import ConsumerClient, Driver, ProducerClient
from kafkalite.bench.recorder import stamps_of_arrow


class KafkaliteServer:
    """The parent half shared by the kafkalite drivers: a server and the topics."""

    def __init__(self):
        self.server = None

    def start(self, workload, topics, work_dir: str, extra_args=()) -> dict:
        from kafkalite.client import AdminClient, NewTopic
        from kafkalite.launcher import ServerProcess
        self.server = ServerProcess(os.path.join(work_dir, "kafkalite-data"),
                                    workers=workload.kafkalite_workers,
                                    extra_args=extra_args,
                                    log_path=os.path.join(work_dir, "kafkalite-server.log"))
        self.server.start()
        admin = AdminClient({"bootstrap.servers": self.server.bootstrap})
        try:
            futures = admin.create_topics([NewTopic(t, workload.partitions_per_topic)
                                           for t in topics])
            for f in futures.values():
                f.result()
        finally:
            admin.close()
        return {"bootstrap.servers": self.server.bootstrap, "info": self.server.info}

    def pids(self) -> list[int]:
        """The supervisor's (its workers and gateway are its children)."""
        return [self.server.proc.pid] if self.server is not None else []

    def requests(self) -> int | None:
        """Requests answered by the whole server so far, from its metrics
        (Kafka's RequestsPerSec counters; the workers report theirs once a
        second, so a count is up to about a second old)."""
        url = (self.server.info or {}).get("metrics") if self.server is not None else None
        if not url:
            return None
        import urllib.request
        with urllib.request.urlopen(url, timeout=5) as r:
            text = r.read().decode()
        return int(sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
                       if line.startswith("kafka_network_requestmetrics_requests_total{")))

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


class KafkaliteProducer(ProducerClient):
    def __init__(self, endpoint: dict, workload, transport: str):
        from kafkalite.client import Producer
        self.size = workload.message_size
        self.producer = Producer({"bootstrap.servers": endpoint["bootstrap.servers"],
                                  "acks": 1, "linger.ms": 1,
                                  "kafkalite.transport": transport, **workload.producer_config})

    def send(self, topic, partition, block, count, keys, on_ack):
        # on_ack is the delivery callback itself (it takes (err, report) and
        # raises on an error: base.py): no closure per send for the collector
        if count == 1:
            # one record (a moderate rate, or keys spread over many
            # partitions): produce() appends it to its partition's open batch
            # in one C call, where produce_batch builds a batch of its own
            self.producer.produce(topic, block, None if keys is None else keys[0],
                                  partition=partition, on_delivery=on_ack)
            return
        # the block's rows are the values: encoded in place, no object per value
        rows = np.frombuffer(block, dtype=np.uint8).reshape(count, self.size)
        self.producer.produce_batch(topic, rows, keys=keys, partition=partition,
                                    on_delivery=on_ack)

    def poll(self, timeout):
        self.producer.poll(timeout)

    def flush(self, timeout):
        self.producer.flush(timeout)

    def close(self):
        self.producer.close(5)


class KafkaliteConsumer(ConsumerClient):
    def __init__(self, endpoint: dict, workload, assignment, transport: str = "zmq"):
        from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
        # a consumer's links are ZeroMQ or TCP (a ring carries produce only)
        self.consumer = Consumer({"bootstrap.servers": endpoint["bootstrap.servers"],
                                  "fetch.min.bytes": 1, "fetch.max.wait.ms": 100,
                                  "kafkalite.transport": "tcp" if transport == "tcp" else "zmq",
                                  **workload.consumer_config})
        # the topics are new, so the beginning is where the run starts
        self.consumer.assign([TopicPartition(t, p, OFFSET_BEGINNING) for t, p in assignment])

    def receive(self, timeout):
        batch = self.consumer.consume_batch(timeout)
        if not batch.num_rows:
            return stamps_of_arrow(batch.column("value")), 0
        values = batch.column("value")
        return stamps_of_arrow(values), values.nbytes

    def close(self):
        self.consumer.close()


class KafkaliteServerDriver(Driver):
    """A driver of a kafkalite server this process starts (KafkaliteServer):
    this one's and kafka_protocol.py's, whatever their clients."""
    kind = "kafkalite"

    def __init__(self):
        self.server = KafkaliteServer()

    def teardown(self):
        self.server.stop()

    def server_pids(self):
        return self.server.pids()

    def server_requests(self):
        return self.server.requests()


class KafkaliteZmqDriver(KafkaliteServerDriver):
    name = "kafkalite-zmq"
    label = "kafkalite, native protocol over ZeroMQ (produce_batch, consume_batch)"
    transport = "zmq"
    consumer_transport = "zmq"

    def setup(self, workload, topics, work_dir):
        return self.server.start(workload, topics, work_dir)

    @classmethod
    def producer(cls, endpoint, workload):
        return KafkaliteProducer(endpoint, workload, cls.transport)

    @classmethod
    def consumer(cls, endpoint, workload, assignment):
        return KafkaliteConsumer(endpoint, workload, assignment, cls.consumer_transport)
