"""Restoring a task's state stores from their changelogs: checkpoint files,
the state restore listener and restore progress.

Checkpoint (Kafka's ``.checkpoint``, one per task state directory
``<state.dir>/<application.id>/<task>/.checkpoint``): the changelog offset
each persistent store's local database reflects, so that a task that starts
on the same state directory restores only the changelog's tail from there.
The format is Kafka's OffsetCheckpoint text file::

    0                          (version)
    2                          (number of entries)
    app-counts-changelog 3 1204
    app-other-changelog 3 88

written to ``.checkpoint.tmp`` and renamed over the old one (a reader never
sees half a file). The runtime writes one when a task closes cleanly and,
under at_least_once, at a commit once its stores wrote 10,000 changelog
records since the last (Kafka's OFFSET_DELTA_THRESHOLD_FOR_CHECKPOINT), after
the changelog records were acknowledged and the databases flushed to files.
Under exactly_once_v2 the checkpoint is deleted once a task's restore is done
(as Kafka does without KIP-892): while the task processes, its databases may
hold changes of a transaction that will abort, so after a crash they are
wiped and restored whole; only a clean close writes it again. In-memory
stores are never checkpointed.

Progress: ``RestoreProgress`` keeps, per task and store, the changelog
partition, the offsets the restore starts and ends at and the records
restored; the runtime also writes it as JSON to the task directory's
``.restore`` file (at the start, at most every half second, at the end), which
``kafkalite streams describe --state-dir`` prints.

Who may call: the runtime's stream thread (``restore_tasks``); the CLI reads
the files with ``read_checkpoint`` and ``read_progress``.
"""
from __future__ import annotations

import json
import os
import time

from kafkalite.client import TopicPartition
from kafkalite.streams.records import by_partition

CHECKPOINT_FILE = ".checkpoint"
PROGRESS_FILE = ".restore"
CHECKPOINT_DELTA = 10_000       # changelog records between at_least_once checkpoints


class StateRestoreListener:
    """Kafka's StateRestoreListener: called from the stream thread for each
    store restored from its changelog. Override what you need."""

    def on_restore_start(self, topic_partition: TopicPartition, store_name: str,
                         starting_offset: int, ending_offset: int) -> None:
        pass

    def on_batch_restored(self, topic_partition: TopicPartition, store_name: str,
                          batch_end_offset: int, num_restored: int) -> None:
        pass

    def on_restore_end(self, topic_partition: TopicPartition, store_name: str,
                       total_restored: int) -> None:
        pass


# ---- checkpoint files ----
def read_checkpoint(task_dir: str) -> dict:
    """{(changelog topic, partition): offset} of ``task_dir``'s checkpoint
    ({} if there is none or it cannot be read: a full restore is safe)."""
    try:
        with open(os.path.join(task_dir, CHECKPOINT_FILE)) as f:
            lines = f.read().split("\n")
        if lines[0].strip() != "0":
            return {}
        n = int(lines[1])
        out = {}
        for line in lines[2:2 + n]:
            topic, partition, offset = line.rsplit(" ", 2)
            out[(topic, int(partition))] = int(offset)
        return out if len(out) == n else {}
    except (OSError, ValueError, IndexError):
        return {}


def write_checkpoint(task_dir: str, offsets: dict) -> None:
    os.makedirs(task_dir, exist_ok=True)
    path = os.path.join(task_dir, CHECKPOINT_FILE)
    body = "".join(f"{t} {p} {o}\n" for (t, p), o in sorted(offsets.items()))
    with open(path + ".tmp", "w") as f:
        f.write(f"0\n{len(offsets)}\n{body}")
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def delete_checkpoint(task_dir: str) -> None:
    try:
        os.unlink(os.path.join(task_dir, CHECKPOINT_FILE))
    except FileNotFoundError:
        pass


