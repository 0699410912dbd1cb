"""The node's own channels -- the supervisor's control channel and relay --
against a local process that is not one of the server's (issue 40).

Before, any local user could connect a ZeroMQ DEALER to either: say "hello"
on the control channel as a worker, take over a worker's identity on the
relay (ROUTER_HANDOVER), and have a Kafka request relayed and executed as
whatever principal its header named. Now both are CURVE servers open to
one key pair only: the one from ``native_curve_secret_key_file``, else one
the supervisor makes for the run and hands its workers through a pipe
(processes.spawn_worker), never on a command line. A stranger's handshake
fails, plain or with keys of its own, so nothing it sends reaches the
supervisor: no message is counted as dropped, no relayed request runs.

The session's shared server: an attack that got through would only create
a topic of this test's name.
"""
from __future__ import annotations

import time

import zmq
import zmq.utils.monitor

from harness import listening_ports, wait_until
from kafkalite.client import AdminClient
from kafkalite.protocol import ApiKey, curve, encode_request
from kafkalite.server.node import processes
from kafkalite.server.network.relay import encode_relay_request

# How long a stranger's socket is watched for a handshake: libzmq reports
# the failure (or, before, the success) within milliseconds on loopback.
HANDSHAKE_WATCH_S = 10.0
SUCCEEDED = zmq.EVENT_HANDSHAKE_SUCCEEDED
# a refused handshake: a CURVE server meeting a NULL client (mechanism
# mismatch) or keys it cannot decrypt, or the peer closing the connection
FAILED = (zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH
          | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_DISCONNECTED)


def control_endpoint(srv) -> str:
    with open(f"/proc/{srv.worker_pids()[0]}/cmdline") as f:
        argv = f.read().split("\0")
    return argv[argv.index("--control") + 1]


def stranger(ctx: zmq.Context, endpoint: str, with_keys: bool, identity: bytes | None = None):
    """A DEALER to ``endpoint``, plain or with a key pair of its own (and a
    server key it can only guess), and its monitor socket."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if identity is not None:
        s.setsockopt(zmq.IDENTITY, identity)    # a worker's: the relay's ROUTER_HANDOVER
    if with_keys:
        public, secret = zmq.curve_keypair()
        curve.secure_client(s, zmq.curve_keypair()[0], public, secret)
    monitor = s.get_monitor_socket(SUCCEEDED | FAILED)
    s.connect(endpoint)
    return s, monitor


def handshake_outcome(monitor) -> str:
    """"succeeded", "failed" or "nothing", whichever the monitor says first."""
    deadline = time.monotonic() + HANDSHAKE_WATCH_S
    while time.monotonic() < deadline:
        if not monitor.poll(100):
            continue
        event = zmq.utils.monitor.recv_monitor_message(monitor)["event"]
        if event == SUCCEEDED:
            return "succeeded"
        if event & FAILED:
            return "failed"
    return "nothing"


def test_the_node_zap_domain_is_the_one_the_control_channel_names():
    # processes.py writes it out so as not to import protocol/curve.py early
    assert processes.NODE_ZAP_DOMAIN == curve.NODE_ZAP_DOMAIN


def test_a_stranger_cannot_speak_on_the_control_channel(server, topic_name):
    endpoint = control_endpoint(server)
    pids = server.worker_pids()
    ctx = zmq.Context()
    try:
        for with_keys in (False, True):
            s, monitor = stranger(ctx, endpoint, with_keys)
            # a worker's hello (the port a client would be sent to) and the
            # message that once stopped the node
            s.send_multipart([b'{"type": "hello", "worker": 0, "port": 9, "pid": 1}'])
            s.send_multipart([b"hello", b"world"])
            assert handshake_outcome(monitor) == "failed", f"keys: {with_keys}"
            s.disable_monitor()
            monitor.close()
            s.close()
    finally:
        ctx.destroy(linger=0)
    assert server.proc.poll() is None and server.worker_pids() == pids
    assert "dropped a malformed control message" not in server.output()


def test_a_stranger_cannot_have_a_request_relayed(server, topic_name):
    """A CreateTopics, as the super user a header may name, sent to every
    port the supervisor listens on but its public ones (the relay is among
    them, on a port of its own); none completes a handshake, and the topic
    does not exist."""
    public = {int(server.bootstrap.rsplit(":", 1)[1])}
    public |= {int(b.rsplit(":", 1)[1]) for b in server.kafka_bootstrap.split(",")}
    # HTTP: waits for a request line
    for http in ("metrics", "schema_registry", "rest_proxy", "iceberg_rest"):
        if server.info.get(http):
            public.add(int(server.info[http].split(":")[2].split("/")[0]))
    ports = listening_ports(server.proc.pid) - public
    assert ports, "the supervisor's own ports"
    request = encode_request(ApiKey.CREATE_TOPICS, 4, 7, "mallory", {
        "topics": [{"name": topic_name, "num_partitions": 1, "replication_factor": 1,
                    "assignments": [], "configs": []}], "timeout_ms": 5000})
    ctx = zmq.Context()
    outcomes = {}
    try:
        for port in sorted(ports):
            for with_keys in (False, True):
                s, monitor = stranger(ctx, f"tcp://127.0.0.1:{port}", with_keys, b"worker-0")
                s.send_multipart([encode_relay_request(1, "127.0.0.1:1", "User:admin"), request])
                outcomes[port, with_keys] = handshake_outcome(monitor)
                s.disable_monitor()
                monitor.close()
                s.close()
    finally:
        ctx.destroy(linger=0)
    assert "succeeded" not in outcomes.values(), outcomes
    admin = AdminClient(server.config())
    try:
        # the relay answers within milliseconds; a created topic shows at once
        assert topic_name not in admin.list_topics(timeout=10).topics
    finally:
        admin.close()
    assert server.proc.poll() is None
    wait_until(lambda: len(server.worker_pids()) == 2, 10, "both workers")


def test_a_secured_cluster_without_a_key_pair_does_not_start(tmp_path):
    """A single node makes its channels' key pair for the run; a cluster's
    nodes cannot share one made so, and without a key file their control
    channel and relay would be open. With security on that is refused
    before anything starts, in one line naming the fix (the PostgreSQL
    address is never tried: nothing listens on port 1)."""
    from harness import run_cli
    for security in (["--kafka-security-protocol", "SASL_PLAINTEXT"],
                     ["--config", str(_authorizer_config(tmp_path))]):
        r = run_cli("server", "--data-dir", str(tmp_path / "data"), "--cluster",
                    "postgresql://nobody@127.0.0.1:1/kafkalite", "--node-id", "1", *security)
        assert r.returncode == 1
        lines = r.stderr.decode().strip().splitlines()
        assert len(lines) == 1, lines
        assert "control channel and relay need CURVE" in lines[0]
        assert "kafkalite curve keygen" in lines[0]


def _authorizer_config(tmp_path):
    path = tmp_path / "server.toml"
    path.write_text("authorizer_enabled = true\n")
    return path
