"""The supervisor process: the worker processes' lives, and the wiring of the node.

One module of about 1,450 lines, with reason: the Supervisor is the
node's one loop, and what it wires (controller, coordinators,
listeners, the workers' lives, adoption, takeover) meets in its start
and its loop; each part's logic lives in its own folder (controller/,
group/, txn/, network/), the process helpers in processes.py.

It runs, on one thread, everything of a node that is not a partition:

- process management (this module): the data directory's lock file,
  spawning the partition workers and the ingest gateway, restarting any
  that dies (backing off when one keeps dying), ``server.json``, and a
  clean stop;
- the loop's clock (loop_clock.py): the workers' heartbeats and the
  group members' sessions are timed in the time this loop was able to
  look, so a stalled loop fences no worker and expires no member;
- the controller (controller.py): cluster metadata and the admin APIs;
  the metadata lives in the data directory (metadata.py) or, with
  ``--cluster``, in PostgreSQL under a controller lease this process
  holds (cluster_store.py); a metadata change the store cannot take yet
  (PostgreSQL away) is kept and retried in order, never acted on first;
  in a cluster, other nodes' workers join this controller's control
  channel and relay over the network (broker_node.py runs those nodes,
  and makes one of them the controller when this one's lease expires:
  serve() below), and the brokers of a node that never joins are fenced
  a session timeout and a lease after start (_fence_absent_brokers);
- the group coordinator (coordinator.py) and its ``__consumer_offsets``;
- the transaction coordinator (txn_coordinator.py) and its
  ``__transaction_state``, with the requests (broker_requests.py) that
  carry its WriteTxnMarkers to the workers;
- the share coordinator (share_coordinator.py) and its
  ``__share_group_state``, which partition leaders read share-partition
  state from and write it to;
- the request paths: the native ZeroMQ ROUTER, the Kafka TCP listener
  (this process answers as node 1000 at the bootstrap address; Metadata
  names the workers), and the relay that answers the
  Kafka requests workers pass on (relay.py), all into one dispatcher;
- the control channel to the workers: a ROUTER on loopback carrying JSON
  (assign / unassign / shutdown out; hello / done / heartbeat / metrics /
  alter_partition / refresh / bye in). It is the
  controller's ``BrokerChannel``: a change sent to several workers is
  answered when all of them confirmed (or the timeout passed);
- metrics and health (metrics.py): the workers' figures, summed, and the
  node's own, served over HTTP (``/metrics``, ``/health``) by a thread that
  only reads what this loop publishes; on the same port, the apps the
  caller gives (``http_apps``: the web console, a client of this node, each
  a factory(bootstrap, registry, owner key file or None)); with security
  on, behind a login (http_login.py);
- the schema registry (kafkalite/registry/, given by the caller as the
  console is): on a port of its own (``schema_registry_port``), served by
  the same HTTP server code and login (http_apps.py, which a cluster's
  broker nodes serve theirs with too), a client of this node like the
  console;
- the REST proxy (kafkalite/rest_proxy/, given by the caller too): on its
  own port (``rest_proxy_port``), served as the schema registry is;
- the Iceberg REST catalog (kafkalite/iceberg_rest/, given by the caller
  too): on its own port (``iceberg_rest_port``), served as the schema
  registry is, reading the SQL catalog of the node's Iceberg topics
  (storage/iceberg/; a cluster's, in its PostgreSQL) read-only.

It is never on the data path: clients ask it who leads a partition and
then talk to that worker.

Lifecycle: ``start()`` binds, spawns the workers and the ingest gateway and
writes ``<data_dir>/server.json`` once every worker is ready (a gateway on
a fixed port is spawned only then: its port is known, and its start would
take CPU from the workers' on a small machine); SIGTERM or
SIGINT stop it cleanly (workers close their logs, leaving clean-shutdown
markers; no process and no /dev/shm segment is left behind). Under
``kafkalite server`` the workers (and the gateway) were already spawned
before this module was imported (processes.py ``start_early``): the
supervisor adopts them, and tells them the endpoints they lack with their
first assign.

Who may call: ``kafkalite server`` (cli/server.py), single-threaded.
"""
from __future__ import annotations

import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import zmq

from kafkalite import errors, local_socket
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.server.config import ServerConfig
from kafkalite.server.controller.controller import Controller
from kafkalite.server.group.coordinator import GroupCoordinator
from kafkalite.server.network.kafka_listener import KafkaListener
from kafkalite.server.listeners import kafka_listeners
from kafkalite.server.metrics import NodeMetrics
from kafkalite.server.auth.security import (http_tls_context, listener_security, native_curve,
                                       native_security, node_curve, security_enabled,
                                       write_owner_keys, warn_if_node_channels_open)
from kafkalite.server.controller.metadata import MetadataStore
from kafkalite.server.topic import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from kafkalite.server.network.native_listener import NativeListener
from kafkalite.server.auth.native_login import native_login
from kafkalite.server.node.http_apps import (SchemaRegistryDoor, client_key_file, http_login,
                                            serve_app)
from kafkalite.server.node.loop_clock import LoopClock, PlantedStall, prepare_for_loop
from kafkalite.server.node.processes import (ADOPT_WAIT_S, CONTROLLER_FILE, RESTART_BACKOFF_S,
                                             SERVER_FILE, SHUTDOWN_TIMEOUT_S,
                                             EarlyStart, RunningWorkers, WorkerProcess,
                                             advertise_controller, advertise_supervisor,
                                             bind_control, config_digest, lock_data_dir,
                                             node_key_pair, pid_alive, spawn_ingest,
                                             spawn_worker, stop_children, take_workers)
from kafkalite.server.auth.credentials import users_file
from kafkalite.server.network.relay import RelayServer
from kafkalite.server.controller.scram_control import ClusterUsers, FileUsers, ScramControl
from kafkalite.server.replica.replica_manager import ReplicaManager
from kafkalite.server.network.requests import KAFKA_APIS, Listener, RequestDispatcher
from kafkalite.server.controller.acl_control import AclControl, AclStore, PostgresAclStore
from kafkalite.server.auth.authorizer import acls_to_json, authorizer_from_config
from kafkalite.server.network.connection_quotas import ConnectionQuotas
from kafkalite.server.controller.quota_control import PostgresQuotaStore, QuotaControl, QuotaStore
from kafkalite.server.network.quotas import NodeQuotaRates, QuotaManager
from kafkalite.server.auth.request_authorization import RequestGate
from kafkalite.server.share.share_coordinator import ShareCoordinator
from kafkalite.server.txn.txn_coordinator import TransactionCoordinator
from kafkalite.server.network.broker_requests import BrokerRequests
from kafkalite.storage.checkpoint import write_atomically

log = logging.getLogger("kafkalite.supervisor")

SHUTDOWN_S_PER_PARTITION = 0.005     # beside processes.SHUTDOWN_TIMEOUT_S
REJOIN_RETRY_S = 1.0            # a node back from a partition, waiting for PostgreSQL
POLL_INTERVAL_MS = 100
RETRY_INTERVAL_S = 1.0   # a metadata action the store refused is tried again this often


@dataclass
class PendingChange:
    """Control messages sent to workers, waiting for them to confirm."""
    waiting: set
    on_done: object                 # callable(results, timed_out)
    deadline: float
    results: list = field(default_factory=list)


