"""``dump-log``: print the batches (and records) of segment and index files.

Modeled on Kafka's ``kafka-dump-log``. Arguments are ``.log`` segment files,
``.index`` / ``.timeindex`` files, or partition directories (every segment's
``.log``, ``.index`` and ``.timeindex`` in offset order). Output, per file::

    Dumping <path>
    Log starting offset: 0
    baseOffset: 0 lastOffset: 4 count: 5 ... position: 0 CreateTime: 1000 size: 146 ...
    | offset: 0 CreateTime: 1000 keySize: 1 valueSize: 3 headerKeys: [h] key: k payload: v

(record lines with ``--print-records``; control batches show the
transaction marker instead of key and payload). Index files print
``offset: X position: Y`` and time indexes ``timestamp: X offset: Y``.

A segment is dumped up to its first invalid batch -- the same rule the
loader's recovery applies (length, magic, CRC, increasing offsets, see
``scan_log``) -- and a ``Stopped at position P: <why>`` line ends it; the exit
code is then 1. Nothing is ever written to the files: they are opened
read-only and memory-mapped read-only. Output is streamed, and a reader that
closes the pipe early (``| head``) ends the dump quietly with exit code 0.

The helpers at the bottom (``tool_main``, ``classify_path``,
``read_index_entries``) are shared with ``verify``.
"""
from __future__ import annotations

import argparse
import errno
import mmap
import os
import struct
import sys

from kafkalite._ext.batch_scan import scan_log
from kafkalite.errors import KafkaError
from kafkalite.record import CODEC_NAMES, RecordBatch, layout
from kafkalite.storage.index import OFFSET_ENTRY, TIME_ENTRY
from kafkalite.storage.segment import parse_segment_file

DESCRIPTION = "print the batches (and records) of segment and index files, like kafka-dump-log"

LOG, OFFSET_INDEX, TIME_INDEX = "log", "index", "timeindex"
_KIND_ORDER = {LOG: 0, OFFSET_INDEX: 1, TIME_INDEX: 2}
_LENGTH = struct.Struct(">i")
ENTRY_SIZES = {OFFSET_INDEX: OFFSET_ENTRY.size, TIME_INDEX: TIME_ENTRY.size}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", metavar="PATH",
                        help="a segment .log file, an .index or .timeindex file, or a partition "
                             "directory (all its segment files in offset order)")
    parser.add_argument("--print-records", action="store_true",
                        help="also print every record (offset, timestamp, sizes, header keys, "
                             "key and payload)")
    parser.add_argument("--max-field-bytes", type=int, default=64, metavar="N",
                        help="print at most N bytes of each key and payload (default: 64; "
                             "0: no limit)")


def run(args) -> int:
    if args.max_field_bytes < 0:
        raise ValueError(f"--max-field-bytes must be >= 0, not {args.max_field_bytes}")
    files = []
    for path in args.paths:      # resolve everything first: fail before printing anything
        files.extend(expand_path(path))
    out = sys.stdout
    ok = True
    try:
        for kind, base, path in files:
            out.write(f"Dumping {path}\n")
            if kind == LOG:
                ok &= _dump_log(path, base, args.print_records, args.max_field_bytes, out)
            else:
                ok &= _dump_index(path, kind, base, out)
        out.flush()
    except BrokenPipeError:
        silence_stdout()
        return 0
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    return tool_main("dump-log", DESCRIPTION, add_arguments, run, argv)


# ---- logs ---------------------------------------------------------------------------

def _dump_log(path: str, base: int, print_records: bool, limit: int, out) -> bool:
    out.write(f"Log starting offset: {base}\n")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return True
        with mmap.mmap(fd, size, access=mmap.ACCESS_READ) as mapped:
            # One C pass finds the valid prefix (the loader's recovery rule);
            # the batches in it are then printed one at a time.
            scan = scan_log(mapped, min_offset=base, verify_crc=True)
            valid = scan.valid_bytes
            position = 0
            while position < valid:
                length = _LENGTH.unpack_from(mapped, position + layout.OFF_LENGTH)[0]
                batch = RecordBatch(mapped[position:position + layout.LOG_OVERHEAD + length])
                out.write(format_batch(batch, position, True))
                if print_records:
                    try:
                        lines = format_records(batch, limit)
                    except (KafkaError, ValueError) as exc:
                        out.write(f"Stopped at position {position}: the records of the batch at "
                                  f"position {position} cannot be decoded: {exc}\n")
                        return False
                    out.write(lines)
                position += batch.size_in_bytes
            if scan.error is None:
                return True
            # Show the offending batch's header when it is at least framed.
            try:
                length = _LENGTH.unpack_from(mapped, valid + layout.OFF_LENGTH)[0]
                if length >= layout.MIN_BATCH_LENGTH:
                    bad = RecordBatch(mapped[valid:valid + layout.LOG_OVERHEAD + length])
                    out.write(format_batch(bad, valid, bad.is_valid()))
            except (KafkaError, struct.error, ValueError):
                pass
            out.write(f"Stopped at position {valid}: {scan.error}; {size - valid} of the "
                      f"file's {size} bytes were not dumped\n")
            return False
    finally:
        os.close(fd)


