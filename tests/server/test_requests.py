"""The request pipeline (kafkalite/server/network/requests.py) on its three paths.

A supervisor-like node is assembled from the real parts -- a native ZeroMQ
ROUTER, a Kafka TCP listener and a relay server around one dispatcher, and a
worker-like Kafka listener that serves nothing itself and relays to it --
all on real sockets, run by one event-loop thread as a broker process runs
them. The handlers are the test's own: one that fails with a Kafka error,
one that fails with a bug, one that answers later. Each case is sent on the
native path, the Kafka path and the relayed path, and must come back with
the same error code and message (or the same close, where Kafka's protocol
has no way to carry the error).
"""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest
import zmq

from kafkalite import errors
from kafkalite.client.connection import Connection
from kafkalite.protocol import ApiKey, decode_response, encode_request
from kafkalite.protocol import native
from kafkalite.server.network.kafka_listener import KafkaListener
from kafkalite.server.network.native_listener import NativeListener
from kafkalite.server.auth.credentials import CredentialStore, make_credential, write_users
from kafkalite.server.network.relay import RelayClient, RelayServer
from kafkalite.server.network.requests import DEFERRED, RequestDispatcher
from kafkalite.server.auth.security import ListenerSecurity

DEFER_S = 0.2


class Node:
    """The listeners of a supervisor and one worker, in one event loop."""

    def __init__(self, security=None):
        self.zctx = zmq.Context()
        self.poller = zmq.Poller()
        self.timers: list = []            # (due, callable), run by the loop
        self.handled: list = []
        self.principals: list = []
        handlers = {ApiKey.DESCRIBE_CLUSTER: self._failing, ApiKey.LIST_GROUPS: self._deferred}
        dispatcher = RequestDispatcher("the test supervisor", handlers)
        self.native = NativeListener(self.zctx, "127.0.0.1", 0, dispatcher, name="supervisor")
        self.kafka = KafkaListener("127.0.0.1", 0, dispatcher, name="supervisor",
                                   security=security)
        self.relay_server = RelayServer(self.zctx, dispatcher)
        self.relay_client = RelayClient(self.zctx, self.relay_server.endpoint, b"worker-0")
        self.worker_kafka = KafkaListener("127.0.0.1", 0, RequestDispatcher("worker 0", {}),
                                          relay=self.relay_client, name="worker 0",
                                          security=security)
        self.parts = [self.native, self.kafka, self.relay_server, self.relay_client,
                      self.worker_kafka]
        for part in self.parts:
            part.attach(self.poller)
        self._stop = False
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    # handlers (run on the loop thread)

    def _failing(self, ctx, body):
        self.handled.append(ctx.listener)
        self.principals.append(ctx.principal)
        if body["include_cluster_authorized_operations"]:
            raise ValueError("a bug in the handler")
        raise errors.PolicyViolationError("refused by the test policy")

    def _deferred(self, ctx, body):
        self.handled.append(ctx.listener)
        answer = {"throttle_time_ms": 0, "error_code": 0, "groups": [
            {"group_id": f"late-{ctx.header.correlation_id}", "protocol_type": "consumer",
             "group_state": "Empty"}]}
        self.timers.append((time.monotonic() + DEFER_S, lambda: ctx.respond(answer)))
        return DEFERRED

    def _run(self):
        while not self._stop:
            events = dict(self.poller.poll(10))
            for part in self.parts:
                part.on_events(events)
            now = time.monotonic()
            for timer in [t for t in self.timers if t[0] <= now]:
                self.timers.remove(timer)
                timer[1]()

    def close(self):
        self._stop = True
        self.thread.join(5)
        for part in self.parts:
            part.close()
        self.zctx.term()


@pytest.fixture
def node():
    n = Node()
    yield n
    n.close()


def native_frames(node, frames: list, timeout=5.0) -> list:
    sock = node.zctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(f"tcp://127.0.0.1:{node.native.port}")
    try:
        sock.send_multipart(frames)
        assert sock.poll(int(timeout * 1000)), "no answer on the native path"
        return sock.recv_multipart()
    finally:
        sock.close()


