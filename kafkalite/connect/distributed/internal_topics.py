"""The config and status topics of a Connect cluster (Kafka's
KafkaConfigBackingStore and KafkaStatusBackingStore in one class,
``InternalTopics``): their record keys, the writes (the config topic's by
the group's leader, in transactions under exactly-once support), and one
tail thread that reads both into this worker's views. One class for both
topics because one read_committed consumer tails them and the herder reads
both views under one lock. The offsets topic is connect/offsets.py's.
Their formats: docs/connect-distributed.md.

Which process runs it: a ``kafkalite connect distributed`` worker; the
tail thread ``connect-tail`` applies what it reads, any thread writes.

What it may import: kafkalite.client (its types; the producers and
consumers of the worker's protocol through connect/clients.py), kafkalite.errors,
connect/errors.py, connect/signature.py (the session key record) and
connect/loggers.py (a cluster-wide log level it reads).
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time

from kafkalite.connect.errors import REBALANCE_CONFLICT, ConnectException, RebalanceNeededException
from kafkalite.connect.signature import SESSION_KEY, SessionKey

log = logging.getLogger("kafkalite.connect")

# the header on every internal-topic record naming the worker that wrote it (ours: Kafka
# writes none; readers that do not know it ignore it)
WRITER_HEADER = "kafkalite.connect.writer"
# the config topic's key of a connector's KIP-618 task count record (+ the connector's name)
TASK_COUNT_PREFIX = "task-count-record-"
# the config topic's key of a cluster-wide log level (KIP-976; + the logger's namespace),
# value {"level": <Kafka's level name>}: any worker writes it, every worker applies it
LOGGER_CLUSTER_PREFIX = "logger-cluster-"
# the status topic's key of a connector's active topic (KIP-558): "topic-<topic>-connector-
# <connector>" -> {"topic": {"name", "connector", "task", "discoverTimestamp"}}, written
# by the worker whose task used the topic first; a reset writes tombstones
TOPIC_STATUS_PREFIX, TOPIC_STATUS_SEPARATOR = "topic-", "-connector-"
# Fault injection for the config offset's own tests: "tail-paused-by:<path>" makes the
# tail thread read nothing while the file <path> exists (this worker's view of the config
# and status topics lags). Never set outside those tests.
FAULT_ENV = "KAFKALITE_CONNECT_FAULT"
TAIL_PAUSE_FAULT = "tail-paused-by:"


class InternalTopics:
    """The config and status topics: produced to, and tailed into views
    (read_committed: a config write of a fenced leader never shows).

    Config records are written by the group's leader only (``write_config``).
    With ``transactional_id`` (exactly-once source support) the leader
    writes them in transactions of a producer it claims when it becomes
    leader (``claim_write_privileges``, Kafka's KafkaConfigBackingStore):
    the claim bumps the id's epoch, so a deposed leader still writing is
    fenced and its records never land; ``on_fenced()`` then tells the herder.
    Every record carries the header ``WRITER_HEADER``: the worker that wrote
    it. Thread safety: writes from any thread; the leader's transactional
    producer is used under ``_write_lock`` (one transaction at a time)."""

    def __init__(self, client_config, config_topic, status_topic, on_config_change,
                 transactional_id: str | None = None, on_fenced=None):
        self.client_config = client_config
        self.transactional_id = transactional_id
        self.on_fenced = on_fenced
        self.writer = ""                          # this worker's id, for WRITER_HEADER
        self._write_lock = threading.Lock()
        self._leader_producer = None              # transactional: while write privileges last
        self.config_topic, self.status_topic = config_topic, status_topic
        self.configs: dict[str, dict] = {}       # connector -> properties
        self.targets: dict[str, str] = {}        # connector -> target state
        # connector -> its committed task configs; task configs are applied only when
        # their commit record arrives (``_staged`` until then), so no one starts half a set
        self.task_configs: dict[str, list[dict]] = {}
        self._staged: dict[str, dict[int, dict]] = {}
        # connector -> how many task config commits this view applied: a task whose
        # connector's count moved on since it started runs an outdated config
        self.task_commits: dict[str, int] = {}
        self.status: dict[str, dict] = {}        # status key -> value
        # KIP-507: the cluster's session key (signature.py), None until the leader wrote one
        self.session_key: SessionKey | None = None
        # KIP-618 zombie fencing: connector -> its last ``task-count-record`` (the task count
        # of the generation that started after its predecessors were fenced), and the
        # connectors whose task configs were committed after it (pending fencing) -> the
        # largest task count of the generations those configs replaced (whose producers the
        # leader fences before the new generation may start)
        self.task_count_records: dict[str, int] = {}
        self.pending_fencing: dict[str, int] = {}
        # connector -> the most task configs any of its commits had (whose producers an
        # exactly-once offsets change fences)
        self.max_task_counts: dict[str, int] = {}
        # the config topic's offset this view has read up to (Kafka's config offset: the
        # next one to read), and a consumer of our own for the topic's end offset
        self.config_position = 0
        self._ends = None
        self._ends_lock = threading.Lock()
        self.on_config_change = on_config_change
        self.on_topic_reset = None                # (connector, topic): a KIP-558 reset read
        self._lock = threading.Condition()
        self._seen = 0                            # records applied
        self._stop = threading.Event()
        self._producer = None
        # the REST API serves before start() has made the topics and the producer
        self._ready = threading.Event()
        self._thread = None

    def start(self):
        from kafkalite.client import NewTopic
        from kafkalite.connect.clients import AdminClient, Producer
        from kafkalite.errors import TopicAlreadyExistsError
        admin = AdminClient(self.client_config)
        try:
            for t in (self.config_topic, self.status_topic):
                try:
                    admin.create_topics([NewTopic(t, 1, config={"cleanup.policy": "compact"})])[
                        t].result()
                except TopicAlreadyExistsError:
                    pass
        finally:
            admin.close()
        self._producer = Producer({**self.client_config, "linger.ms": 0})
        from kafkalite.connect.clients import Consumer
        self._ends = Consumer({**self.client_config, "enable.auto.commit": False,
                               "isolation.level": "read_committed"})
        self._ready.set()
        self._thread = threading.Thread(target=self._tail, daemon=True, name="connect-tail")
        self._thread.start()

    def _tail(self):
        from kafkalite.client import OFFSET_BEGINNING, TopicPartition
        from kafkalite.connect.clients import Consumer
        c = Consumer({**self.client_config, "enable.auto.commit": False,
                      "fetch.max.wait.ms": 100, "isolation.level": "read_committed"})
        c.assign([TopicPartition(self.config_topic, 0, OFFSET_BEGINNING),
                  TopicPartition(self.status_topic, 0, OFFSET_BEGINNING)])
        config_tp = TopicPartition(self.config_topic, 0)
        fault = os.environ.get(FAULT_ENV, "")
        paused_by = fault[len(TAIL_PAUSE_FAULT):] if fault.startswith(TAIL_PAUSE_FAULT) else ""
        try:
            while not self._stop.is_set():
                if paused_by and os.path.exists(paused_by):
                    self._stop.wait(0.1)
                    continue
                changed = False
                for m in c.consume(1000, 0.2):
                    if m.error():
                        continue
                    key = m.key().decode()
                    value = None if m.value() is None else json.loads(m.value())
                    with self._lock:
                        if m.topic() == self.config_topic:
                            changed |= self._apply_config(key, value)
                        elif value is None:
                            gone = self.status.pop(key, None)
                            if gone and key.startswith(TOPIC_STATUS_PREFIX) and \
                                    self.on_topic_reset is not None:
                                self.on_topic_reset(gone["topic"]["connector"],
                                                    gone["topic"]["name"])
                        else:
                            self.status[key] = value
                        self._seen += 1
                        self._lock.notify_all()
                # by position, not by the last record: transaction markers take offsets too
                position = c.position([config_tp])[0].offset
                if position > self.config_position:
                    with self._lock:
                        self.config_position = position
                        self._lock.notify_all()
                if changed:
                    self.on_config_change()
        finally:
            c.close()

    def _apply_config(self, key, value) -> bool:
        """Apply one config topic record; True when the set of assignment units
        (connectors and their task counts) may have changed."""
        if key == SESSION_KEY:
            if value is not None:
                self.session_key = SessionKey.from_record(value)
                log.info("config topic: session key of %d (%s) read",
                         self.session_key.creation_timestamp, self.session_key.algorithm)
            return False
        if key.startswith(LOGGER_CLUSTER_PREFIX):
            if value is not None:
                from kafkalite.connect import loggers
                try:
                    loggers.set_level(key[len(LOGGER_CLUSTER_PREFIX):], value.get("level"))
                except ConnectException as e:
                    log.warning("config topic: %s: %s", key, e)
            return False
        if key.startswith(TASK_COUNT_PREFIX):
            # before "task-": a task count record is no task config
            name = key[len(TASK_COUNT_PREFIX):]
            if value is not None:
                self.task_count_records[name] = int(value["task-count"])
                self.pending_fencing.pop(name, None)
            return False
        if key.startswith("connector-"):
            name = key[len("connector-"):]
            if value is None:
                self.configs.pop(name, None)
                self.targets.pop(name, None)
                self.task_configs.pop(name, None)
                self._staged.pop(name, None)
                self.task_count_records.pop(name, None)
                self.pending_fencing.pop(name, None)
                self.max_task_counts.pop(name, None)
            else:
                self.configs[name] = value["properties"]
            return True
        if key.startswith("target-state-"):
            # the owner applies a target state between heartbeats: no rebalance
            name = key[len("target-state-"):]
            self.targets[name] = value["state"] if value else "STARTED"
            return False
        if key.startswith("task-"):
            name, _, task = key[len("task-"):].rpartition("-")
            if value is not None and task.isdigit():
                self._staged.setdefault(name, {})[int(task)] = value["properties"]
            return False
        if key.startswith("commit-"):
            name = key[len("commit-"):]
            count = int(value.get("tasks", 0)) if value else 0
            staged = self._staged.pop(name, {})
            if any(i not in staged for i in range(count)):
                # a compacted topic keeps each task's latest record before the commit
                # that follows it: a gap is a writer that died mid-set; the old set stands
                log.warning("config topic: commit of %d task configs for %s without all of "
                            "them; ignored", count, name)
                return False
            before = len(self.task_configs.get(name, []))
            self.pending_fencing[name] = max(self.pending_fencing.get(name, 0), before)
            self.task_configs[name] = [staged[i] for i in range(count)]
            self.max_task_counts[name] = max(self.max_task_counts.get(name, 0), count)
            self.task_commits[name] = self.task_commits.get(name, 0) + 1
            return count != before
        return False

    def write(self, topic, key, value) -> None:
        self.write_many(topic, [(key, value)])

    def write_many(self, topic, records) -> None:
        """Produce [(key, value)] in this order (one partition) and wait for all."""
        if not self._ready.wait(30):
            raise ConnectException("the worker is still starting: its internal topics are not "
                                   "ready")
        for key, value in records:
            self._producer.produce(topic, key=key.encode(), headers=self._headers(),
                                   value=None if value is None else json.dumps(value).encode())
        if self._producer.flush(30):
            raise ConnectException(f"{topic}: write of {records[-1][0]} not acknowledged in "
                                   f"30 s")

    def _headers(self):
        return [(WRITER_HEADER, self.writer.encode())]

    def write_config(self, records) -> None:
        """The leader's write of config records [(key, value)]: one
        transaction under exactly-once support (refused once another worker
        claimed the leader's transactional id), plain writes otherwise."""
        if self.transactional_id is None:
            self.write_many(self.config_topic, records)
            return
        from kafkalite.errors import KafkaError
        with self._write_lock:
            p = self._leader_producer
            if p is None:
                raise RebalanceNeededException(
                    f"{REBALANCE_CONFLICT}: this worker holds no write privileges on the "
                    f"config topic")
            try:
                p.begin_transaction()
                for key, value in records:
                    p.produce(self.config_topic, key=key.encode(), headers=self._headers(),
                              value=None if value is None else json.dumps(value).encode())
                p.commit_transaction(30)
            except KafkaError as e:
                if not getattr(e, "fatal", False):
                    try:
                        p.abort_transaction(10)
                    except KafkaError:
                        self._drop_leader_producer()
                    raise ConnectException(f"{self.config_topic}: write of {records[-1][0]} "
                                           f"failed: {e}") from None
                # fenced: another worker claimed the leader's transactional id
                self._drop_leader_producer()
                log.warning("config topic: this worker's write privileges were fenced (%s); "
                            "it no longer writes as the leader", e)
                if self.on_fenced is not None:
                    self.on_fenced()
                raise RebalanceNeededException(
                    f"{REBALANCE_CONFLICT}: this worker's write privileges on the config topic "
                    f"were fenced by a newer leader") from None

    def claim_write_privileges(self) -> None:
        """At the start of a leadership (exactly-once support only): a new
        transactional producer of the group's id, whose init_transactions
        fences every earlier leader's."""
        if self.transactional_id is None:
            return
        from kafkalite.connect.clients import Producer
        with self._write_lock:
            self._drop_leader_producer()
            p = Producer({**self.client_config, "transactional.id": self.transactional_id,
                          "linger.ms": 0})
            try:
                p.init_transactions(30)
            except Exception:
                p.close(5)
                raise
            self._leader_producer = p

    def release_write_privileges(self) -> None:
        with self._write_lock:
            self._drop_leader_producer()

    def _drop_leader_producer(self):
        if self._leader_producer is not None:
            try:
                self._leader_producer.close(5)
            except Exception:       # noqa: BLE001 -- a fenced producer may refuse to flush
                log.debug("config topic: closing the leader's producer", exc_info=True)
            self._leader_producer = None

    def config_end(self, timeout: float) -> int:
        """The config topic's end (its last stable offset: what a read_committed
        reader can reach)."""
        from kafkalite.client import TopicPartition
        with self._ends_lock:
            return self._ends.get_watermark_offsets(TopicPartition(self.config_topic, 0),
                                                    timeout)[1]

    def read_to(self, offset: int, timeout: float) -> bool:
        """Wait (at most ``timeout`` s) until this view has read the config
        topic up to ``offset``; whether it has."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.config_position < offset:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def read_to_end(self, timeout: float) -> bool:
        """Kafka's readConfigToEnd: this view reads the config topic up to the
        end it has now (bounded); whether it got there."""
        deadline = time.monotonic() + timeout
        try:
            end = self.config_end(timeout)
        except Exception as e:  # noqa: BLE001 -- the broker is not answering: not read
            log.warning("config topic: its end offset is unknown: %s", e)
            return False
        return self.read_to(end, max(0.0, deadline - time.monotonic()))

    def wait(self, cond, timeout=30.0):
        deadline = time.monotonic() + timeout
        with self._lock:
            while not cond():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConnectException("timed out waiting for the config topic")
                self._lock.wait(left)

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._producer is not None:
            self._producer.close(10)
        if self._ends is not None:
            with self._ends_lock:
                self._ends.close()
        self.release_write_privileges()
