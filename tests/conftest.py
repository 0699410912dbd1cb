"""Fixtures shared by every test package (helpers live in harness.py), and
the suite's tiers.

Servers: ``server`` is one 2-worker server for the whole session (for each
pytest-xdist worker), shared by every test that only uses it: each test
works on its own topics (``topic_name``), groups and principals. A module
that kills, stops, restarts or reconfigures its server says so by asking
for ``module_server`` (one for the module) and a test that does it alone
for ``own_server``.

Tiers (markers, see pyproject.toml):
- ``unit``: the tests that run in this process only, chosen by rule: every
  test but those that ask for a server or process fixture
  (PROCESS_FIXTURES), those marked ``processes`` (a test that starts a
  process itself) and the benchmark smokes; ``pytest -m unit`` is the
  edit-test loop, run in one process (``pytest_cmdline_main``). A unit test
  that starts a process fails (``_no_processes``), so the tier stays cheap.
- ``bench_smoke``: a benchmark's smoke run (``_bench_smoke``): left out of
  ``pytest`` by pyproject's addopts, run on its own by ``pytest -m
  bench_smoke`` (the README's test command and .ci/run run both).
- ``soak``: long settings of the crash, fault and fuzz loops, run by
  ``tools/soak`` (each loop's length comes from its environment variable;
  the default run takes the short setting).
"""
import hashlib
import os
import random
import signal
import subprocess

import pytest

import bytecode
import durations
from harness import ServerProcess

# Bytecode written and read beside the sources by every process of the
# run, PYTHONDONTWRITEBYTECODE or not (tests/bytecode.py says why). Here at
# import, in the controlling process: xdist's workers and every child
# inherit the environment.
bytecode.write_beside_sources()
# A run's own turn of harness.free_port's port slices (see there), for the
# xdist workers and every child to inherit.
os.environ.setdefault("KAFKALITE_TEST_PORT_OFFSET", str(random.randrange(8)))


@pytest.hookimpl(tryfirst=True)     # before xdist's, which starts the workers
def pytest_cmdline_main(config):
    """``-m unit`` runs in two processes (one with one core) unless ``-n``
    is given: the tier is CPU-bound and each xdist worker collects the
    whole suite (about 26 CPU-s), so six workers cost more CPU than they
    save, and one process leaves a core idle (measured: docs/development.md,
    "Tests")."""
    if hasattr(config, "workerinput"):
        return          # an xdist worker: it runs its share and starts no workers of its own
    args = config.invocation_params.args
    if config.option.markexpr == "unit" and not any(
            a.startswith(("-n", "--numprocesses")) for a in args):
        config.option.numprocesses = 2 if (os.cpu_count() or 1) >= 2 else 0


def pytest_configure(config):
    # the checkout compiled once, before xdist's workers start (its
    # DSession starts them at sessionstart) and collect it all each
    if not hasattr(config, "workerinput") and getattr(config.option, "numprocesses", 0) and \
            config.getoption("dist", "no") != "no":
        bytecode.warm(config, [config.rootpath / "kafkalite", config.rootpath / "tests"])
    # each xdist group's seconds into tests/durations.json, when asked
    if os.environ.get("KAFKALITE_TEST_DURATIONS"):
        config.pluginmanager.register(
            durations.DurationsWriter(os.environ["KAFKALITE_TEST_DURATIONS"]), "durations_writer")
    # the CPU seconds of each test file, when asked (tests/cpu_report.py)
    if os.environ.get("KAFKALITE_TEST_CPU"):
        from cpu_report import CpuReport
        config.pluginmanager.register(CpuReport(os.environ["KAFKALITE_TEST_CPU"]), "cpu_report")


def pytest_sessionfinish(session):
    """Workers a test's killed supervisor left behind, which no server
    adopted or stopped, serve on until their data directory goes (issue 68):
    the run kills those under its temporary directories at its end."""
    if hasattr(session.config, "workerinput"):
        return          # the controlling process's basetemp holds every worker's
    try:
        base = str(session.config._tmp_path_factory.getbasetemp())
    except (AttributeError, OSError, ValueError):
        return
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"kafkalite.server.node.worker" in argv and base.encode() in b" ".join(argv):
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass

# The unit tier, by rule: every test but those that ask for a fixture of
# PROCESS_FIXTURES (directly or through another fixture), those marked
# ``processes`` (a test that starts a process itself: the ``_no_processes``
# guard fails it in the tier, saying so) and the benchmark smokes. The
# fixtures that start a server or another process, by name, wherever they
# are defined (this file's, tests/connect/conftest.py's and tests/spark/'s,
# and modules' own); a module's fixture named here that starts nothing only
# keeps its tests out of the tier.
PROCESS_FIXTURES = frozenset({
    # tests/conftest.py, tests/connect/conftest.py, tests/spark/conftest.py
    "server", "module_server", "own_server", "pg_server", "postgres", "pglogical", "workers",
    "connect", "spark",
    # modules' own servers, clusters and peers
    "cluster", "cluster_own_pg", "clusters", "distributed", "fixed_server", "idle_server",
    "kafkajs", "kip848_server", "matrix_server", "nodes", "one_worker_server", "own_pg", "pg",
    "sasl_server", "secured", "short_lookup_server", "short_sessions", "slow_s3_server",
    "srv", "stalled", "static_server", "three_nodes", "three_workers", "tiered_server",
    "two_nodes",
})


