"""Fixtures for storage tests: real logs in tmp dirs and a controllable clock."""
import pytest

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
