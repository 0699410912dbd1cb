"""The node's roles in one process: ``serve()``.

A node's main process is the supervisor (supervisor.py), or, in a cluster
whose controller lease another node holds, a broker node (broker_node.py);
it changes role when the lease changes hands (a broker node taking over
as the controller, a deposed controller rejoining as a broker node), the
running workers and the schema registry handed from one role to the next,
and a SIGTERM/SIGINT outliving each role.

Which process runs it: ``kafkalite server`` (cli/server.py), on its main
thread.

What it may import: as node/ (its __init__).
"""
from __future__ import annotations

import logging
import signal
import time

from kafkalite import errors
from kafkalite.server.config import ServerConfig
from kafkalite.server.node.processes import SHUTDOWN_TIMEOUT_S, EarlyStart
from kafkalite.server.node.supervisor import Supervisor
from kafkalite.server.node.supervisor_start import AnotherController

log = logging.getLogger("kafkalite.supervisor")

REJOIN_RETRY_S = 1.0            # a node back from a partition, waiting for PostgreSQL


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
