"""Recovery: kill -9 at random moments, damaged segments, clean shutdown.

KAFKALITE_CRASH_ITERATIONS sets how many times the crash test kills its
writer, KAFKALITE_DAMAGE_TRIALS how many damaged copies the damage test
recovers (tests/soak.py: 3 and 50 by default, 500 and 2,000 under
tools/soak).
"""
import os
import random
import shutil
import subprocess
import sys
import time

import pytest

from storage_helpers import batch, child_env, read_all, verify_segments
from kafkalite.record import RecordBatch, decode_columns
from kafkalite.storage import LogConfig, PartitionLog
from kafkalite.storage.loader import CLEAN_SHUTDOWN_MARKER

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import crash_writer  # noqa: E402  (the child's record-content functions)
from soak import setting

CRASH_ITERATIONS = setting("KAFKALITE_CRASH_ITERATIONS")
DAMAGE_TRIALS = setting("KAFKALITE_DAMAGE_TRIALS")


def _check_contents(plog, acked):
    """Every offset from 0 to the log end holds exactly the record the
    writer made for it, and the log end covers every acknowledged offset."""
    assert plog.log_end_offset > acked, f"acknowledged offset {acked} lost"
    offset = 0
    while offset < plog.log_end_offset:
        cols = decode_columns(plog.read(offset, 4 << 20).read(), verify_crc=True)
        offsets = cols.offsets.tolist()
        assert offsets == list(range(offset, offset + len(offsets))), "offsets have a gap"
        keys, values = cols.keys(), cols.values()
        for i, off in enumerate(offsets):
            if keys[i] != crash_writer.key(off) or values[i] != crash_writer.value(off):
                raise AssertionError(f"record at offset {off} does not read back intact")
        assert cols.headers(len(offsets) - 1) == [("o", b"%d" % offsets[-1])]
        offset = cols.next_offset


@pytest.mark.processes
@pytest.mark.slow
def test_kill_9_at_random_moments_loses_no_acknowledged_record(tmp_path):
    directory = str(tmp_path / "crash-0")
    rng = random.Random(20261122)
    acked, kills_mid_write = -1, 0
    for iteration in range(CRASH_ITERATIONS):
        proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "crash_writer.py"), directory, str(iteration),
             "10000000"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=child_env())
        try:
            ready = proc.stdout.readline().split()
            assert ready and ready[0] == b"ready", ready
            assert int(ready[1]) > acked, "the writer's recovery lost acknowledged records"
            time.sleep(rng.uniform(0.0, 0.06))      # a random moment of its writing
        finally:
            proc.kill()
            rest = proc.stdout.read()
            proc.wait()
        lines = rest.split(b"\n")[:-1]  # a torn last line was never acknowledged
        acks = [int(l.split()[1]) for l in lines if l.startswith(b"ack ")]
        if acks:
            acked = max(acked, acks[-1])
            kills_mid_write += b"done" not in lines
        plog = PartitionLog.open(directory, crash_writer.CONFIG)
        assert not plog.had_clean_shutdown
        _check_contents(plog, acked)
        assert verify_segments(plog) == []
        if iteration % 2:
            plog.close()  # the next writer opens a cleanly closed log
        else:
            # ... or one that still needs recovery. A dead process leaves no
            # flusher thread behind; drain ours before walking away, and
            # close the files as its exit would (no clean-shutdown marker;
            # index entries not written are lost). Left open, each iteration
            # kept some 80 descriptors for the rest of the test session.
            plog._poll_flushes(wait=True)
            for seg in plog.segments:
                seg.close()
            del plog
    assert acked > 0
    assert kills_mid_write >= CRASH_ITERATIONS // 2, "most kills should land mid-write"


def _template(tmp_path):
    """A closed log whose active segment holds 40 batches of mixed codecs."""
    directory = str(tmp_path / "template-0")
    plog = PartitionLog.open(directory, LogConfig.from_properties(
        {"segment.bytes": 20_000, "index.interval.bytes": 500, "retention.ms": -1}))
    rng = random.Random(3)
    codecs = ["none", "lz4", "zstd", "gzip", "snappy"]
    while len(plog.segments) < 3 or plog.active_segment.size < 8_000:
        n = rng.randrange(1, 8)
        start = plog.log_end_offset
        plog.append(batch([b"%d" % (start + i) * rng.randrange(1, 30) for i in range(n)],
                          keys=[b"k%d" % (start + i) for i in range(n)],
                          compression=rng.choice(codecs)))
    active = plog.active_segment
    positions, pos = [], 0
    data = open(active.path, "rb").read()
    while pos < len(data):
        b = RecordBatch(data, pos)
        positions.append((pos, b.size_in_bytes, b.base_offset, b.last_offset))
        pos += b.size_in_bytes
    before = read_all(plog)
    plog.close()
    return directory, os.path.basename(active.path), positions, before


