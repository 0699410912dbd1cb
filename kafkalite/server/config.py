"""Server settings: an embedded default, a TOML file, and command-line flags.

Precedence: flags > TOML file > defaults. The defaults need nothing
configured: data in ``./kafkalite-data``, everything on loopback.

Every key, its type, default and Kafka's equivalent is in
``docs/configuration.md``, generated from ``SETTINGS`` below (and the topic
configs from ``kafkalite.storage.config.LogConfig``) by
``python -m kafkalite.tools.gen_docs``. A TOML file uses our names
(``workers = 4``) or Kafka's ``server.properties`` names where Kafka has the
same setting (``"num.partitions" = 4``, or unquoted dotted keys), including
Kafka's broker-wide topic defaults (``log.retention.hours = 168``, which
becomes ``[topic_defaults] "retention.ms"``)::

    data_dir = "/var/lib/kafkalite"
    "auto.create.topics.enable" = false
    log.retention.hours = 24

    [topic_defaults]              # Kafka topic configs given to new topics
    "segment.bytes" = 104857600

A port of 0 means "any free port"; the ports actually bound are written to
``<data_dir>/server.json`` (and printed) so clients and tests can find them.
"""
from __future__ import annotations

import dataclasses
import difflib
import os
import tomllib
from dataclasses import dataclass, field

from kafkalite import local_socket
from kafkalite.launcher import default_worker_count
from kafkalite.errors import InvalidConfigurationError
from kafkalite.server.auth import security
from kafkalite.storage.config import LogConfig

DEFAULT_PORT = 7092
DEFAULT_INGEST_PORT = 7091
DEFAULT_WORKER_BASE_PORT = 7100
DEFAULT_KAFKA_PORT = 9092
DEFAULT_KAFKA_WORKER_BASE_PORT = 9100
DEFAULT_METRICS_PORT = 9404
METRICS_OFF = -1
DEFAULT_SCHEMA_REGISTRY_PORT = 8081   # Confluent Schema Registry's default listener port
DEFAULT_REST_PROXY_PORT = 8082        # Confluent REST Proxy's default listener port
DEFAULT_ICEBERG_REST_PORT = 8181      # the Iceberg REST catalog's conventional port
# Iceberg topics' files in the tiered store: beside its segments, whose
# keys are ``<topic>-<partition>/`` (a partition number always follows the
# dash) and ``__remote_log_metadata/``, so no topic's keys fall under it
ICEBERG_REMOTE_PREFIX = "iceberg"
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# group.consumer.migration.policy's values (server/group/coordinator.py acts on them)
MIGRATION_POLICIES = ("disabled", "upgrade", "downgrade", "bidirectional")


@dataclass(frozen=True)
class Setting:
    """The documentation of one ServerConfig field: what it does, the Kafka
    ``server.properties`` names accepted for it in a config file (``kafka``),
    and Kafka's nearest setting where it is not the same thing
    (``kafka_note``, documentation only)."""
    doc: str
    kafka: tuple[str, ...] = ()
    kafka_note: str = ""


