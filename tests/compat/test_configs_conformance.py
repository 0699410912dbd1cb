"""Topic and broker configs as Kafka's own clients see them: every topic
config Kafka 4.x documents accepted (deprecated ones too, ignored), Kafka's
config types, a broker described config by config with each value's source
and synonyms, and dynamic broker configs -- per broker and cluster-wide --
altered, described, taking effect on topics without their own value,
surviving a restart (on a data directory and in PostgreSQL) and deleted
back to the server's static value. Through confluent-kafka's and
kafka-python's admin clients, and exact requests (KafkaWire) where a client
does not expose a field (documentation, config types, the resource "")."""
from __future__ import annotations

import uuid

import confluent_kafka as ck
import pytest
from compat_helpers import KafkaWire, kafka_conf
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   NewTopic)
from harness import ServerProcess, wait_until

from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import AlterConfigOp, ConfigResourceType, ConfigSource, ConfigType

BROKER, TOPIC, GROUP = ConfigResourceType.BROKER, ConfigResourceType.TOPIC, ConfigResourceType.GROUP
SOURCE = ConfigSource


# ---- helpers ---------------------------------------------------------------------------------

_ADMINS: dict[str, AdminClient] = {}


def admin(server) -> AdminClient:
    """One AdminClient per listener address, kept: a client collected while
    a request of its is in flight fails it (_DESTROY)."""
    if server.kafka_bootstrap not in _ADMINS:
        _ADMINS[server.kafka_bootstrap] = AdminClient(kafka_conf(server))
    return _ADMINS[server.kafka_bootstrap]


@pytest.fixture(autouse=True)
def _drop_admins():
    """Each test's clients go with it (none keeps retrying a stopped server)."""
    yield
    _ADMINS.clear()


def create(server, name: str, partitions: int = 1, **configs) -> None:
    f = admin(server).create_topics([NewTopic(name, partitions, 1, config=configs)])
    f[name].result(30)


def describe(server, kind, name: str) -> dict:
    resource = ConfigResource(kind, name)
    return admin(server).describe_configs([resource])[resource].result(30)


def incremental(server, kind, name: str, **ops) -> None:
    """confluent-kafka's IncrementalAlterConfigs; ``ops``: name -> value
    (SET) or None (DELETE), with '_' for '.'."""
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=(
        AlterConfigOpType.DELETE if v is None else AlterConfigOpType.SET))
        for k, v in ops.items()]
    resource = ConfigResource(kind, name, incremental_configs=entries)
    admin(server).incremental_alter_configs([resource])[resource].result(30)


def wire_request(address: str, api_key, version: int, body: dict) -> dict:
    wire = KafkaWire(address)
    try:
        return wire.request(api_key, version, body)
    finally:
        wire.close()


def alter_wire(address: str, resource_type: int, name: str, configs: dict,
               validate_only: bool = False) -> dict:
    """One IncrementalAlterConfigs resource; ``configs``: name -> value
    (SET) or None (DELETE). Returns its response."""
    return wire_request(address, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [{
        "resource_type": resource_type, "resource_name": name, "configs": [
            {"name": k, "config_operation": AlterConfigOp.DELETE if v is None
             else AlterConfigOp.SET, "value": v} for k, v in configs.items()]}],
        "validate_only": validate_only})["responses"][0]


def describe_wire(address: str, resource_type: int, name: str, keys=None) -> dict:
    """DescribeConfigs v4 with synonyms and documentation: name -> entry."""
    result = wire_request(address, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{
        "resource_type": resource_type, "resource_name": name, "configuration_keys": keys}],
        "include_synonyms": True, "include_documentation": True})["results"][0]
    assert result["error_code"] == 0, result
    return {e["name"]: e for e in result["configs"]}


def synonyms(entry: dict) -> list[tuple]:
    return [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]


def brokers(server) -> dict[int, str]:
    """Kafka broker id -> host:port."""
    md = admin(server).list_topics(timeout=20)
    return {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}


def leaders(server, topic: str) -> dict[int, int]:
    """partition -> its leader's broker id."""
    md = admin(server).list_topics(topic, timeout=20)
    return {p.id: p.leader for p in md.topics[topic].partitions.values()}


