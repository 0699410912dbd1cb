"""verify (kafkalite.tools.verify) on real partition directories.

Logs are written by PartitionLog itself, then damaged byte by byte the way
disks and crashes damage them. Every run of the tool also checks that it
left the directory exactly as it found it.
"""
from __future__ import annotations

import os
import pty
import select
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from kafkalite._ext.batch_scan import batch_header
from kafkalite._ext.crc32c import crc32c
from kafkalite.record import RecordBatchBuilder, build_control_batch
from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.tools import verify

REPO = Path(__file__).resolve().parents[2]
SMALL = {"segment.bytes": 1024, "index.interval.bytes": 100}


# ---- helpers ----------------------------------------------------------------------------

def seg(base: int, suffix: str = ".log") -> str:
    return "%020d%s" % (base, suffix)


def fill(plog: PartitionLog, batches: int, *, per_batch: int = 3, start_ts: int = 1_000,
         codecs=("none", "gzip", "lz4", "zstd", "snappy"), keys: int = 1_000_000) -> None:
    """Append ``batches`` batches with mixed codecs, headers, a null key and
    value now and then, and timestamps that go backwards (the time index
    holds a running maximum)."""
    for i in range(batches):
        b = RecordBatchBuilder(codecs[i % len(codecs)])
        ts = start_ts + i * 100 - (250 if i % 4 == 3 else 0)
        for j in range(per_batch):
            n = plog.log_end_offset + j
            b.append(ts + j, b"key-%d" % (n % keys), b"value-%d" % n,
                     [("trace", b"t%d" % n)] if j == 0 else None)
        plog.append(b.build())


def make_partition(directory, batches: int = 40, props=None, close: bool = True) -> PartitionLog:
    plog = PartitionLog.open(str(directory), LogConfig.from_properties(props or SMALL))
    fill(plog, batches)
    if close:
        plog.close()
    return plog


def batches_of(path) -> list[tuple[int, int, int, int]]:
    """(position, base offset, last offset, size) of every batch in a .log."""
    data = Path(path).read_bytes()
    out, pos = [], 0
    while pos < len(data):
        base, last, size, _ = batch_header(data, pos)
        out.append((pos, base, last, size))
        pos += size
    return out


def snapshot(root) -> dict:
    state = {}
    for dirpath, _, names in os.walk(root):
        for name in names:
            p = os.path.join(dirpath, name)
            st = os.stat(p)
            state[os.path.relpath(p, root)] = (st.st_size, st.st_mtime_ns,
                                              Path(p).read_bytes())
    return state


def run_verify(capsys, path, *args) -> tuple[int, str, str]:
    """verify's main() in-process; asserts it changed nothing under ``path``."""
    root = path if os.path.isdir(path) and not _is_partition(path) else os.path.dirname(path)
    before = snapshot(root)
    capsys.readouterr()
    rc = verify.main([str(path), *args])
    out, err = capsys.readouterr()
    assert snapshot(root) == before, "verify modified the directory"
    return rc, out, err


def _is_partition(path) -> bool:
    return any(n.endswith(".log") for n in os.listdir(path))


