"""Fuzz the ingest gateway's PULL socket: random, mutated and truncated
messages must never stop the gateway, grow its memory for good, or cost a
well-behaved publisher a record.

KAFKALITE_FUZZ_INPUTS sets the number of messages (tests/soak.py: 20,000 by
default, a few seconds; 1,000,000 under tools/soak); KAFKALITE_FUZZ_SEED
replays a run. Mutated topic names are always made illegal (a legal one would be
auto-created: a resource question, not a parsing one).
"""
import json
import re
import time

import pytest
import zmq

from fuzzing import INPUTS, RSS_SLACK_MB, fuzz_rng, mutate
from harness import child_pids, create, read_all, rss_mb, wait_until

GOOD_EVERY = 20
_LEGAL_TOPIC = re.compile(rb"[a-zA-Z0-9._-]{1,249}")


def valid_messages(topic: bytes) -> list[list[bytes]]:
    return [
        [topic, b"", b"value"],
        [topic, b"key", b"value"],
        [topic, b"key", b"value", b'{"a": "1", "b": null}'],
        [topic, b"", b"v", b'[["a", "1"], ["b", null], ["a", "2"]]'],
        [topic, b"k" * 300, b"v" * 3000, b'{"' + b"n" * 100 + b'": "' + b"x" * 500 + b'"}'],
    ]


def message(rng, bases: list[list[bytes]], topic: bytes) -> list[bytes]:
    r = rng.random()
    frames = list(rng.choice(bases))
    if r < 0.5:                                   # a valid message, damaged
        i = rng.randrange(len(frames))
        frames[i] = mutate(rng, frames[i], keep=0)
        if i == 0 and _LEGAL_TOPIC.fullmatch(frames[0]) and frames[0] != topic:
            frames[0] += b"!"
        if rng.random() < 0.1:
            frames = frames[:rng.randrange(len(frames))] or [b""]
        elif rng.random() < 0.1:
            frames.append(rng.randbytes(rng.randint(0, 16)))
        return frames
    if r < 0.65:                                  # headers built to hurt the parser
        depth = 100_000 if rng.random() < 0.02 else rng.choice([3, 10, 1000])
        opener, closer = rng.choice([(b"[", b"]"), (b"{", b"}"), (b'{"a":', b"}")])
        return [topic, b"", b"v", opener * depth + closer * rng.choice([0, depth])]
    if r < 0.75:
        return [topic, b"", b"v", json.dumps(rng.choice([
            [1, 2], ["ab"], {"h": 5}, {"h": ["x"]}, [["a"]], "s", 7, None, [["a", "b", "c"]],
        ])).encode()]
    if r < 0.9:                                   # noise of any frame count
        return [rng.randbytes(rng.randint(0, 40)) for _ in range(rng.randint(1, 6))]
    return [frames[0][:rng.randrange(len(frames[0]) + 1)] + b"\xff", b"", b"v"]


@pytest.mark.slow
def test_fuzzed_ingest_messages_never_stop_the_gateway_nor_cost_good_records(server, topic_name):
    create(server, topic_name, 2)
    good_topic = topic_name + "-good"
    create(server, good_topic, 2)
    (gateway,) = child_pids(server.proc.pid, "kafkalite.client.ingest")
    start = rss_mb(gateway)
    logged_before = len(server.output())     # the shared server's log: this test's part
    rng = fuzz_rng("ingest PULL")
    topic = topic_name.encode()
    bases = valid_messages(topic)
    ctx = zmq.Context()
    evil = ctx.socket(zmq.PUSH)
    evil.setsockopt(zmq.SNDHWM, 0)
    evil.connect(server.info["ingest"])
    good = ctx.socket(zmq.PUSH)
    good.connect(server.info["ingest"])
    sent_good = 0
    started = time.monotonic()
    try:
        for i in range(INPUTS):
            evil.send_multipart(message(rng, bases, topic))
            if i % GOOD_EVERY == 0:
                good.send_multipart([good_topic.encode(), b"", b"good-%d" % sent_good])
                sent_good += 1
    finally:
        evil.close(linger=60_000)
        good.close(linger=60_000)
        ctx.term()
    sent_s = time.monotonic() - started
    got = read_all(server, good_topic, 2, sent_good, timeout=90)
    elapsed = time.monotonic() - started
    print(f"{INPUTS} ingest messages sent in {sent_s:.1f} s, all {sent_good} good records "
          f"stored {elapsed:.1f} s after the start ({INPUTS / elapsed:.0f} messages/s)")
    missing = {b"good-%d" % i for i in range(sent_good)} - {m.value() for m in got}
    assert not missing, f"{len(missing)} of {sent_good} good records lost"
    assert child_pids(server.proc.pid, "kafkalite.client.ingest") == [gateway]
    try:
        wait_until(lambda: rss_mb(gateway) - start < RSS_SLACK_MB, 20,
                   "the gateway's memory to come back", interval=0.25)
    finally:
        logged = server.output()[logged_before:]
        print(f"gateway RSS {start:.0f} -> {rss_mb(gateway):.0f} MiB; server log "
              f"{logged.count(chr(10))} lines")
    assert logged.count("dropped a message") < 100, "bad input is logged rate-limited"