# One entry per ServerConfig field, in its order. The loader takes the
# ``kafka`` names as aliases and the reference (docs/configuration.md) is
# generated from here; tests/tools/test_gen_docs.py fails on a field with no entry.
SETTINGS: dict[str, Setting] = {
    "data_dir": Setting(
        "Where topics' partition logs and the metadata live.", ("log.dirs", "log.dir"),
        "kafkalite keeps one directory; Kafka's `log.dirs` may list several"),
    "remote_log_storage_system_enable": Setting(
        "Tiered storage (KIP-405): topics with `remote.storage.enable=true` copy their rolled "
        "segments to the remote store and keep only `local.retention.*` on disk; without it, "
        "such a topic is refused, as Kafka refuses it (docs/tiered-storage.md).",
        ("remote.log.storage.system.enable",)),
    "remote_log_storage_dir": Setting(
        "The remote store of tiered segments, a directory (a second disk, a mounted share); "
        "\"\": `<data_dir>/remote-storage`.",
        kafka_note="Kafka's `remote.log.storage.manager.class.name` names a plug-in instead"),
    "remote_log_storage_s3_bucket": Setting(
        "Keep tiered segments in this S3 bucket instead of `remote_log_storage_dir` "
        "(boto3, `pip install kafkalite[s3]`; credentials and region from the AWS "
        "environment variables or ~/.aws, as any AWS client); \"\": the directory.",
        kafka_note="a RemoteStorageManager plug-in for S3 (Aiven's, for one)"),
    "remote_log_storage_s3_endpoint": Setting(
        "The S3 API's URL, for object storage other than AWS's (MinIO, Ceph, ...); "
        "\"\": AWS's."),
    "remote_log_manager_copier_thread_pool_size": Setting(
        "Threads of a worker that copy tiered segments to the remote store (and delete them "
        "there): copies of several partitions, and a partition's next segments, run at once, "
        "a partition's still listed as copied in offset order (docs/tiered-storage.md).",
        ("remote.log.manager.copier.thread.pool.size",),
        "Kafka's default is 10; kafkalite's 4 is per worker process, a broker each"),
    "remote_fetch_max_wait_ms": Setting(
        "How long a Fetch or ShareFetch that needs remote segments waits for their downloads "
        "before it is answered without those partitions' records (KIP-1018).",
        ("remote.fetch.max.wait.ms",),
        "Kafka's is also dynamic; kafkalite's is read at start"),
    "remote_list_offsets_request_timeout_ms": Setting(
        "How long a ListOffsets by timestamp that needs remote segments waits for their "
        "downloads when the request gives no `timeout_ms` of its own (ListOffsets before v10, "
        "or 0); past it the partitions still waiting are answered REQUEST_TIMED_OUT (KIP-1075).",
        ("remote.list.offsets.request.timeout.ms",),
        "Kafka's is also dynamic; kafkalite's is read at start"),
    "host": Setting("Interface every listener binds to, and the host advertised unless "
                    "`advertised_host` is set.", (), "the host of `listeners`"),
    "advertised_host": Setting("Host clients are told to connect to (\"\": `host`).", (),
                               "the host of `advertised.listeners`"),
    "workers": Setting("Partition worker processes (each a Kafka broker); 0: one per two "
                       "cores, at least one (the node shares the host with its clients; "
                       "docs/performance.md)."),
    "port": Setting("Native protocol (metadata and admin), a ZeroMQ ROUTER; 0: any free port."),
    "ingest_port": Setting("Plain ZeroMQ ingest gateway (PULL); 0: any free port; -1: off."),
    "worker_base_port": Setting("Worker *i*'s native ROUTER listens on this + *i*; "
                                "0: any free ports."),
    "kafka_port": Setting("Kafka wire protocol (TCP) of the supervisor, the bootstrap address, when "
                          "`listeners` is empty; 0: any free port.", (),
                          "the port of `listeners`"),
    "kafka_worker_base_port": Setting("Worker *i* is Kafka broker *i* on this + *i*; "
                                      "0: any free ports."),
    "metrics_port": Setting("HTTP port of Prometheus `/metrics` and `/health` (9404: the port "
                            "Strimzi gives Kafka's JMX exporter); 0: any free port; -1: off."),
    "http_tls": Setting("Serve the HTTP port (`/metrics`, `/health`, the web console) over "
                        "TLS with `ssl_certfile` and `ssl_keyfile`: https:// URLs, for "
                        "Prometheus's `tls_config` and browsers.",
                        kafka_note="kafkalite's own: Kafka exposes metrics through JMX."),
    "http_max_connections": Setting(
        "Connections each HTTP port keeps open at once (HTTP/1.1, kept alive between "
        "requests; a connection with a request being answered has a thread); one more is "
        "answered `503 Service Unavailable` with `Retry-After` and closed at once (counted in "
        "`kafkalite_http_connections_refused`; over `http_tls`, closed without an answer).",
        kafka_note="kafkalite's own: Kafka's `max.connections` caps its listeners; it has "
                   "no HTTP port."),
    "schema_registry_port": Setting(
        "HTTP port of the schema registry, Confluent Schema Registry's REST API "
        "(docs/schema-registry.md), on `host`, under `http_tls` and `http_max_connections` "
        "as the HTTP port and behind the same login; 0: any free port; -1: off.", (),
        "kafkalite's own: Confluent Schema Registry's `listeners` (default 8081) is a "
        "separate service beside Kafka"),
    "rest_proxy_port": Setting(
        "HTTP port of the REST proxy, Confluent REST Proxy's v3 and v2 consumer API "
        "(docs/rest-proxy.md), on `host`, under `http_tls` and `http_max_connections` as the "
        "HTTP port and behind the same login; 0: any free port; -1: off.", (),
        "kafkalite's own: Confluent REST Proxy's `listeners` (default 8082) is a separate "
        "service beside Kafka"),
    "iceberg_rest_port": Setting(
        "HTTP port of the Iceberg REST catalog of the node's Iceberg topics' tables, read-only "
        "(docs/iceberg-topics.md), on `host`, under `http_tls` and `http_max_connections` as "
        "the HTTP port and behind the same login; 0: any free port; -1: off.", (),
        "kafkalite's own: Redpanda serves no catalog itself (its Iceberg Topics use an external "
        "REST catalog); 8181 is the port Iceberg's REST catalog images listen on"),
    "iceberg_warehouse_dir": Setting(
        "Where Iceberg topics' tables keep their data and metadata files: a directory every "
        "node of a `cluster` reaches (a mounted share), the catalog being in the cluster's "
        "PostgreSQL. \"\": the tiered store's, under `iceberg/` (`s3://<bucket>/iceberg` "
        "with `remote_log_storage_s3_bucket`, `<remote_log_storage_dir>/iceberg` with a "
        "directory store), else `<data_dir>/iceberg/warehouse`, which only one node "
        "reaches: a cluster with Iceberg topics and none of these is refused at start "
        "(docs/iceberg-topics.md).", (),
        "Redpanda keeps Iceberg topics' files in its tiered storage bucket"),
    "rest_proxy_consumer_instance_timeout_ms": Setting(
        "How long a REST proxy v2 consumer instance may stay unused before it is closed "
        "(leaving its group).", (),
        "Confluent REST Proxy's `consumer.instance.timeout.ms`"),
    "log_level": Setting("DEBUG, INFO, WARNING or ERROR (\"\": `$KAFKALITE_LOG_LEVEL`, "
                         "else WARNING).", (), "`log4j.rootLogger`"),
    "auto_create_topics": Setting("Create an unknown topic when a client asks for it.",
                                  ("auto.create.topics.enable",)),
    "default_partitions": Setting("Partitions of auto-created topics and of topics created "
                                  "without a count.", ("num.partitions",)),
    "default_replication_factor": Setting("Replicas (on distinct workers) of a new topic's "
                                          "partitions.", ("default.replication.factor",)),
    "replica_lag_time_max_ms": Setting("A follower this far behind leaves the ISR.",
                                       ("replica.lag.time.max.ms",)),
    "replica_fetch_wait_max_ms": Setting("How long a follower's fetch waits at the leader "
                                         "for data.", ("replica.fetch.wait.max.ms",)),
    "max_incremental_fetch_session_cache_slots": Setting(
        "Incremental fetch sessions (KIP-227) each worker keeps for the consumers and "
        "followers fetching from it; a full cache makes a new session evict a less valuable "
        "one (Kafka's rules), or answers without one (0: sessions off).",
        ("max.incremental.fetch.session.cache.slots",)),
    "replica_local_reads": Setting(
        "A follower whose leader runs on the same host reads the fetched records from the "
        "leader's segment file instead of receiving them over the network (checked before "
        "they are appended; any mismatch falls back to the network).",
        kafka_note="kafkalite's own: Kafka's followers always fetch over the network."),
    "local_sockets": Setting(
        "Each worker's first PLAINTEXT Kafka listener also accepts on a Unix-domain socket "
        "(Linux's abstract namespace), which kafkalite's own clients on this host use for "
        "their direct links instead of loopback TCP. With security on and the authorizer, each "
        "native port also has a local door: a Unix-domain socket through which a client on "
        "this host without CURVE keys is the principal User:unix:<its user name> (the "
        "kernel's peer credentials), under the ACLs, and so has the ingest gateway (a socket "
        "file in local_door_dir). False closes them all.",
        kafka_note="kafkalite's own: Kafka's listeners are TCP only."),
    "local_door_dir": Setting(
        "Directory of the ingest gateway's local door, the socket file ingest-<port> that "
        "publishers on this host without CURVE keys connect to (with the authorizer on). It "
        "must be the server's user's and writable by no one else, in directories that are "
        "root's or that user's and, where others may write, sticky; else the server does not "
        "start (another user could put a socket in the door's place). Made 0755 when "
        "missing. \"\": /run/kafkalite for a server run by root, else /tmp/kafkalite-<uid>.",
        kafka_note="kafkalite's own."),
    "broker_session_timeout_ms": Setting("A worker silent this long (hung, stopped) is fenced "
                                         "and loses its leaderships.",
                                         ("broker.session.timeout.ms",)),
    "worker_orphan_timeout_ms": Setting(
        "A worker whose supervisor died (kill -9, a crash) serves its partitions on until a "
        "new supervisor on the same data directory adopts it (or, of another configuration, "
        "replaces it), however long that takes; it exits if the data directory is removed. "
        "A positive value bounds the wait, 0 exits at once. A node of a cluster's workers "
        "always exit with it.",
        kafka_note="kafkalite's own: a Kafka broker is one process."),
    "auto_leader_rebalance_enable": Setting("Give leaderships back to preferred replicas.",
                                            ("auto.leader.rebalance.enable",)),
    "leader_imbalance_check_interval_seconds": Setting(
        "How often leaderships are checked for that (Kafka: 300).",
        ("leader.imbalance.check.interval.seconds",)),
    "offsets_topic_num_partitions": Setting("Partitions of `__consumer_offsets`.",
                                            ("offsets.topic.num.partitions",)),
    "group_min_session_timeout_ms": Setting("Smallest session timeout a member may ask "
                                            "(Kafka: 6000; lower because members are local).",
                                            ("group.min.session.timeout.ms",)),
    "group_max_session_timeout_ms": Setting("Largest session timeout a member may ask.",
                                            ("group.max.session.timeout.ms",)),
    "group_initial_rebalance_delay_ms": Setting(
        "How long a new classic group's first rebalance waits for more members to join, "
        "Kafka's default (test servers, `kafkalite.testing` and the launcher, set 0).",
        ("group.initial.rebalance.delay.ms",)),
    "group_consumer_session_timeout_ms": Setting(
        "KIP-848 groups: a member silent this long is removed.",
        ("group.consumer.session.timeout.ms",)),
    "group_consumer_heartbeat_interval_ms": Setting(
        "KIP-848 groups: how often members heartbeat.",
        ("group.consumer.heartbeat.interval.ms",)),
    "group_consumer_migration_policy": Setting(
        "Which online conversions between a classic group and a KIP-848 consumer group are "
        "allowed: `bidirectional` (Kafka 4's default), `upgrade` (a classic group in use "
        "becomes a consumer group when a consumer-protocol member joins), `downgrade` (a "
        "consumer group whose last consumer-protocol member left becomes classic), "
        "`disabled` (a group with members keeps its protocol).",
        ("group.consumer.migration.policy",)),
    "group_share_session_timeout_ms": Setting(
        "Share groups: a member silent this long is removed.",
        ("group.share.session.timeout.ms",)),
    "group_share_heartbeat_interval_ms": Setting(
        "Share groups: how often members heartbeat.",
        ("group.share.heartbeat.interval.ms",)),
    "group_share_record_lock_duration_ms": Setting(
        "Share groups: how long a member holds the records it acquired before they go to "
        "another member.", ("group.share.record.lock.duration.ms",)),
    "group_share_delivery_count_limit": Setting(
        "Share groups: deliveries of a record before it is archived (and dead-lettered).",
        ("group.share.delivery.count.limit",)),
    "group_share_partition_max_record_locks": Setting(
        "Share groups: records of one share-partition in flight (acquired or awaiting "
        "redelivery) at most.", ("group.share.partition.max.record.locks",)),
    "share_auto_offset_reset": Setting(
        "Share groups: where a group starts reading a partition it never read, `latest` or "
        "`earliest`.", ("share.auto.offset.reset",),
        "a group config in Kafka; here one server-wide default for every share group"),
    "share_dead_letter_topic": Setting(
        "Share groups: the topic records rejected or past the delivery count limit are copied "
        "to (with headers naming the group, topic, partition, offset and reason); empty: none. "
        "The topic must exist.", ("errors.deadletterqueue.topic.name",),
        "a group config in Kafka 4.2 (KIP-1191); here one topic for every share group"),
    "offsets_retention_minutes": Setting("Committed offsets of an empty group expire after "
                                         "this long.", ("offsets.retention.minutes",)),
    "transaction_state_num_partitions": Setting("Partitions of `__transaction_state` "
                                                "(Kafka: 50).",
                                                ("transaction.state.log.num.partitions",)),
    "share_coordinator_state_topic_num_partitions": Setting(
        "Partitions of `__share_group_state`, where the share coordinator keeps share groups' "
        "share-partition state (Kafka: 50).", ("share.coordinator.state.topic.num.partitions",)),
    "transaction_max_timeout_ms": Setting("The largest `transaction.timeout.ms` a producer may "
                                          "ask.", ("transaction.max.timeout.ms",)),
    "transactional_id_expiration_ms": Setting("Idle transactional ids are forgotten after "
                                              "this long.",
                                              ("transactional.id.expiration.ms",)),
    "transaction_abort_timed_out_transaction_cleanup_interval_ms": Setting(
        "How often timed-out transactions are aborted (Kafka: 10000).",
        ("transaction.abort.timed.out.transaction.cleanup.interval.ms",)),
    "cluster": Setting("PostgreSQL URL (`postgresql://...`): cluster metadata and the "
                       "controller lease there (\"\": in the data dir); nodes given the same "
                       "one form a cluster.", (), "`controller.quorum.voters` (KRaft)"),
    "node_id": Setting("This node's id in the cluster.", ("node.id", "broker.id")),
    "controller_lease_ms": Setting("With `cluster`: the controller lease, renewed every third "
                                   "of this."),
    "kafka_security_protocol": Setting(
        "Security of the Kafka listener when `listeners` is empty: PLAINTEXT, SSL, "
        "SASL_PLAINTEXT or SASL_SSL.", (),
        "the protocol of `listeners` (`listener.security.protocol.map`)"),
    "listeners": Setting(
        "Named Kafka listeners, `NAME://host:port` comma-separated (\"\": one listener on "
        "`host` and `kafka_port` speaking `kafka_security_protocol`). The port is the "
        "supervisor's; workers listen on `kafka_worker_base_port` + index on the first "
        "listener and on any free port on the others. Clients are told the endpoints of the "
        "listener they connected to.", (), "the same, except the workers' ports"),
    "advertised_listeners": Setting(
        "`NAME://host:port` per listener: the host its clients are told (the port told is "
        "the one listened on).", ("advertised.listeners",)),
    "listener_security_protocol_map": Setting(
        "`NAME:PROTOCOL` per listener (\"\": a listener named PLAINTEXT, SSL, SASL_PLAINTEXT "
        "or SASL_SSL speaks that protocol).", ("listener.security.protocol.map",)),
    "ssl_certfile": Setting("PEM server certificate (chain).", (),
                            "`ssl.keystore.location` with `ssl.keystore.type=PEM`"),
    "ssl_keyfile": Setting("PEM private key (\"\": in `ssl_certfile`)."),
    "ssl_cafile": Setting("PEM CAs that client certificates are checked against.", (),
                          "`ssl.truststore.location` with `ssl.truststore.type=PEM`"),
    "ssl_client_auth": Setting("Mutual TLS: required, requested or none.",
                               ("ssl.client.auth",)),
    "sasl_enabled_mechanisms": Setting("Comma-separated: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512.",
                                       ("sasl.enabled.mechanisms",)),
    "listener_overrides": Setting(
        "Per Kafka listener, TLS and SASL settings that differ from the server-wide ones: "
        "a table per listener name (`[listener_overrides.EXTERNAL]`) of `ssl_certfile`, "
        "`ssl_keyfile`, `ssl_cafile`, `ssl_client_auth` and `sasl_enabled_mechanisms`. "
        "Kafka's `listener.name.<listener>.<setting>` keys (`listener.name.external."
        "ssl.client.auth = \"required\"`) fill it too.", (),
        "`listener.name.<listener>.<setting>`"),
    "sasl_users_file": Setting("SASL credentials, written by `kafkalite users` "
                               "(\"\": `<data_dir>/sasl-users.json`); with --cluster, a "
                               "copy of the cluster's users kept in PostgreSQL.", (),
                               "SCRAM credentials in the metadata log"),
    "connections_max_reauth_ms": Setting(
        "SASL session lifetime told to clients that can re-authenticate (KIP-368, "
        "SaslAuthenticate v1+): a connection not re-authenticated within it is closed at its "
        "next request; 0: sessions never expire.", ("connections.max.reauth.ms",)),
    "connection_failed_authentication_delay_ms": Setting(
        "How long a Kafka connection whose authentication failed stays open after the "
        "answer saying so (nothing more is read from it), so that a client reads that answer "
        "before the close; as Kafka, which also slows a client retrying a wrong password.",
        ("connection.failed.authentication.delay.ms",)),
    "connections_max_idle_ms": Setting(
        "A Kafka connection with nothing read or written for this long is closed (a client "
        "connects again when it next needs the broker); one whose request is still being "
        "served is not idle. Negative (-1): never.", ("connections.max.idle.ms",)),
    "authentication_timeout_ms": Setting(
        "A connection to an SSL, SASL_PLAINTEXT or SASL_SSL Kafka listener that has not "
        "authenticated (TLS handshake, then SASL login) this long after it was accepted is "
        "closed, so that connections which never authenticate hold no descriptor for long. "
        "0: no bound (`connections_max_idle_ms` still applies).",
        kafka_note="kafkalite's own: Kafka leaves such connections to "
                   "`connections.max.idle.ms`"),
    "authorizer_enabled": Setting("Check Kafka-listener requests against the ACLs "
                                  "(`kafkalite acls`; server/auth/authorizer.py).", (),
                                  "authorizer.class.name (any authorizer class turns it on)"),
    "super_users": Setting("`;`-separated principals allowed everything (`User:admin`).",
                           ("super.users",)),
    "allow_everyone_if_no_acl_found": Setting("With the authorizer on, allow a resource "
                                              "that has no ACL at all.",
                                              ("allow.everyone.if.no.acl.found",)),
    "quota_window_num": Setting("Samples of a client quota's rate (`kafkalite client-quotas`; "
                                "server/network/quotas.py): the rate is measured over this many windows.",
                                ("quota.window.num",)),
    "quota_window_size_seconds": Setting("Length of each client quota sample window.",
                                         ("quota.window.size.seconds",)),
    "max_connection_creation_rate": Setting(
        "New connections per second each Kafka listener of each broker process accepts, "
        "over the quota windows; over it the listener waits before accepting more "
        "(server/network/connection_quotas.py). 0: unlimited. Per-IP limits are `ip` client quotas "
        "(`kafkalite client-quotas alter --ip`).", ("max.connection.creation.rate",),
        "Kafka's default is 2147483647 (unlimited)"),
    "native_curve_secret_key_file": Setting(
        "CURVE on the native ZeroMQ ports and the ingest gateway: this server's key pair "
        "(a `.key_secret` file from `kafkalite curve keygen`; \"\": CURVE off). The "
        "control channel and relay between the controller and the workers then accept "
        "this key pair only: every node of a cluster must have the same one."),
    "native_curve_authorized_keys": Setting(
        "With CURVE: the client public keys accepted and their principals: a directory of "
        "`.key` files or a file of `<Z85 key> User:<name>` lines (read again when it changes)."),
    "native_sasl_enabled": Setting(
        "With CURVE on the native ports and a SASL Kafka listener: a client without an "
        "authorized key pair logs in on the native protocol with its SASL user and password "
        "(the Kafka listeners' mechanisms and users), over CURVE with a throwaway key and the "
        "server's public key; it is then that user under the ACLs (server/auth/native_login.py). "
        "False: only authorized keys (and the local door).",
        kafka_note="kafkalite's own: Kafka has no native protocol"),
    "topic_defaults": Setting("A table of Kafka topic configs given to new topics (see the "
                              "topic configs); Kafka's broker-wide `log.*` defaults set "
                              "entries of it."),
}