def format_batch(batch: RecordBatch, position: int, valid: bool) -> str:
    horizon = batch.delete_horizon_ms
    codec = CODEC_NAMES.get(batch.compression, "unknown(%d)" % batch.compression)
    return (f"baseOffset: {batch.base_offset} lastOffset: {batch.last_offset} "
            f"count: {batch.record_count} baseSequence: {batch.base_sequence} "
            f"lastSequence: {batch.last_sequence} producerId: {batch.producer_id} "
            f"producerEpoch: {batch.producer_epoch} "
            f"partitionLeaderEpoch: {batch.partition_leader_epoch} "
            f"isTransactional: {_bool(batch.is_transactional)} "
            f"isControl: {_bool(batch.is_control)} "
            f"deleteHorizonMs: {'none' if horizon is None else horizon} position: {position} "
            f"{_timestamp_type(batch.timestamp_type)}: {batch.max_timestamp} "
            f"size: {batch.size_in_bytes} magic: {batch.magic} "
            f"compresscodec: {codec} "
            f"crc: {batch.crc} isvalid: {_bool(valid)}\n")


def format_records(batch: RecordBatch, limit: int) -> str:
    """The ``| offset: ...`` lines of a batch's records (decompressing it)."""
    lines = []
    ts_name = _timestamp_type(batch.timestamp_type)
    control = batch.is_control
    for rec in batch.records():
        key, value = rec.key, rec.value
        head = (f"| offset: {rec.offset} {ts_name}: {rec.timestamp} "
                f"keySize: {-1 if key is None else len(key)} "
                f"valueSize: {-1 if value is None else len(value)} "
                f"headerKeys: [{','.join(format_text(k) for k, _ in rec.headers)}]")
        if control:
            lines.append(f"{head} {format_control(key, value)}\n")
        else:
            lines.append(f"{head} key: {format_field(key, limit)} "
                         f"payload: {format_field(value, limit)}\n")
    return "".join(lines)


def format_control(key, value) -> str:
    """Kafka's control record: key (version int16, type int16), value for
    transaction markers (version int16, coordinatorEpoch int32)."""
    if key is None or len(key) < 4:
        return f"controlKey: {format_field(key, 0)} (malformed)"
    kind = struct.unpack_from(">h", key, 2)[0]
    name = {0: "ABORT", 1: "COMMIT"}.get(kind)
    if name is None:
        return f"controlType: {kind} payload: {format_field(value, 0)}"
    if value is None or len(value) < 6:
        return f"endTxnMarker: {name} coordinatorEpoch: unknown (malformed value)"
    return f"endTxnMarker: {name} coordinatorEpoch: {struct.unpack_from('>i', value, 2)[0]}"


def format_field(data, limit: int) -> str:
    """A key or value for one output line: ``null``, the text when it is
    printable UTF-8, else Python's bytes repr; cut to ``limit`` bytes (0: no
    limit) with a ``...(N more bytes)`` suffix."""
    if data is None:
        return "null"
    data = bytes(data)
    cut = len(data) - limit if 0 < limit < len(data) else 0
    if cut:
        data = data[:limit]
    text = None
    for trim in range(4 if cut else 1):    # a cut may split a UTF-8 character
        try:
            text = data[:len(data) - trim].decode("utf-8")
        except UnicodeDecodeError:
            continue
        if text.isprintable():
            cut += trim
            data = data[:len(data) - trim]
        else:
            text = None
        break
    shown = text if text is not None else repr(data)
    return f"{shown}...({cut} more bytes)" if cut else shown


