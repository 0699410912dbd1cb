"""The shared-memory link: Produce requests through a ring to a same-host worker.

A ``RingLink`` carries only Produce (the ring takes record batches one
way and acknowledgements back; kafkalite/shm/). It speaks the ``Link``
contract (link.py) in the same terms as the ZeroMQ link, so the producer's
sender has one code path for both: ``send(ApiKey.PRODUCE, body)`` puts
each partition's records into the ring as one entry, and once every entry
of the request is acknowledged, ``receive()`` returns an ordinary Produce
response body (base offset and error code per partition).

Flow control: when the ring is full, the entries that did not fit wait in
the link (``ready()`` is False meanwhile) and go in as the worker frees
room; the ring's doorbell is the link's only descriptor, and ``arm()``
says when acknowledgements or room arrived before the sender slept.

The ring is created and attached here, through the ``shm_attach``
extension request on a ZeroMQ link to the same worker; a transactional
producer names its transactional id and transaction version there, so the
worker verifies (v1) or adds (v2) the partitions its transactional batches
open, as it does for a Produce request.

A worker that finds the ring broken (corrupt or truncated memory) closes it
and leaves an error code and reason in its header (kafkalite/shm/): every
request not yet fully acknowledged is then answered, partition by
partition, with that error (``CORRUPT_MESSAGE``, retriable: the producer
sends those batches again on a new link), and ``alive()`` turns False.

Who may call: the producer's sender thread (the link's owner).
"""
from __future__ import annotations

import collections
import itertools

import zmq

from kafkalite import errors
from kafkalite.client.link import Link
from kafkalite.protocol import ApiKey


class RingLink(Link):
    acks_in_order = True        # the worker acknowledges entries in sequence order only

    def __init__(self, conn, ring_bytes: int, timeout: float, transactional_id: str | None = None,
                 transaction_version: int = 1, acks: int = 1):
        """Create a ring of ``ring_bytes`` and have the worker behind ``conn``
        (a Connection) drain it, acknowledging entries as ``acks`` says
        (-1: once the in-sync replicas have them); KafkaError when it will not."""
        from kafkalite.shm.ring import ProducerRing
        self.endpoint = conn.endpoint
        self.ring = ProducerRing.create(ring_bytes)
        attach = {"op": "shm_attach", "ring": self.ring.name, "acks": acks,
                  # proof that the ring is ours: only who can read it knows this
                  "secret": self.ring.attach_secret.hex(),
                  "client_id": conn.client_id}     # whose client quotas the ring counts to
        if transactional_id is not None:
            attach.update(transactional_id=transactional_id,
                          transaction_version=transaction_version)
        try:
            conn.extension(attach, timeout)
        except BaseException:
            self.ring.close(unlink=True)
            raise
        self._ids = itertools.count(1)
        self._waiting: collections.deque = collections.deque()   # (cid, topic, partition, records)
        self._entries: dict[int, tuple[int, str, int]] = {}      # ring sequence -> (cid, topic, partition)
        self._requests: dict[int, dict] = {}                     # cid -> {(topic, partition): result}
        self._expected: dict[int, int] = {}                      # cid -> entries not yet acked
        self._silent: set = set()                                # cids sent with acks=0
        self._dead = False

    def send(self, api_key: int, body: dict, *, expect_response: bool = True,
             version: int | None = None) -> int:
        if api_key != ApiKey.PRODUCE:
            raise errors.UnsupportedVersionError(
                f"a shared-memory ring carries Produce only, not {ApiKey(api_key).name}")
        cid = next(self._ids) & 0x7FFFFFFF
        count = 0
        for topic in body["topic_data"]:
            for pd in topic["partition_data"]:
                self._waiting.append((cid, topic["name"], pd["index"], pd["records"]))
                count += 1
        self._requests[cid] = {}
        self._expected[cid] = count
        if not expect_response:
            self._silent.add(cid)
        self._push()
        return cid

    def _push(self) -> None:
        """Move waiting entries into the ring while it has room."""
        waiting, ring = self._waiting, self.ring
        while waiting:
            cid, topic, partition, records = waiting[0]
            seq = ring.try_append(topic, partition, records)
            if seq < 0:
                return              # full: the doorbell rings when the worker frees room
            waiting.popleft()
            self._entries[seq] = (cid, topic, partition)

    def ready(self) -> bool:
        return not self._waiting

    def receive(self) -> list:
        if self._dead:
            return []
        try:
            acks = self.ring.poll_acks()
            refused = self.ring.worker_error()
        except Exception:           # the worker died: alive() says so, the owner retries
            self._dead = True
            return []
        out = []
        for seq, code, base in acks:
            entry = self._entries.pop(seq, None)
            if entry is not None:
                self._result(out, *entry, code, base, None)
        if refused is not None:
            self._refuse_all(out, *refused)
        elif self._waiting:
            self._push()
        return out

    def _result(self, out: list, cid: int, topic: str, partition: int, code: int, base: int,
                message: str | None) -> None:
        self._requests[cid][(topic, partition)] = (code, base, message)
        self._expected[cid] -= 1
        if self._expected[cid] == 0:
            del self._expected[cid]
            results = self._requests.pop(cid)
            if cid in self._silent:
                self._silent.discard(cid)
            else:
                out.append((cid, _produce_response(results)))

    def _refuse_all(self, out: list, code: int, message: str) -> None:
        """The worker closed the ring: what it did not acknowledge gets its error."""
        self._dead = True
        message = f"the worker closed the shared-memory ring: {message}"
        for cid, topic, partition in list(self._entries.values()):
            self._result(out, cid, topic, partition, code, -1, message)
        for cid, topic, partition, _ in self._waiting:
            self._result(out, cid, topic, partition, code, -1, message)
        self._entries.clear()
        self._waiting.clear()

    def register(self, poller: zmq.Poller) -> None:
        poller.register(self.ring.fileno(), zmq.POLLIN)

    def unregister(self, poller: zmq.Poller) -> None:
        poller.unregister(self.ring.fileno())

    def arm(self) -> bool:
        if not (self._entries or self._waiting):
            return True             # nothing can come: no need to watch the doorbell
        return self.ring.arm()

    def alive(self) -> bool:
        if self._dead:
            return False
        if (self._entries or self._waiting) and not self.ring.worker_alive():
            self._dead = True
        return not self._dead

    def close(self, linger_ms: int = 0) -> None:
        self.ring.close(unlink=True)


def _produce_response(results: dict) -> dict:
    topics: dict[str, list] = {}
    for (topic, partition), (code, base, message) in results.items():
        topics.setdefault(topic, []).append({
            "index": partition, "error_code": code, "base_offset": base if code == 0 else -1,
            "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [],
            "error_message": message})
    return {"responses": [{"name": t, "partition_responses": ps} for t, ps in topics.items()],
            "throttle_time_ms": 0}

