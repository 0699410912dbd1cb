"""The REST API's reads in a Connect cluster, answered on any worker from
its views of the internal topics (configs, task configs, statuses), and
the topics the status topic tracks: KIP-558 active topics, KIP-976
cluster log levels.

A part of distributed_herder.py's ``DistributedHerder`` (which inherits
it, and holds its state and locks): the process, threads and imports are
that module's.
"""
from __future__ import annotations

from kafkalite.connect.distributed.internal_topics import (LOGGER_CLUSTER_PREFIX,
                                                           TOPIC_STATUS_PREFIX,
                                                           TOPIC_STATUS_SEPARATOR)
from kafkalite.connect.errors import NotFoundException


class ConnectorViews:
    """The reads from the views, the DistributedHerder's side (this module's docstring)."""

    def _config(self, name):
        with self.internal._lock:
            config = self.internal.configs.get(name)
        if config is None:
            raise NotFoundException(f"Connector {name} not found")
        return config

    def _connector_config_or_none(self, name):
        with self.internal._lock:
            return self.internal.configs.get(name)

    def connectors(self):
        with self.internal._lock:
            return sorted(self.internal.configs)

    def connector_config(self, name):
        return dict(self._config(name))

    def _status_of(self, name):
        with self.internal._lock:
            return self.internal.status.get(f"status-connector-{name}")

    def _task_configs(self, name) -> list[dict]:
        with self.internal._lock:
            return list(self.internal.task_configs.get(name, []))

    def connector_info(self, name):
        config = self._config(name)
        st = self._status_of(name) or {}
        from kafkalite.connect import plugins
        return {"name": name, "config": dict(config),
                "tasks": [{"connector": name, "task": i}
                          for i in range(len(self._task_configs(name)))],
                "type": st.get("type") or plugins.connector_class(config["connector.class"]).TYPE}

    def task_configs(self, name):
        self._config(name)
        return [{"id": {"connector": name, "task": i}, "config": dict(tc)}
                for i, tc in enumerate(self._task_configs(name))]

    def status(self, name):
        info = self.connector_info(name)
        st = self._status_of(name) or {"state": "UNASSIGNED", "worker_id": None}
        tasks = [self.task_status(name, t["task"]) for t in info["tasks"]]
        conn = {"state": st["state"], "worker_id": st["worker_id"]}
        if st.get("trace"):
            conn["trace"] = st["trace"]
        return {"name": name, "connector": conn, "tasks": tasks, "type": info["type"]}

    def task_status(self, name, task_id):
        self._config(name)
        if not 0 <= task_id < len(self._task_configs(name)):
            raise NotFoundException(f"Task {name}-{task_id} not found")
        with self.internal._lock:
            st = self.internal.status.get(f"status-task-{name}-{task_id}")
        if st is None:      # configured, not started anywhere yet
            return {"id": task_id, "state": "UNASSIGNED", "worker_id": None}
        out = {"id": task_id, "state": st["state"], "worker_id": st["worker_id"]}
        if st.get("trace"):
            out["trace"] = st["trace"]
        return out

    def _write_topic_status(self, status: dict) -> None:
        key = f"{TOPIC_STATUS_PREFIX}{status['name']}{TOPIC_STATUS_SEPARATOR}" \
              f"{status['connector']}"
        self.internal.write(self.internal.status_topic, key, {"topic": status})

    def _topic_keys(self, name) -> list[str]:
        with self.internal._lock:
            return [k for k, v in self.internal.status.items()
                    if k.startswith(TOPIC_STATUS_PREFIX) and v["topic"]["connector"] == name]

    def _write_topic_tombstones(self, name) -> None:
        keys = self._topic_keys(name)
        if keys:
            self.internal.write_many(self.internal.status_topic, [(k, None) for k in keys])

    def topics(self, name):
        self._tracking("Topic tracking is disabled.")
        self._config(name)
        with self.internal._lock:
            return sorted(self.internal.status[k]["topic"]["name"] for k in self._topic_keys(name))

    def reset_topics(self, name):
        self._tracking("Topic tracking is disabled.")
        if not self.worker.topic_tracking_reset:
            from kafkalite.connect.errors import ForbiddenException
            raise ForbiddenException("Topic tracking reset is disabled.")
        self._config(name)
        self._write_topic_tombstones(name)

    def set_cluster_logger_level(self, namespace, level):
        # any worker writes it, as Kafka's putLoggerLevel; each applies it as it reads it
        self.internal.write(self.internal.config_topic, LOGGER_CLUSTER_PREFIX + namespace,
                            {"level": str(level).upper()})