def produce_error(server, topic: str, partition: int, size: int):
    """The delivery error of one record of ``size`` bytes (None: delivered)."""
    p = ck.Producer(kafka_conf(server, **{"message.timeout.ms": 15000}))
    got = []
    p.produce(topic, b"x" * size, partition=partition, on_delivery=lambda e, m: got.append(e))
    p.flush(20)
    assert got, "no delivery report"
    return got[0]


# ---- topic configs (the shared server) ----------------------------------------------------------

KAFKA_4_TOPIC_CONFIGS = {
    "file.delete.delay.ms": "30000", "preallocate": "true", "compression.gzip.level": "6",
    "compression.lz4.level": "4", "compression.zstd.level": "10",
    "message.timestamp.before.max.ms": "86400000", "message.timestamp.after.max.ms": "60000",
    "leader.replication.throttled.replicas": "0:0", "follower.replication.throttled.replicas": "*",
    "local.retention.ms": "-2", "local.retention.bytes": "-2", "remote.log.copy.disable": "false",
    "remote.log.delete.on.disable": "false", "remote.storage.enable": "false",
    "segment.jitter.ms": "10", "max.compaction.lag.ms": "60000",
}


def test_every_topic_config_kafka_documents_is_accepted_stored_and_described(
        server, topic_name):
    create(server, topic_name, **KAFKA_4_TOPIC_CONFIGS)
    configs = describe(server, ConfigResource.Type.TOPIC, topic_name)
    for name, value in KAFKA_4_TOPIC_CONFIGS.items():
        assert (configs[name].value, configs[name].source) == (value, SOURCE.DYNAMIC_TOPIC_CONFIG)
    # and set one at a time afterwards, as kafka-configs --alter does
    incremental(server, ConfigResource.Type.TOPIC, topic_name, file_delete_delay_ms="0")
    configs = describe(server, ConfigResource.Type.TOPIC, topic_name)
    assert configs["file.delete.delay.ms"].value == "0"
    # Kafka refuses tiered storage on a broker without it, as kafkalite does
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(ck.KafkaException) as exc:
        admin(server).incremental_alter_configs([bad])[bad].result(30)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG


def test_message_format_version_is_accepted_as_deprecated_and_ignored(server, topic_name):
    """Kafka 3.x's clients and tools still send it (kafka-python here); it
    is kept, logged as ignored, and the topic works as any other."""
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic
    before = len(server.output())
    kp = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        kp.create_topics([KpNewTopic(topic_name, 1, 1, topic_configs={
            "message.format.version": "2.8", "message.downconversion.enable": "false"})])
    finally:
        kp.close()
    configs = describe(server, ConfigResource.Type.TOPIC, topic_name)
    assert configs["message.format.version"].value == "2.8"
    assert configs["message.format.version"].source == SOURCE.DYNAMIC_TOPIC_CONFIG
    assert produce_error(server, topic_name, 0, 100) is None
    logged = wait_until(lambda: "message.format.version=2.8 is deprecated and ignored"
                        in server.output()[before:], 10, "the warning")
    assert logged


def test_subtracting_the_last_cleanup_policy_leaves_it_empty(server, topic_name):
    """Kafka 4 takes an empty cleanup.policy (KIP-1161: no deletion, no
    compaction); an APPEND to a config that is not a list is INVALID_CONFIG."""
    create(server, topic_name)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "delete", incremental_operation=AlterConfigOpType.SUBTRACT)])
    admin(server).incremental_alter_configs([resource])[resource].result(30)
    entry = describe(server, ConfigResource.Type.TOPIC, topic_name)["cleanup.policy"]
    assert (entry.value, entry.source) == ("", SOURCE.DYNAMIC_TOPIC_CONFIG)
    assert produce_error(server, topic_name, 0, 100) is None
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND)])
    admin(server).incremental_alter_configs([resource])[resource].result(30)
    assert describe(server, ConfigResource.Type.TOPIC, topic_name)["cleanup.policy"].value \
        == "compact"
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic_name, incremental_configs=[
        ConfigEntry("retention.ms", "5", incremental_operation=AlterConfigOpType.APPEND)])
    with pytest.raises(ck.KafkaException) as exc:
        admin(server).incremental_alter_configs([bad])[bad].result(30)
    assert exc.value.args[0].code() == ck.KafkaError.INVALID_CONFIG


