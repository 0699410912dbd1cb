"""``verify``: check a data directory (or one partition directory) read-only.

For every partition directory (``<topic>-<N>``, also inside the
``broker-<id>/`` directories that hold one node's replicas of replicated
partitions) it checks:

- every segment ``.log``: each batch's length, magic, CRC and offsets with
  ``scan_log`` (``--deep`` also decompresses and decodes every record),
  naming each damaged batch (file, position, the offsets it held, where
  intact batches resume) and where an invalid tail begins;
- consecutive segments do not overlap: every offset of a segment is below
  the next segment's base offset (and, via ``scan_log``, at or above its own);
- every ``.index`` entry (offset, position) names a batch that starts at
  exactly ``position`` and ends at ``offset``; entries strictly increase;
- every ``.timeindex`` entry (timestamp, offset) names a batch ending at
  ``offset`` and ``timestamp`` is the running maximum of the batches'
  maxTimestamp from the segment start through that batch (how appends, the
  cleaner, recovery and a segment roll all write it); timestamps strictly
  increase, offsets never decrease;
- index files are whole (a torn trailing entry is a problem) and have a
  ``.log`` (an orphan index is a problem);
- ``partition.checkpoint``: well formed, every offset at most the log end
  offset, log start and high watermark at or above the first segment's
  base offset (a recovery point or cleaner checkpoint below it is harmless
  and only a warning);
- ``leader-epoch-checkpoint``: well formed, entries strictly increasing.

Leftovers of interrupted work (``.cleaned``, ``.deleted``, ``.swap``,
``.tmp``) are warnings ("pending recovery"): the next open finishes or
removes them. A pending segment swap is checked as the loader will complete
it (the cleaned files replace the old segments of its range).

Nothing is modified: files are opened read-only and mapped read-only, and
no storage code that writes (PartitionLog.open, recovery, checkpoint
reading that tidies ``.tmp`` files) is called. Run it on a stopped broker:
a partition being appended to can show a torn tail.

Exit code 0 when no partition has an error (warnings allowed), 1 otherwise.
"""
from __future__ import annotations

import argparse
import errno
import mmap
import os
import sys
from dataclasses import dataclass, field

from kafkalite._ext.batch_scan import find_next_batch, scan_log
from kafkalite.errors import KafkaStorageError
from kafkalite.record import layout
from kafkalite.storage.checkpoint import PARTITION_CHECKPOINT
from kafkalite.storage.leader_epoch import LEADER_EPOCH_CHECKPOINT
from kafkalite.storage.loader import CLEAN_SHUTDOWN_MARKER
from kafkalite.storage.log import parse_topic_partition
from kafkalite.storage.remote.metadata import RemoteLogMetadataFile
from kafkalite.storage.segment import parse_segment_file, segment_name
from kafkalite.tools.dump_log import (OFFSET_INDEX, TIME_INDEX, silence_stdout,
                                      describe_os_error, read_index_entries, tool_main)

DESCRIPTION = "check every batch CRC, index entry and checkpoint of a data directory, read-only"

_CHECKPOINT_MAGIC = "kafkalite-partition-checkpoint"
_CHECKPOINT_FIELDS = ("log-start-offset", "recovery-point", "high-watermark",
                      "cleaner-checkpoint")
_SWAP_HEADER = "kafkalite-swap 1"
_MAX_DETAILS = 5            # problem lines per index file before summarizing
_PROGRESS_MIN_SEGMENTS = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("directory",
                        help="a data directory (holding <topic>-<N> partition directories) or "
                             "a single partition directory")
    parser.add_argument("--deep", action="store_true",
                        help="also decompress and decode every record of every batch")


def run(args) -> int:
    partitions = find_partitions(args.directory)
    out = _Output()
    progress = _Progress(sys.stderr)
    kind = "partition" if len(partitions) == 1 else "partitions"
    out.line(f"Verifying {args.directory}: {len(partitions)} {kind}"
             f"{' (deep: decoding every record)' if args.deep else ''}")
    totals = Report("total", args.directory)
    failed = 0
    for path in partitions:
        try:
            report = verify_partition(path, deep=args.deep, progress=progress)
        except OSError as exc:   # unreadable file or directory: report it, go on
            progress.clear()
            report = _unreadable(path, exc)
        totals.add(report)
        failed += bool(report.errors)
        for line in report.lines():
            out.line(line)
        out.flush()
    verdict = "FAILED" if failed else "OK"
    where = f" in {_plural(failed, 'partition')}" if failed else ""
    out.line(f"{verdict}: {len(partitions)} {kind}, {totals.counts()}; "
             f"{_plural(len(totals.errors), 'error')}{where}, "
             f"{_plural(len(totals.warnings), 'warning')}")
    out.flush()
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    return tool_main("verify-data-dir", DESCRIPTION, add_arguments, run, argv)


