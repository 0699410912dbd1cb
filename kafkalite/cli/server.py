"""``kafkalite server``: run a broker (the supervisor and its partition
workers) until SIGTERM or Ctrl-C, its settings from ``--config`` files and
the flags.

The ``kafkalite`` process becomes the supervisor. It starts the workers
before it imports the supervisor's own parts (server/node/processes.py),
and hands the supervisor the apps server/ may not import: the web console
and POST /query's SQL over topics (each imported at its first request),
the schema registry, the REST proxy and the Iceberg REST catalog.
Its parser is the only one `kafkalite server` builds, so this module
imports argparse alone at the top.
"""
from __future__ import annotations

import argparse


HELP = "run a broker (supervisor + partition workers)"
DESCRIPTION = ("Run a kafkalite broker until SIGTERM or Ctrl-C. With no options: data in "
               "./kafkalite-data, native protocol on 127.0.0.1:7092, ingest on 7091, workers on "
               "7100+, Prometheus metrics and health on 9404, one worker per two cores. Flags "
               "override --config (TOML).")


def add_arguments(server: argparse.ArgumentParser) -> None:
    _add_process_arguments(server)
    _add_cluster_arguments(server)
    _add_security_arguments(server)


def _add_process_arguments(server: argparse.ArgumentParser) -> None:
    """Where the server keeps its data, what it binds and which services it runs."""
    server.add_argument("--config", metavar="FILE", action="append",
                        help="TOML config file (repeatable: a later file's settings override "
                             "an earlier one's)")
    server.add_argument("--data-dir", help="where topics and metadata live (default ./kafkalite-data)")
    server.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    server.add_argument("--advertised-host", help="host clients are told to connect to")
    server.add_argument("--workers", type=int, help="partition worker processes (0: one per two cores, at least one)")
    server.add_argument("--port", type=int, help="native protocol port (0: any free port)")
    server.add_argument("--ingest-port", type=int, help="plain ZeroMQ ingest port (0: any; -1: off)")
    server.add_argument("--worker-base-port", type=int, help="worker i listens on this + i (0: any)")
    server.add_argument("--kafka-port", type=int,
                        help="Kafka wire protocol port of the supervisor (0: any free port)")
    server.add_argument("--kafka-worker-base-port", type=int,
                        help="worker i serves Kafka clients on this + i (0: any)")
    server.add_argument("--metrics-port", type=int,
                        help="HTTP port of Prometheus metrics (/metrics) and health (/health) "
                             "(default 9404; 0: any free port; -1: off)")
    server.add_argument("--schema-registry-port", type=int,
                        help="HTTP port of the schema registry (Confluent's REST API; "
                             "default 8081; 0: any free port; -1: off)")
    server.add_argument("--rest-proxy-port", type=int,
                        help="HTTP port of the REST proxy (Confluent REST Proxy's v3 and v2 "
                             "consumer API; default 8082; 0: any free port; -1: off)")
    server.add_argument("--iceberg-rest-port", type=int,
                        help="HTTP port of the Iceberg REST catalog of the Iceberg topics' "
                             "tables (read-only; default 8181; 0: any free port; -1: off)")
    server.add_argument("--console", action=argparse.BooleanOptionalAction, default=True,
                        help="serve the web console on the metrics port, at /console/ "
                             "(default: on)")
    server.add_argument("--log-level", metavar="LEVEL",
                        help="DEBUG, INFO (topic, config, group, worker and recovery events), "
                             "WARNING or ERROR (default: $KAFKALITE_LOG_LEVEL, else WARNING)")


