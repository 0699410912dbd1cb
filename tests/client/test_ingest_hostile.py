"""The plain ZeroMQ ingest gateway against hostile publishers: poison from
one PUSH socket must never cost another publisher a record, nor the
gateway its process."""
import json

import zmq

from harness import child_pids, create, read_all

GOOD_RECORDS = 20_000


def ingest_pid(server) -> int:
    (pid,) = child_pids(server.proc.pid, "kafkalite.client.ingest")
    return pid


def poison(topic: bytes) -> list[list[bytes]]:
    """One of each kind of bad message the gateway must drop on its own."""
    return [
        [topic, b"", b"v", b"[" * 100_000],                     # RecursionError in json.loads
        [topic, b"", b"v", b"{" * 50_000 + b"}" * 50_000],
        [topic, b"", b"v", b'[["a", "b"], [["deep"]]]'],
        [topic, b"", b"v", b"[1, 2]"],                          # TypeError when unpacked
        [topic, b"", b"v", b'["ab"]'],
        [topic, b"", b"v", b'{"h": 5}'],
        [topic, b"", b"v", b'"just a string"'],
        [topic, b"", b"v", b'{"h": "\xff\xfe"}'],               # invalid UTF-8
        [topic, b"", b"v", b'{"h": "\\ud800"}'],                # lone surrogate
        [topic, b"", b"v", b"[" + b'["n", "v"],' * 2000 + b'["n", "v"]]'],   # too many headers
        [topic, b"", b"x" * (600 * 1024)],                      # record too large for a batch
        [b"bad topic!", b"", b"v"],
        [b"\xff\xfe\xfd", b"", b"v"],
        [b"", b"", b"v"],
        [b"..", b"", b"v"],
        [b"t" * 250, b"", b"v"],
        [topic],
        [topic, b"k"],
        [topic, b"k", b"v", b"{}", b"extra"],
        [topic] * 100,
    ]


def test_poison_messages_cost_no_good_publisher_a_record(server, topic_name):
    create(server, topic_name, 3)
    pid = ingest_pid(server)
    logged_before = len(server.output())     # the shared server's log: this test's part
    topic = topic_name.encode()
    ctx = zmq.Context()
    good = ctx.socket(zmq.PUSH)
    good.connect(server.info["ingest"])
    evil = ctx.socket(zmq.PUSH)
    evil.setsockopt(zmq.SNDHWM, 0)
    evil.connect(server.info["ingest"])
    bad = poison(topic)
    try:
        for i in range(GOOD_RECORDS):
            frames = [topic, b"key-%d" % (i % 11), b"good-%d" % i]
            if i % 4 == 0:
                frames.append(json.dumps({"i": str(i)}).encode())
            good.send_multipart(frames)
            if i % 50 == 0:
                evil.send_multipart(bad[(i // 50) % len(bad)])
            if i == GOOD_RECORDS // 2:
                # a frame over the gateway's cap: its sender is disconnected, nothing buffered
                evil.send_multipart([topic, b"", b"z" * (40 << 20)])
    finally:
        good.close(linger=20_000)
        evil.close(linger=5_000)
        ctx.term()
    got = read_all(server, topic_name, 3, GOOD_RECORDS, timeout=60)
    values = {m.value() for m in got}
    missing = {b"good-%d" % i for i in range(GOOD_RECORDS)} - values
    assert not missing, f"{len(missing)} good records lost, e.g. {sorted(missing)[:5]}"
    assert len(got) == GOOD_RECORDS, "no poison message was stored"
    for m in got:
        i = int(m.value().split(b"-")[1])
        assert m.headers() == ([("i", str(i).encode())] if i % 4 == 0 else None)
    assert ingest_pid(server) == pid, "the gateway died and was restarted"
    logged = server.output()[logged_before:]
    assert "RecursionError" not in logged
    assert logged.count("dropped a message") <= 20, "bad input is logged rate-limited"
