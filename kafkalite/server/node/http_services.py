"""The supervisor's HTTP services and the addresses it tells.

The HTTP ports, all served by the one HTTP stack (kafkalite/http_server.py,
through http_apps.py, which a cluster's broker nodes serve theirs with too)
with its connection cap, TLS and login: metrics and health with the apps
the caller gives (the web console) on the metrics port, the schema
registry, the REST proxy and the Iceberg REST catalog each on its own.
Then what the node tells of itself: ``server.json``, the native
``server_endpoints`` extension and the ready line.

Which process runs it: the supervisor (``kafkalite server``), on its loop's
one thread (supervisor.py); the HTTP servers on their own threads.

What it may import: as node/ (its __init__).
"""
from __future__ import annotations

import json
import os
import time

from kafkalite import local_socket
from kafkalite.server.auth.security import http_tls_context, security_enabled
from kafkalite.server.listeners import kafka_listeners
from kafkalite.server.network.requests import Listener
from kafkalite.server.node.http_apps import (SchemaRegistryDoor, client_key_file, http_login,
                                             serve_app)
from kafkalite.server.node.loop_clock import collect_start_garbage
from kafkalite.server.node.processes import SERVER_FILE
from kafkalite.storage.checkpoint import write_atomically


# after its workers serve again, how long a supervisor that adopted them
# (or was handed them) waits at most for an idle turn before it serves HTTP
SETTLE_S = 1.0