def _add_cluster_arguments(server: argparse.ArgumentParser) -> None:
    """Topics' defaults, replication, leadership, groups and the cluster's metadata."""
    server.add_argument("--auto-create-topics", action=argparse.BooleanOptionalAction, default=None,
                        help="create unknown topics when a client asks for them (default: on)")
    server.add_argument("--default-partitions", type=int,
                        help="partitions of auto-created topics and of topics created without a "
                             "count (default 1)")
    server.add_argument("--default-replication-factor", type=int,
                        help="replicas (on distinct workers) of topics created without a "
                             "replication factor (default 1)")
    server.add_argument("--replica-lag-time-max-ms", type=int,
                        help="a follower not caught up for this long leaves the ISR "
                             "(default 30000)")
    server.add_argument("--auto-leader-rebalance", action=argparse.BooleanOptionalAction,
                        default=None, help="give leaderships back to the preferred replicas "
                                           "(default: on)")
    server.add_argument("--broker-session-timeout-ms", type=int,
                        help="a worker whose loop is silent this long (hung, stopped) loses "
                             "its leaderships (default 6000)")
    server.add_argument("--group-initial-rebalance-delay-ms", type=int,
                        help="a new consumer group's first rebalance waits this long for more "
                             "members (default 3000, as Kafka; test servers use 0)")
    server.add_argument("--leader-imbalance-check-interval-seconds", type=int,
                        help="how often leaderships are checked for that (default 30)")
    server.add_argument("--cluster", metavar="POSTGRESQL_URL",
                        help="keep cluster metadata (topics, leaders, ISR) and the controller "
                             "lease in this PostgreSQL database instead of the data dir, e.g. "
                             "postgresql://user@host/db; nodes given the same one form a "
                             "cluster (the first is its controller, the others broker nodes)")
    server.add_argument("--node-id", type=int, help="this node's id in the cluster (default 1)")
    server.add_argument("--controller-lease-ms", type=int,
                        help="with --cluster: the controller lease's length; a node that cannot "
                             "renew it for this long loses it (default 10000)")


def _add_security_arguments(server: argparse.ArgumentParser) -> None:
    """Listeners, TLS, SASL and CURVE."""
    server.add_argument("--kafka-security-protocol",
                        choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
                        help="security of the Kafka listener (supervisor and workers) when "
                             "--listeners is not given, as Kafka's security.protocol (default "
                             "PLAINTEXT)")
    server.add_argument("--listeners", metavar="NAME://HOST:PORT,...",
                        help="named Kafka listeners, as Kafka's listeners (e.g. "
                             "PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093); the port is "
                             "the supervisor's, workers take --kafka-worker-base-port + i on the "
                             "first and any free port on the others; clients are told the "
                             "endpoints of the listener they connected to")
    server.add_argument("--advertised-listeners", metavar="NAME://HOST:PORT,...",
                        help="the host told to each listener's clients (the port told is the one "
                             "listened on)")
    server.add_argument("--listener-security-protocol-map", metavar="NAME:PROTOCOL,...",
                        help="each listener's protocol (default: a listener named after a "
                             "protocol speaks it)")
    server.add_argument("--ssl-certfile", metavar="PEM",
                        help="the listeners' TLS certificate (chain), PEM (ssl.keystore)")
    server.add_argument("--ssl-keyfile", metavar="PEM",
                        help="its private key, PEM (default: in --ssl-certfile)")
    server.add_argument("--ssl-cafile", metavar="PEM",
                        help="CA certificates clients' certificates are checked against "
                             "(ssl.truststore), for --ssl-client-auth")
    server.add_argument("--ssl-client-auth", choices=["required", "requested", "none"],
                        help="mutual TLS: ask for client certificates (default none)")
    server.add_argument("--sasl-enabled-mechanisms", metavar="LIST",
                        help="comma-separated: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (default all)")
    server.add_argument("--sasl-users-file", metavar="FILE",
                        help="SASL credentials, written by `kafkalite users` "
                             "(default <data-dir>/sasl-users.json)")
    server.add_argument("--native-curve-secret-key-file", metavar="FILE",
                        help="CURVE on the native ports and the ingest gateway: this server's "
                             "key pair, a .key_secret file of `kafkalite curve keygen`")
    server.add_argument("--native-curve-authorized-keys", metavar="PATH",
                        help="with CURVE: the clients' public keys and principals, a directory "
                             "of .key files or a file of '<Z85 key> User:<name>' lines")


