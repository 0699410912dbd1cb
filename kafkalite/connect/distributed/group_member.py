"""A worker's membership in the Connect group (Kafka's WorkerGroupMember):
JoinGroup, SyncGroup, Heartbeat and LeaveGroup of protocol type
``connect``, with the worker's REST URL and the units it runs as its
member metadata (JSON), the leader's assignment computed by a callback
(the herder's, over assignor.py).

Which process runs it: a ``kafkalite connect distributed`` worker, on its
herder's membership thread (synchronous calls, one thread).

What it may import: kafkalite.client (the native protocol's Metadata and
Connection), kafkalite.protocol (the group APIs' ApiKey), kafka_group.py
(the same requests over Kafka's protocol) and connect/errors.py.
"""
from __future__ import annotations

import json

from kafkalite.connect.errors import ConnectException

# Kafka Connect's name of its cooperative protocol (KIP-415); the metadata is ours (JSON)
PROTOCOL = "compatible"


class _NativeCoordinatorLink:
    """Requests to a group's coordinator over kafkalite's native protocol
    (ZeroMQ); kafka_group.KafkaCoordinatorLink is the same over Kafka's."""

    def __init__(self, client_config: dict, group_id: str, client_id: str):
        import zmq

        from kafkalite.client.connection import parse_bootstrap
        from kafkalite.client.metadata import Metadata
        self.group_id, self.client_id = group_id, client_id
        self._ctx = zmq.Context()
        self._meta = Metadata(parse_bootstrap(client_config["bootstrap.servers"]),
                              client_id, self._ctx)
        self._conn = None

    def _coordinator(self):
        from kafkalite.client.connection import Connection
        from kafkalite.protocol import ApiKey
        if self._conn is None:
            resp = self._meta.admin_request(ApiKey.FIND_COORDINATOR, {
                "key": self.group_id, "key_type": 0, "coordinator_keys": [self.group_id]}, 10)
            node = resp["coordinators"][0] if resp.get("coordinators") else resp
            if node.get("error_code"):
                raise ConnectException(f"FindCoordinator({self.group_id}): error "
                                       f"{node['error_code']}")
            self._conn = Connection(f"tcp://{node['host']}:{node['port']}",
                                    self.client_id, self._ctx)
        return self._conn

    def request(self, api, body, timeout):
        try:
            return self._coordinator().request(api, body, timeout=timeout)
        except Exception:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._meta.close()
        self._ctx.term()


class WorkerGroupMember:
    """A worker's membership in the Connect group (synchronous calls, one
    thread), through its cluster's protocol: kafkalite's native one, or
    Kafka's (``kafkalite.client.protocol=kafka``: kafka_group.py)."""

    def __init__(self, client_config: dict, group_id: str, url: str,
                 session_timeout_ms: int = 10_000, rebalance_timeout_ms: int = 60_000):
        from kafkalite.connect.clients import KAFKA, protocol_of
        self.group_id, self.url = group_id, url
        self.session_timeout_ms = session_timeout_ms
        self.rebalance_timeout_ms = rebalance_timeout_ms
        if protocol_of(client_config) == KAFKA:
            from kafkalite.connect.kafka_group import KafkaCoordinatorLink
            self._link = KafkaCoordinatorLink(client_config, group_id, f"connect-{url}")
        else:
            self._link = _NativeCoordinatorLink(client_config, group_id, f"connect-{url}")
        self.member_id, self.generation = "", -1

    def _request(self, api, body, timeout):
        return self._link.request(api, body, timeout)

    def join(self, assign, metadata=None, on_expelled=None) -> dict:
        """Join and sync; ``assign(members)`` runs on the leader with
        [(member_id, metadata dict)] and returns {member_id: assignment dict}.
        ``metadata()`` adds to this member's metadata (asked at each JoinGroup);
        ``on_expelled()`` runs when the coordinator no longer knows this member
        (its session expired: what it ran may be someone else's by now).
        Returns this member's assignment."""
        from kafkalite import errors
        from kafkalite.protocol import ApiKey
        while True:
            meta = json.dumps({"url": self.url, **(metadata() if metadata else {})}).encode()
            body = self._request(ApiKey.JOIN_GROUP, {
                "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "connect",
                "protocols": [{"name": PROTOCOL, "metadata": meta}], "reason": None},
                self.rebalance_timeout_ms / 1000 + 10)
            code = body["error_code"]
            if code == errors.MemberIdRequiredError.code:
                self.member_id = body["member_id"]
                continue
            if code in (errors.UnknownMemberIdError.code, errors.IllegalGenerationError.code):
                self.member_id = ""
                if on_expelled is not None:
                    on_expelled()
                continue
            if code:
                raise errors.error_for_code(code)(f"JoinGroup {self.group_id}")
            self.member_id, self.generation = body["member_id"], body["generation_id"]
            assignments = []
            if body["leader"] == self.member_id:
                members = [(m["member_id"], json.loads(bytes(m["metadata"])))
                           for m in body["members"]]
                assignments = [{"member_id": m, "assignment": json.dumps(a).encode()}
                               for m, a in assign(members).items()]
            sync = self._request(ApiKey.SYNC_GROUP, {
                "group_id": self.group_id, "generation_id": self.generation,
                "member_id": self.member_id, "group_instance_id": None,
                "protocol_type": "connect", "protocol_name": PROTOCOL,
                "assignments": assignments}, self.rebalance_timeout_ms / 1000 + 10)
            if sync["error_code"] == errors.RebalanceInProgressError.code:
                continue
            if sync["error_code"] in (errors.UnknownMemberIdError.code,
                                      errors.IllegalGenerationError.code):
                self.member_id = ""
                if on_expelled is not None:
                    on_expelled()
                continue
            if sync["error_code"]:
                raise errors.error_for_code(sync["error_code"])(f"SyncGroup {self.group_id}")
            return json.loads(bytes(sync["assignment"]) or b"{}")

    def heartbeat(self) -> int:
        """The Heartbeat's error code: 0 while the generation stands,
        REBALANCE_IN_PROGRESS when the group rebalances, UNKNOWN_MEMBER_ID or
        ILLEGAL_GENERATION when this member was expelled."""
        from kafkalite.protocol import ApiKey
        body = self._request(ApiKey.HEARTBEAT, {
            "group_id": self.group_id, "generation_id": self.generation,
            "member_id": self.member_id, "group_instance_id": None}, 10)
        return body["error_code"]

    def leave(self) -> None:
        from kafkalite.protocol import ApiKey
        if not self.member_id:
            return
        try:
            self._request(ApiKey.LEAVE_GROUP, {
                "group_id": self.group_id, "member_id": self.member_id,
                "members": [{"member_id": self.member_id, "group_instance_id": None,
                             "reason": "worker stopping"}]}, 5)
        except Exception:       # noqa: BLE001 -- the session timeout ends it anyway
            pass
        self.member_id, self.generation = "", -1      # a rejoin is a new member

    def close(self) -> None:
        self._link.close()
