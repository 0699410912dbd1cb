"""The drivers of ``kafkalite bench``, one module each, in report order.

kafkalite itself (native protocol over ZeroMQ with the bulk API, over
shared memory, over direct TCP links, with the per-message API, and through confluent-kafka on
the Kafka-protocol listener), the peers a user
would pick instead (Redis Streams, NATS JetStream), and the machine's
ceilings (plain file append, raw pyzmq PUSH/PULL). See base.py for the
contract. Modules are imported on first use, so a missing peer library
only matters to its own driver.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:       # base imports numpy: not at `kafkalite --help`'s start
    from kafkalite.bench.drivers.base import Driver

# name -> (module, class)
REGISTRY = {
    "kafkalite-zmq": ("kafkalite.bench.drivers.kafkalite_zmq", "KafkaliteZmqDriver"),
    "kafkalite-shm": ("kafkalite.bench.drivers.kafkalite_shm", "KafkaliteShmDriver"),
    "kafkalite-tcp": ("kafkalite.bench.drivers.kafkalite_tcp", "KafkaliteTcpDriver"),
    "kafkalite-records": ("kafkalite.bench.drivers.kafkalite_records", "KafkalitePerMessageDriver"),
    "kafkalite-kafka": ("kafkalite.bench.drivers.kafka_protocol", "KafkaProtocolDriver"),
    "kafkalite-kafka-tuned": ("kafkalite.bench.drivers.kafka_protocol",
                              "KafkaProtocolTunedDriver"),
    "redis-streams": ("kafkalite.bench.drivers.redis_streams", "RedisStreamsDriver"),
    "nats-jetstream": ("kafkalite.bench.drivers.nats_jetstream", "NatsJetStreamDriver"),
    "file-append": ("kafkalite.bench.drivers.file_append", "FileAppendDriver"),
    "pyzmq": ("kafkalite.bench.drivers.pyzmq_raw", "PyzmqDriver"),
}
NAMES = tuple(REGISTRY)


def driver_class(name: str) -> type[Driver]:
    if name not in REGISTRY:
        raise ValueError(f"unknown driver {name!r} (known: {', '.join(NAMES)})")
    module, cls = REGISTRY[name]
    return getattr(importlib.import_module(module), cls)
