"""The config registry (server/config_registry.py) against Kafka 4.x's
documented configs: every topic config with its type and default, the
broker configs with their update mode, synonyms in Kafka's order, the
checks Kafka makes, where a described value comes from, and the dynamic
broker configs kept in the metadata across a restart of the store. No
processes: the registry is data and functions."""
from __future__ import annotations

import logging

import pytest

from kafkalite import errors
from kafkalite.protocol.enums import ConfigSource, ConfigType
from kafkalite.server import config_registry as registry
from kafkalite.server.config import SETTINGS, ServerConfig
from kafkalite.server.config_registry import Layers, Scope
from kafkalite.server.controller.metadata import MetadataStore
from kafkalite.storage.config import LogConfig

pytestmark = pytest.mark.unit

T = ConfigType
LONG_MAX = str((1 << 63) - 1)

# Kafka 4.x's topic configs (the generated topic_config.html): type, default.
KAFKA_TOPIC_CONFIGS = {
    "cleanup.policy": (T.LIST, "delete"),
    "compression.gzip.level": (T.INT, "-1"),
    "compression.lz4.level": (T.INT, "9"),
    "compression.type": (T.STRING, "producer"),
    "compression.zstd.level": (T.INT, "3"),
    "delete.retention.ms": (T.LONG, "86400000"),
    "file.delete.delay.ms": (T.LONG, "60000"),
    "flush.messages": (T.LONG, LONG_MAX),
    "flush.ms": (T.LONG, LONG_MAX),
    "follower.replication.throttled.replicas": (T.LIST, ""),
    "index.interval.bytes": (T.INT, "4096"),
    "leader.replication.throttled.replicas": (T.LIST, ""),
    "local.retention.bytes": (T.LONG, "-2"),
    "local.retention.ms": (T.LONG, "-2"),
    "max.compaction.lag.ms": (T.LONG, LONG_MAX),
    "max.message.bytes": (T.INT, "1048588"),
    "message.timestamp.after.max.ms": (T.LONG, "3600000"),
    "message.timestamp.before.max.ms": (T.LONG, LONG_MAX),
    "message.timestamp.type": (T.STRING, "CreateTime"),
    "min.cleanable.dirty.ratio": (T.DOUBLE, "0.5"),
    "min.compaction.lag.ms": (T.LONG, "0"),
    "min.insync.replicas": (T.INT, "1"),
    "preallocate": (T.BOOLEAN, "false"),
    "remote.log.copy.disable": (T.BOOLEAN, "false"),
    "remote.log.delete.on.disable": (T.BOOLEAN, "false"),
    "remote.storage.enable": (T.BOOLEAN, "false"),
    "retention.bytes": (T.LONG, "-1"),
    "retention.ms": (T.LONG, "604800000"),
    "segment.bytes": (T.INT, "1073741824"),
    "segment.index.bytes": (T.INT, "10485760"),
    "segment.jitter.ms": (T.LONG, "0"),
    "segment.ms": (T.LONG, "604800000"),
    "unclean.leader.election.enable": (T.BOOLEAN, "false"),
}

# Topic configs that are not Kafka's: Redpanda's Iceberg topics (test_iceberg_topics.py).
OWN_TOPIC_CONFIGS = {
    "iceberg.mode": (T.STRING, "off"),
    "iceberg.target.lag.ms": (T.LONG, "60000"),
    "iceberg.invalid.record.action": (T.STRING, "dlq_table"),
    "iceberg.partition.spec": (T.STRING, "(hour(redpanda.timestamp))"),
}
# Redpanda's names of them (described only when a topic sets them)
REDPANDA_TOPIC_CONFIGS = {
    "redpanda.iceberg.mode": (T.STRING, "off"),
    "redpanda.iceberg.target.lag.ms": (T.LONG, "60000"),
    "redpanda.iceberg.invalid.record.action": (T.STRING, "dlq_table"),
    "redpanda.iceberg.partition.spec": (T.STRING, "(hour(redpanda.timestamp))"),
}