def test_described_configs_have_kafkas_types_and_documentation(server, topic_name):
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import KafkaAdminClient
    create(server, topic_name)
    kp = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        got = kp.describe_configs([KpResource("TOPIC", topic_name)], include_synonyms=True,
                                  config_filter="all")["topic"][topic_name]
    finally:
        kp.close()
    types = {name: c.get("config_type") for name, c in got.items()}
    assert {k: types[k] for k in ("retention.ms", "segment.bytes", "cleanup.policy",
                                  "min.cleanable.dirty.ratio", "preallocate",
                                  "compression.type")} == {
        "retention.ms": "LONG", "segment.bytes": "INT", "cleanup.policy": "LIST",
        "min.cleanable.dirty.ratio": "DOUBLE", "preallocate": "BOOLEAN",
        "compression.type": "STRING"}
    assert "UNKNOWN" not in types.values()
    entries = describe_wire(server.kafka_bootstrap, TOPIC, topic_name)
    assert entries["retention.ms"]["documentation"]
    assert entries["retention.ms"]["config_type"] == ConfigType.LONG
    plain = wire_request(server.kafka_bootstrap, ApiKey.DESCRIBE_CONFIGS, 4, {"resources": [{
        "resource_type": TOPIC, "resource_name": topic_name, "configuration_keys": None}],
        "include_synonyms": False, "include_documentation": False})["results"][0]["configs"]
    assert all(e["documentation"] is None and e["synonyms"] == [] for e in plain)