@pytest.mark.slow
def test_damaged_active_segment_keeps_every_intact_batch(tmp_path):
    """A torn tail loses only the torn batch; a flipped byte loses only the
    batch it hit: the batches after it are kept (a gap of offsets is left,
    as compaction leaves), and appends carry on from the old log end."""
    template, active_name, batches, records = _template(tmp_path)
    rng = random.Random(99)
    size = batches[-1][0] + batches[-1][1]
    config = LogConfig.from_properties({"segment.bytes": 20_000, "index.interval.bytes": 500,
                                        "retention.ms": -1})
    for trial in range(DAMAGE_TRIALS):
        directory = str(tmp_path / f"trial{trial}-0")
        shutil.copytree(template, directory)
        os.unlink(os.path.join(directory, CLEAN_SHUTDOWN_MARKER))  # an unclean stop
        path = os.path.join(directory, active_name)
        pos = rng.randrange(0, size)
        if rng.random() < 0.5:
            os.truncate(path, pos)
            survivors = [b for b in batches if b[0] + b[1] <= pos]
            noticed = pos not in {b[0] for b in batches}    # a cut between batches is invisible
        else:
            with open(path, "r+b") as f:
                f.seek(pos)
                byte = f.read(1)[0]
                f.seek(pos)
                f.write(bytes([byte ^ rng.randrange(1, 256)]))
            survivors = [b for b in batches if not b[0] <= pos < b[0] + b[1]]
            noticed = True
        plog = PartitionLog.open(directory, config)
        lost = {o for b in batches if b not in survivors for o in range(b[2], b[3] + 1)}
        end = max(batches[-1][3] + 1 if survivors and survivors[-1] == batches[-1] else 0,
                  max((b[3] + 1 for b in survivors), default=batches[0][2]))
        assert plog.log_end_offset == end, (trial, pos)
        assert read_all(plog) == [r for r in records if r[0] < end and r[0] not in lost]
        assert verify_segments(plog, contiguous=False) == []
        if noticed:
            assert plog.damage, "what was dropped is reported"
        info = plog.append(batch([b"after"]))
        assert info.first_offset == end
        assert read_all(plog)[-1][3] == b"after"
        plog.close()
        shutil.rmtree(directory)


def test_clean_shutdown_skips_the_scan_and_unclean_stop_runs_it(tmp_path):
    directory, active_name, batches, records = _template(tmp_path)
    config = LogConfig.from_properties({"segment.bytes": 20_000, "index.interval.bytes": 500,
                                        "retention.ms": -1})
    # Damage the middle of the active segment (CRC-covered bytes of batch 5).
    path = os.path.join(directory, active_name)
    pos = batches[5][0] + 30
    with open(path, "r+b") as f:
        f.seek(pos)
        byte = f.read(1)[0]
        f.seek(pos)
        f.write(bytes([byte ^ 0xFF]))
    plog = PartitionLog.open(directory, config)
    # With the marker the loader trusts the files: nothing scanned, nothing cut.
    assert plog.had_clean_shutdown and plog.recovered_segments == 0
    assert plog.log_end_offset == batches[-1][3] + 1
    plog._poll_flushes(wait=True)
    del plog  # crash: no close, no marker
    plog = PartitionLog.open(directory, config)
    assert not plog.had_clean_shutdown and plog.recovered_segments >= 1
    # the scan cut out batch 5 only: the batches after it stay
    assert plog.log_end_offset == batches[-1][3] + 1
    assert plog.truncated_bytes == batches[5][1]
    kept = {r[0] for r in read_all(plog)}
    assert not kept & set(range(batches[5][2], batches[5][3] + 1))
    assert {r[0] for r in records} - kept == set(range(batches[5][2], batches[5][3] + 1))
    plog.close()


def test_unclean_stop_recovers_from_the_recovery_point_only(tmp_path):
    directory = str(tmp_path / "rp-0")
    config = LogConfig.from_properties({"segment.bytes": 2_000, "retention.ms": -1})
    plog = PartitionLog.open(directory, config)
    for i in range(60):
        plog.append(batch([b"%d" % i * 50]))
    plog.flush()
    plog.checkpoint()
    for i in range(3):
        plog.append(batch([b"tail"]))
    plog._poll_flushes(wait=True)
    del plog  # crash
    again = PartitionLog.open(directory, config)
    assert 1 <= again.recovered_segments < len(again.segments), "only from the recovery point on"
    assert again.log_end_offset == 63
    again.close()