# A sample of Kafka's broker configs: type, default, update mode.
KAFKA_BROKER_CONFIGS = {
    "log.retention.ms": (T.LONG, None, Scope.CLUSTER_WIDE),
    "log.retention.minutes": (T.INT, None, Scope.READ_ONLY),
    "log.retention.hours": (T.INT, "168", Scope.READ_ONLY),
    "log.roll.ms": (T.LONG, None, Scope.CLUSTER_WIDE),
    "log.roll.hours": (T.INT, "168", Scope.READ_ONLY),
    "log.segment.bytes": (T.INT, "1073741824", Scope.CLUSTER_WIDE),
    "message.max.bytes": (T.INT, "1048588", Scope.CLUSTER_WIDE),
    "log.cleanup.policy": (T.LIST, "delete", Scope.CLUSTER_WIDE),
    "log.cleaner.min.cleanable.ratio": (T.DOUBLE, "0.5", Scope.CLUSTER_WIDE),
    "log.segment.delete.delay.ms": (T.LONG, "60000", Scope.CLUSTER_WIDE),
    "min.insync.replicas": (T.INT, "1", Scope.CLUSTER_WIDE),
    "unclean.leader.election.enable": (T.BOOLEAN, "false", Scope.CLUSTER_WIDE),
    "compression.type": (T.STRING, "producer", Scope.CLUSTER_WIDE),
    "log.cleaner.threads": (T.INT, "1", Scope.CLUSTER_WIDE),
    "num.io.threads": (T.INT, "8", Scope.CLUSTER_WIDE),
    "max.connections": (T.INT, "2147483647", Scope.CLUSTER_WIDE),
    "max.connection.creation.rate": (T.INT, "2147483647", Scope.CLUSTER_WIDE),
    "listeners": (T.STRING, "PLAINTEXT://:9092", Scope.READ_ONLY),        # as KRaft brokers
    "advertised.listeners": (T.STRING, None, Scope.READ_ONLY),
    "ssl.keystore.password": (T.PASSWORD, None, Scope.PER_BROKER),
    "sasl.enabled.mechanisms": (T.LIST, "GSSAPI", Scope.PER_BROKER),
    "broker.id": (T.INT, "-1", Scope.READ_ONLY),
    "node.id": (T.INT, "-1", Scope.READ_ONLY),
    "log.dirs": (T.STRING, None, Scope.READ_ONLY),
    "num.partitions": (T.INT, "1", Scope.READ_ONLY),
    "default.replication.factor": (T.INT, "1", Scope.READ_ONLY),
    "auto.create.topics.enable": (T.BOOLEAN, "true", Scope.READ_ONLY),
    "offsets.topic.num.partitions": (T.INT, "50", Scope.READ_ONLY),
    "replica.lag.time.max.ms": (T.LONG, "30000", Scope.READ_ONLY),
    "group.initial.rebalance.delay.ms": (T.INT, "3000", Scope.READ_ONLY),
    "transaction.max.timeout.ms": (T.INT, "900000", Scope.READ_ONLY),
}


def test_every_topic_config_kafka_documents_is_known_with_its_type_and_default():
    known = {n: (k.type, k.default) for n, k in registry.TOPIC_CONFIGS.items()
             if not k.deprecated and not k.alias_of}
    assert known == {**KAFKA_TOPIC_CONFIGS, **OWN_TOPIC_CONFIGS}
    assert {n: (k.type, k.default) for n, k in registry.TOPIC_CONFIGS.items()
            if k.alias_of} == REDPANDA_TOPIC_CONFIGS
    assert set(LogConfig.keys()) == set(KAFKA_TOPIC_CONFIGS) | set(OWN_TOPIC_CONFIGS)


