"""LocalRegionReader: a same-host leader's segment file read by path, and
only if it is the file the leader described (device and inode)."""
from __future__ import annotations

import os

import pytest

from kafkalite.errors import KafkaStorageError
from kafkalite.storage import local_region
from kafkalite.storage.local_region import LocalRegionReader, host_identity, same_host


def described(path):
    st = os.stat(path)
    return st.st_dev, st.st_ino


@pytest.fixture
def reader():
    r = LocalRegionReader()
    yield r
    r.close()


def test_this_host_is_named_by_boot_and_mount_namespace():
    identity = host_identity()
    boot = open("/proc/sys/kernel/random/boot_id").read().strip()
    assert identity == f"{boot}/{os.stat('/proc/self/ns/mnt').st_ino}"
    assert same_host(identity)
    assert not same_host(None) and not same_host("") and not same_host(boot + "/1")


def test_reads_the_region_and_keeps_the_file_open(tmp_path, reader):
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(range(256)) * 4)
    dev, ino = described(path)
    assert bytes(reader.read(str(path), dev, ino, 10, 20)) == (bytes(range(256)) * 4)[10:30]
    assert bytes(reader.read(str(path), dev, ino, 1000, 24)) == (bytes(range(256)) * 4)[1000:]
    assert reader.open_count == 1


def test_another_file_at_the_path_a_missing_file_and_a_short_file_are_refused(tmp_path, reader):
    path = tmp_path / "a.log"
    path.write_bytes(b"x" * 100)
    dev, ino = described(path)
    other = tmp_path / "b.log"
    other.write_bytes(b"y" * 100)
    os.replace(other, path)                      # as the cleaner swaps a segment
    with pytest.raises(KafkaStorageError, match="not the file the leader read"):
        reader.read(str(path), dev, ino, 0, 10)
    with pytest.raises(KafkaStorageError, match="No such file"):
        reader.read(str(tmp_path / "gone.log"), dev, ino, 0, 10)
    dev2, ino2 = described(path)
    with pytest.raises(KafkaStorageError, match="shorter than the region"):
        reader.read(str(path), dev2, ino2, 90, 20)
    with pytest.raises(KafkaStorageError, match="no region"):
        reader.read(str(path), dev2, ino2, 0, 0)


def test_an_open_file_keeps_reading_its_inode_after_the_path_goes(tmp_path, reader):
    path = tmp_path / "a.log"
    path.write_bytes(b"old!" * 10)
    dev, ino = described(path)
    assert bytes(reader.read(str(path), dev, ino, 0, 4)) == b"old!"
    os.unlink(path)                               # retention deleted the segment
    path.write_bytes(b"new!" * 10)
    assert bytes(reader.read(str(path), dev, ino, 4, 4)) == b"old!"


def test_idle_and_surplus_files_are_closed(tmp_path, reader, monkeypatch):
    monkeypatch.setattr(local_region, "MAX_OPEN", 3)
    files = []
    for i in range(5):
        p = tmp_path / f"{i}.log"
        p.write_bytes(b"z" * 10)
        files.append((str(p), *described(p)))
    for path, dev, ino in files:
        reader.read(path, dev, ino, 0, 10)
    assert reader.open_count == 3
    fds_before = len(os.listdir("/proc/self/fd"))
    reader.close_idle(now=1e12)
    assert reader.open_count == 0
    assert len(os.listdir("/proc/self/fd")) == fds_before - 3