# Kafka's server.properties name -> our key. Built once from SETTINGS, used by
# ServerConfig.load (and by the docs generator through SETTINGS).
SERVER_ALIASES: dict[str, str] = {alias: name for name, s in SETTINGS.items()
                                  for alias in s.kafka}


@dataclass
class ServerConfig:
    data_dir: str = "./kafkalite-data"
    remote_log_storage_system_enable: bool = False
    remote_log_storage_dir: str = ""
    remote_log_storage_s3_bucket: str = ""
    remote_log_storage_s3_endpoint: str = ""
    remote_log_manager_copier_thread_pool_size: int = 4
    remote_fetch_max_wait_ms: int = 500
    remote_list_offsets_request_timeout_ms: int = 30_000
    host: str = "127.0.0.1"
    advertised_host: str = ""
    workers: int = 0
    port: int = DEFAULT_PORT
    ingest_port: int = DEFAULT_INGEST_PORT
    worker_base_port: int = DEFAULT_WORKER_BASE_PORT
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_worker_base_port: int = DEFAULT_KAFKA_WORKER_BASE_PORT
    metrics_port: int = DEFAULT_METRICS_PORT
    http_tls: bool = False
    http_max_connections: int = 64
    schema_registry_port: int = DEFAULT_SCHEMA_REGISTRY_PORT
    rest_proxy_port: int = DEFAULT_REST_PROXY_PORT
    iceberg_rest_port: int = DEFAULT_ICEBERG_REST_PORT
    iceberg_warehouse_dir: str = ""
    rest_proxy_consumer_instance_timeout_ms: int = 300_000
    log_level: str = ""
    auto_create_topics: bool = True
    default_partitions: int = 1
    default_replication_factor: int = 1
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    max_incremental_fetch_session_cache_slots: int = 1000
    replica_local_reads: bool = True
    local_sockets: bool = True
    local_door_dir: str = ""
    broker_session_timeout_ms: int = 6_000
    # -1: no bound: a fixed window let a slow restart (a loaded machine) find its workers
    # gone (issue 68)
    worker_orphan_timeout_ms: int = -1
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 30
    offsets_topic_num_partitions: int = 16
    group_min_session_timeout_ms: int = 1_000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 3000
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_migration_policy: str = "bidirectional"
    group_share_session_timeout_ms: int = 45_000
    group_share_heartbeat_interval_ms: int = 5_000
    group_share_record_lock_duration_ms: int = 30_000
    group_share_delivery_count_limit: int = 5
    group_share_partition_max_record_locks: int = 2_000
    share_auto_offset_reset: str = "latest"
    share_dead_letter_topic: str = ""
    offsets_retention_minutes: int = 10_080
    transaction_state_num_partitions: int = 4
    share_coordinator_state_topic_num_partitions: int = 4
    transaction_max_timeout_ms: int = 900_000
    transactional_id_expiration_ms: int = 604_800_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 1_000
    cluster: str = ""
    node_id: int = 1
    controller_lease_ms: int = 10_000
    kafka_security_protocol: str = "PLAINTEXT"
    listeners: str = ""
    advertised_listeners: str = ""
    listener_security_protocol_map: str = ""
    ssl_certfile: str = ""
    ssl_keyfile: str = ""
    ssl_cafile: str = ""
    ssl_client_auth: str = "none"
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    listener_overrides: dict = field(default_factory=dict)
    sasl_users_file: str = ""
    connections_max_reauth_ms: int = 0
    connection_failed_authentication_delay_ms: int = 100
    connections_max_idle_ms: int = 600_000
    authentication_timeout_ms: int = 10_000
    authorizer_enabled: bool = False
    super_users: str = ""
    allow_everyone_if_no_acl_found: bool = False
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    max_connection_creation_rate: int = 0
    native_curve_secret_key_file: str = ""
    native_curve_authorized_keys: str = ""
    native_sasl_enabled: bool = True
    topic_defaults: dict = field(default_factory=dict)

    def __post_init__(self):
        # Workers get this config as JSON and may run elsewhere than the
        # flags' working directory: paths are made absolute once, here.
        for name in ("ssl_certfile", "ssl_keyfile", "ssl_cafile", "sasl_users_file",
                     "native_curve_secret_key_file", "native_curve_authorized_keys"):
            if getattr(self, name):
                setattr(self, name, os.path.abspath(getattr(self, name)))
        self.listener_overrides = security.normalized_overrides(self.listener_overrides)
        security.validate(self)
        for name in ("port", "worker_base_port", "kafka_port", "kafka_worker_base_port"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 0 <= value <= 65535:
                raise InvalidConfigurationError(f"{name} must be a port number 0-65535, not {value!r}")
        for name in ("ingest_port", "metrics_port", "schema_registry_port",
                     "rest_proxy_port", "iceberg_rest_port"):           # -1: not served
            value = getattr(self, name)
            if not isinstance(value, int) or not -1 <= value <= 65535:
                raise InvalidConfigurationError(
                    f"{name} must be a port number 0-65535 or -1 (off), not {value!r}")
        if not isinstance(self.log_level, str) or (
                self.log_level and self.log_level.upper() not in LOG_LEVELS):
            raise InvalidConfigurationError(
                f"log_level must be one of {', '.join(LOG_LEVELS)}, not {self.log_level!r}")
        if self.group_consumer_migration_policy not in MIGRATION_POLICIES:
            raise InvalidConfigurationError(
                f"group_consumer_migration_policy must be one of "
                f"{', '.join(MIGRATION_POLICIES)}, not "
                f"{self.group_consumer_migration_policy!r}")
        if not isinstance(self.workers, int) or self.workers < 0:
            raise InvalidConfigurationError(f"workers must be 0 (one per two cores) or more, not {self.workers!r}")
        if not isinstance(self.default_partitions, int) or self.default_partitions < 1:
            raise InvalidConfigurationError(
                f"default_partitions must be at least 1, not {self.default_partitions!r}")
        for name in ("default_replication_factor", "replica_lag_time_max_ms",
                     "replica_fetch_wait_max_ms", "leader_imbalance_check_interval_seconds",
                     "remote_fetch_max_wait_ms", "remote_list_offsets_request_timeout_ms",
                     "broker_session_timeout_ms", "remote_log_manager_copier_thread_pool_size",
                     "offsets_topic_num_partitions",
                     "group_min_session_timeout_ms",
                     "group_max_session_timeout_ms", "offsets_retention_minutes",
                     "group_consumer_session_timeout_ms",
                     "group_consumer_heartbeat_interval_ms",
                     "group_share_session_timeout_ms", "group_share_heartbeat_interval_ms",
                     "group_share_record_lock_duration_ms", "group_share_delivery_count_limit",
                     "group_share_partition_max_record_locks",
                     "transaction_state_num_partitions", "transaction_max_timeout_ms",
                     "share_coordinator_state_topic_num_partitions",
                     "transactional_id_expiration_ms",
                     "transaction_abort_timed_out_transaction_cleanup_interval_ms",
                     "node_id", "controller_lease_ms", "quota_window_num",
                     "quota_window_size_seconds", "http_max_connections",
                     "rest_proxy_consumer_instance_timeout_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise InvalidConfigurationError(f"{name} must be a positive integer, not {value!r}")
        slots = self.max_incremental_fetch_session_cache_slots
        if type(slots) is not int or slots < 0:
            raise InvalidConfigurationError(
                f"max_incremental_fetch_session_cache_slots must be 0 or more, not {slots!r}")
        if type(self.worker_orphan_timeout_ms) is not int or self.worker_orphan_timeout_ms < -1:
            raise InvalidConfigurationError(
                f"worker_orphan_timeout_ms must be a whole number of milliseconds >= 0 "
                f"(0: exit at once), or -1 (wait for the next supervisor however long), not "
                f"{self.worker_orphan_timeout_ms!r}")
        if (not isinstance(self.max_connection_creation_rate, int)
                or self.max_connection_creation_rate < 0):
            raise InvalidConfigurationError(
                f"max_connection_creation_rate must be 0 (unlimited) or a positive integer, "
                f"not {self.max_connection_creation_rate!r}")
        self._check_s3_bucket()
        if self.http_tls and not self.ssl_certfile:
            raise InvalidConfigurationError(
                "http_tls needs ssl_certfile (and ssl_keyfile unless the key is in it): the "
                "certificate the HTTP port presents")
        # as Kafka's: negative turns the idle timeout off (0 would close every connection)
        if type(self.connections_max_idle_ms) is not int or self.connections_max_idle_ms == 0:
            raise InvalidConfigurationError(
                f"connections_max_idle_ms must be a positive number of milliseconds or -1 "
                f"(never), not {self.connections_max_idle_ms!r}")
        if type(self.authentication_timeout_ms) is not int or self.authentication_timeout_ms < 0:
            raise InvalidConfigurationError(
                f"authentication_timeout_ms must be a whole number of milliseconds >= 0 "
                f"(0: no bound), not {self.authentication_timeout_ms!r}")
        if not isinstance(self.cluster, str):
            raise InvalidConfigurationError(f"cluster must be a PostgreSQL DSN, not {self.cluster!r}")
        if self.cluster and not self.cluster.startswith(("postgresql://", "postgres://")):
            raise InvalidConfigurationError(
                f"cluster must be a postgresql:// URL, not {self.cluster!r}")
        if (not isinstance(self.group_initial_rebalance_delay_ms, int)
                or self.group_initial_rebalance_delay_ms < 0):
            raise InvalidConfigurationError("group_initial_rebalance_delay_ms must be 0 or more")
        if self.share_auto_offset_reset not in ("latest", "earliest"):
            raise InvalidConfigurationError(
                f"share_auto_offset_reset must be latest or earliest, not "
                f"{self.share_auto_offset_reset!r}")
        if self.group_min_session_timeout_ms > self.group_max_session_timeout_ms:
            raise InvalidConfigurationError(
                "group_min_session_timeout_ms must not exceed group_max_session_timeout_ms")
        # Fails early, naming the key, if a topic default is not a valid topic config.
        if self.log_config().remote_storage_enable and not self.remote_log_storage_system_enable:
            raise InvalidConfigurationError(
                "topic_defaults: remote.storage.enable is true, but tiered storage is not "
                "enabled (remote_log_storage_system_enable)")

    @property
    def remote_storage_root(self) -> str:
        """Where the local-directory remote store keeps tiered segments."""
        return self.remote_log_storage_dir or os.path.join(self.data_dir, "remote-storage")

    @property
    def iceberg_warehouse(self) -> str | None:
        """Where Iceberg topics' table files go: ``iceberg_warehouse_dir``
        (a directory), else the tiered store's ``iceberg/``: in its bucket
        (``s3://<bucket>/iceberg``, which every node reaches), or its
        directory (on a cluster only when one is named: the default is under
        each node's data directory); None: none of these (the catalog's own
        directory then, one node's)."""
        if self.iceberg_warehouse_dir:
            return os.path.abspath(self.iceberg_warehouse_dir)
        if not self.remote_log_storage_system_enable:
            return None
        if self.remote_log_storage_s3_bucket:
            return f"s3://{self.remote_log_storage_s3_bucket}/{ICEBERG_REMOTE_PREFIX}"
        if self.remote_log_storage_dir or not self.cluster:
            return os.path.join(self.remote_storage_root, ICEBERG_REMOTE_PREFIX)
        return None

    @property
    def iceberg_file_io(self) -> dict[str, str]:
        """pyiceberg's FileIO properties for a warehouse in the S3 store:
        the store's endpoint and region, never a credential (pyarrow's S3
        client takes those from the AWS environment, as boto3 does for the
        tiered segments), so the REST catalog hands these to readers as
        they are. Empty for a directory."""
        warehouse = self.iceberg_warehouse or ""
        if not warehouse.startswith("s3://"):
            return {}
        from kafkalite.storage.remote.s3_storage import s3_region
        return {"s3.region": s3_region(),
                **({"s3.endpoint": self.remote_log_storage_s3_endpoint}
                   if self.remote_log_storage_s3_endpoint else {})}

    def _check_s3_bucket(self) -> None:
        """A bucket name S3 would refuse is refused here, at start: it used
        to fail every store call while the node reported healthy."""
        if self.remote_log_storage_s3_bucket:
            from kafkalite.storage.remote.s3_storage import bucket_name_problem
            problem = bucket_name_problem(self.remote_log_storage_s3_bucket)
            if problem:
                raise InvalidConfigurationError(
                    f"remote_log_storage_s3_bucket {self.remote_log_storage_s3_bucket!r} is not "
                    f"a valid S3 bucket name: {problem}")

    @property
    def iceberg_catalog_uri(self) -> str | None:
        """The SQLAlchemy URL of Iceberg topics' catalog: a cluster's
        PostgreSQL; None: the SQLite file in the data directory."""
        if not self.cluster:
            return None
        from kafkalite.storage.iceberg import cluster_catalog_uri
        return cluster_catalog_uri(self.cluster)

    @property
    def iceberg_unshared(self) -> str | None:
        """Why this cluster's nodes cannot keep Iceberg topics' tables (no
        warehouse they all reach), None: they can (or it is one node)."""
        if self.cluster and self.iceberg_warehouse is None:
            return ("a cluster's Iceberg topics need a warehouse every node reaches: set "
                    "iceberg_warehouse_dir (or, with tiered storage, remote_log_storage_dir "
                    "or remote_log_storage_s3_bucket)")
        return None

    def remote_storage_manager(self):
        """The broker's RemoteStorageManager, None without tiered storage;
        this process's copier pool takes its size (a worker, a broker)."""
        if not self.remote_log_storage_system_enable:
            return None
        from kafkalite.storage.remote.copier import configure_copier
        configure_copier(self.remote_log_manager_copier_thread_pool_size)
        if self.remote_log_storage_s3_bucket:
            from kafkalite.storage.remote.s3_storage import S3RemoteStorage
            return S3RemoteStorage(self.remote_log_storage_s3_bucket,
                                   endpoint_url=self.remote_log_storage_s3_endpoint or None)
        from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage
        return LocalDirectoryRemoteStorage(self.remote_storage_root)

    @property
    def worker_count(self) -> int:
        return self.workers or default_worker_count()

    @property
    def metrics_enabled(self) -> bool:
        return self.metrics_port != METRICS_OFF

    @property
    def schema_registry_enabled(self) -> bool:
        return self.schema_registry_port != METRICS_OFF

    @property
    def rest_proxy_enabled(self) -> bool:
        return self.rest_proxy_port != METRICS_OFF

    @property
    def iceberg_rest_enabled(self) -> bool:
        return self.iceberg_rest_port != METRICS_OFF

    @property
    def effective_log_level(self) -> str:
        """``log_level``, else $KAFKALITE_LOG_LEVEL (kept for old set-ups), else WARNING."""
        return (self.log_level or os.environ.get("KAFKALITE_LOG_LEVEL") or "WARNING").upper()

    @property
    def ingest_door_dir(self) -> str:
        """The directory of the ingest gateway's local door (local_socket.py),
        "" when it has none: no gateway, the authorizer off (no principals to
        tell apart), or local_sockets off."""
        if self.ingest_port < 0 or not (self.authorizer_enabled and self.local_sockets):
            return ""
        return os.path.abspath(self.local_door_dir or local_socket.default_door_dir())

    @property
    def public_host(self) -> str:
        return self.advertised_host or self.host

    def log_config(self, overrides: dict | None = None) -> LogConfig:
        """The LogConfig of a topic: server topic defaults, then the topic's own configs."""
        base = LogConfig.from_properties(self.topic_defaults)
        return LogConfig.from_properties(overrides or {}, base=base)

    @classmethod
    def load(cls, paths=None, **overrides) -> "ServerConfig":
        """Defaults, then the TOML file(s) at ``paths`` (one path or a list: a
        later file's settings override an earlier one's, key by key, also
        within listener overrides and topic defaults), then ``overrides``
        (flags; None = unset). Only the last of several files was read
        before, silently: a test's second file dropped the authorizer its
        first one turned on."""
        values: dict = {}
        for path in [paths] if isinstance(paths, str) else (paths or ()):
            try:
                with open(path, "rb") as f:
                    table = tomllib.load(f)
            except FileNotFoundError:
                raise InvalidConfigurationError(f"config file {path} does not exist") from None
            except tomllib.TOMLDecodeError as exc:
                raise InvalidConfigurationError(f"config file {path}: {exc}") from None
            values = _merged(values, _settings(table, f"config file {path}"))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def _merged(base: dict, later: dict) -> dict:
    """``base`` with ``later``'s keys over it; tables (dicts) merged key by key."""
    out = dict(base)
    for key, value in later.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merged(out[key], value)
        else:
            out[key] = value
    return out


TOPIC_DEFAULTS_PREFIX = "topic_defaults."
# Kafka's per-listener prefix, and the TOML table's flattened one
LISTENER_PREFIXES = ("listener.name.", "listener_overrides.")


def _flatten(table: dict, prefix: str = "") -> dict:
    """TOML tables to dotted keys: an unquoted ``log.retention.hours = 1`` is
    the table log -> retention -> hours to TOML, and one key to Kafka."""
    out = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def _settings(table: dict, where: str) -> dict:
    """A config file's keys (ours, Kafka's aliases of them, Kafka's broker-wide
    topic defaults, ``[topic_defaults]``) -> ServerConfig's arguments. A
    setting given under two names is refused rather than one silently winning,
    except Kafka's own unit variants (``log.retention.ms`` over ``.minutes``
    over ``.hours``), where the finest unit wins as in Kafka."""
    types = {f.name: f.type for f in dataclasses.fields(ServerConfig)}
    broker_defaults = LogConfig.broker_defaults()
    values: dict = {}
    spelled: dict[str, str] = {}          # field or topic config -> the key that set it
    topic: dict[str, tuple[int, object]] = {}   # topic config -> (unit factor, value)
    for key, value in _flatten(table).items():
        prefix = next((p for p in LISTENER_PREFIXES if key.startswith(p)), None)
        if prefix is not None:
            listener, _, setting = key[len(prefix):].partition(".")
            name = SERVER_ALIASES.get(setting, setting)
            if not listener or name not in security.LISTENER_SETTINGS:
                raise InvalidConfigurationError(
                    f"{where}: {key}: a listener may set only "
                    f"{', '.join(security.LISTENER_SETTINGS)} of its own (or Kafka's names "
                    f"for them), as {prefix}<listener>.<setting>")
            overrides = values.setdefault("listener_overrides", {}).setdefault(
                listener.upper(), {})
            if name in overrides:
                raise InvalidConfigurationError(
                    f"{where}: {key} sets {name} of listener {listener.upper()} a second "
                    f"time; keep one")
            overrides[name] = value
            continue
        if key.startswith(TOPIC_DEFAULTS_PREFIX):
            target, factor = key[len(TOPIC_DEFAULTS_PREFIX):], 1
        elif key in types or key in SERVER_ALIASES:
            name = SERVER_ALIASES.get(key, key)
            if name in spelled:
                raise InvalidConfigurationError(
                    f"{where}: {spelled[name]} and {key} both set {name}; keep one")
            spelled[name] = key
            values[name] = _coerce(where, key, types[name], value)
            continue
        elif key in broker_defaults:
            target, factor = broker_defaults[key]
        else:
            raise InvalidConfigurationError(f"{where}: unknown setting {key!r}{_suggest(key)}")
        seen = topic.get(target)
        if seen is not None and seen[0] == factor:
            raise InvalidConfigurationError(
                f"{where}: {spelled['topic:' + target]} and {key} both set topic config "
                f"{target}; keep one")
        if seen is None or factor < seen[0]:
            spelled["topic:" + target] = key
            topic[target] = (factor, _scaled(where, key, value, factor))
    if topic:
        values["topic_defaults"] = {k: v for k, (_, v) in topic.items()}
        try:        # here, so that the error names the file and the key as written
            LogConfig.from_properties(values["topic_defaults"])
        except InvalidConfigurationError as exc:
            raise InvalidConfigurationError(f"{where}: {exc.message}") from None
    if "data_dir" in values and "," in str(values["data_dir"]):
        raise InvalidConfigurationError(
            f"{where}: {spelled['data_dir']} lists several directories; kafkalite keeps one")
    return values


def _coerce(where: str, key: str, kind: str, value):
    """Kafka's properties are strings: ``"auto.create.topics.enable" = "false"``
    copied from a server.properties means false, not a type error."""
    if isinstance(value, str) and kind == "int":
        try:
            return int(value)
        except ValueError:
            raise InvalidConfigurationError(
                f"{where}: {key} must be an integer, not {value!r}") from None
    if isinstance(value, str) and kind == "bool":
        if value.strip().lower() not in ("true", "false"):
            raise InvalidConfigurationError(f"{where}: {key} must be true or false, not {value!r}")
        return value.strip().lower() == "true"
    if isinstance(value, list) and kind == "str":   # Kafka's list settings
        return ",".join(str(v) for v in value)
    if kind == "dict":      # a table would have been flattened into its keys
        raise InvalidConfigurationError(
            f"{where}: {key} must be a table of topic configs, not {value!r}")
    return value


def _scaled(where: str, key: str, value, factor: int):
    """A broker-wide default in its own unit (hours, minutes) -> the topic
    config's unit; Kafka reads any negative retention as -1 (no limit)."""
    if factor == 1:
        return value
    try:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise TypeError     # int(1.5) would quietly drop half an hour
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidConfigurationError(
            f"{where}: {key} must be an integer, not {value!r}") from None
    return -1 if number < 0 else number * factor


def _suggest(key: str) -> str:
    names = [*SETTINGS, *SERVER_ALIASES, *LogConfig.broker_defaults()]
    close = difflib.get_close_matches(key, names, n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return f"{hint}; every setting is listed in docs/configuration.md"