def test_create_topics_answers_the_new_topics_configs(server, topic_name):
    answer = wire_request(server.kafka_bootstrap, ApiKey.CREATE_TOPICS, 7, {
        "topics": [{"name": topic_name, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": [{"name": "retention.ms", "value": "60000"}]}],
        "timeout_ms": 30000, "validate_only": True})["topics"][0]
    assert answer["error_code"] == 0, answer
    configs = {c["name"]: c for c in answer["configs"]}
    assert (configs["retention.ms"]["value"], configs["retention.ms"]["config_source"]) == \
        ("60000", SOURCE.DYNAMIC_TOPIC_CONFIG)
    assert configs["segment.bytes"]["config_source"] == SOURCE.DEFAULT_CONFIG
    assert topic_name not in admin(server).list_topics(timeout=20).topics   # validate_only


# ---- broker configs, read (the shared server) ---------------------------------------------------

def test_a_broker_describes_every_config_with_its_source(server):
    endpoints = brokers(server)
    for broker in (0, 1):           # Metadata's brokers; librdkafka asks each broker its own
        configs = describe(server, ConfigResource.Type.BROKER, str(broker))
        assert len(configs) > 100
        told = configs["advertised.listeners"]
        # read-only, as a Kafka 4.x (KRaft) broker describes it
        assert told.value == f"PLAINTEXT://{endpoints[broker]}" and told.is_read_only
        assert told.source == SOURCE.STATIC_BROKER_CONFIG
        assert (configs["broker.id"].value, configs["node.id"].value) == (str(broker),) * 2
        assert configs["broker.id"].is_read_only
        assert configs["listeners"].value.startswith("PLAINTEXT://")
        # kafkalite's setting differs from Kafka's default: the server's own
        assert (configs["offsets.topic.num.partitions"].value,
                configs["offsets.topic.num.partitions"].source) == \
            ("16", SOURCE.STATIC_BROKER_CONFIG)
        assert (configs["num.partitions"].value, configs["num.partitions"].source) == \
            ("1", SOURCE.DEFAULT_CONFIG)
        hours = configs["log.retention.hours"]
        assert (hours.value, hours.source, hours.is_read_only) == ("168", SOURCE.DEFAULT_CONFIG,
                                                                   True)
        assert not configs["log.retention.ms"].is_read_only      # dynamic, cluster-wide
        assert configs["kafkalite.native.bootstrap.servers"].value == server.bootstrap


def test_kafka_python_reads_a_brokers_dynamic_configs_and_types(server):
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import KafkaAdminClient
    kp = KafkaAdminClient(bootstrap_servers=server.kafka_bootstrap)
    try:
        got = kp.describe_configs([KpResource("BROKER", "1")], include_synonyms=True,
                                  config_filter="dynamic")["broker"]["1"]
    finally:
        kp.close()
    assert {"log.retention.ms", "message.max.bytes", "log.cleanup.policy",
            "ssl.client.auth", "log.cleaner.threads"} <= set(got)
    assert not {"num.partitions", "log.retention.hours", "advertised.listeners"} & set(got)
    assert got["message.max.bytes"]["config_type"] == "INT"
    assert got["log.cleanup.policy"]["config_type"] == "LIST"


def test_broker_alterations_kafka_refuses_answer_invalid_request_and_change_nothing(server):
    controller = server.kafka_bootstrap
    refused = [
        ("0", {"num.partitions": "3"}, "dynamically"),
        ("0", {"log.retention.hours": "1"}, "dynamically"),
        ("0", {"no.such.broker.config": "1"}, "Unknown"),
        ("0", {"advertised.listeners": "PLAINTEXT://h:1"}, "dynamically"),    # KRaft's rule
        ("", {"ssl.client.auth": "required"}, "broker id must be specified"),
        ("0", {"ssl.keystore.password": "s"}, "per-listener"),
        ("0", {"log.retention.ms": "-7"}, "log.retention.ms"),
        ("7", {"log.retention.ms": "1000"}, "Unexpected broker id"),
        ("x", {"log.retention.ms": "1000"}, "must be an integer"),
    ]
    for name, configs, says in refused:
        answer = alter_wire(controller, BROKER, name, configs)
        assert answer["error_code"] == errors.InvalidRequestError.code, (name, configs, answer)
        assert says in answer["error_message"], answer
    # validate_only: checked and accepted, nothing stored
    assert alter_wire(controller, BROKER, "", {"log.retention.ms": "1000"},
                      validate_only=True)["error_code"] == 0
    assert "log.retention.ms" not in describe_wire(controller, BROKER, "")
    # Kafka's request rules: a resource twice, a config twice
    twice = wire_request(controller, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": BROKER, "resource_name": "0", "configs": []}] * 2,
        "validate_only": True})["responses"]
    assert [r["error_code"] for r in twice] == [errors.InvalidRequestError.code] * 2
    dup = wire_request(controller, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1, {"resources": [
        {"resource_type": BROKER, "resource_name": "0", "configs": [
            {"name": "log.retention.ms", "config_operation": 0, "value": "1"}] * 2}],
        "validate_only": True})["responses"][0]
    assert dup["error_code"] == errors.InvalidRequestError.code


# ---- dynamic broker configs (a server of the module's own: they reconfigure it) -----------------

def test_a_cluster_wide_dynamic_default_is_every_topics_default_at_once(module_server):
    srv = module_server
    old = f"cw-old-{uuid.uuid4().hex[:6]}"
    create(srv, old)
    own = f"cw-own-{uuid.uuid4().hex[:6]}"
    create(srv, own, **{"max.message.bytes": "100000"})
    controller = srv.kafka_bootstrap
    assert alter_wire(controller, BROKER, "", {"log.retention.ms": "3600000",
                                               "message.max.bytes": "2048"})["error_code"] == 0
    try:
        default = describe_wire(controller, BROKER, "")
        assert (default["log.retention.ms"]["value"], default["log.retention.ms"]
                ["config_source"]) == ("3600000", SOURCE.DYNAMIC_DEFAULT_BROKER_CONFIG)
        assert "kafkalite.native.bootstrap.servers" in default
        entry = describe_wire(controller, BROKER, "0")["log.retention.ms"]
        assert (entry["value"], entry["config_source"]) == \
            ("3600000", SOURCE.DYNAMIC_DEFAULT_BROKER_CONFIG)
        new = f"cw-new-{uuid.uuid4().hex[:6]}"
        create(srv, new)
        for topic in (new, old):
            retention = describe_wire(controller, TOPIC, topic)["retention.ms"]
            assert (retention["value"], retention["config_source"]) == \
                ("3600000", SOURCE.DYNAMIC_DEFAULT_BROKER_CONFIG)
            assert synonyms(retention) == [
                ("log.retention.ms", "3600000", SOURCE.DYNAMIC_DEFAULT_BROKER_CONFIG),
                ("log.retention.hours", "168", SOURCE.DEFAULT_CONFIG)]
            # the brokers act on it: a batch over 2048 bytes is refused
            err = produce_error(srv, topic, 0, 4000)
            assert err is not None and err.code() == ck.KafkaError.MSG_SIZE_TOO_LARGE, err
        assert produce_error(srv, own, 0, 4000) is None           # its own value wins
    finally:
        alter_wire(controller, BROKER, "", {"log.retention.ms": None, "message.max.bytes": None})
    assert "log.retention.ms" not in describe_wire(controller, BROKER, "")
    retention = describe_wire(controller, TOPIC, old)["retention.ms"]
    assert (retention["value"], retention["config_source"]) == ("604800000",
                                                                SOURCE.DEFAULT_CONFIG)
    assert produce_error(srv, old, 0, 4000) is None


def test_a_per_broker_dynamic_config_is_that_brokers_own(module_server):
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import KafkaAdminClient
    srv = module_server
    topic = f"pb-{uuid.uuid4().hex[:6]}"
    create(srv, topic, partitions=2)
    led = {leader: partition for partition, leader in leaders(srv, topic).items()}
    assert set(led) == {0, 1}, led
    incremental(srv, ConfigResource.Type.BROKER, "0", message_max_bytes="2048")
    kp = KafkaAdminClient(bootstrap_servers=srv.kafka_bootstrap)
    try:
        # kafka-python checks the config is a dynamic one of broker 1 first
        assert kp.alter_configs([KpResource("BROKER", "1", configs={
            "log.retention.ms": "7200000"})]) == {"broker": {"1": "OK"}}
    finally:
        kp.close()
    try:
        zero, one = (describe(srv, ConfigResource.Type.BROKER, b) for b in ("0", "1"))
        assert (zero["message.max.bytes"].value, zero["message.max.bytes"].source) == \
            ("2048", SOURCE.DYNAMIC_BROKER_CONFIG)
        assert (one["message.max.bytes"].value, one["message.max.bytes"].source) == \
            ("1048588", SOURCE.DEFAULT_CONFIG)
        assert (one["log.retention.ms"].value, one["log.retention.ms"].source) == \
            ("7200000", SOURCE.DYNAMIC_BROKER_CONFIG)
        # the topic as each broker has it (Kafka: the broker asked answers)
        endpoints = brokers(srv)
        via_zero = describe_wire(endpoints[0], TOPIC, topic)
        via_one = describe_wire(endpoints[1], TOPIC, topic)
        assert (via_zero["max.message.bytes"]["value"],
                via_zero["max.message.bytes"]["config_source"]) == \
            ("2048", SOURCE.DYNAMIC_BROKER_CONFIG)
        assert via_one["max.message.bytes"]["config_source"] == SOURCE.DEFAULT_CONFIG
        assert via_one["retention.ms"]["value"] == "7200000"
        # broker 0 refuses the big batch on the partition it leads, broker 1 takes it
        err = produce_error(srv, topic, led[0], 4000)
        assert err is not None and err.code() == ck.KafkaError.MSG_SIZE_TOO_LARGE, err
        assert produce_error(srv, topic, led[1], 4000) is None
    finally:
        incremental(srv, ConfigResource.Type.BROKER, "0", message_max_bytes=None)
        incremental(srv, ConfigResource.Type.BROKER, "1", log_retention_ms=None)
    assert produce_error(srv, topic, led[0], 4000) is None


def test_passwords_are_stored_and_never_sent_back(module_server):
    srv = module_server
    secret = "s3cr3t-" + uuid.uuid4().hex[:8]
    name = "listener.name.plaintext.ssl.key.password"
    incremental(srv, ConfigResource.Type.BROKER, "0", **{name.replace(".", "_"): secret})
    try:
        entry = describe_wire(srv.kafka_bootstrap, BROKER, "0")[name]
        assert entry["is_sensitive"] and entry["value"] is None
        assert entry["config_type"] == ConfigType.PASSWORD
        assert entry["config_source"] == SOURCE.DYNAMIC_BROKER_CONFIG
        assert [s["value"] for s in entry["synonyms"]] == [None]
        assert secret not in srv.output()
    finally:
        assert alter_wire(srv.kafka_bootstrap, BROKER, "0", {name: None})["error_code"] == 0
    assert name not in describe_wire(srv.kafka_bootstrap, BROKER, "0")


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
def test_legacy_alter_configs_replaces_a_brokers_dynamic_configs(module_server):
    srv = module_server
    incremental(srv, ConfigResource.Type.BROKER, "1", log_cleaner_threads="2",
                num_io_threads="4")
    resource = ConfigResource(ConfigResource.Type.BROKER, "1",
                              set_config={"log.cleaner.threads": "3"})
    admin(srv).alter_configs([resource])[resource].result(30)
    configs = describe(srv, ConfigResource.Type.BROKER, "1")
    assert (configs["log.cleaner.threads"].value, configs["log.cleaner.threads"].source) == \
        ("3", SOURCE.DYNAMIC_BROKER_CONFIG)
    assert (configs["num.io.threads"].value, configs["num.io.threads"].source) == \
        ("8", SOURCE.DEFAULT_CONFIG)
    resource = ConfigResource(ConfigResource.Type.BROKER, "1", set_config={})
    admin(srv).alter_configs([resource])[resource].result(30)
    configs = describe(srv, ConfigResource.Type.BROKER, "1")
    assert configs["log.cleaner.threads"].source == SOURCE.DEFAULT_CONFIG


# ---- surviving restarts ------------------------------------------------------------------------

@pytest.fixture
def static_server(tmp_path):
    """A server of the test's own whose config file sets Kafka's
    log.retention.hours = 48 (retention.ms' static value)."""
    toml = tmp_path / "server.toml"
    toml.write_text("log.retention.hours = 48\n")
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(toml)]).start()
    yield srv
    if srv.proc.poll() is None:
        srv.stop()
    srv.kill()


