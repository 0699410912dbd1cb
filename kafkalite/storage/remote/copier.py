"""Where a tiered partition's store calls run (Kafka's RemoteLogManager
thread pools): off the worker's loop, on executors the whole process
shares.

- ``METADATA_THREAD``: the shared remote log metadata's reads and writes
  (metadata_store.py), every partition's, in the order submitted on one
  thread: a partition's versions are written one after another, each
  knowing the one before.
- ``COPIER``: the copies of segments and the deletes of their objects, on
  a pool of ``COPIER_THREADS`` (Kafka's
  ``remote.log.manager.copier.thread.pool.size``): copies of several
  partitions, and of one partition's next segments, overlap. A copy or
  delete waits (``after``) for the metadata write that lists it, so that no
  object is put or deleted that the shared metadata does not name first;
  remote_log.py still finishes a partition's copies in offset order, so a
  later segment is never listed as copied before an earlier one.

Deadlock-free by construction: the metadata thread waits on no copy it
could be queued behind (a fenced write waits only on copies handed over
before it, which wait on earlier writes), and a task on the pool waits
only on a write (the other executor) or on a pool task submitted before it
(FIFO: running or done by then).

Who may call: remote_log.py, from any thread; ``configure_copier`` from a
broker's start, before its first copy.
"""
from __future__ import annotations

import concurrent.futures

from kafkalite.storage.background import BackgroundThread
from kafkalite.storage.remote.metadata import RemoteLogSegmentMetadata, RemoteLogSegmentState
from kafkalite.storage.remote.storage_manager import RemoteLogSegmentId

COPIER_THREADS = 4          # default of the pool's size (Kafka's is 10, for bigger brokers)

METADATA_THREAD = BackgroundThread("kafkalite-remote-metadata")
COPIER = BackgroundThread("kafkalite-remote-copy", COPIER_THREADS)


def configure_copier(threads: int) -> None:
    """The copier pool's size (the broker's setting), before its first copy."""
    COPIER.resize(threads)


def after(publish: concurrent.futures.Future | None, copy: concurrent.futures.Future | None,
          fn, *args):
    """Run ``fn`` (on the copier pool) only once the metadata write before
    it, ``publish``, succeeded (raising its error otherwise), and, for the
    delete of an abandoned copy's objects, once that ``copy`` has ended:
    nothing it puts lands after the delete."""
    if publish is not None:
        publish.result()
    if copy is not None:
        concurrent.futures.wait([copy])
    return fn(*args)


def due_for_copy(segments, after: int, last_stable_offset: int):
    """The rolled ``segments`` (oldest first) a copy is due for: past offset
    ``after`` (the last copied, or handed over), not empty, and wholly below
    ``last_stable_offset`` (Kafka copies nothing a reader could not yet see)."""
    for seg in segments:
        if seg.next_offset - 1 <= after or seg.is_empty:
            continue
        if seg.next_offset > last_stable_offset:
            return
        yield seg


def reserve(previous: RemoteLogSegmentMetadata | None, entries, partition: str,
            now: int) -> RemoteLogSegmentMetadata:
    """The entry a leader's every write of the shared metadata lists for its
    next copy, before that segment is copied: COPY_SEGMENT_STARTED at the
    offset after the last one copied or under way (``entries``), its end
    not known yet (the base offset stands for it). A copy of that segment
    alone then starts under its id without a write of its own, and a new
    leader after a crash deletes what it put, as it does for any copy
    started and not finished: a segment costs one write (its FINISHED,
    with the next reservation), not two (issue 71). ``previous`` is kept
    while it still reserves the same offset."""
    base = max([-1, *(m.end_offset for m in entries if m.state in (
        RemoteLogSegmentState.COPY_SEGMENT_STARTED,
        RemoteLogSegmentState.COPY_SEGMENT_FINISHED))]) + 1
    if previous is not None and previous.base_offset == base:
        return previous
    return RemoteLogSegmentMetadata(RemoteLogSegmentId.generate(partition).id, base, base, -1,
                                    (), 0, RemoteLogSegmentState.COPY_SEGMENT_STARTED, now)
