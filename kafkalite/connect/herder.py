"""The herder: connectors' configs, target states and lifecycle (Kafka
Connect's StandaloneHerder), what the REST API calls.

A connector is created with a config (validated first: a bad one raises
BadConfig, naming each bad key), started (``start``, then
``task_configs(tasks.max)``), and its tasks started on the worker. Target
states as Kafka's: STARTED (RUNNING), PAUSED (tasks keep their resources,
stop polling), STOPPED (KIP-875: connector and tasks shut down, task
configs emptied; offsets may then be altered or reset). Restart as KIP-745
(``include_tasks``, ``only_failed``). A connector asks for new task
configs with ``context.request_task_reconfiguration()``: the tasks are
restarted only when the configs changed.

Who calls: rest.py and the ``kafkalite connect`` command. Every public call
takes the herder's lock (a connector's own thread may call
request_task_reconfiguration).
"""
from __future__ import annotations

import logging
import threading
import traceback

from kafkalite.connect import plugins
from kafkalite.connect.config import ConfigDef
from kafkalite.connect.config_providers import reverse_transform
from kafkalite.connect.connector_context import ConnectorContext
from kafkalite.connect.connector_offsets import ConnectorOffsets
from kafkalite.connect.connector_validation import ConfigValidation
from kafkalite.connect.errors import (AlreadyExistsException, BadRequestException,
                                      ConnectException, ForbiddenException, NotFoundException)
from kafkalite.connect.worker import FAILED, PAUSED, RESTARTING, RUNNING, STOPPED, UNASSIGNED

log = logging.getLogger("kafkalite.connect")

def initial_target(initial_state: str | None) -> str:
    """KIP-980's initial_state as a target state."""
    targets = {None: "STARTED", "RUNNING": "STARTED", "PAUSED": "PAUSED", "STOPPED": "STOPPED"}
    if initial_state not in targets:
        raise BadRequestException(f"initial_state {initial_state!r}: use RUNNING, PAUSED or "
                                  f"STOPPED")
    return targets[initial_state]


def restart_plan(status: dict, include_tasks: bool, only_failed: bool) -> tuple:
    """KIP-745: (restart the connector?, [task ids to restart]) from a
    connector's status, which is marked RESTARTING where a restart happens
    (the 202 body)."""
    plan_conn = not only_failed or status["connector"]["state"] == FAILED
    plan_tasks = [t["id"] for t in status["tasks"]
                  if include_tasks and (not only_failed or t["state"] == FAILED)]
    if plan_conn:
        status["connector"]["state"] = RESTARTING
    for i in plan_tasks:
        status["tasks"][i]["state"] = RESTARTING
    return plan_conn, plan_tasks


class WorkerConnector:
    """A connector this herder runs (Kafka's WorkerConnector): its instance,
    state, target state, task configs and tasks."""

    def __init__(self, name, config):
        self.name, self.config = name, config
        self.instance = None
        self.kind = None
        self.state, self.trace = UNASSIGNED, None
        self.target = "STARTED"
        self.task_configs: list[dict] = []
        self.tasks: list = []
        self.generation = -1        # distributed mode: the group generation it started in


# KIP-1017's WorkerStatus messages, as Kafka's worker words them
HEALTHY = "Worker has completed startup and is ready to handle requests."
STARTING = "Worker is still starting up."
UNHEALTHY = "Worker was unable to handle this request and may be unable to handle other requests."


