"""The streaming mode's AnswerSpool (kafkalite/rest_proxy/stream.py), without
a server: answers held past its memory go to a temporary file and come
back first in first out, whatever sizes they are put and taken in."""
from __future__ import annotations

import random

from kafkalite.rest_proxy import stream
from kafkalite.rest_proxy.stream import AnswerSpool


def test_answers_come_back_in_order_through_memory_and_file(monkeypatch):
    monkeypatch.setattr(stream, "SPOOL_MEMORY_BYTES", 1000)
    rng = random.Random(7)
    spool, sent, got = AnswerSpool(), bytearray(), bytearray()
    for i in range(2000):
        data = b"%d:" % i + bytes(rng.randrange(200))
        spool.put(data)
        sent += data
        if rng.random() < 0.3:
            got += spool.take(rng.randrange(1, 3000))
        assert spool.held == len(sent) - len(got)
    while spool.held:
        got += spool.take(777)
    assert got == sent and spool.take(10) == b""
    spool.close()
    spool.put(b"after")                  # a stream's reader that has not stopped yet
    assert spool.held == 0
