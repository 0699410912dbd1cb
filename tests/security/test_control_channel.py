"""The supervisor's control channel against a malformed message from an
insider: one holding the node's key pair (a worker gone wrong, or a bug).
Only the server's processes can speak on the channel
(test_node_channels.py), so the module's server runs with a key pair of
the test's (``native_curve_secret_key_file``) and the messages are sent
with it. A malformed message is dropped, logged and counted
(kafkalite_control_messages_dropped), never fatal: before, two frames
(``hello``, ``world``) ended every process of the node. The fuzz sends
structurally wrong messages only -- frame counts, bytes that are not JSON,
JSON that is not a worker's object, fields of the wrong type -- under a
worker index no worker has.

A module server of its own: a regression stops it."""
from __future__ import annotations

import json

import pytest
import zmq

from fuzzing import Survival, fuzz_rng
from harness import ServerProcess, read_all, run_cli, scrape, wait_until
from kafkalite.client import AdminClient, NewTopic, Producer
from kafkalite.protocol import curve
from prometheus_client.parser import text_string_to_metric_families
from soak import setting

FUZZ = setting("KAFKALITE_CONTROL_FUZZ")

# each one a message the old loop died on (unpacking, or a TypeError out of
# the handler), or one it dropped, as DEALER frames (the ROUTER adds one)
HOSTILE = [
    [b"hello", b"world"],                       # the report: "too many values to unpack"
    [b"a", b"b", b"c", b"d"],
    [b"[]"],                                    # JSON, not an object
    [b"null"],
    [b'"heartbeat"'],
    [b'{"type": "hello", "worker": [1]}'],      # an unhashable index
    [b'{"type": "hello", "worker": {"a": 1}}'],
    [b'{"type": ["hello"], "worker": 0}'],      # a type that is not a string
    [b'{"type": "heartbeat", "worker": true}'],  # a bool is not an index
    [b'{"type": "heartbeat"}'],                 # no worker
    [b"\xff\xfe\xfd"],                          # not UTF-8
    [b"{" * 100_000],                           # deeply nested: RecursionError is not fatal either
    [b""],
]


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    """The server's key pair: (public, secret) Z85 and the key pair file's path."""
    root = tmp_path_factory.mktemp("curve")
    public_path, secret_path = curve.write_keypair(str(root), "server")
    public, secret = curve.load_keypair_file(secret_path)
    return public, secret, public_path, secret_path


# with CURVE on (security on) /metrics asks for a SASL user's login
OPS, OPS_PASSWORD = "ops", "ops-metrics-pw"


@pytest.fixture(scope="module")
def server(tmp_path_factory, keys):
    data = str(tmp_path_factory.mktemp("server") / "data")
    r = run_cli("users", "add", OPS, "--password", OPS_PASSWORD, "--data-dir", data)
    assert r.returncode == 0, r.stderr
    srv = ServerProcess(data, extra_args=["--native-curve-secret-key-file", keys[3]]).start()
    try:
        yield srv
    finally:
        if srv.proc.poll() is None:
            srv.stop()
        srv.kill()


def insider(keys) -> dict:
    """A native client's settings with the server's own key pair."""
    return {"curve.server.key": keys[2], "curve.public.key": keys[2],
            "curve.secret.key": keys[3]}


def control_endpoint(srv) -> str:
    with open(f"/proc/{srv.worker_pids()[0]}/cmdline") as f:
        argv = f.read().split("\0")
    return argv[argv.index("--control") + 1]


def dropped(srv) -> float:
    """kafkalite_control_messages_dropped, scraped (published every half second)."""
    text = scrape(srv, OPS, OPS_PASSWORD, timeout=5)
    return next((s.value for family in text_string_to_metric_families(text)
                 for s in family.samples if s.name == "kafkalite_control_messages_dropped_total"),
                0.0)


def create_topic(srv, keys, name: str) -> None:
    admin = AdminClient(srv.config(**insider(keys)))
    try:
        for f in admin.create_topics([NewTopic(name, 2)]).values():
            f.result()
    finally:
        admin.close()


def still_serves(srv, keys, topic: str, n: int = 50) -> None:
    p = Producer(srv.config(acks="all", **insider(keys)))
    for i in range(n):
        p.produce(topic, b"%d" % i)
    assert p.flush(30) == 0
    p.close()
    assert len(read_all(srv, topic, 2, n, **insider(keys))) >= n


def send_all(endpoint: str, keys, messages) -> None:
    ctx = zmq.Context()
    try:
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 5000)          # every message delivered before close
        curve.secure_client(s, keys[0], keys[0], keys[1])
        s.connect(endpoint)
        for frames in messages:
            s.send_multipart(frames)
        s.close()
    finally:
        ctx.term()


def test_malformed_control_messages_are_dropped_and_counted(server, keys, topic_name):
    create_topic(server, keys, topic_name)
    survival = Survival(server)
    before = dropped(server)
    send_all(control_endpoint(server), keys, HOSTILE)
    wait_until(lambda: dropped(server) >= before + len(HOSTILE), 20,
               "the malformed messages counted")
    survival.check("hostile control messages")
    still_serves(server, keys, topic_name)
    assert "dropped a malformed control message" in server.output()


def random_message(rng) -> list[bytes]:
    junk = [None, True, 3.5, "x", "heartbeat", "hello", [], {}, [1, 2], {"a": [None]}, -1, 2**70]
    kind = rng.randrange(5)
    if kind == 0:                               # a wrong number of frames
        return [rng.randbytes(rng.randrange(30)) for _ in range(rng.choice([2, 3, 5]))]
    if kind == 1:                               # bytes
        return [rng.randbytes(rng.randrange(200))]
    if kind == 2:                               # JSON of any shape
        return [json.dumps(rng.choice(junk)).encode()]
    # an object with wrong fields, under an index no worker has
    msg = {"type": rng.choice(["hello", "heartbeat", "metrics", "quota_usage", "done",
                               "fenced", rng.choice(junk)]),
           "worker": rng.choice([999_999, -7, "0", None, [0], 1.0])}
    for _ in range(rng.randrange(4)):
        msg[rng.choice(["port", "pid", "op", "rates", "kafka_listeners"])] = rng.choice(junk)
    raw = json.dumps(msg).encode()
    if kind == 4 and raw:                       # and cut short
        raw = raw[:rng.randrange(len(raw))]
    return [raw]


def test_a_fuzz_of_the_control_channel_leaves_the_node_serving(server, keys, topic_name):
    create_topic(server, keys, topic_name)
    rng = fuzz_rng("control channel")
    survival = Survival(server)
    send_all(control_endpoint(server), keys, (random_message(rng) for _ in range(FUZZ)))
    # the last messages processed: the supervisor answered the metrics since
    wait_until(lambda: server.proc.poll() is not None or dropped(server) > 0, 20,
               "the fuzz's malformed messages counted")
    survival.check("control channel fuzz")
    still_serves(server, keys, topic_name)
