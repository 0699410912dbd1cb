"""The offload's crash safety step by step: a kill -9 at each disk step of
the leader's copy of its rolled segments (the byte copies, the fsyncs, the
renames, the metadata writes, the local deletes that follow) leaves no
segment lost, none listed twice, and no object the metadata does not name
once the log reopens."""
import os
import shutil
import subprocess
import sys

import pytest

from kafkalite.storage import PartitionLog
from kafkalite.storage.remote.metadata import RemoteLogMetadataFile, RemoteLogSegmentState
from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage
from storage_helpers import child_env, read_all

import crash_writer
import tiered_copier
from kafkalite.record import RecordBatchBuilder

CHILD = os.path.join(os.path.dirname(__file__), "tiered_step_killer.py")


def _filled(directory: str, segments: int) -> int:
    """A tiered log of ``segments`` rolled segments and an active one,
    nothing copied yet; its end offset."""
    plog = PartitionLog.open(directory, tiered_copier.CONFIG)
    try:
        off = 0
        while len(plog.segments) <= segments:
            builder = RecordBatchBuilder("none")
            for o in range(off, off + 10):
                builder.append(o, crash_writer.key(o), crash_writer.value(o), [])
            off = plog.append(builder.build()).last_offset + 1
        plog.high_watermark = plog.log_end_offset
        plog.flush()
        return plog.log_end_offset
    finally:
        plog.close()


def _run(directory: str, store: str, kill_at: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, CHILD, directory, store, str(kill_at)],
                          capture_output=True, env=child_env(), timeout=60)


def _check(directory: str, store_dir: str, end: int, what: str) -> None:
    store = LocalDirectoryRemoteStorage(store_dir)
    plog = PartitionLog.open(directory, tiered_copier.CONFIG, remote_storage=store)
    try:
        plog.copy_to_remote(start=False)        # the open's deletes of what the kill left
        remote = RemoteLogMetadataFile(directory)
        assert all(s.state is RemoteLogSegmentState.COPY_SEGMENT_FINISHED for s in remote.all), \
            what
        names = sorted("%020d-%s" % (s.base_offset, s.id) for s in remote.all)
        on_disk = sorted(os.listdir(os.path.join(store_dir, "t-0"))) \
            if os.path.isdir(os.path.join(store_dir, "t-0")) else []
        assert on_disk == names, f"{what}: the store holds {on_disk}, the metadata names {names}"
        for before, after in zip(remote.all, remote.all[1:]):
            assert after.base_offset == before.end_offset + 1, f"{what}: listed twice or a gap"
        plog.copy_to_remote()                   # and the offload finishes from there
        plog.delete_old_segments()
        records = read_all(plog, start=0)
        assert [r[0] for r in records] == list(range(end)), f"{what}: a record was lost"
        for offset, _, k, v, _ in records:
            assert (k, v) == (crash_writer.key(offset), crash_writer.value(offset)), what
    finally:
        plog.close()


@pytest.mark.processes
def test_a_kill_at_each_step_of_the_offload_loses_no_segment_and_leaves_no_orphan(tmp_path):
    pristine, store = str(tmp_path / "pristine"), str(tmp_path / "store")
    end = _filled(pristine, segments=2)
    whole = str(tmp_path / "whole" / "t-0")
    shutil.copytree(pristine, whole)
    done = _run(whole, str(tmp_path / "whole-store"), -1)
    assert done.returncode == 0, done.stderr.decode()
    steps = int(done.stdout.split()[1])
    assert steps >= 20, steps
    for kill_at in range(steps):
        directory = str(tmp_path / f"k{kill_at}" / "t-0")
        shutil.copytree(pristine, directory)
        killed = _run(directory, store + str(kill_at), kill_at)
        assert killed.returncode == -9, (kill_at, killed.stderr.decode())
        _check(directory, store + str(kill_at), end, f"killed at step {kill_at} of {steps}")
        shutil.rmtree(os.path.dirname(directory))
