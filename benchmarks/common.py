"""The shape the benchmark scripts share: their arguments, their rounds and
the table that puts each figure beside its peer or ceiling.

- Arguments: ``parser(__doc__)``, then ``add_quick`` / ``add_rounds`` /
  ``add_json`` / ``add_dirs`` with the script's own spelling and default,
  and ``parse(p, argv, quick={...})``: --quick sets the values in ``quick``
  of the options not given on the command line (an option given still
  wins).
- Rounds: ``alternating(sides, rounds, run)`` calls ``run(side)`` for each
  side in each round, the sides taking turns going first (rotated one
  place a round), so that a machine getting busier or quieter during the
  run, or the first side's leftovers (dirty pages, a warm cache, a GC),
  weigh on every side alike. Each round keeps the load average it started
  under and the machine's state over it (measure.machine_change: load,
  steal, faults, free memory, ...), one line of it on stderr: a round that
  ran beside other work can be told from the figures.
  ``alternating_medians`` is the same for two sides returning dicts of
  figures, the page cache synced before each.
- The table: ``comparison_table(rows)`` of ``Row``s, one a figure: "figure
  | ours | peer or ceiling | which | ratio | target | met" (report.Results
  and write_tables remain for the scripts that plot and write results.md);
  ``write_json`` writes a script's own document with the load average at
  the end and each round's order and load beside it.

Scripts run as ``python benchmarks/<script>.py``: benchmarks/ is
sys.path[0] and ``import common`` finds this file (tests/harness.py is
the test suite's, hence not that name). Timing never fails a run: a
missed target prints NO.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass

from report import loadavg, quiesce, say

from kafkalite.bench import measure


# ---- arguments -------------------------------------------------------------------------

def parser(doc: str, **kwargs) -> argparse.ArgumentParser:
    """A parser described by the first paragraph of the script's docstring."""
    return argparse.ArgumentParser(description=doc.strip().split("\n\n")[0], **kwargs)


def add_quick(p: argparse.ArgumentParser, help: str) -> None:
    p.add_argument("--quick", action="store_true", help=help)


def add_rounds(p: argparse.ArgumentParser, default: int, *, flag: str = "--rounds",
               help: str = "rounds; the sides take turns going first") -> None:
    """The count of rounds or runs, under the script's own spelling
    (--rounds, --runs, --repeats)."""
    p.add_argument(flag, type=int, default=default, help=help)


def add_dirs(p: argparse.ArgumentParser, *,
             output_help: str = "where results go (default: benchmarks/results/<name>-<time>)",
             work_help: str = "parent of the temporary data directory") -> None:
    """--output-dir and --work-dir, as report.make_dirs takes them."""
    p.add_argument("--output-dir", default=None, help=output_help)
    p.add_argument("--work-dir", default=None, help=work_help)


def add_json(p: argparse.ArgumentParser, flag: str = "--json",
             help: str = "also write the figures here") -> None:
    p.add_argument(flag, metavar="FILE", help=help)


def parse(p: argparse.ArgumentParser, argv=None, quick: dict | None = None):
    """The arguments; with --quick, the ``quick`` values of the options not
    given on the command line (``argv``, else sys.argv)."""
    if not any("--warm-memory" in a.option_strings for a in p._actions):
        p.add_argument("--warm-memory", metavar="SIZE", type=measure.parse_size,
                       help="before measuring, write SIZE of memory (e.g. 4G) in a child "
                            "process and free it, so that a VM's host backs it again; off "
                            "by default, so that figures show a cold start")
    args = p.parse_args(argv)
    if args.warm_memory:
        warmed = measure.warm_memory(args.warm_memory)
        say(f"warmed {measure.human_bytes(warmed['bytes'])} of memory in "
            f"{warmed['seconds']:.2f} s" + ("" if warmed["ok"] else " (it failed)"))
    if quick and getattr(args, "quick", False):
        given = {a.split("=")[0] for a in (sys.argv[1:] if argv is None else argv)
                 if a.startswith("--")}
        for name, value in quick.items():
            if "--" + name.replace("_", "-") not in given:
                setattr(args, name, value)
    return args