def test_lost_checkpoint_files_fall_back_to_a_full_recovery(tmp_path):
    directory = str(tmp_path / "lost-0")
    config = LogConfig.from_properties({"segment.bytes": 2_000, "retention.ms": -1})
    plog = PartitionLog.open(directory, config)
    for i in range(30):
        plog.append(batch([b"%d" % i * 50]))
    plog.close()
    with open(os.path.join(directory, "partition.checkpoint"), "w") as f:
        f.write("garbage\n")
    with open(os.path.join(directory, "leader-epoch-checkpoint"), "w") as f:
        f.write("7\n")
    again = PartitionLog.open(directory, config)
    assert not again.had_clean_shutdown and again.recovered_segments == len(again.segments)
    assert again.log_end_offset == 30 and len(read_all(again)) == 30
    assert again.leader_epoch_cache.entries == [(0, 0)]  # rebuilt from the batches
    again.close()


def test_a_follower_truncation_forgets_the_epoch_its_tail_began_and_a_crash_keeps_what_follows(
        tmp_path):
    """A replica that led epoch 17 from offset 3 (one marker written) then
    follows a leader whose log holds epoch-16 batches at 3..: it truncates
    to 3 and appends them. The epoch entry (17, 3) must go with the tail:
    kept, the recovery after a kill -9 took the epoch-16 batches for damage
    ("epoch 17 was in effect there") and cut out 8 acknowledged records
    (the restart matrix's soak, stop 55)."""
    config = LogConfig.from_properties({"segment.bytes": 1 << 20, "retention.ms": -1})
    leader = PartitionLog.open(str(tmp_path / "leader-0"), config)
    leader.leader_epoch = 16
    for i in range(6):
        leader.append(batch([b"r%d" % i]))
    follower = PartitionLog.open(str(tmp_path / "follower-0"), config)
    follower.append_as_follower(bytes(leader.read(0, 1 << 20).read()))
    follower.truncate_to(3)
    follower.leader_epoch = 17                  # led epoch 17 from offset 3...
    follower.leader_epoch_cache.assign(17, 3)
    follower.append(batch([b"its own"]))        # ...and wrote one batch there
    assert follower.truncate_to(3)              # then follows the epoch-16 log again
    assert follower.leader_epoch_cache.entries == [(16, 0)]
    follower.append_as_follower(bytes(leader.read(3, 1 << 20).read()))
    follower._poll_flushes(wait=True)
    del follower                                # kill -9: no close, no marker
    follower = PartitionLog.open(str(tmp_path / "follower-0"), config)
    assert not follower.had_clean_shutdown and follower.truncated_bytes == 0
    assert [r[3] for r in read_all(follower)] == [b"r%d" % i for i in range(6)]
    follower.close()
    leader.close()


def _write_epoch_checkpoint(directory, entries):
    with open(os.path.join(directory, "leader-epoch-checkpoint"), "w") as f:
        f.write("0\n%d\n" % len(entries) + "".join(f"{e} {o}\n" for e, o in entries))


def test_a_stale_epoch_entry_yields_to_the_batches_and_no_record_is_cut(tmp_path):
    """Whatever left the epoch cache stale, a kill -9 recovery keeps every
    CRC-valid batch and rebuilds the entries it scanned from them, as
    Kafka's LogSegment.recover does: an entry saying epoch 17 began at
    offset 3 over epoch-16 batches used to cut offsets 3.. out (the check
    that turned the soak's stale entry into loss). An epoch assigned at the
    log end before its first batch, newer than the batches, is kept."""
    directory = str(tmp_path / "stale-0")
    config = LogConfig.from_properties({"segment.bytes": 1 << 20, "retention.ms": -1})
    plog = PartitionLog.open(directory, config)
    plog.leader_epoch = 16
    for i in range(6):
        plog.append(batch([b"r%d" % i]))
    plog._poll_flushes(wait=True)
    del plog                                    # kill -9
    _write_epoch_checkpoint(directory, [(16, 0), (17, 3), (19, 6)])
    again = PartitionLog.open(directory, config)
    assert not again.had_clean_shutdown and again.truncated_bytes == 0
    assert [r[3] for r in read_all(again)] == [b"r%d" % i for i in range(6)]
    assert again.leader_epoch_cache.entries == [(16, 0), (19, 6)]
    again.close()
    # entries the batches contradict go, whether newer or older than theirs
    plog = PartitionLog.open(directory, config)
    plog.leader_epoch = 19
    plog.append(batch([b"r6"]))
    plog._poll_flushes(wait=True)
    del plog
    _write_epoch_checkpoint(directory, [(15, 0), (18, 2)])
    again = PartitionLog.open(directory, config)
    assert again.truncated_bytes == 0 and len(read_all(again)) == 7
    assert again.leader_epoch_cache.entries == [(16, 0), (19, 6)]
    again.close()
