"""The outputs of ``kafkalite bench``: results.json, results.md and the plots.

results.json holds the machine (measure.machine_info), the command, and per
workload its settings and one result per driver (status, rates, latency
summaries in ms, counts, throughput-over-time series). results.md holds one
table per workload, one row per driver (skipped and failed drivers say
why), and, for a workload with targets, whether each driver met them. Per workload, ``<slug>-throughput.png`` draws publish and consume
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
import sys

from kafkalite.bench.measure import markdown_table, pyplot, save_figure

HEADERS = ["Driver", "Publish msg/s", "Publish MB/s", "Consume msg/s", "Consume MB/s",
           "Publish ms p50 / p99 / p99.9 / max", "End-to-end ms p50 / p99 / p99.9 / max",
           "Missing"]
QUANTILES = (("p50", "p50"), ("p99", "p99"), ("p999", "p99.9"), ("max", "max"))


def workload_settings(w) -> dict:
    d = dataclasses.asdict(w)
    d.pop("payload", None)
    d["producers"], d["consumers"], d["slug"] = w.producers, w.consumers, w.slug
    return d


def document(runs: list[tuple], machine: dict, elapsed: float) -> dict:
    """``runs``: (workload, [driver result]) in run order."""
    return {
        "harness": "kafkalite bench",
        "timestamp": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "elapsed_s": round(elapsed, 1),
        "command": " ".join(["kafkalite"] + sys.argv[1:]) if sys.argv else "kafkalite bench",
        "machine": machine,
        "workloads": [{"workload": workload_settings(w), "results": results}
                      for w, results in runs],
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


def rows(results: list[dict]) -> list[list[str]]:
    out = []
    for r in results:
        if r["status"] != "ok":
            out.append([r["driver"], f"{r['status']}: {r['reason']}"] + [""] * (len(HEADERS) - 2))
            continue
        out.append([r["driver"], f"{r['publish_rate']:,.0f}", _fmt(r["publish_mb_s"], 1),
                    f"{r['consume_rate']:,.0f}", _fmt(r["consume_mb_s"], 1),
                    _quantiles(r["publish_latency_ms"]), _quantiles(r["e2e_latency_ms"]),
                    f"{r['missing']:,}"])
    return out


TARGET_FIGURES = {"publish_rate": ("publish rate", "msg/s", lambda r: r["publish_rate"], ">="),
                  "consume_rate": ("consume rate", "msg/s", lambda r: r["consume_rate"], ">="),
                  "e2e_p99_ms": ("end-to-end p99", "ms", lambda r: r["e2e_latency_ms"].get("p99"),
                                 "<=")}


def target_rows(workload: dict, results: list[dict]) -> list[list[str]]:
    """Driver, figure, target, measured, met: one row per target of the workload."""
    by_driver = {r["driver"]: r for r in results}
    out = []
    for driver, wanted in (workload.get("targets") or {}).items():
        r = by_driver.get(driver)
        for key, target in wanted.items():
            name, unit, get, sense = TARGET_FIGURES[key]
            measured = get(r) if r is not None and r["status"] == "ok" else None
            if measured is None:
                met = "not run" if r is None or r["status"] != "ok" else "n/a"
                shown = "-"
            else:
                met = "yes" if (measured >= target if sense == ">=" else measured <= target) else "NO"
                shown = f"{_fmt(measured)} {unit}"
            out.append([driver, name, f"{sense} {_fmt(target)} {unit}", shown, met])
    return out


def markdown(doc: dict) -> str:
    m = doc["machine"]
    cores = m.get("logical_cores")
    lines = [f"# kafkalite bench: {doc['timestamp']}", "",
             f"Machine: {m.get('cpu_model')}, {cores} logical core(s), Python {m.get('python')}; "
             f"load average at start {m.get('load_average_at_start')}, at end "
             f"{m.get('load_average_at_end')}. Command: `{doc['command']}`.", ""]
    for entry in doc["workloads"]:
        w = entry["workload"]
        rate = "max rate (closed loop)" if w["producer_rate"] == 0 else \
            f"{w['producer_rate']:,.0f} msg/s"
        if w.get("backlog_gb"):
            phases = (f"a {w['backlog_gb']:g} GB backlog written, then drained: publish = the "
                      f"fill, consume = the drain, each from its first message to its last")
        else:
            phases = f"{w['warmup_seconds']:g} s warm-up, {w['test_seconds']:g} s measured"
        lines += [f"## {w['name']}", "",
                  f"{w['topics']} topic(s) x {w['partitions_per_topic']} partition(s), "
                  f"{w['message_size']} B messages, {w['key_distributor']}, "
                  f"{w['producers']} producer(s), {w['consumers']} consumer(s), {rate}; "
                  f"{phases}.", "",
                  markdown_table(rows(entry["results"]), HEADERS), ""]
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
                        label=f"{r['driver']} {what}", linewidth=1.3)
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
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), sharey=True, layout="constrained")
    width = 0.8 / len(QUANTILES)
    for ax, key, title in ((axes[0], "publish_latency_ms", "publish latency"),
                           (axes[1], "e2e_latency_ms", "end-to-end latency")):
        for qi, (q, label) in enumerate(QUANTILES):
            xs = [i + (qi - (len(QUANTILES) - 1) / 2) * width for i in range(len(ok))]
            ys = [(r[key].get(q) or 0) for r in ok]
            ax.bar(xs, [max(y, 1e-3) for y in ys], width, label=label, color=f"C{qi}")
        ax.set_xticks(range(len(ok)))
        ax.set_xticklabels([r["driver"] for r in ok], rotation=30, ha="right", fontsize=8)
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
