"""The README's test command runs every test, and CI runs the README's
test command (issue 73): the benchmarks' smoke runs are left out of
``python -m pytest`` (pyproject's addopts) and run by a step of their own,
each step timed apart in CI's log (.ci/run)."""
import os
import re
import shlex
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _readme_steps() -> list[str]:
    """The README's test command, one step per ``&&``, the system
    packages' step aside (.ci/run runs it apart, as root)."""
    line = next(line for line in (REPO / "README.md").read_text().splitlines()
                if "pip install -e '.[test]'" in line and not line.startswith("#"))
    return [s.strip() for s in line.split("&&") if s.strip() != "tools/install-system-deps"]


def _ci_steps() -> list[str]:
    """.ci/run's commands after its ``README test command`` comment, with
    ``time`` and python3 read as the README's python."""
    text = (REPO / ".ci" / "run").read_text().split("# README test command", 1)[1]
    lines = [line for line in text.splitlines()[1:] if line.strip() and not line.startswith("#")]
    steps = [s.strip() for line in lines for s in line.split("&&")]
    return [re.sub(r"^time ", "", s).replace("python3", "python") for s in steps]


def test_ci_runs_the_readmes_test_command():
    assert _ci_steps() == [s.replace("pip install", "python -m pip install") for s in
                           _readme_steps()], (_ci_steps(), _readme_steps())


def test_the_test_command_runs_every_marker_the_default_run_leaves_out():
    addopts = shlex.split(tomllib.loads((REPO / "pyproject.toml").read_text())
                          ["tool"]["pytest"]["ini_options"]["addopts"])
    left_out = addopts[addopts.index("-m") + 1] if "-m" in addopts else ""
    assert left_out == "not bench_smoke", "the benchmark smokes are a step of their own"
    runs = [shlex.split(s) for s in _readme_steps() if s.startswith("python -m pytest")]
    assert ["python", "-m", "pytest"] in runs
    assert ["python", "-m", "pytest", "-m", "bench_smoke"] in runs


def _config(args, **extra):
    """What conftest.pytest_cmdline_main reads of pytest's config."""
    from types import SimpleNamespace
    return SimpleNamespace(invocation_params=SimpleNamespace(args=args), **extra,
                           option=SimpleNamespace(markexpr="unit", numprocesses=6))


def test_the_unit_tier_picks_its_worker_count_and_its_workers_start_none(pytestconfig):
    """``-m unit`` takes two xdist workers unless ``-n`` is given; a worker,
    which sees the same arguments, must not take two of its own: the first
    version of the hook did, and every worker started two more until the
    machine ran out of processes."""
    # tests/conftest.py as pytest loaded it (``import conftest`` may find another
    # package's conftest.py, which pytest registered under the same name)
    conftest = next(p for p in pytestconfig.pluginmanager.get_plugins()
                    if getattr(p, "__file__", None) == str(REPO / "tests" / "conftest.py"))
    cores = os.cpu_count() or 1
    tier = _config(["-m", "unit"])
    conftest.pytest_cmdline_main(tier)
    assert tier.option.numprocesses == (2 if cores >= 2 else 0)
    worker = _config(["-m", "unit"], workerinput={"workerid": "gw0"})
    worker.option.numprocesses = None           # as xdist's worker sets it
    conftest.pytest_cmdline_main(worker)
    assert worker.option.numprocesses is None
    for given in (["-m", "unit", "-n", "0"], ["-m", "unit", "-n6"], ["-m", "unit", "--numprocesses=3"]):
        told = _config(given)
        conftest.pytest_cmdline_main(told)
        assert told.option.numprocesses == 6, given