def format_text(text: str) -> str:
    return text if text.isprintable() else repr(text)


def _bool(flag: bool) -> str:
    return "true" if flag else "false"


def _timestamp_type(kind: int) -> str:
    return "LogAppendTime" if kind == 1 else "CreateTime"


# ---- indexes ----------------------------------------------------------------------------

def _dump_index(path: str, kind: str, base: int, out) -> bool:
    entries, torn = read_index_entries(path, kind, base)
    if kind == OFFSET_INDEX:
        for offset, position in entries:
            out.write(f"offset: {offset} position: {position}\n")
    else:
        for timestamp, offset in entries:
            out.write(f"timestamp: {timestamp} offset: {offset}\n")
    if torn:
        whole = len(entries) * ENTRY_SIZES[kind]
        out.write(f"Stopped at position {whole}: {torn} trailing bytes do not make a whole "
                  f"{ENTRY_SIZES[kind]}-byte entry (a torn write)\n")
        return False
    return True


def read_index_entries(path: str, kind: str, base: int) -> tuple[list, int]:
    """The entries of an index file with absolute offsets -- (offset,
    position) or (timestamp, offset) -- and the count of trailing bytes that
    do not make a whole entry. Read-only."""
    with open(path, "rb") as f:
        data = f.read()
    size = ENTRY_SIZES[kind]
    torn = len(data) % size
    whole = memoryview(data)[:len(data) - torn]
    if kind == OFFSET_INDEX:
        entries = [(base + rel, pos) for rel, pos in OFFSET_ENTRY.iter_unpack(whole)]
    else:
        entries = [(ts, base + rel) for ts, rel in TIME_ENTRY.iter_unpack(whole)]
    return entries, torn


# ---- paths -------------------------------------------------------------------------------

def classify_path(path: str) -> tuple[str, int] | None:
    """(kind, base offset) of a segment file by its name -- ``.log``,
    ``.index`` or ``.timeindex``, also with a ``.cleaned``/``.deleted``
    suffix -- or None. The base offset is 0 for names that carry none."""
    name = os.path.basename(path)
    parts = name.split(".")[1:]
    kind = next((p for p in parts if p in _KIND_ORDER), None)
    if kind is None:
        return None
    parsed = parse_segment_file(name)
    return kind, parsed[0] if parsed else 0


def expand_path(path: str) -> list[tuple[str, int, str]]:
    """(kind, base offset, path) of the files to dump for one argument."""
    if os.path.isdir(path):
        found = []
        for name in os.listdir(path):
            parsed = parse_segment_file(name)
            if parsed and parsed[1] in (".log", ".index", ".timeindex"):
                kind = parsed[1][1:]
                found.append((parsed[0], _KIND_ORDER[kind], kind, os.path.join(path, name)))
        if not found:
            raise ValueError(f"{path}: no segment files (<20-digit offset>.log/.index/"
                             f".timeindex) in this directory; give a partition directory or "
                             f"segment files")
        return [(kind, base, p) for base, _, kind, p in sorted(found)]
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), path)
    classified = classify_path(path)
    if classified is None:
        raise ValueError(f"{path}: not a segment file (expected a name ending in .log, .index "
                         f"or .timeindex)")
    return [(classified[0], classified[1], path)]


# ---- shared entry point ------------------------------------------------------------------

def tool_main(prog: str, description: str, add_args, run_fn, argv=None) -> int:
    """Parse ``argv`` and run a tool; any KafkaError, OSError or ValueError
    becomes one ``prog: message`` line on stderr and exit code 1."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    add_args(parser)
    args = parser.parse_args(argv)
    try:
        return run_fn(args)
    except KafkaError as exc:
        message = str(exc)
    except OSError as exc:
        if exc.errno == errno.EPIPE:
            silence_stdout()
            return 0
        message = describe_os_error(exc)
    except ValueError as exc:
        message = str(exc)
    except KeyboardInterrupt:
        message, code = "interrupted", 130
        print(f"{prog}: {message}", file=sys.stderr)
        return code
    print(f"{prog}: {' '.join(message.split())}", file=sys.stderr)
    return 1


def describe_os_error(exc: OSError) -> str:
    if exc.strerror and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror}"
    return exc.strerror or str(exc)


def silence_stdout() -> None:
    """After EPIPE: point stdout at /dev/null so the interpreter's final
    flush does not complain about the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