def _bench_smoke(item) -> bool:
    """A benchmark's smoke run (a benchmark script or the harness end to
    end, in its quick setting): its module is named ``*_smoke.py`` or it is
    marked ``bench_smoke``. Kept out of the default run (pyproject's
    addopts), run apart by ``pytest -m bench_smoke``."""
    return item.path.stem.endswith("_smoke") or item.get_closest_marker("bench_smoke") is not None


def _stop(srv: ServerProcess) -> None:
    if srv.proc.poll() is None:
        assert srv.stop() == 0
    else:
        srv.stop()          # the workers a killed server left for the next one to adopt
    srv.kill()


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    """A 2-worker server shared by every test of the session that does not
    kill, restart or reconfigure it (topics, groups and principals are per
    test)."""
    srv = ServerProcess(str(tmp_path_factory.mktemp("server") / "data")).start()
    yield srv
    _stop(srv)


@pytest.fixture(scope="module")
def module_server(tmp_path_factory):
    """A 2-worker server of one module's own, for a module whose tests kill,
    stop, restart or reconfigure it (the module says which and why)."""
    srv = ServerProcess(str(tmp_path_factory.mktemp("server") / "data")).start()
    yield srv
    _stop(srv)


@pytest.fixture
def own_server(tmp_path):
    """A 2-worker server of the test's own, for tests that restart, kill or
    starve it; stopped (if still running) at the end."""
    srv = ServerProcess(str(tmp_path / "data")).start()
    yield srv
    srv.stop()              # (a killed server's workers too)
    srv.kill()


@pytest.fixture(scope="session")
def pg_server():
    """A PostgreSQL server (tests/postgres.py) shared by the session's
    cluster tests: each takes a database of its own (``new_database``), so
    they share the server's start-up, not their state. Modules that use it
    skip themselves when PostgreSQL's binaries are missing."""
    from postgres import PostgresServer
    srv = PostgresServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def topic_name(request):
    """A topic name unique to the test across the session's shared server:
    a short hash of the test's module, then the test's name."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    tag = hashlib.blake2s(request.node.nodeid.split("::")[0].encode(), digest_size=3).hexdigest()
    return f"t{tag}-" + "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name)[:200]


@pytest.fixture
def group_name(topic_name):
    """A group id unique to the test across the session's shared server (for
    transactional ids, client ids and principals too: add a suffix)."""
    return "g" + topic_name[1:]


@pytest.hookimpl(tryfirst=True)     # before xdist's, which reads the groups
def pytest_collection_modifyitems(config, items):
    # items that are not test functions (a module skipped at collection, as
    # tests/spark is without Java) have no fixtures and no markers to add
    functions = [item for item in items if isinstance(item, pytest.Function)]
    # one SparkSession (a JVM) for the run, not one per xdist worker: every
    # test of a module where one test uses it goes to the "spark" group, so
    # that the module's tests still run together (a module fixture set up
    # twice in one process met its own topic)
    spark_modules = {item.path for item in functions if "spark" in item.fixturenames}
    for item in functions:
        if item.path in spark_modules:
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif item.get_closest_marker("xdist_group") is None:
            # a module's tests run in one xdist worker, in their order: its
            # module-scoped servers start once, and a test may build on what
            # an earlier one of its module left (a topic, a killed node)
            item.add_marker(pytest.mark.xdist_group(
                item.path.relative_to(config.rootpath).as_posix()))
        if _bench_smoke(item):
            item.add_marker(pytest.mark.bench_smoke)
        elif (item.get_closest_marker("processes") is None
              and PROCESS_FIXTURES.isdisjoint(item.fixturenames)):
            item.add_marker(pytest.mark.unit)
    # xdist hands the groups out in this order as processes come free
    # (pyproject.toml's --no-loadscope-reorder keeps it): the longest first,
    # by tests/durations.json (tests/durations.py says why and how it is
    # refreshed), so that none of them starts last and holds up the end;
    # the short groups after them in collection order (the sort is stable)
    seconds = durations.load()
    items.sort(key=lambda item: -seconds.get(durations.group_of(item), 0.0))


@pytest.fixture(autouse=True)
def _no_processes(request, monkeypatch):
    """A unit-tier test may start no process: the tier's promise."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(self, args, *a, **kw):
        raise AssertionError(f"a unit test started a process ({args!r}): mark it or move it "
                             "out of the unit tier")
    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", lambda: refuse(None, "fork()"))
