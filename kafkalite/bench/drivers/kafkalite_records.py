"""kafkalite's per-message API over ZeroMQ: ``Producer.produce`` one record
at a time and ``Consumer.consume`` (up to 10,000 records per call), the
calls most applications make, beside the bulk ``produce_batch`` /
``consume_batch`` of kafkalite_zmq.py (whose server half this reuses).

Each record is produced on its own (the client batches them by
``linger.ms`` / ``batch.size``); a batch of the harness's values is
acknowledged when the delivery report of its last record comes, since a
partition's records are delivered in order.
"""
from __future__ import annotations

from kafkalite.bench.drivers.kafkalite_zmq import (KafkaliteConsumer, KafkaliteProducer,
                                                   KafkaliteZmqDriver)
from kafkalite.bench.recorder import split, stamps_of_values


class PerMessageProducer(KafkaliteProducer):
    def __init__(self, endpoint, workload):
        super().__init__(endpoint, workload, "zmq")

    def send(self, topic, partition, block, count, keys, on_ack):
        # on_ack is the last value's delivery callback itself (base.py)
        values = split(block, self.size)
        produce, last = self.producer.produce, len(values) - 1
        for i, value in enumerate(values):
            while True:
                try:
                    produce(topic, value, None if keys is None else keys[i], partition=partition,
                            on_delivery=on_ack if i == last else None)
                    break
                except BufferError:       # the local queue is full: serve reports, retry
                    self.producer.poll(0.001)


class PerMessageConsumer(KafkaliteConsumer):
    def receive(self, timeout):
        values = [m.value() for m in self.consumer.consume(10_000, timeout)]
        return stamps_of_values(values), sum(len(v) for v in values)


class KafkalitePerMessageDriver(KafkaliteZmqDriver):
    name = "kafkalite-records"
    label = "kafkalite, per-message produce() and consume() over ZeroMQ"

    @classmethod
    def producer(cls, endpoint, workload):
        return PerMessageProducer(endpoint, workload)

    @classmethod
    def consumer(cls, endpoint, workload, assignment):
        return PerMessageConsumer(endpoint, workload, assignment)