def test_dynamic_configs_survive_a_restart_and_delete_back_to_the_static_value(static_server):
    srv = static_server
    static = describe_wire(srv.kafka_bootstrap, BROKER, "0")["log.retention.ms"]
    assert (static["value"], static["config_source"]) == ("172800000",
                                                          SOURCE.STATIC_BROKER_CONFIG)
    assert alter_wire(srv.kafka_bootstrap, BROKER, "", {"log.retention.ms": "3600000"}) \
        ["error_code"] == 0
    incremental(srv, ConfigResource.Type.BROKER, "0", message_max_bytes="2048")
    srv.stop()
    srv.start()
    controller = srv.kafka_bootstrap
    assert describe_wire(controller, BROKER, "")["log.retention.ms"]["value"] == "3600000"
    entry = describe_wire(controller, BROKER, "0")["message.max.bytes"]
    assert (entry["value"], entry["config_source"]) == ("2048", SOURCE.DYNAMIC_BROKER_CONFIG)
    topic = "after-restart"
    create(srv, topic, partitions=2)
    retention = describe_wire(controller, TOPIC, topic)["retention.ms"]
    assert (retention["value"], retention["config_source"]) == \
        ("3600000", SOURCE.DYNAMIC_DEFAULT_BROKER_CONFIG)
    assert synonyms(retention)[:2] == [
        ("log.retention.ms", "3600000", SOURCE.DYNAMIC_DEFAULT_BROKER_CONFIG),
        ("log.retention.ms", "172800000", SOURCE.STATIC_BROKER_CONFIG)]
    led = {leader: partition for partition, leader in leaders(srv, topic).items()}
    err = produce_error(srv, topic, led[0], 4000)            # applied again after the restart
    assert err is not None and err.code() == ck.KafkaError.MSG_SIZE_TOO_LARGE, err
    # deleted: back to the config file's value
    assert alter_wire(controller, BROKER, "", {"log.retention.ms": None})["error_code"] == 0
    retention = describe_wire(controller, TOPIC, topic)["retention.ms"]
    assert (retention["value"], retention["config_source"]) == \
        ("172800000", SOURCE.STATIC_BROKER_CONFIG)
    incremental(srv, ConfigResource.Type.BROKER, "0", message_max_bytes=None)
    assert produce_error(srv, topic, led[0], 4000) is None


