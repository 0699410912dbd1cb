"""A partition worker process: one broker, hosting the partitions it is given.

The worker is the event loop around the parts that do the work:

- ``ReplicaManager`` (replica_manager.py): the partitions this worker hosts
  and the data APIs for them (Produce, Fetch, ListOffsets,
  OffsetForLeaderEpoch), with the purgatory of waiting requests;
- ``RingGateway`` (ring_gateway.py): shared-memory rings of same-host
  producers, drained into the replica manager;
- three request paths into one ``RequestDispatcher`` (requests.py): the
  native ZeroMQ ROUTER (native_listener.py), Kafka's protocol over TCP
  (kafka_listener.py; this worker is Kafka broker ``index``), and the
  relay (relay.py) that passes the Kafka requests it does not serve to
  the supervisor;
- the control channel from the supervisor: a DEALER carrying JSON messages
  (assign / unassign / acls / acl_version / quotas / quota_usage / shutdown
  in, each naming the ACLs' version; hello / done / heartbeat, naming the
  version applied / metrics / quota_usage / alter_partition / refresh / bye
  out);
  ``metrics`` is this worker's figures once a second (metrics.py), unless
  metrics are off; ``quota_usage`` its client quota rates, answered with the
  rest of the node's (quotas.py); with CURVE it and the relay connect with
  the server's key pair, the only key the controller's ends accept
  (processes.bind_control);
- requests to the supervisor's coordinators (broker_requests.py): to the
  transaction coordinator, whether a partition is in a producer's
  transaction before its first transactional batch goes in
  (``verify_transaction``); to the share coordinator, the share-partitions'
  state (share_partition.py reads and writes it there);
- replication: the replica fetcher (replica_fetcher.py) for the partitions
  this worker follows, talking to the other workers over the native
  protocol, and the ISR changes its leaderships propose to the controller
  (``alter_partition`` on the control channel).

Everything runs on one thread (the replica manager borrows a thread pool to
open and close many logs at once, and its checkpoint file is written by a
thread of its own). The poll timeout is the nearest of the purgatory's
deadlines and the next housekeeping, so an idle worker sleeps. The poll is
one epoll set (network/poller.py): a pass with only Kafka traffic or ring
doorbells makes no ZeroMQ call.

Who may call: run as ``python -m kafkalite.server.node.worker`` by the supervisor.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time

import zmq

from kafkalite import errors, local_socket
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.server.auth.authorizer import acls_from_json, authorizer_from_config
from kafkalite.server.config import ServerConfig
from kafkalite.server.auth.request_authorization import RequestGate
from kafkalite.server.network.kafka_listener import KafkaListener
from kafkalite.server.metrics import WorkerMetrics
from kafkalite.server.controller.quota_control import quotas_from_json
from kafkalite.server.network.connection_quotas import ConnectionQuotas
from kafkalite.server.network.quotas import QuotaManager
from kafkalite.server.auth.security import (listener_security, native_curve, native_security,
                                       node_curve)
from kafkalite.server.network.broker_requests import BrokerRequests
from kafkalite.server.network.native_listener import NativeListener
from kafkalite.server.network.poller import EpollPoller, polled_context
from kafkalite.server.auth.native_login import native_login
from kafkalite.server.node.processes import (CONTROLLER_FILE, acl_push_dropped, config_digest,
                                             lock_worker, pid_alive, read_controller_file,
                                             read_supervisor)
from kafkalite.server.listeners import kafka_listeners
from kafkalite.server.network.relay import PendingRelay, RelayClient
from kafkalite.server.replica.replica_fetcher import ReplicaFetcher
from kafkalite.server.replica.replica_manager import ReplicaManager
from kafkalite.server.network.requests import KAFKA_APIS, RequestDispatcher
from kafkalite.server.replica.ring_gateway import RingGateway

log = logging.getLogger("kafkalite.worker")

HOUSEKEEPING_INTERVAL_S = 1.0
ISR_CHECK_INTERVAL_S = 0.25
# the supervisor fences a worker whose loop stops beating; as often, the
# worker checks that its supervisor lives and, once it is an orphan, looks
# for the next one (processes.SUPERVISOR_FILE)
HEARTBEAT_INTERVAL_S = 0.25
PEER_TIMEOUT_S = 5.0             # a replica fetch the leader did not answer is sent again
CHECKPOINT_INTERVAL_S = 5.0
CHORE_WARNING_S = 30.0          # a housekeeping chore that keeps failing is logged this often
FAILED = object()               # what _chore gives for a chore that failed
COORDINATOR = -1                 # the supervisor, as BrokerRequests' peer id
VERIFY_VERSION = 5               # AddPartitionsToTxn with verify_only (false: add, for v2)
# How long a request for the supervisor's coordinators waits for a new
# supervisor when there is none (it died; the next adopts this worker): less
# than a client's shortest socket timeout in our tests (5 s)
AWAIT_COORDINATOR_S = 3.0
AWAIT_COORDINATOR_MAX = 10_000  # past this many waiting, COORDINATOR_NOT_AVAILABLE at once
# Answers that mean "the coordinator cannot tell now": the producer is told
# to retry (NOT_ENOUGH_REPLICAS, which every client retries, as Kafka does
# for clients that predate KIP-890).
_VERIFY_RETRIABLE = {errors.CoordinatorNotAvailableError.code,
                     errors.CoordinatorLoadInProgressError.code, errors.NotCoordinatorError.code,
                     errors.ConcurrentTransactionsError.code, errors.RequestTimedOutError.code}


def _produce_code(code: int) -> int:
    """The Produce error for a partition the coordinator did not verify.
    PRODUCER_FENCED is a transactional API's answer; on Produce Kafka's
    brokers answer a fenced producer INVALID_PRODUCER_EPOCH, the one
    code librdkafka treats as fatal fencing on that path."""
    if code in _VERIFY_RETRIABLE:
        return errors.NotEnoughReplicasError.code
    if code == errors.ProducerFencedError.code:
        return errors.InvalidProducerEpochError.code
    return code


def _unserved_hint(server_port: str) -> str:
    """What a native request for an API no worker serves is told: a user
    who gave a worker's port as the bootstrap (seen in `ss` or a log) learns
    where the node is served (the supervisor's native port, its relay's
    address, is known from the first assign)."""
    return (f" (a worker's port serves its partitions only: bootstrap from the server's "
            f"native port, {server_port})")


class Worker:
    def __init__(self, index: int, config: ServerConfig, control_endpoint: str, port: int,
                 kafka_port: int = 0, relay_endpoint: str | None = None,
                 supervisor_pid: int | None = None, coordinator_endpoint: str | None = None,
                 node_keys: tuple[bytes, bytes] | None = None):
        self.index = index
        self.config = config
        self.ctx = polled_context()     # its sockets tell the poller of each send and receive
        self.poller = EpollPoller()     # a pass of Kafka traffic alone: no ZeroMQ call (poller.py)
        native = native_curve(config)       # the key file's, or None
        # the key pair the control channel and the relay take: the server's,
        # else the one the supervisor made for this run (node_keys)
        self.node_curve = node_curve(config, native, node_keys) \
            if native is not None or node_keys else None
        # the native ports' (security.native_security), or None: open
        self.curve = native_security(config, native, self.node_curve)
        self.coordinator = None             # BrokerRequests to the transaction coordinator
        # (deadline, api, version, body, on_done) of requests for it while there is none
        self._awaiting_coordinator: list[tuple] = []
        self.relay = None                   # RelayClient to the supervisor
        self._pending_relay = PendingRelay()  # what waits for the relay to be known
        self.replica_manager = ReplicaManager(index, config.data_dir, config.log_config,
                                              remote_storage=config.remote_storage_manager())
        self.peers = BrokerRequests(self.ctx, lambda b: self.fetcher.endpoint_of(b),
                                    f"replica-{index}", timeout_s=PEER_TIMEOUT_S
                                    + config.replica_fetch_wait_max_ms / 1000.0, curve=self.curve)
        self.peers.attach(self.poller)
        self.fetcher = ReplicaFetcher(index, self.peers, config.replica_fetch_wait_max_ms,
                                      config.replica_local_reads)
        self.replica_manager.fetcher = self.fetcher
        self.replica_manager.replica_lag_time_max_ms = config.replica_lag_time_max_ms
        self.replica_manager.remote_list_offsets_request_timeout_ms = \
            config.remote_list_offsets_request_timeout_ms
        self.replica_manager.remote_fetch_max_wait_ms = config.remote_fetch_max_wait_ms
        self.replica_manager.fetches.sessions.max_entries = \
            config.max_incremental_fetch_session_cache_slots
        # Iceberg topics' tables: the catalog (a cluster's) and the warehouse
        self.replica_manager.iceberg_tables = (
            config.iceberg_catalog_uri, config.iceberg_warehouse, config.iceberg_unshared,
            config.iceberg_file_io)
        self.replica_manager.shares.configure(config)
        self._next_isr_check = time.monotonic() + ISR_CHECK_INTERVAL_S
        self._next_heartbeat = time.monotonic()
        self.rings = RingGateway(self.replica_manager, self.poller, index)
        if self.replica_manager.remote_reader is not None:
            # remote segment downloads end on the reader's threads (KIP-405)
            self.poller.register(self.replica_manager.remote_reader.wakeup_fd, zmq.POLLIN)
        # The APIs Kafka clients are told this broker serves: the whole
        # node's from the first connection, since what the worker does not
        # serve it relays (held until it knows the relay: PendingRelay).
        self.cluster_apis: list = sorted(KAFKA_APIS)
        self.metrics = WorkerMetrics(index) if config.metrics_enabled else None
        self.dispatcher = RequestDispatcher(f"worker {index}", self.replica_manager.handlers(),
                                            cluster_apis=lambda: self.cluster_apis,
                                            stats=self.metrics and self.metrics.requests,
                                            unserved_hint=_unserved_hint("its bootstrap.servers"))
        # the common Produce request, answered by its listener in one pass (issue 72)
        self.dispatcher.at_once[ApiKey.PRODUCE] = self.replica_manager.produce_at_once
        self.dispatcher.frames_at_once[ApiKey.PRODUCE] = self.replica_manager.produce_frame_at_once
        # the ACLs come from the controller (acl_control.py): none until the
        # first assign, so nothing is allowed before it but to super users
        self.authorizer = authorizer_from_config(config, self.metrics and self.metrics.requests)
        # the version of the ACLs applied (acl_control.py), named in each heartbeat
        self.acl_version = None
        self.gate = None
        if self.authorizer is not None:
            self.gate = self.dispatcher.gate = RequestGate(
                self.authorizer, topic_name_of=self.replica_manager.topic_names.get)
        # client quotas (quotas.py): the configs come from the controller
        # (quota_control.py) with the first assign; this worker's rates go
        # to the supervisor, which answers with the rest of the node's
        self.connection_quotas = ConnectionQuotas(config.quota_window_num,
                                                  config.quota_window_size_seconds,
                                                  config.max_connection_creation_rate)
        self.quotas = QuotaManager(config.quota_window_num, config.quota_window_size_seconds,
                                   share=lambda msg: self._send_control({**msg,
                                                                         "worker": self.index}),
                                   connections=self.connection_quotas)
        self.dispatcher.quotas = self.quotas
        self.rings.quotas = self.quotas
        self.native = NativeListener(self.ctx, config.host, port, self.dispatcher,
                                     name=f"worker {index}",
                                     extensions={"shm_attach": self.rings.attach,
                                                 "kafka_endpoint": self._kafka_endpoint},
                                     fallback_to_any_port=True, curve=self.curve,
                                     local_door=config.local_sockets and config.authorizer_enabled,
                                     login=native_login(config, self.curve))
        # rings are authorized as their native channel is: only under CURVE
        self.rings.authorizer = self.authorizer if self.curve is not None else None
        self.native.attach(self.poller)
        # every Kafka listener of the node (listeners.py); the first is the
        # primary, on ``kafka_port``, the others on any free port. The first
        # PLAINTEXT one, which native clients' direct links use, also has a
        # Unix-domain socket for those on this host (local_socket.py)
        specs = kafka_listeners(config)
        first_plaintext = next((s.name for s in specs if s.protocol == "PLAINTEXT"), None)
        self.kafka_listeners = [
            KafkaListener(spec.host, kafka_port if i == 0 else 0, self.dispatcher,
                          name=f"worker {index}" + (f" ({spec.name})" if i else ""),
                          fallback_to_any_port=True,
                          security=listener_security(config, spec.protocol, spec.name),
                          listener_name=spec.name, connection_quotas=self.connection_quotas,
                          local_socket=(spec.name == first_plaintext and self.curve is None
                                        and config.local_sockets),
                          connections_max_idle_ms=config.connections_max_idle_ms,
                          authentication_timeout_ms=config.authentication_timeout_ms)
            for i, spec in enumerate(specs)]
        self.kafka = self.kafka_listeners[0]
        for listener in self.kafka_listeners:
            listener.attach(self.poller)
        self.join_supervisor(relay_endpoint, coordinator_endpoint)
        self.control = None
        self._connect_control(control_endpoint)
        self._stop = False
        self._next_housekeeping = time.monotonic() + HOUSEKEEPING_INTERVAL_S
        self._next_checkpoint = time.monotonic() + CHECKPOINT_INTERVAL_S
        self._chore_warned: dict[str, float] = {}  # chore -> when its next failure is logged
        # Who must stay our parent. Given by the supervisor: a worker started
        # just as its supervisor died may already be an orphan here, and
        # os.getppid() would then name init, which never goes away.
        self._parent = supervisor_pid or os.getppid()
        self._adopted = False           # by a supervisor that is not our parent (_rehome)
        self._orphaned_at: float | None = None   # when the supervisor was found gone
        self._config_digest = config_digest(config)
        # in a cluster, the controller this worker joined, as its broker
        # node last named it (_check_controller_file)
        self._controller_file = os.path.join(config.data_dir, CONTROLLER_FILE)
        self._controller_seen = self._controller_file_stamp()
        known = read_controller_file(config.data_dir) if config.cluster else None
        self._controller_epoch = known["epoch"] if known else None
        self._rejoined = False      # its next start assign is a new controller's (_on_control)

    @property
    def port(self) -> int:
        return self.native.port

    def _connect_control(self, endpoint: str) -> None:
        """The control channel's DEALER, connected to ``endpoint`` (a new
        one replaces the old: a supervisor that adopted this worker)."""
        if self.control is not None:
            self.poller.unregister(self.control)
            self.control.close(linger=0)
        self.control = self.ctx.socket(zmq.DEALER)
        self.control.setsockopt(zmq.LINGER, 1000)
        self.control.setsockopt(zmq.IDENTITY, b"worker-%d" % self.index)
        if self.node_curve is not None:     # the controller's channel opens to the node's keys only
            self.node_curve.secure_client(self.control)
        self.control.connect(endpoint)
        self.poller.register(self.control, zmq.POLLIN)

    def join_supervisor(self, relay_endpoint: str | None, coordinator_endpoint: str | None) -> None:
        """Connect to the supervisor's relay and its transaction coordinator.

        A worker the supervisor started before binding them (at start-up it
        starts its workers first, so that their imports overlap its own) is
        told them with its first assign; until then it serves nothing that
        needs them, having no partitions. A worker a new supervisor adopted
        is told the new supervisor's with its first assign too (it dropped
        the dead one's relay and coordinator when it found it gone)."""
        if coordinator_endpoint and self.coordinator is None:
            self.dispatcher.unserved_hint = _unserved_hint(
                coordinator_endpoint.removeprefix("tcp://"))
            self.coordinator = BrokerRequests(self.ctx, lambda _: coordinator_endpoint,
                                              f"worker-{self.index}", timeout_s=10.0,
                                              curve=self.curve)
            self.coordinator.attach(self.poller)
            self.replica_manager.verifier = self.verify_transaction
            # what waited for a supervisor goes to this one, in the order it came
            awaiting, self._awaiting_coordinator = self._awaiting_coordinator, []
            for _, api, version, body, on_done in awaiting:
                self.coordinator.send(COORDINATOR, api, version, body, on_done)
            # share groups' dead letters: the controller names the topic's
            # leaders, the leading worker takes the records
            dead_letters = self.replica_manager.shares.dead_letter_writer
            dead_letters.ask_controller = self._ask_coordinator
            dead_letters.ask_broker = self.peers.send
            # share-partition state: read from and written to the share
            # coordinator (share_coordinator.py) over the same endpoint
            self.replica_manager.shares.persister = self._ask_coordinator
        if relay_endpoint and self.relay is None:
            self.relay = RelayClient(self.ctx, relay_endpoint, b"worker-%d" % self.index,
                                     curve=self.node_curve)
            self.relay.attach(self.poller)
            for listener in self.kafka_listeners:      # what KafkaListener(relay=...) does
                listener.relay = self.relay
            self._pending_relay.hand_over(self.relay)
        elif self.relay is None:
            for listener in self.kafka_listeners:      # until the first assign names it
                listener.relay = self._pending_relay

    def _drop_relay(self, why: str) -> None:
        """Stop relaying to a supervisor that is gone: the requests it left
        unanswered and what the listeners forward from now on wait for the
        next supervisor (PendingRelay), which gets them in the order they
        came."""
        self.poller.unregister(self.relay.socket)
        unanswered = self.relay.unanswered()
        if unanswered:
            log.warning("worker %d: %d request(s) relayed to the supervisor unanswered (%s): "
                        "sent again to the next one", self.index, len(unanswered), why)
        self.relay.close()
        self.relay = None
        self._pending_relay = PendingRelay()
        self._pending_relay.forward_again(unanswered)
        for listener in self.kafka_listeners:
            listener.relay = self._pending_relay

    # ---- the supervisor's life -------------------------------------------------------------

    def _check_supervisor(self, now: float) -> None:
        """Is the supervisor alive? A worker whose supervisor died serves
        on until a new one adopts it (processes.take_workers), however long
        its start takes (``worker_orphan_timeout_ms`` -1, the default; a
        positive value bounds the wait): its clients keep producing and
        fetching meanwhile, and the next supervisor has nothing to reopen.
        A supervisor that takes the data directory and does not adopt it
        kills it (processes.fence_stale_workers); one whose data directory
        was removed has nothing to serve and exits. A cluster's node stops
        with its workers (broker_node.py restarts them)."""
        if self._orphaned_at is None:
            alive = pid_alive(self._parent) if self._adopted else os.getppid() == self._parent
            if alive:
                if self.config.cluster:
                    self._check_controller_file()
                return
            timeout_ms = self.config.worker_orphan_timeout_ms
            if self.config.cluster or timeout_ms == 0:
                log.error("worker %d: the supervisor is gone; shutting down", self.index)
                self._stop = True
                return
            log.warning("worker %d: the supervisor (pid %d) is gone; serving on and waiting "
                        "%s for a new one", self.index, self._parent,
                        "however long it takes" if timeout_ms < 0 else f"{timeout_ms / 1000:g} s")
            self._orphaned_at = now
            if self.relay is not None:
                self._drop_relay("the supervisor is gone")
            if self.coordinator is not None:
                # what waits on the dead coordinator is answered now (as
                # retriable) rather than at its timeout; the next one may
                # listen at the same address, which would leave a request
                # sent to the dead one waiting there for ever. None before
                # the close: its callbacks re-run the produce requests
                # queued behind a verification, which must find no
                # coordinator (a request sent on the closing one was never
                # answered, and the producer's later requests queued behind
                # it for good: the restart matrix's soak)
                coordinator, self.coordinator = self.coordinator, None
                coordinator.close()
        found = read_supervisor(self.config.data_dir)
        timeout_ms = self.config.worker_orphan_timeout_ms
        if found is not None and found["pid"] != self._parent and pid_alive(found["pid"]):
            self._rehome(found["pid"], found["control"])
        elif not os.path.isdir(self.config.data_dir):
            log.error("worker %d: its data directory %s is gone; shutting down", self.index,
                      self.config.data_dir)
            self._stop = True
        elif 0 < timeout_ms < (now - self._orphaned_at) * 1000:
            log.error("worker %d: no supervisor adopted it in %.0f s; shutting down",
                      self.index, now - self._orphaned_at)
            self._stop = True

    def _controller_file_stamp(self):
        try:
            st = os.stat(self._controller_file)
            return st.st_mtime_ns, st.st_ino
        except OSError:
            return None

    def _check_controller_file(self) -> None:
        """A cluster's broker node names a new controller (its lease moved:
        its node restarted, or another took over) in CONTROLLER_FILE: join
        it -- a hello on its control channel, its relay and coordinator --
        and serve on, rather than be restarted to introduce itself."""
        stamp = self._controller_file_stamp()
        if stamp == self._controller_seen:
            return
        self._controller_seen = stamp
        found = read_controller_file(self.config.data_dir)
        if found is None or found.get("epoch") == self._controller_epoch:
            return
        log.warning("worker %d: joins the new controller (epoch %s)", self.index,
                    found.get("epoch"))
        self._controller_epoch = found.get("epoch")
        self._connect_control(found["control"])
        if self.relay is not None:
            self._drop_relay("the controller changed")
        if self.coordinator is not None:    # what waits there: retriable errors now
            coordinator, self.coordinator = self.coordinator, None      # (_check_supervisor)
            coordinator.close()
        self.join_supervisor(found["relay"], found["coordinator"])
        self._rejoined = True
        self._say_hello()

    def _rehome(self, pid: int, control_endpoint: str) -> None:
        """Say hello to the supervisor ``pid`` that took the data
        directory; it adopts this worker (or kills it: stopped too long,
        or of another configuration) and sends its first assign, which
        names its relay and coordinator (``join_supervisor``)."""
        log.warning("worker %d: the new supervisor (pid %d) adopts it", self.index, pid)
        self._parent, self._adopted, self._orphaned_at = pid, True, None
        self._connect_control(control_endpoint)
        self._say_hello()
        self._next_heartbeat = time.monotonic() + HEARTBEAT_INTERVAL_S

    # ---- control channel -----------------------------------------------------------------

    def _send_control(self, msg: dict) -> None:
        if self._orphaned_at is not None:
            return          # no supervisor: the next one gets a hello, then the news
        self.control.send(json.dumps(msg).encode())

    def _acls_from(self, kind: str, msg: dict) -> bool:
        """The ACLs and their version in a control message (acl_control.py):
        a list is applied with its version; another message's version, when
        it is not the one applied, makes this worker refuse what its ACLs
        decide (RequestGate.acls_behind) until the list comes. False: the
        message is dropped (the fault probe of the tests)."""
        if kind in ("assign", "acls") and "acls" in msg:
            if kind == "acls" and acl_push_dropped(self.index):
                return False
            self.authorizer.replace(acls_from_json(msg["acls"]))
            self.acl_version = msg.get("acl_version")
        if "acl_version" not in msg:
            return True
        behind = msg["acl_version"] != self.acl_version
        if behind != self.gate.acls_behind:
            log.warning("worker %d: ACL version %s %s (the controller's: %s)", self.index,
                        self.acl_version, "is behind; refusing what the ACLs decide until "
                        "the ACLs come" if behind else "is the current one again",
                        msg["acl_version"])
            self.gate.acls_behind = self.rings.acls_behind = behind
        return True

    def _on_control(self, msg: dict) -> None:
        kind = msg["type"]
        if "partition_counts" in msg:           # a (re)start's assign: every topic
            self.replica_manager.learn_partition_counts(msg["partition_counts"], replace=True)
        if "topic_partitions" in msg:           # topics created, grown or deleted
            self.replica_manager.learn_partition_counts(msg["topic_partitions"])
        if kind in ("assign", "unassign") and self.metrics is not None:
            self.metrics.touched.update((p["topic"], p["partition"]) for p in msg["partitions"])
        if self.authorizer is not None and not self._acls_from(kind, msg):
            return
        if kind in ("assign", "quotas") and "quotas" in msg:
            self.quotas.replace(quotas_from_json(msg["quotas"]))
        if kind in ("acls", "quotas", "topics"):
            self._send_control({"type": "done", "op": msg.get("op"), "worker": self.index})
        elif kind == "quota_usage":
            self.quotas.set_others(msg["rates"])
        elif kind == "assign":
            self.join_supervisor(msg.get("relay"), msg.get("coordinator"))
            if "brokers" in msg:
                self.fetcher.set_endpoints(msg["brokers"])
            if self._rejoined and str(msg.get("op", "")).startswith("start-"):
                # a new controller's first word: everything this broker
                # hosts. What it held under the old one and no longer
                # hosts (moved or deleted meanwhile) is closed, as a
                # restarted process would not have opened it.
                self._rejoined = False
                hosted = {(p["topic"], p["partition"]) for p in msg["partitions"]}
                for key in [k for k in self.replica_manager.partitions if k not in hosted]:
                    log.warning("worker %d: %s-%d is no longer hosted here; closing it",
                                self.index, *key)
                    self.replica_manager.stop_replica(*key, delete=False)
            results = self.replica_manager.assign(msg["partitions"])
            self._send_control({"type": "done", "op": msg.get("op"), "worker": self.index,
                                "results": results})
        elif kind == "unassign":
            for p in msg["partitions"]:
                self.replica_manager.stop_replica(p["topic"], p["partition"],
                                                  delete=msg.get("delete", False),
                                                  directory=p.get("dir"),
                                                  delete_remote=msg.get("delete_remote", False))
            self._send_control({"type": "done", "op": msg.get("op"), "worker": self.index})
        elif kind == "delete_share_group":
            self.replica_manager.shares.delete_group(msg["group"])
        elif kind == "shutdown":
            self._stop = True
        elif kind == "acl_version":
            pass                    # the controller's ACL version: _acls_from took it
        else:
            log.warning("worker %d: unknown control message %r", self.index, kind)

    # ---- transaction verification ------------------------------------------------------------

    def verify_transaction(self, transactional_id: str, producer_id: int, epoch: int,
                           partitions: list, on_done, add: bool = False) -> None:
        """Ask the coordinator whether ``partitions`` are in the producer's
        open transaction -- with ``add`` (a transactions-v2 producer), to add
        them to it; ``on_done({(topic, partition): error code})``."""
        topics: dict[str, list] = {}
        for topic, index in partitions:
            topics.setdefault(topic, []).append(index)

        def answered(result) -> None:
            if isinstance(result, KafkaError):
                code = (errors.NotEnoughReplicasError.code
                        if result.retriable or result.code in _VERIFY_RETRIABLE else result.code)
                on_done({tp: code for tp in partitions})
                return
            codes = {tp: errors.NotEnoughReplicasError.code for tp in partitions}
            for txn in result.get("results_by_transaction") or ():
                for t in txn["topic_results"]:
                    for p in t["results_by_partition"]:
                        codes[(t["name"], p["partition_index"])] = _produce_code(
                            p["partition_error_code"])
            on_done(codes)

        self._ask_coordinator(ApiKey.ADD_PARTITIONS_TO_TXN, VERIFY_VERSION, {
            "transactions": [{"transactional_id": transactional_id, "producer_id": producer_id,
                              "producer_epoch": epoch, "verify_only": not add,
                              "topics": [{"name": t, "partitions": ps}
                                         for t, ps in topics.items()]}]}, answered)

    def _ask_coordinator(self, api, version: int, body: dict, on_done) -> None:
        """Send a request to the supervisor's coordinators. With no
        supervisor (it died, and the next one has not adopted this worker
        yet) it waits for the next one up to AWAIT_COORDINATOR_S, then
        ``on_done`` gets COORDINATOR_NOT_AVAILABLE, which every caller
        answers with a retriable error. Answered at once, a transactional
        producer's produce (verified here, KIP-890) failed over and over
        while the supervisor restarted, and librdkafka's growing retry
        backoff held its first retry up to 0.45 s past the new supervisor's
        start (issue 47)."""
        if self.coordinator is None:
            if len(self._awaiting_coordinator) >= AWAIT_COORDINATOR_MAX:
                on_done(errors.CoordinatorNotAvailableError("the supervisor is restarting"))
                return
            self._awaiting_coordinator.append(
                (time.monotonic() + AWAIT_COORDINATOR_S, api, version, body, on_done))
            return
        self.coordinator.send(COORDINATOR, api, version, body, on_done)

    def _expire_awaiting_coordinator(self, now: float, all_of_them: bool = False) -> None:
        """COORDINATOR_NOT_AVAILABLE for what waited for a supervisor past
        its deadline (or for everything, at the worker's end)."""
        if not self._awaiting_coordinator:
            return
        keep = []
        for item in self._awaiting_coordinator:
            if all_of_them or now >= item[0]:
                item[4](errors.CoordinatorNotAvailableError("the supervisor is restarting"))
            else:
                keep.append(item)
        self._awaiting_coordinator = keep

    # ---- housekeeping ----------------------------------------------------------------------

    def _housekeeping(self) -> None:
        now = time.monotonic()
        self._next_housekeeping = now + HOUSEKEEPING_INTERVAL_S
        # Each chore on its own: one that cannot have a file (EMFILE at the
        # descriptor limit, ENOSPC) is skipped until the next round and the
        # others still run; the worker goes on serving what it can.
        self._chore("rings", self.rings.housekeeping)
        self._chore("logs", self.replica_manager.housekeeping, HOUSEKEEPING_INTERVAL_S)
        if now >= self._next_checkpoint and self._chore(
                "checkpoints", self.replica_manager.checkpoint) is not FAILED:
            self._next_checkpoint = now + CHECKPOINT_INTERVAL_S
        if self.metrics is not None:
            snapshot = self._chore("metrics", self.metrics.snapshot, self.replica_manager)
            if snapshot is not FAILED:
                snapshot["quota_throttles"] = self.quotas.throttle_rows()
                snapshot["connections_rejected"] = self.connection_quotas.rejected_rows()
                self._send_control(snapshot)

    def _chore(self, what: str, fn, *args):
        """``fn(*args)``, or FAILED when it failed for want of a resource (an
        OSError, or the storage error it became), logged at most every
        CHORE_WARNING_S per chore."""
        try:
            return fn(*args)
        except (OSError, errors.KafkaStorageError) as exc:
            now = time.monotonic()
            if now >= self._chore_warned.get(what, 0.0):
                log.warning("worker %d: %s skipped: %s", self.index, what, exc)
                self._chore_warned[what] = now + CHORE_WARNING_S
            return FAILED

    def _kafka_endpoint(self, body: dict, principal: str, peer_uid: int | None) -> dict:
        """The ``kafka_endpoint`` extension: where this worker's PLAINTEXT
        Kafka listener is, for a native client's direct TCP link
        (client/tcp_link.py). Refused under CURVE: the native port's keys
        would be bypassed by a plaintext path (its principal is ANONYMOUS)."""
        if self.curve is not None:
            raise errors.SecurityDisabledError(
                "this worker's native port requires CURVE: no plaintext Kafka path is offered")
        for spec, listener in zip(kafka_listeners(self.config), self.kafka_listeners):
            if spec.protocol == "PLAINTEXT":
                return {"host": spec.advertised_host, "port": listener.port,
                        "local_socket": listener.local_name,
                        "local_identity": local_socket.identity()}
        raise errors.SecurityDisabledError("this worker has no PLAINTEXT Kafka listener")

    def _advertised_listeners(self, cluster: bool) -> dict:
        """{listener name: [host, port]} this worker is reached at on each
        Kafka listener; host None: the controller's own public host (its
        node's), as ``host`` in the hello."""
        specs = kafka_listeners(self.config)
        return {spec.name: [spec.advertised_host or (self.config.public_host if cluster else None),
                            listener.port]
                for spec, listener in zip(specs, self.kafka_listeners)}

    # ---- main loop -------------------------------------------------------------------------

    def _say_hello(self) -> None:
        cluster = bool(self.config.cluster)   # then the controller may be on another node
        self._send_control({"type": "hello", "worker": self.index, "pid": os.getpid(),
                            "port": self.port, "kafka_port": self.kafka.port,
                            "kafka_listeners": self._advertised_listeners(cluster),
                            "host": self.config.public_host if cluster else None,
                            "node": self.config.node_id if cluster else None,
                            "config": self._config_digest})

    def run(self) -> int:
        self._say_hello()
        # the parts that name a deadline, asked every pass (_next_deadline);
        # the coordinator's link comes and goes, so it is asked apart
        self._deadline_parts = [part.next_deadline for part in (
            self.replica_manager, self.peers, self.fetcher, *self.kafka_listeners, self.native,
            self.quotas, self.rings)]
        while not self._stop:
            self.rings.arm()
            timeout = max(0, int((self._next_deadline() - time.monotonic()) * 1000) + 1)
            try:
                events = dict(self.poller.poll(timeout))
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EINTR:
                    continue
                raise
            if self.control in events:
                while True:
                    try:
                        msg = self.control.recv(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    self._on_control(json.loads(msg))
            # what waits in the purgatory on a partition is looked at once
            # for all the requests this poll returned, not after each: a
            # consumer's fetch is answered with every record a producer's
            # burst of Produce requests appended, not with the first
            # request's alone while the others wait for its next fetch
            with self.replica_manager.gathered_wakeups():
                self.native.on_events(events)
                if self.relay is not None:
                    self.relay.on_events(events)
                self.rings.on_events(events)
                if (self.replica_manager.remote_reader is not None
                        and self.replica_manager.remote_reader.wakeup_fd in events):
                    self.replica_manager.remote_reads_completed()
                for listener in self.kafka_listeners:
                    listener.on_events(events)
                    listener.expire()
            self.quotas.tick()
            # one clock read for the rest of the pass: each part below is
            # due by deadlines of 10 ms or more
            now = time.monotonic()
            if self.coordinator is not None:
                self.coordinator.on_events(events)
                if self.coordinator.in_flight:
                    self.coordinator.expire(now)
            self._expire_awaiting_coordinator(now)
            self.peers.on_events(events)
            if self.peers.in_flight:
                self.peers.expire(now)
            self.fetcher.tick(now)
            self.replica_manager.expire()
            self._timers(now)
        self.shutdown()
        return 0

    def _next_deadline(self) -> float:
        """When the loop must wake at the latest: the nearest of its own
        timers and of every part's deadlines (each answers from a field or
        an empty collection when it has nothing to wait for)."""
        deadline = self._next_housekeeping
        if self._next_heartbeat < deadline:
            deadline = self._next_heartbeat
        if self.replica_manager.led_with_followers and self._next_isr_check < deadline:
            deadline = self._next_isr_check
        if self._awaiting_coordinator and self._awaiting_coordinator[0][0] < deadline:
            deadline = self._awaiting_coordinator[0][0]
        if self.coordinator is not None:
            due = self.coordinator.next_deadline()
            if due is not None and due < deadline:
                deadline = due
        for next_deadline in self._deadline_parts:
            due = next_deadline()
            if due is not None and due < deadline:
                deadline = due
        return deadline

    def _timers(self, now: float) -> None:
        """The loop's own timers (heartbeat, ISR check, housekeeping) and
        what the pass left to tell the supervisor."""
        if now >= self._next_heartbeat:
            self._check_supervisor(now)
            # from the loop itself: a loop that is stuck (or a process
            # stopped) stops beating, and its leaderships move
            self._send_control({"type": "heartbeat", "worker": self.index,
                                "acl_version": self.acl_version})
            self._next_heartbeat = now + HEARTBEAT_INTERVAL_S
        if now >= self._next_isr_check and self.replica_manager.led_with_followers:
            self.replica_manager.check_isr(now)
            self._next_isr_check = now + ISR_CHECK_INTERVAL_S
        if self.fetcher.stale:
            stale, self.fetcher.stale = self.fetcher.stale, []
            self._send_control({"type": "refresh", "worker": self.index, "partitions": [
                {"topic": t, "partition": p} for t, p in stale]})
        proposals = self.replica_manager.isr_proposals()
        if proposals:
            self._send_control({"type": "alter_partition", "worker": self.index,
                                "partitions": proposals})
        if now >= self._next_housekeeping:
            self._housekeeping()

    def shutdown(self) -> None:
        self.replica_manager.purgatory.complete_all()
        self.rings.close()
        self.replica_manager.shutdown()
        try:
            self._send_control({"type": "bye", "worker": self.index})
        except zmq.ZMQError:
            pass
        for listener in self.kafka_listeners:
            listener.close()
        self.peers.close()
        self.fetcher.close()
        if self.coordinator is not None:
            self.coordinator.close()
        self._expire_awaiting_coordinator(time.monotonic(), all_of_them=True)
        if self.relay is not None:
            self.relay.close()
        self.native.close()
        self.control.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="kafkalite partition worker (started by the supervisor)")
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--control", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--kafka-port", type=int, default=0)
    parser.add_argument("--relay", help="the supervisor's relay endpoint (Kafka requests "
                                        "this worker does not serve); without it, the "
                                        "first assign names it")
    parser.add_argument("--config-json", required=True)
    parser.add_argument("--supervisor-pid", type=int, help="exit when this is no longer the parent")
    parser.add_argument("--coordinator", help="the supervisor's native endpoint (the transaction "
                                              "coordinator, asked to verify transactional "
                                              "writes); without it, the first assign names it")
    parser.add_argument("--node-keys-stdin", action="store_true",
                        help="read the node's CURVE key pair (the control channel's and the "
                             "relay's) from stdin: one line, public and secret key, Z85")
    args = parser.parse_args(argv)
    node_keys = None
    if args.node_keys_stdin:
        words = sys.stdin.buffer.readline().split()
        if len(words) != 2:
            print(f"worker {args.index}: no node key pair on stdin", file=sys.stderr)
            return 1
        node_keys = (words[0], words[1])
    config = ServerConfig(**json.loads(args.config_json))
    logging.basicConfig(level=config.effective_log_level,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    # held until the process ends: a later server finds a worker of ours
    # that outlived us by it, and kills it (processes.fence_stale_workers)
    if lock_worker(config.data_dir, args.index, args.supervisor_pid) is None:
        print(f"kafkalite: worker {args.index} (pid {os.getpid()}): the supervisor that started "
              f"it (pid {args.supervisor_pid}) died before it took its lock; the next one "
              f"starts this worker itself: exiting", file=sys.stderr, flush=True)
        return 0
    worker = Worker(args.index, config, args.control, args.port, args.kafka_port, args.relay,
                    args.supervisor_pid, args.coordinator, node_keys)

    def stop(signum, frame):
        worker._stop = True
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the supervisor decides; Ctrl-C reaches it
    return worker.run()


if __name__ == "__main__":
    sys.exit(main())
