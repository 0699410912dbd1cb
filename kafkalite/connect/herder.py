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

import json
import logging
import threading
import traceback

from kafkalite.connect import plugins
from kafkalite.connect.config import (CLASS, INT, LIST, STRING, ConfigDef, ConfigException,
                                      at_least)
from kafkalite.connect.config_providers import reverse_transform
from kafkalite.connect.creator import admin_config
from kafkalite.connect.errors import (AlreadyExistsException, BadRequestException,
                                      ConnectException, ForbiddenException, NotFoundException)
from kafkalite.connect.tolerance import CONFIG as ERRORS_CONFIG
from kafkalite.connect.transforms import TransformationChain
from kafkalite.connect.worker import FAILED, PAUSED, RESTARTING, RUNNING, STOPPED, UNASSIGNED
from kafkalite.errors import GroupIdNotFoundError, NonEmptyGroupError, UnknownMemberIdError

log = logging.getLogger("kafkalite.connect")

COMMON = (ConfigDef()
          .define("name", STRING, doc="the connector's unique name", group="Common")
          .define("connector.class", CLASS, doc="Kafka's class name or a Python path",
                  group="Common")
          .define("tasks.max", INT, 1, at_least(1), group="Common")
          .define("key.converter", CLASS, None, group="Common")
          .define("value.converter", CLASS, None, group="Common")
          .define("header.converter", CLASS, None, group="Common")
          .define("transforms", LIST, [], group="Transforms")
          .define("predicates", LIST, [], group="Predicates"))
SINK = (ConfigDef().define("topics", LIST, [], group="Common")
        .define("topics.regex", STRING, "", group="Common"))


def initial_target(initial_state: str | None) -> str:
    """KIP-980's initial_state as a target state."""
    targets = {None: "STARTED", "RUNNING": "STARTED", "PAUSED": "PAUSED", "STOPPED": "STOPPED"}
    if initial_state not in targets:
        raise BadRequestException(f"initial_state {initial_state!r}: use RUNNING, PAUSED or "
                                  f"STOPPED")
    return targets[initial_state]


# KIP-875's answers to an offsets change, as Kafka's: the connector's
# alter_offsets hook said it has handled what it keeps itself, or did not
ALTERED = "The offsets for this connector have been altered successfully"
RESET = "The offsets for this connector have been reset successfully"
_FRAMEWORK_ONLY = ("The Connect framework-managed offsets for this connector have been {0} "
                   "successfully. However, if this connector manages offsets externally, "
                   "they will need to be manually {0} in the system that the connector uses.")


def offsets_answer(reset: bool, handled: bool) -> str:
    """The message of a successful PATCH (``reset`` False) or DELETE /offsets."""
    if handled:
        return RESET if reset else ALTERED
    return _FRAMEWORK_ONLY.format("reset" if reset else "altered")


def ask_connector(name: str, config: dict, offsets) -> bool:
    """KIP-875: the connector's own ``alter_offsets`` hook, asked before the
    framework writes anything, on a new instance of its class (the
    connector is stopped; Kafka makes one too). ``offsets``: a source
    connector's [(partition, offset or None)], a sink connector's
    {TopicPartition: offset or None}; None is a reset. Its answer picks the
    message (offsets_answer); an exception from it refuses the change (500,
    as Kafka's ConnectException), and nothing is written."""
    try:
        return bool(plugins.connector_class(config["connector.class"])().alter_offsets(
            dict(config), offsets))
    except Exception as e:  # noqa: BLE001 -- a plugin's refusal, whatever its type
        raise ConnectException(f"Failed to modify offsets for connector {name}: the connector "
                               f"refused: {e}") from e


