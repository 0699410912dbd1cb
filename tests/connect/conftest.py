"""Fixtures of the Connect tests: a real PostgreSQL server for the session."""
import pytest

from postgres import PostgresServer, find_binaries


@pytest.fixture(scope="session")
def postgres():
    """A PostgreSQL server for the whole session: its DSN. Skipped where
    PostgreSQL is not installed (tools/install-system-deps installs it)."""
    if find_binaries() is None:
        pytest.skip("PostgreSQL is not installed: run tools/install-system-deps")
    srv = PostgresServer().start()
    yield srv.dsn
    srv.stop()