def run(args) -> int:
    from kafkalite.server.config import ServerConfig
    from kafkalite.server.node.processes import start_early
    config = ServerConfig.load(
        args.config, data_dir=args.data_dir, host=args.host,
        advertised_host=args.advertised_host, workers=args.workers, port=args.port,
        ingest_port=args.ingest_port, worker_base_port=args.worker_base_port,
        kafka_port=args.kafka_port, kafka_worker_base_port=args.kafka_worker_base_port,
        auto_create_topics=args.auto_create_topics, default_partitions=args.default_partitions,
        default_replication_factor=args.default_replication_factor,
        replica_lag_time_max_ms=args.replica_lag_time_max_ms,
        auto_leader_rebalance_enable=args.auto_leader_rebalance,
        leader_imbalance_check_interval_seconds=args.leader_imbalance_check_interval_seconds,
        group_initial_rebalance_delay_ms=args.group_initial_rebalance_delay_ms,
        broker_session_timeout_ms=args.broker_session_timeout_ms, cluster=args.cluster,
        node_id=args.node_id, controller_lease_ms=args.controller_lease_ms,
        metrics_port=args.metrics_port, schema_registry_port=args.schema_registry_port,
        rest_proxy_port=args.rest_proxy_port, iceberg_rest_port=args.iceberg_rest_port,
        log_level=args.log_level,
        kafka_security_protocol=args.kafka_security_protocol, listeners=args.listeners,
        advertised_listeners=args.advertised_listeners,
        listener_security_protocol_map=args.listener_security_protocol_map,
        ssl_certfile=args.ssl_certfile,
        ssl_keyfile=args.ssl_keyfile, ssl_cafile=args.ssl_cafile,
        ssl_client_auth=args.ssl_client_auth,
        sasl_enabled_mechanisms=args.sasl_enabled_mechanisms,
        sasl_users_file=args.sasl_users_file,
        native_curve_secret_key_file=args.native_curve_secret_key_file,
        native_curve_authorized_keys=args.native_curve_authorized_keys)
    from kafkalite.server.auth.security import (check_local_door_dir, refuse_open_node_channels,
                                                restrict_file_modes)
    refuse_open_node_channels(config)
    restrict_file_modes(config)
    check_local_door_dir(config)
    # The workers first: their start-up overlaps the supervisor's imports.
    early = start_early(config)
    from kafkalite.server.node.roles import serve
    import functools
    apps = ([("/console", _console_app)] if args.console else []) + \
        [("/query", functools.partial(_query_app, node_id=config.node_id))]
    from kafkalite.registry import make_app as schema_registry
    from kafkalite.iceberg_rest import make_app as iceberg_rest
    from kafkalite.rest_proxy import make_app as rest_proxy
    return serve(config, apps, early, schema_registry, rest_proxy, iceberg_rest)


def _query_app(bootstrap: str, registry, owner_key_file: str | None = None, node_id: int = 0):
    """POST /query (kafkalite/sql/http_query.py), imported (DuckDB, the
    client, pyarrow) at its first request; its clients connect with the
    owner's key pair when security is on. With it, the node's runner of
    persistent queries (kafkalite/sql/query_runner.py: a process of its
    own from the first CREATE STREAM on, kept alive by a thread here,
    stopped with the app)."""
    import threading
    from kafkalite.sql.query_runner import RunnerKeeper
    keeper = RunnerKeeper(bootstrap, node_id, owner_key_file)
    lock, built = threading.Lock(), []

    def app(environ, start_response):
        with lock:
            if not built:
                from kafkalite.client.config import owner_config
                from kafkalite.sql.http_query import make_app
                built.append(make_app(bootstrap, owner_config({"owner.key_file": owner_key_file})))
        return built[0](environ, start_response)
    if registry is not None:
        # how many run now: a client gone (a closed console page, a Ctrl-C)
        # must bring it back down, which the tests check here
        from prometheus_client import Gauge
        Gauge("kafkalite_sql_queries_running", "ad-hoc SQL queries running on POST /query",
              registry=registry).set_function(lambda: built[0].running() if built else 0)
    app.close = keeper.close
    app.json_only = True        # it refuses other bodies (415): no CSRF header needed
    return app


def _console_app(bootstrap: str, registry, owner_key_file: str | None = None):
    """The web console as a WSGI app that imports it (its client, pyarrow)
    at its first request rather than before the server is ready; with
    ``owner_key_file`` (security on) its clients connect with that key pair."""
    import threading
    lock, built = threading.Lock(), []

    def app(environ, start_response):
        with lock:          # the metrics server answers on several threads
            if not built:
                from kafkalite.client.config import owner_config
                from kafkalite.webconsole import make_app
                built.append(make_app(bootstrap, registry,
                                      owner_config({"owner.key_file": owner_key_file})))
        return built[0](environ, start_response)

    def close() -> None:
        if built and hasattr(built[0], "close"):
            built[0].close()
    app.close = close
    return app