def sink_offsets_of(offsets: list[dict]) -> dict:
    """{TopicPartition: offset} of a PATCH body's sink connector offsets
    (400 for any other shape, or a null offset: one partition alone cannot
    be reset)."""
    from kafkalite.client import TopicPartition
    out = {}
    for o in offsets:
        p = o["partition"]
        try:
            topic, part = p["kafka_topic"], int(p["kafka_partition"])
            off = o.get("offset")
            if off is None:
                raise BadRequestException("resetting one sink partition (a null offset) is "
                                          "not supported; DELETE /offsets resets them all")
            out[TopicPartition(topic, part)] = int(off["kafka_offset"])
        except (KeyError, TypeError, ValueError):
            raise BadRequestException(
                "sink connector offsets are {\"partition\": {\"kafka_topic\", "
                "\"kafka_partition\"}, \"offset\": {\"kafka_offset\"}}: " + json.dumps(o)
            ) from None
    return out


def not_stopped(name: str) -> BadRequestException:
    """Kafka's 400 for an offsets change of a connector that is not STOPPED
    (or, in distributed mode, still has task configs)."""
    return BadRequestException(
        "Connectors must be in the STOPPED state before their offsets can be modified. "
        "This can be done for the specified connector by issuing a 'PUT' request to "
        f"the '/connectors/{name}/stop' endpoint")


def tasks_not_stopped(what: str, name: str) -> BadRequestException:
    """Kafka's 400 when a sink connector's consumer group still has members
    (its tasks are stopping, or it was resumed meanwhile): safe to retry."""
    return BadRequestException(
        f"Failed to {what} consumer group offsets for connector {name} either because its "
        "tasks haven't stopped completely yet or the connector was resumed before the request "
        f"to {what} its offsets could be successfully completed. If the connector is in a "
        "stopped state, this operation can be safely retried")


def check_offsets(offsets) -> None:
    """The shape of a PATCH /offsets body's ``offsets`` (400 otherwise)."""
    if not isinstance(offsets, list) or not offsets:
        raise BadRequestException("The offsets to be altered must be a non-empty list "
                                  "of {\"partition\": ..., \"offset\": ...}")
    for o in offsets:
        if not isinstance(o, dict) or not isinstance(o.get("partition"), dict):
            raise BadRequestException(f"Each offset needs a \"partition\" object: {o!r}")


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


class BadConfig(BadRequestException):
    """A connector config with errors; ``errors`` is {key: [messages]}."""

    def __init__(self, errors: dict, plugin: str | None = None):
        n = sum(len(v) for v in errors.values())
        lines = "\n".join(m for v in errors.values() for m in v)
        super().__init__(
            f"Connector configuration is invalid and contains the following {n} error(s):\n"
            f"{lines}\nYou can also find the above list of errors at the endpoint "
            f"`/connector-plugins/{{connectorType}}/config/validate`")
        self.errors = errors


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


class ConnectorContext:
    def __init__(self, herder, name):
        self._herder, self._name = herder, name
        # the files the connector may name (file_access.py)
        self.file_access = herder.worker.file_access

    def request_task_reconfiguration(self) -> None:
        threading.Thread(target=self._herder.reconfigure, args=(self._name,), daemon=True).start()

    def raise_error(self, exc: Exception) -> None:
        self._herder._connector_failed(self._name, exc)


# KIP-1017's WorkerStatus messages, as Kafka's worker words them
HEALTHY = "Worker has completed startup and is ready to handle requests."
STARTING = "Worker is still starting up."
UNHEALTHY = "Worker was unable to handle this request and may be unable to handle other requests."


