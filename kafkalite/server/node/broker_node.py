"""A broker node of a cluster: this host's workers, led by another node's
controller (``kafkalite server --cluster DSN --node-id N`` while another
node holds the controller lease).

The controller node's supervisor is the cluster's controller and its group
and transaction coordinator; a broker node runs only partition workers
(brokers), whose broker ids PostgreSQL gives (cluster_store.broker_ids).
They talk to the controller directly: its control channel (hello,
heartbeats, assignments, ISR proposals), its relay (the Kafka requests a
worker does not serve) and its coordinator, at the endpoints the
controller published with its lease (with CURVE, the controller's public key
too: a node whose key pair differs, or that has none, stops at start with
a readable error, since its workers could not join). The controller sees
them as it sees its own workers, except that it learns of a death from
missing heartbeats (``broker_session_timeout_ms``), not from SIGCHLD.

This process does what the supervisor does for workers and nothing else:
the data directory's lock, spawning the workers, restarting any that dies
(backing off), ``server.json``, a clean stop (SIGTERM to the workers); and
it keeps the node's SASL users file a mirror of the cluster's users
(cluster_store.UsersMirror), which its workers' Kafka listeners log in
against. It serves the node's schema registry too (``schema_registry_port``,
http_apps.py, as the controller's node serves its own): every node's
registry takes requests, one of them leads and the others forward writes
to it (kafkalite/registry/leader.py), so a cluster needs no standalone
registry. The registry is a client of the cluster through the
controller's native port, built again over the new controller's when it
changes; it goes with the workers to the supervisor of a takeover
(http_apps.SchemaRegistryDoor: one registry on the port, at one URL); its
login asks the cluster's ACLs, read from PostgreSQL every ACL_REFRESH_S
(the controller's node has them at once). It serves the Iceberg REST
catalog too (``iceberg_rest_port``) over the cluster's Iceberg catalog in
PostgreSQL, read-only: every node's lists the same tables (a takeover's
supervisor serves its own instead, this one closed at the hand-over).
When the controller changes (a new lease epoch: its node restarted, or
another took over) it writes the new one's endpoints to
``<data dir>/.controller`` (processes.CONTROLLER_FILE); its workers, which
look there as often as they beat, say hello to the new controller and
serve on, as KRaft brokers re-register with a new controller: nothing is
restarted or reopened. When the controller's lease expires (its node
died, was cut off from PostgreSQL, or stopped), this node ends ``run``
with ``takeover`` set and its workers running: serve() then starts a
supervisor here and hands it the lock and the workers (``hand_over``,
processes.RunningWorkers); it takes the lease and becomes the controller,
adopting them, or, if another node took it first, serve() runs a broker
node again under that one with the same workers.

Who may call: supervisor.serve(), single-threaded.
"""
from __future__ import annotations

import fcntl
import importlib
import json
import logging
import os
import signal
import sys
import threading
import time

from kafkalite import errors
from kafkalite.server.controller import cluster_store
from kafkalite.server.config import ServerConfig
from kafkalite.server.auth.authorizer import acls_from_json, authorizer_from_config
from kafkalite.server.auth.credentials import users_file
from kafkalite.server.auth.security import native_curve
from kafkalite.server.node.http_apps import (SchemaRegistryDoor, client_key_file, http_login,
                                             http_url, serve_app)
from kafkalite.server.node.processes import (LOCK_FILE, RESTART_BACKOFF_S, SERVER_FILE,
                                             SHUTDOWN_TIMEOUT_S, RunningWorkers, WorkerProcess,
                                             advertise_controller, spawn_worker, stop_children)
from kafkalite.storage.checkpoint import write_atomically

log = logging.getLogger("kafkalite.broker_node")

LOOP_S = 0.1
CONTROLLER_CHECK_S = 1.0
CONTROLLER_WAIT_S = 30.0
ACL_REFRESH_S = 2.0      # how stale a broker node's registry login's ACLs may be


