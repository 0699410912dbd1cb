"""The supervisor's relay (server/network/relay.py) against malformed messages from
an insider: one holding the node's key pair (a worker gone wrong, or a
bug), since only the server's processes can speak on it
(test_node_channels.py). With security on and no key file the node's key
pair is the owner's (server.json's ``owner.key_file``), so the fuzz
connects with that.

The relay takes any DEALER identity: a worker's (``worker-<broker id>``)
only tells it which broker a client addressed (``relayed_from``), and
ROUTER_HANDOVER gives a live worker's identity to whoever connects with it
last. So the fuzz speaks as identities no live worker has -- strangers,
and ``worker-<n>`` of brokers that do not exist -- and a live worker's
relayed requests keep their answers. A message that is not a relay request
(wrong frame count, a header that does not decode) is dropped, logged
rate-limited and counted (kafkalite_relay_messages_dropped); a request
whose Kafka frame does not decode is answered CLOSE; the supervisor serves
on, and a Kafka client (whose Metadata and group requests workers relay)
produces with acks=all and reads afterwards.

KAFKALITE_FUZZ_INPUTS sets the number of relay messages (tests/soak.py:
20,000 by default, about 1 s here; 1,000,000 under tools/soak);
KAFKALITE_FUZZ_SEED replays a run. A module server of its own:
SASL_PLAINTEXT Kafka listeners, the authorizer on, User:admin a super user.
"""
from __future__ import annotations

import struct
import time

import pytest
import zmq
from confluent_kafka import Consumer as KafkaConsumer
from confluent_kafka import Producer as KafkaProducer
from prometheus_client.parser import text_string_to_metric_families

from fuzzing import (INPUTS, AckedRecords, Survival, base_frames, fuzz_rng, mutate,
                     random_frame)
from harness import create, listening_ports, scrape, secured_server, stop_server, wait_until
from kafkalite import errors
from kafkalite.protocol import ApiKey, curve, decode_response, encode_request
from kafkalite.server.network.relay import (CLOSE, ERROR, NOTHING, RESPONSE, decode_relay_reply,
                                    encode_relay_request)

ADMIN, PASSWORD = "admin", "admin-secret"
DEALERS = 4
GOOD_EVERY = 100


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("relay"), {ADMIN: PASSWORD})
    try:
        yield srv
    finally:
        stop_server(srv)


def relay_endpoint(srv) -> str:
    """The relay's: the supervisor's one TCP port that is neither public
    (native, Kafka, HTTP) nor the control channel's (on the workers'
    command lines)."""
    with open(f"/proc/{srv.worker_pids()[0]}/cmdline") as f:
        argv = f.read().split("\0")
    known = {int(argv[argv.index("--control") + 1].rsplit(":", 1)[1]),
             int(srv.bootstrap.rsplit(":", 1)[1])}
    known |= {int(b.rsplit(":", 1)[1]) for b in srv.kafka_bootstrap.split(",")}
    for http in ("metrics", "schema_registry", "rest_proxy", "iceberg_rest"):
        if srv.info.get(http):
            known.add(int(srv.info[http].split(":")[2].split("/")[0]))
    (port,) = listening_ports(srv.proc.pid) - known
    return f"tcp://127.0.0.1:{port}"


def dealer(ctx: zmq.Context, srv, identity: bytes) -> zmq.Socket:
    """A DEALER to the relay with the node's (the owner's) key pair."""
    public, secret = curve.load_keypair_file(srv.info["owner.key_file"])
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 5000)              # every message delivered before close
    s.setsockopt(zmq.SNDHWM, 0)
    s.setsockopt(zmq.IDENTITY, identity)
    curve.secure_client(s, public, public, secret)
    s.connect(relay_endpoint(srv))
    return s


def dropped(srv) -> float:
    """kafkalite_relay_messages_dropped, scraped (published every half second)."""
    text = scrape(srv, ADMIN, PASSWORD, timeout=5)
    return next((s.value for family in text_string_to_metric_families(text)
                 for s in family.samples if s.name == "kafkalite_relay_messages_dropped_total"),
                -1.0)


def kafka_config(srv, **extra) -> dict:
    return {"bootstrap.servers": srv.kafka_bootstrap, "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "SCRAM-SHA-256", "sasl.username": ADMIN,
            "sasl.password": PASSWORD, **extra}


