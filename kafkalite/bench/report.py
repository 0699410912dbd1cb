"""The outputs of ``kafkalite bench``: results.json, results.md and the plots.

results.json holds the machine (measure.machine_info, and the memory
warmed before the first run if it was), the command, and per workload its
settings, the order of the drivers in each round and one result per driver
run (status, rates, latency summaries in ms, counts, throughput-over-time
series, its round, and the machine's state over it: measure.machine_change).
results.md holds per workload its settings (the rate and the producers'
pacing among them), one table, one row per driver run (skipped
and failed drivers say why) with the machine's state over each run below
it; over several rounds, the median and min-max of consume rate and
end-to-end p50 / p99 per driver; and, for a workload with targets, whether
each driver met them (its median over the rounds). Per workload,
``<slug>-throughput.png`` draws publish and consume
rate over time (warm-up shaded) and ``<slug>-latency.png`` the publish and
end-to-end p50 / p99 / p99.9 / max of each driver; both on log axes with the
legend outside the data.

Who calls: kafkalite.bench.run, after every run, in the parent process.
"""
from __future__ import annotations

import dataclasses
import datetime
import json
import os
import statistics
import sys

from kafkalite.bench.stalls import summary as stalls_summary
from kafkalite.bench.measure import gc_summary, human_bytes, machine_summary, markdown_table, \
    pyplot, save_figure

HEADERS = ["Driver", "Publish msg/s", "Publish MB/s", "Consume msg/s", "Consume MB/s",
           "Publish ms p50 / p99 / p99.9 / max", "End-to-end ms p50 / p99 / p99.9 / max",
           "Missing", "Server CPU: cores, us/msg, us/request", "Clients CPU: cores, us/msg"]
QUANTILES = (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))


def workload_settings(w) -> dict:
    d = dataclasses.asdict(w)
    d.pop("payload", None)
    d["producers"], d["consumers"], d["slug"] = w.producers, w.consumers, w.slug
    # what the server ran: the workload's count, or the server's default on this machine
    d["kafkalite_workers_started"] = w.workers_started
    return d


def document(runs: list[tuple], machine: dict, elapsed: float) -> dict:
    """``runs``: (workload, [driver result], [each round's driver order]),
    the results in run order."""
    return {
        "harness": "kafkalite bench",
        "timestamp": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed, 1),
        "command": " ".join(["kafkalite"] + sys.argv[1:]) if sys.argv else "kafkalite bench",
        "machine": machine,
        "rounds": max((len(orders) for _w, _r, orders in runs), default=1),
        "workloads": [{"workload": workload_settings(w), "round_orders": orders,
                       "results": results}
                      for w, results, orders in runs],
    }


def _fmt(v, digits=2) -> str:
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def _quantiles(lat: dict) -> str:
    if not lat or not lat.get("count"):
        return "-"
    return " / ".join(_fmt(lat[k]) for k, _ in QUANTILES)


def run_label(r: dict, rounds: int = 1) -> str:
    """The driver, and its round when there are several."""
    return r["driver"] if rounds <= 1 else f"{r['driver']} (round {r.get('round', 0) + 1})"


def rows(results: list[dict], rounds: int = 1) -> list[list[str]]:
    out = []
    for r in results:
        if r["status"] != "ok":
            out.append([run_label(r, rounds), f"{r['status']}: {r['reason']}"]
                       + [""] * (len(HEADERS) - 2))
            continue
        out.append([run_label(r, rounds), f"{r['publish_rate']:,.0f}", _fmt(r["publish_mb_s"], 1),
                    f"{r['consume_rate']:,.0f}", _fmt(r["consume_mb_s"], 1),
                    _quantiles(r["publish_latency_ms"]), _quantiles(r["e2e_latency_ms"]),
                    f"{r['missing']:,}", *cpu_cells(r.get("cpu"))])
    return out


def cpu_cells(cpu: dict | None) -> list[str]:
    """The server's and the clients' CPU over the measured seconds (cpu.py):
    cores in use, then us a message (and a request, where counted)."""
    if not cpu:
        return ["-", "-"]
    server = "-" if cpu["server_cores"] is None else " / ".join(
        [f"{cpu['server_cores']:.2f}", _fmt(cpu["server_us_per_msg"], 1),
         _fmt(cpu["server_us_per_request"], 1)])
    return [server, f"{cpu['clients_cores']:.2f} / {_fmt(cpu['clients_us_per_msg'], 1)}"]


