from __future__ import annotations


def _server(args) -> int:
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
        rest_proxy_port=args.rest_proxy_port,
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
    from kafkalite.server.auth.security import refuse_open_node_channels, restrict_file_modes
    refuse_open_node_channels(config)
    restrict_file_modes(config)
    # The workers first: their start-up overlaps the supervisor's imports.
    early = start_early(config)
    from kafkalite.server.node.supervisor import serve
    apps = [("/console", _console_app)] if args.console else []
    from kafkalite.registry import make_app as schema_registry
    from kafkalite.rest_proxy import make_app as rest_proxy
    return serve(config, apps, early, schema_registry, rest_proxy)


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