def still_serves(srv, topic: str, n: int = 30) -> None:
    """A Kafka client (its Metadata and FindCoordinator relayed by the
    workers) produces with acks=all and reads it all back."""
    p = KafkaProducer(kafka_config(srv, acks="all"))
    for i in range(n):
        p.produce(topic, b"after-%d" % i)
    assert p.flush(30) == 0
    c = KafkaConsumer(kafka_config(srv, **{"group.id": f"{topic}-reader",
                                           "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    seen: set = set()
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline and not {b"after-%d" % i for i in range(n)} <= seen:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                seen.add(m.value())
    finally:
        c.close()
    assert {b"after-%d" % i for i in range(n)} <= seen, f"read {len(seen)} records"


VERSION_REQUEST = encode_request(ApiKey.API_VERSIONS, 0, 7, "relay-fuzz", {})
GOOD_HEADER = encode_relay_request(1, "127.0.0.1:1234", "User:relay-fuzz")
PROBE_ID = 0x5EED

# each a DEALER message the relay must drop and count (the ROUTER adds the identity)
HOSTILE = [
    [GOOD_HEADER],                                          # no request frame
    [VERSION_REQUEST],
    [GOOD_HEADER, VERSION_REQUEST, b"a third"],
    [b"", b"", b"", b""],
    [b"", VERSION_REQUEST],                                 # no relay id
    [b"\x00\x00\x00", VERSION_REQUEST],
    [b"\x00\x00\x00\x01\x7f\xff" + b"a" * 10, VERSION_REQUEST],   # a length past the frame
    [b"\x00\x00\x00\x01\x80\x00", VERSION_REQUEST],               # a negative length
    [b"\x00\x00\x00\x01\x00\x01a\x00", VERSION_REQUEST],          # a principal cut short
]


def test_malformed_relay_messages_are_dropped_and_counted(server, topic_name):
    create(server, topic_name, 2)
    survival = Survival(server)
    before = dropped(server)
    assert before >= 0, "kafkalite_relay_messages_dropped is published"
    ctx = zmq.Context()
    try:
        s = dealer(ctx, server, b"relay-fuzz-hostile")
        for frames in HOSTILE:
            s.send_multipart(frames)
        # after them, a request that decodes: answered, in order
        s.send_multipart([GOOD_HEADER, VERSION_REQUEST])
        assert s.poll(20_000), "the relay stopped answering"
        reply = s.recv_multipart()
        assert decode_relay_reply(reply[0])[:2] == (1, RESPONSE)
        s.close()
    finally:
        ctx.term()
    wait_until(lambda: dropped(server) >= before + len(HOSTILE), 20,
               "the malformed relay messages counted")
    assert "dropped a malformed relay message" in server.output()
    survival.check("hostile relay messages")
    still_serves(server, topic_name)


def test_a_refusal_too_long_for_a_kafka_string_is_answered_cut_to_fit(server, topic_name):
    """Found by the fuzz: a principal of 32 KiB (the header's most) makes
    the authorizer's refusal message longer than a Kafka string may be.
    The relay answered UNKNOWN_SERVER_ERROR and logged a line per request
    (which a sender could repeat without end); now the refusal itself is
    answered, its message cut to fit (protocol/compiler.py), and nothing
    is logged."""
    request = encode_request(ApiKey.DESCRIBE_CONFIGS, 4, 7, "relay-fuzz", {"resources": [
        {"resource_type": 2, "resource_name": topic_name, "configuration_keys": None}]})
    relay_header = encode_relay_request(3, "127.0.0.1:1", "User:" + "u" * 0x8000)
    logged_before = len(server.output())
    n = 300
    ctx = zmq.Context()
    try:
        s = dealer(ctx, server, b"relay-fuzz-long-principal")
        for _ in range(n):
            s.send_multipart([relay_header, request])
        for _ in range(n):
            assert s.poll(20_000), "the relay stopped answering"
            frames = s.recv_multipart()
            relay_id, kind, code, message, _ = decode_relay_reply(frames[0])
            assert (relay_id, kind) == (3, RESPONSE), (kind, code, message[:200])
            answer = decode_response(ApiKey.DESCRIBE_CONFIGS, 4, frames[1])[1]["results"][0]
            assert answer["error_code"] == errors.TopicAuthorizationFailedError.code, answer
            assert len(answer["error_message"].encode()) <= 32767
            assert answer["error_message"].endswith("bytes)"), answer["error_message"][-80:]
        s.close()
    finally:
        ctx.term()
    assert "cannot encode" not in server.output()[logged_before:]


def header(rng) -> bytes:
    """A relay header: well-formed with odd fields, or damaged."""
    junk_text = ["", "x", "User:", ":", "User:admin", "User:ANONYMOUS", "Group:g", "no-colon",
                 "\udcff", "127.0.0.1", "[::1]:9", "a:b:c:d", "PLAINTEXT", "SASL_PLAINTEXT",
                 "EXTERNAL", "unknown-listener"]
    # now and then a field at the header's most (32 KiB): a few, as each
    # one queued costs the supervisor that much until it is read
    huge = ["User:" + "u" * 40_000, "é" * 20_000]
    relay_id = rng.choice([0, 1, -1, 0x7FFFFFFF, -0x80000000, rng.randrange(1 << 31)])
    fields = [rng.choice(huge if rng.random() < 0.01 else junk_text) for _ in range(3)]
    raw = encode_relay_request(relay_id, *fields)
    r = rng.random()
    if r < 0.5:
        return raw
    if r < 0.7:
        return mutate(rng, raw, keep=0)
    if r < 0.8:
        return raw[:rng.randrange(len(raw))]
    if r < 0.9:                                 # lengths that lie
        return struct.pack(">ih", relay_id, rng.choice([-1, -0x8000, 0x7FFF, 50])) + \
            rng.randbytes(rng.randrange(60))
    return rng.randbytes(rng.randrange(40))


def message(rng, frames: list[bytes]) -> list[bytes]:
    r = rng.random()
    if r < 0.45:
        return [header(rng), mutate(rng, rng.choice(frames))]
    if r < 0.65:
        return [header(rng), random_frame(rng)]
    if r < 0.75:
        return [header(rng), rng.choice(frames)]
    if r < 0.9:                                 # any frame count
        return [rng.randbytes(rng.randrange(40)) for _ in range(rng.choice([1, 2, 3, 4, 6]))]
    return [header(rng)]


@pytest.mark.slow
def test_a_fuzz_of_the_relay_leaves_the_node_serving(server, topic_name):
    create(server, topic_name, 2)
    rng = fuzz_rng("relay")
    survival = Survival(server)
    good = AckedRecords(server, topic_name, 2)
    before = dropped(server)
    frames = base_frames(topic_name)
    ctx = zmq.Context()
    # brokers that do not exist, and strangers: never a live worker's identity
    identities = [b"worker-%d" % (len(server.worker_pids()) + 7), b"worker-99999999999999999999",
                  b"relay-fuzz", b"\x00fuzz"]
    sockets = [dealer(ctx, server, identities[i % len(identities)]) for i in range(DEALERS)]
    replies, kinds = 0, {RESPONSE: 0, ERROR: 0, NOTHING: 0, CLOSE: 0}
    probed: set = set()           # the sockets whose probe (after their fuzz) was answered

    def read_replies() -> None:
        nonlocal replies
        for s in sockets:
            while True:
                try:
                    reply = s.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                relay_id, kind, _, _, _ = decode_relay_reply(reply[0])    # well-formed, always
                kinds[kind] += 1
                replies += 1
                if relay_id == PROBE_ID and kind == RESPONSE:
                    probed.add(s)

    started = time.monotonic()
    try:
        for i in range(INPUTS):
            sockets[i % DEALERS].send_multipart(message(rng, frames))
            if i % GOOD_EVERY == 0:
                good.produce()
                read_replies()
        for s in sockets:       # after each socket's fuzz, a request that decodes
            s.send_multipart([encode_relay_request(PROBE_ID, "127.0.0.1:1", "User:probe"),
                              VERSION_REQUEST])
        wait_until(lambda: read_replies() or len(probed) == DEALERS
                   or server.proc.poll() is not None, 60, "the relay answering after the fuzz")
    finally:
        for s in sockets:
            s.close(linger=0)
        ctx.term()
    elapsed = time.monotonic() - started
    print(f"{INPUTS} relay messages in {elapsed:.1f} s ({INPUTS / elapsed:.0f}/s), "
          f"{replies} replies read: {kinds}")
    assert server.proc.poll() is None, server.output()[-3000:]
    wait_until(lambda: dropped(server) > before, 20, "the fuzz's malformed messages counted")
    good.check("relay fuzz")
    survival.check("relay fuzz")
    still_serves(server, topic_name)
    log_lines = server.output().count("\n")
    print(f"server log: {log_lines} lines")
    assert log_lines < 500, "bad input is logged rate-limited"
