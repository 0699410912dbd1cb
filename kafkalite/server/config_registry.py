"""The config registry: every config a Kafka client may give a topic, or
describe and alter on a broker, as Kafka 4.x defines it -- its type,
default, valid values, documentation, scope, synonyms and sensitivity --
and the rules DescribeConfigs, AlterConfigs, IncrementalAlterConfigs and
CreateTopics apply to them.

Topic configs (``TOPIC_CONFIGS``) are the log's settings: storage/config.py
``LogConfig`` owns them (it parses and checks them, and its fields say which
the log acts on); this module adds what a client is told about each. The
ones Kafka 3.x deprecated and 4.0 removed (``message.format.version``, ...)
are accepted with a warning in the log and ignored.

Broker configs (``BROKER_CONFIGS``), each with Kafka's "update mode"
(``Scope``):

- read-only: what the server was started with (server/config.py's
  ServerConfig, under Kafka's names: ``num.partitions``, ``log.dirs``,
  ``advertised.listeners``, ...), or what a broker is (``broker.id``);
- dynamic, ``cluster-wide`` (set for every broker with the resource name
  "", or for one broker by its id) or ``per-broker`` (by id only), kept with
  the cluster metadata (metadata.py, cluster_store.py). The broker-wide topic
  defaults (``log.retention.ms``, ``log.segment.bytes``, ``message.max.bytes``,
  ... the first broker synonym of each topic config) take effect at once:
  they become the defaults of every topic without its own value, on the
  brokers they are set for (the controller sends the merged configs to the
  workers as it does a topic's). The others are stored and described only;
  each key's ``effect`` says why (``applied`` is true for those that act).

A value comes from, highest precedence first: the topic's own config
(topics only), the broker's dynamic config (DYNAMIC_BROKER_CONFIG), the
cluster-wide dynamic default (DYNAMIC_DEFAULT_BROKER_CONFIG), the server's
config file or flags (STATIC_BROKER_CONFIG), Kafka's default
(DEFAULT_CONFIG): ``Layers``. A topic config's synonyms are its broker
configs in Kafka's order (``retention.ms`` <- ``log.retention.ms``,
``log.retention.minutes``, ``log.retention.hours``), each at every level it
is set; a broker config's are its unit variants, from itself on, as Kafka
lists them. A server-wide topic default given in kafkalite's config file is
shown under the first broker synonym's name (``log.retention.ms``), in the
topic config's unit, whichever of Kafka's names set it. Sensitive (PASSWORD)
values are never sent: value and synonyms' values are null.

Errors, as Kafka's: a bad topic config is INVALID_CONFIG; anything wrong
with a broker config alteration (unknown, read-only, per-broker at the
cluster level, a bad value) INVALID_REQUEST (Kafka's ConfigAdminManager,
KAFKA-13609).

Who runs it: the supervisor's controller (controller.py), and the docs
generator (tools/gen_docs.py). Pure data and functions: it imports
storage/config.py (the topic configs), server/config.py and listeners.py
(the server's settings), protocol/enums.py and native.py, and nothing
below the server imports it.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import re
from dataclasses import dataclass
from enum import Enum
from typing import Callable, Iterable

from kafkalite import errors
from kafkalite.protocol.enums import ConfigSource, ConfigType
from kafkalite.protocol.native import NATIVE_BOOTSTRAP_CONFIG
from kafkalite.server.config import SETTINGS, ServerConfig
from kafkalite.server.listeners import kafka_listeners
from kafkalite.storage.config import ICEBERG_OFF, INT_MAX, LONG_MAX, LogConfig
from kafkalite.storage.iceberg import iceberg_unavailable

log = logging.getLogger("kafkalite.configs")

DOUBLE_MAX = "1.7976931348623157E308"       # Java's Double.MAX_VALUE, as Kafka prints it
LISTENER_PREFIX = "listener.name."
_LISTENER_CONFIG = re.compile(r"^listener\.name\.([A-Za-z0-9_]+)\.(.+)$")
_KINDS = {"int": ConfigType.INT, "long": ConfigType.LONG, "double": ConfigType.DOUBLE,
          "boolean": ConfigType.BOOLEAN, "string": ConfigType.STRING, "list": ConfigType.LIST,
          "short": ConfigType.SHORT, "class": ConfigType.CLASS, "password": ConfigType.PASSWORD}


class Scope(str, Enum):
    """Kafka's "Update Mode" of a broker config; topic configs are TOPIC,
    group configs (group_config.py) GROUP."""
    TOPIC = "topic"
    GROUP = "group"
    READ_ONLY = "read-only"
    PER_BROKER = "per-broker"
    CLUSTER_WIDE = "cluster-wide"


@dataclass(frozen=True)
class ConfigKey:
    """One config as Kafka defines it and a client is told of it."""
    name: str
    type: ConfigType
    default: str | None                 # Kafka's default as DescribeConfigs shows it; None: none
    doc: str
    scope: Scope
    valid: str = ""                     # valid values, as Kafka's docs write them
    # topic config: its broker configs, in Kafka's order of precedence;
    # broker config: the names of the same setting in other units (itself included)
    synonyms: tuple[str, ...] = ()
    sensitive: bool = False
    # why kafkalite does not act on it ("": it does); deprecated: what becomes of it
    effect: str = ""
    deprecated: bool = False
    # another product's name of a topic config (Redpanda's redpanda.iceberg.*):
    # that config's name; described, as a deprecated one is, only when set
    alias_of: str = ""
    # a broker config that is a topic config's server-wide default: that topic
    # config, and the factor from this config's unit to the topic config's
    topic: str | None = None
    factor: int = 1
    # dynamic security configs Kafka takes only with a listener prefix
    listener_only: bool = False
    # the value's check (raises InvalidConfigurationError naming the config)
    check: Callable[[str], None] | None = None

    @property
    def dynamic(self) -> bool:
        return self.scope in (Scope.PER_BROKER, Scope.CLUSTER_WIDE)

    @property
    def applied(self) -> bool:
        """Whether kafkalite acts on it (a dynamic one: at once)."""
        return not self.effect and not self.deprecated


# ---- topic configs ------------------------------------------------------------------------

def _valid_of(f: dataclasses.Field) -> str:
    lo, hi = f.metadata["min"], f.metadata["max"]
    if lo is None:
        return ""
    bound = {LONG_MAX: "...", INT_MAX: "..."}.get(hi, hi)
    return f"[{lo},...]" if bound == "..." else f"[{lo},...,{hi}]"


_TOPIC_CHOICES = {
    "cleanup.policy": "[compact, delete] or empty",
    "compression.type": "[uncompressed, zstd, lz4, snappy, gzip, producer]",
    "message.timestamp.type": "[CreateTime, LogAppendTime]",
    "compression.gzip.level": "[1,...,9] or -1",
    "leader.replication.throttled.replicas": "[partitionId]:[brokerId],... or *",
    "follower.replication.throttled.replicas": "[partitionId]:[brokerId],... or *",
    "remote.storage.enable": "true only with remote.log.storage.system.enable",
    "iceberg.mode": "[off, key_value, value_schema_id_prefix, value_schema_latest"
                    "[:subject=<subject>]]",
    "iceberg.invalid.record.action": "[dlq_table, drop]",
    "iceberg.partition.spec": "(term, ...): column, transform(column), bucket(N, column), "
                              "truncate(W, column)",
}


def _topic_check(name: str) -> Callable[[str], None]:
    return lambda value: LogConfig.from_properties({name: value})


def _topic_configs() -> dict[str, ConfigKey]:
    out = {}
    defaults = LogConfig().to_properties()
    for f in dataclasses.fields(LogConfig):
        name = f.metadata["key"]
        out[name] = ConfigKey(
            name, _KINDS[f.metadata["kind"]], defaults[name], f.metadata["doc"], Scope.TOPIC,
            _TOPIC_CHOICES.get(name) or _valid_of(f), tuple(f.metadata["broker"]),
            effect=f.metadata["effect"], check=_topic_check(name))
    for name, d in LogConfig.DEPRECATED.items():
        out[name] = ConfigKey(name, _KINDS[d.kind], d.default, d.doc, Scope.TOPIC,
                              synonyms=(d.broker,), effect=d.effect, deprecated=True,
                              check=_topic_check(name))
    for name, (target, _) in LogConfig.REDPANDA_ALIASES.items():
        key = out[target]
        out[name] = dataclasses.replace(
            key, name=name, doc=f"Redpanda's name of `{target}` (which see); Redpanda's "
            f"values are taken too.", synonyms=(), alias_of=target, check=_topic_check(name))
    return out


TOPIC_CONFIGS: dict[str, ConfigKey] = _topic_configs()


# ---- broker configs -----------------------------------------------------------------------

def _scaled_check(topic: str, factor: int) -> Callable[[str], None]:
    """A broker-wide topic default is checked as the topic config it sets."""
    def check(value: str) -> None:
        if factor != 1:
            try:
                value = str(int(value) * factor)
            except ValueError:
                raise errors.InvalidConfigurationError(
                    f"invalid value {value!r}: expected an integer") from None
        LogConfig.from_properties({topic: value})
    return check


_UNITS = {60_000: "minutes", 3_600_000: "hours"}


def _topic_default_configs() -> list[ConfigKey]:
    """The broker configs that are topic configs' server-wide defaults.
    Only the first of each topic config's synonyms is dynamic, as in Kafka
    (DynamicLogConfig takes ServerTopicConfigSynonyms' first name); the
    others (``log.retention.hours``, ``log.roll.hours``, ...) are read-only,
    and only the coarsest of a group has a default of its own."""
    out = []
    for topic in TOPIC_CONFIGS.values():
        if topic.deprecated or topic.alias_of:
            continue
        for i, name in enumerate(topic.synonyms):
            factor = LogConfig.broker_defaults()[name][1]
            last = i == len(topic.synonyms) - 1
            default = None
            if last:
                default = topic.default if factor == 1 else str(int(topic.default) // factor)
            out.append(ConfigKey(
                name, topic.type if factor == 1 else ConfigType.INT, default,
                f"The default of topic config `{topic.name}` for topics without their own"
                + ("" if factor == 1 else f", in {_UNITS[factor]}") + f". {topic.doc}",
                Scope.CLUSTER_WIDE if i == 0 else Scope.READ_ONLY,
                topic.valid if factor == 1 else "", topic.synonyms, effect=topic.effect,
                topic=topic.name, factor=factor, check=_scaled_check(topic.name, factor)))
    return out


def _number(kind: str, lo: float | None = None, hi: float | None = None):
    """The check of an int/long/double broker config with bounds."""
    def check(value: str) -> None:
        try:
            number = float(value) if kind == "double" else int(value)
        except ValueError:
            raise errors.InvalidConfigurationError(
                f"invalid value {value!r}: expected {kind}") from None
        if (lo is not None and number < lo) or (hi is not None and number > hi):
            raise errors.InvalidConfigurationError(
                f"invalid value {value!r}: must be at least {lo}"
                + ("" if hi is None else f" and at most {hi}"))
    return check


def _boolean(value: str) -> None:
    if value.strip().lower() not in ("true", "false"):
        raise errors.InvalidConfigurationError(f"invalid value {value!r}: expected true or false")


def _one_of(*choices: str):
    def check(value: str) -> None:
        if value.strip() not in choices:
            raise errors.InvalidConfigurationError(
                f"invalid value {value!r}: expected one of {', '.join(choices)}")
    return check


def _key(name: str, kind: str, default, doc: str, scope: Scope, valid: str = "",
         effect: str = "", lo=None, hi=None, choices: tuple = (), **kw) -> ConfigKey:
    check = None
    if choices:
        check = _one_of(*choices)
    elif kind in ("int", "long", "short", "double"):
        check = _number(kind, lo, hi)
    elif kind == "boolean":
        check = _boolean
    if not valid and lo is not None:
        valid = f"[{lo},...]" if hi is None else f"[{lo},...,{hi}]"
    if not valid and choices:
        valid = f"[{', '.join(choices)}]"
    return ConfigKey(name, _KINDS[kind], None if default is None else str(default), doc, scope,
                     valid, effect=effect, sensitive=kind == "password", check=check, **kw)


_ACCEPTED = "stored and described; kafkalite does not act on it"
_NO_REMOTE_TUNING = ("stored and described; kafkalite's tiered storage copies on a pool of "
                     "`remote_log_manager_copier_thread_pool_size` threads per worker (the server "
                     "setting, read at start) without a rate limit, and reads on a pool of 10 threads into a cache "
                     "of 4 segments (1 GiB at most) a partition, its bounds fixed: a remote fetch "
                     "waits up to the server's `remote_fetch_max_wait_ms` and a ListOffsets on "
                     "remote segments up to its own timeout_ms (v10), else the server's "
                     "`remote_list_offsets_request_timeout_ms`")
_THREADS = ("stored and described; kafkalite runs a worker process per broker and sizes "
            "its threads itself")
_LISTENER_EFFECT = ("stored and described; kafkalite's listeners, TLS and SASL settings are "
                    "read at start (`listeners`, `ssl_*`, `sasl_*`; users: `kafkalite users`)")
_CW, _PB = Scope.CLUSTER_WIDE, Scope.PER_BROKER

# Kafka's other dynamic broker configs (its DynamicBrokerConfig's reconfigurables,
# and DynamicConfig.Broker's throttle rates), all stored and described only.
_OTHER_DYNAMIC = [
    _key("log.cleaner.threads", "int", 1, "Threads compacting logs.", _CW, lo=0,
         effect=_THREADS),
    _key("log.cleaner.dedupe.buffer.size", "long", 134217728,
         "Memory the cleaners use to deduplicate keys.", _CW, effect=_ACCEPTED),
    _key("log.cleaner.io.buffer.load.factor", "double", 0.9,
         "Load factor of the cleaners' dedupe buffer.", _CW, effect=_ACCEPTED),
    _key("log.cleaner.io.buffer.size", "int", 524288, "The cleaners' I/O buffers.", _CW, lo=0,
         effect=_ACCEPTED),
    _key("log.cleaner.io.max.bytes.per.second", "double", DOUBLE_MAX,
         "Read and write rate limit of the cleaners.", _CW, effect=_ACCEPTED),
    _key("log.cleaner.backoff.ms", "long", 15000, "Sleep of a cleaner with nothing to clean.",
         _CW, lo=0, effect="kafkalite compacts a log when its dirty ratio is reached"),
    _key("num.io.threads", "int", 8, "Threads handling requests.", _CW, lo=1, effect=_THREADS),
    _key("num.network.threads", "int", 3, "Threads reading and writing connections.", _CW, lo=1,
         effect=_THREADS),
    _key("num.replica.fetchers", "int", 1, "Fetcher threads per source broker.", _CW,
         effect=_THREADS),
    _key("num.recovery.threads.per.data.dir", "int", 2,
         "Threads recovering logs at start-up (Kafka 4.0's default).", _CW, lo=1,
         effect=_THREADS),
    _key("background.threads", "int", 10, "Threads of background tasks.", _CW, lo=1,
         effect=_THREADS),
    _key("metric.reporters", "list", "org.apache.kafka.common.metrics.JmxReporter",
         "Classes reporting metrics.", _CW,
         effect="kafkalite serves its metrics on the metrics port (Prometheus)"),
    _key("max.connections", "int", INT_MAX, "Connections a broker accepts at most.", _CW,
         lo=0, effect=_ACCEPTED),
    _key("max.connections.per.ip", "int", INT_MAX, "Connections from one IP at most.", _CW,
         lo=0, effect=_ACCEPTED),
    _key("max.connections.per.ip.overrides", "string", "",
         "Per IP or host name overrides of the above (`host:count,...`).", _CW,
         effect=_ACCEPTED),
    _key("producer.id.expiration.ms", "int", 86400000,
         "How long a producer id's state is kept after its last write.", _CW, lo=1,
         effect=_ACCEPTED),
    _key("transaction.partition.verification.enable", "boolean", "true",
         "Verify that a partition is in the transaction before a transactional write "
         "(KIP-890).", _CW, effect="kafkalite always verifies"),
    _key("leader.replication.throttled.rate", "long", LONG_MAX,
         "Bytes/s of throttled replicas' replication a leader sends.", _CW, lo=0,
         effect="kafkalite does not throttle replication"),
    _key("follower.replication.throttled.rate", "long", LONG_MAX,
         "Bytes/s of throttled replicas' replication a follower fetches.", _CW, lo=0,
         effect="kafkalite does not throttle replication"),
    _key("replica.alter.log.dirs.io.max.bytes.per.second", "long", LONG_MAX,
         "Bytes/s of moves between log directories.", _CW, lo=0,
         effect="kafkalite keeps one log directory"),
    _key("remote.log.index.file.cache.total.size.bytes", "long", 1073741824,
         "Disk space of the remote log index cache.", _CW, lo=1,
         effect=_NO_REMOTE_TUNING),
    # acted on as the server's setting (STATIC_BROKER_CONFIG, _STATIC_OF_DYNAMIC)
    _key("remote.fetch.max.wait.ms", "int", 500,
         "How long a Fetch or ShareFetch waits for the remote segments it needs before it is "
         "answered without their records.", _CW, lo=1,
         effect=_ACCEPTED + " dynamically (the server's `remote_fetch_max_wait_ms`, read at "
         "start, applies)"),
    _key("remote.log.manager.copier.thread.pool.size", "int", 10,
         "Threads copying segments to remote storage.", _CW, lo=1, effect=_NO_REMOTE_TUNING),
    _key("remote.log.manager.expiration.thread.pool.size", "int", 10,
         "Threads deleting expired remote segments.", _CW, lo=1, effect=_NO_REMOTE_TUNING),
    _key("remote.log.manager.follower.thread.pool.size", "int", 2,
         "Threads of followers' remote log tasks.", _CW, lo=1, effect=_NO_REMOTE_TUNING),
    _key("remote.log.reader.threads", "int", 10, "Threads reading remote segments.", _CW,
         lo=1, effect=_NO_REMOTE_TUNING),
    _key("remote.log.manager.copy.max.bytes.per.second", "long", LONG_MAX,
         "Copy rate to remote storage.", _CW, lo=1, effect=_NO_REMOTE_TUNING),
    _key("remote.log.manager.fetch.max.bytes.per.second", "long", LONG_MAX,
         "Fetch rate from remote storage.", _CW, lo=1, effect=_NO_REMOTE_TUNING),
    # acted on as the server's setting (STATIC_BROKER_CONFIG, _STATIC_OF_DYNAMIC)
    _key("remote.list.offsets.request.timeout.ms", "long", 30000,
         "How long a ListOffsets by timestamp waits for the remote segments it needs when "
         "the request gives no timeout_ms (before v10, or 0).", _CW, lo=1,
         effect=_ACCEPTED + " dynamically (the server's "
         "`remote_list_offsets_request_timeout_ms`, read at start, applies)"),
]

# Kafka's dynamic listener and security configs: per broker. The SSL stores
# and passwords (Kafka's SslConfigs.RECONFIGURABLE_CONFIGS) only under a
# listener prefix (``listener.name.<listener>.ssl.keystore.password``).
_SECURITY = [
    _key("ssl.protocol", "string", "TLSv1.3", "TLS protocol of the SSL context.", _PB,
         effect=_LISTENER_EFFECT),
    _key("ssl.provider", "string", None, "Security provider of TLS connections.", _PB,
         effect=_LISTENER_EFFECT),
    _key("ssl.cipher.suites", "list", "", "TLS cipher suites allowed (empty: all).", _PB,
         effect=_LISTENER_EFFECT),
    _key("ssl.enabled.protocols", "list", "TLSv1.2,TLSv1.3", "TLS protocols allowed.", _PB,
         effect=_LISTENER_EFFECT),
    _key("ssl.keystore.type", "string", "JKS", "Key store format.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.keystore.location", "string", None, "Key store file.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.keystore.password", "password", None, "Key store password.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.key.password", "password", None, "Private key password.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.keystore.key", "password", None, "PEM private key.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.keystore.certificate.chain", "password", None, "PEM certificate chain.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.truststore.type", "string", "JKS", "Trust store format.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.truststore.location", "string", None, "Trust store file.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.truststore.password", "password", None, "Trust store password.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.truststore.certificates", "password", None, "PEM trusted certificates.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.keymanager.algorithm", "string", "SunX509", "Key manager algorithm.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.trustmanager.algorithm", "string", "PKIX", "Trust manager algorithm.", _PB,
         effect=_LISTENER_EFFECT, listener_only=True),
    _key("ssl.endpoint.identification.algorithm", "string", "https",
         "Host name verification of peers' certificates.", _PB, effect=_LISTENER_EFFECT),
    _key("ssl.secure.random.implementation", "string", None,
         "SecureRandom of TLS operations.", _PB, effect=_LISTENER_EFFECT),
    _key("ssl.engine.factory.class", "class", None, "Custom SSLEngine factory.", _PB,
         effect=_LISTENER_EFFECT),
    _key("sasl.jaas.config", "password", None, "JAAS login context of SASL connections.",
         _PB, effect=_LISTENER_EFFECT),
    _key("sasl.mechanism.inter.broker.protocol", "string", "GSSAPI",
         "SASL mechanism between brokers.", _PB, effect=_LISTENER_EFFECT),
    _key("sasl.kerberos.service.name", "string", None, "Kerberos principal name.", _PB,
         effect=_LISTENER_EFFECT),
    # the SASL login's Kerberos and token refresh settings (SaslConfigs)
    _key("sasl.kerberos.kinit.cmd", "string", "/usr/bin/kinit", "Kerberos kinit command path.",
         _PB, effect=_LISTENER_EFFECT),
    _key("sasl.kerberos.min.time.before.relogin", "long", 60000,
         "Login thread's sleep between refresh attempts (ms).", _PB, effect=_LISTENER_EFFECT),
    _key("sasl.kerberos.principal.to.local.rules", "list", "DEFAULT",
         "Rules mapping Kerberos principal names to short names.", _PB,
         effect=_LISTENER_EFFECT),
    _key("sasl.kerberos.ticket.renew.jitter", "double", 0.05,
         "Random jitter added to the ticket renewal time.", _PB, effect=_LISTENER_EFFECT),
    _key("sasl.kerberos.ticket.renew.window.factor", "double", 0.8,
         "Fraction of the ticket's lifetime after which the login thread renews it.", _PB,
         effect=_LISTENER_EFFECT),
    _key("sasl.login.refresh.buffer.seconds", "short", 300,
         "Time to keep before a credential's expiry when refreshing it.", _PB, lo=0, hi=3600,
         effect=_LISTENER_EFFECT),
    _key("sasl.login.refresh.min.period.seconds", "short", 60,
         "Least time the login refresh thread waits between refreshes.", _PB, lo=0, hi=900,
         effect=_LISTENER_EFFECT),
    _key("sasl.login.refresh.window.factor", "double", 0.8,
         "Fraction of a credential's lifetime after which it is refreshed.", _PB, lo=0.5,
         hi=1.0, effect=_LISTENER_EFFECT),
    _key("sasl.login.refresh.window.jitter", "double", 0.05,
         "Random jitter added to the login refresh time.", _PB, lo=0.0, hi=0.25,
         effect=_LISTENER_EFFECT),
    _key("principal.builder.class", "class",
         "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder",
         "Builds a connection's principal.", _PB, effect=_LISTENER_EFFECT),
]


@dataclass(frozen=True)
class BrokerInfo:
    """What is one broker's own, for its read-only configs (the controller knows)."""
    broker_id: int
    listeners: str                      # NAME://host:port of each listener it binds
    advertised_listeners: str           # NAME://host:port its clients are told
    rack: str | None
    native_bootstrap: str               # the node's native host:port (kafkalite's own)


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _server(field: str, fmt=str):
    return lambda cfg, broker: fmt(getattr(cfg, field))


def _protocol_map(cfg: ServerConfig, broker) -> str:
    return ",".join(f"{s.name}:{s.protocol}" for s in kafka_listeners(cfg))


# Read-only configs (and the static values of dynamic ones) from ServerConfig
# and the broker: Kafka name -> (type, Kafka's default, scope, value of
# (ServerConfig, BrokerInfo or None: a cluster-level view), doc).
_FROM_SERVER: dict[str, tuple] = {
    "broker.id": ("int", -1, Scope.READ_ONLY,
                  lambda cfg, b: None if b is None else str(b.broker_id),
                  "This broker's id: kafkalite's workers are brokers 0..n-1; the supervisor "
                  "(controller and coordinators, not among Metadata's brokers) answers as "
                  "1000 at the bootstrap address."),
    "node.id": ("int", -1, Scope.READ_ONLY,
                lambda cfg, b: None if b is None else str(b.broker_id), "As `broker.id`."),
    "broker.rack": ("string", None, Scope.READ_ONLY, lambda cfg, b: b and b.rack,
                    "The broker's rack: its node (`node-<node_id>`) in a cluster."),
    # read-only as in a KRaft broker (Kafka 4.x describes them so): listeners
    # are not reconfigured at runtime
    "listeners": ("string", "PLAINTEXT://:9092", Scope.READ_ONLY,
                  lambda cfg, b: b and b.listeners,
                  "The Kafka listeners this broker binds, with its own ports."),
    "advertised.listeners": ("string", None, Scope.READ_ONLY,
                             lambda cfg, b: b and b.advertised_listeners,
                             "The endpoints this broker's clients are told."),
    "listener.security.protocol.map": (
        "string", "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        _PB, _protocol_map, "Each listener's security protocol."),
    "ssl.client.auth": ("string", "none", _PB, _server("ssl_client_auth"),
                        "Mutual TLS: required, requested or none."),
    "sasl.enabled.mechanisms": ("list", "GSSAPI", _PB, _server("sasl_enabled_mechanisms"),
                                "SASL mechanisms the listeners offer."),
    "max.connection.creation.rate": (
        "int", INT_MAX, _CW,
        lambda cfg, b: str(cfg.max_connection_creation_rate or INT_MAX),
        "New connections per second each listener accepts."),
    "log.dirs": ("string", None, Scope.READ_ONLY,
                 lambda cfg, b: os.path.abspath(cfg.data_dir), "Where the logs live."),
    "log.dir": ("string", "/tmp/kafka-logs", Scope.READ_ONLY,
                lambda cfg, b: os.path.abspath(cfg.data_dir), "As `log.dirs`."),
    "authorizer.class.name": (
        "string", "", Scope.READ_ONLY,
        lambda cfg, b: "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
        if cfg.authorizer_enabled else "",
        "Set when the server checks ACLs (`authorizer_enabled`)."),
    "delete.topic.enable": ("boolean", "true", Scope.READ_ONLY, lambda cfg, b: "true",
                            "Topics may be deleted (always, in kafkalite)."),
    NATIVE_BOOTSTRAP_CONFIG: ("string", None, Scope.READ_ONLY,
                              lambda cfg, b: b and b.native_bootstrap,
                              "kafkalite's own: the native protocol's host:port, by which "
                              "kafkalite's clients given a Kafka listener's address find it."),
}
# The other ServerConfig settings Kafka has (config.py's SETTINGS names them):
# Kafka name -> (type, Kafka's default, bounds).
_SERVER_SETTINGS = {
    "num.partitions": ("int", 1, 1), "default.replication.factor": ("int", 1, None),
    "auto.create.topics.enable": ("boolean", "true", None),
    "remote.log.storage.system.enable": ("boolean", "false", None),
    "replica.lag.time.max.ms": ("long", 30000, None),
    "replica.fetch.wait.max.ms": ("int", 500, None),
    "max.incremental.fetch.session.cache.slots": ("int", 1000, 0),
    "broker.session.timeout.ms": ("int", 9000, None),
    "auto.leader.rebalance.enable": ("boolean", "true", None),
    "leader.imbalance.check.interval.seconds": ("long", 300, 1),
    "offsets.topic.num.partitions": ("int", 50, 1),
    "offsets.retention.minutes": ("int", 10080, 1),
    "group.min.session.timeout.ms": ("int", 6000, None),
    "group.max.session.timeout.ms": ("int", 1800000, None),
    "group.initial.rebalance.delay.ms": ("int", 3000, None),
    "group.consumer.session.timeout.ms": ("int", 45000, 1),
    "group.consumer.heartbeat.interval.ms": ("int", 5000, 1),
    "group.consumer.migration.policy": ("string", "bidirectional", None),
    "group.share.session.timeout.ms": ("int", 45000, 1),
    "group.share.heartbeat.interval.ms": ("int", 5000, 1),
    "group.share.record.lock.duration.ms": ("int", 30000, 1000),
    "group.share.delivery.count.limit": ("int", 5, 2),
    "group.share.partition.max.record.locks": ("int", 2000, 100),
    "share.coordinator.state.topic.num.partitions": ("int", 50, 1),
    "transaction.state.log.num.partitions": ("int", 50, 1),
    "transaction.max.timeout.ms": ("int", 900000, 1),
    "transactional.id.expiration.ms": ("int", 604800000, 1),
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": ("int", 10000, 1),
    "connections.max.reauth.ms": ("long", 0, None),
    "connection.failed.authentication.delay.ms": ("int", 100, 0),
    "connections.max.idle.ms": ("long", 600000, None),
    "super.users": ("string", None, None),
    "allow.everyone.if.no.acl.found": ("boolean", "false", None),
    "quota.window.num": ("int", 11, 1),
    "quota.window.size.seconds": ("int", 1, 1),
}
# Dynamic configs kafkalite acts on as server settings, read at start: their
# STATIC_BROKER_CONFIG values, Kafka name -> ServerConfig field.
_STATIC_OF_DYNAMIC = {
    "remote.fetch.max.wait.ms": "remote_fetch_max_wait_ms",
    "remote.list.offsets.request.timeout.ms": "remote_list_offsets_request_timeout_ms",
}
# Kafka names config.py's loader takes that are not broker configs in Kafka
# 4.x (group configs there): described nowhere, set only in the config file.
NOT_BROKER_CONFIGS = frozenset({"share.auto.offset.reset", "errors.deadletterqueue.topic.name"})


# Read-only values (and the static values of dynamic configs) kept beside
# their keys: name -> value of (ServerConfig, BrokerInfo or None).
_VALUE_OF: dict[str, Callable] = {}


def _server_configs() -> list[ConfigKey]:
    fields = {alias: name for name, s in SETTINGS.items() for alias in s.kafka}
    out = []
    for name, (kind, default, scope, value, doc) in _FROM_SERVER.items():
        effect = _LISTENER_EFFECT if scope is _PB else (
            _ACCEPTED + " (the server's `max_connection_creation_rate` applies)"
            if scope is _CW else "")
        out.append(_key(name, kind, default, doc, scope, effect=effect))
        _VALUE_OF[name] = value
    for name, (kind, default, lo) in _SERVER_SETTINGS.items():
        field = fields[name]
        out.append(_key(name, kind, default, SETTINGS[field].doc, Scope.READ_ONLY, lo=lo))
        _VALUE_OF[name] = _server(field, _bool if kind == "boolean" else str)
    for name, field in _STATIC_OF_DYNAMIC.items():
        _VALUE_OF[name] = _server(field)
    return out


BROKER_CONFIGS: dict[str, ConfigKey] = {
    k.name: k for k in (*_topic_default_configs(), *_server_configs(), *_OTHER_DYNAMIC,
                        *_SECURITY)}


def topic_config(name: str) -> ConfigKey | None:
    return TOPIC_CONFIGS.get(name)


def broker_config(name: str) -> ConfigKey | None:
    """The key of a broker config name; ``listener.name.<l>.<config>`` is
    the per-broker override of a dynamic listener or security config for
    one listener (named as Kafka names it)."""
    key = BROKER_CONFIGS.get(name)
    if key is not None:
        return key
    m = _LISTENER_CONFIG.match(name)
    base = BROKER_CONFIGS.get(m.group(2)) if m else None
    if base is None or base.scope is not Scope.PER_BROKER:
        return None
    return dataclasses.replace(base, name=name, synonyms=(name, base.name), listener_only=False)


# ---- values by where they come from ---------------------------------------------------------

_DEFAULTS = {name: k.default for name, k in BROKER_CONFIGS.items() if k.default is not None}


def static_configs(config: ServerConfig, broker: BrokerInfo | None) -> dict[str, str]:
    """STATIC_BROKER_CONFIG: the server's settings under Kafka's names
    where they are not Kafka's defaults (or are the broker's own, as its
    id), and the server-wide topic defaults (``[topic_defaults]``, Kafka's
    ``log.*`` names) under each topic config's first broker synonym."""
    out = {}
    for name, value_of in _VALUE_OF.items():
        value = value_of(config, broker)
        if value is not None and (value != BROKER_CONFIGS[name].default
                                  or name in ("broker.id", "node.id")):
            out[name] = value
    given = LogConfig.from_properties(config.topic_defaults).to_properties()
    for topic_name in config.topic_defaults:
        key = TOPIC_CONFIGS[topic_name]
        if key.deprecated:          # ignored, and not a broker config in Kafka 4
            continue
        out[key.synonyms[0] if key.synonyms else topic_name] = given[topic_name]
    return out


@dataclass
class Layers:
    """One broker's config values by where they come from, highest
    precedence first (DEFAULT_CONFIG, each key's default, is implied)."""
    dynamic_broker: dict[str, str]
    dynamic_default: dict[str, str]
    static: dict[str, str]

    def sources(self):
        yield ConfigSource.DYNAMIC_BROKER_CONFIG, self.dynamic_broker
        yield ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG, self.dynamic_default
        yield ConfigSource.STATIC_BROKER_CONFIG, self.static
        yield ConfigSource.DEFAULT_CONFIG, _DEFAULTS

    def synonyms(self, names: Iterable[str]) -> list[tuple[str, str | None, ConfigSource]]:
        """(name, value, source) of each of ``names`` at each level it is set,
        level by level (Kafka's ConfigHelper order)."""
        names = tuple(names)
        return [(n, values[n], source) for source, values in self.sources()
                for n in names if n in values]

    def topic_defaults(self) -> dict[str, str]:
        """The topic configs the dynamic broker configs set (this broker's
        over the cluster's): the defaults of topics without their own."""
        return {**dynamic_topic_defaults(self.dynamic_default),
                **dynamic_topic_defaults(self.dynamic_broker)}


def dynamic_topic_defaults(dynamic: dict[str, str]) -> dict[str, str]:
    """Dynamic broker configs -> the topic configs they are the defaults of."""
    out = {}
    for name, value in dynamic.items():
        key = BROKER_CONFIGS.get(name)
        if key is not None and key.topic is not None and key.dynamic:
            out[key.topic] = value
    return out


def effective_log_config(config: ServerConfig, layers: Layers, overrides: dict) -> LogConfig:
    """A topic's LogConfig on a broker: its own configs, then the dynamic
    broker-wide defaults, then the server's, then Kafka's."""
    base = LogConfig.from_properties(layers.topic_defaults(), base=config.log_config())
    return LogConfig.from_properties(overrides, base=base)


# ---- DescribeConfigs ----------------------------------------------------------------------

def _entry(key: ConfigKey, value, source: ConfigSource, synonyms: list, read_only: bool,
           include_synonyms: bool, include_documentation: bool) -> dict:
    hide = key.sensitive
    return {"name": key.name, "value": None if hide else value, "read_only": read_only,
            "is_default": source == ConfigSource.DEFAULT_CONFIG, "config_source": source,
            "is_sensitive": key.sensitive,
            "synonyms": [{"name": n, "value": None if hide else v, "source": s}
                         for n, v, s in synonyms] if include_synonyms else [],
            "config_type": key.type, "documentation": key.doc if include_documentation else None}


def describe_topic(overrides: dict, effective: LogConfig, layers: Layers, keys=None,
                   include_synonyms: bool = False, include_documentation: bool = False) -> list:
    """A topic's entries: every topic config (a deprecated one only when
    the topic has it), with its source and synonyms."""
    values = effective.to_properties()
    names = [n for n, k in TOPIC_CONFIGS.items()
             if not (k.deprecated or k.alias_of) or n in overrides]
    out = []
    for name in names:
        if keys and name not in keys:
            continue
        key = TOPIC_CONFIGS[name]
        synonyms = [(name, overrides[name], ConfigSource.DYNAMIC_TOPIC_CONFIG)] \
            if name in overrides else []
        synonyms += layers.synonyms(key.synonyms or (name,))
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        value = overrides.get(name, key.default) if key.deprecated or key.alias_of \
            else values[name]
        out.append(_entry(key, value, source, synonyms, False, include_synonyms,
                          include_documentation))
    return out


def describe_broker(layers: Layers, keys=None, include_synonyms: bool = False,
                    include_documentation: bool = False, cluster_default: bool = False) -> list:
    """A broker's entries (``cluster_default``: those of the resource "",
    Kafka's cluster-wide dynamic defaults only). A broker config's value is
    its own at the highest level it is set; its synonyms are its unit
    variants from itself on (Kafka drops those before it)."""
    if cluster_default:
        names = list(layers.dynamic_default)
    else:
        names = list(BROKER_CONFIGS) + sorted(
            n for n in {*layers.dynamic_broker, *layers.dynamic_default}
            if n not in BROKER_CONFIGS)
    out = []
    for name in names:
        if keys and name not in keys:
            continue
        key = broker_config(name)
        if key is None:                 # stored by an older version that knew it
            continue
        synonyms = layers.synonyms(key.synonyms or (name,))
        if cluster_default:
            synonyms = [s for s in synonyms if s[2] == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]
        while synonyms and synonyms[0][0] != name:
            synonyms.pop(0)
        value = synonyms[0][1] if synonyms else None
        source = synonyms[0][2] if synonyms else ConfigSource.DEFAULT_CONFIG
        out.append(_entry(key, value, source, synonyms, key.scope is Scope.READ_ONLY,
                          include_synonyms, include_documentation))
    return out


# ---- validation ---------------------------------------------------------------------------

def check_topic_configs(configs: dict, base: LogConfig, topic: str | None = None,
                        before: dict | None = None, *, tiered_storage: bool = False,
                        iceberg_unshared: str | None = None) -> dict:
    """The configs a topic is created or altered with (``before``: those it
    had), checked against every topic config Kafka has; returns them to
    store. A deprecated one newly given is logged (what becomes of it) and
    kept, as Kafka 3.x keeps it. ``tiered_storage``: the brokers have a
    remote store (``remote.log.storage.system.enable``); without it
    ``remote.storage.enable=true`` is refused with Kafka's message.
    an ``iceberg.mode`` other than off is refused where pyiceberg (or, decoding, fastavro)
    cannot be imported, and on a cluster whose nodes share no warehouse
    (``iceberg_unshared``: why, ServerConfig.iceberg_unshared)."""
    nulls = sorted(n for n, v in configs.items() if v is None)
    if nulls:
        raise errors.InvalidConfigurationError(
            f"Null value not supported for topic configs: {','.join(nulls)}")
    for name in configs:
        key = TOPIC_CONFIGS.get(name)
        if key is None:
            raise errors.InvalidConfigurationError(f"unknown topic config {name!r}")
        if key.deprecated and (before or {}).get(name) != configs[name]:
            log.warning("topic %s: config %s=%s is deprecated and %s", topic or "?", name,
                        configs[name], key.effect)
    try:
        config = LogConfig.from_properties(configs, base=base)
    except errors.KafkaError as exc:
        raise errors.InvalidConfigurationError(exc.message) from None
    if config.remote_storage_enable and not tiered_storage:
        raise errors.InvalidConfigurationError(
            "Tiered Storage functionality is disabled in the broker. Topic cannot be configured "
            "with remote log storage.")
    if config.iceberg_mode != ICEBERG_OFF:
        missing = iceberg_unavailable(config.iceberg_mode)
        if missing:
            raise errors.InvalidConfigurationError(
                f"invalid value {config.iceberg_mode} for iceberg.mode: Iceberg topics need "
                f"pyiceberg (and fastavro to decode values) on "
                f"the broker ({missing}; pip install 'kafkalite[connect]')")
        if iceberg_unshared and LogConfig.from_properties(
                before or {}, base=base).iceberg_mode == ICEBERG_OFF:
            # a topic made Iceberg here would have no table any node could keep
            raise errors.InvalidConfigurationError(
                f"invalid value {config.iceberg_mode} for iceberg.mode: {iceberg_unshared}")
    was_tiered = LogConfig.from_properties(before or {}, base=base).remote_storage_enable
    if was_tiered and not config.remote_storage_enable:
        # Kafka turns it off only with remote.log.copy.disable and
        # remote.log.delete.on.disable, which kafkalite does not act on yet
        raise errors.InvalidConfigurationError(
            "It is invalid to disable remote storage without deleting remote data: kafkalite "
            "cannot turn remote.storage.enable off on a topic yet")
    return {name: str(value) for name, value in configs.items()}


def check_broker_configs(configs: dict, per_broker: bool) -> None:
    """A broker resource's dynamic configs as they would become, checked as
    Kafka's DynamicBrokerConfig checks them; InvalidRequestError otherwise."""
    unknown = sorted(n for n in configs if broker_config(n) is None)
    if unknown:
        raise errors.InvalidRequestError(f"Unknown broker configs: {', '.join(unknown)}")
    keys = {n: broker_config(n) for n in configs}
    fixed = sorted(n for n, k in keys.items() if not k.dynamic)
    if fixed:
        raise errors.InvalidRequestError(
            f"Cannot update these configs dynamically: {', '.join(fixed)} (they are "
            f"read-only: set them in the server's config file)")
    bare = sorted(n for n, k in keys.items() if k.listener_only)
    if bare:
        raise errors.InvalidRequestError(
            f"These security configs can be dynamically updated only per-listener using the "
            f"listener prefix ({LISTENER_PREFIX}<listener>.<config>): {', '.join(bare)}")
    if not per_broker:
        only = sorted(n for n, k in keys.items() if k.scope is Scope.PER_BROKER)
        if only:
            raise errors.InvalidRequestError(
                f"Cannot update these configs at default cluster level, broker id must be "
                f"specified: {', '.join(only)}")
    for name, value in configs.items():
        key = keys[name]
        if key.check is not None:
            try:
                key.check(value)
            except errors.KafkaError as exc:
                raise errors.InvalidRequestError(
                    f"Invalid value {value!r} for configuration {name}: "
                    f"{exc.message}") from None


def is_list(resource_is_topic: bool, name: str) -> bool:
    key = topic_config(name) if resource_is_topic else broker_config(name)
    return key is not None and key.type == ConfigType.LIST


def loggable(configs: dict, resource_is_topic: bool) -> dict:
    """Configs as they may be logged: sensitive values hidden."""
    out = {}
    for name, value in configs.items():
        key = topic_config(name) if resource_is_topic else broker_config(name)
        out[name] = "[hidden]" if key is not None and key.sensitive else value
    return out
