"""Fixtures of the Connect tests: a real PostgreSQL server for the session,
a standalone worker with its REST API per test."""

import pytest
from connect_helpers import Connect, stop_all

from postgres import PostgresServer, find_binaries


@pytest.fixture
def connect(server, tmp_path):
    """A standalone worker (offsets in the test's own file) on the module's
    server, its REST API on a free port; stopped at the end."""
    c = Connect(server, offset_file=tmp_path / "offsets.json")
    yield c
    c.close()


@pytest.fixture
def sink_name(topic_name):
    """A sink connector name of the test's own: its consumer group
    ``connect-<name>`` (whose committed offsets, of every topic, are what the
    REST API's offsets show) is the test's alone on the shared server."""
    return f"sink-{topic_name}"


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the whole session: its DSN. Skipped where
    PostgreSQL is not installed (tools/install-system-deps installs it)."""
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    srv = PostgresServer().start()
    yield srv.dsn
    srv.stop()


@pytest.fixture(scope="session")
def pglogical():
    """A PostgreSQL server with wal_level=logical for the session (the CDC
    tests' modules share it, each on slots and tables of its own): its DSN."""
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    srv = PostgresServer(wal_level="logical").start()
    yield srv.dsn
    srv.stop()


@pytest.fixture
def workers():
    """The worker processes a test starts, [(Popen, REST url)]: stopped at
    the end (SIGTERM, then SIGKILL for one that does not stop in 20 s:
    connect_helpers.stop_all)."""
    procs = []
    yield procs
    stop_all(procs)