@pytest.mark.parametrize("name", sorted(KAFKA_BROKER_CONFIGS))
def test_broker_configs_have_kafkas_type_default_and_update_mode(name):
    key = registry.broker_config(name)
    assert (key.type, key.default, key.scope) == KAFKA_BROKER_CONFIGS[name]
    assert key.sensitive == (key.type == ConfigType.PASSWORD)
    assert key.doc


def test_every_kafka_name_the_server_reads_is_a_broker_config_it_describes():
    aliases = {a for s in SETTINGS.values() for a in s.kafka}
    assert aliases - set(registry.BROKER_CONFIGS) == registry.NOT_BROKER_CONFIGS
    assert set(LogConfig.broker_defaults()) <= set(registry.BROKER_CONFIGS)


def test_synonyms_are_kafkas_in_its_order():
    assert registry.topic_config("retention.ms").synonyms == (
        "log.retention.ms", "log.retention.minutes", "log.retention.hours")
    assert registry.topic_config("segment.ms").synonyms == ("log.roll.ms", "log.roll.hours")
    assert registry.topic_config("max.message.bytes").synonyms == ("message.max.bytes",)
    assert registry.topic_config("flush.ms").synonyms == (
        "log.flush.interval.ms", "log.flush.scheduler.interval.ms")
    assert registry.topic_config("remote.storage.enable").synonyms == ()
    hours = registry.broker_config("log.retention.hours")
    assert (hours.topic, hours.factor) == ("retention.ms", 3_600_000)
    # only the first of a topic config's broker configs may be set dynamically
    assert registry.broker_config("log.retention.ms").dynamic and not hours.dynamic


def test_which_dynamic_configs_act_and_which_are_accepted_only():
    applied = {n for n, k in registry.BROKER_CONFIGS.items() if k.dynamic and k.applied}
    assert {"log.retention.ms", "log.segment.bytes", "message.max.bytes", "log.cleanup.policy",
            "min.insync.replicas", "unclean.leader.election.enable"} <= applied
    assert all(registry.broker_config(n).topic for n in applied)
    for name in ("compression.type", "log.cleaner.threads", "ssl.enabled.protocols",
                 "log.preallocate"):
        assert not registry.broker_config(name).applied and registry.broker_config(name).effect
    for name in ("file.delete.delay.ms", "preallocate", "compression.type",
                 "remote.log.copy.disable", "leader.replication.throttled.replicas"):
        assert registry.topic_config(name).effect, name     # the docs say why
    for name in ("remote.storage.enable", "local.retention.ms", "local.retention.bytes"):
        assert not registry.topic_config(name).effect, name     # tiered storage acts on them


def test_deprecated_topic_configs_are_accepted_with_a_warning_and_ignored(caplog):
    with caplog.at_level(logging.WARNING, logger="kafkalite.configs"):
        stored = registry.check_topic_configs(
            {"message.format.version": "3.0-IV1", "message.downconversion.enable": "false",
             "message.timestamp.difference.max.ms": "1000"}, LogConfig(), "orders")
    assert stored["message.format.version"] == "3.0-IV1"
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 3 and all("deprecated" in w and "ignored" in w for w in warned)
    assert LogConfig.from_properties(stored) == LogConfig()
    with pytest.raises(errors.InvalidConfigurationError, match="message.format.version"):
        registry.check_topic_configs({"message.format.version": "newest"}, LogConfig())
    with pytest.raises(errors.InvalidConfigurationError, match="unknown topic config"):
        registry.check_topic_configs({"file.delete.delay": "1"}, LogConfig())
    with pytest.raises(errors.InvalidConfigurationError, match="Null value"):
        registry.check_topic_configs({"retention.ms": None}, LogConfig())


# Kafka 3.x's message.format.version takes any version its MetadataVersion
# parses: trailing segments past major.minor (0.x: past the third) are
# ignored, an -IV suffix names an inter-broker protocol version.
@pytest.mark.parametrize("value", ["0.10.0.0", "0.10.0", "0.10.0-IV1", "0.8.2", "0.11.0.3",
                                   "1.0", "2.8.1", "2.8", "3.0-IV1", "3.9"])
