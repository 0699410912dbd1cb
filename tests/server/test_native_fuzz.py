"""Fuzz the native ZeroMQ ROUTERs (the supervisor's and a worker's): random,
mutated and truncated multipart requests must never crash a process, grow
its memory for good, or cost a well-behaved producer an acknowledged
record.

KAFKALITE_FUZZ_INPUTS sets the number of messages (tests/soak.py: 20,000 by
default, 1,000,000 under tools/soak); KAFKALITE_FUZZ_SEED replays
a run. Inputs are sent pipelined from a few DEALERs, alternating between
the two ROUTERs, and whatever answers come back are read as they arrive.
"""
import time

import pytest
import zmq

from fuzzing import (AckedRecords, Survival, base_native_requests, end_of_fuzz, fuzz_dealers,
                     fuzz_rng, mutate, random_frame, read_answers)
from harness import create
from kafkalite.protocol import ApiKey, encode_request, native

DEALERS_PER_ROUTER = 4
GOOD_EVERY = 200


@pytest.fixture(scope="module")
def server(module_server):
    """Fuzzed requests may change anything a native request can, and the
    test counts the lines of the whole server log."""
    return module_server


def extension(rng, topic: str) -> list[bytes]:
    body = rng.choice([
        {"op": "shm_attach", "ring": rng.randbytes(8).hex()},
        {"op": "shm_attach", "ring": "../../etc/passwd"},
        {"op": "shm_attach", "ring": rng.randbytes(8).hex(), "secret": rng.randbytes(16).hex()},
        {"op": "shm_attach", "ring": rng.choice([None, 5, [], {}])},
        {"op": "shm_attach"},
        {"op": rng.randbytes(4).hex()},
        {"op": 7},
        {"topic": topic},
    ])
    raw = native.encode_extension_request(rng.randrange(1 << 31), body)
    return [mutate(rng, raw) if rng.random() < 0.3 else raw]


def message(rng, bases: list[list[bytes]], topic: str) -> list[bytes]:
    r = rng.random()
    if r < 0.45:                                  # a valid request, damaged
        frames = list(rng.choice(bases))
        frames[0] = mutate(rng, frames[0])
        if len(frames) > 1 and rng.random() < 0.3:
            frames[1] = mutate(rng, frames[1], keep=0)
        if rng.random() < 0.1:
            frames.append(rng.randbytes(rng.randint(0, 64)))
        elif rng.random() < 0.1:
            frames = frames[:1]                   # its record frames missing
        return frames
    if r < 0.75:
        return [random_frame(rng)]
    if r < 0.85:
        return extension(rng, topic)
    if r < 0.95:                                  # noise of any frame count and size
        return [rng.randbytes(rng.randint(0, 48)) for _ in range(rng.randint(1, 5))]
    frames = list(rng.choice(bases))              # a valid request cut short
    return [frames[0][:rng.randrange(len(frames[0]))]]


@pytest.mark.slow
def test_fuzzed_native_requests_never_crash_grow_or_lose_records(server, topic_name):
    create(server, topic_name, 2)
    survival = Survival(server)
    good = AckedRecords(server, topic_name, 2)
    rng = fuzz_rng("native ROUTERs")
    bases = base_native_requests(topic_name)
    ctx = zmq.Context()
    endpoints = [server.info["native"], server.info["workers"][0]["endpoint"]]
    dealers = []
    for endpoint in endpoints:
        for _ in range(DEALERS_PER_ROUTER):
            d = ctx.socket(zmq.DEALER)
            d.setsockopt(zmq.SNDHWM, 0)
            d.setsockopt(zmq.LINGER, 0)
            d.connect(endpoint)
            dealers.append(d)
    started = time.monotonic()
    try:
        answers = fuzz_dealers(dealers, lambda: message(rng, bases, topic_name), good,
                               GOOD_EVERY)
        for endpoint in endpoints:                # each ROUTER still answers
            probe = ctx.socket(zmq.DEALER)
            probe.connect(endpoint)
            probe.send(encode_request(ApiKey.API_VERSIONS, 0, 1, "probe", {}))
            assert probe.poll(60_000), f"{endpoint} stopped answering"
            probe.close(0)
        answers += read_answers(dealers)
    finally:
        for d in dealers:
            d.close(0)
        ctx.term()
    end_of_fuzz(server, "native fuzz", started, answers, good, survival)
