"""The CPU a benchmark run counts (kafkalite/bench/cpu.py,
measure.process_table / tree_seconds): a process tree's time from /proc,
children included, and the per-message figures of a window."""
from __future__ import annotations

import subprocess
import sys
import time

import pytest

from kafkalite.bench.cpu import CpuWindow, summary
from kafkalite.bench.measure import process_table, tree_seconds

# a parent whose child spins: the parent itself sleeps, so only the tree counts the spin
SPINNER = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c",
                          "import time\\nend = time.process_time() + 0.6\\n"
                          "while time.process_time() < end: pass\\ntime.sleep(30)"])
time.sleep(30)
"""


@pytest.mark.processes
def test_a_tree_counts_its_childrens_cpu_and_a_window_divides_it_by_messages():
    parent = subprocess.Popen([sys.executable, "-c", SPINNER])
    try:
        window = CpuWindow([parent.pid], [], requests=iter([100, 300]).__next__)
        window.open(sent=1000)
        deadline = time.monotonic() + 30
        while tree_seconds(process_table(), [parent.pid]) < 0.6 + window.start["server"]:
            assert time.monotonic() < deadline, "the child never spun"
            time.sleep(0.05)
        window.close(sent=3000)
        cpu = window.result()
        own = process_table()[parent.pid][2]
        # the parent slept: nearly all of the tree's time is the child's
        assert own < 30 and cpu["server_cores"] > 0
        assert cpu["messages"] == 2000 and cpu["requests"] == 200
        expected = cpu["server_cores"] * cpu["seconds"] * 1e6 / 2000
        assert abs(cpu["server_us_per_msg"] - expected) < 1e-6
        assert cpu["server_us_per_request"] == cpu["server_us_per_msg"] * 10
        # the spinning child blocks (nearly) never, the sleeping parent once: a handful, not
        # one per clock tick (a child still starting up may read a file or two)
        assert 0 <= cpu["server_wakeups_per_msg"] * 2000 < 100
        assert summary(cpu).startswith("CPU: server ")
    finally:
        subprocess.run(["pkill", "-P", str(parent.pid)])
        parent.kill()
        parent.wait()


def test_a_window_without_a_server_or_its_second_sample_has_no_server_figure():
    window = CpuWindow([], [])
    assert window.result() is None
    window.open(0)
    window.close(10)
    cpu = window.result()
    assert cpu["server_cores"] is None and cpu["server_us_per_msg"] is None
    assert cpu["requests"] is None and "server" not in summary(cpu)
