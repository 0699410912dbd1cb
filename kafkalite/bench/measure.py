"""Measuring and reporting helpers shared by every kafkalite benchmark: the
``kafkalite bench`` harness (this package) and the scripts in benchmarks/
(bench_storage.py, bench_shm_ring.py, bench_groups.py, through
benchmarks/report.py, which re-exports these).

Output (``say``, ``warn``, sizes), GC-paused timing, the machine a run is on
(``machine_info``: CPU, cores, memory, load and pressure, the data
directory's filesystem), the state it was in over one measured run
(``machine_state`` at its start and end, ``machine_change`` between them,
``machine_summary`` in one line), warming memory before a run
(``warm_memory``), text and Markdown tables, and matplotlib on the Agg
backend (``pyplot``, ``save_figure``). Nothing here knows about a broker.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import glob
import os
import platform
import subprocess
import sys
import time

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
MB, GB = 1e6, 1e9          # throughput units are decimal (1 MB/s = 10^6 bytes/s)


def say(msg: str = "") -> None:
    print(msg, flush=True)


def warn(msg: str) -> None:
    print(f"WARNING: {msg}", file=sys.stderr, flush=True)


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{int(n)} B"


def parse_size(text: str) -> int:
    """'10GiB', '256MB', '4M', '1048576' -> bytes (K/M/G are binary, KB/MB/GB decimal)."""
    s = text.strip().upper().replace(" ", "")
    units = [("KIB", KiB), ("MIB", MiB), ("GIB", GiB), ("TIB", 1 << 40),
             ("KB", 10**3), ("MB", 10**6), ("GB", 10**9), ("TB", 10**12),
             ("K", KiB), ("M", MiB), ("G", GiB), ("T", 1 << 40), ("B", 1)]
    for suffix, mult in units:
        if s.endswith(suffix):
            return int(float(s[:-len(suffix)]) * mult)
    return int(s)


@contextlib.contextmanager
def gc_paused():
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def freeze_startup_objects() -> None:
    """Collect once, then move every object alive now (the interpreter's,
    the imported modules', the client just made: about 30,000-40,000 in a
    bench child) into the permanent generation, which the collector no
    longer walks (``gc.freeze``). Without it each full collection during a
    run walks all of them: about 17 ms of CPU in a producer on the 2-core
    VM, and 50-170 ms of wall time when the cores are busy, charged to the
    messages due meanwhile; a confluent-kafka producer, whose delivery
    reports allocate per message, ran nine such collections in 25 s. The
    garbage of the run itself is still collected."""
    gc.collect()
    gc.freeze()


class GcPauses:
    """The collector's pauses in this process from ``start()`` on, timed by
    ``gc.callbacks``: a bench child's own pauses are charged to the
    messages due meanwhile, so results.json keeps them beside the latencies
    (how many collections, how many of them full, the longest pause and
    the sum, in wall time: a pause the cores were too busy to serve is
    as long as it lasted)."""

    def __init__(self):
        self.collections = self.full = 0
        self.paused_ns = self.longest_ns = 0
        self._began = 0

    def start(self) -> "GcPauses":
        gc.callbacks.append(self._observe)
        return self

    def _observe(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._began = time.perf_counter_ns()
            return
        took = time.perf_counter_ns() - self._began
        self.collections += 1
        self.full += info["generation"] == 2
        self.paused_ns += took
        self.longest_ns = max(self.longest_ns, took)

    def summary(self) -> dict:
        return {"collections": self.collections, "full": self.full,
                "paused_ms": self.paused_ns / 1e6, "longest_ms": self.longest_ns / 1e6}


def merge_gc_pauses(summaries: list[dict]) -> dict | None:
    """Several processes' GcPauses summaries as one: counts and pause time
    summed, the longest pause of any."""
    if not summaries:
        return None
    return {"processes": len(summaries),
            "collections": sum(s["collections"] for s in summaries),
            "full": sum(s["full"] for s in summaries),
            "paused_ms": sum(s["paused_ms"] for s in summaries),
            "longest_ms": max(s["longest_ms"] for s in summaries)}


def gc_summary(gc_stats: dict) -> str:
    """One line: "producers' collector: longest pause 3.1 ms, 41 ms in all
    (1,040 collections, 2 full); consumers' ..."."""
    parts = []
    for role in ("producers", "consumers"):
        st = gc_stats.get(role)
        if st:
            parts.append(f"{role}' collector: longest pause {st['longest_ms']:.1f} ms, "
                         f"{st['paused_ms']:,.0f} ms in all ({st['collections']:,} collections, "
                         f"{st['full']} full)")
    return "; ".join(parts)


