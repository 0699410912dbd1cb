"""Kafka Streams' configuration (``StreamsConfig``): its names, defaults and
checks, and what the application's clients connect with.

Which process runs it: the Streams application's (runtime.py).
What it may import: the standard library.
"""
from __future__ import annotations

import os
import tempfile

AT_LEAST_ONCE, EXACTLY_ONCE_V2 = "at_least_once", "exactly_once_v2"
_SECURITY_PREFIXES = ("curve.", "security.protocol", "sasl.", "ssl.")


class StreamsConfig:
    """Kafka Streams' config names; ``consumer.*`` / ``producer.*`` keys
    pass through to the clients."""

    DEFAULTS = {
        "processing.guarantee": AT_LEAST_ONCE,
        "commit.interval.ms": None,      # Kafka's: 30000 at_least_once, 100 exactly_once_v2
        "state.dir": os.path.join(tempfile.gettempdir(), "kafkalite-streams"),
        "default.dsl.store": "rocksdb",
        "num.stream.threads": 1,
        "instance.id": None,             # stable id: transactional.id and group.instance.id
        "poll.ms": 100,
        # KIP-353: how long a task with several input partitions waits for
        # one with nothing buffered before processing the others (0: never)
        "max.task.idle.ms": 0,
        "transaction.timeout.ms": 10_000,   # Kafka Streams' EOS default
        "num.standby.replicas": 0,
        "standby.refresh.ms": 2000,     # how often standbys follow the group's assignment
        # errors.py: what a record that fails deserialization or processing does
        "deserialization.exception.handler": "log_and_fail",
        "processing.exception.handler": "log_and_fail",
        "errors.dead.letter.queue.topic.name": None,
    }

    def __init__(self, config: dict):
        cfg = {**self.DEFAULTS, **config}
        for required in ("application.id", "bootstrap.servers"):
            if not cfg.get(required):
                raise ValueError(f"StreamsConfig needs {required}")
        if cfg["processing.guarantee"] not in (AT_LEAST_ONCE, EXACTLY_ONCE_V2):
            raise ValueError("processing.guarantee is at_least_once or exactly_once_v2")
        if cfg["default.dsl.store"] not in ("rocksdb", "in_memory"):
            raise ValueError("default.dsl.store is rocksdb or in_memory")
        if int(cfg["num.stream.threads"]) < 1:
            raise ValueError("num.stream.threads is 1 or more")
        if int(cfg["num.standby.replicas"]) < 0:
            raise ValueError("num.standby.replicas is 0 or more")
        if not isinstance(cfg["max.task.idle.ms"], int) or cfg["max.task.idle.ms"] < -1:
            raise ValueError("max.task.idle.ms is an int, -1 or more (-1, 0: never wait)")
        if cfg["commit.interval.ms"] is None:
            cfg["commit.interval.ms"] = 100 if cfg["processing.guarantee"] == EXACTLY_ONCE_V2 \
                else 30_000
        self.values = cfg

    def __getitem__(self, key):
        return self.values[key]

    def connection(self) -> dict:
        """What every client of the application connects with: the bootstrap
        servers and the security settings (Kafka Streams passes unprefixed
        client configs to all its clients)."""
        return {k: v for k, v in self.values.items()
                if k == "bootstrap.servers" or k.startswith(_SECURITY_PREFIXES)}

    def prefixed(self, prefix: str) -> dict:
        return {k[len(prefix):]: v for k, v in self.values.items() if k.startswith(prefix)}
