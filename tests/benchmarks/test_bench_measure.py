"""kafkalite/bench/measure.py's machine state (issue 46): what a run
records of the machine it ran on, read from this machine's /proc, and
what it records where a file is missing (another OS): fields left out,
never an error."""
import mmap

from kafkalite.bench import measure

PAGE = mmap.PAGESIZE


def _touch(size: int) -> None:
    m = mmap.mmap(-1, size)
    for i in range(0, size, PAGE):
        m[i] = 1
    m.close()


def test_a_run_that_writes_fresh_memory_counts_its_faults():
    start = measure.machine_state()
    _touch(16 << 20)
    change = measure.machine_change(start, measure.machine_state())
    assert change["pgfault"] >= (16 << 20) // PAGE
    assert change["faulted_bytes"] == change["pgfault"] * PAGE
    assert 0 <= change["steal_pct"] <= 100 and 0 <= change["iowait_pct"] <= 100
    assert change["MemAvailable_end"] > 0 and change["MemFree_start"] > 0
    assert len(change["load_average_start"]) == 3
    line = measure.machine_summary(change)
    assert line.startswith("load ") and "faulted in" in line and "steal " in line, line


def test_missing_files_leave_fields_out():
    # what machine_state reads on a system without /proc (macOS): nothing
    empty = {"time": 1.0, "load_average": None, "cpu_jiffies": None, "memory": {},
             "vmstat": {}, "reported_kib": None, "pressure_us": {}}
    change = measure.machine_change(empty, {**empty, "time": 2.0})
    assert change["steal_pct"] is None and change["pgfault"] is None
    assert change["faulted_bytes"] is None and change["pressure_some_pct"] is None
    assert measure.machine_summary(change) == "machine state not readable here"


def test_warm_memory_writes_the_size_in_a_child_and_says_so():
    warmed = measure.warm_memory(32 << 20)
    assert warmed["ok"] and warmed["bytes"] == 32 << 20 and warmed["seconds"] > 0
    assert measure.last_warm_memory() == warmed