# ---- rounds ----------------------------------------------------------------------------

class Rounds:
    """What ``run(side)`` returned for each side, round by round, the load
    average each round started under and the machine's state over it."""

    def __init__(self, sides):
        self.sides = list(sides)
        self.values: dict = {side: [] for side in self.sides}
        self.orders: list[list] = []
        self.loads: list = []
        self.machine: list[dict] = []

    def median(self, side, key=None):
        return statistics.median(self._of(side, key))

    def best(self, side, key=None, *, fastest=max):
        """The best round's value (``fastest=min`` for times); with ``key``,
        the whole value whose ``key(value)`` is best."""
        values = self.values[side]
        return fastest(values, key=key) if key else fastest(values)

    def _of(self, side, key):
        return [key(v) for v in self.values[side]] if key else self.values[side]

    def as_dict(self) -> dict:
        """For results.json, beside the script's own figures: the order of
        each round, the load average it started under and the machine's
        state over it (measure.machine_change)."""
        return {"orders": [[str(s) for s in o] for o in self.orders],
                "load_average_at_start": self.loads, "machine": self.machine}


def alternating(sides, rounds: int, run, *, before=None, each_round=None) -> Rounds:
    """``run(side)`` for every side in each of ``rounds`` rounds, the side
    going first rotated one place a round (two sides: swapped). ``before()``,
    when given, runs before each call (report.quiesce, a quota reset ...);
    ``each_round(r)`` at the start of round ``r`` (its topics, say)."""
    result = Rounds(sides)
    n = len(result.sides)
    for r in range(rounds):
        order = result.sides[r % n:] + result.sides[:r % n]
        result.orders.append(order)
        result.loads.append(loadavg())
        start = measure.machine_state()
        if each_round is not None:
            each_round(r)
        for side in order:
            if before is not None:
                before()
            result.values[side].append(run(side))
        change = measure.machine_change(start, measure.machine_state())
        result.machine.append(change)
        print(f"  round {r + 1} of {rounds}, machine: {measure.machine_summary(change)}",
              file=sys.stderr, flush=True)
    return result


def spread(values) -> float:
    """(max - min) / median of a figure's runs, in %: how far to trust its median."""
    return (max(values) - min(values)) / statistics.median(values) * 100


def percentile(values, q: float) -> float:
    """The nearest-rank ``q`` quantile (0..1) of ``values``; NaN for none."""
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def say_runs(label: str, values, unit: str = "", fmt: str = ",.0f") -> None:
    """One line: a figure's value in each run or round and their spread."""
    say(f"  {label}: {', '.join(format(v, fmt) for v in values)}{unit}; "
        f"spread {spread(values):.0f}%")


def alternating_medians(rounds: int, sides: tuple, run) -> dict:
    """Rounds of ``run(side)`` (a dict of figures) whose two ``sides`` take
    turns going first, the page cache synced before each (report.quiesce);
    the median of each figure. Run once in a fixed order, the second side
    started with the first's dirty pages still being written back, and a
    comparison of the two depended on the order."""
    result = alternating(sides, rounds, run, before=quiesce)
    runs: dict = {}
    for side in result.sides:
        for figures in result.values[side]:
            for key, value in figures.items():
                runs.setdefault(key, []).append(value)
    return {key: statistics.median(values) for key, values in runs.items()}


def say_load(rounds: Rounds) -> None:
    """One line: the 1-minute load average each round started under."""
    loads = [f"{la[0]:.2f}" if la else "?" for la in rounds.loads]
    say(f"load average (1 min) at the start of each round: {', '.join(loads)}")


# ---- the comparison table --------------------------------------------------------------

