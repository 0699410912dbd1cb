"""The context a connector instance is given (Kafka's ConnectorContext):
how it asks its herder for new task configs or reports a failure, and
the files this worker lets it name.

Made by the herders (herder.py) for a connector they start and for the
instance a config's validation asks (connector_validation.py); runs on
the herder's and the connector's threads.
"""
from __future__ import annotations

import threading


class ConnectorContext:
    def __init__(self, herder, name):
        self._herder, self._name = herder, name
        # the files the connector may name (file_access.py)
        self.file_access = herder.worker.file_access

    def request_task_reconfiguration(self) -> None:
        threading.Thread(target=self._herder.reconfigure, args=(self._name,), daemon=True).start()

    def raise_error(self, exc: Exception) -> None:
        self._herder._connector_failed(self._name, exc)
