"""The headline table of docs/performance.md, written from a results.json
of ``kafkalite bench --rounds 3`` (issue 46: a headline that reproduces).

The table sits between two marker lines of the page::

    <!-- headline:start -->
    ... the command that reproduces it, the date, the machine and its
        state over the runs, the table ...
    <!-- headline:end -->

and everything between them is rewritten; the rest of the page is left as
it is. One row per driver, one column per workload; each cell gives the
consume rate and the end-to-end p50 / p99, each the median of the rounds
with the lowest and highest round in brackets (a spread, not the best
round: the best of three is a figure no one measured twice). Above the
table: the bench command recorded in results.json and the command that
rewrote the table, so that both can be run again; the date of the run;
the machine and what it did over the runs (load, CPU steal, faults, free
page reporting, whether memory was warmed), from measure.machine_change.

Who calls: tools/performance-table (``main``), by hand after a run.
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import textwrap

from kafkalite.bench.measure import human_bytes
from kafkalite.bench.report import (ROUND_FIGURES, kafkalite_workers, over_rounds,
                                    warmed_text, workers_phrase)

START, END = "<!-- headline:start -->", "<!-- headline:end -->"
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WIDTH = 92              # the docs' line length
ROUNDS_WANTED = 3       # the "spread of three runs"


class HeadlineError(ValueError):
    """The page has no (or broken) markers, or the results hold nothing to show."""


def _fmt(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.1f}" if v >= 10 else f"{v:.2f}"


def _figure(figure) -> str:
    if figure is None:
        return "-"
    median, low, high, values = figure
    return _fmt(median) if len(values) == 1 else f"{_fmt(median)} ({_fmt(low)}-{_fmt(high)})"


def cell(figures: dict) -> str:
    consume, p50, p99, server_cpu = (figures[h] for h, _g in ROUND_FIGURES)
    if consume is None:
        return "not run"
    return (f"{_figure(consume)} msg/s; e2e p50 {_figure(p50)} / p99 {_figure(p99)} ms"
            + (f"; server {_figure(server_cpu)} us CPU/msg" if server_cpu is not None else ""))


def _runs(doc: dict) -> list[dict]:
    return [r for e in doc["workloads"] for r in e["results"]
            if r["status"] != "skipped" and r.get("machine")]


def machine_text(doc: dict) -> str:
    """The machine and its state over every run of ``doc``, in a sentence."""
    m = doc["machine"]
    runs = [r["machine"] for r in _runs(doc)]
    parts = [f"{m.get('cpu_model')}, {m.get('logical_cores')} logical core(s), "
             f"Python {m.get('python')}; free page reporting "
             f"{m.get('free_page_reporting') or 'none'}; {warmed_text(m)}"]

    def spread(values, fmt):
        values = [v for v in values if v is not None]
        if not values:
            return None
        return fmt(min(values)) if min(values) == max(values) else \
            f"{fmt(min(values))}-{fmt(max(values))}"

    load = spread([la[0] for c in runs for la in (c.get("load_average_start"),
                                                  c.get("load_average_end")) if la],
                  lambda v: f"{v:.1f}")
    if load:
        parts.append(f"load average (1 min) {load} over the runs")
    for key, what in (("steal_pct", "CPU steal"), ("iowait_pct", "iowait")):
        values = [c.get(key) for c in runs if c.get(key) is not None]
        if values:
            parts.append(f"{what} up to {max(values):.1f}% of a run's CPU time")
    faulted = [c.get("faulted_bytes") for c in runs if c.get("faulted_bytes") is not None]
    if faulted:
        parts.append(f"{human_bytes(min(faulted))}-{human_bytes(max(faulted))} faulted in a run")
    reported = [c.get("reported_to_host_bytes") for c in runs
                if c.get("reported_to_host_bytes") is not None]
    if reported:
        parts.append(f"{human_bytes(sum(reported))} reported free to the host during the runs")
    available = [c.get("MemAvailable_start") for c in runs if c.get("MemAvailable_start")]
    if available:
        parts.append(f"MemAvailable at least {human_bytes(min(available))}")
    return "; ".join(parts)


def when(doc: dict) -> str:
    try:
        t = datetime.datetime.fromisoformat(doc["timestamp"]).astimezone(datetime.timezone.utc)
    except (KeyError, ValueError):
        return str(doc.get("timestamp", "an unknown date"))
    return f"{t:%Y-%m-%d (%H:%M UTC)}"


def workers_text(entries: list[dict]) -> str:
    """How many partition workers the kafkalite drivers' server ran, for
    each workload."""
    counts: dict[int, list[str]] = {}
    for e in entries:
        counts.setdefault(kafkalite_workers(e["workload"]), []).append(e["workload"]["name"])
    if len(counts) == 1:
        return f"kafkalite's server ran {workers_phrase(next(iter(counts)))}"
    return "kafkalite's server ran " + "; ".join(
        f"{workers_phrase(n)} for " + " and ".join(f"'{name}'" for name in names)
        for n, names in sorted(counts.items()))


def block(doc: dict, results_path: str, page_path: str, tool_command: str) -> str:
    """What goes between the markers."""
    entries = [e for e in doc["workloads"] if any(r["status"] == "ok" for r in e["results"])]
    if not entries:
        raise HeadlineError("no driver run in the results: nothing to put in a table")
    drivers: list[str] = []
    for e in entries:
        for r in e["results"]:
            if r["driver"] not in drivers:
                drivers.append(r["driver"])
    spreads = [over_rounds(e["results"]) for e in entries]
    header = "| Driver | " + " | ".join(e["workload"]["name"] for e in entries) + " |"
    lines = [header, "|" + "---|" * (len(entries) + 1)]
    for d in drivers:
        lines.append(f"| {d} | " + " | ".join(
            cell(s[d]) if d in s else "not run" for s in spreads) + " |")
    rounds = doc.get("rounds", 1)
    full = os.path.relpath(os.path.join(os.path.dirname(os.path.abspath(results_path)),
                                        "results.md"),
                           os.path.dirname(os.path.abspath(page_path)))
    minutes = doc.get("elapsed_s", 0) / 60
    about = textwrap.fill(
        f"Run of {when(doc)}, {rounds} round(s) of every driver (a fresh server each run, the "
        f"driver going first rotated a round), about {max(1, round(minutes))} minute(s): "
        f"{machine_text(doc)}; {workers_text(entries)}. Each cell: consume rate, then "
        "end-to-end latency p50 / p99 measured from each message's intended send time; each "
        "figure the median of the rounds, the lowest and highest round in brackets. Written by "
        "`tools/performance-table` from the run's results.json; full tables (publish rates, "
        f"publish latency, p99.9, max, each run's machine state): [`results.md`]({full}); "
        "how it measures: [`benchmarks/README.md`](../benchmarks/README.md).",
        WIDTH, break_long_words=False, break_on_hyphens=False)
    return "\n".join([
        START,
        "<!-- walk: skip: the benchmark behind the headline, "
        f"about {max(1, round(minutes))} minute(s), run in the checkout -->",
        "```sh",
        doc["command"],
        tool_command,
        "```",
        "",
        about,
        "",
        *lines,
        END,
    ])


def rewrite(page: str, new_block: str) -> str:
    """``page`` with what lies between its markers (the markers too) replaced."""
    if page.count(START) != 1 or page.count(END) != 1:
        raise HeadlineError(f"the page needs one {START} line and one {END} line")
    head, rest = page.split(START, 1)
    _old, tail = rest.split(END, 1)
    return head + new_block + tail


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        prog="tools/performance-table",
        description="rewrite the headline table of docs/performance.md (between its "
                    "headline:start and headline:end markers) from the results.json of a "
                    "`kafkalite bench --rounds 3` run: medians, the spread of the rounds, "
                    "the machine's state and the date")
    p.add_argument("results", metavar="RESULTS.json")
    p.add_argument("--page", default=os.path.join(REPO, "docs", "performance.md"), help="the page to rewrite (default: docs/performance.md)")
    args = p.parse_args(argv)
    try:
        with open(args.results) as f:
            doc = json.load(f)
        with open(args.page) as f:
            page = f.read()
        rounds = doc.get("rounds", 1)
        if rounds < ROUNDS_WANTED:
            print(f"performance-table: {args.results} holds {rounds} round(s), not "
                  f"{ROUNDS_WANTED}: the table says so", file=sys.stderr)
        results = os.path.abspath(args.results)
        shown = os.path.relpath(results, REPO) if results.startswith(REPO + os.sep) else results
        new_block = block(doc, args.results, args.page, f"tools/performance-table {shown}")
        text = rewrite(page, new_block)
    except (OSError, ValueError, KeyError) as exc:
        print(f"performance-table: {exc}", file=sys.stderr)
        return 1
    with open(args.page, "w") as f:
        f.write(text)
    print(f"rewrote the headline of {args.page} from {args.results}")
    return 0
