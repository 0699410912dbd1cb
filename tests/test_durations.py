"""tests/durations.py: the table of each xdist group's seconds that orders
the groups, and the writer that refreshes it from a run."""
import json
from types import SimpleNamespace

import pytest

import durations


def _report(nodeid: str, seconds: float):
    return SimpleNamespace(nodeid=nodeid, duration=seconds)


def test_a_run_replaces_its_groups_entries_and_keeps_the_others(tmp_path):
    table = tmp_path / "durations.json"
    table.write_text(json.dumps({"kept": 40.0, "grown": 20.0, "shrunk": 30.0}))
    writer = durations.DurationsWriter(str(table))
    # an xdist worker's test ids carry the group after "@"; setup, call and
    # teardown of every test of a group add up
    for nodeid, seconds in [("tests/a.py::t1@grown", 1.0), ("tests/a.py::t1@grown", 30.0),
                            ("tests/a.py::t2@grown", 5.5), ("tests/b.py::t@shrunk", 2.0),
                            ("tests/c.py::t@new", 16.0), ("tests/d.py::t@short", 3.0)]:
        writer.pytest_runtest_logreport(_report(nodeid, seconds))
    writer.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
    written = json.loads(table.read_text())
    # the groups under the floor are left out: collection order places them
    assert written == {"kept": 40.0, "grown": 36.5, "new": 16.0}
    assert list(written) == ["kept", "grown", "new"]        # the longest first, for a reader


def test_without_xdist_the_groups_come_from_the_collected_items(tmp_path):
    table = tmp_path / "durations.json"
    writer = durations.DurationsWriter(str(table))
    item = SimpleNamespace(nodeid="tests/a.py::t", iter_markers=lambda name: [
        pytest.mark.xdist_group("b").mark, pytest.mark.xdist_group("a").mark])
    writer.pytest_collection_modifyitems([item])
    writer.pytest_runtest_logreport(_report("tests/a.py::t", 20.0))
    writer.pytest_sessionfinish(SimpleNamespace(config=SimpleNamespace()))
    assert json.loads(table.read_text()) == {"a_b": 20.0}    # as xdist names a group of two


def test_no_table_or_a_broken_one_leaves_collection_order(tmp_path):
    assert durations.load(tmp_path / "missing.json") == {}
    (tmp_path / "broken.json").write_text("{")
    assert durations.load(tmp_path / "broken.json") == {}


def test_the_repositorys_table_is_seconds_by_group():
    table = durations.load()
    assert table and all(isinstance(s, float) and s >= durations.DURATIONS_FLOOR
                         for s in table.values())
