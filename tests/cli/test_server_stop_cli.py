"""``kafkalite server-stop``: a page of the docs stops the server before it
starts one of other settings on the same ports (issue 74, item 3: pages run
top to bottom in one directory).

Run as a user runs it (a subprocess), against a real server.
"""
import json
import os
import subprocess
import sys

import pytest

from harness import ServerProcess, child_env, pid_alive


def server_stop(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkalite", "server-stop", *args],
                          env=child_env(), capture_output=True, text=True, timeout=90)


@pytest.mark.processes
def test_server_stop_stops_the_server_cleanly_and_waits_for_it(tmp_path):
    srv = ServerProcess(str(tmp_path / "data")).start()
    try:
        pid = srv.info["pid"]
        workers = [srv.worker_pid(i) for i in range(2)]
        run = server_stop("--data-dir", srv.data_dir)
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout == f"kafkalite server-stop: stopped the server on {srv.data_dir} " \
                             f"(pid {pid})\n"
        # exited when the command returned: a server started next on the
        # same ports finds them free; a clean stop removes server.json
        srv.proc.wait(5)
        assert srv.proc.returncode == 0, srv.output()[-2000:]
        assert not [w for w in workers if pid_alive(w)]
        assert not os.path.exists(os.path.join(srv.data_dir, "server.json"))
    finally:
        srv.stop()


@pytest.mark.processes
def test_server_stop_without_a_server_says_so_and_exits_0(tmp_path):
    """Nothing to stop: no server.json, or one a server killed -9 left whose
    pid is gone (never another program's process signalled)."""
    data = tmp_path / "data"
    data.mkdir()
    run = server_stop("--data-dir", str(data))
    assert (run.returncode, run.stderr) == (0, ""), run.stdout + run.stderr
    assert run.stdout == f"kafkalite server-stop: no server runs on {data} (no server.json)\n"

    # a pid that is not kafkalite's: this test's `sleep`
    other = subprocess.Popen(["sleep", "60"])
    try:
        (data / "server.json").write_text(json.dumps({"pid": other.pid}))
        run = server_stop("--data-dir", str(data))
        assert run.returncode == 0, run.stdout + run.stderr
        assert f"(pid {other.pid} of its server.json is gone)" in run.stdout
        assert other.poll() is None
    finally:
        other.kill()
        other.wait()

    (data / "server.json").write_text("{")
    run = server_stop("--data-dir", str(data))
    assert run.returncode == 1 and run.stdout == "", run.stdout + run.stderr
    assert run.stderr.startswith("kafkalite server-stop: ") and run.stderr.count("\n") == 1
