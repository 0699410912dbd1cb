"""Measuring and reporting helpers of the benchmark scripts
(bench_storage.py, bench_shm_ring.py, bench_groups.py, bench_spark.py).

The helpers every kafkalite benchmark shares -- output (``say``, ``warn``,
sizes), ``gc_paused``, ``machine_info``, the text and Markdown tables and
the plot setup -- live in kafkalite.bench.measure (``kafkalite bench`` uses
them from an installed package) and are re-exported here. This file adds
what only the scripts use: timing loops (``timed``, ``timed_both``,
``quiesce``), their directories, progress (``Progress``), the figures of a
run (``Results``) and how they are written out (the table rows,
``results.json`` and the plot). Arguments, rounds and the comparison table
are common.py's.

The scripts run as ``python benchmarks/<script>.py``, so benchmarks/ is
sys.path[0] and ``import report`` finds this file.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # kafkalite importable from a checkout that is not installed
    sys.path.insert(0, str(REPO))

from kafkalite.bench.measure import (  # noqa: E402,F401  (re-exported for the scripts)
    GB, GiB, KiB, MB, MiB, cpu_model, gc_paused, human_bytes, loadavg, machine_info,
    machine_info_at_end, markdown_table, mount_of, parse_size, pressure, pyplot, save_figure,
    say, text_table, warn)


# ---- output ----------------------------------------------------------------------------

class Progress:
    """Percent + MB/s on stderr: in place on a TTY, else a line every ~10%."""

    def __init__(self, label: str, total: int):
        self.label, self.total = label, max(total, 1)
        self.tty = sys.stderr.isatty()
        self.t0 = time.perf_counter()
        self.last_draw = 0.0
        self.next_pct = 10

    def update(self, done: int) -> None:
        now = time.perf_counter()
        pct = 100.0 * done / self.total
        if self.tty:
            if now - self.last_draw < 0.2:
                return
            self.last_draw = now
            sys.stderr.write(f"\r  {self.label}: {pct:5.1f}%  {self._rate(done, now)}   ")
            sys.stderr.flush()
        elif pct >= self.next_pct:
            while pct >= self.next_pct:
                self.next_pct += 10
            sys.stderr.write(f"  {self.label}: {pct:5.1f}%  {self._rate(done, now)}\n")
            sys.stderr.flush()

    def _rate(self, done: int, now: float) -> str:
        dt = max(now - self.t0, 1e-9)
        return f"{human_bytes(done)} at {done / dt / MB:,.0f} MB/s"

    def finish(self, done: int) -> None:
        now = time.perf_counter()
        end = "\r" if self.tty else ""
        sys.stderr.write(f"{end}  {self.label}: 100.0%  {self._rate(done, now)} "
                         f"in {now - self.t0:.1f} s\n")
        sys.stderr.flush()


# ---- timing ----------------------------------------------------------------------------

def timed(loop) -> float:
    """Seconds taken by ``loop()`` (perf_counter, GC paused)."""
    with gc_paused():
        t0 = time.perf_counter()
        loop()
        return time.perf_counter() - t0


def timed_both(loop) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) taken by ``loop()``.
    CPU time (user + system) is not inflated by other processes competing
    for the two cores, which wall time on a shared VM is."""
    with gc_paused():
        c0, t0 = time.process_time(), time.perf_counter()
        loop()
        return time.perf_counter() - t0, time.process_time() - c0


def quiesce() -> None:
    """Write back every dirty page on the machine (os.sync) before a timed
    section, so that it does not pay for earlier writes or deletes."""
    if hasattr(os, "sync"):
        os.sync()


def produce_when_room(producer, send, give_up_s: float = 60.0) -> None:
    """``send()`` once librdkafka's local queue has room: called after a
    ``BufferError``, it polls until delivery reports make room, as an
    application would. A loaded machine can leave a million records in
    flight for seconds; a broker that stops answering for ``give_up_s``
    fails the run with a readable error instead of spinning forever."""
    give_up = time.monotonic() + give_up_s
    while True:
        producer.poll(0.05)
        try:
            send()
            return
        except BufferError:
            if time.monotonic() > give_up:
                raise RuntimeError(f"librdkafka's queue stayed full for {give_up_s:.0f} s: "
                                   "the broker stopped answering") from None


# ---- the machine and the directories ---------------------------------------------------

def default_work_parent() -> str:
    """The system temp dir if it is a real filesystem on the repository's
    disk; otherwise the benchmarks/ folder (on the repository's disk)."""
    tmp = tempfile.gettempdir()
    try:
        same_disk = os.stat(tmp).st_dev == os.stat(REPO).st_dev
    except OSError:
        same_disk = False
    if same_disk and mount_of(tmp)[1] not in ("tmpfs", "ramfs"):
        return tmp
    return str(REPO / "benchmarks")


def make_dirs(name: str, output_dir: str | None, work_dir: str | None) -> tuple[str, str]:
    """(output directory, temporary data directory) of a run of benchmark ``name``:
    ``output_dir`` or benchmarks/results/<name>-<timestamp>, and a new
    kafkalite-bench-<name>-* directory under ``work_dir`` or default_work_parent()."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    out_dir = output_dir or str(REPO / "benchmarks" / "results" / f"{name}-{stamp}")
    work_parent = work_dir or default_work_parent()
    os.makedirs(work_parent, exist_ok=True)
    os.makedirs(out_dir, exist_ok=True)
    work = tempfile.mkdtemp(prefix=f"kafkalite-bench-{name}-", dir=work_parent)
    return out_dir, work


def say_memory(info: dict) -> None:
    mem = info["memory_bytes"]
    say(f"  memory     {human_bytes(mem) if mem else 'unknown'}")


def say_load(info: dict) -> None:
    """The header lines on other work on the machine, and on a VM's memory."""
    say(f"  load avg   {info['load_average_at_start']}, pressure avg60 "
        f"{info['pressure_avg60_at_start']} (other work on the machine skews results)")
    if info.get("free_page_reporting"):
        say(f"  memory     free page reporting {info['free_page_reporting']} (a VM handing "
            f"freed memory back to its host: writes into it pay a host fault per page)")


