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
    kafka_port = 9092             # Kafka wire protocol (TCP): the supervisor, broker 1000
    kafka_worker_base_port = 9100 # worker i is Kafka broker i on kafka_worker_base_port + i
    metrics_port = 9404           # HTTP: Prometheus /metrics and /health (-1: off); 9404 is
                                  # the port Strimzi gives Kafka's Prometheus JMX exporter
    log_level = ""                # DEBUG, INFO, WARNING, ERROR ("": $KAFKALITE_LOG_LEVEL or WARNING)
    auto_create_topics = true
    default_partitions = 1
    default_replication_factor = 1    # replicas of a new topic's partitions, on distinct workers
    replica_lag_time_max_ms = 30000   # a follower this far behind leaves the ISR
    replica_fetch_wait_max_ms = 500   # how long a follower's fetch waits at the leader for data
    broker_session_timeout_ms = 6000  # a worker silent this long (hung, stopped) is fenced
    auto_leader_rebalance_enable = true       # give leaderships back to preferred replicas
    leader_imbalance_check_interval_seconds = 30  # how often (Kafka: 300)
    offsets_topic_num_partitions = 16        # partitions of __consumer_offsets
    group_min_session_timeout_ms = 1000      # Kafka: 6000; lower because members are local
    group_max_session_timeout_ms = 1800000
    group_initial_rebalance_delay_ms = 0     # Kafka: 3000
    group_consumer_session_timeout_ms = 45000   # KIP-848 groups: a silent member is removed
    group_consumer_heartbeat_interval_ms = 5000 # KIP-848 groups: how often members heartbeat
    offsets_retention_minutes = 10080        # offsets of an empty group expire after 7 days
    transaction_state_num_partitions = 4     # partitions of __transaction_state (Kafka: 50)
    transaction_max_timeout_ms = 900000      # the largest transaction.timeout.ms a producer may ask
    transactional_id_expiration_ms = 604800000  # idle transactional ids are forgotten after 7 days
    transaction_abort_timed_out_transaction_cleanup_interval_ms = 1000  # Kafka: 10000
    cluster = ""                  # PostgreSQL DSN: cluster metadata there (cluster_store.py)
    node_id = 1                   # this node's id in the cluster
    controller_lease_ms = 10000   # the controller lease, renewed every third of this
    kafka_security_protocol = "PLAINTEXT"  # or SSL, SASL_PLAINTEXT, SASL_SSL (security.py)
    ssl_certfile = ""             # PEM server certificate (chain); Kafka's ssl.keystore
    ssl_keyfile = ""              # PEM private key ("" = in ssl_certfile)
    ssl_cafile = ""               # PEM CAs of client certificates; Kafka's ssl.truststore
    ssl_client_auth = "none"      # mutual TLS: required, requested or none
    sasl_enabled_mechanisms = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    sasl_users_file = ""          # SASL credentials ("" = <data_dir>/sasl-users.json;
                                  # written by `kafkalite users`, credentials.py)
    authorizer_enabled = false    # Kafka's ACLs on the Kafka listeners (authorizer.py; Kafka:
                                  # authorizer.class.name); CreateAcls / `kafkalite acls`
    super_users = ""              # Kafka's super.users: "User:admin;User:ops", allowed everything
    allow_everyone_if_no_acl_found = false  # a resource without ACLs is open to all

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
from kafkalite.server import authorizer, security
from kafkalite.storage.config import LogConfig

DEFAULT_PORT = 7092
DEFAULT_INGEST_PORT = 7091
DEFAULT_WORKER_BASE_PORT = 7100
DEFAULT_KAFKA_PORT = 9092
DEFAULT_KAFKA_WORKER_BASE_PORT = 9100
DEFAULT_METRICS_PORT = 9404
METRICS_OFF = -1
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


