"""Each xdist group's seconds in a full run (tests/durations.json), for
handing the longest groups out first (tests/conftest.py), and the plugin
that writes them.

pytest-xdist's ``loadgroup`` gives a free process the next group in
collection order, and a group runs in one process from start to end: a
long group that starts late runs alone at the end while the other
processes have finished. Ordered longest first, the short groups fill in
behind the long ones. The table lists the groups of DURATIONS_FLOOR
seconds or more (the rest, a few seconds each, keep collection order
after them); a group not in it counts as short.

Refreshed from a full run (docs/development.md, "Tests"):

    KAFKALITE_TEST_DURATIONS=tests/durations.json python -m pytest

Each group of the run replaces its entry (setup, call and teardown of each
of its tests, summed, as measured under the run's own load); groups the
run did not reach keep theirs.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

TABLE = Path(__file__).with_name("durations.json")
DURATIONS_FLOOR = 15.0


def group_of(item) -> str:
    """The xdist group name as pytest-xdist writes it after a test id's
    ``@`` (its markers' names, sorted, joined by ``_``)."""
    return "_".join(sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                            for m in item.iter_markers("xdist_group")}))


def load(path: Path = TABLE) -> dict[str, float]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}      # no table (or a broken one): collection order


class DurationsWriter:
    """Sums each group's report durations in the controlling process (an
    xdist worker's test id carries its group after ``@``; with ``-n 0`` the
    groups come from the collected items) and merges them into the table
    at the end."""

    def __init__(self, path: str):
        self.path = Path(path)
        self.groups: dict[str, str] = {}
        self.seconds: dict[str, float] = {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items):
        self.groups = {item.nodeid: group_of(item) for item in items}

    def pytest_runtest_logreport(self, report):
        nodeid, at, group = report.nodeid.rpartition("@")
        group = group if at else self.groups.get(report.nodeid, "")
        if group:
            self.seconds[group] = self.seconds.get(group, 0.0) + report.duration

    def pytest_sessionfinish(self, session):
        if hasattr(session.config, "workerinput") or not self.seconds:
            return
        table = load(self.path)
        table.update(self.seconds)
        kept = {g: round(s, 1) for g, s in table.items() if s >= DURATIONS_FLOOR}
        self.path.write_text(json.dumps(dict(sorted(kept.items(), key=lambda kv: -kv[1])),
                                        indent=1) + "\n")
