"""A disk that fills up (here: RLIMIT_FSIZE, which makes write() fail with
EFBIG) gives a clear error and leaves a valid, readable log."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from storage_helpers import batch, child_env, read_all, verify_segments
from kafkalite.storage import LogConfig, PartitionLog

CHILD = textwrap.dedent("""
    import json, resource, sys
    from kafkalite.errors import KafkaStorageError
    from kafkalite.record import RecordBatchBuilder
    from kafkalite.storage import LogConfig, PartitionLog
    limit = int(sys.argv[2])
    plog = PartitionLog.open(sys.argv[1], LogConfig.from_properties(
        {"segment.bytes": 10 * limit, "retention.ms": -1}))
    # no .pyc written past here: one cut at the limit (the session's
    # PYTHONPYCACHEPREFIX, tests/conftest.py) broke numpy's import of
    # datetime in every later child ("marshal data too short")
    sys.dont_write_bytecode = True
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    acked, error = [], None
    for i in range(100000):
        b = RecordBatchBuilder(0)
        b.append_values([b"%05d" % i * 20] * 10, timestamp=1)
        try:
            info = plog.append(b.build())
        except KafkaStorageError as exc:
            error = exc
            break
        acked.append(info.last_offset)
    # after the failure the log still serves reads of everything acknowledged
    got = 0
    offset = 0
    from kafkalite.record import decode_columns
    while offset < plog.log_end_offset:
        cols = decode_columns(plog.read(offset, 1 << 20).read(), verify_crc=True)
        got += len(cols)
        offset = cols.next_offset
    print(json.dumps({"acked": acked[-1], "error": str(error), "code": error.code,
                      "end": plog.log_end_offset, "read": got,
                      "size": plog.active_segment.size}))
""")


@pytest.mark.processes
def test_append_past_the_file_size_limit_fails_cleanly(tmp_path):
    directory = str(tmp_path / "full-0")
    limit = 64 * 1024
    proc = subprocess.run([sys.executable, "-c", CHILD, directory, str(limit)],
                          capture_output=True, timeout=60, env=child_env())
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    result = json.loads(proc.stdout)
    assert result["code"] == 56  # KAFKA_STORAGE_ERROR
    assert "File too large" in result["error"] and "rolled back" in result["error"]
    assert result["end"] == result["acked"] + 1, "the failed append left nothing behind"
    assert result["read"] == result["end"], "everything acknowledged is readable"
    assert result["size"] <= limit
    # The process died without closing the log; recovery finds it intact and
    # it takes appends again once there is room.
    plog = PartitionLog.open(directory, LogConfig.from_properties({"retention.ms": -1}))
    assert plog.log_end_offset == result["acked"] + 1
    assert plog.truncated_bytes == 0
    assert verify_segments(plog) == []
    plog.append(batch([b"more room"]))
    assert read_all(plog)[-1][3] == b"more room"
    plog.close()


def test_a_segment_file_that_could_not_be_opened_is_dropped_quietly(tmp_path):
    """A .log whose open failed (EMFILE at the descriptor limit, a file
    gone) is garbage at once; its __del__ found no descriptor attribute and
    printed an AttributeError traceback into the worker's log (seen by
    tests/server/test_resource_limits.py's no-traceback check)."""
    import gc
    import sys

    from kafkalite.storage.segment import SegmentFile
    unraisable = []
    hook, sys.unraisablehook = sys.unraisablehook, unraisable.append
    try:
        with pytest.raises(FileNotFoundError):
            SegmentFile(str(tmp_path / "missing.log"), create=False)
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert not unraisable, unraisable[0].exc_value


FULL_CHILD = textwrap.dedent("""
    import json, os, sys
    from kafkalite.errors import KafkaStorageError
    from kafkalite.record import RecordBatchBuilder, decode_columns
    from kafkalite.storage import LogConfig, PartitionLog
    logs = [PartitionLog.open(os.path.join(sys.argv[1], "t-%d" % i),
                              LogConfig.from_properties({"retention.ms": -1})) for i in range(3)]
    acked, codes = [0, 0, 0], set()
    for n in range(3000):
        b = RecordBatchBuilder(0)
        b.append_values([b"%06d" % n + b"x" * 1000], timestamp=1)
        try:
            logs[n % 3].append(b.build())
            acked[n % 3] += 1
        except KafkaStorageError as exc:
            codes.add(exc.code)
    read = []
    for plog in logs:
        got, offset = 0, 0
        while offset < plog.log_end_offset:
            cols = decode_columns(plog.read(offset, 1 << 20).read(), verify_crc=True)
            got, offset = got + len(cols), cols.next_offset
        read.append(got)
    print(json.dumps({"acked": acked, "read": read, "codes": sorted(codes),
                      "ends": [p.log_end_offset for p in logs]}))
""")


@pytest.mark.processes
def test_a_full_tmpfs_fails_appends_with_a_storage_error_not_a_sigbus(tmp_path):
    """On a file system filled to 100% every append past its space fails
    with KAFKA_STORAGE_ERROR (ENOSPC) and nothing else: no crash of the
    process (a write through a mapping of unreserved blocks would be a
    SIGBUS), and every acknowledged record reads back. Needs root, to mount
    a 1 MiB tmpfs."""
    mount = tmp_path / "small"
    mount.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs",
                                            str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    try:
        proc = subprocess.run([sys.executable, "-c", FULL_CHILD, str(mount)],
                              capture_output=True, timeout=120, env=child_env())
        assert proc.returncode == 0, (proc.returncode, proc.stderr.decode()[-3000:])
        result = json.loads(proc.stdout)
        assert result["codes"] == [56]          # KAFKA_STORAGE_ERROR
        assert result["read"] == result["acked"] == result["ends"]
        assert sum(result["acked"]) > 700, "most of the 1 MiB holds records"
    finally:
        subprocess.run(["umount", str(mount)])
