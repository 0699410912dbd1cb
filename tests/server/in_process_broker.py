"""A broker's replica manager in this process, for tests that drive it step
by step: requests through the real codec and the server's dispatcher,
answers (now or later, from the purgatory) recorded as the native listener
would send them (records in frames, file regions read).

``Peers`` is the replica fetcher's transport between such brokers (what
broker_requests.BrokerRequests is between worker processes); it can hold
answers back so a test decides when a follower sees them.
"""
from __future__ import annotations

from kafkalite import errors
from kafkalite.protocol import decode_request, decode_response, encode_request, encode_response
from kafkalite.server.config import ServerConfig
from kafkalite.server.replica.replica_manager import ReplicaManager
from kafkalite.server.network.requests import Listener, RequestContext, RequestDispatcher
from kafkalite.storage.segment import FileRegion


class Broker:
    """A replica manager behind a dispatcher, with a recording responder."""

    def __init__(self, data_dir, broker_id: int = 0):
        config = ServerConfig(data_dir=str(data_dir))
        self.broker_id = broker_id
        self.rm = ReplicaManager(broker_id, str(data_dir), config.log_config)
        self.dispatcher = RequestDispatcher(f"broker {broker_id}", self.rm.handlers())
        self.answers: dict = {}
        self.on_answer: dict = {}           # correlation id -> fn(answer), called once
        self._cid = 0

    def _answered(self, cid, answer) -> None:
        self.answers[cid] = answer
        callback = self.on_answer.pop(cid, None)
        if callback is not None:
            callback(answer)

    def send_response(self, ctx, body):
        # as the native listener does: records in frames, file regions read
        h = ctx.header
        frames: list = []
        frame = encode_response(h.api_key, h.api_version, h.correlation_id, body, records_out=frames)
        frames = [f.read() if isinstance(f, FileRegion) else f for f in frames]
        self._answered(h.correlation_id, decode_response(h.api_key, h.api_version, frame,
                                                         records_in=frames)[1])

    def send_error(self, ctx, code, message):
        self._answered(ctx.header.correlation_id, errors.error_for_code(code)(message))

    def send_nothing(self, ctx):
        self._answered(ctx.header.correlation_id, None)

    def send(self, api_key, version, body, on_answer=None) -> int:
        self._cid += 1
        if on_answer is not None:
            self.on_answer[self._cid] = on_answer
        header, decoded = decode_request(encode_request(api_key, version, self._cid, "t", body))
        self.dispatcher.dispatch(RequestContext(header, Listener.NATIVE, self, None), decoded)
        return self._cid

    def lead(self, topic, partition, epoch=1, replicas=None, isr=None):
        result = self.rm.become_leader({"topic": topic, "partition": partition,
                                        "topic_id": None, "leader_epoch": epoch, "configs": {}})
        assert result["error"] == 0
        if replicas:
            self.rm.partition(topic, partition).make_leader(epoch, replicas, isr)

    def follow(self, topic, partition, leader, epoch, replicas):
        result = self.rm.become_leader({"topic": topic, "partition": partition,
                                        "topic_id": None, "leader_epoch": epoch, "leader": leader,
                                        "replicas": replicas, "isr": replicas, "configs": {}})
        assert result["error"] == 0


class Peers:
    """Requests from a replica fetcher to in-process brokers; with ``hold``
    set, answers wait in ``held`` until ``deliver()``."""

    def __init__(self, brokers: dict):
        self.brokers = brokers
        self.hold = False
        self.held: list = []
        self.sent: list = []                # (broker, api key, body) of every request

    def send(self, broker_id, api_key, version, body, callback) -> None:
        self.sent.append((broker_id, api_key, body))

        def answered(answer):
            if self.hold:
                self.held.append((callback, answer))
            else:
                callback(answer)
        self.brokers[broker_id].send(api_key, version, body, on_answer=answered)

    def deliver(self) -> None:
        held, self.held = self.held, []
        for callback, answer in held:
            callback(answer)