def precise_sleeps() -> None:
    """Timer slack 1 ns for this thread (Linux prctl PR_SET_TIMERSLACK), so a
    sleep until a message is due overshoots by microseconds, not the default 50+."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(29, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def mount_of(path: str) -> tuple[str, str]:
    """(mount point, filesystem type) holding ``path`` (Linux /proc/mounts)."""
    real = os.path.realpath(path)
    best = ("/", "unknown")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                mnt = parts[1].replace("\\040", " ")
                inside = real == mnt or real.startswith(mnt.rstrip("/") + "/")
                if inside and len(mnt) >= len(best[0]):
                    best = (mnt, parts[2])
    except OSError:
        pass
    return best


def cpu_model() -> str | None:
    """The first 'model name' of /proc/cpuinfo, or None."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def _cpu_flags() -> str:
    """The first 'flags' line of /proc/cpuinfo, or ''."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return line
    except OSError:
        pass
    return ""


def _memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def pressure():
    """Linux PSI 'some avg60' for cpu and io (% of time tasks waited), if available."""
    out = {}
    for kind in ("cpu", "io"):
        try:
            with open(f"/proc/pressure/{kind}") as f:
                fields = dict(kv.split("=") for kv in f.readline().split()[1:])
            out[kind] = float(fields["avg60"])
        except (OSError, KeyError, ValueError):
            pass
    return out or None


def machine_info(work_dir: str, *, sse4_2: bool = False, extra: dict | None = None) -> dict:
    """The machine, Python and data directory of a run. ``sse4_2`` adds
    ``cpu_sse4_2`` (from the CPU flags); ``extra`` (versions of the
    libraries a script measures, ...) follows ``numpy``."""
    import numpy
    mnt, fstype = mount_of(work_dir)
    info = {"cpu_model": cpu_model() or platform.processor() or platform.machine(),
            "logical_cores": os.cpu_count()}
    if sse4_2:
        flags = _cpu_flags()
        info["cpu_sse4_2"] = (" sse4_2" in flags) if flags else None
    info.update({
        "memory_bytes": _memory_bytes(),
        "python": sys.version.split()[0],
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "numpy": numpy.__version__,
    })
    info.update(extra or {})
    info.update({
        "load_average_at_start": loadavg(),
        "pressure_avg60_at_start": pressure(),
        "free_page_reporting": free_page_reporting(),
        "page_reporting_parameters": page_reporting_parameters(),
        "warm_memory": _warmed,
        "work_dir": work_dir,
        "work_dir_mount": mnt,
        "work_dir_fstype": fstype,
    })
    return info


def free_page_reporting() -> str | None:
    """Whether this machine is a VM that hands memory freed for a while back
    to its host (virtio-balloon free page reporting): "on (2 MiB blocks)",
    "off" (the reporting order set past the largest block), or None (no
    such device). When on, the first write into memory the host took back
    costs a host fault per page, and page-cache writes run several times
    slower: benchmarks that write more (replication) pay more of it."""
    order_file = "/sys/module/page_reporting/parameters/page_reporting_order"
    try:
        order = int(open(order_file).read().strip())
    except (OSError, ValueError):
        return None
    for dev in glob.glob("/sys/bus/virtio/devices/*"):
        try:
            if int(open(f"{dev}/device").read().strip(), 16) != 5:      # a balloon
                continue
            features = open(f"{dev}/features").read().strip()
        except (OSError, ValueError):
            continue
        if len(features) > 5 and features[5] == "1":                   # F_REPORTING
            return f"on ({human_bytes(4096 << order)} blocks)" if order <= 10 else "off"
    return None


def machine_info_at_end(info: dict) -> None:
    """Adds the load average and pressure at the end of the run to ``info``."""
    info["load_average_at_end"] = loadavg()
    info["pressure_avg60_at_end"] = pressure()


# ---- the machine's state over one measured run ----------------------------------------

# /proc/stat's "cpu" line, in order (jiffies since boot); guest time is
# already counted in user and nice, so it is left out of the total.
_CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# /proc/vmstat counters kept: faults, and the balloon's (a VM's host taking
# memory back or giving it). Absent ones (other kernels) are left out.
_VMSTAT_FIELDS = ("pgfault", "pgmajfault", "thp_fault_alloc", "nr_balloon_pages",
                  "balloon_inflate", "balloon_deflate")
PAGE_REPORTING = "/sys/module/page_reporting/parameters"


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def cpu_jiffies() -> dict | None:
    """/proc/stat's whole-machine CPU time by field, in jiffies since boot
    (None where there is no /proc/stat)."""
    text = _read("/proc/stat")
    if not text or not text.startswith("cpu "):
        return None
    values = [int(v) for v in text.split("\n", 1)[0].split()[1:]]
    return dict(zip(_CPU_FIELDS, values))


# ---- CPU time of processes ------------------------------------------------------------

def process_table() -> dict[int, tuple[str, int, int]]:
    """{pid: (name, parent pid, user + system clock ticks of all its
    threads)} of every process now (``os.sysconf("SC_CLK_TCK")`` ticks a
    second). A process that ends between the listing and its read is left
    out."""
    out = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        stat = _read(f"/proc/{pid}/stat")
        if not stat:
            continue
        # the name is in parentheses and may hold spaces and parentheses itself
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(pid)] = (name, int(fields[1]), int(fields[11]) + int(fields[12]))
    return out


def tree_seconds(table: dict, roots) -> float:
    """CPU seconds of the processes ``roots`` and all their descendants in
    ``table`` (process_table), as far as they still run."""
    return sum(table[pid][2] for pid in tree_pids(table, roots)) / os.sysconf("SC_CLK_TCK")


def tree_pids(table: dict, roots) -> list[int]:
    """``roots`` and all their descendants in ``table`` (process_table)."""
    children: dict[int, list[int]] = {}
    for pid, (_name, ppid, _ticks) in table.items():
        children.setdefault(ppid, []).append(pid)
    seen, todo = [], [p for p in roots if p in table]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.append(pid)
            todo += children.get(pid, ())
    return seen


def voluntary_switches(pids) -> int:
    """Voluntary context switches of every thread of ``pids`` so far
    (/proc/<pid>/task/<tid>/status): a thread that blocks (poll, a lock, a
    sleep) counts one and is woken once for it, so their rate is how often
    the processes sleep and are woken; being preempted is not counted."""
    total = 0
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            for line in (_read(f"/proc/{pid}/task/{tid}/status") or "").splitlines():
                if line.startswith("voluntary_ctxt_switches:"):
                    total += int(line.split()[1])
    return total


def _meminfo(*keys: str) -> dict:
    out = {}
    for line in (_read("/proc/meminfo") or "").splitlines():
        name, _, rest = line.partition(":")
        if name in keys and rest.split():
            out[name] = int(rest.split()[0]) * 1024
    return out


def _vmstat() -> dict:
    out = {}
    for line in (_read("/proc/vmstat") or "").splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in _VMSTAT_FIELDS:
            out[parts[0]] = int(parts[1])
    return out


def _pressure_totals() -> dict:
    """PSI "some" total (µs any task waited) for cpu, io and memory."""
    out = {}
    for kind in ("cpu", "io", "memory"):
        line = (_read(f"/proc/pressure/{kind}") or "").split("\n", 1)[0].split()
        fields = dict(kv.split("=", 1) for kv in line[1:] if "=" in kv)
        if "total" in fields:
            out[kind] = int(fields["total"])
    return out


def page_reporting_parameters() -> dict | None:
    """The free-page-reporting module's parameters as this kernel exposes
    them (upstream: ``page_reporting_order``; some kernels add counters
    such as ``reported_kib`` and delays such as ``min_free_ms``), or None."""
    try:
        names = sorted(os.listdir(PAGE_REPORTING))
    except OSError:
        return None
    out = {}
    for name in names:
        text = (_read(f"{PAGE_REPORTING}/{name}") or "").strip()
        out[name] = int(text) if text.lstrip("-").isdigit() else text
    return out


def machine_state() -> dict:
    """A snapshot of what weighs on a measurement, taken at the start and
    at the end of each measured run (a few small file reads; a file this
    OS does not have leaves its fields out): load average, CPU time by
    kind, free memory, fault and balloon counters, free page reporting's
    counter, PSI totals."""
    reporting = page_reporting_parameters() or {}
    return {"time": time.time(), "load_average": loadavg(), "cpu_jiffies": cpu_jiffies(),
            "memory": _meminfo("MemAvailable", "MemFree"), "vmstat": _vmstat(),
            "reported_kib": reporting.get("reported_kib"), "pressure_us": _pressure_totals()}


def machine_change(start: dict, end: dict) -> dict:
    """What the machine did between two ``machine_state`` snapshots: load
    at each end; steal and iowait as a share (%) of the CPU time that
    passed (every core's); faults and major faults, and the memory they
    brought in at one page each (a transparent huge page fault brings in
    more, so this is a floor); free memory at each end; memory the kernel
    reported free to the host (free page reporting, when its counter is
    exposed); the share of the run's wall time some task waited on cpu,
    io or memory (PSI). A figure whose input is missing is None."""
    def delta(a, b, key):
        if not a or not b or a.get(key) is None or b.get(key) is None:
            return None
        return b[key] - a[key]

    seconds = end["time"] - start["time"]
    out = {"seconds": round(seconds, 3), "load_average_start": start["load_average"],
           "load_average_end": end["load_average"]}
    cpu0, cpu1 = start.get("cpu_jiffies"), end.get("cpu_jiffies")
    total = sum(cpu1.values()) - sum(cpu0.values()) if cpu0 and cpu1 else 0
    for kind in ("steal", "iowait"):
        d = delta(cpu0, cpu1, kind)
        out[f"{kind}_pct"] = round(100.0 * d / total, 2) if d is not None and total > 0 else None
    page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
    for key in ("pgfault", "pgmajfault", "thp_fault_alloc", "balloon_inflate",
                "balloon_deflate"):
        out[key] = delta(start.get("vmstat"), end.get("vmstat"), key)
    out["faulted_bytes"] = None if out["pgfault"] is None else out["pgfault"] * page
    for edge, state in (("start", start), ("end", end)):
        for key in ("MemAvailable", "MemFree"):
            out[f"{key}_{edge}"] = (state.get("memory") or {}).get(key)
    reported = delta(start, end, "reported_kib")
    out["reported_to_host_bytes"] = None if reported is None else reported * 1024
    out["pressure_some_pct"] = {
        kind: round(100.0 * (end["pressure_us"][kind] - start["pressure_us"][kind])
                    / (seconds * 1e6), 2)
        for kind in start.get("pressure_us", {})
        if kind in end.get("pressure_us", {}) and seconds > 0} or None
    return out


def machine_summary(change: dict) -> str:
    """One line: "load 0.40 -> 2.10, steal 0.3%, iowait 1.0%, 1.20 GiB
    faulted in (312,000 faults, 3 major), MemAvailable 21.9 GiB, ..."."""
    parts = []
    la0, la1 = change.get("load_average_start"), change.get("load_average_end")
    if la0 and la1:
        parts.append(f"load {la0[0]:.2f} -> {la1[0]:.2f}")
    for kind in ("steal", "iowait"):
        if change.get(f"{kind}_pct") is not None:
            parts.append(f"{kind} {change[f'{kind}_pct']:.1f}%")
    if change.get("pgfault") is not None:
        parts.append(f"{human_bytes(change['faulted_bytes'])} faulted in "
                     f"({change['pgfault']:,} faults, {change.get('pgmajfault') or 0:,} major)")
    if change.get("MemAvailable_end") is not None:
        parts.append(f"MemAvailable {human_bytes(change['MemAvailable_end'])}")
    if change.get("reported_to_host_bytes") is not None:
        parts.append(f"{human_bytes(change['reported_to_host_bytes'])} reported free to the host")
    if change.get("balloon_inflate"):
        parts.append(f"balloon inflated {change['balloon_inflate']:,} pages")
    psi = change.get("pressure_some_pct") or {}
    waited = [f"{k} {v:.1f}%" for k, v in psi.items() if v >= 0.1]
    if waited:
        parts.append("waited on " + ", ".join(waited))
    return ", ".join(parts) or "machine state not readable here"


_warmed: dict | None = None       # the last warm_memory of this process, for machine_info


def last_warm_memory() -> dict | None:
    """What the last ``warm_memory`` of this process did, or None (a cold start)."""
    return _warmed


def warm_memory(size: int) -> dict:
    """Writes ``size`` bytes of fresh memory, one byte a page, in a child
    process that then exits, so that a VM whose host took free memory back
    (free page reporting, a balloon) has it backed again before a run:
    otherwise the run's first write into each such page costs a host fault.
    The memory is free again afterwards and is reported back to the host
    after the kernel's delay, so this helps only right before a run.
    Returns what was done, for results.json (machine_info records it too,
    as ``warm_memory``)."""
    global _warmed
    started = time.monotonic()
    # b"\1" * size is one memset: every page written at C speed
    proc = subprocess.run([sys.executable, "-c", "import sys; b'\\1' * int(sys.argv[1])",
                           str(size)], capture_output=True, text=True)
    _warmed = {"bytes": size, "seconds": round(time.monotonic() - started, 3),
               "ok": proc.returncode == 0,
               **({} if proc.returncode == 0 else {"error": proc.stderr.strip()[-300:]})}
    return _warmed


def text_table(rows, headers) -> str:
    """Columns padded to their widest cell; the value column (the third) right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h)
              for i, h in enumerate(headers)]
    out = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)),
           "  ".join("-" * w for w in widths)]
    for r in rows:
        out.append("  ".join((c.rjust(w) if i == 2 else c.ljust(w))
                             for i, (c, w) in enumerate(zip(r, widths))))
    return "\n".join(out)


def markdown_table(rows, headers) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in esc]
    return "\n".join(out)


def pyplot():
    """matplotlib.pyplot on the Agg backend, or None (said) when matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        say("plot skipped: matplotlib is not installed (a kafkalite dependency: pip install -e .)")
        return None
    return plt


def save_figure(plt, fig, path: str) -> None:
    if fig.get_layout_engine() is None:     # a figure made with its own layout keeps it
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
