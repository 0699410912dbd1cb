"""Opening a partition directory: cleanup, recovery, and the loaded state.

Runs once per open, before anything else touches the directory:

1. finish interrupted segment swaps (swap.py), then delete leftovers of
   unfinished work: ``*.cleaned`` segments, ``*.deleted`` files, ``*.tmp``
   checkpoints, index files whose ``.log`` is gone;
2. open every segment;
3. after a clean shutdown (the ``.kafkalite_cleanshutdown`` marker), trust
   the indexes and only scan each segment's tail past its last index entry;
   otherwise recover every segment from the one holding the recovery point
   on: validate each batch's length, magic and CRC; at the first invalid
   one, keep the intact batches that follow it when there are any (the
   damaged stretch is cut out and the rest becomes a segment of its own,
   leaving a gap of offsets, reported in ``damage``), else truncate there
   (a torn tail); later segments are kept. Rebuild indexes, then fsync what was
   recovered so the recovery point can move to the log end -- unless the
   owner asks not to (``flush_recovered`` False, the coordinators' internal
   topics) and recovery cut or salvaged nothing: then the recovery point
   stays where the checkpoint had it, as Kafka's LogLoader moves it only
   with a flush, and the next unclean open scans those segments again (it
   scans the active one whatever the recovery point says). A recovered
   segment's transaction index must hold exactly its ABORT markers: one
   that does not (an entry past the truncation, or one lost with the
   tail) is reset, and the log refills it from the markers when it
   replays its producer state;
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
from kafkalite.storage.segment import (CLEANED_SUFFIX, DELETED_SUFFIX, INDEX_SUFFIXES, LOG_SUFFIX,
                                       LogSegment, parse_segment_file)
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
    # the base of the first recovered segment whose transaction index was
    # reset; the log refills it and the later ones' by replaying markers
    txn_index_rebuild_from: int | None = None
    damage: list = None             # what recovery dropped, one line each


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
        elif parsed and parsed[1] in INDEX_SUFFIXES and parsed[0] not in logs:
            os.unlink(path)


def _flush_scanned(directory: str, scanned: list, segments: list, start: int) -> int:
    """Step 3 above: the scanned segments made durable; the recovery point
    that gives (the log's end, or ``start`` for a log with no segment)."""
    for seg in scanned:
        seg.flush()
    if scanned:
        fsync_dir(directory)
    return segments[-1].next_offset if segments else start


def _recover_segments(segments: list, clean: bool, recovery_point, epochs) -> tuple:
    """Step 3 above over ``segments`` in order, up to the flush: (kept
    segments, scanned ones, bases of rescued ones, bytes truncated, the
    first offset whose transaction index must be rebuilt or None, the
    damage lines)."""
    truncated = 0
    rebuild_txn_from = None
    damage: list[str] = []          # what recovery had to drop, one line each
    kept, scanned, salvaged = [], [], set()
    queue = list(segments)
    while queue:
        seg = queue.pop(0)
        # after a clean shutdown every segment was flushed; otherwise those
        # wholly below the recovery point were
        flushed = clean or (bool(queue) and queue[0].base_offset <= recovery_point)
        if flushed and seg.base_offset not in salvaged:
            problem = seg.load_state()
            if problem is None:
                kept.append(seg)
                continue
            log.warning("recovering %s: %s", seg.path, problem)
        cut, scan, rescued = seg.recover()
        if not clean:
            epochs.rebuild(seg.base_offset, seg.next_offset, scan.epoch_starts)
        kept.append(seg)
        scanned.append(seg)
        seg.txn_index.truncate_to(seg.next_offset)
        if [t.last_offset for t in seg.txn_index.entries] != scan.abort_markers:
            seg.txn_index.reset()
            if rebuild_txn_from is None:
                rebuild_txn_from = seg.base_offset
        if cut:
            truncated += cut
            if rescued is not None:
                what = (f"{seg.path}: dropped {cut} damaged bytes, offsets {seg.next_offset} to "
                        f"{rescued.base_offset - 1} ({scan.error}); the batches from offset "
                        f"{rescued.base_offset} on are kept in a segment of their own")
                salvaged.add(rescued.base_offset)
                queue.insert(0, rescued)
            else:
                what = f"{seg.path}: truncated {cut} bytes from offset {seg.next_offset} ({scan.error})"
            log.warning("%s", what)
            damage.append(what)
    return kept, scanned, salvaged, truncated, rebuild_txn_from, damage


def load(directory: str, config: LogConfig, checkpoints=None,
         remote_span: tuple[int, int] | None = None,
         flush_recovered: bool = True) -> LoadedLog:
    """``checkpoints``: the owner's CheckpointFile, if it keeps the
    partition's checkpoint (checkpoint.py). ``remote_span``: a tiered log's
    first and last remote offsets; when they reach the first local segment,
    the log start may lie below it (down to the remote start).
    ``flush_recovered``: step 3 above."""
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
    recovery_point = (checkpoint.recovery_point if checkpoint else 0) if not clean else None
    kept, scanned, salvaged, truncated, rebuild_txn_from, damage = _recover_segments(
        segments, clean, recovery_point, epochs)
    segments = kept
    recovered = len(scanned)
    if clean or flush_recovered or truncated or salvaged:
        recovery_point = _flush_scanned(directory, scanned, segments, start_from_checkpoint)

    if not segments:
        segments = [LogSegment(directory, start_from_checkpoint, config, create=True)]
        recovery_point = start_from_checkpoint
    log_end = segments[-1].next_offset
    first_local = segments[0].base_offset
    if remote_span is not None and remote_span[0] <= first_local <= remote_span[1] + 1:
        first_local = remote_span[0]
    log_start = max(start_from_checkpoint, first_local)
    if log_start > log_end:
        log_start = log_end
    epochs.truncate_from_end(log_end)
    epochs.truncate_from_start(log_start)
    hw = checkpoint.high_watermark if checkpoint else 0
    cleaner = checkpoint.cleaner_checkpoint if checkpoint else 0
    if clean:
        os.unlink(marker)
        fsync_dir(directory)
    elif recovered:
        # one line per log opened after an unclean stop (Kafka logs the same)
        log.info("%s: recovered after an unclean shutdown: %d segment(s) scanned, %d byte(s) "
                 "truncated; log end offset %d", directory, recovered, truncated, log_end)
    return LoadedLog(
        segments=segments, log_start_offset=log_start, log_end_offset=log_end,
        recovery_point=min(recovery_point, log_end),
        high_watermark=min(max(hw, log_start), log_end),
        cleaner_checkpoint=min(max(cleaner, log_start), log_end),
        leader_epoch_cache=epochs, had_clean_shutdown=clean,
        recovered_segments=recovered, truncated_bytes=truncated, checkpoint=checkpoint,
        txn_index_rebuild_from=rebuild_txn_from, damage=damage)
