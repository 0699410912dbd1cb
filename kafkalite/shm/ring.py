"""Same-host produce through shared memory: a producer hands whole
RecordBatch v2 blobs to the worker that owns the partition, without a
socket, and gets one ack per batch back.

    producer                                  worker (owns the partitions)
    ring = ProducerRing.create()              ring = WorkerRing.attach(name, secret)
    (send ring.name and ring.attach_secret    while ring.wait(timeout):
     to the worker)
    seq = ring.append(topic, p, batch)            for seq, topic, p, batch in ring.poll():
    for seq, err, base in ring.wait_acks(1):          info = log.append(batch)  # a copy
        ...                                           ring.ack(seq, 0, info.first_offset)
                                                      ring.release_through(seq)

The byte layout, memory ordering and wake-up handshake are documented at the
top of ext/shm_ring.pyx (kafkalite._ext.shm_ring), the non-blocking core that
the classes here extend. This module adds what blocks: waiting for room, acks
or entries on the doorbell FIFOs with poll(2) (a few microseconds of spinning
first, never a sleep loop), and noticing a dead peer through a pidfd (a
/proc check every LIVENESS_POLL_S where pidfds are unavailable).

Event loops: call arm(), and if it returns True, poll fileno() with your
other descriptors (zmq.Poller accepts it); it turns readable on news from the
peer. poll() / poll_acks() disarm again. A worker that never arms is never
woken through the fd, and the producer pays no syscall for it.

Crash contract:
  - the worker dies (even kill -9): worker_alive() turns False, append() and
    wait_acks() raise PeerGone instead of waiting, and unacked() lists exactly
    the entries with no published ack. A new WorkerRing.attach on the same
    ring (next epoch) is handed exactly those entries again; alternatively
    close the ring and re-send them elsewhere.
  - the producer dies: producer_alive() turns False, poll() still returns
    every complete entry (never a torn one), and close(unlink=True) removes
    the segment and FIFOs from /dev/shm.
  - the producer writes what the protocol never writes, or truncates the
    segment: the worker's poll() raises RingCorrupted (never a crash: see
    the core's "A hostile or broken producer"), the worker closes the ring
    with close_with_error(), and the producer's append() and wait_acks()
    raise RingPoisoned with the worker's error code and reason
    (worker_error()); entries without an ack were not appended.

Permissions: the segment and both doorbell FIFOs are created with
O_EXCL and mode 0600 (whatever the umask), owned by the producer's user, so
no other local user can open, read or write a ring. A worker (of the same
user, or root) attaches it only when asked over its native socket
(``shm_attach``, which CURVE authenticates and the authorizer checks when
they are on: server/replica/ring_gateway.py) by someone who shows the
ring's attach secret -- which only a process that can read the segment
knows -- and, on a local door, whose uid owns the files; it never follows
a link to them (WorkerRing.attach, the core's "A peer naming a ring").

Who may call: one thread per handle, in the process that created or attached
it (see the core's contract for fork).
"""
from __future__ import annotations

import math
import os
import select
import time

from kafkalite._ext.shm_ring import (
    DEFAULT_CAPACITY, NAME_PREFIX, PID_BITS, SHM_DIR, PeerGone, ProducerCore, RingCorrupted,
    RingError, RingFenced, RingPoisoned, RingRefused, RingTimeout, WorkerCore, entry_size, process_alive,
    unlink_ring,
)

__all__ = ["ProducerRing", "WorkerRing", "RingError", "RingTimeout", "PeerGone", "RingFenced",
           "RingCorrupted", "RingPoisoned", "RingRefused", "DEFAULT_CAPACITY", "NAME_PREFIX",
           "SHM_DIR", "entry_size"]

# Without pidfds, a blocked side re-checks its peer's liveness this often.
LIVENESS_POLL_S = 0.1
_PID_MASK = (1 << PID_BITS) - 1


class _PeerWatch:
    """A pidfd on the peer named by a header ident (pid + start time): it
    turns readable when that process exits, zombies included, so a blocked
    side wakes the moment its peer dies."""

    __slots__ = ("ident", "fd", "dead")

    def __init__(self):
        self.ident, self.fd, self.dead = 0, -1, False

    def _follow(self, ident: int) -> None:
        if ident == self.ident:
            return
        self.close()
        self.ident = ident
        if not ident:
            return
        try:
            fd = os.pidfd_open(ident & _PID_MASK)
        except ProcessLookupError:
            self.dead = True
            return
        except (OSError, AttributeError):
            return                      # no pidfd here: alive() reads /proc instead
        if not process_alive(ident):    # exited already, or the pid was recycled
            os.close(fd)
            self.dead = True
            return
        self.fd = fd

    def alive(self, ident: int) -> bool:
        self._follow(ident)
        if not ident or self.dead:
            return False
        if self.fd >= 0:
            poller = select.poll()
            poller.register(self.fd, select.POLLIN)
            return not poller.poll(0)
        return process_alive(ident)

    def block(self, bell: int, ident: int, timeout: float | None) -> None:
        """Wait until ``bell`` or the peer's pidfd is readable, or ``timeout``."""
        self._follow(ident)
        poller = select.poll()
        poller.register(bell, select.POLLIN)
        if self.fd >= 0:
            poller.register(self.fd, select.POLLIN)
        elif ident and not self.dead:
            timeout = LIVENESS_POLL_S if timeout is None else min(timeout, LIVENESS_POLL_S)
        poller.poll(None if timeout is None else math.ceil(timeout * 1000))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
        self.ident, self.fd, self.dead = 0, -1, False


