"""dump-log (kafkalite.tools.dump_log) on real segment and index files."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalite._ext.batch_scan import batch_header
from kafkalite.record import RecordBatchBuilder, build_control_batch
from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.tools import dump_log

REPO = Path(__file__).resolve().parents[2]
BATCH = re.compile(r"^baseOffset: (\d+) lastOffset: (\d+) count: (\d+) .* position: (\d+) "
                   r"(CreateTime|LogAppendTime): (-?\d+) size: (\d+) magic: 2 "
                   r"compresscodec: (\w+) crc: (\d+) isvalid: (true|false)$")
RECORD = re.compile(r"^\| offset: (\d+) (CreateTime|LogAppendTime): (-?\d+) keySize: (-?\d+) "
                    r"valueSize: (-?\d+) headerKeys: \[([^\]]*)\] (.*)$")


def seg(base: int, suffix: str = ".log") -> str:
    return "%020d%s" % (base, suffix)


def batches_of(path) -> list[tuple[int, int, int, int]]:
    data = Path(path).read_bytes()
    out, pos = [], 0
    while pos < len(data):
        base, last, size, _ = batch_header(data, pos)
        out.append((pos, base, last, size))
        pos += size
    return out


def dump(capsys, *argv) -> tuple[int, list[str], str]:
    capsys.readouterr()
    rc = dump_log.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out.splitlines(), err


@pytest.fixture
def small_log(tmp_path):
    """One segment: plain, gzip and zstd batches, odd keys and values, a
    transaction and its COMMIT marker."""
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory))
    b = RecordBatchBuilder()
    b.append(1000, b"k0", b"v0", [("h1", b"x"), ("h2", None)])
    b.append(1001, b"k1", b"v1")
    b.append(1002, None, b"keyless")
    plog.append(b.build())                                             # offsets 0-2
    b = RecordBatchBuilder("gzip")
    b.append_values([b"g%d" % i for i in range(4)], keys=[b"gk"] * 4, timestamp=2000)
    plog.append(b.build())                                             # 3-6
    b = RecordBatchBuilder("zstd")
    b.append(3000, b"bin", b"\x00\x01\xffok")
    b.append(3001, "clé".encode(), "héllo wörld".encode())
    b.append(3002, b"big", b"x" * 200)
    b.append(3003, b"tomb", None)
    plog.append(b.build())                                             # 7-10
    txn = RecordBatchBuilder(producer_id=9, producer_epoch=2, base_sequence=0, transactional=True)
    txn.append(4000, b"t", b"in-txn")
    plog.append(txn.build())                                           # 11
    plog.append(build_control_batch(True, 9, 2, 5, timestamp=4001), allow_control=True)  # 12
    plog.close()
    return directory / seg(0)


def test_batches_and_records(capsys, small_log):
    rc, lines, err = dump(capsys, small_log, "--print-records")
    assert rc == 0 and err == ""
    assert lines[0] == f"Dumping {small_log}"
    assert lines[1] == "Log starting offset: 0"
    batch_lines = [BATCH.match(l) for l in lines if l.startswith("baseOffset:")]
    record_lines = [RECORD.match(l) for l in lines if l.startswith("| ")]
    assert all(batch_lines) and all(record_lines), lines
    assert len(lines) == 2 + len(batch_lines) + len(record_lines)
    actual = batches_of(small_log)
    assert [(int(m[4]), int(m[1]), int(m[2]), int(m[7])) for m in batch_lines] == \
        [(pos, base, last, size) for pos, base, last, size in actual]
    assert [m[8] for m in batch_lines] == ["none", "gzip", "zstd", "none", "none"]
    assert [int(m[3]) for m in batch_lines] == [3, 4, 4, 1, 1]
    assert all(m[10] == "true" for m in batch_lines)
    assert [int(m[1]) for m in record_lines] == list(range(13))
    rest = [m[7] for m in record_lines]
    assert rest[0] == "key: k0 payload: v0" and record_lines[0][6] == "h1,h2"
    assert record_lines[0][3] == "1000" and record_lines[1][6] == ""
    assert rest[2] == "key: null payload: keyless" and record_lines[2][4] == "-1"
    assert rest[3:7] == [f"key: gk payload: g{i}" for i in range(4)]
    assert all(m[3] == "2000" for m in record_lines[3:7])
    assert rest[7] == r"key: bin payload: b'\x00\x01\xffok'"
    assert rest[8] == "key: clé payload: héllo wörld"
    assert record_lines[8][4] == "4" and record_lines[8][5] == "13"   # sizes in bytes
    assert rest[9] == "key: big payload: " + "x" * 64 + "...(136 more bytes)"
    assert record_lines[9][5] == "200"
    assert rest[10] == "key: tomb payload: null" and record_lines[10][5] == "-1"
    assert rest[11] == "key: t payload: in-txn"
    assert rest[12] == "endTxnMarker: COMMIT coordinatorEpoch: 5"
    txn_line, marker_line = [l for l in lines if l.startswith("baseOffset:")][3:]
    assert "producerId: 9 producerEpoch: 2" in txn_line and "isTransactional: true" in txn_line
    assert "isControl: false" in txn_line and "isControl: true" in marker_line
    assert "baseSequence: 0 lastSequence: 0" in txn_line
    assert "partitionLeaderEpoch: 0" in txn_line and "deleteHorizonMs: none" in txn_line


def test_without_records_and_field_limits(capsys, small_log):
    rc, lines, _ = dump(capsys, small_log)
    assert rc == 0
    assert not any(l.startswith("|") for l in lines)
    assert sum(l.startswith("baseOffset:") for l in lines) == 5
    rc, lines, _ = dump(capsys, small_log, "--print-records", "--max-field-bytes", "3")
    records = [l for l in lines if l.startswith("| ")]
    assert records[9].endswith("key: big payload: xxx...(197 more bytes)")
    # a cut inside a multi-byte character backs off to the character boundary
    assert records[8].endswith("key: cl...(2 more bytes) payload: hé...(10 more bytes)")
    rc, lines, _ = dump(capsys, small_log, "--print-records", "--max-field-bytes", "0")
    assert [l for l in lines if l.startswith("| ")][9].endswith("payload: " + "x" * 200)


def test_index_files_match_the_log(capsys, tmp_path):
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), LogConfig.from_properties(
        {"index.interval.bytes": 100}))
    b = RecordBatchBuilder()
    for i in range(30):
        b.reset()
        b.append(5_000 + (i * 37) % 11 * 100, b"k", b"v%d" % i)   # timestamps jump around
        plog.append(b.build())
    plog.close()
    by_position = {pos: last for pos, _, last, _ in batches_of(directory / seg(0))}

    rc, lines, _ = dump(capsys, directory / seg(0, ".index"))
    assert rc == 0 and lines[0] == f"Dumping {directory / seg(0, '.index')}"
    entries = [tuple(map(int, re.fullmatch(r"offset: (\d+) position: (\d+)", l).groups()))
               for l in lines[1:]]
    assert len(entries) == (directory / seg(0, ".index")).stat().st_size // 8 > 3
    assert all(by_position[pos] == off for off, pos in entries)

    rc, lines, _ = dump(capsys, directory / seg(0, ".timeindex"))
    assert rc == 0
    entries = [tuple(map(int, re.fullmatch(r"timestamp: (\d+) offset: (\d+)", l).groups()))
               for l in lines[1:]]
    assert len(entries) == (directory / seg(0, ".timeindex")).stat().st_size // 12 > 1
    assert [ts for ts, _ in entries] == sorted({ts for ts, _ in entries})
    assert all(off in by_position.values() for _, off in entries)


def test_partition_directory(capsys, tmp_path):
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), LogConfig.from_properties({"segment.bytes": 400}))
    b = RecordBatchBuilder("lz4")
    for i in range(20):
        b.reset()
        b.append_values([b"value-%d" % i] * 2, keys=[b"a", b"b"], timestamp=1000 + i)
        plog.append(b.build())
    plog.close()
    bases = sorted(int(n[:20]) for n in os.listdir(directory) if n.endswith(".log"))
    assert len(bases) >= 3
    rc, lines, _ = dump(capsys, directory, "--print-records")
    assert rc == 0
    dumped = [l[len("Dumping "):] for l in lines if l.startswith("Dumping ")]
    assert dumped == [str(directory / seg(b, s)) for b in bases
                      for s in (".log", ".index", ".timeindex")]
    assert [int(l.split()[1]) for l in lines if l.startswith("baseOffset:")] == \
        list(range(0, 40, 2))
    assert [int(l.split()[2]) for l in lines if l.startswith("| ")] == list(range(40))
    assert [l for l in lines if l.startswith("Log starting offset:")] == \
        [f"Log starting offset: {b}" for b in bases]


def test_several_paths_in_one_run(capsys, small_log):
    rc, lines, _ = dump(capsys, small_log, small_log.with_suffix(".index"),
                        small_log.with_suffix(".timeindex"))
    assert rc == 0
    assert [l for l in lines if l.startswith("Dumping")] == [
        f"Dumping {small_log}", f"Dumping {small_log.with_suffix('.index')}",
        f"Dumping {small_log.with_suffix('.timeindex')}"]


def test_log_append_time_and_delete_horizon(capsys, tmp_path):
    directory = tmp_path / "t-0"
    plog = PartitionLog.open(str(directory), LogConfig.from_properties(
        {"message.timestamp.type": "LogAppendTime", "cleanup.policy": "compact"}),
        clock=lambda: 777_000)
    b = RecordBatchBuilder()
    b.append(1, b"a", b"1")
    b.append(2, b"b", None)                       # tombstone: survives with a horizon
    plog.append(b.build())
    b = RecordBatchBuilder()
    b.append(3, b"a", b"2")
    plog.append(b.build())
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    plog.compact()
    plog.close()
    rc, lines, _ = dump(capsys, directory / seg(0), "--print-records")
    assert rc == 0
    batch_lines = [l for l in lines if l.startswith("baseOffset:")]
    assert len(batch_lines) == 2
    assert "deleteHorizonMs: 87177000" in batch_lines[0]   # 777000 + 24h
    assert "LogAppendTime: 777000" in batch_lines[1]
    records = [l for l in lines if l.startswith("| ")]
    assert [r.split()[2] for r in records] == ["1", "2"]             # offset 0 was compacted
    assert "LogAppendTime: 777000" in records[0] and "payload: null" in records[0]


# ---- damage -------------------------------------------------------------------------------

def test_truncated_tail(capsys, small_log):
    actual = batches_of(small_log)
    size = small_log.stat().st_size
    os.truncate(small_log, size - 3)
    rc, lines, err = dump(capsys, small_log, "--print-records")
    assert rc == 1 and err == ""
    assert sum(l.startswith("baseOffset:") for l in lines) == len(actual) - 1
    assert [l for l in lines if l.startswith("| ")][-1].startswith("| offset: 11 ")
    pos = actual[-1][0]
    assert lines[-1] == (f"Stopped at position {pos}: batch at position {pos} is torn: it claims "
                         f"{actual[-1][3]} bytes, {actual[-1][3] - 3} remain; "
                         f"{size - 3 - pos} of the file's {size - 3} bytes were not dumped")


def test_flipped_byte_stops_at_the_bad_batch(capsys, small_log):
    pos, base, _, size = batches_of(small_log)[1]
    with open(small_log, "r+b") as f:
        f.seek(pos + size - 2)
        byte = f.read(1)
        f.seek(pos + size - 2)
        f.write(bytes([byte[0] ^ 1]))
    rc, lines, _ = dump(capsys, small_log, "--print-records")
    assert rc == 1
    batch_lines = [l for l in lines if l.startswith("baseOffset:")]
    assert len(batch_lines) == 2
    assert batch_lines[0].endswith("isvalid: true")
    assert batch_lines[1].startswith(f"baseOffset: {base} ") and \
        batch_lines[1].endswith("isvalid: false")
    assert [l.split()[2] for l in lines if l.startswith("| ")] == ["0", "1", "2"]
    assert lines[-1].startswith(f"Stopped at position {pos}: batch at position {pos} fails "
                                f"its CRC")


def test_torn_index(capsys, small_log):
    index = small_log.with_suffix(".timeindex")
    with open(index, "ab") as f:
        f.write(b"\x01\x02\x03\x04\x05")
    entries = (index.stat().st_size - 5) // 12
    rc, lines, _ = dump(capsys, index)
    assert rc == 1
    assert len(lines) == 1 + entries + 1
    assert lines[-1].startswith(f"Stopped at position {entries * 12}: 5 trailing bytes")


def test_bad_arguments(capsys, tmp_path):
    (tmp_path / "notes.txt").write_text("hi")
    (tmp_path / "empty").mkdir()
    for argv, needle in (([tmp_path / "missing.log"], "No such file or directory"),
                         ([tmp_path / "notes.txt"], "not a segment file"),
                         ([tmp_path / "empty"], "no segment files"),
                         ([tmp_path / "notes.txt", "--max-field-bytes", "-5"], "must be >= 0")):
        rc, lines, err = dump(capsys, *argv)
        assert rc == 1 and lines == []
        assert err.count("\n") == 1 and err.startswith("dump-log: ") and needle in err, err


# ---- real processes -----------------------------------------------------------------------

def python(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *map(str, args)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.processes
def test_script_and_cli_in_subprocesses(small_log):
    proc = python("tools/dump-log", small_log)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith(f"Dumping {small_log}\n")
    assert proc.stdout.count("\nbaseOffset: ") == 5
    proc = python("-m", "kafkalite", "dump-log", "--print-records", small_log.parent)
    assert proc.returncode == 0 and proc.stdout.count("\n| offset: ") == 13
    missing = small_log.parent / "nope.log"
    for argv in (("tools/dump-log", missing), ("-m", "kafkalite", "dump-log", missing)):
        proc = python(*argv)
        assert proc.returncode == 1 and proc.stdout == ""
        assert len(proc.stderr.splitlines()) == 1 and "Traceback" not in proc.stderr
        assert str(missing) in proc.stderr


@pytest.mark.processes
def test_reader_closing_the_pipe_early(tmp_path):
    """`dump-log ... | head`: no traceback, no 'Broken pipe' complaint."""
    plog = PartitionLog.open(str(tmp_path / "t-0"))
    b = RecordBatchBuilder()
    for i in range(50):
        b.reset()
        b.append_values([b"v" * 50] * 100, keys=[b"key"] * 100, timestamp=1000)
        plog.append(b.build())
    plog.close()
    for argv in (("tools/dump-log",), ("-m", "kafkalite", "dump-log")):
        proc = subprocess.Popen([sys.executable, *argv, "--print-records",
                                 str(tmp_path / "t-0" / seg(0))], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        first = proc.stdout.readline()
        proc.stdout.close()                   # like `head -1` exiting
        err = proc.stderr.read()
        proc.stderr.close()
        assert proc.wait(timeout=60) == 0
        assert first.startswith(b"Dumping ")
        assert err == b""