def flip_byte(path, position: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        b = f.read(1)
        f.seek(position)
        f.write(bytes([b[0] ^ 0x5A]))


def python(*args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True,
                          timeout=60, **kw)


@pytest.fixture
def data_dir(tmp_path):
    """Three partitions of two topics; multiple segments each, every codec,
    a transaction with its COMMIT marker and a leader epoch bump."""
    root = tmp_path / "data"
    for name in ("orders-0", "orders-1", "audit-log-0"):
        plog = PartitionLog.open(str(root / name), LogConfig.from_properties(SMALL))
        fill(plog, 20)
        plog.leader_epoch = 3
        txn = RecordBatchBuilder(producer_id=42, producer_epoch=0, base_sequence=0,
                                 transactional=True)
        txn.append_values([b"a", b"b"], keys=[b"x", b"y"], timestamp=9_000)
        plog.append(txn.build())
        plog.append(build_control_batch(True, 42, 0, 7, timestamp=9_001), allow_control=True)
        fill(plog, 15, start_ts=10_000)
        plog.close()
    return root


# ---- healthy directories ----------------------------------------------------------------

def test_healthy_data_dir_passes(capsys, data_dir):
    rc, out, err = run_verify(capsys, data_dir)
    assert rc == 0, out
    lines = out.splitlines()
    assert lines[0].startswith(f"Verifying {data_dir}: 3 partitions")
    for name in ("audit-log-0", "orders-0", "orders-1"):
        line = next(l for l in lines if l.startswith(f"{name}: "))
        assert line.startswith(f"{name}: OK (")
        assert "closed cleanly" in line
    assert lines[-1].startswith("OK: 3 partitions, ")
    assert "0 errors, 0 warnings" in lines[-1]
    assert "ERROR" not in out and "WARN" not in out
    assert err == ""  # no progress indicator when stderr is not a terminal
    segments = sorted(n for n in os.listdir(data_dir / "orders-0") if n.endswith(".log"))
    assert len(segments) >= 3
    assert f"{len(segments)} segments" in next(l for l in lines if l.startswith("orders-0"))


def test_partition_directory_and_deep(capsys, data_dir):
    rc, out, _ = run_verify(capsys, data_dir / "orders-1", "--deep")
    assert rc == 0, out
    assert "1 partition" in out and "deep" in out.splitlines()[0]
    # 35 batches of 3 records + the transaction (2) + its marker (1)
    assert "37 batches, 108 records" in out


def test_compacted_log_passes(capsys, tmp_path):
    props = dict(SMALL, **{"cleanup.policy": "compact"})
    plog = PartitionLog.open(str(tmp_path / "compacted-0"), LogConfig.from_properties(props))
    for round_ in range(6):
        # round 0 has unique keys (key-7.. survive); later rounds reuse key-0..key-6
        fill(plog, 8, start_ts=1_000 + round_ * 1_000, keys=7 if round_ else 1_000_000)
        b = RecordBatchBuilder()
        b.append(5_000 + round_, b"key-3", None)          # a tombstone
        plog.append(b.build())
    plog.high_watermark = plog.log_end_offset
    plog.roll()
    stats = plog.compact()
    assert stats.segments_cleaned > 1 and stats.records_retained < stats.records_read
    plog.close()
    # whole batches are gone (offset gaps) and records were dropped from others
    directory = tmp_path / "compacted-0"
    kept = [b for n in sorted(os.listdir(directory)) if n.endswith(".log")
            for b in batches_of(directory / n)]
    assert len(kept) < 6 * 9 + 1
    assert any(b[1] != a[2] + 1 for a, b in zip(kept, kept[1:]))
    for deep in ((), ("--deep",)):
        rc, out, _ = run_verify(capsys, tmp_path / "compacted-0", *deep)
        assert rc == 0, out


def test_unclean_stop_then_reopen(capsys, tmp_path):
    directory = tmp_path / "t-0"
    plog = make_partition(directory, 30, close=False)
    plog.flush()    # waits for the background flushes of rolled segments
    # the process "dies" here: no close, no clean-shutdown marker
    rc, out, _ = run_verify(capsys, tmp_path)
    assert rc == 0, out
    assert "not closed cleanly" in out
    reopened = PartitionLog.open(str(directory), LogConfig.from_properties(SMALL))
    assert not reopened.had_clean_shutdown
    fill(reopened, 5)
    reopened.flush()
    rc, out, _ = run_verify(capsys, tmp_path)
    assert rc == 0, out
    reopened.close()
    rc, out, _ = run_verify(capsys, tmp_path)
    assert rc == 0 and "closed cleanly" in out


@pytest.mark.processes
def test_killed_writer_then_recovery(capsys, tmp_path):
    """A real process appends and dies with os._exit (nothing flushed or closed)."""
    script = (
        "import os, sys\n"
        "from kafkalite.record import RecordBatchBuilder\n"
        "from kafkalite.storage import LogConfig, PartitionLog\n"
        "plog = PartitionLog.open(sys.argv[1], LogConfig.from_properties("
        "{'segment.bytes': 2048, 'index.interval.bytes': 64}))\n"
        "b = RecordBatchBuilder('lz4')\n"
        "for i in range(60):\n"
        "    b.reset(); b.append_values([b'v%d' % i] * 4, keys=[b'k'] * 4, timestamp=1000 + i)\n"
        "    plog.append(b.build())\n"
        "os._exit(9)\n")
    proc = python("-c", script, str(tmp_path / "t-0"))
    assert proc.returncode == 9, proc.stderr
    rc, out, _ = run_verify(capsys, tmp_path)
    assert rc == 0, out
    plog = PartitionLog.open(str(tmp_path / "t-0"), LogConfig.from_properties(SMALL))
    assert plog.log_end_offset == 240
    plog.close()
    rc, out, _ = run_verify(capsys, tmp_path)
    assert rc == 0, out


@pytest.mark.processes
def test_interrupted_swap_is_pending_recovery_not_an_error(capsys, tmp_path):
    """The cleaner crashed mid-swap: verify checks the segments as the loader
    will complete the swap, and warns."""
    script = (
        "import sys\n"
        "from kafkalite.record import RecordBatchBuilder\n"
        "from kafkalite.storage import LogConfig, PartitionLog\n"
        "plog = PartitionLog.open(sys.argv[1], LogConfig.from_properties({'segment.bytes': 600,"
        " 'cleanup.policy': 'compact', 'index.interval.bytes': 50}))\n"
        "b = RecordBatchBuilder()\n"
        "for i in range(60):\n"
        "    b.reset(); b.append(1000 + i, b'k%d' % (i % 5), b'v%d' % i); plog.append(b.build())\n"
        "plog.high_watermark = plog.log_end_offset\n"
        "plog.roll()\n"
        "plog.compact()\n")
    directory = tmp_path / "t-0"
    proc = python("-c", script, str(directory), env=dict(os.environ,
                                                            KAFKALITE_CRASH_AT="swap-mid-rename"))
    assert proc.returncode == 137, proc.stderr
    names = os.listdir(directory)
    assert any(n.endswith(".swap") for n in names) and any(n.endswith(".cleaned") for n in names)
    rc, out, _ = run_verify(capsys, tmp_path)
    assert rc == 0, out
    assert "WARN  pending recovery" in out and ".swap" in out
    plog = PartitionLog.open(str(directory), LogConfig.from_properties(
        {"segment.bytes": 600, "cleanup.policy": "compact"}))
    plog.close()
    rc, out, _ = run_verify(capsys, tmp_path)
    assert rc == 0 and "WARN" not in out, out


def test_leftovers_are_warnings_and_left_alone(capsys, tmp_path):
    directory = tmp_path / "t-0"
    make_partition(directory, 30)
    shutil.copy(directory / seg(0), directory / (seg(0) + ".cleaned"))
    (directory / (seg(0, ".index") + ".deleted")).write_bytes(b"")
    (directory / "partition.checkpoint.tmp").write_bytes(b"half a checkp")
    rc, out, _ = run_verify(capsys, tmp_path)   # run_verify: nothing removed or changed
    assert rc == 0, out
    warnings = [l for l in out.splitlines() if l.startswith("  WARN")]
    assert len(warnings) == 3
    assert all("pending recovery" in w for w in warnings)
    assert "t-0: OK, 3 warnings" in out


@pytest.mark.processes
def test_progress_indicator_on_a_terminal(tmp_path):
    make_partition(tmp_path / "t-0", 60, {"segment.bytes": 300})
    segments = len([n for n in os.listdir(tmp_path / "t-0") if n.endswith(".log")])
    assert segments >= 10
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "verify", str(tmp_path)],
                                cwd=REPO, stdout=subprocess.PIPE, stderr=slave)
        os.close(slave)
        out, _ = proc.communicate(timeout=60)
        seen = b""
        while select.select([master], [], [], 0.5)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    finally:
        os.close(master)
    assert proc.returncode == 0, out
    assert f"\r[1/{segments} segments] t-0".encode() in seen
    assert f"\r[{segments}/{segments} segments]".encode() in seen
    assert b"\r" not in out   # stdout stays clean


