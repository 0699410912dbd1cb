"""Fixtures shared by every test package (helpers live in harness.py)."""
import pytest

from harness import ServerProcess


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A 2-worker server shared by a test module (topics are per test)."""
    srv = ServerProcess(str(tmp_path_factory.mktemp("server") / "data")).start()
    yield srv
    if srv.proc.poll() is None:
        assert srv.stop() == 0
    srv.kill()


@pytest.fixture
def own_server(tmp_path):
    """A 2-worker server of the test's own, for tests that restart, kill or
    starve it; stopped (if still running) at the end."""
    srv = ServerProcess(str(tmp_path / "data")).start()
    yield srv
    if srv.proc.poll() is None:
        srv.stop()
    srv.kill()


@pytest.fixture
def topic_name(request):
    """A topic name unique to the test."""
    name = request.node.name.replace("[", "-").replace("]", "").replace("/", "-")
    return "t-" + "".join(ch if ch.isalnum() or ch in "._-" else "-" for ch in name)[:200]
