"""Fixtures for storage tests: real logs in tmp dirs, a controllable clock,
and the remote stores (a directory, or a bucket on moto's S3 server)."""
import os

import pytest

from moto_s3 import moto_s3

from kafkalite.storage import LogConfig, PartitionLog
from storage_helpers import Clock


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def open_log(tmp_path, clock):
    """open_log(name="t-0", clock=..., **topic_config) -> PartitionLog; all closed at teardown."""
    opened = []

    def _open(name="t-0", use_clock=None, **props):
        cfg = LogConfig.from_properties({k.replace("_", "."): v for k, v in props.items()})
        plog = PartitionLog.open(str(tmp_path / name), cfg, clock=use_clock or clock)
        opened.append(plog)
        return plog

    yield _open
    for plog in opened:
        try:
            plog.close()
        except Exception:
            pass


@pytest.fixture(scope="module")
def s3_endpoint():
    """moto's S3 server, for a module's tests."""
    with moto_s3("tiered") as endpoint:
        yield endpoint


@pytest.fixture(params=["directory", "s3"])
def store(request, tmp_path):
    """Each remote store, empty: a directory, or a bucket of its own on
    moto's S3 server."""
    from kafkalite.storage.remote.s3_storage import S3RemoteStorage
    from kafkalite.storage.remote.storage_manager import LocalDirectoryRemoteStorage
    if request.param == "directory":
        return LocalDirectoryRemoteStorage(str(tmp_path / "remote"))
    store = S3RemoteStorage("tiered", endpoint_url=request.getfixturevalue("s3_endpoint"))
    store.bucket = "b" + os.urandom(6).hex()
    store.s3.create_bucket(Bucket=store.bucket)
    return store
