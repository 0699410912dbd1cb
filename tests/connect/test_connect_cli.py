"""``kafkalite connect standalone`` as a user runs it: a worker properties
file and a connector properties file, the REST API on the configured
port, records in the topic, offsets in the file after SIGTERM."""
from __future__ import annotations

import json
import signal
import subprocess
import sys

import requests
from harness import child_env, create, free_port, read_all, wait_until


def test_connect_standalone_command(server, topic_name, tmp_path):
    create(server, topic_name)
    src = tmp_path / "in.txt"
    src.write_text("".join(f"r{i}\n" for i in range(20)))
    port = free_port()
    (tmp_path / "worker.properties").write_text(
        f"# a worker as connect-standalone.properties\n"
        f"bootstrap.servers={server.bootstrap}\n"
        f"key.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"value.converter=org.apache.kafka.connect.storage.StringConverter\n"
        f"offset.storage.file.filename={tmp_path / 'offsets.json'}\n"
        f"offset.flush.interval.ms=500\n"
        f"listeners=http://127.0.0.1:{port}\n"
        f"kafkalite.file.allowed.paths={tmp_path}\n")
    (tmp_path / "source.properties").write_text(
        f"name=local-file-source\nconnector.class=FileStreamSource\ntasks.max=1\n"
        f"file={src}\ntopic={topic_name}\n")
    proc = subprocess.Popen([sys.executable, "-m", "kafkalite", "connect", "standalone",
                             str(tmp_path / "worker.properties"),
                             str(tmp_path / "source.properties")],
                            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}"

        def running():
            try:
                st = requests.get(f"{url}/connectors/local-file-source/status", timeout=5).json()
            except requests.ConnectionError:
                return False
            # a 404 body (no "tasks") until the connector is created
            return bool(st.get("tasks")) and st["tasks"][0]["state"] == "RUNNING"
        wait_until(running, timeout=60, message="the connector RUNNING")
        got = read_all(server, topic_name, 1, 20, timeout=30)
        assert [m.value() for m in got] == [b"r%d" % i for i in range(20)]
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    assert b"connector local-file-source created" in out
    doc = json.loads((tmp_path / "offsets.json").read_text())
    assert [json.loads(k) for k, _ in doc["offsets"]] == [["local-file-source",
                                                           {"filename": str(src)}]]
    assert doc["offsets"][0][1] == {"position": src.stat().st_size}


def test_a_connector_file_the_worker_refuses_is_one_line_and_exit_1(server, tmp_path):
    """A worker that lists no directory for the file connectors (the
    default) refuses a FileStreamSource at start: one line naming the
    connector file, the path and the setting, and exit 1 (was: a
    traceback, and a worker serving on without its connector)."""
    (tmp_path / "worker.properties").write_text(
        f"bootstrap.servers={server.bootstrap}\n"
        f"offset.storage.file.filename={tmp_path / 'offsets.json'}\n"
        f"listeners=http://127.0.0.1:{free_port()}\n")
    (tmp_path / "source.properties").write_text(
        "name=s\nconnector.class=FileStreamSource\nfile=in.txt\ntopic=t\n")
    r = subprocess.run([sys.executable, "-m", "kafkalite", "connect", "standalone",
                        str(tmp_path / "worker.properties"), str(tmp_path / "source.properties")],
                       env=child_env(), capture_output=True, timeout=60)
    assert r.returncode == 1
    lines = r.stderr.decode().strip().splitlines()
    assert lines == [f"kafkalite connect: {tmp_path / 'source.properties'}: in.txt: this worker "
                     f"lets connectors open no file; list the directories they may read and "
                     f"write in the worker setting kafkalite.file.allowed.paths"], lines