class BrokerNode:
    def __init__(self, config: ServerConfig, handed: RunningWorkers | None = None,
                 schema_registry=None, registry: SchemaRegistryDoor | None = None,
                 iceberg_rest=None):
        self.config = config
        # the Iceberg REST catalog's app factory (kafkalite/iceberg_rest/
        # make_app), as the supervisor is given it; its app and HTTP server
        self.iceberg_rest = iceberg_rest
        self.iceberg_app = None
        self.iceberg_http = None
        # the registry's WSGI app factory (kafkalite/registry/ make_app), as
        # the supervisor is given it; None: the node serves no registry
        self.schema_registry = schema_registry
        # the node's registry as it serves: a supervisor's that found
        # another controller first hands it here (serve())
        self.registry = registry
        self._login = None
        self.authorizer = None          # the registry login's (None: the authorizer is off)
        self._next_acls = 0.0
        # the lock and workers of this process's supervisor, which found
        # another node holding the lease: they join its controller as they are
        self.handed = handed
        self.workers: list[WorkerProcess] = []
        self.controller: dict | None = None
        self._stop = False
        self.takeover = False   # the controller's lease expired: run() ends so that
        #                         serve() can make this node the controller
        self.expired_controller: int | None = None   # the node whose lease it was
        self._lock_fd = -1
        self._stop_requested = False    # SIGTERM/SIGINT: the workers stop with the node
        self._next_check = 0.0
        self.users_mirror: cluster_store.UsersMirror | None = None

    def request_stop(self) -> None:
        self._stop = self._stop_requested = True

    def start(self) -> None:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        handed, self.handed = self.handed, None
        if handed is not None:
            self._lock_fd, handed.lock_fd = handed.lock_fd, -1
            if handed.http_closing is not None:     # its port is this node's to bind
                handed.http_closing.join()
        else:
            self._lock_fd = os.open(os.path.join(cfg.data_dir, LOCK_FILE),
                                    os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise errors.KafkaStorageError(
                    f"another kafkalite server is using {cfg.data_dir}") from None
        running = handed.running() if handed is not None else {}
        # this node's from here: handed on again (hand_over) if the start
        # ends without a controller to join, or fails
        self.workers = list(running.values())
        self.controller = self._wait_for_controller()
        if self.controller is None:
            # none came: serve() tries to be it -- unless the wait ended
            # because SIGTERM asked this node to stop (then serve() would
            # start a supervisor, and the stop request would be lost)
            self.takeover = not self._stop
            self._stop = True
            return
        self._check_key_pair()
        self.users_mirror = cluster_store.UsersMirror(
            cfg.cluster, users_file(cfg.data_dir, cfg.sasl_users_file))
        self.users_mirror.start()
        advertise_controller(cfg.data_dir, self.controller["epoch"],
                             self.controller["endpoints"])
        ids = cluster_store.broker_ids(cfg.cluster, cfg.node_id, cfg.worker_count,
                                       cluster_store.START_TIMEOUT_S)
        self.workers = []
        for i, broker_id in enumerate(ids):
            if broker_id in running:        # it joins the controller named above
                self.workers.append(running.pop(broker_id))
                continue
            port = cfg.worker_base_port + i if cfg.worker_base_port else 0
            kafka_port = cfg.kafka_worker_base_port + i if cfg.kafka_worker_base_port else 0
            self.workers.append(WorkerProcess(broker_id, port, kafka_port))
            self._spawn(self.workers[-1])
        stop_children(list(running.values()), SHUTDOWN_TIMEOUT_S)   # none of this node's now
        self._serve_schema_registry()
        self._serve_iceberg_rest()
        self._write_server_file()
        # what a takeover's start imports that a broker node does not
        # (NodeMetrics): 0.05-0.3 s at load 12, taken now, off its path
        threading.Thread(target=importlib.import_module, args=("prometheus_client",),
                         name="takeover-imports", daemon=True).start()
        registry = f"schema registry {self.registry.url}, " if self.registry is not None else ""
        print(f"kafkalite broker node {cfg.node_id} ready: workers "
              f"{', '.join(str(w.index) for w in self.workers)} under the controller on node "
              f"{self.controller['node_id']} (bootstrap.servers="
              f"{self.controller['endpoints'].get('bootstrap.servers')}), {registry}data in "
              f"{cfg.data_dir}", flush=True)

    def _serve_schema_registry(self) -> None:
        """The node's schema registry, as the controller's node serves it
        (http_apps.py), over the controller's native port: with the
        cluster's CURVE key pair when its native ports take one (every
        node has the same, _check_key_pair), as the node's own processes
        do; the controller's port is on another host, where no local door
        lets it in without."""
        cfg = self.config
        if not cfg.schema_registry_enabled or self.schema_registry is None:
            return
        self.authorizer = authorizer_from_config(cfg)
        self._refresh_acls()
        self._login = http_login(cfg, self.authorizer)
        bootstrap = self.controller["endpoints"]["bootstrap.servers"]
        if self.registry is not None:
            self.registry.adopt(bootstrap, self._key_file, self._login)
        else:
            self.registry = SchemaRegistryDoor(cfg, self.schema_registry, bootstrap,
                                               self._key_file, self._login)

    def _serve_iceberg_rest(self) -> None:
        """The Iceberg REST catalog over the cluster's catalog (the same
        tables as every node's), behind the node's login."""
        cfg = self.config
        if not cfg.iceberg_rest_enabled or self.iceberg_rest is None:
            return
        from kafkalite.storage.iceberg import NAMESPACE, cluster_catalog_uri
        if self.authorizer is None:
            self.authorizer = authorizer_from_config(cfg)
            self._refresh_acls()
        if self._login is None:
            self._login = http_login(cfg, self.authorizer)
        self.iceberg_app = self.iceberg_rest(cluster_catalog_uri(cfg.cluster, read_only=True),
                                             NAMESPACE, cfg.iceberg_file_io)
        self.iceberg_http = serve_app(cfg, self.iceberg_app, cfg.iceberg_rest_port,
                                      self._login, "iceberg rest catalog")

    def _close_iceberg_rest(self) -> None:
        if self.iceberg_http is not None:
            self.iceberg_http.close()
            self.iceberg_app.close()
            self.iceberg_http = self.iceberg_app = None

    @property
    def _key_file(self) -> str | None:
        return client_key_file(self.config, None)

    def _refresh_acls(self) -> None:
        if self.authorizer is None or time.monotonic() < self._next_acls:
            return
        self._next_acls = time.monotonic() + ACL_REFRESH_S
        try:
            self.authorizer.replace(acls_from_json(cluster_store.read_acls(self.config.cluster)))
        except errors.KafkaError as exc:
            log.warning("cannot read the cluster's ACLs: %s", exc)

    def _wait_for_controller(self) -> dict | None:
        """The controller, once it has published its endpoints (a node that
        just took the lease binds them first: up to a lease's length); None
        when its lease expired meanwhile, or none was published in time."""
        deadline = time.monotonic() + max(CONTROLLER_WAIT_S, 3 * self.config.controller_lease_ms
                                          / 1000.0)
        while True:
            try:
                c = cluster_store.read_controller(self.config.cluster)
            except errors.KafkaStorageError:
                # PostgreSQL away for a moment (this node may be coming
                # back from a network partition): the wait goes on
                if time.monotonic() > deadline or self._stop:
                    raise
                time.sleep(LOOP_S)
                continue
            if c is not None and c["live"] and c["endpoints"]:
                return c
            if c is not None and not c["live"]:
                self.expired_controller = c["node_id"]
                return None
            if time.monotonic() > deadline or self._stop:
                return None
            time.sleep(LOOP_S)

    def _check_key_pair(self) -> None:
        """The controller's control channel and relay take the cluster's
        CURVE key pair only (processes.bind_control): workers started with
        another, or without CURVE, would never join. One readable error
        instead (the CLI's exit 1), before any worker starts."""
        theirs = self.controller["endpoints"].get("curve.server.key")
        curve = native_curve(self.config)
        ours = curve.public.decode() if curve is not None else None
        if theirs == ours:
            return
        node = self.controller["node_id"]
        if ours is None:
            why = (f"the controller (node {node}) runs CURVE between the nodes (server key "
                   f"{theirs}): start node {self.config.node_id} with the same key pair "
                   f"(native_curve_secret_key_file)")
        elif theirs is None:
            why = (f"the controller (node {node}) runs without CURVE, but node "
                   f"{self.config.node_id} has a key pair (native_curve_secret_key_file)")
        else:
            why = (f"node {self.config.node_id}'s CURVE key pair (public key {ours}) is not "
                   f"the cluster's (the controller, node {node}, has {theirs})")
        raise errors.InvalidConfigurationError(
            f"{why}; every node of a cluster needs the same CURVE settings and key pair")

    def _spawn(self, w: WorkerProcess) -> None:
        e = self.controller["endpoints"]
        spawn_worker(w, self.config, e["control"], e["relay"], e["coordinator"])

    def _write_server_file(self) -> None:
        e = self.controller["endpoints"]
        write_atomically(os.path.join(self.config.data_dir, SERVER_FILE), json.dumps({
            "pid": os.getpid(), "node_id": self.config.node_id, "role": "broker",
            "controller": self.controller["node_id"],
            "bootstrap.servers": e.get("bootstrap.servers"),
            "kafka.bootstrap.servers": e.get("kafka.bootstrap.servers"),
            **({"schema_registry": self.registry.url} if self.registry is not None else {}),
            **({"iceberg_rest": http_url(self.config, self.iceberg_http.server_port)}
               if self.iceberg_http is not None else {}),
            "workers": [{"index": w.index, "pid": w.pid} for w in self.workers],
            "data_dir": os.path.abspath(self.config.data_dir)}, indent=1).encode())

    def _check_controller(self) -> None:
        now = time.monotonic()
        if now < self._next_check:
            return
        self._next_check = now + CONTROLLER_CHECK_S
        try:
            c = cluster_store.read_controller(self.config.cluster)
        except errors.KafkaError as exc:
            log.warning("cannot read the controller: %s", exc)
            return
        if c is not None and c["live"]:
            # Looked at again just after the lease would run out unless
            # renewed (the controller renews it every third of its length),
            # rather than on the next whole interval: the expiry is found
            # within 50 ms instead of up to CONTROLLER_CHECK_S late, which
            # was part of every controller failover's time to writable
            self._next_check = now + min(CONTROLLER_CHECK_S, max(0.05, c["remaining_s"] + 0.05))
        if c is not None and not c["live"] and not self._stop:
            # the controller's lease ran out (PostgreSQL's clock): its node is
            # dead, cut off, or stopped. This node tries to take the lease,
            # its workers running (serve() starts a supervisor, which
            # takes it or, if another node was faster, comes back here).
            log.warning("the controller (node %d, epoch %d) let its lease expire; node %d "
                        "tries to take over", c["node_id"], c["epoch"], self.config.node_id)
            print(f"kafkalite: the controller node {c['node_id']} is gone; node "
                  f"{self.config.node_id} tries to take over", file=sys.stderr, flush=True)
            self.takeover = True
            self.expired_controller = c["node_id"]
            self._stop = True
            return
        if c is None or not c["endpoints"] or (
                c["epoch"], c["endpoints"]) == (self.controller["epoch"],
                                                self.controller["endpoints"]):
            return   # no controller to join yet (it publishes once bound), or the same one
        log.warning("the controller is now node %d (epoch %d); this node's workers join it",
                    c["node_id"], c["epoch"])
        self.controller = c
        advertise_controller(self.config.data_dir, c["epoch"], c["endpoints"])
        if self.registry is not None and c["endpoints"].get("bootstrap.servers"):
            self.registry.adopt(c["endpoints"]["bootstrap.servers"], self._key_file,
                                self._login)
        self._write_server_file()

    def _watch_workers(self) -> None:
        now = time.monotonic()
        changed = False
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is not None:
                code = w.proc.returncode
                log.error("worker %d (pid %d) exited with %s; restarting it", w.index, w.pid, code)
                w.proc = None
                delay = RESTART_BACKOFF_S[min(w.crashes_in_a_row, len(RESTART_BACKOFF_S) - 1)]
                w.crashes_in_a_row += 1
                w.restart_at = now + delay
            if w.proc is None and not self._stop and now >= w.restart_at:
                w.restarts += 1
                self._spawn(w)
                changed = True
        if changed:
            self._write_server_file()

    def run(self) -> int:
        """Until SIGTERM, or until the controller's lease expires
        (``takeover``): then the workers are left running for serve() to
        hand to the supervisor it starts (``hand_over``)."""
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        while not self._stop:
            time.sleep(LOOP_S)
            self._check_controller()
            self._watch_workers()
            self._refresh_acls()
        if not self.takeover or self._stop_requested:
            self.shutdown()
        return 0

    def hand_over(self) -> RunningWorkers:
        """The lock and the running workers, for the supervisor serve()
        starts next on this node; this node lets go of the rest."""
        # Its port is the next supervisor's to bind, which it does once its
        # workers serve (supervisor_start.py _http_after): closed on a
        # thread, since cheroot's close waits out its selector's 0.5 s
        # timeout, which was 0-0.5 s of every takeover before the lease
        # was even asked for.
        closing = None
        if self.iceberg_http is not None:
            closing = threading.Thread(target=self._close_iceberg_rest,
                                       name="iceberg-rest-close", daemon=True)
            closing.start()
        handed = RunningWorkers(self._lock_fd, self.workers, closing)
        self._lock_fd, self.workers = -1, []
        if self.users_mirror is not None:
            # not waited for: its thread's poll took up to a second of
            # every takeover, before the lease was even asked for
            self.users_mirror.close(wait=False)
            self.users_mirror = None
        # server.json stays: its workers run on, and the supervisor (or
        # the next broker node) writes its own over it. Removed here, the
        # node had none for a moment (a tool reading it then failed)
        return handed

    def hand_over_registry(self) -> SchemaRegistryDoor | None:
        """The node's registry as it serves, for the supervisor serve()
        starts next on this node (hand_over)."""
        registry, self.registry = self.registry, None
        return registry

    def _close_registry(self) -> None:
        if self.registry is not None:
            self.registry.close()
            self.registry = None

    def shutdown(self) -> None:
        self._close_registry()
        self._close_iceberg_rest()
        self._stop_workers()
        if self.users_mirror is not None:
            self.users_mirror.close()
            self.users_mirror = None
        try:
            os.unlink(os.path.join(self.config.data_dir, SERVER_FILE))
        except FileNotFoundError:
            pass
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def _stop_workers(self) -> None:
        stop_children(self.workers, SHUTDOWN_TIMEOUT_S)