def test_message_format_version_takes_the_versions_kafka_3_takes(value):
    stored = registry.check_topic_configs({"message.format.version": value}, LogConfig())
    assert stored == {"message.format.version": value}


@pytest.mark.parametrize("value", ["newest", "0.7", "0.10", "9.9", "3.0-IV99x", ""])
def test_message_format_version_refuses_what_kafka_3_refuses(value):
    with pytest.raises(errors.InvalidConfigurationError, match="message.format.version"):
        registry.check_topic_configs({"message.format.version": value}, LogConfig())


# Kafka 4.x's dynamic broker configs that kafkalite refused as unknown: its
# DynamicListenerConfig's SASL settings (per broker) and DynamicRemoteLogConfig's
# thread pools (cluster-wide); documented with that update mode, so accepted.
KAFKA_DYNAMIC_BROKER_CONFIGS = {
    "sasl.kerberos.kinit.cmd": (T.STRING, "/usr/bin/kinit", Scope.PER_BROKER),
    "sasl.kerberos.min.time.before.relogin": (T.LONG, "60000", Scope.PER_BROKER),
    "sasl.kerberos.principal.to.local.rules": (T.LIST, "DEFAULT", Scope.PER_BROKER),
    "sasl.kerberos.ticket.renew.jitter": (T.DOUBLE, "0.05", Scope.PER_BROKER),
    "sasl.kerberos.ticket.renew.window.factor": (T.DOUBLE, "0.8", Scope.PER_BROKER),
    "sasl.login.refresh.buffer.seconds": (T.SHORT, "300", Scope.PER_BROKER),
    "sasl.login.refresh.min.period.seconds": (T.SHORT, "60", Scope.PER_BROKER),
    "sasl.login.refresh.window.factor": (T.DOUBLE, "0.8", Scope.PER_BROKER),
    "sasl.login.refresh.window.jitter": (T.DOUBLE, "0.05", Scope.PER_BROKER),
    "remote.log.manager.copier.thread.pool.size": (T.INT, "10", Scope.CLUSTER_WIDE),
    "remote.log.manager.expiration.thread.pool.size": (T.INT, "10", Scope.CLUSTER_WIDE),
    "remote.log.manager.follower.thread.pool.size": (T.INT, "2", Scope.CLUSTER_WIDE),
    "remote.log.reader.threads": (T.INT, "10", Scope.CLUSTER_WIDE),
}


@pytest.mark.parametrize("name", sorted(KAFKA_DYNAMIC_BROKER_CONFIGS))
def test_every_dynamic_broker_config_kafka_documents_is_accepted(name):
    key = registry.broker_config(name)
    assert key is not None, f"{name} is unknown"
    assert (key.type, key.default, key.scope) == KAFKA_DYNAMIC_BROKER_CONFIGS[name]
    assert key.doc and key.effect                     # stored; the docs say why it does nothing
    registry.check_broker_configs({name: key.default}, per_broker=True)
    with pytest.raises(errors.InvalidRequestError, match=name):
        registry.check_broker_configs({name: "not-a-value"} if key.type != T.STRING and
                                      key.type != T.LIST else {name: "x"}, per_broker=False)