class Herder:
    def __init__(self, worker):
        self.worker = worker
        self._lock = threading.RLock()
        self._connectors: dict[str, WorkerConnector] = {}
        worker.on_task_end = lambda task: None

    # ---- validation -----------------------------------------------------------------------

    def validate(self, config: dict) -> dict:
        """Kafka's ConfigInfos: {name, error_count, groups, configs: [{definition, value}]}."""
        config = {k: str(v) if not isinstance(v, str) else v for k, v in config.items()}
        cls_name = config.get("connector.class")
        if not cls_name:
            raise BadRequestException("Connector config "
                                      f"{json.dumps(config)} contains no connector type")
        try:
            cls = plugins.connector_class(cls_name)
        except ConnectException as e:
            raise BadRequestException(str(e)) from None
        inst = cls()
        # a connector's validate may ask its context (which files this worker lets it name)
        inst.initialize(ConnectorContext(self, config.get("name")))
        defs = COMMON.merge(ERRORS_CONFIG)
        if getattr(cls, "TYPE", None) == "sink":
            defs = defs.merge(SINK)
        values = defs.validate(config)
        own = inst.config_def()
        try:
            values += inst.validate(config)
        except Exception as e:  # noqa: BLE001 -- a plugin's validate failing is a config error
            values.append({"name": "connector.class", "value": cls_name, "errors": [str(e)],
                           "recommended_values": [], "visible": True})
        by_name = {v["name"]: v for v in values}
        self._framework_checks(cls, config, by_name)
        configs = []
        for v in by_name.values():
            d = (own if v["name"] in own.keys else defs).definition(v["name"]) \
                if v["name"] in own.keys or v["name"] in defs.keys else \
                {"name": v["name"], "type": "STRING", "required": False, "default_value": None,
                 "importance": "MEDIUM", "documentation": "", "group": None, "width": "NONE",
                 "display_name": v["name"], "dependents": [], "order": -1}
            configs.append({"definition": d, "value": v})
        groups = []
        for c in configs:
            g = c["definition"]["group"]
            if g and g not in groups:
                groups.append(g)
        return {"name": cls.__name__ if cls_name not in plugins.CONNECTORS else cls_name,
                "error_count": sum(len(c["value"]["errors"]) for c in configs),
                "groups": groups, "configs": configs}

    @staticmethod
    def _framework_checks(cls, config, by_name):
        def add(name, msg):
            v = by_name.setdefault(name, {"name": name, "value": config.get(name), "errors": [],
                                          "recommended_values": [], "visible": True})
            v["errors"].append(msg)
        try:
            TransformationChain(config)
        except ConfigException as e:
            add(e.name, str(e))
        except ConnectException as e:
            add("transforms", str(e))
        if getattr(cls, "TYPE", None) == "sink":
            has_topics = bool(config.get("topics", "").strip())
            has_regex = bool(config.get("topics.regex", "").strip())
            if has_topics == has_regex:
                add("topics", "Must configure one and only one of topics or topics.regex")
            dlq = config.get("errors.deadletterqueue.topic.name", "").strip()
            if dlq and dlq in [t.strip() for t in config.get("topics", "").split(",")]:
                add("errors.deadletterqueue.topic.name",
                    f"The DLQ topic '{dlq}' may not be included in the list of topics "
                    f"('topics=...') consumed by the connector")
        from kafkalite.connect.converters import CONVERTERS, Converter
        for key in ("key.converter", "value.converter"):
            if config.get(key):
                try:
                    plugins.load_class(config[key], CONVERTERS, Converter)
                except ConnectException as e:
                    add(key, f"Invalid value {config[key]} for configuration {key}: {e}")

    def _checked(self, name: str, config: dict) -> dict:
        """The config with string values and its name, validated (BadConfig)."""
        config = {k: str(v) if not isinstance(v, str) else v for k, v in config.items()}
        config.setdefault("name", name)
        if config["name"] != name:
            raise BadRequestException("Connector name configuration (" + config["name"] +
                                      ") doesn't match connector name in the URL (" + name + ")")
        self._check(name, config)
        return config

    def _check(self, name: str, config: dict) -> None:
        info = self.validate(config)
        errors = {c["value"]["name"]: c["value"]["errors"] for c in info["configs"]
                  if c["value"]["errors"]}
        if errors:
            raise BadConfig(errors)

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

    # ---- offsets (KIP-875) -----------------------------------------------------------------

    def _sink_group(self, name):
        return f"connect-{name}"

    def _connector_config_or_none(self, name) -> dict | None:
        c = self._connectors.get(name)
        return None if c is None else c.config

    def _admin_config(self, name) -> dict:
        """The admin client of a connector's offsets endpoints: the worker's
        settings with the connector's ``admin.override.*``, so it acts as the
        connector's creator (creator.py), as Kafka's does."""
        return admin_config(self.worker.client_config,
                            self._connector_config_or_none(name) or {})

    def offsets(self, name) -> dict:
        with self._lock:
            c = self._get(name)
            if c.kind == "source":
                return self._source_offsets(name)
        return self._sink_offsets(name)

    def _source_offsets(self, name) -> dict:
        return {"offsets": [{"partition": p, "offset": o}
                            for p, o in self.worker.offsets.offsets_of(name)]}

    def _sink_offsets(self, name) -> dict:
        from kafkalite.connect.clients import AdminClient
        admin = AdminClient(self._admin_config(name))
        try:
            tps = admin.list_consumer_group_offsets(self._sink_group(name)).result()
        except Exception:   # noqa: BLE001 -- no group yet: no offsets
            tps = []
        finally:
            admin.close()
        return {"offsets": [{"partition": {"kafka_topic": tp.topic,
                                           "kafka_partition": tp.partition},
                             "offset": {"kafka_offset": tp.offset}}
                            for tp in tps if tp.offset >= 0]}

    def _require_stopped(self, c):
        if c.target != "STOPPED":
            raise not_stopped(c.name)

    def alter_offsets(self, name, offsets: list[dict]) -> str:
        with self._lock:
            c = self._get(name)
            self._require_stopped(c)
            check_offsets(offsets)
            if c.kind == "source":
                pairs = [(o["partition"], o.get("offset")) for o in offsets]
                handled = ask_connector(name, c.config, pairs)
                self.worker.offsets.put(name, pairs)
            else:
                wanted = sink_offsets_of(offsets)
                handled = ask_connector(name, c.config, wanted)
                self._alter_sink(name, wanted)
            return offsets_answer(False, handled)

    def _alter_sink(self, name, wanted: dict):
        """``wanted``: {TopicPartition: offset} (sink_offsets_of)."""
        from kafkalite.client import TopicPartition
        from kafkalite.connect.clients import AdminClient
        tps = [TopicPartition(tp.topic, tp.partition, off) for tp, off in wanted.items()]
        admin = AdminClient(self._admin_config(name))
        try:
            admin.alter_consumer_group_offsets(self._sink_group(name), tps).result()
        except (NonEmptyGroupError, UnknownMemberIdError):
            raise tasks_not_stopped("alter", name) from None
        finally:
            admin.close()

    def _reset_sink(self, name):
        """Kafka's reset of a sink connector's offsets: its consumer group deleted."""
        from kafkalite.connect.clients import AdminClient
        admin = AdminClient(self._admin_config(name))
        try:
            admin.delete_consumer_groups([self._sink_group(name)])[
                self._sink_group(name)].result()
        except GroupIdNotFoundError:
            pass
        except (NonEmptyGroupError, UnknownMemberIdError):
            raise tasks_not_stopped("reset", name) from None
        finally:
            admin.close()

    def reset_offsets(self, name) -> str:
        with self._lock:
            c = self._get(name)
            self._require_stopped(c)
            if c.kind == "source":
                pairs = [(p, None) for p, _ in self.worker.offsets.offsets_of(name)]
                handled = ask_connector(name, c.config, pairs)
                self.worker.offsets.put(name, pairs)
            else:
                handled = ask_connector(name, c.config, self._sink_reset_map(name))
                self._reset_sink(name)
            return offsets_answer(True, handled)

    def _sink_reset_map(self, name) -> dict:
        """{TopicPartition: None} for each partition the sink's group has an
        offset for: what a reset hands the connector's hook."""
        from kafkalite.client import TopicPartition
        return {TopicPartition(o["partition"]["kafka_topic"], o["partition"]["kafka_partition"]):
                None for o in self._sink_offsets(name)["offsets"]}
