"""Opening a partition directory: cleanup, recovery, and the loaded state.

Runs once per open, before anything else touches the directory:

1. finish interrupted segment swaps (swap.py), then delete leftovers of
   unfinished work: ``*.cleaned`` segments, ``*.deleted`` files, ``*.tmp``
   checkpoints, index files whose ``.log`` is gone;
2. open every segment;
3. after a clean shutdown (the ``.kafkalite_cleanshutdown`` marker), trust
   the indexes and only scan each segment's tail past its last index entry;
   otherwise recover every segment from the one holding the recovery point
   on: validate each batch's length, magic and CRC, truncate the first
   invalid one and everything after it (a torn tail; later segments are
   dropped too, as Kafka does), rebuild indexes, then fsync what was
   recovered so the recovery point can move to the log end;
4. derive log start/end offsets, clamp the high watermark and cleaner
   checkpoint into them, and bring the leader-epoch cache in line.

Who may call: PartitionLog.open only.
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from kafkalite.storage.checkpoint import PartitionCheckpoint, fsync_dir
from kafkalite.storage.config import LogConfig
from kafkalite.storage.leader_epoch import LeaderEpochFileCache
from kafkalite.storage.segment import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIX, LOG_SUFFIX,
                                       TIME_INDEX_SUFFIX, LogSegment, parse_segment_file)
from kafkalite.storage.swap import complete_interrupted_swaps

log = logging.getLogger(__name__)

CLEAN_SHUTDOWN_MARKER = ".kafkalite_cleanshutdown"


@dataclass
class LoadedLog:
    segments: list
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    high_watermark: int
    cleaner_checkpoint: int
    leader_epoch_cache: LeaderEpochFileCache
    had_clean_shutdown: bool
    recovered_segments: int
    truncated_bytes: int
    checkpoint: PartitionCheckpoint | None     # as read from disk


def _remove_leftovers(directory: str) -> None:
    names = os.listdir(directory)
    logs = set()
    for name in names:
        parsed = parse_segment_file(name)
        if parsed and parsed[1] == LOG_SUFFIX:
            logs.add(parsed[0])
    for name in names:
        path = os.path.join(directory, name)
        parsed = parse_segment_file(name)
        if name.endswith(".tmp") or name.endswith(DELETED_SUFFIX) or name.endswith(CLEANED_SUFFIX):
            os.unlink(path)
        elif parsed and parsed[1] in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and parsed[0] not in logs:
            os.unlink(path)


def load(directory: str, config: LogConfig, checkpoints=None) -> LoadedLog:
    """``checkpoints``: the owner's CheckpointFile, if it keeps the
    partition's checkpoint (checkpoint.py)."""
    os.makedirs(directory, exist_ok=True)
    marker = os.path.join(directory, CLEAN_SHUTDOWN_MARKER)
    clean = os.path.exists(marker)
    checkpoint = (PartitionCheckpoint.read(directory) if checkpoints is None
                  else checkpoints.read(directory))
    if clean and checkpoint is None:
        clean = False  # the marker is only written after the checkpoint
    if complete_interrupted_swaps(directory):
        clean = False
    _remove_leftovers(directory)

    bases = sorted(parse_segment_file(n)[0] for n in os.listdir(directory)
                   if (parse_segment_file(n) or (0, ""))[1] == LOG_SUFFIX)
    segments = [LogSegment(directory, base, config) for base in bases]
    start_from_checkpoint = checkpoint.log_start_offset if checkpoint else 0
    epochs = LeaderEpochFileCache(directory)
    recovered = truncated = 0

    if clean:
        for seg in segments:
            problem = seg.load_state()
            if problem:
                log.warning("rebuilding indexes of %s: %s", seg.path, problem)
                seg.recover()
                seg.flush()
        recovery_point = segments[-1].next_offset if segments else start_from_checkpoint
    else:
        recovery_point = checkpoint.recovery_point if checkpoint else 0
        kept, scanned = [], []
        for i, seg in enumerate(segments):
            nxt = segments[i + 1].base_offset if i + 1 < len(segments) else None
            if nxt is not None and nxt <= recovery_point:
                # Entirely below the recovery point: flushed before the stop.
                problem = seg.load_state()
                if problem is None:
                    kept.append(seg)
                    continue
                log.warning("recovering %s: %s", seg.path, problem)
            cut, scan = seg.recover(epochs.entries)
            epochs.assign_all(scan.epoch_starts)
            kept.append(seg)
            scanned.append(seg)
            if cut:
                truncated += cut
                log.warning("truncated %d bytes of %s: %s", cut, seg.path, scan.error)
                for later in segments[i + 1:]:
                    log.warning("deleting %s: it follows a corrupt segment", later.path)
                    truncated += later.size
                    later.close()
                    later.delete()
                break
        segments = kept
        recovered = len(scanned)
        for seg in scanned:
            seg.flush()
        if segments:
            recovery_point = segments[-1].next_offset

    if not segments:
        segments = [LogSegment(directory, start_from_checkpoint, config, create=True)]
        recovery_point = start_from_checkpoint
    log_end = segments[-1].next_offset
    log_start = max(start_from_checkpoint, segments[0].base_offset)
    if log_start > log_end:
        log_start = log_end
    epochs.truncate_from_end(log_end)
    epochs.truncate_from_start(log_start)
    hw = checkpoint.high_watermark if checkpoint else 0
    cleaner = checkpoint.cleaner_checkpoint if checkpoint else 0
    if clean:
        os.unlink(marker)
        fsync_dir(directory)
    return LoadedLog(
        segments=segments, log_start_offset=log_start, log_end_offset=log_end,
        recovery_point=min(recovery_point, log_end),
        high_watermark=min(max(hw, log_start), log_end),
        cleaner_checkpoint=min(max(cleaner, log_start), log_end),
        leader_epoch_cache=epochs, had_clean_shutdown=clean,
        recovered_segments=recovered, truncated_bytes=truncated, checkpoint=checkpoint)