# ---- finding partitions ----------------------------------------------------------------

def _is_partition_dir(names: list[str]) -> bool:
    return any(parse_segment_file(n) or n in (PARTITION_CHECKPOINT, LEADER_EPOCH_CHECKPOINT)
               for n in names)


def _broker_dir(path: str, names: list[str]) -> bool:
    """Whether ``path`` is a ``broker-<id>/`` directory of a data directory:
    the replicas of the partitions made replicated on one node live in one
    per broker (server/controller/metadata.py ``replica_dir``). Its name
    parses as a partition of a topic named ``broker``; its content -- no
    segment file, only ``<topic>-<N>`` directories -- tells them apart."""
    name = os.path.basename(os.path.normpath(path))
    return (name.startswith("broker-") and name[len("broker-"):].isdigit()
            and not _is_partition_dir(names)
            and all(parse_topic_partition(n) and os.path.isdir(os.path.join(path, n))
                    for n in names))


def find_partitions(path: str) -> list[str]:
    """The partition directories to check for ``path``: itself when it is
    one, else its ``<topic>-<N>`` subdirectories and those of its
    ``broker-<id>/`` directories (sorted by topic, partition, broker)."""
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    if not os.path.isdir(path):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
    names = os.listdir(path)
    if _is_partition_dir(names):
        return [path]
    found = []
    for name in names:
        tp = parse_topic_partition(name)
        sub = os.path.join(path, name)
        if not (tp and os.path.isdir(sub)):
            continue
        inner = os.listdir(sub)
        if _broker_dir(sub, inner):
            found += [(parse_topic_partition(n), name, os.path.join(sub, n)) for n in inner]
        else:
            found.append((tp, "", sub))
    if not found:
        raise ValueError(f"{path}: neither a data directory (no <topic>-<N> partition "
                         f"directories in it) nor a partition directory (no segment files)")
    return [p for _, _, p in sorted(found)]


def partition_name(path: str) -> str:
    """``<topic>-<N>``, after its ``broker-<id>/`` when it is in one."""
    tp = parse_topic_partition(path)
    if not tp:
        return path
    parent = os.path.dirname(os.path.normpath(path))
    broker = os.path.basename(parent)
    if broker.startswith("broker-") and broker[len("broker-"):].isdigit() \
            and not _is_partition_dir(os.listdir(parent)):
        return "%s/%s-%d" % (broker, *tp)
    return "%s-%d" % tp


# ---- results -----------------------------------------------------------------------------

@dataclass
class Report:
    name: str
    path: str
    segments: int = 0
    batches: int = 0
    records: int = 0
    bytes: int = 0
    errors: list = field(default_factory=list)
    warnings: list = field(default_factory=list)
    state: str = ""

    def error(self, message: str) -> None:
        self.errors.append(message)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def add(self, other: "Report") -> None:
        self.segments += other.segments
        self.batches += other.batches
        self.records += other.records
        self.bytes += other.bytes
        self.errors += other.errors
        self.warnings += other.warnings

    def counts(self) -> str:
        return (f"{_plural(self.segments, 'segment')}, {_plural(self.batches, 'batch', 'es')}, "
                f"{_plural(self.records, 'record')}, {_plural(self.bytes, 'byte')} checked")

    def lines(self) -> list[str]:
        if self.errors:
            verdict = _plural(len(self.errors), "error")
            if self.warnings:
                verdict += ", " + _plural(len(self.warnings), "warning")
        else:
            verdict = "OK" + (f", {_plural(len(self.warnings), 'warning')}"
                              if self.warnings else "")
        state = f"; {self.state}" if self.state else ""
        head = f"{self.name}: {verdict} ({self.counts()}{state})"
        return ([head] + [f"  ERROR {m}" for m in self.errors]
                + [f"  WARN  {m}" for m in self.warnings])


@dataclass
class _Segment:
    base: int
    log: str | None = None
    index: str | None = None
    timeindex: str | None = None
    # filled by the check
    first_offset: int = -1
    last_offset: int = -1          # -1: no valid batch
    next_offset: int = -1