# ---- damage -------------------------------------------------------------------------------

@pytest.fixture
def partition(tmp_path):
    directory = tmp_path / "t-0"
    make_partition(directory, 40)
    logs = sorted(n for n in os.listdir(directory) if n.endswith(".log"))
    assert len(logs) >= 3
    return directory


def assert_fails(capsys, directory, *needles, args=()) -> str:
    rc, out, err = run_verify(capsys, directory.parent, *args)
    assert rc == 1, out
    assert err == ""
    errors = [l for l in out.splitlines() if l.startswith("  ERROR")]
    assert errors, out
    assert any(all(n in l for n in needles) for l in errors), (needles, out)
    assert out.splitlines()[-1].startswith("FAILED: 1 partition")
    return out


def test_flipped_byte_in_a_batch(capsys, partition):
    log = partition / seg(0)
    pos, base, _, size = batches_of(log)[2]
    flip_byte(log, pos + size // 2)
    out = assert_fails(capsys, partition, str(log), f"position {pos}", "CRC")
    assert "t-0: 1 error (" in out   # later index entries are not reported as noise


def test_flipped_base_offset_is_caught_without_crc(capsys, partition):
    """baseOffset is not covered by the CRC; the offset order check catches it."""
    log = partition / seg(0)
    pos = batches_of(log)[3][0]
    flip_byte(log, pos + 7)     # lowest byte of baseOffset
    assert_fails(capsys, partition, str(log), f"position {pos}")


def test_truncated_log_tail(capsys, partition):
    bases = sorted(int(n[:20]) for n in os.listdir(partition) if n.endswith(".log"))
    log = partition / seg(bases[-1])
    last_pos = batches_of(log)[-1][0]
    os.truncate(log, log.stat().st_size - 5)
    assert_fails(capsys, partition, str(log), f"position {last_pos}", "torn")


def test_corrupted_offset_index_position(capsys, partition):
    index = partition / seg(0, ".index")
    data = bytearray(index.read_bytes())
    assert len(data) >= 16
    rel, position = struct.unpack_from(">ii", data, 8)
    struct.pack_into(">ii", data, 8, rel, position + 1)
    index.write_bytes(bytes(data))
    assert_fails(capsys, partition, str(index), "entry 1", f"position {position + 1}",
                 "not at a batch boundary")


def test_corrupted_offset_index_offset(capsys, partition):
    index = partition / seg(0, ".index")
    data = bytearray(index.read_bytes())
    rel, position = struct.unpack_from(">ii", data, 0)
    struct.pack_into(">ii", data, 0, rel - 1, position)
    index.write_bytes(bytes(data))
    assert_fails(capsys, partition, str(index), "entry 0", f"position {position}",
                 f"ends at offset {rel}")


def test_time_index_entry_with_wrong_timestamp(capsys, partition):
    tindex = partition / seg(0, ".timeindex")
    data = bytearray(tindex.read_bytes())
    last = len(data) // 12 - 1
    assert last >= 1
    ts, rel = struct.unpack_from(">qi", data, last * 12)
    struct.pack_into(">qi", data, last * 12, ts + 1, rel)   # still increasing, but wrong
    tindex.write_bytes(bytes(data))
    assert_fails(capsys, partition, str(tindex), f"entry {last}", f"timestamp {ts + 1}",
                 f"is {ts}, not {ts + 1}")


def test_time_index_out_of_order(capsys, partition):
    tindex = partition / seg(0, ".timeindex")
    data = bytearray(tindex.read_bytes())
    first = data[:12]
    data[:12] = data[12:24]
    data[12:24] = first
    tindex.write_bytes(bytes(data))
    assert_fails(capsys, partition, str(tindex), "entry 1", "out of order")


@pytest.mark.parametrize("suffix,entry", [(".index", 8), (".timeindex", 12)])
def test_partial_trailing_index_entry(capsys, partition, suffix, entry):
    index = partition / seg(0, suffix)
    size = index.stat().st_size
    with open(index, "ab") as f:
        f.write(b"\x00\x00\x01")
    assert_fails(capsys, partition, str(index), "3 trailing bytes", f"position {size}",
                 f"{entry}-byte entry")


def test_orphan_index(capsys, partition):
    shutil.copy(partition / seg(0, ".index"), partition / seg(99_999, ".index"))
    assert_fails(capsys, partition, seg(99_999, ".index"), "orphan")


def test_overlapping_segments(capsys, partition):
    bases = sorted(int(n[:20]) for n in os.listdir(partition) if n.endswith(".log"))
    second = bases[1]
    for suffix in (".log", ".index", ".timeindex"):
        os.rename(partition / seg(second, suffix), partition / seg(second - 2, suffix))
    last_pos, _, last, _ = batches_of(partition / seg(0))[-1]
    assert last == second - 1
    assert_fails(capsys, partition, str(partition / seg(0)), f"position {last_pos}",
                 f"offsets {last - 2}..{last}", f"next segment's base offset {second - 2}",
                 "overlap")


def test_checkpoint_past_log_end(capsys, partition):
    ckpt = partition / "partition.checkpoint"
    text = ckpt.read_text().replace("high-watermark 0", "high-watermark 100000")
    ckpt.write_text(text)
    assert_fails(capsys, partition, str(ckpt), "high-watermark 100000", "is past")


def test_malformed_checkpoint(capsys, partition):
    (partition / "partition.checkpoint").write_text("kafkalite-partition-checkpoint 1\n"
                                                    "log-start-offset 0\n")
    assert_fails(capsys, partition, "partition.checkpoint", "malformed", "missing")


def test_leader_epochs_must_increase(capsys, partition):
    (partition / "leader-epoch-checkpoint").write_text("0\n2\n3 10\n2 20\n")
    assert_fails(capsys, partition, "leader-epoch-checkpoint", "entry 1", "does not increase")


def test_leader_epochs_at_and_past_the_log_end(capsys, partition):
    """An epoch starting at the log end (a leader that wrote nothing yet) is
    healthy; one past it says the log lost its tail."""
    end = 40 * 3
    (partition / "leader-epoch-checkpoint").write_text(f"0\n2\n0 0\n1 {end}\n")
    rc, out, _ = run_verify(capsys, partition)
    assert rc == 0 and "t-0: OK" in out and "WARN" not in out, out
    (partition / "leader-epoch-checkpoint").write_text(f"0\n2\n0 0\n1 {end + 5}\n")
    rc, out, _ = run_verify(capsys, partition)
    assert rc == 0 and f"epoch 1 starts at offset {end + 5}, past the log end offset {end}" \
        in out, out


def test_deep_decodes_records(capsys, partition):
    """A batch whose CRC matches but whose records do not parse: only --deep sees it."""
    log = partition / seg(0)
    pos, _, _, size = batches_of(log)[0]     # an uncompressed batch
    data = bytearray(log.read_bytes())
    assert data[pos + size - 1] == 0          # the last record's header count
    data[pos + size - 1] = 1                  # claims a header that is not there
    struct.pack_into(">I", data, pos + 17, crc32c(bytes(data[pos + 21:pos + size])))
    log.write_bytes(bytes(data))
    rc, out, _ = run_verify(capsys, partition.parent)
    assert rc == 0, out
    assert_fails(capsys, partition, str(log), f"batch at byte {pos}", "record 2",
                 args=("--deep",))


def test_missing_and_bad_paths(capsys, tmp_path):
    for path, needle in ((tmp_path / "nope", "No such file or directory"),
                         (tmp_path, "neither a data directory")):
        rc = verify.main([str(path)])
        out, err = capsys.readouterr()
        assert rc == 1 and out == ""
        assert err.count("\n") == 1 and needle in err and err.startswith("verify-data-dir: ")


# ---- real processes -----------------------------------------------------------------------

@pytest.mark.processes
def test_cli_and_script_in_subprocesses(data_dir):
    proc = python("-m", "kafkalite", "verify", str(data_dir))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.splitlines()[-1].startswith("OK: 3 partitions")
    log = data_dir / "orders-0" / seg(0)
    flip_byte(log, 100)
    proc = python("tools/verify-data-dir", str(data_dir))
    assert proc.returncode == 1
    assert "orders-0: 1 error" in proc.stdout and str(log) in proc.stdout
    assert proc.stdout.splitlines()[-1].startswith("FAILED: 3 partitions")


@pytest.mark.processes
def test_missing_path_in_subprocesses(tmp_path):
    missing = str(tmp_path / "missing")
    for argv in (("-m", "kafkalite", "verify", missing), ("tools/verify-data-dir", missing)):
        proc = python(*argv)
        assert proc.returncode == 1
        assert proc.stdout == ""
        assert len(proc.stderr.splitlines()) == 1, proc.stderr
        assert "Traceback" not in proc.stderr and missing in proc.stderr


@pytest.mark.processes
def test_reader_gone_keeps_the_exit_code(data_dir):
    """`verify ... | head -0`: the output is lost, the verdict (exit code) is not."""
    flip_byte(data_dir / "orders-1" / seg(0), 200)
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "verify", str(data_dir)],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()          # nobody will read: every write gets EPIPE
    err = proc.stderr.read()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 1
    assert err == b""


