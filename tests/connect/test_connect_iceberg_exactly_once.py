"""The Iceberg sink exactly once across kill -9 of its worker: a
``kafkalite connect standalone`` process whose sink task kills its own
process with SIGKILL right after a table commit, before the worker commits
the consumer group's offsets (CrashingIcebergSinkConnector, below); the
worker is started again until the topic is in the table. The table must
end with every record of the topic exactly once. The records come in
waves, one before each run: a run reads its backlog to the end and commits
it once (its ``flush.size`` pieces staged as data files meanwhile), so a
later run needs new rows to commit and be killed after.

The planted fault (``ICEBERG_PLANTED_FAULT=1`` in the worker's environment)
makes the sink resume from the group's offsets instead of the table's (and
turns off its fence, the check that the table still stands where the task
last saw it, which would otherwise notice): the same run must then show
duplicates, and the checker must say so (the second parametrization).

Size: ``ICEBERG_EOS_RECORDS`` records (default 1200), ``ICEBERG_EOS_CRASHES``
kills (default 2); a longer run: ICEBERG_EOS_RECORDS=100000 ICEBERG_EOS_CRASHES=10.
"""
from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys

import pytest
from harness import child_env, create, free_port, read_all, wait_until
from test_connect_iceberg import envelope, sink_config, table_rows

from kafkalite.client import AdminClient, Producer
from kafkalite.connect.connectors.iceberg import (IcebergSinkConnector, IcebergSinkTask,
                                                  table_offsets)
from kafkalite.iceberg_catalog import sql_catalog
from soak import setting

pytest.importorskip("pyiceberg")
HERE = os.path.dirname(os.path.abspath(__file__))


class CrashingIcebergSinkTask(IcebergSinkTask):
    """Kills its worker process (SIGKILL) after a table commit that added
    rows, while ``ICEBERG_CRASH_FILE`` holds a count above 0 (decremented)."""

    fault = os.environ.get("ICEBERG_PLANTED_FAULT") == "1"

    def _resume_offsets(self):
        # the planted fault: resume from the group's offsets (Kafka's default)
        return {} if self.fault else super()._resume_offsets()

    def _fence(self, stored, keys):
        # ... and without the fence, which would otherwise catch the table moving ahead
        return [] if self.fault else super()._fence(stored, keys)

    def _commit(self):
        before = dict(self.base)
        super()._commit()
        path = os.environ.get("ICEBERG_CRASH_FILE")
        if self.base != before and path:
            with open(path) as f:
                left = int(f.read() or 0)
            if left > 0:
                with open(path, "w") as f:
                    f.write(str(left - 1))
                os.kill(os.getpid(), signal.SIGKILL)


class CrashingIcebergSinkConnector(IcebergSinkConnector):
    def task_class(self):
        return CrashingIcebergSinkTask


def check_exactly_once(rows, records) -> list[str]:
    """What is wrong with the table's ``rows`` against the topic's
    ``records`` {(partition, offset): id}: missing, duplicated or wrong rows."""
    seen = collections.Counter((r["__kafka_partition"], r["__kafka_offset"]) for r in rows)
    problems = [f"duplicated {k} x{n}" for k, n in seen.items() if n > 1]
    problems += [f"missing {k}" for k in records if k not in seen]
    problems += [f"not in the topic {k}" for k in seen if k not in records]
    problems += [f"wrong id at {(r['__kafka_partition'], r['__kafka_offset'])}" for r in rows
                 if records.get((r["__kafka_partition"], r["__kafka_offset"])) != r["id"]]
    return problems