class HttpServices:
    """The HTTP ports and the node's addresses, the Supervisor's side (this module's docstring)."""

    # since when the workers of an adoption or a takeover all serve (_workers_settled)
    _serving_since: float | None = None

    def _serve_http(self) -> None:
        """The HTTP ports: metrics and the web console, the schema registry,
        the REST proxy, the Iceberg REST catalog. Last in start(), and on a takeover (the workers
        handed over by this process's broker node) only once those workers
        serve, from run(): importing their apps took a second or more in a
        process that had been a broker node (it had never imported them),
        and it came before the control channel and the relay, so before
        the node's workers could join and the dead controller's partitions
        could move. The node is not ready (server.json) before."""
        self._http_after = None
        if self._http_closing is not None:      # the broker node's port, to bind again
            self._http_closing.join()
            self._http_closing = None
        cfg = self.config
        bootstrap = f"{_bracket(self._local_host())}:{self.native.port}"
        login = http_login(cfg, self.acl_control.authorizer)
        if self.metrics is not None:
            self.metrics.serve(cfg.host, cfg.metrics_port,
                               # the console reaches the native port as the
                               # owner's tools do: with the owner's key pair
                               [(prefix, factory(bootstrap, self.metrics.registry,
                                                 self.owner_key_file))
                                for prefix, factory in self.http_apps], login,
                               http_tls_context(cfg),
                               max_connections=cfg.http_max_connections)
        if cfg.schema_registry_enabled and self.schema_registry is not None:
            self._serve_schema_registry(bootstrap, login)
        if cfg.rest_proxy_enabled and self.rest_proxy is not None:
            self._serve_rest_proxy(bootstrap, login)
        if cfg.iceberg_rest_enabled and self.iceberg_rest is not None:
            self._serve_iceberg_rest(login)

    def _workers_settled(self, events: dict) -> bool:
        """Whether what an adoption or a takeover left for later is due
        (``_after_workers_serve``): the node's workers serve (said hello),
        and the loop has had a turn with nothing to read, or
        SETTLE_S went by; or ``_http_after`` passed. Not in the turn that
        took the hellos: the requests the workers kept for this supervisor
        come in the next ones, and a transaction waits on them."""
        now = time.monotonic()
        if now > self._http_after:
            return True
        if any(self.controller.brokers[w.index].fenced for w in self.workers):
            self._serving_since = None
            return False
        if self._serving_since is None:
            self._serving_since = now
            return False
        return not events or now > self._serving_since + SETTLE_S

    def _after_workers_serve(self) -> None:
        """What a start that adopted or was handed running workers leaves
        until they serve: the HTTP ports, a gateway on a free port, the
        collection of what the start left (loop_clock.collect_start_garbage);
        then the node is ready."""
        self._serve_http()
        if self.ingest is None and self.config.ingest_port == 0:
            self._spawn_ingest()    # the node is ready once it says its port
        collect_start_garbage()
        self._check_ready()

    def _serve_schema_registry(self, bootstrap: str, login) -> None:
        """The schema registry (kafkalite/registry/) on a port of its own."""
        door, self.handed_registry = self.handed_registry, None
        # with the native ports' key file when there is no owner key file:
        # without one it could not read _schemas on a node with a key file
        key_file = client_key_file(self.config, self.owner_key_file)
        if door is not None:
            door.adopt(bootstrap, key_file, login, self._refuse_http)
        else:
            door = SchemaRegistryDoor(self.config, self.schema_registry, bootstrap, key_file,
                                      login, self._refuse_http)
        self.registry_app, self.registry_http = door.app, door.http

    def _serve_rest_proxy(self, bootstrap: str, login) -> None:
        """The REST proxy (kafkalite/rest_proxy/) on a port of its own."""
        self.proxy_app = self.rest_proxy(bootstrap, self.owner_key_file,
                                         self.config.rest_proxy_consumer_instance_timeout_ms)
        self.proxy_http = self._serve_app(self.proxy_app, self.config.rest_proxy_port, login,
                                          "rest proxy")

    def _serve_iceberg_rest(self, login) -> None:
        """The Iceberg REST catalog (kafkalite/iceberg_rest/) on a port of its
        own, over the SQL catalog the partition leaders commit to (the data
        directory's, wherever the tables' files are: replica_manager.py)."""
        from kafkalite.storage.iceberg.partition_writer import ICEBERG_DIR
        from kafkalite.storage.iceberg import CATALOG_FILE, NAMESPACE, cluster_catalog_uri
        self.iceberg_app = self.iceberg_rest(
            cluster_catalog_uri(self.config.cluster, read_only=True) if self.config.cluster
            else os.path.join(self.config.data_dir, ICEBERG_DIR, CATALOG_FILE), NAMESPACE,
            self.config.iceberg_file_io)
        self.iceberg_http = self._serve_app(self.iceberg_app, self.config.iceberg_rest_port,
                                            login, "iceberg rest catalog")

    def _serve_app(self, app, port: int, login, name: str):
        """A Confluent-style HTTP app (a client of this node through its
        native port) by the HTTP port's server code: its connection cap, TLS
        and login (any user who logged in; the app asks the ACLs for that
        user through ``environ["kafkalite.authorize"]``), with Confluent's
        JSON error bodies for a refused login."""
        return serve_app(self.config, app, port, login, name, self._refuse_http)

    @property
    def _refuse_http(self):
        """A connection over an HTTP port's cap: counted by the node's
        metrics when they are on (http_apps.serve_app answers it either way)."""
        return self.metrics.refuse_connection if self.metrics is not None else None

    def kafka_bootstraps(self) -> list[dict]:
        """Each Kafka listener's name, bootstrap address (this process, as
        its clients are told) and protocol; the primary first."""
        out = []
        for spec in kafka_listeners(self.config):
            node = self.controller.controller_node(Listener.KAFKA, spec.name)
            out.append({"name": spec.name, "security.protocol": spec.protocol,
                        "bootstrap.servers": f"{_bracket(node['host'])}:{node['port']}"})
        return out

    def endpoints(self) -> dict:
        host = self.config.public_host
        kafka = self.kafka_bootstraps()
        scheme = "https" if self.config.http_tls else "http"
        return {"pid": os.getpid(), "native": f"tcp://{host}:{self.port}",
                "bootstrap.servers": f"{host}:{self.port}",
                "kafka.bootstrap.servers": kafka[0]["bootstrap.servers"],
                "kafka.security.protocol": kafka[0]["security.protocol"],
                # every Kafka listener, the primary first (listeners.py)
                "kafka_listeners": {k["name"]: {"bootstrap.servers": k["bootstrap.servers"],
                                                "security.protocol": k["security.protocol"]}
                                    for k in kafka},
                "kafka_brokers": [{"node_id": b["node_id"], "port": b["port"]}
                                  for b in self.controller.live_brokers(Listener.KAFKA)],
                "ingest": (f"tcp://{host}:{self.ingest_port}"
                           if self.ingest or self.config.ingest_port > 0 else None),
                # where this host's publishers without keys come in (client/ingest.py)
                **({"ingest.local": local_socket.ingest_door(self.config.ingest_door_dir,
                                                             self.ingest_port)}
                   if self.config.ingest_door_dir and (self.ingest or self.config.ingest_port > 0)
                   else {}),
                **({"metrics": f"{scheme}://{_bracket(host)}:{self.metrics.port}/metrics",
                    "health": f"{scheme}://{_bracket(host)}:{self.metrics.port}/health",
                    **{prefix.strip("/"): f"{scheme}://{_bracket(host)}:{self.metrics.port}"
                                          f"{prefix.rstrip('/')}/"
                       for prefix, _ in self.http_apps}}
                   if self.metrics is not None else {}),
                **({"schema_registry": f"{scheme}://{_bracket(host)}:"
                                       f"{self.registry_http.server_port}"}
                   if self.registry_http is not None else {}),
                **({"rest_proxy": f"{scheme}://{_bracket(host)}:{self.proxy_http.server_port}"}
                   if self.proxy_http is not None else {}),
                **({"iceberg_rest": f"{scheme}://{_bracket(host)}:"
                                    f"{self.iceberg_http.server_port}"}
                   if self.iceberg_http is not None else {}),
                "workers": [{"index": w.index, "pid": w.pid, "endpoint": f"tcp://{host}:{w.port}"}
                            for w in self.workers],
                "data_dir": os.path.abspath(self.config.data_dir),
                # the key pair the native ports take, for the owner's tools
                **({"owner.key_file": self.owner_key_file} if self.owner_key_file else {})}

    def _served_endpoints(self, body: dict, principal: str, peer_uid: int | None) -> dict:
        """The native ``server_endpoints`` extension (AdminClient.server_endpoints,
        ``kafkalite cluster info`` away from the data directory): the
        addresses of endpoints(), not this host's process id, data
        directory or key file."""
        # "security": whether the doors ask who is calling, for a client that
        # would otherwise serve others without asking (a standalone registry)
        return {"endpoints": {**{k: v for k, v in self.endpoints().items()
                                 if k not in ("pid", "data_dir", "owner.key_file", "workers")},
                              "security": security_enabled(self.config)}}

    def _write_server_file(self) -> None:
        write_atomically(os.path.join(self.config.data_dir, SERVER_FILE),
                         json.dumps(self.endpoints(), indent=1).encode())

    def _check_ready(self) -> None:
        # this node's workers: other nodes' come and go on their own
        if (not self.ready and self._ingest_out is None and self._http_after is None
                and not any(self.controller.brokers[w.index].fenced for w in self.workers)):
            self.ready = True
            metrics = getattr(self, "metrics", None)   # None also before start() made it
            if metrics is not None:
                # /health answers from the loop's last tick: computed now, a
                # probe sent on reading server.json is not told "starting"
                metrics.tick()
            self._write_server_file()
            e = self.endpoints()
            print(f"kafkalite server ready: bootstrap.servers={e['bootstrap.servers']} "
                  f"(native {e['native']}), Kafka clients "
                  f"{_kafka_summary(e['kafka_listeners'])}, "
                  f"ingest {e['ingest'] or 'off'}, {_http_summary(e, self.http_apps)}"
                  f"{len(self.workers)} worker(s), data in {e['data_dir']}", flush=True)
            if self.ingest is None and self.config.ingest_port > 0:
                self._spawn_ingest()


def _kafka_summary(listeners: dict) -> str:
    """The ready line's Kafka part: the one listener's address as before, or
    each named listener's."""
    if len(listeners) == 1:
        return next(iter(listeners.values()))["bootstrap.servers"]
    return " ".join(f"{name}={v['bootstrap.servers']}" for name, v in listeners.items())


def _http_summary(endpoints: dict, http_apps) -> str:
    """The ready line's HTTP part: where a user finds the console and the
    metrics (a first-time user looked for the console's address in the
    README), or nothing when the HTTP port is off."""
    registry = ([f"schema registry {endpoints['schema_registry']}"]
                if "schema_registry" in endpoints else []) + \
        ([f"rest proxy {endpoints['rest_proxy']}"] if "rest_proxy" in endpoints else []) + \
        ([f"iceberg rest catalog {endpoints['iceberg_rest']}"]
         if "iceberg_rest" in endpoints else [])
    if "metrics" not in endpoints:
        return ", ".join(registry) + ", " if registry else ""
    apps = [f"{prefix.strip('/')} {endpoints[prefix.strip('/')]}" for prefix, _ in http_apps]
    return ", ".join([*apps, *registry, f"metrics {endpoints['metrics']}"]) + ", "


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host
