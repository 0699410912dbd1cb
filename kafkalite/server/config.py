"""Server settings: an embedded default, a TOML file, and command-line flags.

Precedence: flags > TOML file > defaults. The defaults need nothing
configured: data in ``./kafkalite-data``, everything on loopback.

TOML layout (every key optional)::

    data_dir = "./kafkalite-data"
    host = "127.0.0.1"            # interface to bind and to advertise
    advertised_host = ""          # host clients are told to connect to ("" = host)
    workers = 0                   # partition worker processes; 0 = one per core
    port = 7092                   # native protocol (metadata and admin), ZeroMQ ROUTER
    ingest_port = 7091            # plain ZeroMQ ingest, PULL
    worker_base_port = 7100       # worker i serves on worker_base_port + i
    auto_create_topics = true
    default_partitions = 1

    [topic_defaults]              # Kafka topic configs given to new topics
    "retention.ms" = 604800000

A port of 0 means "any free port"; the ports actually bound are written to
``<data_dir>/server.json`` (and printed) so clients and tests can find them.
"""
from __future__ import annotations

import dataclasses
import os
import tomllib
from dataclasses import dataclass, field

from kafkalite.errors import InvalidConfigurationError
from kafkalite.storage.config import LogConfig

DEFAULT_PORT = 7092
DEFAULT_INGEST_PORT = 7091
DEFAULT_WORKER_BASE_PORT = 7100


@dataclass
class ServerConfig:
    data_dir: str = "./kafkalite-data"
    host: str = "127.0.0.1"
    advertised_host: str = ""
    workers: int = 0
    port: int = DEFAULT_PORT
    ingest_port: int = DEFAULT_INGEST_PORT
    worker_base_port: int = DEFAULT_WORKER_BASE_PORT
    auto_create_topics: bool = True
    default_partitions: int = 1
    topic_defaults: dict = field(default_factory=dict)

    def __post_init__(self):
        for name in ("port", "ingest_port", "worker_base_port"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value <= 65535:
                raise InvalidConfigurationError(f"{name} must be a port number 0-65535, not {value!r}")
        if not isinstance(self.workers, int) or self.workers < 0:
            raise InvalidConfigurationError(f"workers must be 0 (one per core) or more, not {self.workers!r}")
        if not isinstance(self.default_partitions, int) or self.default_partitions < 1:
            raise InvalidConfigurationError(
                f"default_partitions must be at least 1, not {self.default_partitions!r}")
        # Fails early, naming the key, if a topic default is not a valid topic config.
        self.log_config()

    @property
    def worker_count(self) -> int:
        return self.workers or max(1, os.cpu_count() or 1)

    @property
    def public_host(self) -> str:
        return self.advertised_host or self.host

    def log_config(self, overrides: dict | None = None) -> LogConfig:
        """The LogConfig of a topic: server topic defaults, then the topic's own configs."""
        base = LogConfig.from_properties(self.topic_defaults)
        return LogConfig.from_properties(overrides or {}, base=base)

    @classmethod
    def load(cls, path: str | None = None, **overrides) -> "ServerConfig":
        """Defaults, then the TOML file at ``path``, then ``overrides`` (flags; None = unset)."""
        values: dict = {}
        if path:
            try:
                with open(path, "rb") as f:
                    values = tomllib.load(f)
            except FileNotFoundError:
                raise InvalidConfigurationError(f"config file {path} does not exist") from None
            except tomllib.TOMLDecodeError as exc:
                raise InvalidConfigurationError(f"config file {path}: {exc}") from None
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InvalidConfigurationError(
                f"config file {path}: unknown setting(s) {', '.join(unknown)}; known: "
                f"{', '.join(sorted(known))}")
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)