# ---- a server's own data directory --------------------------------------------------------

@pytest.mark.processes
def test_a_servers_data_verifies_without_warnings_after_a_clean_stop_and_after_kill_9(
        capsys, tmp_path):
    """What a user runs on healthy data must not alarm them: leaders elected
    on an empty partition or one that took no write since (their epoch
    starts at the log end, as Kafka's does) are no warning, after a clean
    stop or after a kill -9 and a normal start."""
    from harness import ServerProcess, read_all
    from kafkalite.client import AdminClient, NewTopic, Producer
    data = tmp_path / "data"
    srv = ServerProcess(str(data), workers=2).start()
    try:
        admin = AdminClient(srv.config())
        for f in admin.create_topics([NewTopic("written", 3, 1), NewTopic("empty", 2, 1)]).values():
            f.result(30)
        p = Producer(srv.config())
        for i in range(300):
            p.produce("written", b"v%d" % i, partition=i % 3)
        assert p.flush(30) == 0
        p.close()
    finally:
        srv.stop()
    rc, out, _ = run_verify(capsys, data)
    assert rc == 0 and "0 errors, 0 warnings" in out.splitlines()[-1], out
    srv = ServerProcess(str(data), workers=2).start()
    srv.kill()
    srv = ServerProcess(str(data), workers=2).start()
    try:
        assert len(read_all(srv, "written", 3, 300)) == 300
    finally:
        srv.stop()
    rc, out, _ = run_verify(capsys, data)
    assert rc == 0 and "0 errors, 0 warnings" in out.splitlines()[-1], out