def read_progress(task_dir: str) -> dict:
    """{store: {changelog, partition, start, end, restored, done}} of the
    last restore in ``task_dir`` ({} if none)."""
    try:
        with open(os.path.join(task_dir, PROGRESS_FILE)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


class RestoreProgress:
    """Restore progress of one instance's tasks, in memory and in each task
    directory's ``.restore`` file."""

    def __init__(self):
        self.tasks: dict = {}       # task id -> {store: progress dict}
        self._written = 0.0

    def start(self, task, store, topic, partition, start, end) -> dict:
        entry = {"changelog": topic, "partition": partition, "start": start, "end": end,
                 "restored": 0, "done": False}
        self.tasks.setdefault(task.id, {})[store] = entry
        self._write(task, force=True)
        return entry

    def batch(self, task, entry, n) -> None:
        entry["restored"] += n
        self._write(task)

    def end(self, task, entry) -> None:
        entry["done"] = True
        self._write(task, force=True)

    def _write(self, task, force=False) -> None:
        if task.dir is None or (not force and time.monotonic() - self._written < 0.5):
            return
        self._written = time.monotonic()
        os.makedirs(task.dir, exist_ok=True)
        path = os.path.join(task.dir, PROGRESS_FILE)
        with open(path + ".tmp", "w") as f:
            json.dump(self.tasks.get(task.id, {}), f)
        os.replace(path + ".tmp", path)


def start_offsets(task, consumer, use_checkpoint: bool) -> list:
    """[(changelog TopicPartition, store name, store, start, high
    watermark)] of ``task``'s logged stores, each store made ready to take
    the changelog from ``start``: a standby's stores (``task.restored_to``,
    warm and in memory) from where the standby got to; a persistent store
    whose offset the task's checkpoint names from there (its window
    indexes rebuilt); any other store wiped, from the changelog's start."""
    checkpoint = read_checkpoint(task.dir) if use_checkpoint and task.dir else {}
    warm = task.restored_to or {}
    out = []
    for topic, name in task.changelogs.items():
        store = task.stores[name]
        tp = TopicPartition(topic, task.partition)
        low, high = consumer.get_watermark_offsets(tp)
        low = max(low, 0)
        start = warm.get((topic, task.partition))
        # an offset beyond the log's end (the changelog deleted and made
        # again, e.g. by a reset) or before its start does not hold
        if start is None or not low <= start <= high:
            start = checkpoint.get((topic, task.partition))
            if not store.persistent or start is None or not low <= start <= high:
                store.wipe()
                start = low
            elif hasattr(store, "reindex"):
                store.reindex()
        out.append((tp, name, store, start, high))
    return out


def restore_tasks(tasks, consumer, listener: StateRestoreListener | None,
                  progress: RestoreProgress, use_checkpoint: bool) -> int:
    """Every logged store of ``tasks`` from its changelog partition, to the
    end, all partitions read at once by ``consumer`` (as Kafka's changelog
    reader does: one fetch serves many stores), each from where
    ``start_offsets`` says. -> records restored."""
    pending: dict = {}      # (topic, partition) -> [task, store name, store, entry, high, n]
    done = []
    for task in tasks:
        for tp, name, store, start, high in start_offsets(task, consumer, use_checkpoint):
            topic = tp.topic
            entry = progress.start(task, name, topic, task.partition, start, high)
            if listener is not None:
                listener.on_restore_start(tp, name, start, high)
            state = [task, name, store, entry, high, 0]
            (pending.__setitem__((topic, task.partition), state) if start < high
             else done.append((tp, state)))
    total = 0
    if pending:
        consumer.assign([TopicPartition(t, p, progress.tasks[s[0].id][s[1]]["start"])
                         for (t, p), s in pending.items()])
        reading = [TopicPartition(t, p) for t, p in pending]
        while reading:
            batch = consumer.consume_batch(0.2)
            if batch.num_rows:
                for (topic, partition), rows in by_partition(batch):
                    state = pending[(topic, partition)]
                    task, name, store, entry = state[:4]
                    store.restore(rows.column("key").to_pylist(), rows.column("value"))
                    state[5] += rows.num_rows
                    progress.batch(task, entry, rows.num_rows)
                    if listener is not None:
                        listener.on_batch_restored(TopicPartition(topic, partition), name,
                                                   rows.column("offset")[-1].as_py(),
                                                   rows.num_rows)
            for tp in consumer.position(reading):
                state = pending[(tp.topic, tp.partition)]
                if tp.offset >= state[4]:
                    done.append((TopicPartition(tp.topic, tp.partition), state))
                    reading = [r for r in reading if (r.topic, r.partition) !=
                               (tp.topic, tp.partition)]
        consumer.unassign()
    for tp, (task, name, _, entry, _, n) in done:
        progress.end(task, entry)
        if listener is not None:
            listener.on_restore_end(tp, name, n)
        total += n
    return total


def checkpoint_task(task, consumer) -> None:
    """Write ``task``'s checkpoint: its persistent stores flushed to files,
    at their changelog partitions' ends (every change the task made is
    acknowledged there: the caller flushed or committed first)."""
    offsets = {}
    for topic, name in task.changelogs.items():
        store = task.stores[name]
        if store.persistent:
            store.checkpoint_flush()
            offsets[(topic, task.partition)] = consumer.get_watermark_offsets(
                TopicPartition(topic, task.partition))[1]
    if offsets:
        write_checkpoint(task.dir, offsets)