def test_topic_config_checks_are_kafkas():
    ok = {"file.delete.delay.ms": "0", "compression.gzip.level": "-1",
          "compression.zstd.level": "-5", "leader.replication.throttled.replicas": "0:1,1:2",
          "follower.replication.throttled.replicas": "*", "local.retention.ms": "-2",
          "cleanup.policy": ""}
    registry.check_topic_configs(ok, LogConfig())
    config = LogConfig.from_properties({"cleanup.policy": ""})
    assert not config.delete and not config.compact         # KIP-1161: kept for ever
    for name, value in (("compression.gzip.level", "0"), ("compression.lz4.level", "18"),
                        ("leader.replication.throttled.replicas", "0-1"),
                        ("local.retention.ms", "-3"),
                        ("preallocate", "yes"), ("cleanup.policy", "delete,shred")):
        with pytest.raises(errors.InvalidConfigurationError, match=name):
            registry.check_topic_configs({name: value}, LogConfig())
    # tiered storage: Kafka's refusal on a broker without it, and its value checks with it
    with pytest.raises(errors.InvalidConfigurationError,
                       match="Tiered Storage functionality is disabled in the broker"):
        registry.check_topic_configs({"remote.storage.enable": "true"}, LogConfig())
    registry.check_topic_configs({"remote.storage.enable": "true"}, LogConfig(),
                                 tiered_storage=True)
    with pytest.raises(errors.InvalidConfigurationError, match="invalid to disable remote storage"):
        registry.check_topic_configs({}, LogConfig(), before={"remote.storage.enable": "true"},
                                     tiered_storage=True)
    for bad, why in (({"cleanup.policy": "compact"}, "unsupported for the compacted topics"),
                     ({"retention.ms": "1000", "local.retention.ms": "2000"},
                      "must not be more than retention.ms"),
                     ({"retention.bytes": "1000", "local.retention.bytes": "-1"},
                      "must not be -1 as retention.bytes")):
        with pytest.raises(errors.InvalidConfigurationError, match=why):
            registry.check_topic_configs({"remote.storage.enable": "true", **bad}, LogConfig(),
                                         tiered_storage=True)


def test_broker_config_alterations_are_checked_as_kafka_checks_them():
    registry.check_broker_configs({"log.retention.ms": "3600000", "log.cleaner.threads": "2"},
                                  per_broker=False)
    registry.check_broker_configs(
        {"listener.name.external.ssl.keystore.password": "secret", "ssl.client.auth":
         "required"}, per_broker=True)
    refused = [
        ({"num.partitions": "3"}, True, "Cannot update these configs dynamically"),
        ({"log.retention.hours": "3"}, True, "Cannot update these configs dynamically"),
        ({"no.such.config": "1"}, True, "Unknown broker configs"),
        ({"listener.name.x.num.partitions": "1"}, True, "Unknown broker configs"),
        ({"ssl.keystore.password": "s"}, True, "only per-listener"),
        ({"advertised.listeners": "PLAINTEXT://h:1"}, True, "Cannot update these configs dynamically"),
        ({"ssl.client.auth": "required"}, False, "broker id must be specified"),
        ({"log.retention.ms": "-2"}, False, "log.retention.ms"),
        ({"log.cleaner.threads": "many"}, False, "log.cleaner.threads"),
        ({"message.max.bytes": "-1"}, True, "message.max.bytes"),
    ]
    for configs, per_broker, says in refused:
        with pytest.raises(errors.InvalidRequestError, match=says):
            registry.check_broker_configs(configs, per_broker)


