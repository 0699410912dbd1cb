"""Measuring and reporting helpers shared by every kafkalite benchmark: the
``kafkalite bench`` harness (this package) and the scripts in benchmarks/
(bench_storage.py, bench_shm_ring.py, bench_groups.py, through
benchmarks/report.py, which re-exports these).

Output (``say``, ``warn``, sizes), GC-paused timing, the machine a run is on
(``machine_info``: CPU, cores, memory, load and pressure, the data
directory's filesystem), text and Markdown tables, and matplotlib on the Agg
backend (``pyplot``, ``save_figure``). Nothing here knows about a broker.
"""
from __future__ import annotations

import contextlib
import ctypes
import gc
import glob
import os
import platform
import sys

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
