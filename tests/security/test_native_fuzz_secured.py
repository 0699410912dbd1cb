"""Fuzz the native ports of a server with security on: what the plain fuzz
(tests/server/test_native_fuzz.py, a server without security) never
reaches. Here every native request has a principal -- the node's own
(BROKER_PRINCIPAL, a super user) for a client with the owner's key pair
over CURVE, ``User:unix:<user>`` through the port's local door -- and goes
through the authorizer's checks (request_authorization.py) before its
handler; and the server's own principal may name the principal a Produce
is made for (``request_principal``, requests.py ``_act_for``), which the
fuzz sets to junk, to principals without ACLs and to the super user. The
local door's user, without ACLs, is refused whatever it sends.

Random, mutated and truncated requests must never crash a process, grow
its memory for good, or cost the owner's well-behaved producer an
acknowledged record. KAFKALITE_FUZZ_INPUTS sets the number of messages
(tests/soak.py); KAFKALITE_FUZZ_SEED replays a run. A module server of its
own: SASL_PLAINTEXT listeners, the authorizer on, User:admin a super user.
"""
from __future__ import annotations

import time

import pytest
import zmq

from fuzzing import (AckedRecords, Survival, base_native_requests, end_of_fuzz, fuzz_dealers,
                     fuzz_rng, mutate, random_frame, read_answers, record_batch)
from harness import create, secured_server, stop_server
from kafkalite.local_socket import native_door
from kafkalite.protocol import ApiKey, curve, encode_request

GOOD_EVERY = 200
PRINCIPALS = ["User:admin", "User:nobody", "User:ANONYMOUS", "", "User:", ":", "no-colon",
              "Group:g", "User:" + "u" * 32_000, "User:é\u202e", "User:unix:root"]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = secured_server(tmp_path_factory.mktemp("native-secured"), {"admin": "admin-secret"})
    try:
        yield srv
    finally:
        stop_server(srv)


def produce_for(rng, topic: str) -> list[bytes]:
    """A Produce (v9+, where the tagged field is) made for a principal."""
    records: list = []
    frame = encode_request(ApiKey.PRODUCE, rng.choice([9, 10, 11, 12]), rng.randrange(1 << 31),
                           "fuzz", {"acks": rng.choice([0, 1, -1]), "timeout_ms": 1000,
                                    "request_principal": rng.choice(PRINCIPALS),
                                    "topic_data": [{"name": topic, "partition_data": [
                                        {"index": rng.choice([0, 1, 7]),
                                         "records": record_batch()}]}]},
                           records_out=records)
    frames = [frame, *(bytes(r) for r in records)]
    if rng.random() < 0.3:
        frames[0] = mutate(rng, frames[0])
    return frames


def message(rng, bases: list[list[bytes]], topic: str) -> list[bytes]:
    r = rng.random()
    if r < 0.3:
        return produce_for(rng, topic)
    if r < 0.7:                                  # a valid request, damaged
        frames = list(rng.choice(bases))
        frames[0] = mutate(rng, frames[0])
        if len(frames) > 1 and rng.random() < 0.3:
            frames[1] = mutate(rng, frames[1], keep=0)
        return frames
    if r < 0.9:
        return [random_frame(rng)]
    return [rng.randbytes(rng.randint(0, 48)) for _ in range(rng.randint(1, 4))]


@pytest.mark.slow
def test_fuzzed_native_requests_of_principals_never_crash_grow_or_lose_records(server,
                                                                                 topic_name):
    create(server, topic_name, 2)
    survival = Survival(server)
    good = AckedRecords(server, topic_name, 2)
    rng = fuzz_rng("secured native ports")
    bases = base_native_requests(topic_name)
    public, secret = curve.load_keypair_file(server.info["owner.key_file"])
    ctx = zmq.Context()
    endpoints = [server.info["native"], server.info["workers"][0]["endpoint"]]
    dealers = []
    for endpoint in endpoints:
        for door in (False, True):
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.SNDHWM, 0)
            d.setsockopt(zmq.LINGER, 0)
            if door:                              # no keys: the local door, as this user
                target = native_door(endpoint)
                assert target, f"no local door beside {endpoint}"
            else:                                 # the owner's key pair: the server's principal
                curve.secure_client(d, public, public, secret)
                target = endpoint
            d.connect(target)
            dealers.append(d)
    started = time.monotonic()
    try:
        answers = fuzz_dealers(dealers, lambda: message(rng, bases, topic_name), good,
                               GOOD_EVERY)
        for d in dealers:                         # each door of each ROUTER still answers
            answers += read_answers(dealers)
            d.send(encode_request(ApiKey.API_VERSIONS, 0, 0x5EED, "probe", {}))
            assert d.poll(60_000), "a native port stopped answering"
        answers += read_answers(dealers)
    finally:
        for d in dealers:
            d.close(0)
        ctx.term()
    end_of_fuzz(server, "secured native fuzz", started, answers, good, survival)
