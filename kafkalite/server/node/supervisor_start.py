"""The supervisor's start: from the data directory's lock to a node that
serves.

``start()`` takes the lock (or the one start_early or this process's broker
node took), opens the metadata (the data directory's, or with ``--cluster``
PostgreSQL under the controller lease: AnotherController when another node
holds it), builds the controller and the coordinators, binds the
listeners, the relay and the control channel, and spawns or adopts the
workers and the ingest gateway; the HTTP ports come last
(http_services.py).

Which process runs it: the supervisor (``kafkalite server``), once per role
(roles.py), single-threaded.

What it may import: as node/ (its __init__).
"""
from __future__ import annotations

import logging
import os
import time

from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.server.auth.authorizer import authorizer_from_config
from kafkalite.server.auth.credentials import users_file
from kafkalite.server.auth.native_login import native_login
from kafkalite.server.auth.request_authorization import RequestGate
from kafkalite.server.auth.security import (listener_security, native_curve, native_security,
                                            node_curve, write_owner_keys,
                                            warn_if_node_channels_open)
from kafkalite.server.controller.acl_control import AclControl, AclStore, PostgresAclStore
from kafkalite.server.controller.controller import Controller
from kafkalite.server.controller.metadata import MetadataStore
from kafkalite.server.controller.quota_control import PostgresQuotaStore, QuotaControl, QuotaStore
from kafkalite.server.controller.scram_control import ClusterUsers, FileUsers, ScramControl
from kafkalite.server.group.coordinator import GroupCoordinator
from kafkalite.server.listeners import kafka_listeners
from kafkalite.server.metrics import NodeMetrics
from kafkalite.server.network.broker_requests import BrokerRequests
from kafkalite.server.network.connection_quotas import ConnectionQuotas
from kafkalite.server.network.kafka_listener import KafkaListener
from kafkalite.server.network.native_listener import NativeListener
from kafkalite.server.network.quotas import NodeQuotaRates, QuotaManager
from kafkalite.server.network.relay import RelayServer
from kafkalite.server.network.requests import KAFKA_APIS, RequestDispatcher
from kafkalite.server.node.http_services import _bracket
from kafkalite.server.node.loop_clock import planted_slow_start
from kafkalite.server.node.processes import (ADOPT_WAIT_S, CONTROLLER_FILE, SHUTDOWN_TIMEOUT_S,
                                             WorkerProcess, advertise_controller,
                                             advertise_supervisor, bind_control, config_digest,
                                             lock_data_dir, node_key_pair, stop_children,
                                             take_workers)
from kafkalite.server.replica.replica_apis import API_KEYS as REPLICA_APIS
from kafkalite.server.share.share_coordinator import ShareCoordinator
from kafkalite.server.topic import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from kafkalite.server.txn.txn_coordinator import TransactionCoordinator

log = logging.getLogger("kafkalite.supervisor")