def test_replicas_in_broker_directories_are_partitions_not_damage(capsys, tmp_path):
    """A node keeps the replicas of partitions made replicated on it in
    ``broker-<id>/<topic>-<N>`` (metadata.replica_dir). verify took each
    ``broker-<id>`` for a partition of a topic ``broker`` and reported
    healthy data as ``no segment .log files`` (issue 74)."""
    root = tmp_path / "data"
    make_partition(root / "orders-0", 10)
    make_partition(root / "broker-1" / "orders-0", 10)
    make_partition(root / "broker-2" / "_schemas-0", 5)
    make_partition(root / "broker-7", 5)          # a partition of a topic named "broker"
    rc, out, _ = run_verify(capsys, root)
    assert rc == 0, out
    names = [line.split(":")[0] for line in out.splitlines()[1:-1]]
    assert sorted(names) == ["broker-1/orders-0", "broker-2/_schemas-0", "broker-7", "orders-0"]
    flip_byte(root / "broker-1" / "orders-0" / seg(0), 70)
    rc, out, _ = run_verify(capsys, root)
    assert rc == 1 and "broker-1/orders-0: 1 error" in out, out


@pytest.mark.processes
def test_a_servers_data_after_a_clean_stop_passes(tmp_path):
    """The issue's walk: a server whose schema registry was used once,
    stopped cleanly; verify must find nothing wrong."""
    from harness import ServerProcess, run_cli
    srv = ServerProcess(str(tmp_path / "data")).start()
    try:
        r = run_cli("schemas", "list", "--url", srv.info["schema_registry"])
        assert r.returncode == 0, r.stderr
    finally:
        srv.stop()
    r = python("-m", "kafkalite", "verify", str(tmp_path / "data"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "ERROR" not in r.stdout
