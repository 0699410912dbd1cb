"""``kafkalite bench``'s report: the plots are readable when drivers run orders
of magnitude apart (log value axes, legend outside the data), every
package the harness imports comes with kafkalite's own install, and
results.json and results.md say how each workload paced its producers."""
from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest

from kafkalite.bench import report
from kafkalite.launcher import default_worker_count
from kafkalite.bench.measure import pyplot

REPO = Path(__file__).resolve().parents[2]


def _result(driver: str, rate: float) -> dict:
    # zeros at both ends, as a real series has before the first and after the last message
    series = [0.0] + [rate] * 8 + [0.0]
    lat = {"count": 10, "p50": rate / 1e5, "p99": rate / 1e4, "p999": rate / 1e3,
           "max": rate / 1e2}
    return {"driver": driver, "status": "ok",
            "series": {"bucket_s": 0.5, "publish": series, "consume": series},
            "publish_latency_ms": lat, "e2e_latency_ms": lat}


# a small results file: kafkalite-zmq about 1000x faster than its peers
WORKLOAD = {"name": "small", "slug": "small", "warmup_seconds": 1.0}
RESULTS = [_result("kafkalite-zmq", 2_000_000.0), _result("redis-streams", 2_000.0),
           _result("nats-jetstream", 1_500.0),
           {"driver": "file-append", "status": "skipped", "reason": "not here"}]


def _legends_outside(fig) -> None:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    assert legends
    for legend in legends:
        box = legend.get_window_extent(renderer)
        for ax in fig.axes:      # over no axes' data area
            assert not box.overlaps(ax.get_window_extent(renderer)), (box, ax.get_title())
        assert fig.bbox.contains(box.x1 - 1, box.y0 + 1), "the legend is cut off"


# matplotlib's first import on a machine builds its font cache by running
# fc-list (a fresh clone's run failed the unit tier's no-process rule on it)
@pytest.mark.processes
@pytest.mark.parametrize("figure", [report.throughput_figure, report.latency_figure])
def test_plots_use_log_axes_and_keep_the_legend_off_the_data(figure):
    plt = pyplot()
    fig = figure(plt, WORKLOAD, RESULTS)
    try:
        for ax in fig.axes:
            assert ax.get_yscale() == "log"
        if figure is report.throughput_figure:
            (ax,) = fig.axes

            def height(rate):     # where a rate sits, as a fraction of the axes' height
                return ax.transAxes.inverted().transform(ax.transData.transform((1.0, rate)))[1]
            # the two slow peers are told apart (on a linear axis both lie flat on
            # zero, 0.02% of the height apart), and the fastest fits
            assert height(2_000) - height(1_500) > 0.02
            assert 0 < height(1_500) < height(2_000_000) <= 1
        _legends_outside(fig)
    finally:
        plt.close(fig)


def _imported_packages(root: Path) -> set[str]:
    out = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                out |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                out.add(node.module.split(".")[0])
    return {m for m in out if m not in sys.stdlib_module_names and m != "kafkalite"}


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_package_the_harness_imports_is_a_dependency():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    listed = {_canonical(re.match(r"[A-Za-z0-9_.-]+", d).group()) for d in project["dependencies"]}
    distributions = importlib.metadata.packages_distributions()
    missing = {}
    for module in sorted(_imported_packages(REPO / "kafkalite" / "bench")):
        names = {_canonical(d) for d in distributions.get(module, [module])}
        if not names & listed:
            missing[module] = sorted(names)
    assert not missing, (f"kafkalite/bench imports {missing} (module: distribution), which "
                         f"`pip install kafkalite` does not install: add to [project] "
                         f"dependencies in pyproject.toml")


def test_the_report_says_how_each_workload_paced_its_producers(tmp_path):
    from kafkalite.bench.workload import parse
    base = {"name": "w", "messageSize": 64, "producerRate": 1000}
    paced = parse({**base, "name": "paced", "producerPacingMs": 2}, "paced.yaml")
    unpaced = parse(base, "w.yaml")
    closed = parse({**base, "name": "closed", "producerRate": 0}, "closed.yaml")
    doc = report.document([(paced, [], []), (unpaced, [], []), (closed, [], [])],
                          {"logical_cores": 2}, 0.0)
    report.write(str(tmp_path), doc)
    written = json.loads((tmp_path / "results.json").read_text())
    settings = [e["workload"] for e in written["workloads"]]
    assert [s["producer_pacing_ms"] for s in settings] == [2, 0, 0]
    md = (tmp_path / "results.md").read_text()
    sections = {s.split("\n", 1)[0]: s for s in md.split("\n## ")[1:]}
    assert "1,000 msg/s, sent every 2 ms" in sections["paced"]
    assert "1,000 msg/s, each message sent when due" in sections["w"]
    assert "max rate (closed loop);" in sections["closed"]
    assert "sent every" not in sections["closed"] and "when due" not in sections["closed"]


def test_the_report_and_the_headline_say_how_many_workers_the_server_ran(tmp_path):
    from kafkalite.bench import headline
    from kafkalite.bench.workload import parse
    base = {"messageSize": 64, "producerRate": 1000}
    one = parse({**base, "name": "one", "kafkaliteWorkers": 1}, "one.yaml")
    two = parse({**base, "name": "two", "kafkaliteWorkers": 2}, "two.yaml")
    default = parse({**base, "name": "default"}, "default.yaml")
    doc = report.document([(one, [], []), (two, [], []), (default, [], [])],
                          {"logical_cores": 2}, 0.0)
    report.write(str(tmp_path), doc)
    md = (tmp_path / "results.md").read_text()
    sections = {s.split("\n", 1)[0]: s for s in md.split("\n## ")[1:]}
    assert "kafkalite's server with 1 partition worker." in sections["one"]
    assert "kafkalite's server with 2 partition workers." in sections["two"]
    # unset: what the server's own default started on this machine
    n = default_worker_count()
    assert f"kafkalite's server with {report.workers_phrase(n)}." in sections["default"]
    entries = json.loads((tmp_path / "results.json").read_text())["workloads"]
    assert headline.workers_text(entries[:2]) == ("kafkalite's server ran 1 partition worker "
                                                  "for 'one'; 2 partition workers for 'two'")
    assert headline.workers_text(entries[1:2]) == "kafkalite's server ran 2 partition workers"
    # a results.json of before the fields: the bench always started 2 then
    for field in ("kafkalite_workers", "kafkalite_workers_started"):
        del entries[0]["workload"][field]
    assert report.workers_text(entries[0]["workload"]) == \
        "kafkalite's server with 2 partition workers"


def test_the_report_gives_each_runs_p99_over_time():
    results = [{"driver": "a", "round": 1, "status": "ok",
                "series": {"bucket_s": 0.5, "e2e_ms": {"p99": [12.34, None, 250.0]},
                           "publish_ms": {"p99": [1.0]}}},
               {"driver": "b", "round": 1, "status": "ok",
                "series": {"bucket_s": 0.5, "e2e_ms": {"p99": []},
                           "publish_ms": {"p99": [3.0, 4.5]}}},
               {"driver": "c", "round": 1, "status": "skipped", "series": {}}]
    assert report.timeline_rows(results) == [
        "- a, end-to-end p99 ms by 0.5 s: 12.3 - 250",
        "- b, publish p99 ms by 0.5 s: 3.0 4.5"]