class Supervisor:
    def __init__(self, config: ServerConfig, http_apps=(), early: EarlyStart | None = None,
                 expired_controller: int | None = None, schema_registry=None,
                 rest_proxy=None, handed: RunningWorkers | None = None, iceberg_rest=None,
                 registry: SchemaRegistryDoor | None = None):
        self.config = config
        self.early = early          # the lock, control socket and children start_early made
        # with --cluster: the lock and running workers of the broker node
        # this process ran until the lease expired; they join this
        # controller as they are (broker_node.py). Its own once start()
        # got past binding; until then serve() keeps them.
        self.handed = handed
        # with --cluster: the node whose controller lease this node saw
        # expire (it takes over): its brokers are taken as gone at once
        self.expired_controller = expired_controller
        # (path prefix, factory(bootstrap servers, metrics registry) -> WSGI app):
        # apps served on the metrics port (the web console); given by the
        # caller, since this layer imports nothing above it
        self.http_apps = list(http_apps)
        # factory(bootstrap servers, owner key file or None) -> the schema
        # registry's WSGI app (kafkalite/registry/), given by the caller too
        self.schema_registry = schema_registry
        self.registry_http = None       # its HTTP server, on schema_registry_port
        self.registry_app = None
        # the node's registry as its broker node served it (a takeover):
        # adopted by _serve_http, so that the port keeps one registry and its URL
        self.handed_registry = registry
        # factory(bootstrap servers, owner key file or None, consumer
        # instance timeout ms) -> the REST proxy's WSGI app (kafkalite/rest_proxy/)
        self.rest_proxy = rest_proxy
        self.proxy_http = None          # its HTTP server, on rest_proxy_port
        self.proxy_app = None
        # factory(catalog file, catalog name) -> the Iceberg REST catalog's
        # WSGI app (kafkalite/iceberg_rest/), given by the caller too
        self.iceberg_rest = iceberg_rest
        self.iceberg_http = None        # its HTTP server, on iceberg_rest_port
        self.iceberg_app = None
        self.ctx = zmq.Context.instance()
        self.workers: list[WorkerProcess] = []      # this node's, children of this process
        self.remote: dict[int, WorkerProcess] = {}  # other nodes' (--cluster), by broker id
        self.ingest: subprocess.Popen | None = None
        self._ingest_out = None     # its stdout until it printed the port it bound
        self.poller = zmq.Poller()
        self.pending: dict[int, PendingChange] = {}
        self._changes = itertools.count(1)
        self._last_change = 0           # the last change sent (send)
        self._stop = False
        self.control_dropped = 0        # malformed control messages dropped (_on_control_frames)
        self._bad_control = RateLimitedLog(log)
        self._lock_fd = -1
        self._ingest_restart_at = 0.0
        self._next_leader_check = time.monotonic() + config.leader_imbalance_check_interval_seconds
        # with --cluster: when to fence the brokers that never introduced
        # themselves to this controller (_fence_absent_brokers)
        self._absent_check_at: float | None = None
        self.ready = False
        # on a takeover: when to serve the HTTP ports at the latest, if the
        # node's workers are not all serving by then (_serve_http)
        self._http_after: float | None = None
        # True until start() binds its first port: what a start that failed
        # before then took (lease, users mirror, coordinators, metadata
        # store), release() gives back, so serve() may try again
        self.start_retryable = True
        self.handlers: dict = {}
        self.lease = None                 # the controller lease, with --cluster
        self.users_mirror = None          # this node's copy of the cluster's SASL users, likewise
        # metadata actions the store could not take yet (PostgreSQL away),
        # kept in order and tried again: (what, function, args)
        self._retries: list[tuple[str, object, tuple]] = []
        self._retry_at = 0.0
        self.exit_code = 0
        # run() ended because another node took the lease (this one was cut
        # off from PostgreSQL, or stalled, past its lease): serve() starts
        # this node again, as one of the new controller's broker nodes
        self.deposed = False
        self.planted_stall = PlantedStall()     # loop_clock.FAULT_ENV; a no-op unless set
        # the time the loop was able to look at the workers (loop_clock.py):
        # their heartbeats and adopted workers' hellos are timed on it, so a
        # stalled loop fences no one; made again when run() starts
        self.loop_clock = LoopClock()

    # ---- startup ---------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.config
        early = self.early
        running: dict[int, int] = {}    # workers of a dead supervisor this one adopts
        if early is not None:
            self._lock_fd = early.lock_fd
        elif self.handed is not None:
            self._lock_fd = self.handed.lock_fd
        else:
            # a cluster's node adopts no orphans: its workers stop with the
            # process (but those of its broker node, which this process ran,
            # are handed over)
            self._lock_fd, running = lock_data_dir(
                cfg.data_dir, adopt=0 if cfg.cluster else cfg.worker_count)
        broker_ids, nodes = list(range(cfg.worker_count)), {}
        if cfg.cluster:
            broker_ids, nodes = self._cluster_brokers()
        broker_count = max(nodes) + 1 if nodes else cfg.worker_count
        metadata = self._open_metadata()
        if cfg.cluster:
            self._check_iceberg_warehouse(metadata)
            # broker nodes learn of a new controller by the lease, checked
            # once a second (broker_node.py): give their workers a lease's
            # length more to say hello
            self._absent_check_at = time.monotonic() + (cfg.broker_session_timeout_ms
                                                        + cfg.controller_lease_ms) / 1000.0
            try:        # a broker node's word from this node's earlier life
                os.unlink(os.path.join(cfg.data_dir, CONTROLLER_FILE))
            except FileNotFoundError:
                pass
        users_path = users_file(cfg.data_dir, cfg.sasl_users_file)
        if cfg.cluster:
            # the cluster's SASL users, mirrored into this node's file
            from kafkalite.server.controller.cluster_store import UsersMirror
            self.users_mirror = UsersMirror(cfg.cluster, users_path)
            self.users_mirror.start()
        if metadata.rebalance(broker_count):
            log.warning("partitions of workers that no longer exist were moved")
        self.controller = Controller(cfg, metadata, self, broker_count)
        self.controller.racks = {b: f"node-{n}" for b, n in nodes.items()}
        if self.expired_controller not in (None, cfg.node_id):
            # that node let its lease expire: its brokers will not join. What
            # they led moves to the first in-sync replica that serves
            # (Controller.elect_offline), not a session timeout later.
            self.controller.gone.update(b for b, n in nodes.items()
                                        if n == self.expired_controller)
        self.coordinator = GroupCoordinator(
            cfg.data_dir, partition_count=self.controller.partition_count,
            coordinator_node=self.controller.coordinator_node,
            offsets_partitions=cfg.offsets_topic_num_partitions,
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            offsets_retention_minutes=cfg.offsets_retention_minutes,
            topics=lambda: self.controller.metadata.topics,
            consumer_session_timeout_ms=cfg.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=cfg.group_consumer_heartbeat_interval_ms,
            migration_policy=cfg.group_consumer_migration_policy,
            share_session_timeout_ms=cfg.group_share_session_timeout_ms,
            share_heartbeat_interval_ms=cfg.group_share_heartbeat_interval_ms,
            internal_mirror=metadata if cfg.cluster else None)
        self._groups_loaded_at = time.monotonic()      # their sessions start then (run())
        self.controller.partitions_added = self.coordinator.on_partitions_changed
        # each group's own configs (KIP-848), kept by the controller
        self.coordinator.consumer.group_config = self.coordinator.share.group_config = (
            lambda gid: self.controller.metadata.group_configs.get(gid, {}))
        # every live broker, this node's and others' (they lead partitions too)
        self.coordinator.share_group_deleted = lambda gid: [
            self._send_worker(b.broker_id, {"type": "delete_share_group", "group": gid})
            for b in self.controller.brokers if not b.fenced]
        self.coordinator.share.leader_epoch_of = lambda tp: (
            self.controller.metadata.topics[tp[0]].partitions[tp[1]].leader_epoch)
        # an AlterShareGroupOffsets: the leaders drop what they hold of the
        # group and read its new state (share_partition.py)
        self.coordinator.share.state_reset = self.coordinator.share_group_deleted
        native = early.curve if early is not None else native_curve(cfg)
        # the control channel and the relay: the server's processes only
        self.node_curve = early.node_curve if early is not None else node_curve(
            cfg, native, None if cfg.cluster or native is not None
            else node_key_pair(cfg.data_dir))
        self.curve = native_security(cfg, native, self.node_curve)
        self.owner_key_file = write_owner_keys(cfg, self.curve)
        self.markers = BrokerRequests(self.ctx, self.controller.native_endpoint,
                                      "kafkalite-txn-coordinator", curve=self.curve)
        self.txn_coordinator = TransactionCoordinator(
            cfg.data_dir, producer_ids=self.controller.producer_ids,
            partition_count=self.controller.partition_count, leader_of=self.controller.leader_of,
            markers=self.markers, group_coordinator=self.coordinator,
            partitions=cfg.transaction_state_num_partitions,
            max_timeout_ms=cfg.transaction_max_timeout_ms,
            id_expiration_ms=cfg.transactional_id_expiration_ms,
            abort_check_interval_ms=cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            internal_mirror=metadata if cfg.cluster else None)
        self.coordinator.verify_txn = self.txn_coordinator.verify_offsets
        # share-partition state (share_coordinator.py): partition leaders
        # read and write it over the coordinator endpoint
        self.share_coordinator = ShareCoordinator(
            cfg.data_dir, cfg.share_coordinator_state_topic_num_partitions,
            mirror=metadata if cfg.cluster else None)
        self.coordinator.share.attach_state(self.share_coordinator)
        self.controller.topic_deleted = self.share_coordinator.delete_topic
        self.controller.register_internal_topic(OFFSETS_TOPIC, cfg.offsets_topic_num_partitions)
        self.controller.register_internal_topic(TRANSACTION_STATE_TOPIC,
                                                cfg.transaction_state_num_partitions)
        self.controller.register_internal_topic(SHARE_STATE_TOPIC,
                                                cfg.share_coordinator_state_topic_num_partitions)
        self.handlers.update(self.controller.handlers())
        self.handlers.update(self.coordinator.handlers())
        self.handlers.update(self.txn_coordinator.handlers())
        self.handlers.update(self.share_coordinator.handlers())
        self.metrics = NodeMetrics(self) if cfg.metrics_enabled else None
        stats = self.metrics and self.metrics.requests
        authorizer = authorizer_from_config(cfg, stats)
        acl_store = (PostgresAclStore(self.controller.metadata) if cfg.cluster
                     else AclStore(cfg.data_dir))
        self.acl_control = AclControl(acl_store, authorizer, self, lambda: [
            b.broker_id for b in self.controller.brokers if not b.fenced], self._linked_workers)
        self.handlers.update(self.acl_control.handlers())
        self.handlers.update(ScramControl(
            ClusterUsers(self.controller.metadata, self.users_mirror) if cfg.cluster
            else FileUsers(users_path)).handlers())
        # connection-rate quotas (connection_quotas.py): the ip entities'
        # rates and max_connection_creation_rate, on this process's Kafka ports
        self.connection_quotas = ConnectionQuotas(cfg.quota_window_num,
                                                  cfg.quota_window_size_seconds,
                                                  cfg.max_connection_creation_rate)
        self.quotas = QuotaManager(cfg.quota_window_num, cfg.quota_window_size_seconds,
                                   connections=self.connection_quotas)
        self.node_quota_rates = NodeQuotaRates(self.quotas)
        quota_store = (PostgresQuotaStore(self.controller.metadata) if cfg.cluster
                       else QuotaStore(cfg.data_dir))
        self.quota_control = QuotaControl(quota_store, self.quotas, self, lambda: [
            b.broker_id for b in self.controller.brokers if not b.fenced])
        self.handlers.update(self.quota_control.handlers())
        served = set(self.handlers) | ReplicaManager.API_KEYS | {ApiKey.API_VERSIONS}
        if served != KAFKA_APIS:        # a new API with no handler, or one not advertised
            raise RuntimeError(f"APIs served {sorted(served - KAFKA_APIS)} and advertised "
                               f"{sorted(KAFKA_APIS - served)} differ (requests.KAFKA_APIS)")
        self.dispatcher = RequestDispatcher("the supervisor", self.handlers,
                                            cluster_apis=self.cluster_apis, stats=stats)
        self.dispatcher.quotas = self.quotas
        if authorizer is not None:
            self.dispatcher.gate = RequestGate(
                authorizer, topic_name_of=lambda topic_id: next(
                    (n for n, t in self.controller.metadata.topics.items()
                     if t.topic_id == topic_id), None),
                topic_exists=lambda name: name in self.controller.metadata.topics)
        self.start_retryable = False        # ports and threads from here on
        self.native = NativeListener(self.ctx, cfg.host, cfg.port, self.dispatcher,
                                     name="supervisor", curve=self.curve,
                                     extensions={"server_endpoints": self._served_endpoints},
                                     local_door=cfg.local_sockets and cfg.authorizer_enabled,
                                     login=native_login(cfg, self.curve))
        # every Kafka listener of the node (listeners.py), the primary first
        specs = kafka_listeners(cfg)
        self.kafka_listeners = [
            KafkaListener(spec.host, spec.port, self.dispatcher,
                          name="supervisor" + (f" ({spec.name})" if i else ""),
                          security=listener_security(cfg, spec.protocol, spec.name),
                          listener_name=spec.name, connection_quotas=self.connection_quotas,
                          connections_max_idle_ms=cfg.connections_max_idle_ms,
                          authentication_timeout_ms=cfg.authentication_timeout_ms)
            for i, spec in enumerate(specs)]
        self.kafka = self.kafka_listeners[0]
        self.controller.native_port, self.controller.kafka_port = self.native.port, self.kafka.port
        self.controller.kafka_listeners = {
            spec.name: (spec.advertised_host, listener.port)
            for spec, listener in zip(specs, self.kafka_listeners)}
        # Other nodes' workers reach the control channel and the relay too
        # (--cluster): bound where the listeners are, not on loopback only.
        bind_host, advertised = "127.0.0.1", "127.0.0.1"
        if cfg.cluster:
            bind_host = cfg.host if cfg.host not in ("", "*") else "0.0.0.0"
            advertised = _bracket(cfg.public_host)
        # Both open to the node's key pair only (but a cluster's without CURVE).
        self.relay = RelayServer(self.ctx, self.dispatcher, bind_host, advertised,
                                 self.node_curve)
        if early is not None:
            self.control, self.control_endpoint = early.control, early.control_endpoint
        else:
            if self.node_curve is not None:
                self.node_curve.start(self.ctx)
            self.control, self.control_endpoint = bind_control(
                self.ctx, bind_host, advertised,
                self.node_curve.secret if self.node_curve is not None else None)
            if not cfg.cluster:
                advertise_supervisor(cfg.data_dir, self.control_endpoint)
        warn_if_node_channels_open(cfg)
        if self.lease is not None:
            self.lease.publish({"control": self.control_endpoint, "relay": self.relay.endpoint,
                                "coordinator": f"tcp://{advertised}:{self.native.port}",
                                "bootstrap.servers": f"{cfg.public_host}:{self.native.port}",
                                "kafka.bootstrap.servers":
                                    self.kafka_bootstraps()[0]["bootstrap.servers"],
                                # broker nodes check they hold the same key pair
                                **({"curve.server.key": self.curve.public.decode()}
                                   if self.curve is not None else {})})
        if early is not None:
            self.workers = early.workers
        elif not cfg.cluster:
            self.workers = take_workers(cfg, running)
            for w in self.workers:
                if not w.adopted:
                    self._spawn(w)
        else:
            handed, self.handed = self.handed, None
            running_here = handed.running() if handed is not None else {}
            for i, broker_id in enumerate(broker_ids):
                w = running_here.pop(broker_id, None)
                if w is not None:
                    # the broker node's worker: adopted, it keeps its
                    # leaderships' epochs (or is replaced if it does not
                    # say hello in time)
                    w.adopted, w.adopt_by = True, time.monotonic() + ADOPT_WAIT_S
                    self.workers.append(w)
                    continue
                port = cfg.worker_base_port + i if cfg.worker_base_port else 0
                kafka_port = cfg.kafka_worker_base_port + i if cfg.kafka_worker_base_port else 0
                self.workers.append(WorkerProcess(broker_id, port, kafka_port))
                self._spawn(self.workers[-1])
            if handed is not None:
                handed.lock_fd = -1                 # this supervisor's now
                self._http_after = time.monotonic() + ADOPT_WAIT_S
                stop_children(list(running_here.values()), SHUTDOWN_TIMEOUT_S)
                # the running ones join this controller (worker.py
                # _check_controller_file), under its lease's epoch
                advertise_controller(cfg.data_dir, self.lease.epoch, {
                    "control": self.control_endpoint, "relay": self.relay.endpoint,
                    "coordinator": f"tcp://{advertised}:{self.native.port}"})
        self._local = {w.index: w for w in self.workers}
        self._config_digest = config_digest(cfg)
        for w in self.workers:
            if w.adopted and w.proc is None:    # not a child: no SIGCHLD
                self._watch_adopted(w)
        self.ingest_port = cfg.ingest_port
        if early is not None and early.ingest is not None:
            self.ingest = early.ingest
            self._watch_ingest_port()
        elif cfg.ingest_port == 0:
            self._spawn_ingest()    # a free port: the node is ready once the gateway says which
        # a fixed port is known already: the gateway starts once the node is
        # ready (_check_ready), leaving the start's CPU to the workers; a
        # publisher's PUSH queues its messages until the gateway binds
        if self._http_after is None:    # (a takeover: once the node's workers serve, run())
            self._serve_http()

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

    def _cluster_brokers(self) -> tuple[list[int], dict[int, int]]:
        """This node's workers' broker ids, and the node of every broker
        the cluster has given an id to."""
        from kafkalite.server.controller import cluster_store
        cfg = self.config
        wait = cluster_store.START_TIMEOUT_S
        ids = cluster_store.broker_ids(cfg.cluster, cfg.node_id, cfg.worker_count, wait)
        return ids, cluster_store.cluster_brokers(cfg.cluster, wait)

    def _check_iceberg_warehouse(self, metadata) -> None:
        """A cluster with Iceberg topics and no warehouse every node reaches
        (ServerConfig.iceberg_unshared) is refused at start: each node would
        keep table files only it can read. On a takeover (workers handed
        over, the node serving already) it is said in the log instead: the
        node must not stop for it, and its workers commit nothing."""
        why = self.config.iceberg_unshared
        if why is None:
            return
        from kafkalite.storage.config import ICEBERG_OFF
        from kafkalite.storage.config import LogConfig
        base = self.config.log_config()
        topics = sorted(name for name, t in metadata.topics.items()   # Redpanda's names too
                        if LogConfig.from_properties(t.configs, base).iceberg_mode != ICEBERG_OFF)
        if not topics:
            return
        message = f"{why} (Iceberg topics: {', '.join(topics[:5])})"
        if self.handed is None:
            # the lease let go at once: a node set up right need not wait it out
            metadata.close()
            self.lease.close(release=True)
            self.lease = None
            raise errors.InvalidConfigurationError(message)
        log.error("%s", message)

    def _open_metadata(self) -> MetadataStore:
        """The data dir's metadata files, or with ``--cluster`` PostgreSQL
        (cluster_store.py), once this node holds the controller lease."""
        cfg = self.config
        if not cfg.cluster:
            return MetadataStore(cfg.data_dir)
        try:
            from kafkalite.server.controller.cluster_store import ControllerLease, PostgresMetadataStore
        except ImportError as exc:
            raise errors.InvalidConfigurationError(
                f"--cluster needs psycopg 3 ({exc}): pip install 'kafkalite[cluster]'") from None
        self.lease = ControllerLease(cfg.cluster, cfg.node_id, cfg.controller_lease_ms)
        # Another node holding the lease is the controller: this node is
        # then one of its broker nodes (broker_node.py), run by serve().
        if not self.lease.acquire():
            raise AnotherController(self.lease.holder)
        self.lease.start()
        return PostgresMetadataStore(cfg.cluster, self.lease)

    # ---- metadata actions that may have to wait --------------------------------------------

    def _metadata_action(self, what: str, fn, *args) -> None:
        """Run a controller action that writes metadata. If the store cannot
        take it now (PostgreSQL unreachable, a full disk), keep it and try
        again, in order: an election or a registration postponed is
        correct, one acted on without its metadata durable is not."""
        if self._retries:
            self._retries.append((what, fn, args))
            return
        try:
            fn(*args)
        except KafkaError as exc:
            log.warning("cannot %s now (%s); trying again", what, exc)
            self._retries.append((what, fn, args))
            self._retry_at = time.monotonic() + RETRY_INTERVAL_S

    def _run_retries(self) -> None:
        now = time.monotonic()
        if not self._retries or now < self._retry_at:
            return
        while self._retries:
            what, fn, args = self._retries[0]
            try:
                fn(*args)
            except KafkaError:
                self._retry_at = now + RETRY_INTERVAL_S
                return
            log.info("did %s", what)
            self._retries.pop(0)

    @property
    def port(self) -> int:
        return self.native.port

    def cluster_apis(self) -> list:
        """Every API the node serves to Kafka clients: this process's and
        the workers' (which relay the rest here): requests.KAFKA_APIS."""
        return sorted(KAFKA_APIS)

    def _spawn(self, w: WorkerProcess) -> None:
        # a key pair of this run goes to the worker; one from the key file it reads
        spawn_worker(w, self.config, self.control_endpoint, self.relay.endpoint,
                     f"tcp://{self._local_host()}:{self.native.port}", self._node_keys())

    def _node_keys(self) -> tuple[bytes, bytes] | None:
        """The node's key pair of this run, for a child to read from its
        stdin; None when it is the key file's (the child reads the file)."""
        if self.node_curve is None or self.config.native_curve_secret_key_file:
            return None
        return self.node_curve.public, self.node_curve.secret

    def _local_host(self) -> str:
        """Where this host's own processes reach the supervisor's listeners."""
        host = self.config.host
        return "127.0.0.1" if host in ("", "0.0.0.0", "*") else ("::1" if host == "::" else host)

    def _spawn_ingest(self) -> None:
        if self.config.ingest_port < 0:
            return
        self.ingest = spawn_ingest(self.config, self.port, self.ingest_port,
                                   self._node_keys() if self.curve is not None else None)
        self._watch_ingest_port()

    def _watch_ingest_port(self) -> None:
        """Read the port the gateway bound (the configured one, or any free
        one) from the loop, when it prints it: the node is not ready before."""
        self._close_ingest_output()
        self._ingest_out, self._ingest_line = self.ingest.stdout, b""
        self.poller.register(self._ingest_out.fileno(), zmq.POLLIN)   # events name the fd

    def _on_ingest_output(self) -> None:
        out = self._ingest_out
        chunk = os.read(out.fileno(), 256)    # readable: this does not block
        self._ingest_line += chunk
        if chunk and b"\n" not in self._ingest_line and len(self._ingest_line) < 256:
            return                            # not the whole line yet
        words = self._ingest_line.decode(errors="replace").split()
        if len(words) == 2 and words[0] == "ingest" and words[1].isdigit():
            self.ingest_port = int(words[1])
        # the line, or end of file (the gateway died first: it is restarted)
        self._close_ingest_output()
        self._check_ready()

    def _close_ingest_output(self) -> None:
        if self._ingest_out is not None:
            self.poller.unregister(self._ingest_out.fileno())
            self._ingest_out.close()
            self._ingest_out = None

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

    # ---- control channel: the controller's BrokerChannel -------------------------------------

    def _send_worker(self, index: int, msg: dict) -> None:
        # every message names the ACLs' version: a worker that has not
        # applied it refuses what its ACLs decide until it has (acl_control.py)
        acl_control = getattr(self, "acl_control", None)     # None before start()
        if acl_control is not None and "acl_version" not in msg:
            msg = {**msg, "acl_version": acl_control.version}
        self.control.send_multipart([b"worker-%d" % index, json.dumps(msg).encode()])

    def send(self, by_broker: dict[int, dict], on_done, timeout_ms: int) -> None:
        change = self._last_change = next(self._changes)
        self.pending[change] = PendingChange(set(by_broker), on_done,
                                             time.monotonic() + max(timeout_ms, 1) / 1000.0)
        for index, msg in by_broker.items():
            self._send_worker(index, {**msg, "op": change})

    def tell(self, by_broker: dict[int, dict]) -> None:
        for index, msg in by_broker.items():
            self._send_worker(index, msg)

    def _linked_workers(self) -> list[int]:
        """The workers with a process this supervisor talks to, fenced or
        not (a hung one that beats again, one whose start is on its way)."""
        return [w.index for w in (*self.workers, *self.remote.values())
                if w.pid and (w.remote or w.proc is not None or w.adopted)]

    def _expire_pending(self) -> None:
        now = time.monotonic()
        for change, pend in list(self.pending.items()):
            if pend.deadline <= now:
                del self.pending[change]
                pend.on_done(pend.results, True)

    def _on_control_frames(self, frames: list) -> None:
        """One message off the control socket: [identity, a JSON object with
        a "type" and the sender's "worker" index]. Anything else -- a local
        process's stray frames, a truncated or hostile message -- is dropped,
        logged (rate-limited) and counted, never fatal: every process of the
        node depends on this loop."""
        try:
            if len(frames) != 2:
                raise ValueError(f"{len(frames)} frames, not 2")
            identity, raw = frames
            msg = json.loads(raw)
            if not isinstance(msg, dict) or not isinstance(msg.get("type"), str) \
                    or type(msg.get("worker")) is not int:
                raise ValueError("not an object with a type and a worker index")
            self._on_control(identity, msg)
        except (ValueError, KeyError, IndexError, TypeError, AttributeError,
                RecursionError) as exc:
            # ValueError covers JSON and UTF-8 decoding, RecursionError JSON
            # nested too deep; the others, a field of the wrong type met by
            # the handler
            self.control_dropped += 1
            self._bad_control.warning("dropped a malformed control message (%d so far) %r: %s",
                                      self.control_dropped, b"|".join(frames)[:200], exc)

    def _on_control(self, identity: bytes, msg: dict) -> None:
        kind = msg["type"]
        w = self._local.get(msg["worker"]) or self.remote.get(msg["worker"])
        if w is None:
            if kind != "hello" or not self.config.cluster:
                return                   # a stranger: only a cluster's workers may introduce themselves
            w = self.remote[msg["worker"]] = WorkerProcess(msg["worker"], msg["port"],
                                                           remote=True)
            log.info("worker %d of node %s (%s) joins", w.index, msg.get("node"),
                     msg.get("host"))
        w.last_heartbeat = self.loop_clock.now()
        if w.hung:
            # it beats again: it registers anew, as a restarted worker does
            # (its leaderships moved; what it holds is sent to it again)
            w.hung = False
            log.warning("worker %d (pid %d) is responsive again; it rejoins", w.index, w.pid)
            if kind != "hello":
                kind, msg = "hello", {"type": "hello", "worker": w.index, "port": w.port,
                                      "pid": w.pid, "kafka_port": w.kafka_port,
                                      "kafka_listeners": w.kafka_listeners,
                                      "host": w.host, "node": w.rack}
        if kind == "heartbeat":
            self.acl_control.on_heartbeat(w.index, msg.get("acl_version"))
            return
        if kind == "metrics":
            if self.metrics is not None:
                self.metrics.on_snapshot(w.index, msg)
            return
        if kind == "quota_usage":
            # the node's rates (quotas.py): the rest of the node's back to it
            self._send_worker(w.index, {"type": "quota_usage", "rates":
                                        self.node_quota_rates.on_report(w.index, msg["rates"])})
            return
        if kind == "hello" and not w.remote and msg["pid"] != w.pid:
            # a process this supervisor does not run: one of the dead
            # supervisor's it gave up on (killed), its hello already queued
            log.warning("ignored a hello from pid %s as worker %d (pid %d runs it)",
                        msg["pid"], w.index, w.pid)
            return
        if kind == "hello" and w.adopted and w.adopt_by:
            if msg.get("config") != self._config_digest:
                log.warning("worker %d (pid %d) of the previous supervisor runs another "
                            "configuration; replacing it", w.index, w.pid)
                self._replace_adopted(w)
                return
            w.adopt_by = 0.0
            w.adopted_hello = True
            log.info("adopted worker %d (pid %d) of the previous supervisor", w.index, w.pid)
        if kind == "hello":
            w.port, w.pid = msg["port"], msg["pid"]
            w.kafka_port = msg.get("kafka_port", 0)
            w.kafka_listeners = msg.get("kafka_listeners") or {}
            w.host, w.rack = msg.get("host"), msg.get("node")
            self._metadata_action(f"register worker {w.index}", self._register, w, w.pid)
        elif kind == "done":
            op = msg.get("op")
            # before anything waits on the change: Metadata names an elected
            # leader once it leads (replication_control.leaderships_applied)
            self.controller.leaderships_applied(w.index, msg.get("results", []))
            if isinstance(op, str) and op == f"start-{w.index}":
                w.crashes_in_a_row = 0
                self.controller.partitions_opened(msg.get("results", []))
                self._release_pending(w.index, msg.get("results", []), w.start_covers)
                self.controller.unfence_broker(w.index)
                if self.controller.gone:
                    self._metadata_action(f"elect with worker {w.index}",
                                          self.controller.elect_offline, w.index)
                if self.ready:
                    self._write_server_file()  # a restarted worker: new pid, maybe new port
                self._check_ready()
            elif op in self.pending:
                pend = self.pending[op]
                pend.waiting.discard(w.index)
                pend.results.extend(msg.get("results", []))
                if not pend.waiting:
                    del self.pending[op]
                    pend.on_done(pend.results, False)
        elif kind == "alter_partition":
            try:
                self.controller.alter_partition(w.index, msg["partitions"])
            except KafkaError as exc:
                # the leader proposes again (replica_manager.PROPOSAL_TIMEOUT_S)
                log.warning("cannot change worker %d's ISRs now: %s", w.index, exc)
        elif kind == "refresh":
            self.controller.resend(w.index, msg["partitions"])
        elif kind == "bye":
            # a worker stopping with the whole node keeps its leaderships
            # (the node comes back with them); one stopping alone hands
            # them over
            self._fence(w, elect=not self._stop)

    def _fence(self, w: WorkerProcess, elect: bool = True, restarting: bool = False) -> None:
        """``w``'s process is gone or silent: the controller fences it, and
        transaction markers waiting on its answer are sent again at once
        (to the new leader) instead of after their timeout. ``restarting``:
        it died and is started again here."""
        self.markers.broker_gone(w.index)
        self._release_pending(w.index, [])
        self._metadata_action(f"fence worker {w.index}", self.controller.fence_broker,
                              w.index, elect, restarting)

    def _release_pending(self, index: int, results: list, up_to: int | None = None) -> None:
        """Changes sent to worker ``index`` that its process will never
        answer: it died, or a new process of it registered and was sent
        everything it hosts with its start (``results``: what that start
        opened; ``up_to``: the last change made before that start was sent,
        the ones it covers). The metadata holds the change either way:
        waiting on for the old process's answer ended in REQUEST_TIMED_OUT
        for a topic that was created."""
        for op, pend in list(self.pending.items()):
            if index in pend.waiting and (up_to is None or op <= up_to):
                pend.waiting.discard(index)
                pend.results.extend(results)
                if not pend.waiting:
                    del self.pending[op]
                    pend.on_done(pend.results, False)

    def _register(self, w: WorkerProcess, pid: int) -> None:
        if w.pid != pid:                 # that process died while this waited
            return
        # the first hello of a worker this supervisor adopted keeps its
        # leaderships' epochs (a hung one rejoining starts new ones)
        parts = self.controller.register_broker(
            w.index, w.port, w.kafka_port, w.host, None if w.rack is None else f"node-{w.rack}",
            {name: tuple(entry) for name, entry in w.kafka_listeners.items()},
            adopted=w.adopted_hello)
        w.adopted_hello = False
        log.info("worker %d (pid %d) is up on port %d", w.index, w.pid, w.port)
        # a worker start_early spawned learns here where the relay and the
        # transaction coordinator are (one that knows them ignores these)
        endpoints = {} if w.remote else {
            "relay": self.relay.endpoint,
            "coordinator": f"tcp://{self._local_host()}:{self.native.port}"}
        w.start_covers = self._last_change     # the changes its start carries
        self._send_worker(w.index, {"type": "assign", "op": f"start-{w.index}",
                                    "partitions": parts, **endpoints,
                                    "brokers": self.controller.broker_endpoints(),
                                    "partition_counts": self.controller.partition_counts(),
                                    "acls": acls_to_json(self.acl_control.acls),
                                    "acl_version": self.acl_control.version,
                                    "quotas": self.quota_control.as_json()})

    def _write_server_file(self) -> None:
        write_atomically(os.path.join(self.config.data_dir, SERVER_FILE),
                         json.dumps(self.endpoints(), indent=1).encode())

    def _check_ready(self) -> None:
        # this node's workers: other nodes' come and go on their own
        if (not self.ready and self._ingest_out is None and self._http_after is None
                and not any(self.controller.brokers[w.index].fenced for w in self.workers)):
            self.ready = True
            self._write_server_file()
            e = self.endpoints()
            print(f"kafkalite server ready: bootstrap.servers={e['bootstrap.servers']} "
                  f"(native {e['native']}), Kafka clients "
                  f"{_kafka_summary(e['kafka_listeners'])}, "
                  f"ingest {e['ingest'] or 'off'}, {_http_summary(e, self.http_apps)}"
                  f"{len(self.workers)} worker(s), data in {e['data_dir']}", flush=True)
            if self.ingest is None and self.config.ingest_port > 0:
                self._spawn_ingest()

    # ---- worker lifecycle --------------------------------------------------------------------

    def _watch_children(self) -> None:
        now = time.monotonic()
        seen = self.loop_clock.now()       # silences and hello deadlines count in it
        timeout = self.config.broker_session_timeout_ms / 1000.0
        for w in list(self.remote.values()):
            # another node's worker: silence is all this node can see of it
            if (not w.hung and not self.controller.brokers[w.index].fenced
                    and w.last_heartbeat and seen - w.last_heartbeat > timeout):
                log.error("worker %d of node %s sent no heartbeat for %.1f s; fencing it",
                          w.index, w.rack, seen - w.last_heartbeat)
                w.hung = True
                self._fence(w)
        for w in self.workers:
            running = w.proc is not None or w.adopted
            if (running and not w.hung and not self.controller.brokers[w.index].fenced
                    and w.last_heartbeat and seen - w.last_heartbeat > timeout):
                log.error("worker %d (pid %d) sent no heartbeat for %.1f s; fencing it",
                          w.index, w.pid, seen - w.last_heartbeat)
                w.hung = True
                self._fence(w)
            if w.adopted and w.adopt_by and seen > w.adopt_by and not self._stop:
                print(f"kafkalite: worker {w.index} (pid {w.pid}) of the previous supervisor "
                      f"did not say hello in {ADOPT_WAIT_S:.0f} s; killing it and starting "
                      f"another", file=sys.stderr, flush=True)
                self._replace_adopted(w)
                continue
            code = None
            if w.proc is not None and w.proc.poll() is not None:
                code = w.proc.returncode
            elif w.adopted and not pid_alive(w.pid):
                code = "exit of a process this supervisor adopted"
            if code is not None:
                log.error("worker %d (pid %d) exited with %s; restarting it", w.index, w.pid, code)
                print(f"kafkalite: worker {w.index} (pid {w.pid}) died ({code}); restarting",
                      file=sys.stderr, flush=True)
                w.proc = None
                self._forget_adopted(w)
                self._fence(w, restarting=True)
                delay = RESTART_BACKOFF_S[min(w.crashes_in_a_row, len(RESTART_BACKOFF_S) - 1)]
                w.crashes_in_a_row += 1
                w.restart_at = now + delay
            if w.proc is None and not w.adopted and not self._stop and now >= w.restart_at:
                w.restarts += 1
                log.info("starting worker %d again (restart %d)", w.index, w.restarts)
                self._spawn(w)
        if self.ingest is not None and self.ingest.poll() is not None and not self._stop:
            if self._ingest_restart_at == 0.0:
                log.error("the ingest gateway exited with %s; restarting it", self.ingest.returncode)
                self._ingest_restart_at = now + 2.0
            elif now >= self._ingest_restart_at:
                self._ingest_restart_at = 0.0
                self._spawn_ingest()

    def _watch_adopted(self, w: WorkerProcess) -> None:
        """Wake the loop the moment adopted worker ``w`` exits: it is not
        this process's child, so no SIGCHLD comes; a pidfd (Linux 5.3)
        turns readable instead. Without one, the loop's poll interval
        finds it (``_watch_children``)."""
        try:
            w.pidfd = os.pidfd_open(w.pid)
        except (AttributeError, OSError):
            w.pidfd = None
            return
        self.poller.register(w.pidfd, zmq.POLLIN)

    def _forget_adopted(self, w: WorkerProcess) -> None:
        if w.pidfd is not None:
            self.poller.unregister(w.pidfd)
            os.close(w.pidfd)
            w.pidfd = None
        w.adopted, w.adopt_by = False, 0.0

    def _replace_adopted(self, w: WorkerProcess) -> None:
        """Kill adopted ``w`` (stopped, starved, or of another
        configuration) and start another worker in its place; the new one
        takes the worker's lock once the old process let go of it
        (processes.lock_worker)."""
        try:
            os.kill(w.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if w.proc is not None:      # a handed-over child (broker_node.py): reaped here
            w.proc.wait()
            w.proc = None
        self._forget_adopted(w)
        if not self.controller.brokers[w.index].fenced:
            self._fence(w)
        w.restarts += 1
        self._spawn(w)

    def _fence_absent_brokers(self) -> None:
        """A new controller of a cluster (its node restarted, or it took
        over from a dead one) knows every broker from PostgreSQL, all
        fenced until they say hello. A broker whose node is down never
        does, and what it led would stay offline: a session timeout and a
        lease's length after start, such brokers are fenced again with
        elections, as a silent worker is, so that their partitions move to
        live in-sync replicas (or, with none serving yet, to the first that
        does: Controller.unfence_broker). One that comes later registers
        and rejoins as any restarted one."""
        if self._absent_check_at is None or time.monotonic() < self._absent_check_at:
            return
        self._absent_check_at = None
        for b in self.controller.brokers:
            if b.broker_id in self._local or b.broker_id in self.remote:
                continue
            log.warning("broker %d has not joined since this controller started; moving its "
                        "leaderships", b.broker_id)
            self.markers.broker_gone(b.broker_id)
            self._metadata_action(f"fence absent broker {b.broker_id}",
                                  self.controller.fence_broker, b.broker_id)

    def _maybe_rebalance_leaders(self) -> None:
        now = time.monotonic()
        if not self.config.auto_leader_rebalance_enable or now < self._next_leader_check:
            return
        self._next_leader_check = now + self.config.leader_imbalance_check_interval_seconds
        if self.ready:
            try:
                moved = self.controller.rebalance_leaders()
            except KafkaError as exc:
                log.warning("cannot move leaderships back now: %s", exc)
                return
            if moved:
                log.info("moved %d leaderships back to their preferred replicas", moved)

    # ---- main loop ---------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Stop at the next turn of the loop (serve()'s _StopRequest calls
        it from the SIGTERM/SIGINT handler)."""
        self._stop = True

    def _watch_sigchld(self, poller) -> int | None:
        """Wake the loop the moment a child exits (SIGCHLD through a wakeup
        pipe), so a dead worker's partitions get new leaders at once rather
        than at the next poll timeout. None where signals cannot be had
        (not the main thread): the timeout still catches it."""
        try:
            r, w = os.pipe()
            os.set_blocking(r, False)
            os.set_blocking(w, False)
            signal.set_wakeup_fd(w, warn_on_full_buffer=False)
            signal.signal(signal.SIGCHLD, lambda signum, frame: None)
        except (ValueError, OSError):
            return None
        poller.register(r, zmq.POLLIN)
        return r

    def run(self) -> int:
        poller = self.poller
        poller.register(self.control, zmq.POLLIN)
        self.native.attach(poller)
        self.relay.attach(poller)
        for listener in self.kafka_listeners:
            listener.attach(poller)
        self.markers.attach(poller)
        child_died = self._watch_sigchld(poller)
        prepare_for_loop()
        # the loaded members' sessions start when the coordinator can hear
        # them, not at the load: the rest of start() took as long as it took
        self.coordinator.extend_sessions(time.monotonic() - self._groups_loaded_at)
        # start() is not a stall: the adoption deadlines it set (wall
        # clock) hold on a clock that starts here equal to it
        self.loop_clock = LoopClock()
        while not self._stop:
            try:
                events = dict(poller.poll(POLL_INTERVAL_MS))
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EINTR:
                    self._watch_children()
                    continue
                raise
            self.planted_stall(self.ready and not events)
            if child_died is not None and child_died in events:
                try:
                    while os.read(child_died, 4096):
                        pass
                except BlockingIOError:
                    pass
            if self._ingest_out is not None and self._ingest_out.fileno() in events:
                self._on_ingest_output()
            if self.control in events:
                while True:
                    try:
                        frames = self.control.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._on_control_frames(frames)
            stalled = self.loop_clock.looked()
            if stalled:     # the members' heartbeats wait unread, as the workers' do
                self.coordinator.extend_sessions(stalled)
            self.native.on_events(events)
            self.relay.on_events(events)
            for listener in self.kafka_listeners:
                listener.on_events(events)
                listener.expire()
            self.markers.on_events(events)
            self.markers.expire()
            if self.pending:
                self._expire_pending()
            self.coordinator.tick()
            self.txn_coordinator.tick()
            self.share_coordinator.tick()
            self._watch_children()
            self._run_retries()
            if self._http_after is not None and (
                    time.monotonic() > self._http_after
                    or not any(self.controller.brokers[w.index].fenced for w in self.workers)):
                self._serve_http()
                self._check_ready()
            self._maybe_rebalance_leaders()
            self._fence_absent_brokers()
            if self.metrics is not None:
                self.metrics.tick()
            if self.lease is not None and self.lease.lost:
                # another node took the lease: this one's metadata writes are
                # refused from now on; stop being the controller rather than
                # serve stale leaderships (serve() rejoins as a broker node)
                print(f"kafkalite: node {self.config.node_id} lost the controller lease to "
                      f"another node; it stops being the controller", file=sys.stderr,
                      flush=True)
                self.exit_code = 1
                self.deposed = not self._stop
                break
        self.shutdown()
        return self.exit_code

    def release(self) -> None:
        """Let go of what a start that did not happen took: the data
        directory's lock, the lease connection and the users mirror (a
        start that failed before ``start_retryable`` went False took
        nothing else)."""
        if self.users_mirror is not None:
            self.users_mirror.close()
            self.users_mirror = None
        for name in ("markers", "txn_coordinator", "share_coordinator", "coordinator"):
            part = self.__dict__.pop(name, None)     # as far as start() got
            if part is not None:
                part.close()
        controller = self.__dict__.pop("controller", None)
        if controller is not None and self.lease is not None:
            controller.metadata.close()
        if self.lease is not None:
            self.lease.close(release=False)
            self.lease = None
        if self._lock_fd >= 0 and self.handed is None:     # (a handed lock: serve()'s)
            os.close(self._lock_fd)
        self._lock_fd = -1

    def shutdown(self, timeout: float | None = None) -> None:
        log.info("the loop's longest turn: %.2f s; %d stall(s) past %.1f s",
                 self.loop_clock.longest_s, self.loop_clock.stalls, self.loop_clock.allowance_s)
        if timeout is None:
            busiest = max((len(self.controller.metadata.owned_by(w.index)) for w in self.workers),
                          default=0)
            timeout = SHUTDOWN_TIMEOUT_S + SHUTDOWN_S_PER_PARTITION * busiest
        for w in self.workers:
            if (w.proc is not None and w.proc.poll() is None) or w.adopted:
                try:
                    self._send_worker(w.index, {"type": "shutdown"})
                except zmq.ZMQError:
                    pass
        self._close_ingest_output()
        if self.ingest is not None and self.ingest.poll() is None:
            self.ingest.terminate()
        deadline = time.monotonic() + timeout
        procs = [w.proc for w in self.workers if w.proc is not None] + (
            [self.ingest] if self.ingest is not None else [])
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("pid %d did not stop in time; killing it", proc.pid)
                proc.kill()
                proc.wait()
        for w in self.workers:
            if not w.adopted:
                continue
            # not a child: its exit is waited for by its pid
            while pid_alive(w.pid) and time.monotonic() < deadline:
                time.sleep(0.02)
            if pid_alive(w.pid):
                log.error("pid %d did not stop in time; killing it", w.pid)
                try:
                    os.kill(w.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            self._forget_adopted(w)
        try:
            os.unlink(os.path.join(self.config.data_dir, SERVER_FILE))
        except FileNotFoundError:
            pass
        if self.metrics is not None:
            self.metrics.close()
        if self.handed_registry is not None:       # stopped before it served HTTP
            self.handed_registry.close(wait=False)
            self.handed_registry = None
        for http, app in ((self.registry_http, self.registry_app),
                          (self.proxy_http, self.proxy_app),
                          (self.iceberg_http, self.iceberg_app)):
            if http is not None:
                http.close()
                app.close()
        self.coordinator.close()
        if self.users_mirror is not None:
            self.users_mirror.close()
        if self.lease is not None:
            self.lease.close(release=not self.lease.lost)
            self.controller.metadata.close()
        self.markers.close()
        self.txn_coordinator.close()
        self.share_coordinator.close()
        for listener in self.kafka_listeners:
            listener.close()
        self.relay.close()
        self.native.close()
        self.control.close()
        if self.node_curve is not None:
            self.node_curve.stop()      # the native listener stopped it if it is the same
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


class AnotherController(Exception):
    """Another node holds the cluster's controller lease."""

    def __init__(self, holder):
        super().__init__(f"node {holder} is the controller")
        self.holder = holder


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


