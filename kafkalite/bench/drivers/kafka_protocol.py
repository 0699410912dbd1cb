"""kafkalite through its Kafka-protocol TCP listener, driven by confluent-kafka
(librdkafka): what an existing Kafka application sees.

The server half (start, topics via the native AdminClient) is
kafkalite_zmq.py's; every kafkalite server has a Kafka listener, whose
address server.json publishes as ``kafka.bootstrap.servers``. Producers
call ``produce`` per message (acks=1; a delivery callback per message, as
librdkafka works); consumers ``assign`` from the beginning, wait for the
first message with ``poll`` and then take what else is already there with
``consume(10000, 0)`` -- ``consume(n, timeout)`` itself waits until it has
``n`` messages or the timeout passes, which would charge every message
the rest of the timeout.

``kafkalite-kafka`` runs librdkafka's defaults (linger.ms 5,
fetch.wait.max.ms 500, Nagle on): what an application that sets nothing
sees. ``kafkalite-kafka-tuned`` is the same client set for latency
(linger.ms 0, Nagle off, fetch.wait.max.ms 100). The workload's
``producerConfig`` / ``consumerConfig`` are kafkalite's own clients'
settings and do not reach librdkafka: these two drivers are meant to show
the defaults and the tuned settings their names say, whatever a workload
gives its native clients (the latency workload's linger.ms 0, say).
"""
from __future__ import annotations

import logging

from kafkalite.bench.drivers.base import ConsumerClient, ProducerClient
from kafkalite.bench.drivers.kafkalite_zmq import KafkaliteServerDriver
from kafkalite.bench.recorder import split, stamps_of_values


class _LibrdkafkaLog(logging.Handler):
    """librdkafka's log lines, kept instead of printed (a protocol error can
    repeat thousands of times a second); the first error fails the client."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.first_error = None

    def emit(self, record):
        if record.levelno >= logging.ERROR and self.first_error is None:
            self.first_error = record.getMessage()

    def check(self):
        if self.first_error is not None:
            raise RuntimeError(f"librdkafka: {self.first_error}")


def _logger(role: str) -> tuple[logging.Logger, _LibrdkafkaLog]:
    handler = _LibrdkafkaLog()
    log = logging.getLogger(f"kafkalite.bench.librdkafka.{role}")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log, handler


# librdkafka's settings for latency (kafkalite-kafka-tuned)
TUNED_PRODUCER = {"linger.ms": 0, "socket.nagle.disable": True}
TUNED_CONSUMER = {"fetch.wait.max.ms": 100, "socket.nagle.disable": True}


class KafkaProducer(ProducerClient):
    def __init__(self, endpoint, workload, tuning=None):
        import confluent_kafka
        self.size = workload.message_size
        log, self.log = _logger("producer")
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": endpoint["kafka"], "acks": 1,
            "queue.buffering.max.messages": 500_000, **(tuning or {})}, logger=log)

    def send(self, topic, partition, block, count, keys, on_ack):
        if count == 1:
            # the steady state of a paced producer: one message, one report,
            # and on_ack is the delivery callback itself (it takes (err, msg)
            # and raises on an error: base.py), no object per message for the
            # collector to walk while thousands are in flight
            self._produce(topic, partition, block, None if keys is None else keys[0], on_ack)
        else:
            left = [count]
            errors = []

            def delivered(err, _msg):
                if err is not None:
                    errors.append(err)
                left[0] -= 1
                if left[0] == 0:
                    if errors:
                        raise RuntimeError(f"delivery to {topic}-{partition} failed: {errors[0]}")
                    on_ack()
            for i, value in enumerate(split(block, self.size)):
                self._produce(topic, partition, value, None if keys is None else keys[i],
                              delivered)
        self.producer.poll(0)
        self.log.check()

    def _produce(self, topic, partition, value, key, on_delivery) -> None:
        while True:
            try:
                self.producer.produce(topic, value, key, partition=partition,
                                      on_delivery=on_delivery)
                return
            except BufferError:       # librdkafka's queue is full: serve reports, retry
                self.producer.poll(0.01)

    def poll(self, timeout):
        self.producer.poll(timeout)
        self.log.check()

    def flush(self, timeout):
        self.producer.flush(timeout)

    def close(self):
        self.producer.flush(5)


class KafkaConsumer(ConsumerClient):
    def __init__(self, endpoint, workload, assignment, tuning=None):
        import confluent_kafka
        log, self.log = _logger("consumer")
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": endpoint["kafka"], "group.id": "kafkalite-bench",
            "enable.auto.commit": False, **(tuning or {})}, logger=log)
        self.consumer.assign([confluent_kafka.TopicPartition(t, p, confluent_kafka.OFFSET_BEGINNING)
                              for t, p in assignment])

    def receive(self, timeout):
        # consume(n, timeout) returns only when n messages are there or the
        # timeout passed: wait for the first, then take what is queued
        first = self.consumer.poll(timeout)
        msgs = [] if first is None else [first, *self.consumer.consume(10_000, 0)]
        self.log.check()
        values = []
        for m in msgs:
            if m.error() is not None:
                if m.error().code() == -191:    # _PARTITION_EOF: not an error
                    continue
                raise RuntimeError(f"consume failed: {m.error()}")
            values.append(m.value())
        return stamps_of_values(values), sum(len(v) for v in values)

    def close(self):
        self.consumer.close()


class KafkaProtocolDriver(KafkaliteServerDriver):
    name = "kafkalite-kafka"
    label = ("kafkalite's Kafka-protocol listener, confluent-kafka (librdkafka) clients, "
             "librdkafka's default settings")
    producer_tuning: dict = {}
    consumer_tuning: dict = {}

    def unavailable(self):
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            return "confluent-kafka is not installed (a kafkalite dependency: pip install -e .)"
        return None

    def setup(self, workload, topics, work_dir):
        endpoint = self.server.start(workload, topics, work_dir)
        endpoint["kafka"] = endpoint["info"]["kafka.bootstrap.servers"]
        return endpoint

    @classmethod
    def producer(cls, endpoint, workload):
        return KafkaProducer(endpoint, workload, cls.producer_tuning)

    @classmethod
    def consumer(cls, endpoint, workload, assignment):
        return KafkaConsumer(endpoint, workload, assignment, cls.consumer_tuning)


class KafkaProtocolTunedDriver(KafkaProtocolDriver):
    name = "kafkalite-kafka-tuned"
    label = ("kafkalite's Kafka-protocol listener, confluent-kafka set for latency "
             "(linger.ms 0, Nagle off, fetch.wait.max.ms 100)")
    producer_tuning = TUNED_PRODUCER
    consumer_tuning = TUNED_CONSUMER