class SupervisorStart:
    """The Supervisor's start (this module's docstring)."""

    def start(self) -> None:
        """Bind, spawn or adopt the workers and the ingest gateway, and serve
        (the steps below, in this order: each needs what the one before made)."""
        cfg, early = self.config, self.early
        planted_slow_start()                # loop_clock.FAULT_ENV; a no-op unless set
        steps = _Steps(takeover=self.handed is not None)
        running = self._take_lock()
        broker_ids, nodes = list(range(cfg.worker_count)), {}
        if cfg.cluster:
            broker_ids, nodes = self._cluster_brokers()
        broker_count = max(nodes) + 1 if nodes else cfg.worker_count
        metadata = self._open_metadata()
        steps.done("metadata")
        users_path = self._start_controller(metadata, nodes, broker_count)
        steps.done("controller")
        self._start_group_coordinator(metadata)
        steps.done("group coordinator")
        self._start_coordinators(metadata)
        steps.done("transaction and share coordinators")
        self._start_request_paths(users_path)
        steps.done("request paths")
        self.start_retryable = False        # ports and threads from here on
        advertised = self._bind_listeners()
        steps.done("listeners")
        self._take_workers(running, broker_ids, advertised)
        steps.done("workers")
        steps.log(cfg.node_id)
        self._local = {w.index: w for w in self.workers}
        self._config_digest = config_digest(cfg)
        for w in self.workers:
            if w.adopted and w.proc is None:    # not a child: no SIGCHLD
                self._watch_adopted(w)
        self.ingest_port = cfg.ingest_port
        # A dead supervisor's workers serve on, and their transactional
        # clients wait for this process's coordinators: until they serve,
        # its CPU goes to the loop, not to the HTTP ports' servers, a
        # gateway's imports or a full collection (issue 68: a transactional
        # producer stalled for the whole restart, 1-5 s)
        adopting = any(w.adopted for w in self.workers)
        if early is not None and early.ingest is not None:
            self.ingest = early.ingest
            self._watch_ingest_port()
        elif cfg.ingest_port == 0 and not adopting:
            self._spawn_ingest()    # a free port: the node is ready once the gateway says which
        # a fixed port is known already: the gateway starts once the node is
        # ready (_check_ready), leaving the start's CPU to the workers; a
        # publisher's PUSH queues its messages until the gateway binds
        if self._http_after is None and adopting:
            self._http_after = time.monotonic() + ADOPT_WAIT_S
        if self._http_after is None:    # (else once the node's workers serve, run())
            self._serve_http()

    def _take_lock(self) -> dict[int, int]:
        """The data directory's lock (start_early's or the broker node's, if
        they took it), and the workers of a dead supervisor this one adopts."""
        cfg, early = self.config, self.early
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
        return running

    def _start_controller(self, metadata, nodes: dict[int, int], broker_count: int) -> str:
        """The controller over ``metadata``; the SASL users file's path."""
        cfg = self.config
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
        return users_path

    def _start_group_coordinator(self, metadata) -> None:
        """The group coordinator, wired to the controller and the workers."""
        cfg = self.config
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

    def _start_coordinators(self, metadata) -> None:
        """The node's key pairs, the transaction and share coordinators, and
        the internal topics' and coordinators' handlers."""
        cfg, early = self.config, self.early
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

    def _start_request_paths(self, users_path: str) -> None:
        """Metrics, ACLs, SCRAM users, quotas and the one dispatcher."""
        cfg = self.config
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
        served = set(self.handlers) | REPLICA_APIS | {ApiKey.API_VERSIONS}
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

    def _bind_listeners(self) -> str:
        """The native and Kafka listeners, the relay and the control channel;
        the address other processes reach them at."""
        cfg, early = self.config, self.early
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
        return advertised

    def _take_workers(self, running: dict[int, int], broker_ids: list[int],
                      advertised: str) -> None:
        """This node's workers: start_early's, the adopted ones of a dead
        supervisor, the broker node's (a takeover), the rest spawned."""
        cfg, early = self.config, self.early
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
                self._http_closing = handed.http_closing
                self._http_after = time.monotonic() + ADOPT_WAIT_S
                stop_children(list(running_here.values()), SHUTDOWN_TIMEOUT_S)
                # the running ones join this controller (worker.py
                # _check_controller_file), under its lease's epoch
                advertise_controller(cfg.data_dir, self.lease.epoch, {
                    "control": self.control_endpoint, "relay": self.relay.endpoint,
                    "coordinator": f"tcp://{advertised}:{self.native.port}"})

    def _cluster_brokers(self) -> tuple[list[int], dict[int, int]]:
        """This node's workers' broker ids, and the node of every broker
        the cluster has given an id to."""
        from kafkalite.server.controller import cluster_store
        cfg = self.config
        wait = cluster_store.START_TIMEOUT_S
        return cluster_store.node_brokers(cfg.cluster, cfg.node_id, cfg.worker_count, wait)

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


class _Steps:
    """How long the start took, step by step, said in the log: a
    takeover's as a warning (a controller failover's time is lease expiry +
    this + the workers' hellos, tests/server/test_cluster_partitions.py),
    every other at INFO, after the process's own start and imports (the
    time to the first transaction after a supervisor kill is that and
    this: tests/server/test_adoption.py)."""

    def __init__(self, takeover: bool):
        self.takeover = takeover
        self.began = self._last = time.monotonic()
        self.took: list[str] = []

    def done(self, step: str) -> None:
        now = time.monotonic()
        self.took.append(f"{step} {now - self._last:.2f} s")
        self._last = now

    def log(self, node_id: int) -> None:
        took = time.monotonic() - self.began
        if self.takeover:
            log.warning("node %d took over as the controller: its start took %.2f s (%s)",
                        node_id, took, ", ".join(self.took))
        else:
            # the CPU beside the wall clock: a start on a loaded machine
            # waits for the CPU most of its time
            log.info("the supervisor's start took %.2f s (%s), %.2f s after the process's; "
                     "%.2f s of CPU in all", took, ", ".join(self.took),
                     _process_age_s() - took, time.process_time())


def _process_age_s() -> float:
    """Seconds since this process was started (/proc/self/stat; 0 where
    there is none), to the clock tick."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        return time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0


class AnotherController(Exception):
    """Another node holds the cluster's controller lease."""

    def __init__(self, holder):
        super().__init__(f"node {holder} is the controller")
        self.holder = holder