class _StopRequest:
    """SIGTERM/SIGINT for the whole of serve(). The process changes role
    there (a broker node taking over as the controller, a deposed controller
    rejoining as a broker node), and a signal that came while one role wound
    down used to be lost with the object that took it: a broker node told to
    stop while it took over became the controller and ran on. The request
    outlives the roles, and each new one is handed it."""

    def __init__(self):
        self.requested = False
        self._target = None

    def __call__(self, signum=None, frame=None) -> None:
        self.requested = True
        if self._target is not None:
            self._target.request_stop()

    def hand_to(self, target) -> None:
        self._target = target
        if self.requested:
            target.request_stop()


def serve(config: ServerConfig, http_apps=(), early: EarlyStart | None = None,
          schema_registry=None, rest_proxy=None, iceberg_rest=None) -> int:
    """Run a server in this process until SIGTERM/SIGINT (the CLI's `server`):
    the supervisor of a node, or, in a cluster whose controller is another
    node, a broker node (broker_node.py). ``http_apps``,
    ``schema_registry``, ``rest_proxy`` and ``iceberg_rest``: see Supervisor; ``early``: the children
    processes.start_early spawned."""
    logging.basicConfig(level=config.effective_log_level,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    expired = None
    stop = _StopRequest()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if early is not None and early.stop_requested:
        stop()
    rejoining = False       # this process was a node of the cluster already
    handed = None           # a broker node's lock and running workers (RunningWorkers)
    registry = None         # the node's schema registry as it serves (http_apps.py)

    def let_go() -> None:
        """Stop what the last role handed on: this process ends."""
        if handed is not None:
            handed.stop(SHUTDOWN_TIMEOUT_S)
        if registry is not None:
            registry.close(wait=False)
    while True:
        sup = Supervisor(config, http_apps, early, expired, schema_registry, rest_proxy, handed,
                         iceberg_rest, registry)
        stop.hand_to(sup)
        try:
            sup.start()
        except errors.KafkaStorageError as exc:
            # A node that was in the cluster (deposed, or taking over from
            # an expired controller) and finds PostgreSQL away -- often
            # the tail of the very partition that deposed it -- keeps
            # trying, as a Kafka broker keeps trying its quorum: ending
            # the process took the node out of the cluster for good. A
            # first start still fails at once with the reason (a wrong
            # DSN should not hang), and so does a start that got as far
            # as binding its listeners.
            if not rejoining or stop.requested or not sup.start_retryable:
                if early is not None:
                    early.abandon()
                let_go()
                raise
            sup.release()
            log.warning("node %d cannot rejoin the cluster yet (%s); trying again in %.0f s",
                        config.node_id, exc, REJOIN_RETRY_S)
            time.sleep(REJOIN_RETRY_S)
            if stop.requested:
                let_go()
                return 0
            continue
        except AnotherController as other:
            sup.release()
            log.info("%s: node %d runs as one of its broker nodes", other, config.node_id)
            from kafkalite.server.node.broker_node import BrokerNode
            node = BrokerNode(config, handed, schema_registry, registry, iceberg_rest)
            handed = registry = None
            stop.hand_to(node)
            try:
                node.start()
            except errors.KafkaStorageError as exc:
                # PostgreSQL away (or refusing) as this node, which was in
                # the cluster, joins the controller that beat it to the
                # lease: it tries again, its workers serving on, rather
                # than end and take them with it
                handed, registry = node.hand_over(), node.hand_over_registry()
                if not rejoining or stop.requested:
                    let_go()
                    raise
                log.warning("node %d cannot join the controller yet (%s); trying again in "
                            "%.0f s", config.node_id, exc, REJOIN_RETRY_S)
                time.sleep(REJOIN_RETRY_S)
                if stop.requested:
                    let_go()
                    return 0
                continue
            code = node.run()
            if not node.takeover or stop.requested:
                node.shutdown()
                return code
            # the controller's lease expired: try to become the controller,
            # with the broker node's workers, which serve on meanwhile (the
            # workers early started went with the broker node)
            early, expired, rejoining = None, node.expired_controller, True
            handed, registry = node.hand_over(), node.hand_over_registry()
            continue
        except BaseException:
            if early is not None:
                early.abandon()    # no worker outlives a supervisor that could not start
            let_go()
            raise
        handed = registry = None   # the supervisor's now (it stops them with itself)
        code = sup.run()
        if not sup.deposed or stop.requested:    # (SIGTERM while it shut down)
            return code
        # Without this the deposed node's process ended (exit 1) once it
        # could reach PostgreSQL again and saw the lease gone: a network
        # partition of the controller took a whole node out of the cluster
        # until someone restarted it. Its workers have stopped; starting
        # over finds the new controller and joins it as a broker node.
        log.warning("node %d was deposed as the controller; it joins the new one",
                    config.node_id)
        early, expired, rejoining = None, None, True
