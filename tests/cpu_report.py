"""CPU seconds per test file, for finding where the suite's CPU goes
(issue 73): with KAFKALITE_TEST_CPU=<file> set, each pytest process (the
controlling one with ``-n 0``, each xdist worker otherwise) appends to
that file one tab-separated line per test file it ran:

    <path>  <cpu s: this process>  <cpu s: its reaped children>  <wall s>

and one ``(session)`` line for all of the process, collection included.
user+sys, from getrusage. A child counts when it is reaped: a module's
server at its module's last teardown, the session's ``server`` with the
last file a process runs (so read that file's line with it in mind).
Off by default; tests/conftest.py registers it.
"""
from __future__ import annotations

import resource
import time

import pytest


def _usage() -> tuple[float, float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime, time.monotonic())


class CpuReport:
    def __init__(self, path: str):
        self.path = path
        self.start = _usage()
        self.files: dict[str, list[float]] = {}

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        before = _usage()
        yield
        after = _usage()
        acc = self.files.setdefault(item.nodeid.split("::")[0], [0.0, 0.0, 0.0])
        for i in range(3):
            acc[i] += after[i] - before[i]

    def pytest_sessionfinish(self, session):
        end = _usage()
        lines = [(path, *acc) for path, acc in self.files.items()]
        lines.append(("(session)", *(e - s for e, s in zip(end, self.start))))
        with open(self.path, "a") as f:
            f.writelines(f"{p}\t{own:.2f}\t{kids:.2f}\t{wall:.2f}\n" for p, own, kids, wall in lines)