@pytest.mark.processes
def test_a_postgresql_cluster_keeps_its_dynamic_broker_configs(tmp_path):
    import psycopg
    from postgres import PostgresServer, find_binaries
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    pg = PostgresServer().start()
    srv = ServerProcess(str(tmp_path / "node1"), extra_args=[
        "--cluster", pg.dsn, "--node-id", "1", "--controller-lease-ms", "2000"])
    try:
        srv.start()
        assert alter_wire(srv.kafka_bootstrap, BROKER, "", {"log.retention.ms": "3600000"}) \
            ["error_code"] == 0
        with psycopg.connect(pg.dsn) as c:
            assert c.execute("SELECT configs FROM kafkalite_broker_configs WHERE resource = ''") \
                .fetchone()[0] == {"log.retention.ms": "3600000"}
        srv.stop()
        srv.start()
        entry = describe_wire(srv.kafka_bootstrap, BROKER, "")["log.retention.ms"]
        assert (entry["value"], entry["config_source"]) == \
            ("3600000", SOURCE.DYNAMIC_DEFAULT_BROKER_CONFIG)
        create(srv, "pg-topic")
        assert describe_wire(srv.kafka_bootstrap, TOPIC, "pg-topic")["retention.ms"]["value"] \
            == "3600000"
    finally:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.stop()
        srv.kill()
        pg.stop()


