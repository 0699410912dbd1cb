"""`kafkalite streams describe|reset` against a real server and a real
application: the topology, tasks with lag, internal topics, the local
state's checkpoints and restore progress; reset refused
while an instance runs, a dry run changes nothing, a reset rewinds the
inputs and deletes the internal topics so that the application run again
counts from nothing (the counts equal the model, not double); bad input is
one readable line and a non-zero exit.
"""
from __future__ import annotations

import collections
import subprocess
import sys
import time

from harness import child_env, create, run_cli, wait_until
from test_streams_runtime import config, long_of, produce, read, run_until_caught_up, wait_running

from kafkalite.client import AdminClient
from kafkalite.streams import KafkaStreams

APP_MODULE = '''
from kafkalite.streams import Consumed, Materialized, Produced, Serdes, StreamsBuilder

def topology():
    S, L = Serdes.string(), Serdes.long()
    b = StreamsBuilder()
    b.stream({src!r}, Consumed.with_(S, L)).group_by(lambda k, v: k[:2]).count(
        Materialized.as_("counts")).to_stream().to({src!r} + "-out", Produced.with_(S, L))
    return b.build()
'''


def cli(tmp_path, *args):
    """``kafkalite streams ARGS`` in this process (harness.run_cli), with the
    test's topology module importable from ``tmp_path``."""
    sys.path.insert(0, str(tmp_path))
    try:
        return run_cli("streams", *args)
    finally:
        sys.path.remove(str(tmp_path))


def one_line_error(out) -> str:
    assert out.returncode != 0, out.stdout
    err = out.stderr.decode().strip().splitlines()
    assert len(err) == 1 and "Traceback" not in out.stderr.decode(), out.stderr
    return err[0]


def test_describe_and_reset_an_application(server, topic_name, tmp_path):
    src = topic_name
    create(server, src, 2)
    create(server, f"{src}-out", 2)
    (tmp_path / "cli_app.py").write_text(APP_MODULE.format(src=src))
    sys.path.insert(0, str(tmp_path))
    try:
        import cli_app
    finally:
        sys.path.remove(str(tmp_path))
    app = f"{src}-app"
    bs = ["--bootstrap-server", server.bootstrap]
    now = int(time.time() * 1000)
    first = [(f"k{i % 7}x", i, now + i) for i in range(100)]
    produce(server, src, first)
    run_until_caught_up(KafkaStreams(cli_app.topology(), config(server, tmp_path, app)), server)
    produce(server, src, [(f"k{i % 7}x", i, now + i) for i in range(100, 110)])

    out = cli(tmp_path, "describe", app, "--topology", "cli_app:topology", *bs)
    assert out.returncode == 0, out.stderr
    text = out.stdout.decode()
    assert "Sub-topology: 0" in text and "Sub-topology: 1" in text
    assert f"Application {app}: group state Empty, 0 member(s)" in text
    rows = {line.split()[0]: line.split() for line in text.splitlines()
            if line.split() and line.split()[0] in ("0_0", "0_1", "1_0", "1_1")}
    assert set(rows) == {"0_0", "0_1", "1_0", "1_1"}
    # TASK PARTITIONS COMMITTED LOG-END LAG: the 10 new input records are the lag
    assert sum(int(rows[t][4]) for t in ("0_0", "0_1")) == 10
    assert all(rows[t][4] == "0" for t in ("1_0", "1_1"))
    assert f"{app}-counts-changelog (2 partitions)" in text
    assert "-repartition (2 partitions)" in text
    plain = cli(tmp_path, "describe", app, *bs).stdout.decode()
    assert f"{src}-0" in plain and "Topologies" not in plain
    # the local state: checkpoints at the changelogs' ends after the clean
    # close (nothing to restore on a restart), the last restore done
    local = cli(tmp_path, "describe", app, "--state-dir", str(tmp_path / "state"), *bs)
    assert local.returncode == 0, local.stderr
    text = local.stdout.decode().split("Local state in ")[1]
    rows = {line.split()[0]: line.split() for line in text.splitlines()[1:]
            if line.split() and line.split()[0] in ("1_0", "1_1")}
    assert set(rows) == {"1_0", "1_1"}, text
    for task, row in rows.items():
        # TASK STORE CHANGELOG CHECKPOINT LOG-END TAIL LAST-RESTORE...
        assert row[1] == "counts" and row[2] == f"{app}-counts-changelog-{task[-1]}", row
        assert row[3] == row[4] and int(row[4]) > 0 and row[5] == "0", row
        assert row[-1] == "done", row
    assert "holds no state" in one_line_error(
        cli(tmp_path, "describe", app, "--state-dir", str(tmp_path / "nowhere"), *bs))

    running = KafkaStreams(cli_app.topology(), config(server, tmp_path, app))
    running.start()
    try:
        wait_running(running, lambda: running.state == KafkaStreams.RUNNING,
                     "the application to run", 20)
        assert "running member" in one_line_error(cli(tmp_path, "reset", app, *bs))
        members = cli(tmp_path, "describe", app, *bs).stdout.decode()
        assert "1 member(s)" in members and f"{app}-" in members
    finally:
        running.close()

    dry = cli(tmp_path, "reset", app, "--dry-run", *bs)
    assert dry.returncode == 0 and b"Dry run" in dry.stdout, dry.stderr
    admin = AdminClient(server.config())
    try:
        assert f"{app}-counts-changelog" in admin.list_topics(timeout=10).topics
        done = cli(tmp_path, "reset", app, *bs)
        assert done.returncode == 0, done.stderr
        assert b"internal topic(s) deleted" in done.stdout
        committed = {(tp.topic, tp.partition): tp.offset
                     for tp in admin.list_consumer_group_offsets(app).result()}
        assert {v for (t, _), v in committed.items() if t == src} == {0}
        wait_until(lambda: not any(t.startswith(f"{app}-")
                                   for t in admin.list_topics(timeout=10).topics), 20,
                   "the internal topics to be deleted", interval=0.1)
    finally:
        admin.close()
    # run again from nothing (a new state dir is not needed: stores restore
    # from the changelog, which is gone): the counts are the model's, not double
    run_until_caught_up(KafkaStreams(cli_app.topology(), config(server, tmp_path, app)), server)
    latest = {}
    for _, k, v, _ in read(server, f"{src}-out", 2):
        latest[k] = long_of(v)
    model = collections.Counter(f"k{i % 7}".encode() for i in range(110))
    assert latest == dict(model)


def test_bad_input_is_one_line(server, topic_name, tmp_path):
    bs = ["--bootstrap-server", server.bootstrap]
    assert "does not exist" in one_line_error(cli(tmp_path, "describe", "nobody-home", *bs))
    assert "MODULE:ATTRIBUTE" in one_line_error(
        cli(tmp_path, "describe", "x", "--topology", "no_colon", *bs))
    assert "No module named" in one_line_error(
        cli(tmp_path, "describe", "x", "--topology", "no_such_module:t", *bs))
    create(server, topic_name, 1)
    assert "do not exist" in one_line_error(
        cli(tmp_path, "reset", "x", "--input-topics", f"{topic_name},missing-topic", *bs))
    assert "nothing to reset" in one_line_error(cli(tmp_path, "reset", "nobody-home", *bs))
    # the entry point itself, in a process of its own: an unknown command exits non-zero
    out = subprocess.run([sys.executable, "-m", "kafkalite", "streams", "frobnicate"],
                         capture_output=True, timeout=60, env=child_env())
    assert out.returncode != 0
