"""The Connect group's coordinator over Kafka's protocol (TCP), for a
worker whose cluster is reached that way (``kafkalite.client.protocol=kafka``,
clients.py).

confluent-kafka's clients cannot join a group of protocol type
``connect``, so WorkerGroupMember (distributed/group_member.py) sends its
JoinGroup, SyncGroup, Heartbeat and LeaveGroup through ``KafkaCoordinatorLink``,
over a client/blocking_kafka_client.BlockingKafkaClient to the group's
coordinator (TLS and SASL as the worker's ``security.protocol``, ``ssl.*`` and ``sasl.*``
say; each request in the highest version both sides know; a settings
problem or a refused login is a KafkaError naming the broker, not a silent
fallback).

FindCoordinator, asked of the bootstrap brokers in turn, names the
coordinator; a response NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE or
COORDINATOR_LOAD_IN_PROGRESS, or a connection that broke, makes the link
find the coordinator again and send the request again, until the
request's timeout.

Who calls: WorkerGroupMember, from the herder's membership thread (one
thread: no locking).
"""
from __future__ import annotations

import time

from kafkalite.client.blocking_kafka_client import BlockingKafkaClient, parse_servers
from kafkalite.protocol import ApiKey

# error codes that mean: ask FindCoordinator again
_COORDINATOR_MOVED = (14, 15, 16)     # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR
_RETRY_BACKOFF_S = 0.2


class KafkaCoordinatorLink:
    """Requests to a group's coordinator over Kafka's protocol:
    ``request(api, body, timeout)`` -> the response body (the version chosen
    per connection), as the native link's."""

    def __init__(self, client_config: dict, group_id: str, client_id: str):
        self.config, self.group_id, self.client_id = client_config, group_id, client_id
        self.servers = parse_servers(client_config["bootstrap.servers"])
        self._conn: BlockingKafkaClient | None = None

    def _find_coordinator(self, timeout: float) -> BlockingKafkaClient:
        errors = []
        for host, port in self.servers:
            try:
                conn = BlockingKafkaClient(host, port, self.config, self.client_id,
                                           min(timeout, 10))
            except (OSError, ConnectionError) as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            try:
                v = conn.version(ApiKey.FIND_COORDINATOR)
                resp = conn.send(ApiKey.FIND_COORDINATOR, v, {
                    "key": self.group_id, "key_type": 0,
                    "coordinator_keys": [self.group_id]}, min(timeout, 10))
            except (OSError, ConnectionError) as e:
                errors.append(f"{host}:{port}: {e}")
                continue
            finally:
                conn.close()
            node = resp["coordinators"][0] if v >= 4 else resp
            if node["error_code"]:
                errors.append(f"{host}:{port}: FindCoordinator error {node['error_code']}")
                continue
            return BlockingKafkaClient(node["host"], node["port"], self.config, self.client_id,
                                       min(timeout, 10))
        raise ConnectionError(f"no coordinator found for group {self.group_id}: "
                              f"{'; '.join(errors)}")

    def request(self, api: ApiKey, body: dict, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if self._conn is None:
                    self._conn = self._find_coordinator(max(1.0, deadline - time.monotonic()))
                resp = self._conn.request(api, body, max(1.0, deadline - time.monotonic()))
            except (OSError, ConnectionError) as e:
                self.drop()
                if time.monotonic() + _RETRY_BACKOFF_S >= deadline:
                    raise ConnectionError(f"{api.name} to the coordinator of "
                                          f"{self.group_id}: {e}") from None
                time.sleep(_RETRY_BACKOFF_S)
                continue
            if resp.get("error_code") in _COORDINATOR_MOVED and \
                    time.monotonic() + _RETRY_BACKOFF_S < deadline:
                self.drop()
                time.sleep(_RETRY_BACKOFF_S)
                continue
            return resp

    def drop(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def close(self) -> None:
        self.drop()