def _unreadable(path: str, exc: OSError) -> Report:
    report = Report(partition_name(path), path)
    report.error(f"cannot be read: {describe_os_error(exc)}")
    return report


def _plural(n: int, word: str, suffix: str = "s") -> str:
    return f"{n:,} {word}{'' if n == 1 else suffix}"


# ---- one partition ------------------------------------------------------------------------

def verify_partition(path: str, *, deep: bool = False, progress=None) -> Report:
    report = Report(partition_name(path), path)
    names = sorted(os.listdir(path))
    segments = _segment_view(path, names, report)
    report.state = ("closed cleanly" if CLEAN_SHUTDOWN_MARKER in names
                    else "not closed cleanly: the next open runs recovery")
    if not segments:
        report.error(f"{path}: no segment .log files (an opened partition always has one)")
    total = len(segments)
    show = progress is not None and total >= _PROGRESS_MIN_SEGMENTS
    for i, seg in enumerate(segments):
        if show:
            progress.show(f"[{i + 1}/{total} segments] {report.name}")
        following = segments[i + 1] if i + 1 < total else None
        _check_segment(seg, following, deep, report)
        report.segments += 1
    if show:
        progress.clear()
    if segments:
        first_base = segments[0].base
        last = segments[-1]
        log_end = last.next_offset if last.next_offset >= 0 else last.base
        _check_partition_checkpoint(path, first_base, log_end, report)
        _check_leader_epochs(path, log_end, report)
    return report


def _segment_view(path: str, names: list[str], report: Report) -> list[_Segment]:
    """The segments as the loader will see them: pending swaps completed,
    leftovers of unfinished work set aside (and reported as warnings)."""
    join = lambda name: os.path.join(path, name)  # noqa: E731
    files: dict[int, _Segment] = {}
    cleaned: dict[tuple[int, str], str] = {}
    swaps = []
    for name in names:
        parsed = parse_segment_file(name)
        if name.endswith(".tmp"):
            report.warn(f"pending recovery: {join(name)} is an unfinished checkpoint write "
                        f"(the next open removes it)")
        elif parsed is None:
            continue
        elif parsed[1] in (".log", ".index", ".timeindex"):
            seg = files.setdefault(parsed[0], _Segment(parsed[0]))
            setattr(seg, parsed[1][1:], join(name))
        elif parsed[1] == ".swap":
            swaps.append((parsed[0], name))
        elif parsed[1].endswith(".cleaned"):
            cleaned[(parsed[0], parsed[1][:-len(".cleaned")])] = join(name)
        elif parsed[1].endswith(".deleted"):
            report.warn(f"pending recovery: {join(name)} is a deleted file not yet unlinked "
                        f"(the next open removes it)")
    for start, name in swaps:
        try:
            with open(join(name), encoding="ascii") as f:
                lines = f.read().splitlines()
            if lines[0] != _SWAP_HEADER:
                raise ValueError(lines[0])
            _, lo, hi = lines[1].split()
            lo, hi = int(lo), int(hi)
            if lo != start:
                raise ValueError(f"range starts at {lo}")
        except (ValueError, IndexError, UnicodeDecodeError) as exc:
            report.warn(f"pending recovery: {join(name)} is not a swap manifest this version "
                        f"wrote ({exc}); the next open deletes it and the .cleaned files")
            continue
        report.warn(f"pending recovery: {join(name)} is an unfinished swap of the segments in "
                    f"[{lo}, {hi}) for a cleaned segment; the next open completes it (checked "
                    f"here as completed)")
        for base in [b for b in files if lo < b < hi]:
            del files[base]
        for suffix in (".log", ".index", ".timeindex"):
            replacement = cleaned.pop((lo, suffix), None)
            if replacement is not None:
                seg = files.setdefault(lo, _Segment(lo))
                setattr(seg, suffix[1:], replacement)
    for (base, suffix), file in sorted(cleaned.items()):
        report.warn(f"pending recovery: {file} is output of an interrupted compaction "
                    f"(the next open deletes it)")
    segments = []
    for base in sorted(files):
        seg = files[base]
        if seg.log is None:
            for orphan in (seg.index, seg.timeindex):
                if orphan:
                    report.error(f"{orphan}: index file without a segment "
                                 f"{segment_name(base)}.log (orphan)")
            continue
        for kind in ("index", "timeindex"):
            if getattr(seg, kind) is None:
                report.warn(f"{os.path.join(path, segment_name(base))}.{kind} is missing (the "
                            f"next open creates it empty)")
        segments.append(seg)
    return segments


