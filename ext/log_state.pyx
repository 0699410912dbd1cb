# cython: language_level=3
"""The facts a leader's append reads and changes, as C fields: the bases of
``PartitionLog`` (kafkalite/storage/log.py), ``LogSegment``
(kafkalite/storage/segment.py) and ``Partition``
(kafkalite/server/replica/partition.py), issue 72.

librdkafka at 100 partitions sends about one Produce request per message,
and the one-pass append (ext/leader_append.pyx) read and set about fifty of
these objects' attributes a batch through their instance dicts and slots:
a dict lookup or a walk of the type for each, and an int object made for
each number set -- 10,000 instructions of an append's 22,000 (callgrind).
As fields of a C base class each is a load or a store from C, and the
Python classes keep using them as before (``self._log_end``: a member
descriptor of the base, as quick from Python as a dict entry). Each fact
still has one owner, the object itself: there is no copy to keep in step.

The int64 fields hold ints only (a float or None assigned is a TypeError);
every other field is any object, as before. The declarations, with their
meanings where the classes define them, are in kafkalite/_ext/log_state.pxd.
Who may call: as the classes they are the bases of.
"""


cdef class PartitionLogState:
    """The base of ``PartitionLog``: its log start and end, high watermark,
    leader epoch, flush counters and what an append walks to."""


cdef class LogSegmentState:
    """The base of ``LogSegment``: its base offset, size, next offset,
    largest timestamp, index cursor and in-memory tail."""


cdef class PartitionState:
    """The base of ``Partition``: its topic and index, leadership and
    replicas, and its log."""