@dataclass
class Row:
    """One figure: ours, beside a peer or ceiling measured in the same run
    (``peer_name`` says which), and the target it is held to, if any."""
    figure: str
    ours: float | None
    unit: str = ""
    peer: float | None = None
    peer_name: str = ""
    target: str = ""
    met: bool | None = None
    fmt: str | None = None          # a format spec for both values, else by size

    def cells(self) -> list[str]:
        ratio = ""
        if self.peer and self.ours is not None:
            r = self.ours / self.peer
            ratio = (f"{r:.2f}x" if abs(r) >= 0.1 else f"{r:.3f}x" if abs(r) >= 0.001
                     else "<0.001x")
        peer = "" if self.peer is None else self._value(self.peer)
        met = "" if self.met is None else ("yes" if self.met else "NO")
        which = "" if self.peer is None else self.peer_name
        return [self.figure, self._value(self.ours), peer, which, ratio, self.target, met]

    def _value(self, v) -> str:
        if v is None:
            return "n/a"
        if self.fmt:
            text = format(v, self.fmt)
        elif abs(v) >= 100 or v == int(v):
            text = f"{v:,.0f}"
        else:
            text = f"{v:.3g}"
        return f"{text} {self.unit}".rstrip()


HEADERS = ["figure", "ours", "peer or ceiling", "which", "ratio", "target", "met"]
NUMERIC = {"ours", "peer or ceiling", "ratio"}      # right-aligned


def comparison_table(rows: list[Row]) -> str:
    """The rows as a text table; a column empty in every row is left out."""
    cells = [r.cells() for r in rows]
    keep = [i for i in range(len(HEADERS)) if i < 2 or any(c[i] for c in cells)]
    headers = [HEADERS[i] for i in keep]
    table = [headers] + [[c[i] for i in keep] for c in cells]
    widths = [max(len(r[j]) for r in table) for j in range(len(keep))]
    lines = []
    for n, r in enumerate(table):
        line = "  ".join(c.rjust(w) if headers[j] in NUMERIC else c.ljust(w)
                         for j, (c, w) in enumerate(zip(r, widths)))
        lines.append(line.rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def say_table(rows: list[Row]) -> None:
    say(comparison_table(rows))


def write_json(path: str, doc: dict, *, rounds: Rounds | None = None) -> None:
    """``doc`` at ``path`` with the load average at the end, the memory
    warmed before measuring (None: a cold start) and, given ``rounds``,
    each round's order, load and machine state beside the script's own
    keys."""
    doc = dict(doc)
    if rounds is not None:
        doc.setdefault("round_orders_and_load", rounds.as_dict())
    doc.setdefault("load_average_at_end", loadavg())
    doc.setdefault("warm_memory", measure.last_warm_memory())
    with open(path, "w") as f:
        json.dump(doc, f, indent=1, default=str)
        f.write("\n")


__all__ = ["Row", "Rounds", "add_dirs", "add_json", "add_quick", "add_rounds", "alternating",
           "alternating_medians", "comparison_table", "parse", "parser", "percentile", "say_load",
           "say_runs", "say_table", "spread", "write_json"]


def spark_session(app: str):
    """(session, started): the local SparkSession the Spark benchmarks
    measure with (2 cores, no UI, 4 shuffle partitions, a 2 GB driver,
    Python workers reused), its log cut to errors, and started True; or the
    session already running in this process, as it is, and started False.
    The test suite runs a --quick benchmark in its shared session (a JVM's
    start was a third of the smoke run): that session's confs are the
    suite's (builder options given to getOrCreate would overwrite them for
    every later test), and the caller stops only a session it started."""
    from pyspark.sql import SparkSession
    running = SparkSession.getActiveSession()
    if running is not None:
        return running, False
    spark = (SparkSession.builder.master("local[2]").appName(app)
             .config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "4")
             .config("spark.driver.memory", "2g")
             .config("spark.python.worker.reuse", "true")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark, True