def _check_segment(seg: _Segment, following: _Segment | None, deep: bool,
                   report: Report) -> None:
    fd = os.open(seg.log, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        offset_entries = _load_index(seg.index, OFFSET_INDEX, seg.base, report)
        time_entries = _load_index(seg.timeindex, TIME_INDEX, seg.base, report)
        if size == 0:
            _check_indexes(seg, None, 0, 0, False, None, offset_entries, time_entries, report)
            return
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapped:
            # CRCs, framing and offset order in one C pass (the loader's rule) ...
            scan = scan_log(mapped, min_offset=seg.base, verify_crc=True, deep=deep)
            valid = scan.valid_bytes
            report.batches += scan.batch_count
            report.records += scan.record_count
            report.bytes += size
            if scan.batch_count:
                seg.first_offset = scan.first_offset
                seg.next_offset = scan.next_offset
                seg.last_offset = scan.next_offset - 1
            if scan.error:
                _report_damage(seg, mapped, scan, size, deep, report)
            # ... then the valid batches' headers against the indexes and the next segment.
            _check_indexes(seg, mapped, valid, size, bool(scan.error),
                           following.base if following is not None else None,
                           offset_entries, time_entries, report)
    finally:
        os.close(fd)


def _report_damage(seg: _Segment, mapped, scan, size: int, deep: bool, report: Report) -> None:
    """Name each damaged stretch of the segment: where it lies, which offsets
    it holds (a damaged batch's records are unreadable, and readers get
    CORRUPT_MESSAGE there), and where intact batches resume; or, when none
    follow, the invalid tail (what a crash leaves, and recovery cuts)."""
    valid, error = scan.valid_bytes, scan.error
    next_offset = scan.next_offset if scan.batch_count else seg.base
    while True:
        resume = find_next_batch(mapped, valid + 1, next_offset)
        if resume < 0:
            report.error(f"{seg.log}: {error}; the {size - valid:,} bytes from position "
                         f"{valid} to the end of the file are not valid batches")
            return
        resumed = scan_log(mapped, start=resume, min_offset=next_offset, verify_crc=True,
                           deep=deep)
        first = resumed.first_offset
        held = (f"offset {next_offset} is" if first - 1 == next_offset
                else f"offsets {next_offset} to {first - 1} are")
        report.error(f"{seg.log}: damaged batch at position {valid} ({error}): {held} "
                     f"unreadable (readers get CORRUPT_MESSAGE there); intact batches resume "
                     f"at position {resume}, offset {first}")
        report.batches += resumed.batch_count
        report.records += resumed.record_count
        if seg.first_offset < 0:
            seg.first_offset = first
        seg.next_offset = resumed.next_offset
        seg.last_offset = resumed.next_offset - 1
        if not resumed.error:
            return
        valid, error, next_offset = resumed.valid_bytes, resumed.error, resumed.next_offset


def _load_index(path: str | None, kind: str, base: int, report: Report) -> list:
    if path is None:
        return []
    entries, torn = read_index_entries(path, kind, base)
    if torn:
        size = 8 if kind == OFFSET_INDEX else 12
        report.error(f"{path}: {torn} trailing bytes at position {len(entries) * size} do not "
                     f"make a whole {size}-byte entry (a torn write)")
    return entries


class _Details:
    """Collects one index file's problems, keeping the first few in full."""

    def __init__(self, path: str, report: Report):
        self.path, self.report, self.extra = path, report, 0
        self.count = 0

    def __call__(self, message: str) -> None:
        self.count += 1
        if self.count <= _MAX_DETAILS:
            self.report.error(f"{self.path}: {message}")
        else:
            self.extra += 1

    def close(self) -> None:
        if self.extra:
            self.report.error(f"{self.path}: {self.extra:,} more bad "
                              f"{'entry' if self.extra == 1 else 'entries'}")


def _check_indexes(seg: _Segment, mapped, valid: int, size: int, damaged: bool,
                   next_base: int | None, offset_entries: list, time_entries: list,
                   report: Report) -> None:
    """Walk the headers of the valid batches once: every batch must end
    below the next segment's base offset, every offset index entry must sit
    on a batch boundary and name that batch's last offset, and every time
    index entry must name a batch's last offset and the running maximum of
    batch max timestamps up to it."""
    bad_offset = _Details(seg.index, report)
    bad_time = _Details(seg.timeindex, report)
    by_position: dict[int, list] = {}
    for slot, (offset, position) in enumerate(offset_entries):
        if slot and not (offset > offset_entries[slot - 1][0]
                         and position > offset_entries[slot - 1][1]):
            prev = offset_entries[slot - 1]
            bad_offset(f"entry {slot} (offset {offset}, position {position}) does not "
                       f"increase on entry {slot - 1} (offset {prev[0]}, position {prev[1]})")
        by_position.setdefault(position, []).append((slot, offset))
    by_offset: dict[int, list] = {}
    for slot, (timestamp, offset) in enumerate(time_entries):
        if slot:
            prev_ts, prev_off = time_entries[slot - 1]
            if timestamp <= prev_ts or offset < prev_off:
                bad_time(f"entry {slot} (timestamp {timestamp}, offset {offset}) is out of "
                         f"order after entry {slot - 1} (timestamp {prev_ts}, offset "
                         f"{prev_off}): timestamps must increase and offsets not decrease")
        by_offset.setdefault(offset, []).append((slot, timestamp))

    running_max = -1
    position = 0
    limit = next_base if next_base is not None else 1 << 63
    if mapped is not None and (by_position or by_offset or seg.last_offset >= limit):
        header = layout.HEADER.unpack_from
        overlap_reported = False
        while position < valid:
            (base, length, _, _, _, _, delta, _, max_ts) = header(mapped, position)
            last_offset = base + delta
            if last_offset >= limit and not overlap_reported:
                report.error(f"{seg.log}: batch at position {position} has offsets "
                             f"{base}..{last_offset}, at or above the next segment's base "
                             f"offset {next_base} ({segment_name(next_base)}.log): the "
                             f"segments overlap")
                overlap_reported = True
            if max_ts > running_max:
                running_max = max_ts
            hits = by_position.pop(position, None)
            if hits:
                for slot, offset in hits:
                    if offset != last_offset:
                        bad_offset(f"entry {slot} (offset {offset}, position {position}): the "
                                   f"batch at position {position} ends at offset {last_offset}"
                                   f", not {offset}")
            hits = by_offset.pop(last_offset, None)
            if hits:
                for slot, timestamp in hits:
                    if timestamp != running_max:
                        bad_time(f"entry {slot} (timestamp {timestamp}, offset {last_offset}): "
                                 f"the largest batch timestamp up to offset {last_offset} is "
                                 f"{running_max}, not {timestamp}")
            position += layout.LOG_OVERHEAD + length
    # Entries that matched no batch. In a damaged .log (already reported)
    # those past the damage cannot be judged, and they are left out.
    for position, hits in sorted(by_position.items()):
        if damaged and position >= valid:
            continue
        for slot, offset in hits:
            where = (f"past the end of the log ({size:,} bytes)" if position >= size
                     else "not at a batch boundary")
            bad_offset(f"entry {slot} (offset {offset}, position {position}): position "
                       f"{position} is {where}")
    if not damaged:
        for offset, hits in sorted(by_offset.items()):
            for slot, timestamp in hits:
                bad_time(f"entry {slot} (timestamp {timestamp}, offset {offset}): no batch "
                         f"of the segment ends at offset {offset}")
    bad_offset.close()
    bad_time.close()


# ---- checkpoints -------------------------------------------------------------------------

def _check_partition_checkpoint(path: str, first_base: int, log_end: int,
                                report: Report) -> None:
    file = os.path.join(path, PARTITION_CHECKPOINT)
    try:
        with open(file, "rb") as f:
            text = f.read().decode("ascii")
    except FileNotFoundError:
        report.warn(f"{file} is missing (the next open recovers every segment)")
        return
    except UnicodeDecodeError:
        report.error(f"{file}: not ASCII text (the next open ignores it and recovers every "
                     f"segment)")
        return
    lines = text.splitlines()
    try:
        header = lines[0].split() if lines else []
        if header != [_CHECKPOINT_MAGIC, "1"]:
            raise ValueError(f"unknown header {lines[0] if lines else ''!r}")
        values = {}
        for line in lines[1:]:
            if not line.strip():
                continue
            key, value = line.split()
            values[key] = int(value)
        missing = [k for k in _CHECKPOINT_FIELDS if k not in values]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
    except ValueError as exc:
        report.error(f"{file} is malformed ({exc}); the next open ignores it and recovers "
                     f"every segment")
        return
    first = "first segment"
    remote = _remote_span(path, report)
    if remote is not None and remote[0] <= first_base <= remote[1] + 1:
        # a tiered log (KIP-405): its log start may lie in the remote segments
        first_base, first = remote[0], "first remote segment"
    bounds = f"the log's offsets [{first_base} ({first}), {log_end} (log end)]"
    for key in _CHECKPOINT_FIELDS:
        value = values[key]
        if value > log_end:
            report.error(f"{file}: {key} {value} is past {bounds}")
        elif value < first_base:
            if key in ("log-start-offset", "high-watermark"):
                report.error(f"{file}: {key} {value} is before {bounds}")
            else:
                report.warn(f"{file}: {key} {value} is before {bounds} (harmless: the next "
                            f"open clamps it)")
    if values["high-watermark"] < values["log-start-offset"] <= log_end:
        report.error(f"{file}: high-watermark {values['high-watermark']} is below "
                     f"log-start-offset {values['log-start-offset']}")


def _remote_span(path: str, report: Report) -> tuple[int, int] | None:
    """A tiered partition's first and last remote offsets (its
    remote-log-metadata), None when none are remote."""
    try:
        metadata = RemoteLogMetadataFile(path)
    except KafkaStorageError as exc:
        report.error(str(exc))
        return None
    if metadata.log_start_offset is None:
        return None
    return metadata.log_start_offset, metadata.highest_offset


def _check_leader_epochs(path: str, log_end: int, report: Report) -> None:
    file = os.path.join(path, LEADER_EPOCH_CHECKPOINT)
    try:
        with open(file, "rb") as f:
            text = f.read().decode("ascii")
    except FileNotFoundError:
        return      # written on the first epoch assignment only
    except UnicodeDecodeError:
        report.error(f"{file}: not ASCII text")
        return
    lines = [line.split() for line in text.splitlines() if line.strip()]
    try:
        if len(lines) < 2 or len(lines[0]) != 1 or len(lines[1]) != 1:
            raise ValueError("expected a version line and a count line")
        if int(lines[0][0]) != 0:
            raise ValueError(f"unknown version {lines[0][0]}")
        count = int(lines[1][0])
        if len(lines) - 2 != count:
            raise ValueError(f"the count line says {count} entries, the file has "
                             f"{len(lines) - 2}")
        entries = []
        for parts in lines[2:]:
            if len(parts) != 2:
                raise ValueError(f"entry {' '.join(parts)!r} is not '<epoch> <offset>'")
            entries.append((int(parts[0]), int(parts[1])))
    except ValueError as exc:
        report.error(f"{file} is malformed ({exc})")
        return
    for i, (epoch, offset) in enumerate(entries):
        if epoch < 0 or offset < 0:
            report.error(f"{file}: entry {i} (epoch {epoch}, offset {offset}) is negative")
        if i and not (epoch > entries[i - 1][0] and offset > entries[i - 1][1]):
            report.error(f"{file}: entry {i} (epoch {epoch}, start offset {offset}) does not "
                         f"increase on entry {i - 1} (epoch {entries[i - 1][0]}, start offset "
                         f"{entries[i - 1][1]})")
        # an epoch starting at the log end is a leader that has written
        # nothing yet (the log keeps it: storage/leader_epoch.py); only one
        # past the end speaks of a lost tail
        if offset > log_end:
            report.warn(f"{file}: epoch {epoch} starts at offset {offset}, past the log end "
                        f"offset {log_end} (the next open drops it)")


# ---- output -------------------------------------------------------------------------------

class _Output:
    """stdout that survives its reader going away: after EPIPE the lines go
    to /dev/null and the check runs on, so the exit code stays meaningful."""

    def __init__(self):
        self._broken = False

    def line(self, text: str) -> None:
        if not self._broken:
            try:
                sys.stdout.write(text + "\n")
            except BrokenPipeError:
                self._gone()

    def flush(self) -> None:
        if not self._broken:
            try:
                sys.stdout.flush()
            except BrokenPipeError:
                self._gone()

    def _gone(self) -> None:
        self._broken = True
        silence_stdout()


class _Progress:
    """``\\r[i/n segments]`` on stderr when it is a terminal; nothing otherwise."""

    def __init__(self, stream):
        self._stream = stream
        try:
            self._enabled = stream.isatty()
        except (AttributeError, ValueError):
            self._enabled = False
        self._width = 0

    def show(self, text: str) -> None:
        if self._enabled:
            self._stream.write("\r" + text.ljust(self._width))
            self._stream.flush()
            self._width = max(self._width, len(text))

    def clear(self) -> None:
        if self._enabled and self._width:
            self._stream.write("\r" + " " * self._width + "\r")
            self._stream.flush()
            self._width = 0
