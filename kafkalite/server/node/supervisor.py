"""The supervisor process: the node's one loop, and the wiring of the node.

This module holds the Supervisor's state, its loop (run), its metadata
actions that may have to wait, and its stop; the class is put together
from one module a job: its start (supervisor_start.py), the control
channel (control_channel.py), the workers' lives and their adoption
(worker_lives.py) and the HTTP services and the node's addresses
(http_services.py); the process's roles (supervisor or broker node) are
roles.py's ``serve()``. Each part's logic lives in its own folder
(controller/, group/, txn/, network/), the process helpers in
processes.py.

It runs, on one thread, everything of a node that is not a partition:

- process management (worker_lives.py): the data directory's lock file,
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
  roles.py's serve()), and the brokers of a node that never joins are fenced
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
- the control channel to the workers (control_channel.py): a ROUTER on loopback carrying JSON
  (assign / unassign / shutdown out; hello / done / heartbeat / metrics /
  alter_partition / refresh / bye in). It is the
  controller's ``BrokerChannel``: a change sent to several workers is
  answered when all of them confirmed (or the timeout passed);
- metrics and health (metrics.py): the workers' figures, summed, and the
  node's own, served over HTTP (http_services.py) (``/metrics``, ``/health``) by a thread that
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

Lifecycle: ``start()`` (supervisor_start.py) binds, spawns the workers and the ingest gateway and
writes ``<data_dir>/server.json`` once every worker is ready (a gateway on
a fixed port is spawned only then: its port is known, and its start would
take CPU from the workers' on a small machine); SIGTERM or
SIGINT stop it cleanly (workers close their logs, leaving clean-shutdown
markers; no process and no /dev/shm segment is left behind). Under
``kafkalite server`` the workers (and the gateway) were already spawned
before this module was imported (processes.py ``start_early``): the
supervisor adopts them, and tells them the endpoints they lack with their
first assign.

Who may call: roles.py's ``serve()`` (``kafkalite server``), single-threaded.
"""
from __future__ import annotations

import itertools
import logging
import os
import signal
import subprocess
import sys
import time

import zmq

from kafkalite.errors import KafkaError
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.server.config import ServerConfig
from kafkalite.server.network.requests import KAFKA_APIS
from kafkalite.server.node.control_channel import ControlChannel, PendingChange
from kafkalite.server.node.http_apps import SchemaRegistryDoor
from kafkalite.server.node.http_services import HttpServices
from kafkalite.server.node.loop_clock import LoopClock, PlantedStall, prepare_for_loop
from kafkalite.server.node.processes import (SERVER_FILE, SHUTDOWN_TIMEOUT_S, EarlyStart,
                                             RunningWorkers, WorkerProcess, pid_alive)
from kafkalite.server.node.supervisor_start import SupervisorStart
from kafkalite.server.node.worker_lives import WorkerLives

log = logging.getLogger("kafkalite.supervisor")

SHUTDOWN_S_PER_PARTITION = 0.005     # beside processes.SHUTDOWN_TIMEOUT_S
POLL_INTERVAL_MS = 100
RETRY_INTERVAL_S = 1.0   # a metadata action the store refused is tried again this often


class Supervisor(SupervisorStart, ControlChannel, WorkerLives, HttpServices):
    """A node's supervisor: its state, its loop and its stop; its start, control
    channel, workers' lives and HTTP services are the parts it inherits
    (supervisor_start.py, control_channel.py, worker_lives.py, http_services.py)."""

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
        self._http_closing = None   # the broker node's HTTP port closing (a takeover)
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

    def run(self) -> int:
        poller = self.poller
        poller.register(self.control, zmq.POLLIN)
        self.native.attach(poller)
        self.relay.attach(poller)
        for listener in self.kafka_listeners:
            listener.attach(poller)
        self.markers.attach(poller)
        child_died = self._watch_sigchld(poller)
        # (a start that adopted or was handed running workers collects once they serve)
        prepare_for_loop(collect=self._http_after is None)
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
            if self._http_after is not None and self._workers_settled(events):
                self._after_workers_serve()
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