@dataclass
class ServerConfig:
    data_dir: str = "./kafkalite-data"
    host: str = "127.0.0.1"
    advertised_host: str = ""
    workers: int = 0
    port: int = DEFAULT_PORT
    ingest_port: int = DEFAULT_INGEST_PORT
    worker_base_port: int = DEFAULT_WORKER_BASE_PORT
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_worker_base_port: int = DEFAULT_KAFKA_WORKER_BASE_PORT
    metrics_port: int = DEFAULT_METRICS_PORT
    log_level: str = ""
    auto_create_topics: bool = True
    default_partitions: int = 1
    default_replication_factor: int = 1
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    broker_session_timeout_ms: int = 6_000
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 30
    offsets_topic_num_partitions: int = 16
    group_min_session_timeout_ms: int = 1_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 0
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    offsets_retention_minutes: int = 10_080
    transaction_state_num_partitions: int = 4
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 1_000
    cluster: str = ""
    node_id: int = 1
    controller_lease_ms: int = 10_000
    kafka_security_protocol: str = "PLAINTEXT"
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_cafile: str = ""
    ssl_client_auth: str = "none"
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    sasl_users_file: str = ""
    authorizer_enabled: bool = False
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    topic_defaults: dict = field(default_factory=dict)

    def __post_init__(self):
        # Workers get this config as JSON and may run elsewhere than the
        # flags' working directory: paths are made absolute once, here.
        for name in ("ssl_certfile", "ssl_keyfile", "ssl_cafile", "sasl_users_file"):
            if getattr(self, name):
                setattr(self, name, os.path.abspath(getattr(self, name)))
        security.validate(self)
        authorizer.validate(self)
        for name in ("port", "ingest_port", "worker_base_port", "kafka_port",
                     "kafka_worker_base_port"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value <= 65535:
                raise InvalidConfigurationError(f"{name} must be a port number 0-65535, not {value!r}")
        if not isinstance(self.metrics_port, int) or not -1 <= self.metrics_port <= 65535:
            raise InvalidConfigurationError(
                f"metrics_port must be a port number 0-65535 or -1 (off), not {self.metrics_port!r}")
        if not isinstance(self.log_level, str) or (
                self.log_level and self.log_level.upper() not in LOG_LEVELS):
            raise InvalidConfigurationError(
                f"log_level must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}")
        if not isinstance(self.workers, int) or self.workers < 0:
            raise InvalidConfigurationError(f"workers must be 0 (one per core) or more, not {self.workers!r}")
        if not isinstance(self.default_partitions, int) or self.default_partitions < 1:
            raise InvalidConfigurationError(
                f"default_partitions must be at least 1, not {self.default_partitions!r}")
        for name in ("default_replication_factor", "replica_lag_time_max_ms",
                     "replica_fetch_wait_max_ms", "leader_imbalance_check_interval_seconds",
                     "broker_session_timeout_ms",
                     "offsets_topic_num_partitions",
                     "group_min_session_timeout_ms",
                     "group_max_session_timeout_ms", "offsets_retention_minutes",
                     "group_consumer_session_timeout_ms",
                     "group_consumer_heartbeat_interval_ms",
                     "transaction_state_num_partitions", "transaction_max_timeout_ms",
                     "transactional_id_expiration_ms",
                     "transaction_abort_timed_out_transaction_cleanup_interval_ms",
                     "node_id", "controller_lease_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidConfigurationError(f"{name} must be a positive integer, not {value!r}")
        if not isinstance(self.cluster, str):
            raise InvalidConfigurationError(f"cluster must be a PostgreSQL DSN, not {self.cluster!r}")
        if self.cluster and not self.cluster.startswith(("postgresql://", "postgres://")):
            raise InvalidConfigurationError(
                f"cluster must be a postgresql:// URL, not {self.cluster!r}")
        if (not isinstance(self.group_initial_rebalance_delay_ms, int)
                or self.group_initial_rebalance_delay_ms < 0):
            raise InvalidConfigurationError("group_initial_rebalance_delay_ms must be 0 or more")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise InvalidConfigurationError(
                "group_min_session_timeout_ms must not exceed group_max_session_timeout_ms")
        # Fails early, naming the key, if a topic default is not a valid topic config.
        self.log_config()

    @property
    def worker_count(self) -> int:
        return self.workers or max(1, os.cpu_count() or 1)

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_port != METRICS_OFF

    @property
    def effective_log_level(self) -> str:
        """``log_level``, else $KAFKALITE_LOG_LEVEL (kept for old set-ups), else WARNING."""
        return (self.log_level or os.environ.get("KAFKALITE_LOG_LEVEL") or "WARNING").upper()

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