TARGET_FIGURES = {"publish_rate": ("publish rate", "msg/s", lambda r: r["publish_rate"], ">="),
                  "consume_rate": ("consume rate", "msg/s", lambda r: r["consume_rate"], ">="),
                  "e2e_p99_ms": ("end-to-end p99", "ms", lambda r: r["e2e_latency_ms"].get("p99"),
                                 "<=")}


# The figures of the rounds table (and of docs/performance.md's headline):
# (heading, how to get it from a result).
ROUND_FIGURES = (("Consume msg/s", lambda r: r["consume_rate"]),
                 ("End-to-end p50 ms", lambda r: r["e2e_latency_ms"].get("p50")),
                 ("End-to-end p99 ms", lambda r: r["e2e_latency_ms"].get("p99")),
                 ("Server CPU us/msg", lambda r: (r.get("cpu") or {}).get("server_us_per_msg")))


def over_rounds(results: list[dict]) -> dict:
    """Per driver (in first-run order), per figure of ROUND_FIGURES: the
    values of its rounds that ran, as (median, min, max, [values]), or None
    when no round of it ran."""
    out: dict = {}
    for r in results:
        out.setdefault(r["driver"], [])
        if r["status"] == "ok":
            out[r["driver"]].append(r)
    spread = {}
    for driver, ok in out.items():
        figures = {}
        for heading, get in ROUND_FIGURES:
            values = [v for v in (get(r) for r in ok) if v is not None]
            figures[heading] = ((statistics.median(values), min(values), max(values), values)
                                if values else None)
        spread[driver] = figures
    return spread


def median_and_spread(figure) -> str:
    """"50,020 (49,800-50,100)": the median, then the lowest and highest round."""
    if figure is None:
        return "-"
    median, low, high, _values = figure
    return f"{_fmt(median)} ({_fmt(low)}-{_fmt(high)})"


def round_rows(results: list[dict]) -> list[list[str]]:
    return [[driver, str(len((figs["Consume msg/s"] or (0, 0, 0, []))[3]))]
            + [median_and_spread(figs[h]) for h, _get in ROUND_FIGURES]
            for driver, figs in over_rounds(results).items()]


def target_rows(workload: dict, results: list[dict]) -> list[list[str]]:
    """Driver, figure, target, measured, met: one row per target of the
    workload; over several rounds the measured figure is their median."""
    out = []
    for driver, wanted in (workload.get("targets") or {}).items():
        ok = [r for r in results if r["driver"] == driver and r["status"] == "ok"]
        for key, target in wanted.items():
            name, unit, get, sense = TARGET_FIGURES[key]
            values = [v for v in (get(r) for r in ok) if v is not None]
            measured = statistics.median(values) if values else None
            if measured is None:
                met = "not run" if not ok else "n/a"
                shown = "-"
            else:
                met = "yes" if (measured >= target if sense == ">=" else measured <= target) else "NO"
                shown = f"{_fmt(measured)} {unit}"
            out.append([driver, name, f"{sense} {_fmt(target)} {unit}", shown, met])
    return out


def warmed_text(m: dict) -> str:
    warmed = m.get("warm_memory")
    if not warmed:
        return "memory not warmed before the first run (a cold start)"
    return (f"{human_bytes(warmed['bytes'])} of memory warmed before the first run, in "
            f"{warmed['seconds']:.2f} s" + ("" if warmed.get("ok") else " (it failed)"))


def pacing_text(w: dict) -> str:
    """How often the producers of a fixed-rate workload woke up to send
    (results of before producerPacingMs have none: they sent each message
    when it was due)."""
    pacing = w.get("producer_pacing_ms") or 0
    if not pacing:
        return "each message sent when due"
    return (f"sent every {pacing:g} ms (producerPacingMs: each message measured from when "
            f"it was due)")


def kafkalite_workers(w: dict) -> int:
    """The partition workers of the kafkalite drivers' server (results of
    before kafkaliteWorkers have none: the bench always started 2 then)."""
    return w.get("kafkalite_workers_started") or w.get("kafkalite_workers") or 2


