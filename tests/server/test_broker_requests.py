"""BrokerRequests (server/network/broker_requests.py), the native requests
a process sends its peers: what close() fails stays failed.

A worker's verification of a transactional produce goes through one; when
its supervisor died the worker closed it, and the callbacks of that close
re-ran the produce requests queued behind the verification, which sent
again -- on the closing object, which nothing polled any more: that request
was never answered, and every later request of the producer queued behind
it for good (found by the restart matrix's soak)."""
from __future__ import annotations

import zmq

from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.server.network.broker_requests import BrokerRequests


def test_a_request_sent_by_a_callback_of_close_fails_too():
    ctx = zmq.Context.instance()
    silent = ctx.socket(zmq.ROUTER)          # a peer that never answers
    silent.setsockopt(zmq.LINGER, 0)
    port = silent.bind_to_random_port("tcp://127.0.0.1")
    requests = BrokerRequests(ctx, lambda _: f"tcp://127.0.0.1:{port}", "test")
    poller = zmq.Poller()
    requests.attach(poller)
    answers = []

    def first(result):
        answers.append(result)
        requests.send(-1, ApiKey.API_VERSIONS, 0, {}, answers.append)   # try again

    try:
        requests.send(-1, ApiKey.API_VERSIONS, 0, {}, first)
        requests.close()
        assert len(answers) == 2, answers
        assert all(isinstance(a, errors.BrokerNotAvailableError) for a in answers)
        assert requests.in_flight == 0
    finally:
        silent.close()