def start_worker(server, tmp_path, topic, name, crash_file, fault, run):
    (tmp_path / "worker.properties").write_text(
        f"bootstrap.servers={server.bootstrap}\n"
        f"offset.storage.file.filename={tmp_path / 'offsets.json'}\n"
        f"offset.flush.interval.ms=400\n"
        f"consumer.session.timeout.ms=3000\nconsumer.heartbeat.interval.ms=300\n"
        f"consumer.max.poll.records=100\n"
        f"listeners=http://127.0.0.1:{free_port()}\n")
    cfg = {"name": name, "tasks.max": "1", **sink_config(tmp_path, topic, "lake.eos"),
           "connector.class": "test_connect_iceberg_exactly_once:CrashingIcebergSinkConnector",
           "flush.size": "150"}
    (tmp_path / "sink.properties").write_text("".join(f"{k}={v}\n" for k, v in cfg.items()))
    env = child_env(ICEBERG_CRASH_FILE=str(crash_file), ICEBERG_PLANTED_FAULT="1" if fault else "0")
    env["PYTHONPATH"] = os.pathsep.join([HERE, os.path.dirname(HERE), env["PYTHONPATH"]])
    log = open(tmp_path / f"worker{run}.log", "wb")
    return subprocess.Popen([sys.executable, "-m", "kafkalite", "connect", "standalone",
                             str(tmp_path / "worker.properties"),
                             str(tmp_path / "sink.properties")],
                            env=env, stdout=log, stderr=subprocess.STDOUT)


def group_offsets(server, name, topic) -> dict:
    """The committed offsets of the sink ``name``'s group for ``topic``."""
    admin = AdminClient(server.config())
    try:
        return {(tp.topic, tp.partition): tp.offset
                for tp in admin.list_consumer_group_offsets(f"connect-{name}").result()
                if tp.offset >= 0 and tp.topic == topic}
    finally:
        admin.close()


@pytest.mark.slow
@pytest.mark.parametrize("fault", [False, True], ids=["sink", "planted-fault"])
def test_iceberg_sink_exactly_once_across_kill_9_between_table_and_group_commit(
        server, topic_name, sink_name, tmp_path, fault):
    n = setting("ICEBERG_EOS_RECORDS")
    crashes = setting("ICEBERG_EOS_CRASHES")
    create(server, topic_name, 2)
    fields = [{"field": "id", "type": "int64", "optional": False}]

    def produce(wave):
        p = Producer(server.config())
        for i in range(wave * n // (crashes + 1), (wave + 1) * n // (crashes + 1)):
            p.produce(topic_name, partition=i % 2, value=envelope(fields, {"id": i}))
        p.flush(30)
        p.close()
    # a wave of records before each run: a backlog read to its end is one table commit
    # (iceberg.py), so each run has rows of its own to commit and be killed after
    produce(0)
    crash_file = tmp_path / "crashes"
    crash_file.write_text(str(crashes))
    cat = sql_catalog("kafkalite", uri=f"sqlite:///{tmp_path}/catalog.db",
                      warehouse=f"file://{tmp_path}/warehouse")
    windows_hit = 0
    run = 0
    proc = start_worker(server, tmp_path, topic_name, sink_name, crash_file, fault, run)
    try:
        while True:
            done = wait_until(lambda: proc.poll() is not None or
                              len(table_rows(cat, "lake.eos")) >= n and
                              sum(group_offsets(server, sink_name, topic_name).values()) >= n,
                              timeout=90, message=lambda: f"run {run}: a crash or every row in")
            if proc.poll() is None and done:
                break
            assert proc.returncode == -signal.SIGKILL, (tmp_path / f"worker{run}.log").read_text()
            # killed after the table commit, before the group's: the table is ahead
            table = cat.load_table("lake.eos")
            ahead = table_offsets(table, f"connect-{sink_name}")
            group = group_offsets(server, sink_name, topic_name)
            windows_hit += any(off > group.get(k, 0) for k, off in ahead.items())
            run += 1
            if run <= crashes:
                produce(run)
            proc = start_worker(server, tmp_path, topic_name, sink_name, crash_file, fault, run)
    finally:
        # stopped before the table is read: no commit can come after the check
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
    assert run == crashes and windows_hit == crashes
    records = {(m.partition(), m.offset()): json.loads(m.value())["payload"]["id"]
               for m in read_all(server, topic_name, 2, n, timeout=30)}
    assert len(records) == n
    problems = check_exactly_once(table_rows(cat, "lake.eos"), records)
    if fault:
        # the planted fault: resuming from the group's offsets rewrites the batches
        # committed to the table but not to the group -- the checker sees them
        assert problems and all(x.startswith("duplicated") for x in problems), problems
    else:
        assert problems == []