def workers_phrase(n: int) -> str:
    return f"{n} partition worker{'s' if n != 1 else ''}"


def workers_text(w: dict) -> str:
    return f"kafkalite's server with {workers_phrase(kafkalite_workers(w))}"


def machine_rows(results: list[dict], rounds: int = 1) -> list[str]:
    """One bullet per driver run: the machine's state over it, and the
    bench clients' own collector pauses (charged to their messages)."""
    return [f"- {run_label(r, rounds)}: {machine_summary(r['machine'])}"
            + (f"; {gc_summary(r['client_gc'])}" if gc_summary(r.get("client_gc") or {}) else "")
            for r in results if r.get("machine") and r["status"] != "skipped"]


def timeline_rows(results: list[dict], rounds: int = 1) -> list[str]:
    """One bullet per driver run: its end-to-end (or, without consumers'
    figures, publish) p99 bucket by bucket, warm-up included, so a slow run
    shows whether it was slow all through or stalled."""
    out = []
    for r in results:
        series = r.get("series") or {}
        for key, what in (("e2e_ms", "end-to-end"), ("publish_ms", "publish")):
            p99 = (series.get(key) or {}).get("p99") or []
            if any(v is not None for v in p99):
                out.append(f"- {run_label(r, rounds)}, {what} p99 ms by {series['bucket_s']:g} s: "
                           + " ".join("-" if v is None else _fmt(v, 1) for v in p99))
                break
    return out


def markdown(doc: dict) -> str:
    m = doc["machine"]
    cores = m.get("logical_cores")
    rounds = doc.get("rounds", 1)
    lines = [f"# kafkalite bench: {doc['timestamp']}", "",
             f"Machine: {m.get('cpu_model')}, {cores} logical core(s), Python {m.get('python')}; "
             f"load average at start {m.get('load_average_at_start')}, at end "
             f"{m.get('load_average_at_end')}; free page reporting "
             f"{m.get('free_page_reporting') or 'none'}; {warmed_text(m)}. "
             f"Command: `{doc['command']}`.", ""]
    if m.get("cpu_stalls"):
        lines += [stalls_summary(m["cpu_stalls"]) + ".", ""]
    for entry in doc["workloads"]:
        w = entry["workload"]
        rate = "max rate (closed loop)" if w["producer_rate"] == 0 else \
            f"{w['producer_rate']:,.0f} msg/s, {pacing_text(w)}"
        if w.get("backlog_gb"):
            phases = (f"a {w['backlog_gb']:g} GB backlog written, then drained: publish = the "
                      f"fill, consume = the drain, each from its first message to its last")
        else:
            phases = f"{w['warmup_seconds']:g} s warm-up, {w['test_seconds']:g} s measured"
        lines += [f"## {w['name']}", "",
                  f"{w['topics']} topic(s) x {w['partitions_per_topic']} partition(s), "
                  f"{w['message_size']} B messages, {w['key_distributor']}, "
                  f"{w['producers']} producer(s), {w['consumers']} consumer(s), {rate}; "
                  f"{phases}; {workers_text(w)}.", "",
                  markdown_table(rows(entry["results"], rounds), HEADERS), ""]
        if rounds > 1:
            order = "; ".join(f"round {i + 1}: {', '.join(o)}"
                              for i, o in enumerate(entry.get("round_orders", [])))
            lines += [f"Over {rounds} rounds (each a fresh server per driver, the driver going "
                      f"first rotated a round: {order}): median (lowest-highest round).", "",
                      markdown_table(round_rows(entry["results"]),
                                     ["Driver", "Rounds"] + [h for h, _g in ROUND_FIGURES]),
                      ""]
        machine = machine_rows(entry["results"], rounds)
        if machine:
            lines += ["The machine over each run (start -> end):", "", *machine, ""]
        timelines = timeline_rows(entry["results"], rounds)
        if timelines:
            lines += [f"Over time (the first {w['warmup_seconds']:g} s are the warm-up; each "
                      f"figure up to 12% high, the top of its latency bin):", "", *timelines, ""]
        targets = target_rows(w, entry["results"])
        if targets:
            lines += ["Targets (DESIGN.md; information, never a failure):", "",
                      markdown_table(targets, ["Driver", "Figure", "Target", "Measured", "Met"]),
                      ""]
    lines += ["Latencies are measured from each message's intended send time (no coordinated "
              "omission); publish = until the driver's acknowledgement, end-to-end = until a "
              "consumer has it. Rates count the measured period only. \"Missing\" = messages "
              "sent but not consumed within the drain time.", ""]
    return "\n".join(lines)