def warn_if_memory_fs(info: dict, work: str, what: str) -> None:
    """Warns, saying ``what`` that means, when the data directory is on tmpfs or ramfs."""
    if info["work_dir_fstype"] in ("tmpfs", "ramfs"):
        warn(f"{work} is on {info['work_dir_fstype']}: {what}; use --work-dir")


# ---- figures ---------------------------------------------------------------------------

class Results:
    """The figures of a run, in the order added."""

    def __init__(self):
        self.figures: dict[str, dict] = {}
        self.order: list[str] = []

    def add(self, key, test, label, value, unit, *, baseline_key=None, target=None,
            target_text="", meets=None, note="", runs=None):
        self.figures[key] = dict(test=test, label=label, value=value, unit=unit,
                                 baseline=baseline_key, target=target, target_text=target_text,
                                 meets_target=meets, note=note, runs=runs or [])
        self.order.append(key)

    def get(self, key):
        f = self.figures.get(key)
        return None if f is None else f["value"]

    def targets_met(self) -> dict:
        """{key: met} of the figures that have a target."""
        return {k: f["meets_target"] for k, f in self.figures.items()
                if f["meets_target"] is not None}


def fmt_value(value, unit) -> str:
    if value is None:
        return "n/a"
    if unit == "records/s":
        return f"{value / 1e6:.2f} M rec/s"
    if unit == "MB/s":
        return f"{value:,.0f} MB/s"
    if unit == "GB/s":
        return f"{value:.2f} GB/s"
    if unit == "ratio":
        return f"{value:.3f}x"
    if unit == "us":
        return f"{value:.2f} us"
    if unit == "ms":
        return f"{value:.3f} ms" if value < 10 else f"{value:,.1f} ms"
    if unit == "msg/s":
        return f"{value:,.0f} msg/s"
    if unit == "messages":
        return f"{value:,}"
    return f"{value:g} {unit}"


def table_rows(res: Results) -> list[list[str]]:
    """One row a figure: test, label, value, baseline (value and short name),
    ratio to the baseline, target, met."""
    rows = []
    for key in res.order:
        f = res.figures[key]
        base = res.figures.get(f["baseline"]) if f["baseline"] else None
        base_txt = ratio_txt = ""
        if base is not None:
            name = base["label"]
            base_txt = f"{fmt_value(base['value'], base['unit'])} ({name})"
            if base["value"] and f["value"] is not None and base["unit"] == f["unit"]:
                ratio_txt = f"{f['value'] / base['value']:.2f}x"
        met = "" if f["meets_target"] is None else ("yes" if f["meets_target"] else "NO")
        rows.append([str(f["test"]), f["label"], fmt_value(f["value"], f["unit"]), base_txt,
                     ratio_txt, f["target_text"], met])
    return rows


def say_targets_met(met: dict) -> None:
    say("targets met: " + ", ".join(f"{k}={'yes' if v else 'no'}" for k, v in met.items()))


def say_targets_informational() -> None:
    say("(targets are informational: the exit status does not depend on them)")


# ---- files -----------------------------------------------------------------------------

def results_doc(benchmark: str, elapsed: float, info: dict, settings: dict, units: dict,
                targets: dict, res: Results) -> dict:
    """The document written to results.json."""
    return {
        "benchmark": benchmark,
        "timestamp": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed, 2),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "machine": info,
        "settings": settings,
        "units": units,
        "targets": targets,
        "meets_target": res.targets_met(),
        "figures": res.figures,
    }


def write_json(out_dir: str, doc: dict) -> None:
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(doc, f, indent=2, default=str)
        f.write("\n")


def write_tables(out_dir: str, title: str, res: Results, headers: list, *, elapsed: float,
                 info: dict, settings: dict, units: dict, intro: str = "") -> dict:
    """The end of a figures-table benchmark: the text table and which
    targets were met on stdout, results.json, and results.md (``title``,
    the command, ``intro``, the table). Returns the results.json document."""
    rows = table_rows(res)
    say()
    say(text_table(rows, headers))
    if res.targets_met():
        say_targets_met(res.targets_met())
        say_targets_informational()
    doc = results_doc(title, elapsed, info, settings, units, {}, res)
    write_json(out_dir, doc)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(f"# {title}\n\n- command: `{doc['command']}`\n- date: {doc['timestamp']}\n")
        if intro:
            f.write(f"- {intro}\n")
        f.write("\n" + markdown_table(rows, headers) + "\n")
    say(f"results: {out_dir}")
    return doc


def finish(out_dir: str, plot, elapsed: float) -> None:
    """Draws results.png with ``plot(path) -> bool`` (a plot failure is only
    a warning), then says where the results are and how long the run took."""
    png = os.path.join(out_dir, "results.png")
    try:
        if plot(png):
            say(f"plot: {png}")
    except Exception as exc:  # a plot failure is not a benchmark failure
        warn(f"plot failed: {exc!r}")
    say(f"results: {os.path.join(out_dir, 'results.json')}, {os.path.join(out_dir, 'results.md')}")
    say(f"elapsed: {elapsed:.1f} s")
