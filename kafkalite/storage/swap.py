"""Crash-safe replacement of a run of segments by one cleaned segment.

The cleaner writes the replacement as ``<start>.log.cleaned`` (and its
``.index.cleaned`` / ``.timeindex.cleaned`` / ``.txnindex.cleaned``, the
last only when the cleaned segment keeps aborted transactions), fsyncs it, and then commits
with a swap manifest, written atomically:

    <start>.swap      text: "kafkalite-swap 1" / "range <start> <end>"

meaning "the segments with base offsets in [start, end) are replaced by the
cleaned segment based at start". After the manifest exists the swap is
*redone* until it completes -- by the cleaner right away, or by the loader
after a crash:

    1. unlink the old segments in (start, end): index files first, .log last
       (a .log is what makes a segment exist for the loader);
    2. rename the cleaned files over <start>'s: indexes first, .log last
       (while the cleaned .log is still there, a <start>.txnindex without a
       cleaned one belongs to the old segment and is unlinked);
    3. fsync the directory, unlink the manifest, fsync again.

Every step is idempotent, so a crash at any moment leaves either the old
segments (no manifest: the loader deletes stray .cleaned files) or a swap
that the next load finishes. Either way the log is valid and complete.

Who may call: the partition's owner (cleaner) and the loader, never at once.
"""
from __future__ import annotations

import os

from kafkalite.storage.checkpoint import fsync_dir, write_atomically
from kafkalite.storage.faults import crash_point
from kafkalite.storage.segment import (CLEANED_SUFFIX, INDEX_SUFFIX, INDEX_SUFFIXES, LOG_SUFFIX,
                                       TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, parse_segment_file,
                                       segment_name, segment_path)

SWAP_SUFFIX = ".swap"
_HEADER = "kafkalite-swap 1"


def manifest_path(directory: str, start: int) -> str:
    return os.path.join(directory, segment_name(start) + SWAP_SUFFIX)


def commit_swap(directory: str, start: int, end: int) -> None:
    """Commit and perform the swap of [start, end) by the cleaned segment
    at ``start`` (whose files must already be fsynced)."""
    write_atomically(manifest_path(directory, start), f"{_HEADER}\nrange {start} {end}\n".encode())
    crash_point("swap-after-manifest")
    _perform(directory, start, end)


def complete_interrupted_swaps(directory: str) -> int:
    """Finish every swap whose manifest exists; returns how many."""
    done = 0
    for name in sorted(os.listdir(directory)):
        parsed = parse_segment_file(name)
        if parsed is None or parsed[1] != SWAP_SUFFIX:
            continue
        path = os.path.join(directory, name)
        try:
            with open(path, encoding="ascii") as f:
                lines = f.read().splitlines()
            if lines[0] != _HEADER:
                raise ValueError(lines[0])
            _, start, end = lines[1].split()
            start, end = int(start), int(end)
        except (ValueError, IndexError):
            # write_atomically never leaves a partial manifest, so this one
            # was not written by us; the cleaned files it would name are
            # removed with the other strays.
            os.unlink(path)
            continue
        _perform(directory, start, end)
        done += 1
    return done


def _perform(directory: str, start: int, end: int) -> None:
    for name in sorted(os.listdir(directory)):
        parsed = parse_segment_file(name)
        if parsed is None:
            continue
        base, rest = parsed
        if start < base < end and rest in INDEX_SUFFIXES:
            os.unlink(os.path.join(directory, name))
    for name in sorted(os.listdir(directory)):
        parsed = parse_segment_file(name)
        if parsed is not None and start < parsed[0] < end and parsed[1] == LOG_SUFFIX:
            os.unlink(os.path.join(directory, name))
            crash_point("swap-mid-unlink")
    crash_point("swap-after-unlink")
    log_pending = os.path.exists(segment_path(directory, start, LOG_SUFFIX, CLEANED_SUFFIX))
    for suffix in (INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX, LOG_SUFFIX):
        cleaned = segment_path(directory, start, suffix, CLEANED_SUFFIX)
        if os.path.exists(cleaned):
            os.replace(cleaned, segment_path(directory, start, suffix))
            crash_point("swap-mid-rename")
        elif suffix == TXN_INDEX_SUFFIX and log_pending:
            # the cleaned segment keeps no aborted transaction
            try:
                os.unlink(segment_path(directory, start, suffix))
            except FileNotFoundError:
                pass
    fsync_dir(directory)
    os.unlink(manifest_path(directory, start))
    fsync_dir(directory)
