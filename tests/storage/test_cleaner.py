"""Log compaction against a dict model, tombstones, lag, and crashes mid-clean."""
import os
import random
import subprocess
import sys
import time
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from storage_helpers import Clock, child_env, read_all, verify_segments
from kafkalite.record import RecordBatch, RecordBatchBuilder
from kafkalite.storage import LogConfig, PartitionLog

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import cleaner_child  # noqa: E402
from soak import setting

HOUR = 3_600_000


def write(plog, entries, ts):
    """Append (key, value) entries as one batch; returns their offsets."""
    b = RecordBatchBuilder(0)
    for k, v in entries:
        b.append(ts, k, v)
    info = plog.append(b.build())
    return list(range(info.first_offset, info.last_offset + 1))


def check_compacted(plog, history, tombstones_expired=False):
    """The invariants of a compacted log, given every (key, value) ever
    written by offset."""
    records = read_all(plog)
    offsets = [r[0] for r in records]
    assert offsets == sorted(set(offsets)), "offsets must stay strictly increasing"
    for off, _ts, key, value, _h in records:
        assert history[off] == (key, value), f"record at {off} changed"
    latest = {}
    for off, (key, value) in sorted(history.items()):
        latest[key] = (off, value)
    seen_last = {}
    for off, _ts, key, value, _h in records:
        seen_last[key] = off
    for key, (off, value) in latest.items():
        if value is None and tombstones_expired and off < plog.cleaner_checkpoint:
            assert key not in seen_last, f"expired tombstone for {key!r} still present"
        else:
            assert seen_last.get(key) == off, f"latest record of {key!r} (offset {off}) lost"
    cleaned = [r[2] for r in records if r[0] < plog.cleaner_checkpoint]
    assert len(cleaned) == len(set(cleaned)), "a key appears twice in the cleaned section"
    assert verify_segments(plog, contiguous=False) == []


keys = st.sampled_from([b"k%d" % i for i in range(12)])
values = st.one_of(st.none(), st.binary(min_size=0, max_size=24))
ops = st.lists(st.one_of(
    st.tuples(st.just("write"), st.lists(st.tuples(keys, values), min_size=1, max_size=6)),
    st.tuples(st.just("roll")),
    st.tuples(st.just("compact"), st.integers(2, 40)),
), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops)
def test_compaction_matches_a_dict_model(tmp_path_factory, script):
    clock = Clock()
    directory = str(tmp_path_factory.mktemp("c") / "compact-0")
    plog = PartitionLog.open(directory, LogConfig.from_properties(
        {"cleanup.policy": "compact", "segment.bytes": 600, "delete.retention.ms": HOUR,
         "retention.ms": -1}), clock=clock)
    history = {}
    for op in script:
        if op[0] == "write":
            for off, kv in zip(write(plog, op[1], clock.now), op[1]):
                history[off] = kv
        elif op[0] == "roll":
            plog.roll()
        else:
            end = plog.log_end_offset
            plog.high_watermark = end
            plog.compact(max_map_entries=op[1])
            assert plog.log_end_offset == end
            check_compacted(plog, history)
        clock.advance(1000)
    check_compacted(plog, history)
    # Past the delete horizon, a cleaning with some new dirty data drops the
    # tombstones it stamped earlier.
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    plog.compact()
    clock.advance(2 * HOUR)
    for off, kv in zip(write(plog, [(b"fresh", b"x")], clock.now), [(b"fresh", b"x")]):
        history[off] = kv
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    plog.compact()
    check_compacted(plog, history, tombstones_expired=True)
    plog.close()
    reopened = PartitionLog.open(directory, plog.config, clock=clock)
    check_compacted(reopened, history, tombstones_expired=True)
    reopened.close()


def test_tombstone_is_kept_for_delete_retention_then_removed(open_log, clock):
    plog = open_log(cleanup_policy="compact", delete_retention_ms=HOUR)
    write(plog, [(b"a", b"1"), (b"b", b"1")], clock.now)
    write(plog, [(b"a", None)], clock.now)
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    plog.compact()
    batches = [RecordBatch(plog.read(o, 1).read()) for o in (1, 2)]
    stamped = [b for b in batches if b.has_delete_horizon]
    assert stamped and stamped[0].delete_horizon_ms == clock.now + HOUR
    assert [(k, v) for _, _, k, v, _ in read_all(plog)] == [(b"b", b"1"), (b"a", None)]
    clock.advance(HOUR - 1)
    write(plog, [(b"c", b"1")], clock.now)
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    plog.compact()
    assert (b"a", None) in [(k, v) for _, _, k, v, _ in read_all(plog)], "not yet expired"
    clock.advance(2)
    write(plog, [(b"d", b"1")], clock.now)
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    stats = plog.compact()
    assert stats.tombstones_removed == 1
    assert [k for _, _, k, _, _ in read_all(plog)] == [b"b", b"c", b"d"]


