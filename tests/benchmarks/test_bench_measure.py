"""kafkalite/bench/measure.py's machine state (issue 46): what a run
records of the machine it ran on, read from this machine's /proc, and
what it records where a file is missing (another OS): fields left out,
never an error."""
import gc
import mmap

import pytest

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


@pytest.mark.processes
def test_warm_memory_writes_the_size_in_a_child_and_says_so():
    warmed = measure.warm_memory(32 << 20)
    assert warmed["ok"] and warmed["bytes"] == 32 << 20 and warmed["seconds"] > 0
    assert measure.last_warm_memory() == warmed


def test_gc_pauses_times_each_collection_from_start_on():
    pauses = measure.GcPauses()
    gc.collect()                       # before start(): not counted
    pauses.start()
    try:
        keep = [[i] for i in range(200_000)]   # a full collection has these to walk
        gc.collect()
        gc.collect(0)
    finally:
        gc.callbacks.remove(pauses._observe)
    st = pauses.summary()
    assert st["collections"] >= 2 and st["full"] >= 1, st
    assert st["paused_ms"] >= st["longest_ms"] > 0, st
    del keep
    merged = measure.merge_gc_pauses([st, {"collections": 3, "full": 0, "paused_ms": 1.5,
                                           "longest_ms": 1e6}])
    assert merged["processes"] == 2 and merged["collections"] == st["collections"] + 3
    assert merged["full"] == st["full"] and merged["longest_ms"] == 1e6
    assert merged["paused_ms"] == st["paused_ms"] + 1.5
    assert measure.merge_gc_pauses([]) is None
    line = measure.gc_summary({"producers": merged, "consumers": None})
    assert line.startswith("producers' collector: longest pause 1000000.0 ms,"), line
    assert "consumers'" not in line


def test_freezing_startup_objects_leaves_them_out_of_later_collections():
    gc.unfreeze()
    try:
        measure.freeze_startup_objects()
        frozen = gc.get_freeze_count()
        assert frozen > 1000               # the interpreter's and pytest's objects
        assert len(gc.get_objects()) < frozen
    finally:
        gc.unfreeze()
