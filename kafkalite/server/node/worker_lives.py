"""The lives of the supervisor's children: the partition workers and the
ingest gateway.

Spawning them (with the node's key pair of this run), watching them
(SIGCHLD through a wakeup pipe; a pidfd for an adopted worker, which is no
child), restarting one that dies (backing off when one keeps dying),
fencing one that falls silent, adopting the workers of a dead supervisor
or of this process's broker node (replacing one that does not say hello in
time or runs another configuration), and, in a cluster, fencing the
brokers that never joined this controller.

Which process runs it: the supervisor (``kafkalite server``), on its loop's
one thread (supervisor.py).

What it may import: as node/ (its __init__).
"""
from __future__ import annotations

import logging
import os
import signal
import sys
import time

import zmq

from kafkalite.server.node.processes import (ADOPT_WAIT_S, RESTART_BACKOFF_S, WorkerProcess,
                                             pid_alive, spawn_ingest, spawn_worker)

log = logging.getLogger("kafkalite.supervisor")


class WorkerLives:
    """The workers' lives, the Supervisor's side (this module's docstring)."""

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
