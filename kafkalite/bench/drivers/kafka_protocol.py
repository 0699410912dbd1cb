"""kafkalite through its Kafka-protocol TCP listener, driven by confluent-kafka
(librdkafka): what an existing Kafka application sees.

Available when confluent-kafka is installed and ``kafkalite server`` has a
Kafka listener: an option of the ``server`` subcommand naming a Kafka port
(ServerProcess asks for a free one), whose address the server publishes in
server.json (``kafka.bootstrap.servers``, or any key naming kafka with a
host:port string or a dict holding ``bootstrap.servers``). Until then the driver is skipped with that reason.
The server half (start, topics via the native AdminClient) is
kafkalite_zmq.py's. Producers call ``produce`` per message (acks=1,
linger.ms 1; a delivery callback per message, as librdkafka works);
consumers ``assign`` from the beginning and ``consume`` up to 10,000
messages per call.
"""
from __future__ import annotations

import logging
import re

from kafkalite.bench.drivers.base import ConsumerClient, Driver, ProducerClient
from kafkalite.bench.drivers.kafkalite_zmq import KafkaliteServer
from kafkalite.bench.recorder import split, stamps_of_values


def kafka_port_option() -> str | None:
    """The ``kafkalite server`` option that sets the Kafka listener's port, if any."""
    from kafkalite.cli import build_parser
    parser = build_parser()
    for action in parser._subparsers._group_actions:          # the subcommands
        server = action.choices.get("server")
        if server is None:
            continue
        for opt in server._actions:
            for s in opt.option_strings:
                if "kafka" in s and "port" in s:
                    return s
    return None


def kafka_bootstrap(info: dict) -> str | None:
    """The Kafka listener's host:port from server.json, if it publishes one."""
    for key, value in info.items():
        if "kafka" not in key.lower():
            continue
        if isinstance(value, dict):
            value = value.get("bootstrap.servers") or value.get("endpoint")
        if isinstance(value, str):
            value = re.sub(r"^[a-z]+://", "", value)
            if re.fullmatch(r"[\w.\-\[\]:]+:\d+(,[\w.\-\[\]:]+:\d+)*", value):
                return value
    return None


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


class KafkaProducer(ProducerClient):
    def __init__(self, endpoint, workload):
        import confluent_kafka
        self.size = workload.message_size
        log, self.log = _logger("producer")
        self.producer = confluent_kafka.Producer({
            "bootstrap.servers": endpoint["kafka"], "acks": 1, "linger.ms": 1,
            "queue.buffering.max.messages": 500_000}, logger=log)

    def send(self, topic, partition, block, count, keys, on_ack):
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
            while True:
                try:
                    self.producer.produce(topic, value, None if keys is None else keys[i],
                                          partition=partition, on_delivery=delivered)
                    break
                except BufferError:       # librdkafka's queue is full: serve reports, retry
                    self.producer.poll(0.01)
        self.producer.poll(0)
        self.log.check()

    def poll(self, timeout):
        self.producer.poll(timeout)
        self.log.check()

    def flush(self, timeout):
        self.producer.flush(timeout)

    def close(self):
        self.producer.flush(5)


class KafkaConsumer(ConsumerClient):
    def __init__(self, endpoint, workload, assignment):
        import confluent_kafka
        log, self.log = _logger("consumer")
        self.consumer = confluent_kafka.Consumer({
            "bootstrap.servers": endpoint["kafka"], "group.id": "kafkalite-bench",
            "enable.auto.commit": False, "fetch.wait.max.ms": 100, "fetch.min.bytes": 1},
            logger=log)
        self.consumer.assign([confluent_kafka.TopicPartition(t, p, confluent_kafka.OFFSET_BEGINNING)
                              for t, p in assignment])

    def receive(self, timeout):
        msgs = self.consumer.consume(10_000, timeout)
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


class KafkaProtocolDriver(Driver):
    name = "kafkalite-kafka"
    label = "kafkalite's Kafka-protocol listener, confluent-kafka (librdkafka) clients"
    kind = "kafkalite"

    def __init__(self):
        self.server = KafkaliteServer()

    def unavailable(self):
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            return "confluent-kafka is not installed (pip install 'kafkalite[bench]')"
        if kafka_port_option() is None:
            return "kafkalite server has no Kafka-protocol listener yet (no --kafka-port option)"
        return None

    def setup(self, workload, topics, work_dir):
        from kafkalite.server.launcher import ServerProcess
        # a launcher that knows the Kafka listener already asks for it on a free port
        extra = [] if hasattr(ServerProcess, "kafka_bootstrap") else [kafka_port_option(), "0"]
        endpoint = self.server.start(workload, topics, work_dir, extra_args=extra)
        kafka = kafka_bootstrap(endpoint["info"])
        if kafka is None:
            raise RuntimeError("the server started with a Kafka listener but server.json "
                               "names no Kafka endpoint")
        endpoint["kafka"] = kafka
        return endpoint

    def teardown(self):
        self.server.stop()

    @classmethod
    def producer(cls, endpoint, workload):
        return KafkaProducer(endpoint, workload)

    @classmethod
    def consumer(cls, endpoint, workload, assignment):
        return KafkaConsumer(endpoint, workload, assignment)