# Both plots: log value axes (the peers run orders of magnitude apart; on a
# linear axis the slower ones lie flat on zero) and the legend to the right of
# the axes, never over the data. Constrained layout leaves room for it.
_LEGEND_OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "borderaxespad": 0.0}


def throughput_figure(plt, workload: dict, results: list[dict]):
    """Publish and consume rate over time, one colour per driver (warm-up shaded)."""
    fig, ax = plt.subplots(figsize=(11, 4.2), layout="constrained")
    rounds = 1 + max((r.get("round", 0) for r in results), default=0)
    for i, r in enumerate(x for x in results if x["status"] == "ok"):
        s = r["series"]
        w = s["bucket_s"]
        color = f"C{i}"
        for key, style, what in (("publish", "-", "publish"), ("consume", "--", "consume")):
            ys = s[key]
            if ys:
                # an empty bucket (before the first message, after the last) has no
                # logarithm: a gap in the line, not a plunge to the axis
                ax.plot([(j + 0.5) * w for j in range(len(ys))],
                        [y if y > 0 else float("nan") for y in ys], style, color=color,
                        label=f"{run_label(r, rounds)} {what}", linewidth=1.3)
    if workload["warmup_seconds"]:
        ax.axvspan(0, workload["warmup_seconds"], color="0.9", zorder=0, label="warm-up")
    ax.set_yscale("log")
    ax.set_xlabel("seconds since start")
    ax.set_ylabel("messages/s (log scale)")
    ax.set_title(f"{workload['name']}: throughput over time")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=7, **_LEGEND_OUTSIDE)
    return fig


def latency_figure(plt, workload: dict, results: list[dict]):
    """Publish and end-to-end p50 / p99 / p99.9 / max of each driver, side by side."""
    ok = [r for r in results if r["status"] == "ok"]
    rounds = 1 + max((r.get("round", 0) for r in results), default=0)
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True, layout="constrained")
    width = 0.8 / len(QUANTILES)
    for ax, key, title in ((axes[0], "publish_latency_ms", "publish latency"),
                           (axes[1], "e2e_latency_ms", "end-to-end latency")):
        for qi, (q, label) in enumerate(QUANTILES):
            xs = [i + (qi - (len(QUANTILES) - 1) / 2) * width for i in range(len(ok))]
            ys = [(r[key].get(q) or 0) for r in ok]
            ax.bar(xs, [max(y, 1e-3) for y in ys], width, label=label, color=f"C{qi}")
        ax.set_xticks(range(len(ok)))
        ax.set_xticklabels([run_label(r, rounds) for r in ok], rotation=30, ha="right", fontsize=8)
        ax.set_yscale("log")
        ax.set_title(title)
        ax.grid(axis="y", alpha=0.3, which="both")
    axes[0].set_ylabel("ms (log scale)")
    axes[1].legend(fontsize=8, **_LEGEND_OUTSIDE)
    fig.suptitle(f"{workload['name']}: latency by driver")
    return fig


def write(out_dir: str, doc: dict) -> list[str]:
    """Writes results.json, results.md and the PNGs; returns the paths written."""
    os.makedirs(out_dir, exist_ok=True)
    paths = [os.path.join(out_dir, "results.json"), os.path.join(out_dir, "results.md")]
    with open(paths[0], "w") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")
    with open(paths[1], "w") as f:
        f.write(markdown(doc))
    plt = pyplot()
    if plt is None:
        return paths
    for entry in doc["workloads"]:
        w, results = entry["workload"], entry["results"]
        if not any(r["status"] == "ok" for r in results):
            continue
        slug = w["slug"]
        for suffix, figure in (("throughput", throughput_figure), ("latency", latency_figure)):
            path = os.path.join(out_dir, f"{slug}-{suffix}.png")
            save_figure(plt, figure(plt, w, results), path)
            paths.append(path)
    return paths
