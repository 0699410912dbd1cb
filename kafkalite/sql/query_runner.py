"""The node's query runner: runs every persistent query (persistent.py)
recorded in QUERIES_TOPIC, one Streams application each.

Two halves:

- ``RunnerKeeper``, in the supervisor: once QUERIES_TOPIC exists (the
  first CREATE STREAM or CREATE TABLE makes it; after a restart it is there at once)
  spawns the runner process (``python -m kafkalite.sql.query_runner``),
  spawns it again when it dies (a kill -9 included) after
  RESTART_DELAY_S, and stops it with the server (SIGTERM, then SIGKILL
  after STOP_TIMEOUT_S). Until then it looks for the topic every
  IDLE_POLL_S with an admin client on its own thread: a server that
  never runs a persistent query (most of them) starts no runner, a
  process and some 32 MB saved. The runner is a process of its own so
  that DuckDB, pyarrow and the Streams runtime stay out of the
  supervisor, and so that a query that wedges or crashes takes no broker
  with it.
- ``Runner``, the process: follows QUERIES_TOPIC from its start
  (read_committed), starts a KafkaStreams per live query (application.id
  ``_kafkalite-query-<ID>-<created ms>``, exactly_once_v2) and closes it when the
  query's record is tombstoned (TERMINATE), its static member removed from
  the group at once rather than after its session timeout; writes each query's state
  (RUNNING, ERROR with the reason) back as ``status/<ID>``. It ends when
  told to (SIGTERM: each query commits what it processed, if that takes
  less than STOP_GRACE_S; else as after a kill -9) or when the process
  that spawned it is gone.

Exactly once: a query's outputs and its input offsets are committed in
one transaction (the Streams runtime's exactly_once_v2). Its
``transactional.id`` is ``<application.id>-node-<node id>``, the same for
every runner a node spawns, so a runner started after a kill -9 fences
the dead one's open transaction at once (InitProducerId aborts it) and
goes on from the committed offsets: nothing lost, nothing twice for a
read_committed reader.

Rights: the runner connects with the node's owner key pair; a query's
creator's Read on its input and Write on its output were checked when it
was created (and are checked again by TERMINATE), not while it runs. So
that a record written to QUERIES_TOPIC by anyone else (a client given
Write on it) cannot borrow the owner's rights, the runner runs only
records sealed with the owner's key file (queries_topic.seal); any other
is the query's ERROR, never started.

Which process runs it: the keeper, the supervisor of the node that
serves the HTTP port's ``/query`` (cli/server.py hands it to the
supervisor with the app); the runner, its own child process.
What it may import: as sql/ (the client and the Streams runtime).
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

log = logging.getLogger("kafkalite.sql.query_runner")

RESTART_DELAY_S = 1.0
RETRY_S, MAX_RETRY_S = 2.0, 60.0        # a failed query's backoff before it starts again
STOP_TIMEOUT_S = 10.0       # the keeper's wait before SIGKILL
STOP_GRACE_S = 2.0          # the runner's own, for a clean close (main())
POLL_S = 0.5
IDLE_POLL_S = 2.0       # how often the keeper looks for QUERIES_TOPIC before its runner


def client_config(bootstrap: str, key_file: str | None) -> dict:
    """The node's owner's client config, the keeper's and its runner's."""
    from kafkalite.client.config import owner_config
    return {"bootstrap.servers": bootstrap, **owner_config({"owner.key_file": key_file})}


def wait_for_queries_topic(config: dict, stop: threading.Event, alive=lambda: True) -> bool:
    """Until QUERIES_TOPIC exists, with the client only (DuckDB, pyarrow
    and the Streams runtime, some 5 s of CPU and 100 MB, are imported by
    a runner that has queries to run). False: ``stop`` was set, or
    ``alive()`` turned false, first."""
    from kafkalite.client import AdminClient
    from kafkalite.sql.queries_topic import QUERIES_TOPIC
    admin = AdminClient(config)
    try:
        while not stop.is_set() and alive():
            try:
                if QUERIES_TOPIC in admin.list_topics(timeout=IDLE_POLL_S).topics:
                    return True
            except Exception as exc:      # noqa: BLE001 -- the node is starting or stopping
                log.debug("no topic list yet: %s", exc)
            stop.wait(IDLE_POLL_S)
        return False
    finally:
        admin.close()


class RunnerKeeper:
    """Keeps one runner process alive until ``close`` (any thread), from
    when QUERIES_TOPIC exists."""

    def __init__(self, bootstrap: str, node_id: int, key_file: str | None = None):
        self.argv = [sys.executable, "-m", "kafkalite.sql.query_runner", "--bootstrap-servers",
                     bootstrap, "--node-id", str(node_id), "--parent-pid", str(os.getpid())]
        if key_file:
            self.argv += ["--key-file", key_file]
        self.config = client_config(bootstrap, key_file)
        self.proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="query-runner-keeper",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if wait_for_queries_topic(self.config, self._stop):
            self._keep()

    def _keep(self) -> None:
        while not self._stop.is_set():
            with self._lock:
                if self._stop.is_set():
                    return
                # the server's own environment: the same kafkalite as the server's
                self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL)
            code = self.proc.wait()
            if not self._stop.is_set():
                log.warning("the query runner (pid %d) ended with status %s; starting another",
                            self.proc.pid, code)
                self._stop.wait(RESTART_DELAY_S)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.terminate()
        try:
            proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Runner:
    """The runner process's loop (this module's docstring)."""

    def __init__(self, client_config: dict, node_id: int, parent_pid: int | None):
        self.client_config = client_config
        self.instance = f"node-{node_id}"
        self.host = f"{socket.gethostname()}:{os.getpid()}"
        self.parent_pid = parent_pid
        self.state_dir = ""
        self.wanted: dict[str, dict] = {}       # live query records, by id
        self.statuses: dict[str, dict] = {}     # what QUERIES_TOPIC says of each
        self.running: dict[str, object] = {}    # id -> KafkaStreams
        self.told: dict[str, tuple] = {}        # id -> (state, error) this runner wrote
        self.failures: dict[str, int] = {}      # id -> failed starts and runs so far
        self.retry_at: dict[str, float] = {}    # id -> when to start it again (monotonic)
        self.stop = threading.Event()
        self._producer = None

    def run(self) -> int:
        # the keeper saw the topic; this looks again (it is deleted, or
        # the node is still starting after a restart) before following it
        if wait_for_queries_topic(self.client_config, self.stop, self._parent_alive):
            self._follow()
        return 0

    def _follow(self) -> None:
        from kafkalite.client import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
        from kafkalite.sql import queries_topic
        self.state_dir = tempfile.mkdtemp(prefix="kafkalite-queries-")
        consumer = Consumer({**self.client_config, "isolation.level": "read_committed",
                             "enable.auto.commit": False})
        consumer.assign([TopicPartition(queries_topic.QUERIES_TOPIC, 0, OFFSET_BEGINNING)])
        self._producer = Producer({**self.client_config, "acks": "all",
                                   "enable.idempotence": True})
        try:
            while not self.stop.is_set():
                if not self._parent_alive():
                    # the supervisor was killed, its workers with it: nothing
                    # to commit to; the open transactions are aborted when
                    # the next runner's producers fence them
                    os._exit(0)
                batch = consumer.consume_batch(POLL_S)
                for key, value in zip(batch.column("key").to_pylist(),
                                      batch.column("value").to_pylist()):
                    queries_topic.apply_record(self.wanted, self.statuses, key, value)
                self._reconcile()
        finally:
            for query_id in list(self.running):
                self._stop_query(query_id)
            consumer.close()
            self._producer.flush(10)
            self._producer.close()
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def _parent_alive(self) -> bool:
        # an orphan (its supervisor killed) stops: the next server spawns its own
        return self.parent_pid is None or os.getppid() == self.parent_pid

    def _reconcile(self) -> None:
        for query_id in [q for q in self.running if q not in self.wanted]:
            self._stop_query(query_id, terminated=True)
        for query_id in [q for q in self.told if q not in self.wanted]:
            self.told.pop(query_id, None)
            self.retry_at.pop(query_id, None)
            self.failures.pop(query_id, None)
        for query_id, streams in list(self.running.items()):
            if streams.state == streams.RUNNING:
                self._tell(query_id, "RUNNING", None)
            elif streams.state == streams.ERROR:
                self._failed(query_id, streams.error)
                self._stop_query(query_id)
        now = time.monotonic()
        for query_id, query in self.wanted.items():
            if query_id not in self.running and self.retry_at.get(query_id, 0) <= now:
                if self._sealed(query):
                    self._start_query(query)

    def _sealed(self, query: dict) -> bool:
        from kafkalite.sql.queries_topic import sealed
        if sealed(query, self.client_config.get("curve.secret.key")):
            return True
        self._tell(query["id"], "ERROR", "not run: its record is not sealed by this node's "
                   "owner (written to the queries topic directly, not through POST /query or "
                   "the owner's kafkalite sql)")
        return False

    def _failed(self, query_id: str, exc) -> None:
        """ERROR, and a new start after a backoff (ksqlDB retries a failed
        query too): what failed may pass (a topic being created, a
        coordinator moving); what does not is retried at most every
        MAX_RETRY_S."""
        n = self.failures[query_id] = self.failures.get(query_id, 0) + 1
        delay = min(RETRY_S * 2 ** (n - 1), MAX_RETRY_S)
        self.retry_at[query_id] = time.monotonic() + delay
        log.warning("query %s failed: %s; starting it again in %g s", query_id,
                    _one_line(exc), delay)
        self._tell(query_id, "ERROR", f"{_one_line(exc)} (started again in {delay:g} s)")

    def _start_query(self, query: dict) -> None:
        from kafkalite.sql.persistent import application_id, plan_for
        from kafkalite.streams import KafkaStreams
        query_id = query["id"]
        try:
            plan = plan_for(query)
            streams = KafkaStreams(plan.topology(query["output"]), {
                **self.client_config, "application.id": application_id(query),
                "processing.guarantee": "exactly_once_v2", "instance.id": self.instance,
                "state.dir": os.path.join(self.state_dir, query_id),
                # a record its filter or projection fails on (a cast, malformed
                # JSON) is logged and skipped, as ksqlDB's processing log does,
                # rather than stopping the query
                "processing.exception.handler": "log_and_continue"})
            # a query that fails is that query's ERROR, not the runner's end
            streams.set_uncaught_exception_handler(lambda exc: None)
            streams.start()
        except Exception as exc:      # noqa: BLE001 -- told in SHOW QUERIES
            self._failed(query_id, exc)
            return
        self.running[query_id] = streams
        log.info("query %s runs: %s -> %s", query_id, query["input"], query["output"])

    def _stop_query(self, query_id: str, terminated: bool = False) -> None:
        """Closes its Streams instance, a static member of the query's group
        (``instance.id``): stopped by the runner's end or a failure, it stays
        in the group for its session timeout and a runner that starts it
        again takes its tasks back without a rebalance; TERMINATEd, it
        leaves at once (its group and its name are free)."""
        streams = self.running.pop(query_id)
        try:
            streams.close(leave_group=terminated)
        except Exception as exc:      # noqa: BLE001
            log.warning("query %s did not close cleanly: %s", query_id, _one_line(exc))

    def _tell(self, query_id: str, state: str, error: str | None) -> None:
        from kafkalite.sql.queries_topic import QUERIES_TOPIC, status_key
        if self.told.get(query_id) == (state, error):
            return
        self.told[query_id] = (state, error)
        self._producer.produce(QUERIES_TOPIC, json.dumps(
            {"state": state, "error": error, "host": self.host}).encode(),
            key=status_key(query_id))
        self._producer.flush(10)


def _one_line(exc) -> str:
    text = " ".join(str(exc).split()) if exc is not None else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m kafkalite.sql.query_runner",
                                description="a node's persistent SQL queries (spawned by the "
                                            "server)")
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--node-id", type=int, default=0)
    p.add_argument("--key-file", help="the owner's key pair (security on)")
    p.add_argument("--parent-pid", type=int)
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    runner = Runner(client_config(args.bootstrap_servers, args.key_file), args.node_id,
                    args.parent_pid)

    def stop(*_) -> None:
        if not runner.state_dir:
            os._exit(0)     # idle (no queries topic yet): nothing to close
        runner.stop.set()
        # the supervisor stopping the node is in its shutdown: it answers no
        # request, so a commit (or a metadata refresh) waiting on its
        # coordinators would wait out its timeout; past STOP_GRACE_S the
        # runner ends as a kill -9 would, which exactly-once makes safe (the
        # open transaction is aborted, its input read again)
        watchdog = threading.Timer(STOP_GRACE_S, os._exit, (0,))
        watchdog.daemon = True
        watchdog.start()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    return runner.run()


if __name__ == "__main__":
    sys.exit(main())
