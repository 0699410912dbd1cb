"""benchmarks/common.py, the shape the benchmark scripts share: the sides
of a round take turns going first, each round keeps its load average,
--quick leaves an option given on the command line alone, and the table
puts a figure beside its peer with the ratio. No process, no timing."""
import importlib.util
import sys
import time
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def common(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))      # common imports report, as a script does
    spec = importlib.util.spec_from_file_location("bench_common", BENCHMARKS / "common.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_common", module)     # its dataclass looks it up
    spec.loader.exec_module(module)
    return module


def test_two_sides_swap_who_goes_first_each_round(common):
    calls = []
    rounds = common.alternating(("ours", "peer"), 4, lambda side: calls.append(side) or len(calls))
    assert calls == ["ours", "peer", "peer", "ours", "ours", "peer", "peer", "ours"]
    assert rounds.values == {"ours": [1, 4, 5, 8], "peer": [2, 3, 6, 7]}
    assert rounds.median("ours") == 4.5 and rounds.best("peer") == 7
    assert len(rounds.loads) == 4


def test_three_sides_rotate_and_each_round_starts_with_its_hook(common):
    calls = []
    common.alternating("abc", 3, calls.append, each_round=lambda r: calls.append(r))
    assert calls == [0, "a", "b", "c", 1, "b", "c", "a", 2, "c", "a", "b"]


def test_quick_leaves_an_option_given_on_the_command_line(common, monkeypatch):
    def parse(argv):
        p = common.parser("A benchmark.\n\nMore text.")
        p.add_argument("--records", type=int, default=1_000_000)
        common.add_rounds(p, 3, flag="--runs")
        common.add_quick(p, "a smoke run")
        return common.parse(p, argv, quick={"records": 20_000, "runs": 1})
    assert (parse(["--quick"]).records, parse(["--quick"]).runs) == (20_000, 1)
    assert parse(["--quick", "--records", "500"]).records == 500
    assert parse(["--quick", "--runs=2"]).runs == 2
    assert parse([]).records == 1_000_000
    # a script's main() called without argv reads the command line itself
    monkeypatch.setattr(sys, "argv", ["bench.py", "--quick", "--records", "700"])
    args = parse(None)
    assert (args.records, args.runs) == (700, 1)


def test_table_puts_a_figure_beside_its_peer_with_the_ratio(common):
    table = common.comparison_table([
        common.Row("produce", 1500.0, "records/s", 1000.0, "confluent-kafka"),
        common.Row("per request", 0.42, "us", fmt=".2f")]).splitlines()
    assert table[0].split() == ["figure", "ours", "peer", "or", "ceiling", "which", "ratio"]
    assert table[2].split() == ["produce", "1,500", "records/s", "1,000", "records/s",
                                "confluent-kafka", "1.50x"]
    assert table[3].split() == ["per", "request", "0.42", "us"]
    met = common.comparison_table([common.Row("p99", 9.0, "ms", 10.0, "peer", "<= peer",
                                              met=True)])
    assert met.splitlines()[0].split()[-2:] == ["target", "met"]
    assert met.splitlines()[2].split()[-3:] == ["<=", "peer", "yes"]


def test_each_round_keeps_the_machine_state_over_it(common, capsys):
    def run(side):
        block = bytearray(4 << 20)
        block[::4096] = b"\1" * len(block[::4096])     # fresh pages written: faults
        until = time.monotonic() + 0.05                 # CPU time passes: steal has a share
        while time.monotonic() < until:
            pass
        return side
    rounds = common.alternating(("ours", "peer"), 2, run)
    assert len(rounds.machine) == 2
    for change in rounds.machine:
        assert change["pgfault"] > 0 and 0 <= change["steal_pct"] <= 100
        assert change["MemAvailable_end"] > 0 and len(change["load_average_end"]) == 3
    assert rounds.as_dict()["machine"] == rounds.machine
    assert capsys.readouterr().err.count("machine: load ") == 2


def test_every_script_takes_warm_memory_off_by_default(common):
    p = common.parser("A benchmark.")
    common.add_rounds(p, 3)
    args = common.parse(p, [])
    assert args.warm_memory is None       # a cold start unless asked (given, it starts a child)
    assert "--warm-memory SIZE" in p.format_help()
