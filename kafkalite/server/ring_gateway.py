"""Shared-memory rings of same-host producers, drained into the replica manager.

A producer on this host creates a ring in /dev/shm (kafkalite/shm/) and
asks the worker to drain it with the ``shm_attach`` extension request. Each
ring entry is (topic, partition, record batches); the gateway appends it as
the partition's leader through the replica manager (the same write path as
a Produce request, acks=1) and acknowledges it in the ring with the base
offset or an error code. Each ring's doorbell descriptor sits in the
worker's poller.

A ring is its producer's to break, never the worker's: a ring whose memory
is corrupt, impossible or truncated (the core raises RingCorrupted, and
survives the SIGBUS of a truncation: ext/shm_ring.pyx) is closed with
``CORRUPT_MESSAGE`` and the reason left in its header, where the producer
finds it (RingPoisoned; the client's RingLink answers its requests with the
error), and the worker goes on serving every other ring and partition. The
files of a ring closed that way are unlinked once its producer is gone.
A drain takes at most POLLS_PER_DRAIN polls of ENTRIES_PER_DRAIN entries,
and a busy ring is drained for at most DRAINS_PER_ARM rounds before the
loop sleeps; it then rings its own doorbell, so the loop comes straight
back to it after serving the others. At most MAX_RINGS rings are attached at a time.

Who may call: the worker, on its event-loop thread.
"""
from __future__ import annotations

import logging
import os

import zmq

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.ratelimit import RateLimitedLog

log = logging.getLogger("kafkalite.rings")

ENTRIES_PER_DRAIN = 256
POLLS_PER_DRAIN = 4
DRAINS_PER_ARM = 8
MAX_RINGS = 1024
MAX_CLOSED_RINGS = 8 * MAX_RINGS


class RingGateway:
    def __init__(self, replica_manager, poller: zmq.Poller, broker_id: int):
        self.replica_manager = replica_manager
        self.poller = poller
        self.broker_id = broker_id
        self.rings: dict[int, object] = {}     # doorbell fd -> WorkerRing
        self.closed: dict[str, int] = {}       # name of a ring closed with an error -> producer ident
        self._bad_ring = RateLimitedLog(log)

    def attach(self, body: dict) -> dict:
        """The ``shm_attach`` extension request."""
        from kafkalite.shm.ring import WorkerRing
        if len(self.rings) >= MAX_RINGS:
            raise errors.PolicyViolationError(
                f"worker {self.broker_id} drains {MAX_RINGS} rings already")
        try:
            ring = WorkerRing.attach(body["ring"])
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise errors.InvalidRequestError(f"cannot attach ring {body.get('ring')!r}: {exc}")
        except Exception as exc:    # RingCorrupted: a ring broken before it was attached
            raise errors.CorruptRecordError(f"cannot attach ring {body.get('ring')!r}: {exc}")
        self.rings[ring.fileno()] = ring
        self.poller.register(ring.fileno(), zmq.POLLIN)
        self.drain(ring)
        return {"worker": self.broker_id, "pid": os.getpid()}

    def arm(self) -> None:
        """Before the loop sleeps: drain what arrived since the last drain,
        until each ring's doorbell is armed."""
        for ring in list(self.rings.values()):
            try:
                for _ in range(DRAINS_PER_ARM):
                    if ring.arm():
                        break
                    self.drain(ring)
                else:
                    ring._nudge()       # still busy: come back after serving the rest
            except Exception as exc:
                self._close_with_error(ring, exc)

    def on_events(self, events: dict) -> None:
        for fd, ring in list(self.rings.items()):
            if fd in events:
                self.drain(ring)

    def drain(self, ring, everything: bool = False) -> None:
        """Append what the ring holds (up to POLLS_PER_DRAIN polls unless
        ``everything``); a ring that turns out broken is closed."""
        try:
            self._drain(ring, everything)
        except Exception as exc:
            self._close_with_error(ring, exc)

    def _drain(self, ring, everything: bool) -> None:
        polls = 0
        while everything or polls < POLLS_PER_DRAIN:
            polls += 1
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
                    self._bad_ring.exception("broker %d: ring append failed", self.broker_id)
                    ring.ack(seq, errors.UnknownServerError.code, -1)
                ring.release_through(seq)

    def _close_with_error(self, ring, exc: Exception) -> None:
        from kafkalite.shm.ring import RingCorrupted, RingFenced
        fd = next((fd for fd, r in self.rings.items() if r is ring), None)
        if fd is None:
            return
        del self.rings[fd]
        self.poller.unregister(fd)
        if isinstance(exc, RingFenced):      # another worker took it over: not ours to judge
            ring.close()
            return
        code = (errors.CorruptRecordError.code if isinstance(exc, RingCorrupted)
                else errors.UnknownServerError.code)
        self._bad_ring.warning("broker %d: closed ring %s of producer pid %d: %s",
                               self.broker_id, ring.name, ring.producer_pid, exc)
        if len(self.closed) >= MAX_CLOSED_RINGS:    # stop watching the oldest
            del self.closed[next(iter(self.closed))]
        self.closed[ring.name] = ring._producer_ident()
        ring.close_with_error(code, str(exc))

    def housekeeping(self) -> None:
        """Drop the rings whose producer is gone (after draining them), and
        unlink the files of closed rings whose producer is gone."""
        from kafkalite.shm.ring import process_alive, unlink_ring
        for fd, ring in list(self.rings.items()):
            if not ring.producer_alive():
                self.drain(ring, everything=True)     # it appends no more
                self._drop(fd, unlink=True)
        for name, ident in list(self.closed.items()):
            if not process_alive(ident):
                del self.closed[name]
                unlink_ring(name)

    def _drop(self, fd: int, unlink: bool) -> None:
        ring = self.rings.pop(fd, None)
        if ring is not None:
            self.poller.unregister(fd)
            ring.close(unlink=unlink)

    def close(self) -> None:
        for fd in list(self.rings):
            self._drop(fd, unlink=True)