def native_error(node, frame: bytes, correlation_id=7):
    """(code, message) of a native request that must fail as a whole."""
    reply = native_frames(node, [frame])
    assert reply[0] == native.ERROR_FRAME, reply
    cid, code, message = native.decode_error(reply[1])
    assert cid == correlation_id
    return code, message


class KafkaClient:
    """A bare Kafka-protocol client on one TCP connection."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        self._cid = 0
        self._sent: dict = {}

    def send(self, api_key, version, body) -> int:
        self._cid += 1
        frame = encode_request(api_key, version, self._cid, "test", body)
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)
        self._sent[self._cid] = (api_key, version)
        return self._cid

    def send_raw(self, frame: bytes) -> None:
        self.sock.sendall(struct.pack(">i", len(frame)) + frame)

    def _read(self, n):
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                return None
            out += chunk
        return out

    def receive(self):
        """(correlation id, body), or None when the broker closed the connection."""
        size = self._read(4)
        if size is None:
            return None
        frame = self._read(struct.unpack(">i", size)[0])
        cid = struct.unpack_from(">i", frame)[0]
        api_key, version = self._sent.pop(cid)
        return decode_response(api_key, version, frame)

    def close(self):
        self.sock.close()


def kafka_call(port, api_key, version, body):
    client = KafkaClient(port)
    try:
        client.send(api_key, version, body)
        got = client.receive()
        return None if got is None else got[1]
    finally:
        client.close()


def kafka_closes(port, frame: bytes) -> bool:
    client = KafkaClient(port)
    try:
        client.send_raw(frame)
        return client.receive() is None
    finally:
        client.close()


def kafka_ports(node):
    return {"kafka": node.kafka.port, "relayed": node.worker_kafka.port}


DESCRIBE_CLUSTER = {"include_cluster_authorized_operations": False, "endpoint_type": 1}


@pytest.mark.parametrize("bug", [False, True], ids=["kafka-error", "exception"])
def test_a_failing_handler_gets_the_same_error_on_every_path(node, bug):
    body = {**DESCRIBE_CLUSTER, "include_cluster_authorized_operations": bug}
    conn = Connection(f"tcp://127.0.0.1:{node.native.port}", "test", node.zctx)
    try:
        with pytest.raises(errors.KafkaError) as native_exc:
            conn.request(ApiKey.DESCRIBE_CLUSTER, body, timeout=5, version=1)
    finally:
        conn.close()
    expected = ((errors.UnknownServerError.code, "ValueError: a bug in the handler") if bug else
                (errors.PolicyViolationError.code, "refused by the test policy"))
    assert (native_exc.value.code, native_exc.value.message) == expected
    for path, port in kafka_ports(node).items():
        answer = kafka_call(port, ApiKey.DESCRIBE_CLUSTER, 1, body)
        assert answer is not None, path
        assert (answer["error_code"], answer["error_message"]) == expected, path
    assert len(node.handled) == 3


def test_an_api_nobody_serves_is_unsupported_on_every_path(node):
    # DescribeLogDirs is in the codec but has no handler anywhere.
    body = {"topics": None}
    code, message = native_error(node, encode_request(ApiKey.DESCRIBE_LOG_DIRS, 4, 7, "t", body))
    assert code == errors.UnsupportedVersionError.code
    assert message == "the test supervisor does not serve DESCRIBE_LOG_DIRS v4"
    for path, port in kafka_ports(node).items():
        answer = kafka_call(port, ApiKey.DESCRIBE_LOG_DIRS, 4, body)
        assert answer is not None and answer["error_code"] == code, path
    # Below v3 DescribeLogDirs has no top-level error code: Kafka closes.
    for path, port in kafka_ports(node).items():
        frame = encode_request(ApiKey.DESCRIBE_LOG_DIRS, 1, 1, "test", body)
        assert kafka_closes(port, frame), path


def test_an_unsupported_version_and_an_unknown_api(node):
    # DescribeCluster v1 is the newest kafkalite (and Kafka 3.7) knows.
    code, message = native_error(node, struct.pack(">hhih", ApiKey.DESCRIBE_CLUSTER, 9, 7, -1))
    assert code == errors.UnsupportedVersionError.code
    assert message == "DescribeClusterRequest v9 is not supported (kafkalite implements v0-2)"
    code, message = native_error(node, struct.pack(">hhih", 999, 0, 7, -1))
    assert code == errors.UnsupportedVersionError.code and message == "unknown API key 999"
    # On Kafka's protocol neither can be answered in the API's schema: the
    # connection is closed (both directly and when a worker relayed it).
    for path, port in kafka_ports(node).items():
        assert kafka_closes(port, struct.pack(">hhi", ApiKey.DESCRIBE_CLUSTER, 9, 5)
                            + b"\x00\x04test\x00\x00\x00"), path
        assert kafka_closes(port, struct.pack(">hhih", 999, 0, 5, -1)), path
    assert node.handled == []


def test_malformed_native_request_with_a_readable_header_is_answered(node):
    # A header the listener can read, then a body cut short: the client gets
    # an error for its correlation id instead of waiting out its timeout.
    frame = encode_request(ApiKey.LIST_GROUPS, 4, 7, "t", {"states_filter": []})
    code, message = native_error(node, frame[:-2])
    assert code == errors.InvalidRequestError.code
    assert message.startswith("ListGroupsRequest v4: states_filter")


def test_deferred_answers_keep_request_order(node):
    conn = Connection(f"tcp://127.0.0.1:{node.native.port}", "test", node.zctx)
    try:
        start = time.monotonic()
        answer = conn.request(ApiKey.LIST_GROUPS, {"states_filter": []},
                              timeout=5, version=4)
        assert time.monotonic() - start >= DEFER_S * 0.9
        assert answer["groups"][0]["group_id"].startswith("late-")
    finally:
        conn.close()
    for path, port in kafka_ports(node).items():
        client = KafkaClient(port)
        try:
            # pipelined: the deferred request, then one answered at once;
            # the answers must come back in request order
            first = client.send(ApiKey.LIST_GROUPS, 4, {"states_filter": []})
            second = client.send(ApiKey.API_VERSIONS, 3, {"client_software_name": "t",
                                                           "client_software_version": "1"})
            cid, body = client.receive()
            assert cid == first and body["groups"][0]["group_id"] == f"late-{first}", path
            cid, body = client.receive()
            assert cid == second and body["error_code"] == 0, path
        finally:
            client.close()


def test_api_versions_advertise_what_the_path_serves(node):
    conn = Connection(f"tcp://127.0.0.1:{node.native.port}", "test", node.zctx)
    try:
        keys = {k["api_key"] for k in conn.request(ApiKey.API_VERSIONS, {
            "client_software_name": "t", "client_software_version": "1"}, 5)["api_keys"]}
    finally:
        conn.close()
    assert keys == {ApiKey.API_VERSIONS, ApiKey.DESCRIBE_CLUSTER, ApiKey.LIST_GROUPS}
    # the worker relays, but advertises only what its own dispatcher knows
    answer = kafka_call(node.worker_kafka.port, ApiKey.API_VERSIONS, 3,
                        {"client_software_name": "t", "client_software_version": "1"})
    assert {k["api_key"] for k in answer["api_keys"]} == {ApiKey.API_VERSIONS}


@pytest.fixture
def sasl_node(tmp_path):
    path = str(tmp_path / "users.json")
    write_users(path, {"alice": {"PLAIN": make_credential("PLAIN", "alice-pw")}})
    n = Node(ListenerSecurity("SASL_PLAINTEXT", None, ("PLAIN",), CredentialStore(path)))
    yield n
    n.close()


def test_the_authenticated_principal_reaches_handlers_directly_and_relayed(sasl_node):
    """What ACLs will check: the handler sees who logged in on the
    connection, also when a worker relayed the request to the supervisor."""
    for path, port in kafka_ports(sasl_node).items():
        client = KafkaClient(port)
        try:
            client.send(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})
            assert client.receive()[1]["error_code"] == 0, path
            client.send(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": b"\0alice\0alice-pw"})
            assert client.receive()[1]["error_code"] == 0, path
            client.send(ApiKey.DESCRIBE_CLUSTER, 1, DESCRIBE_CLUSTER)
            assert client.receive()[1]["error_code"] == errors.PolicyViolationError.code, path
        finally:
            client.close()
    assert sasl_node.principals == ["User:alice", "User:alice"]
