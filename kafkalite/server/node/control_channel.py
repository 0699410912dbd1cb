"""The supervisor's control channel to the workers: the controller's
BrokerChannel.

A ROUTER on loopback (or, with ``--cluster``, where the listeners are)
carrying JSON: assign / unassign / shutdown out; hello / done / heartbeat /
metrics / quota_usage / alter_partition / refresh / bye in. A change sent to
several workers is answered when all of them confirmed (or the timeout
passed); a worker that registers is sent everything it hosts; one that dies
or goes silent is fenced. A malformed message is dropped and counted, never
fatal.

Which process runs it: the supervisor (``kafkalite server``), on its loop's
one thread (supervisor.py).

What it may import: as node/ (its __init__).
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field

from kafkalite.errors import KafkaError
from kafkalite.server.auth.authorizer import acls_to_json
from kafkalite.server.node.processes import WorkerProcess

log = logging.getLogger("kafkalite.supervisor")


@dataclass
class PendingChange:
    """Control messages sent to workers, waiting for them to confirm."""
    waiting: set
    on_done: object                 # callable(results, timed_out)
    deadline: float
    results: list = field(default_factory=list)


class ControlChannel:
    """The control channel's side of the Supervisor (this module's docstring)."""

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
            self._on_done(w, msg)
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

    def _on_done(self, w: WorkerProcess, msg: dict) -> None:
        """Worker ``w`` applied a change: its start (``start-<index>``: it
        serves), or one a PendingChange waits on."""
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