class Herder(ConfigValidation, ConnectorOffsets):
    def __init__(self, worker):
        self.worker = worker
        self._lock = threading.RLock()
        self._connectors: dict[str, WorkerConnector] = {}
        worker.on_task_end = lambda task: None

    # ---- reads ----------------------------------------------------------------------------

    def _get(self, name) -> WorkerConnector:
        c = self._connectors.get(name)
        if c is None:
            raise NotFoundException(f"Connector {name} not found")
        return c

    def connectors(self) -> list[str]:
        with self._lock:
            return sorted(self._connectors)

    def connector_info(self, name) -> dict:
        with self._lock:
            c = self._get(name)
            return {"name": name, "config": dict(c.config),
                    "tasks": [{"connector": name, "task": i} for i in range(len(c.task_configs))],
                    "type": c.kind}

    def connector_config(self, name) -> dict:
        with self._lock:
            return dict(self._get(name).config)

    def task_configs(self, name) -> list[dict]:
        with self._lock:
            c = self._get(name)
            return [{"id": {"connector": name, "task": i}, "config": dict(tc)}
                    for i, tc in enumerate(c.task_configs)]

    def status(self, name) -> dict:
        with self._lock:
            c = self._get(name)
            return {"name": name, "connector": self._state(c.state, c.trace),
                    "tasks": [Herder.task_status(self, name, i) for i in range(len(c.tasks))],
                    "type": c.kind}

    def _state(self, state, trace):
        out = {"state": state, "worker_id": self.worker.worker_id}
        if trace:
            out["trace"] = trace
        return out

    def task_status(self, name, task_id: int) -> dict:
        with self._lock:
            c = self._get(name)
            if not 0 <= task_id < len(c.tasks):
                raise NotFoundException(f"Task {name}-{task_id} not found")
            t = c.tasks[task_id]
            return {"id": task_id, **self._state(t.state, t.trace)}

    def topics(self, name) -> list[str]:
        """KIP-558: the topics the connector's tasks have produced to or
        consumed from since its last reset (403 with tracking off)."""
        self._tracking("Topic tracking is disabled.")
        with self._lock:
            self._get(name)
            return sorted(self.worker.active_topics.get(name, {}))

    def reset_topics(self, name) -> None:
        """KIP-558's reset: the connector's active topics forgotten (a topic
        used again is recorded again)."""
        self._tracking("Topic tracking is disabled.")
        if not self.worker.topic_tracking_reset:
            raise ForbiddenException("Topic tracking reset is disabled.")
        with self._lock:
            self._get(name)
            self.worker.forget_topics(name)

    def _tracking(self, message: str) -> None:
        if not self.worker.topic_tracking:
            raise ForbiddenException(message)

    def plugin_config(self, plugin: str) -> list[dict]:
        """KIP-769: the config definitions of a connector, transformation,
        predicate or converter plugin (its own keys, as Kafka's answer)."""
        from kafkalite.connect.api import Connector
        from kafkalite.connect.converters import CONVERTERS, Converter
        from kafkalite.connect.transforms import (PREDICATES, TRANSFORMS, Predicate,
                                                  Transformation)
        for known, base in ((plugins.CONNECTORS, Connector), (TRANSFORMS, Transformation),
                            (PREDICATES, Predicate), (CONVERTERS, Converter)):
            try:
                cls = plugins.load_class(plugin, known, base)
            except plugins.ClassNotFound:
                continue
            except ConnectException:
                break
            # a connector's own keys (config_def()); a transformation's, predicate's or
            # converter's CONFIG
            defs = cls().config_def() if known is plugins.CONNECTORS else \
                getattr(cls, "CONFIG", ConfigDef())
            return [defs.definition(k) for k in defs.keys]
        raise NotFoundException(f"Unknown plugin {plugin}.")

    def health(self) -> tuple[int, dict]:
        """KIP-1017's ``GET /health``: (HTTP status, Kafka's WorkerStatus). A
        standalone worker has started by the time its REST API serves: healthy."""
        return 200, {"status": "healthy", "message": HEALTHY}

    def cluster_id(self) -> str | None:
        """The Kafka cluster's id (Metadata's cluster_id), asked once; None
        while the brokers cannot be reached."""
        if getattr(self, "_cluster_id", None) is None:
            from kafkalite.connect.clients import AdminClient
            admin = AdminClient(self.worker.client_config)
            try:
                self._cluster_id = admin.list_topics(timeout=10).cluster_id
            except Exception as e:  # noqa: BLE001 -- GET / answers without it, as it can
                log.warning("the Kafka cluster's id could not be read: %s", e)
            finally:
                admin.close()
        return getattr(self, "_cluster_id", None)

    def set_cluster_logger_level(self, namespace: str, level: str) -> None:
        """KIP-976's cluster scope; a standalone worker is the whole cluster."""
        from kafkalite.connect import loggers
        loggers.set_level(namespace, level)

    # ---- lifecycle -------------------------------------------------------------------------

    def put_connector_config(self, name: str, config: dict, allow_replace: bool,
                             initial_state: str | None = None) -> tuple:
        """(created, info). Validates first; an existing connector is
        restarted with the new config, in its target state; a new one starts
        in ``initial_state`` (KIP-980: RUNNING, PAUSED or STOPPED)."""
        config = self._checked(name, config)
        target = initial_target(initial_state)
        with self._lock:
            old = self._connectors.get(name)
            if old is not None and not allow_replace:
                raise AlreadyExistsException(f"Connector {name} already exists")
            if old is not None:
                target = old.target
                self._shutdown(old)
            c = self._connectors[name] = WorkerConnector(name, config)
            c.target = target
            if target != "STOPPED":
                self._start_connector(c)
            else:
                c.state = STOPPED
                c.kind = plugins.connector_class(config["connector.class"]).TYPE
            return old is None, self.connector_info(name)

    def _start_connector(self, c: WorkerConnector) -> None:
        cls = plugins.connector_class(c.config["connector.class"])
        c.kind = cls.TYPE
        c.instance = cls()
        c.instance.initialize(ConnectorContext(self, c.name))
        try:
            self._start_instance(c)
            c.task_configs = self._new_task_configs(c)
        except Exception as e:  # noqa: BLE001 -- a connector failure is its FAILED state
            c.trace, c.state = "".join(traceback.format_exception(e)), FAILED
            c.task_configs = []
            return
        c.state, c.trace = (PAUSED if c.target == "PAUSED" else RUNNING), None
        self._start_tasks(c)

    def _start_instance(self, c: WorkerConnector) -> None:
        """The connector's start, with its config's provider references
        resolved (config_providers.py): the resolved values live only in the
        running instance."""
        c.instance.start(self.worker.config_transformer.transform(c.config))

    def _new_task_configs(self, c: WorkerConnector) -> list[dict]:
        """The connector's task configs, as stored and shown: with the
        references of its config where it passed resolved values through."""
        return reverse_transform(c.config, list(c.instance.task_configs(
            int(c.config.get("tasks.max", 1)))))

    def _start_tasks(self, c: WorkerConnector) -> None:
        task_class = c.instance.task_class()
        c.tasks = [self._start_task(c, i, tc, task_class) for i, tc in enumerate(c.task_configs)]

    def _start_task(self, c, i, tc, task_class):
        return self.worker.start_task(c.kind, c.name, i, c.config, dict(tc), task_class,
                                      paused=c.target == "PAUSED")

    def _stop_tasks(self, c: WorkerConnector) -> None:
        for t in c.tasks:
            t.stop()

    def _shutdown(self, c: WorkerConnector) -> None:
        self._stop_tasks(c)
        c.tasks = []
        if c.instance is not None:
            try:
                c.instance.stop()
            except Exception:       # noqa: BLE001
                log.exception("connector %s: stop()", c.name)
            c.instance = None

    def _connector_failed(self, name, exc) -> None:
        with self._lock:
            c = self._connectors.get(name)
            if c is not None:
                c.trace, c.state = "".join(traceback.format_exception(exc)), FAILED

    def delete_connector(self, name) -> None:
        with self._lock:
            c = self._get(name)
            self._shutdown(c)
            del self._connectors[name]
            # as Kafka's onDeletion: a connector created again under the name starts afresh
            self.worker.forget_topics(name)

    def patch_connector_config(self, name: str, patch: dict) -> dict:
        """KIP-477: the connector's config with ``patch`` merged in (a null
        value removes its key), validated and applied as a PUT is; the new
        connector info."""
        current = self.connector_config(name)
        merged = {k: v for k, v in {**current, **patch}.items() if v is not None}
        _, info = self.put_connector_config(name, merged, True)
        return info

    def reconfigure(self, name) -> None:
        """New task configs from the connector; tasks restarted if they changed."""
        with self._lock:
            c = self._connectors.get(name)
            if c is None or c.instance is None or c.target == "STOPPED":
                return
            try:
                new = self._new_task_configs(c)
            except Exception as e:  # noqa: BLE001
                c.trace, c.state = "".join(traceback.format_exception(e)), FAILED
                return
            if new == c.task_configs:
                return
            self._stop_tasks(c)
            c.task_configs = new
            self._start_tasks(c)

    def put_task_configs(self, name, configs, headers=None, body=b"") -> None:
        """Task configs handed over by another worker: distributed mode only."""
        raise BadRequestException("a standalone worker does not take task configs from other "
                                  "workers")

    def pause(self, name) -> None:
        with self._lock:
            c = self._get(name)
            was = c.target
            c.target = "PAUSED"
            if was == "STOPPED":      # KIP-875: started again, with its tasks paused
                self._start_connector(c)
                return
            if c.state == RUNNING:
                c.state = PAUSED
            for t in c.tasks:
                t.pause()

    def resume(self, name) -> None:
        with self._lock:
            c = self._get(name)
            was = c.target
            c.target = "STARTED"
            if was == "STOPPED":
                self._start_connector(c)
                return
            if c.state == PAUSED:
                c.state = RUNNING
            for t in c.tasks:
                t.resume()

    def stop_connector(self, name) -> None:
        with self._lock:
            c = self._get(name)
            c.target = "STOPPED"
            self._shutdown(c)
            c.task_configs = []
            c.state, c.trace = STOPPED, None

    def restart(self, name, include_tasks=False, only_failed=False) -> dict | None:
        """KIP-745. Returns None for a plain connector restart (REST: 204),
        else the status with RESTARTING where a restart happens (202)."""
        with self._lock:
            c = self._get(name)
            if not include_tasks and not only_failed:
                self._restart_connector(c)
                return None
            status = Herder.status(self, name)
            plan_conn, plan_tasks = restart_plan(status, include_tasks, only_failed)
            if plan_conn and plan_tasks == list(range(len(c.tasks))):
                self._restart_connector(c)
            else:
                if plan_conn:
                    self._restart_connector_only(c)
                for i in plan_tasks:
                    self._restart_task(c, i)
            return status

    def _restart_connector(self, c):
        self._shutdown(c)
        if c.target == "STOPPED":
            return
        self._start_connector(c)

    def _restart_connector_only(self, c):
        if c.instance is not None:
            try:
                c.instance.stop()
            except Exception:       # noqa: BLE001
                log.exception("connector %s: stop()", c.name)
        cls = plugins.connector_class(c.config["connector.class"])
        c.instance = cls()
        c.instance.initialize(ConnectorContext(self, c.name))
        try:
            self._start_instance(c)
            c.state, c.trace = (PAUSED if c.target == "PAUSED" else RUNNING), None
        except Exception as e:  # noqa: BLE001
            c.trace, c.state = "".join(traceback.format_exception(e)), FAILED

    def restart_task(self, name, task_id: int) -> None:
        with self._lock:
            c = self._get(name)
            if not 0 <= task_id < len(c.tasks):
                raise NotFoundException(f"Task {name}-{task_id} not found")
            self._restart_task(c, task_id)

    def _restart_task(self, c, i):
        c.tasks[i].stop()
        c.tasks[i] = self._start_task(c, i, c.task_configs[i], c.instance.task_class())

    def stop(self) -> None:
        with self._lock:
            for c in self._connectors.values():
                self._shutdown(c)
