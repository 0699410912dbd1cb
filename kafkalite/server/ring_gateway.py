"""Shared-memory rings of same-host producers, drained into the replica manager.

A producer on this host creates a ring in /dev/shm (kafkalite/shm/) and
asks the worker to drain it with the ``shm_attach`` extension request. Each
ring entry is (topic, partition, record batches); the gateway appends it as
the partition's leader through the replica manager (the same write path as
a Produce request, acks=1) and acknowledges it in the ring with the base
offset or an error code. Each ring's doorbell descriptor sits in the
worker's poller.

Who may call: the worker, on its event-loop thread.
"""
from __future__ import annotations

import logging
import os

import zmq

from kafkalite import errors
from kafkalite.errors import KafkaError

log = logging.getLogger("kafkalite.rings")

ENTRIES_PER_DRAIN = 256


class RingGateway:
    def __init__(self, replica_manager, poller: zmq.Poller, broker_id: int):
        self.replica_manager = replica_manager
        self.poller = poller
        self.broker_id = broker_id
        self.rings: dict[int, object] = {}     # doorbell fd -> WorkerRing

    def attach(self, body: dict) -> dict:
        """The ``shm_attach`` extension request."""
        from kafkalite.shm.ring import WorkerRing
        try:
            ring = WorkerRing.attach(body["ring"])
        except (OSError, ValueError) as exc:
            raise errors.InvalidRequestError(f"cannot attach ring {body.get('ring')!r}: {exc}")
        self.rings[ring.fileno()] = ring
        self.poller.register(ring.fileno(), zmq.POLLIN)
        self.drain(ring)
        return {"worker": self.broker_id, "pid": os.getpid()}

    def arm(self) -> None:
        """Before the loop sleeps: drain what arrived since the last drain,
        until each ring's doorbell is armed."""
        for ring in list(self.rings.values()):
            while not ring.arm():
                self.drain(ring)

    def on_events(self, events: dict) -> None:
        for fd, ring in list(self.rings.items()):
            if fd in events:
                self.drain(ring)

    def drain(self, ring) -> None:
        while True:
            entries = ring.poll(ENTRIES_PER_DRAIN)
            if not entries:
                return
            for seq, topic, partition, batch in entries:
                try:
                    info = self.replica_manager.append(
                        self.replica_manager.partition(topic, partition), batch)
                    ring.ack(seq, 0, info.first_offset)
                except KafkaError as exc:
                    ring.ack(seq, exc.code, -1)
                except Exception:
                    log.exception("broker %d: ring append failed", self.broker_id)
                    ring.ack(seq, errors.UnknownServerError.code, -1)
                ring.release_through(seq)

    def housekeeping(self) -> None:
        """Drop the rings whose producer is gone (after draining them)."""
        for fd, ring in list(self.rings.items()):
            if not ring.producer_alive():
                self.drain(ring)
                self._drop(fd, unlink=True)

    def _drop(self, fd: int, unlink: bool) -> None:
        ring = self.rings.pop(fd, None)
        if ring is not None:
            self.poller.unregister(fd)
            ring.close(unlink=unlink)

    def close(self) -> None:
        for fd in list(self.rings):
            self._drop(fd, unlink=True)