# ---- group configs (KIP-848; resource type 32) ---------------------------------------------------

def test_group_configs_are_stored_described_and_checked_as_kafka_does(server, group_name):
    """A group's own configs (it need not exist): Kafka 4.1's names, values
    within the broker's bounds, heartbeat below session; a bad one is
    INVALID_CONFIG and changes nothing. Before, resource type 32 was refused
    "unsupported resource type 32"."""
    address = server.kafka_bootstrap
    answer = alter_wire(address, GROUP, group_name, {"consumer.session.timeout.ms": "50000",
                                                     "share.record.lock.duration.ms": "20000"})
    assert answer["error_code"] == 0, answer
    configs = describe_wire(address, GROUP, group_name)
    assert (configs["consumer.session.timeout.ms"]["value"],
            configs["consumer.session.timeout.ms"]["config_source"]) == ("50000",
                                                                         SOURCE.GROUP_CONFIG)
    assert configs["consumer.heartbeat.interval.ms"]["config_source"] == SOURCE.DEFAULT_CONFIG
    assert configs["consumer.session.timeout.ms"]["config_type"] == ConfigType.INT
    refused = [({"consumer.session.timeout.ms": "1000"}, "consumer.session.timeout.ms"),
               ({"consumer.heartbeat.interval.ms": "50000"}, "consumer.heartbeat.interval.ms"),
               ({"no.such.group.config": "1"}, "Unknown group config"),
               ({"share.isolation.level": "dirty"}, "share.isolation.level")]
    for change, says in refused:
        answer = alter_wire(address, GROUP, group_name, change)
        assert answer["error_code"] == errors.InvalidConfigurationError.code, (change, answer)
        assert says in answer["error_message"], answer
    assert describe_wire(address, GROUP, group_name)["consumer.session.timeout.ms"][
        "value"] == "50000"
    listed = wire_request(address, ApiKey.LIST_CONFIG_RESOURCES, 1, {"resource_types": [GROUP]})
    assert group_name in {c["resource_name"] for c in listed["config_resources"]}
    assert alter_wire(address, GROUP, group_name, {"consumer.session.timeout.ms": None,
                                                   "share.record.lock.duration.ms": None})[
        "error_code"] == 0
    assert describe_wire(address, GROUP, group_name)["consumer.session.timeout.ms"][
        "config_source"] == SOURCE.DEFAULT_CONFIG


def test_confluent_kafka_sets_a_groups_heartbeat_interval_and_its_members_hear_it(
        server, group_name):
    """The coordinator acts on a consumer group's own heartbeat interval:
    a KIP-848 member's ConsumerGroupHeartbeat answer carries it."""
    fut = admin(server).incremental_alter_configs([ConfigResource(
        ConfigResource.Type.GROUP if hasattr(ConfigResource.Type, "GROUP") else GROUP,
        group_name, incremental_configs=[ConfigEntry(
            "consumer.heartbeat.interval.ms", "7000",
            incremental_operation=AlterConfigOpType.SET)])])
    for f in fut.values():
        f.result(timeout=15)
    answer = wire_request(server.kafka_bootstrap, ApiKey.CONSUMER_GROUP_HEARTBEAT, 0, {
        "group_id": group_name, "member_id": uuid.uuid4().hex[:22], "member_epoch": 0,
        "rebalance_timeout_ms": 30_000, "subscribed_topic_names": ["anything"],
        "server_assignor": None, "topic_partitions": []})
    assert (answer["error_code"], answer["heartbeat_interval_ms"]) == (0, 7000)