def _remaining(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class _RingEnd:
    """What both ends of a ring add to their core alike: the watch on the
    peer's process (made on first use: the core's create and attach make
    the object without calling __init__), use as a context manager, and a
    close when the object is collected."""

    @property
    def _watch(self) -> _PeerWatch:
        watch = self.__dict__.get("_peer_watch")
        if watch is None:
            watch = self.__dict__["_peer_watch"] = _PeerWatch()
        return watch

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class ProducerRing(_RingEnd, ProducerCore):
    """The producer's end of a ring. ``ProducerRing.create(capacity, name)``
    makes the segment and doorbells; hand ``name`` and ``attach_secret`` to
    the worker.

    Inherited from the core (non-blocking): try_append, poll_acks, unacked,
    arm / disarm, fileno, name, attach_secret, capacity, max_entry_size, next_sequence,
    in_flight, worker_pid, worker_epoch, worker_error, close(unlink=True).
    """

    def append(self, topic: str, partition: int, batch, timeout: float | None = None) -> int:
        """Append one entry, waiting for room up to ``timeout`` seconds (None:
        no limit); its sequence number. RingTimeout when no room came,
        PeerGone when the ring's worker died or detached (RingPoisoned when
        it closed the ring over what it found in it; nothing written either
        way), ValueError when the entry can never fit (see try_append).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            seq = self.try_append(topic, partition, batch)
            if seq >= 0:
                return seq
            self._check_worker()
            remaining = _remaining(deadline)
            if remaining == 0.0:
                raise RingTimeout(f"ring {self.name}: no room for the entry within {timeout} s "
                                  f"({self.in_flight} entries in flight)")
            if self._spin():
                continue
            self.arm()
            try:
                seq = self.try_append(topic, partition, batch)   # room may have come meanwhile
                if seq >= 0:
                    return seq
                self._watch.block(self.fileno(), self._worker_ident(), remaining)
            finally:
                self._wake_up()

    def wait_acks(self, timeout: float | None) -> list[tuple[int, int, int]]:
        """Acks as poll_acks returns them, waiting up to ``timeout`` seconds
        for at least one; [] on timeout. PeerGone when none can come because
        the worker died or detached."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            acks = self.poll_acks()
            if acks:
                return acks
            self._check_worker()
            remaining = _remaining(deadline)
            if remaining == 0.0:
                return []
            if self.in_flight and self._spin():
                continue
            if self.arm():
                try:
                    self._watch.block(self.fileno(), self._worker_ident(), remaining)
                finally:
                    self._wake_up()
            else:
                self.disarm()

    def worker_alive(self) -> bool:
        """True when a worker is attached and its process is running."""
        return self._watch.alive(self._worker_ident())

    def _wake_up(self) -> None:
        # Drain on every wake, not only when the worker took our flag: attach
        # and close ring unconditionally, and a stale byte must not turn the
        # next wait into a busy loop.
        self.disarm()
        self._drain()

    def _check_worker(self) -> None:
        error = self.worker_error()
        if error is not None:
            raise RingPoisoned(f"ring {self.name} was closed by its worker: {error[1]}; "
                               f"{self.in_flight} entries in flight, see unacked()", error[0])
        if self.worker_epoch and not self.worker_alive():
            raise PeerGone(f"ring {self.name} has no live worker (attached {self.worker_epoch} "
                           f"times); {self.in_flight} entries in flight, see unacked()")

    def close(self, unlink: bool = True) -> None:
        """Close the ring for the worker and, by default, unlink the segment
        and both FIFOs. Idempotent."""
        self._watch.close()
        super().close(unlink)

    def __repr__(self) -> str:
        if self.closed:
            return f"<ProducerRing {self.name} closed>"
        return (f"<ProducerRing {self.name} capacity={self.capacity} "
                f"next_sequence={self.next_sequence} in_flight={self.in_flight}>")


class WorkerRing(_RingEnd, WorkerCore):
    """The worker's end of a ring. ``WorkerRing.attach(name, secret, owner)``
    checks that the asker showed the ring's secret and owns its files
    (RingRefused otherwise), validates the segment, takes the worker slot
    (next epoch) and resumes after the last acked entry.

    Inherited from the core (non-blocking): poll, ack, release_through,
    arm / disarm, fileno, name, capacity, epoch, next_sequence, producer_pid,
    close_with_error, close(unlink=False).
    """

    def wait(self, timeout: float | None) -> bool:
        """Block until entries are waiting to be polled (True) or ``timeout``
        seconds pass (False). Returns False early when the producer is gone;
        poll() still hands over whatever it completed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self._ready():
                return True
            if not self.producer_alive():
                return self._ready()
            remaining = _remaining(deadline)
            if remaining == 0.0:
                return False
            if self._spin():
                continue
            if self.arm():
                try:
                    self._watch.block(self.fileno(), self._producer_ident(), remaining)
                finally:
                    self._wake_up()
            else:
                self.disarm()

    def producer_alive(self) -> bool:
        """True while the producer's process runs and it has not closed the ring."""
        return self._producer_open() and self._watch.alive(self._producer_ident())

    def _wake_up(self) -> None:
        self.disarm()
        self._drain()

    def close(self, unlink: bool = False) -> None:
        """Detach (the producer sees worker_alive() False); with ``unlink``,
        also remove the segment and FIFOs. Idempotent."""
        self._watch.close()
        super().close(unlink)

    def __repr__(self) -> str:
        if self.closed:
            return f"<WorkerRing {self.name} closed>"
        return f"<WorkerRing {self.name} epoch={self.epoch} next_sequence={self.next_sequence}>"
