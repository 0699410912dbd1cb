"""``kafkalite health``: one line, exit 0 when the node is healthy, 1 when not.

Run as a user runs it (a subprocess), against real servers.
"""
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from harness import ServerProcess, child_env


def health_cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalite", "health", *args], cwd=cwd,
                          env=child_env(), capture_output=True, text=True, timeout=30)


@pytest.mark.processes
def test_health_exits_1_while_a_worker_is_down_and_0_once_it_is_back(tmp_path):
    # A stopped worker (SIGSTOP) is fenced after the session timeout and
    # stays down until it is continued: the down state holds while the CLI
    # starts, which a killed worker's quick restart would not guarantee.
    srv = ServerProcess(str(tmp_path / "data"),
                        extra_args=["--broker-session-timeout-ms", "1000"]).start()
    stopped = None
    try:
        # found through the server.json of the server --bootstrap-server names
        run = health_cli("--bootstrap-server", srv.bootstrap, "--data-dir", srv.data_dir)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.count("\n") == 1 and ": ok: 2/2 workers up, controller ready" \
            in run.stdout

        stopped = srv.worker_pid(1)
        os.kill(stopped, signal.SIGSTOP)
        deadline = time.monotonic() + 15
        while True:
            run = health_cli("--data-dir", srv.data_dir)
            if run.returncode != 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert run.returncode == 1, run.stdout + run.stderr
        assert run.stdout.count("\n") == 1 and "unavailable: 1/2 workers up" in run.stdout \
            and "down: worker 1" in run.stdout

        os.kill(stopped, signal.SIGCONT)
        stopped = None
        deadline = time.monotonic() + 20
        while True:
            run = health_cli("--data-dir", srv.data_dir)
            if run.returncode == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert run.returncode == 0 and ": ok: 2/2" in run.stdout, run.stdout + run.stderr
    finally:
        if stopped is not None:
            os.kill(stopped, signal.SIGCONT)
        srv.stop()


@pytest.mark.processes
def test_health_of_a_server_that_is_not_there_exits_1_at_once(tmp_path):
    with socket.socket() as s:          # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    run = health_cli("--url", f"http://127.0.0.1:{port}/health", cwd=tmp_path)
    assert run.returncode == 1
    assert run.stdout.count("\n") == 1 and "unreachable" in run.stdout, run.stdout + run.stderr
    assert time.monotonic() - started < 10


@pytest.mark.processes
def test_wait_asks_again_until_a_starting_server_is_healthy(tmp_path):
    """``--wait`` is what a script that starts a server needs (the README's
    snippets looped on `until kafkalite health`): unreachable at first, it
    asks again until the server's /health answers 200, within --timeout."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/health"
    started = time.monotonic()
    run = health_cli("--wait", "--timeout", "2", "--url", url)
    took = time.monotonic() - started
    assert run.returncode == 1 and "not healthy within 2 s" in run.stdout, run.stdout
    assert run.stdout.count("\n") == 1 and 1.5 < took < 10, (run.stdout, took)

    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--metrics-port", str(port)])
    waiting = subprocess.Popen([sys.executable, "-m", "kafkalite", "health", "--wait",
                                "--timeout", "60", "--url", url], env=child_env(),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        srv.start()
        out, err = waiting.communicate(timeout=60)
        assert waiting.returncode == 0, out + err
        assert out.count("\n") == 1 and ": ok: 2/2 workers up" in out, out
    finally:
        waiting.kill()
        srv.stop()