def test_min_compaction_lag_and_high_watermark_bound_the_cleaning(open_log, clock):
    plog = open_log(cleanup_policy="compact", min_compaction_lag_ms=10_000)
    write(plog, [(b"a", b"old")], clock.now - 20_000)
    plog.roll()
    write(plog, [(b"a", b"young")], clock.now)
    plog.roll()
    write(plog, [(b"a", b"newest")], clock.now)
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    stats = plog.compact()
    assert stats.end_offset == 1, "the segment with young records is not cleanable"
    # Only [0, 1) was mapped, so nothing newer was known for "a": all stay.
    assert [v for *_, v, _ in read_all(plog)] == [b"old", b"young", b"newest"]
    clock.advance(30_000)
    plog.high_watermark = 2
    stats = plog.compact()
    assert stats.end_offset == 2, "nothing at or above the high watermark is cleaned"
    assert [v for *_, v, _ in read_all(plog)] == [b"young", b"newest"]
    plog.high_watermark = plog.log_end_offset
    plog.compact()
    assert [v for *_, v, _ in read_all(plog)] == [b"newest"]


def test_compressed_batches_are_filtered_and_stay_compressed(open_log, clock):
    plog = open_log(cleanup_policy="compact")
    for codec in ("gzip", "snappy", "lz4", "zstd"):
        b = RecordBatchBuilder(codec)
        for i in range(20):
            b.append(clock.now, b"k%d" % (i % 5), b"%s-%d" % (codec.encode(), i) * 10)
        plog.append(b.build())
    plog.roll()
    plog.high_watermark = plog.log_end_offset
    plog.compact()
    records = read_all(plog)
    # only the zstd batch's records 15..19 are the latest for k0..k4
    assert [(o, k, v) for o, _, k, v, _ in records] == [
        (60 + 15 + i, b"k%d" % i, b"zstd-%d" % (15 + i) * 10) for i in range(5)]
    assert RecordBatch(plog.read(records[0][0], 1).read()).compression == 4


CRASH_POINTS = ["cleaner-after-write", "swap-after-manifest", "swap-mid-unlink",
                "swap-after-unlink", "swap-mid-rename", "cleaner-after-swap"]


def _build_dirty_log(directory, seed, segments=30):
    rng = random.Random(seed)
    plog = PartitionLog.open(directory, cleaner_child.CONFIG)
    history = {}
    for s in range(segments):
        entries = [(b"k%d" % rng.randrange(25), None if rng.random() < 0.1 else b"v%d.%d" % (s, i))
                   for i in range(rng.randrange(1, 30))]
        for off, kv in zip(write(plog, entries, 1000 * (s + 1)), entries):
            history[off] = kv
    plog.close()
    return history


@pytest.mark.processes
@pytest.mark.parametrize("point", CRASH_POINTS)
def test_crash_at_each_step_of_a_cleaning_leaves_a_valid_complete_log(tmp_path, point):
    directory = str(tmp_path / "crash-0")
    history = _build_dirty_log(directory, seed=zlib.crc32(point.encode()))
    proc = subprocess.run([sys.executable, os.path.join(HERE, "cleaner_child.py"), directory,
                           "1000000"], env=child_env(KAFKALITE_CRASH_AT=point),
                          capture_output=True, timeout=60)
    assert proc.returncode == 137, (point, proc.stderr.decode()[-2000:])
    plog = PartitionLog.open(directory, cleaner_child.CONFIG)
    assert not any(n.endswith((".cleaned", ".swap")) for n in os.listdir(directory))
    check_compacted(plog, history)
    plog.high_watermark = plog.log_end_offset
    plog.compact()
    check_compacted(plog, history)
    plog.close()


@pytest.mark.processes
@pytest.mark.slow
def test_kill_9_during_cleaning_at_random_moments(tmp_path):
    """KAFKALITE_CLEANER_KILLS kills (tests/soak.py: 3, 100 under tools/soak)."""
    rng = random.Random(5)
    for trial in range(setting("KAFKALITE_CLEANER_KILLS")):
        directory = str(tmp_path / f"kill{trial}-0")
        history = _build_dirty_log(directory, seed=trial, segments=150)
        proc = subprocess.Popen([sys.executable, os.path.join(HERE, "cleaner_child.py"),
                                 directory, str(rng.choice([10, 1000000]))],
                                stdout=subprocess.PIPE, env=child_env())
        assert proc.stdout.readline().startswith(b"cleaning")
        time.sleep(rng.uniform(0, 0.15))    # a random moment of the cleaning
        proc.kill()
        proc.wait()
        plog = PartitionLog.open(directory, cleaner_child.CONFIG)
        check_compacted(plog, history)
        plog.close()
