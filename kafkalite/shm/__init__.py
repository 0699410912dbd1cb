"""Same-host produce over shared memory: one ring per (producer, worker)
pair carries whole RecordBatch v2 blobs to the worker that owns the
partition and acks back, with doorbell FIFOs instead of busy waiting.

Main interfaces: ``ProducerRing.create()`` (client side: append, wait_acks,
unacked) and ``WorkerRing.attach(name, secret)`` (worker side: poll, ack,
release_through, wait). See ring.py for the crash contract and
ext/shm_ring.pyx for the byte layout.
"""
from kafkalite.shm.ring import (
    DEFAULT_CAPACITY, NAME_PREFIX, SHM_DIR, PeerGone, ProducerRing, RingCorrupted, RingError,
    RingFenced, RingPoisoned, RingRefused, RingTimeout, WorkerRing, entry_size,
)

__all__ = ["ProducerRing", "WorkerRing", "RingError", "RingTimeout", "PeerGone", "RingFenced",
           "RingCorrupted", "RingPoisoned", "RingRefused", "DEFAULT_CAPACITY", "NAME_PREFIX",
           "SHM_DIR", "entry_size"]
