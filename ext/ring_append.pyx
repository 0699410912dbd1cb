# cython: language_level=3
"""A shared-memory ring's entries appended as their partition's leader in
C, for the ring gateway's drain (kafkalite/server/replica/ring_gateway.py,
issue 72).

At 100 partitions a ring producer's entries carry one or a few records
each, one partition each, so the drain's cost is per entry: a tuple, a
bytearray, the Python append path's dozen calls and an ack and release
call each, measured at 17-23 us of worker CPU a message. ``LeaderSink`` is
the EntrySink that WorkerCore.append_entries (shm_ring.pyx) hands each
entry to: the one-pass leader append of a Produce request
(leader_append.pyx ``append_batch``) on the ring's private copy, so an
entry is read, appended, acknowledged and released with no Python call or
object of its own but its partition's key.

It takes only what that append serves (its contract: a partition led
here with no other replica, the common batch, ...) and no transactional
batch (the gateway verifies those with the coordinator first); every
other entry it declines, and the gateway appends it through
ReplicaManager.append, which answers it as before. A batch the log
refuses is answered as the gateway's Python path answers it: the error's
code (UNKNOWN_SERVER_ERROR, logged, for an error without one), never
appended again (the log may have taken it before the error, as a flush's).
The gateway uses it only for rings whose entries need no check of their
own: no authorizer, no quota, acks 0 or 1.
"""
from libc.stdint cimport int16_t, int32_t, int64_t

from kafkalite._ext.leader_append cimport Appended, append_batch
from kafkalite._ext.shm_ring cimport EntrySink
from kafkalite.errors import KafkaError, UnknownServerError

cdef int UNKNOWN_SERVER_ERROR = UnknownServerError.code

cdef extern from "wire.h" nogil:
    enum:
        KL_OFF_ATTRIBUTES
        KL_BATCH_HEADER_SIZE
        KL_ATTR_TRANSACTIONAL


cdef class LeaderSink(EntrySink):
    """Appends the entries of rings drained by ``rm`` (a ReplicaManager);
    ``failed()`` is called, inside the handler, for an error that has no
    Kafka code (the gateway logs it)."""
    cdef object rm
    cdef object failed

    def __init__(self, rm, failed):
        self.rm = rm
        self.failed = failed

    cdef int take(self, str topic, int32_t partition, object batch, unsigned char *data,
                  Py_ssize_t size, int64_t *base_offset, int16_t *error_code) except -1:
        cdef Appended done
        # the attributes' low byte holds the transactional bit
        # (ReplicaManager.transaction_start)
        if size < KL_BATCH_HEADER_SIZE or data[KL_OFF_ATTRIBUTES + 1] & KL_ATTR_TRANSACTIONAL:
            return 0
        part = self.rm.partitions.get((topic, partition))
        if part is None:
            return 0
        try:
            if not append_batch(self.rm, part, batch, 0, size, data, &done):
                return 0
        except KafkaError as exc:
            return _refused(exc.code, base_offset, error_code)
        except Exception:
            try:
                self.failed()
            except Exception:
                pass
            return _refused(UNKNOWN_SERVER_ERROR, base_offset, error_code)
        base_offset[0] = done.base_offset
        error_code[0] = 0
        return 1


cdef inline int _refused(int code, int64_t *base_offset, int16_t *error_code) noexcept:
    base_offset[0] = -1
    error_code[0] = <int16_t>code
    return 1