def test_a_topics_value_comes_from_the_highest_level_that_sets_it():
    layers = Layers({"log.retention.ms": "3000"}, {"log.retention.ms": "2000",
                                                    "log.segment.bytes": "1048576"},
                    {"log.retention.ms": "1000", "min.insync.replicas": "2"})
    overrides = {"cleanup.policy": "compact", "message.format.version": "2.8"}
    effective = registry.effective_log_config(ServerConfig(), layers, overrides)
    entries = {e["name"]: e for e in registry.describe_topic(
        overrides, effective, layers, include_synonyms=True, include_documentation=True)}
    retention = entries["retention.ms"]
    assert (retention["value"], retention["config_source"]) == \
        ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG)
    assert [(s["name"], s["value"], s["source"]) for s in retention["synonyms"]] == [
        ("log.retention.ms", "3000", ConfigSource.DYNAMIC_BROKER_CONFIG),
        ("log.retention.ms", "2000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "1000", ConfigSource.STATIC_BROKER_CONFIG),
        ("log.retention.hours", "168", ConfigSource.DEFAULT_CONFIG)]
    assert retention["config_type"] == ConfigType.LONG and retention["documentation"]
    assert (entries["segment.bytes"]["value"], entries["segment.bytes"]["config_source"]) == \
        ("1048576", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert entries["min.insync.replicas"]["config_source"] == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["cleanup.policy"]["config_source"] == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert entries["cleanup.policy"]["synonyms"][0]["name"] == "cleanup.policy"
    assert entries["index.interval.bytes"]["config_source"] == ConfigSource.DEFAULT_CONFIG
    assert entries["remote.storage.enable"]["synonyms"] == []
    # a deprecated config is shown only where set, with the value given
    assert entries["message.format.version"]["value"] == "2.8"
    assert "message.downconversion.enable" not in entries
    assert set(KAFKA_TOPIC_CONFIGS) <= set(entries)


def test_a_brokers_entries_give_sources_synonyms_and_hide_passwords():
    layers = Layers({"listener.name.external.ssl.key.password": "secret",
                     "log.retention.ms": "5000"},
                    {"log.retention.ms": "4000"}, {"num.partitions": "3"})
    entries = {e["name"]: e for e in registry.describe_broker(layers, include_synonyms=True)}
    assert set(registry.BROKER_CONFIGS) < set(entries)
    retention = entries["log.retention.ms"]
    assert (retention["value"], retention["config_source"], retention["read_only"]) == \
        ("5000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
    # a broker config's synonyms start at itself, as Kafka lists them
    hours = entries["log.retention.hours"]
    assert [(s["name"], s["source"]) for s in hours["synonyms"]] == [
        ("log.retention.hours", ConfigSource.DEFAULT_CONFIG)]
    assert hours["read_only"] and hours["value"] == "168"
    assert entries["log.retention.minutes"]["value"] is None
    assert entries["num.partitions"]["config_source"] == ConfigSource.STATIC_BROKER_CONFIG
    password = entries["listener.name.external.ssl.key.password"]
    assert password["is_sensitive"] and password["value"] is None
    assert password["config_type"] == ConfigType.PASSWORD
    assert all(s["value"] is None for s in password["synonyms"])
    assert password["config_source"] == ConfigSource.DYNAMIC_BROKER_CONFIG
    # the cluster-wide resource "": its dynamic defaults only
    default = registry.describe_broker(layers, include_synonyms=True, cluster_default=True)
    assert [(e["name"], e["value"], e["config_source"]) for e in default] == [
        ("log.retention.ms", "4000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG)]
    assert [s["source"] for s in default[0]["synonyms"]] == [
        ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG]


def test_static_configs_are_the_servers_settings_under_kafkas_names():
    config = ServerConfig(offsets_topic_num_partitions=16, default_partitions=1,
                          remote_list_offsets_request_timeout_ms=500, remote_fetch_max_wait_ms=700,
                          topic_defaults={"retention.ms": "86400000"})
    broker = registry.BrokerInfo(3, "PLAINTEXT://127.0.0.1:9103", "PLAINTEXT://h:9103",
                                 "node-2", "h:7092")
    static = registry.static_configs(config, broker)
    assert static["offsets.topic.num.partitions"] == "16"      # not Kafka's 50
    assert "num.partitions" not in static                      # Kafka's default
    assert static["log.retention.ms"] == "86400000"
    # a dynamic config kafkalite reads from the server's file
    assert static["remote.list.offsets.request.timeout.ms"] == "500"
    assert static["remote.fetch.max.wait.ms"] == "700"
    assert "remote.list.offsets.request.timeout.ms" not in registry.static_configs(
        ServerConfig(), None)
    assert (static["broker.id"], static["node.id"], static["broker.rack"]) == ("3", "3", "node-2")
    assert static["advertised.listeners"] == "PLAINTEXT://h:9103"
    assert static["kafkalite.native.bootstrap.servers"] == "h:7092"
    assert "broker.id" not in registry.static_configs(config, None)


def test_dynamic_broker_configs_give_topics_their_defaults():
    assert registry.dynamic_topic_defaults(
        {"log.retention.ms": "1", "message.max.bytes": "2", "log.cleaner.threads": "3",
         "listener.name.x.ssl.key.password": "s"}) == {
        "retention.ms": "1", "max.message.bytes": "2"}
    layers = Layers({"message.max.bytes": "5"}, {"message.max.bytes": "4",
                                                 "log.retention.ms": "6"}, {})
    assert layers.topic_defaults() == {"max.message.bytes": "5", "retention.ms": "6"}


def test_dynamic_broker_configs_survive_a_restart_of_the_metadata(tmp_path):
    store = MetadataStore(str(tmp_path))
    store.create_topic("orders", 1, {}, workers=2)
    store.set_broker_configs("", {"log.retention.ms": "3600000"})
    store.set_broker_configs("1", {"message.max.bytes": "2048"})
    store.create_topic("payments", 1, {}, workers=2)      # a change-log line after them
    again = MetadataStore(str(tmp_path))
    assert again.broker_configs == {"": {"log.retention.ms": "3600000"},
                                    "1": {"message.max.bytes": "2048"}}
    assert set(again.topics) == {"orders", "payments"}
    again.set_broker_configs("1", {})
    assert MetadataStore(str(tmp_path)).broker_configs == {"": {"log.retention.ms": "3600000"}}


def test_group_configs_survive_a_restart_of_the_metadata(tmp_path):
    store = MetadataStore(str(tmp_path))
    store.set_group_configs("g1", {"consumer.session.timeout.ms": "50000"})
    store.create_topic("orders", 1, {}, workers=2)        # a change-log line after them
    again = MetadataStore(str(tmp_path))
    assert again.group_configs == {"g1": {"consumer.session.timeout.ms": "50000"}}
    again.set_group_configs("g1", {})
    assert MetadataStore(str(tmp_path)).group_configs == {}


def test_group_configs_are_kafka_4_1s_with_its_bounds():
    from kafkalite.server import group_config
    assert set(group_config.GROUP_CONFIGS) == {
        "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms",
        "share.session.timeout.ms", "share.heartbeat.interval.ms",
        "share.record.lock.duration.ms", "share.auto.offset.reset", "share.isolation.level",
        "streams.session.timeout.ms", "streams.heartbeat.interval.ms",
        "streams.num.standby.replicas"}
    ok = {"consumer.session.timeout.ms": "60000", "consumer.heartbeat.interval.ms": "15000",
          "share.record.lock.duration.ms": "15000", "share.isolation.level": "read_committed"}
    assert group_config.check_group_configs("g", ok) == ok
    for bad in ({"consumer.session.timeout.ms": "60001"},
                {"share.heartbeat.interval.ms": "4999"},
                {"share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "15000",
                 "streams.num.standby.replicas": "3"}):
        with pytest.raises(errors.InvalidConfigurationError):
            group_config.check_group_configs("g", bad)
    with pytest.raises(errors.InvalidRequestError):
        group_config.check_group_configs("", {})
    entries = {e["name"]: e for e in group_config.describe_group(
        ServerConfig(group_consumer_session_timeout_ms=6000), {"share.isolation.level":
                                                              "read_committed"})}
    assert (entries["consumer.session.timeout.ms"]["value"],
            entries["consumer.session.timeout.ms"]["config_source"]) == (
        "6000", ConfigSource.DEFAULT_CONFIG)
    assert entries["share.isolation.level"]["config_source"] == ConfigSource.GROUP_CONFIG
