"""The supervisor process: metadata, admin, and the worker processes' lives.

It holds the cluster metadata (topics, configs, partition -> worker, leader
epochs; metadata.py), answers Metadata and admin requests on the native
protocol's ROUTER, tells workers what they own over a control ROUTER, and
restarts any worker that dies (with the same partitions and new leader
epochs). It is never on the data path: clients ask it who leads a partition
and then talk to that worker.

An admin change (create/delete topics, add partitions, alter configs) is
answered only when every worker involved has confirmed it, so a client
that creates a topic can produce to it at once.

Lifecycle: ``start()`` binds, spawns the workers and the ingest gateway and
writes ``<data_dir>/server.json`` once every worker is ready; SIGTERM or
SIGINT stop it cleanly (workers close their logs, leaving clean-shutdown
markers; no process and no /dev/shm segment is left behind).

Who may call: ``kafkalite server`` (cli.py), single-threaded.
"""
from __future__ import annotations

import fcntl
import itertools
import json
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field

import zmq

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey, ProtocolError, decode_request, encode_response
from kafkalite.protocol import native
from kafkalite.server.config import ServerConfig
from kafkalite.server.coordinator import GroupCoordinator
from kafkalite.server.group_log import OFFSETS_TOPIC
from kafkalite.server.kafka_listener import KafkaListener, is_kafka_client
from kafkalite.server.producer_ids import ProducerIdManager
from kafkalite.server.metadata import MetadataStore, TopicMetadata, validate_topic_name
from kafkalite.server.ratelimit import RateLimitedLog
from kafkalite.storage.checkpoint import write_atomically
from kafkalite.storage.config import LogConfig

log = logging.getLogger("kafkalite.supervisor")

SERVER_FILE = "server.json"
LOCK_FILE = ".lock"
SUPERVISOR_NODE_ID = -1
# The supervisor's broker id on the Kafka wire (controller, group coordinator):
# workers are brokers 0..n-1, and n never reaches 1000.
KAFKA_SUPERVISOR_NODE_ID = 1000
TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
CONFIG_SOURCE_TOPIC = 1
CONFIG_SOURCE_STATIC = 4
CONFIG_SOURCE_DEFAULT = 5
DEFAULT_ADMIN_TIMEOUT_MS = 30_000
# Each partition is a directory and open files in one worker; a bound keeps
# one request (or a fuzzed one) from asking for millions.
MAX_PARTITIONS_PER_TOPIC = 10_000
RESTART_BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 5.0)


@dataclass
class WorkerProcess:
    index: int
    port: int
    kafka_port: int = 0
    proc: subprocess.Popen | None = None
    pid: int = 0
    ready: bool = False
    restarts: int = 0
    crashes_in_a_row: int = 0
    restart_at: float = 0.0
    started: bool = False


@dataclass
class PendingOp:
    """An admin request waiting for workers to confirm."""
    identity: bytes
    header: object
    waiting: set
    respond: object                 # callable(timed_out: bool) -> response body
    deadline: float
    results: list = field(default_factory=list)


class Supervisor:
    def __init__(self, config: ServerConfig):
        self.config = config
        self.ctx = zmq.Context.instance()
        self.workers: list[WorkerProcess] = []
        self.ingest: subprocess.Popen | None = None
        self.pending: dict[int, PendingOp] = {}
        self._ops = itertools.count(1)
        self._stop = False
        self._lock_fd = -1
        self._ingest_restart_at = 0.0
        self._bad_input = RateLimitedLog(log)
        self.ready = False
        self.handlers = {
            ApiKey.METADATA: self._metadata,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self._describe_configs,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._incremental_alter_configs,
            ApiKey.DESCRIBE_CLUSTER: self._describe_cluster,
        }
        self.handlers[ApiKey.API_VERSIONS] = lambda i, h, b: native.api_versions_body(self.handlers)

    # ---- startup ---------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.config
        os.makedirs(cfg.data_dir, exist_ok=True)
        self._lock_fd = os.open(os.path.join(cfg.data_dir, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise errors.KafkaStorageError(
                f"another kafkalite server is using {cfg.data_dir}") from None
        self.metadata = MetadataStore(cfg.data_dir)
        self.coordinator = GroupCoordinator(
            cfg.data_dir, reply=self._reply, partition_count=self._partition_count,
            coordinator_node=self._coordinator_node,
            offsets_partitions=cfg.offsets_topic_num_partitions,
            min_session_timeout_ms=cfg.group_min_session_timeout_ms,
            max_session_timeout_ms=cfg.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=cfg.group_initial_rebalance_delay_ms,
            offsets_retention_minutes=cfg.offsets_retention_minutes)
        self.handlers.update(self.coordinator.handlers())
        self.producer_ids = ProducerIdManager(cfg.data_dir)
        self.handlers[ApiKey.INIT_PRODUCER_ID] = self._init_producer_id
        if self.metadata.rebalance(cfg.worker_count):
            log.warning("partitions of workers that no longer exist were moved")
        self.router = self.ctx.socket(zmq.ROUTER)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 1)
        try:
            if cfg.port:
                self.router.bind(f"tcp://{cfg.host}:{cfg.port}")
                self.port = cfg.port
            else:
                self.port = self.router.bind_to_random_port(f"tcp://{cfg.host}")
        except zmq.ZMQError as exc:
            raise errors.KafkaStorageError(
                f"cannot listen on {cfg.host}:{cfg.port}: {exc}") from None
        self.kafka = KafkaListener(cfg.host, cfg.kafka_port, self.handlers,
                                   api_keys=self._kafka_apis, name="supervisor")
        self.control = self.ctx.socket(zmq.ROUTER)
        self.control.setsockopt(zmq.LINGER, 0)
        self.control.setsockopt(zmq.ROUTER_HANDOVER, 1)
        control_port = self.control.bind_to_random_port("tcp://127.0.0.1")
        self.control_endpoint = f"tcp://127.0.0.1:{control_port}"
        for i in range(cfg.worker_count):
            port = cfg.worker_base_port + i if cfg.worker_base_port else 0
            kafka_port = cfg.kafka_worker_base_port + i if cfg.kafka_worker_base_port else 0
            self.workers.append(WorkerProcess(i, port, kafka_port))
            self._spawn(self.workers[-1])
        self.ingest_port = cfg.ingest_port
        self._spawn_ingest()

    def _config_json(self) -> str:
        from dataclasses import asdict
        return json.dumps(asdict(self.config))

    def _spawn(self, w: WorkerProcess) -> None:
        w.ready = False
        w.proc = subprocess.Popen(
            [sys.executable, "-m", "kafkalite.server.worker", "--index", str(w.index),
             "--control", self.control_endpoint, "--port", str(w.port),
             "--kafka-port", str(w.kafka_port), "--supervisor", self._local_endpoint(),
             "--config-json", self._config_json()])
        w.pid = w.proc.pid
        w.started = True

    def _spawn_ingest(self) -> None:
        if self.config.ingest_port < 0:
            return
        self.ingest = subprocess.Popen(
            [sys.executable, "-m", "kafkalite.server.ingest", "--bootstrap",
             f"{self.config.public_host}:{self.port}", "--host", self.config.host,
             "--port", str(self.ingest_port)],
            stdout=subprocess.PIPE)
        # The gateway prints the port it bound (the configured one, or any free one).
        line = self.ingest.stdout.readline().decode().split()
        if len(line) == 2 and line[0] == "ingest":
            self.ingest_port = int(line[1])
        self.ingest.stdout.close()

    def _local_endpoint(self) -> str:
        """The native endpoint as a worker on this host reaches it."""
        host = self.config.host
        return f"tcp://{'127.0.0.1' if host in ('0.0.0.0', '*', '') else host}:{self.port}"

    def _kafka_apis(self) -> list:
        from kafkalite.server.worker import DATA_APIS
        return sorted(set(self.handlers) | set(DATA_APIS))

    def endpoints(self) -> dict:
        host = self.config.public_host
        return {"pid": os.getpid(), "native": f"tcp://{host}:{self.port}",
                "bootstrap.servers": f"{host}:{self.port}",
                "kafka.bootstrap.servers": f"{host}:{self.kafka.port}",
                "kafka_brokers": [{"node_id": b["node_id"], "port": b["port"]}
                                  for b in self._kafka_brokers()],
                "ingest": f"tcp://{host}:{self.ingest_port}" if self.ingest else None,
                "workers": [{"index": w.index, "pid": w.pid, "endpoint": f"tcp://{host}:{w.port}"}
                            for w in self.workers],
                "data_dir": os.path.abspath(self.config.data_dir)}

    # ---- control channel -------------------------------------------------------------------

    def _send_worker(self, index: int, msg: dict) -> None:
        self.control.send_multipart([b"worker-%d" % index, json.dumps(msg).encode()])

    def _partition_spec(self, topic: TopicMetadata, index: int) -> dict:
        return {"topic": topic.name, "partition": index, "topic_id": str(topic.topic_id),
                "leader_epoch": topic.partitions[index].leader_epoch, "configs": topic.configs}

    def _on_control(self, identity: bytes, msg: dict) -> None:
        kind = msg["type"]
        w = self.workers[msg["worker"]]
        if kind == "hello":
            w.port, w.pid = msg["port"], msg["pid"]
            w.kafka_port = msg.get("kafka_port", 0)
            started = self.metadata.start_leadership(w.index)
            log.info("worker %d (pid %d) is up on port %d; leading %d partitions",
                     w.index, w.pid, w.port, len(started))
            parts = [self._partition_spec(t, i) for t, i, _ in self.metadata.owned_by(w.index)]
            self._send_worker(w.index, {"type": "assign", "op": f"start-{w.index}",
                                        "partitions": parts,
                                        "kafka_apis": [int(k) for k in self._kafka_apis()]})
        elif kind == "done":
            op = msg.get("op")
            if isinstance(op, str) and op == f"start-{w.index}":
                w.ready = True
                w.crashes_in_a_row = 0
                if self.ready:
                    self._write_server_file()  # a restarted worker: new pid, maybe new port
                self._check_ready()
            elif op in self.pending:
                pend = self.pending[op]
                pend.waiting.discard(w.index)
                pend.results.extend(msg.get("results", []))
                if not pend.waiting:
                    del self.pending[op]
                    self._reply(pend.identity, pend.header, pend.respond(False))
        elif kind == "bye":
            w.ready = False

    def _write_server_file(self) -> None:
        write_atomically(os.path.join(self.config.data_dir, SERVER_FILE),
                         json.dumps(self.endpoints(), indent=1).encode())

    def _check_ready(self) -> None:
        if not self.ready and all(w.ready for w in self.workers):
            self.ready = True
            self._write_server_file()
            e = self.endpoints()
            print(f"kafkalite server ready: bootstrap.servers={e['bootstrap.servers']} "
                  f"(native {e['native']}), Kafka clients {e['kafka.bootstrap.servers']}, "
                  f"ingest {e['ingest']}, {len(self.workers)} "
                  f"worker(s), data in {e['data_dir']}", flush=True)

    def _dispatch_to_workers(self, identity, header, by_worker: dict[int, dict], respond,
                             timeout_ms: int) -> None:
        """Send a control message to each worker and reply when all confirm."""
        if not by_worker:
            self._reply(identity, header, respond(False))
            return
        op = next(self._ops)
        self.pending[op] = PendingOp(identity, header, set(by_worker), respond,
                                     time.monotonic() + max(timeout_ms, 1) / 1000.0)
        for index, msg in by_worker.items():
            self._send_worker(index, {**msg, "op": op})

    def _expire_pending(self) -> None:
        now = time.monotonic()
        for op, pend in list(self.pending.items()):
            if pend.deadline <= now:
                del self.pending[op]
                self._reply(pend.identity, pend.header, pend.respond(True))

    # ---- worker lifecycle --------------------------------------------------------------------

    def _watch_children(self) -> None:
        now = time.monotonic()
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is not None:
                code = w.proc.returncode
                log.error("worker %d (pid %d) exited with %s; restarting it", w.index, w.pid, code)
                print(f"kafkalite: worker {w.index} (pid {w.pid}) died ({code}); restarting",
                      file=sys.stderr, flush=True)
                w.proc = None
                w.ready = False
                delay = RESTART_BACKOFF_S[min(w.crashes_in_a_row, len(RESTART_BACKOFF_S) - 1)]
                w.crashes_in_a_row += 1
                w.restart_at = now + delay
            if w.proc is None and not self._stop and now >= w.restart_at:
                w.restarts += 1
                self._spawn(w)
        if self.ingest is not None and self.ingest.poll() is not None and not self._stop:
            if self._ingest_restart_at == 0.0:
                log.error("the ingest gateway exited with %s; restarting it", self.ingest.returncode)
                self._ingest_restart_at = now + 2.0
            elif now >= self._ingest_restart_at:
                self._ingest_restart_at = 0.0
                self._spawn_ingest()

    # ---- requests ----------------------------------------------------------------------------

    def _reply(self, identity, header, body: dict) -> None:
        if not isinstance(identity, bytes):         # a Kafka wire connection
            self.kafka.respond(identity, header, body)
            return
        self.router.send_multipart([identity, encode_response(
            header.api_key, header.api_version, header.correlation_id, body)])

    def _on_request(self, frames: list) -> None:
        identity, payload = frames[0], frames[1]
        try:
            # Relayed Kafka-wire requests keep Kafka's leniency about trailing bytes.
            header, body = decode_request(payload, records_in=frames[2:],
                                          ignore_trailing=is_kafka_client(identity))
        except ProtocolError as exc:
            self._bad_input.warning("dropped a malformed request: %s", exc)
            return
        handler = self.handlers.get(header.api_key)
        if handler is None or not native.version_supported(header):
            native.send_error(self.router, identity, header, errors.UnsupportedVersionError.code,
                              f"the supervisor does not serve api {header.api_key} "
                              f"v{header.api_version}")
            return
        try:
            response = handler(identity, header, body)
        except KafkaError as exc:
            native.send_error(self.router, identity, header, exc.code, exc.message)
            return
        except Exception as exc:
            log.exception("request %s failed", header.api_key)
            native.send_error(self.router, identity, header, errors.UnknownServerError.code, str(exc))
            return
        if response is not None:
            self._reply(identity, header, response)

    # metadata

    def _brokers(self, identity=b"") -> list[dict]:
        if is_kafka_client(identity):
            return self._kafka_brokers()
        host = self.config.public_host
        return [{"node_id": w.index, "host": host, "port": w.port, "rack": None}
                for w in self.workers if w.ready]

    def _kafka_brokers(self) -> list[dict]:
        """The brokers Kafka clients see: each worker, and the supervisor."""
        host = self.config.public_host
        return [{"node_id": w.index, "host": host, "port": w.kafka_port, "rack": None}
                for w in self.workers if w.ready] + [
            {"node_id": KAFKA_SUPERVISOR_NODE_ID, "host": host, "port": self.kafka.port,
             "rack": None}]

    def _controller_id(self, identity) -> int:
        return KAFKA_SUPERVISOR_NODE_ID if is_kafka_client(identity) else SUPERVISOR_NODE_ID

    def _topic_entry(self, topic: TopicMetadata) -> dict:
        parts = []
        for i, p in enumerate(topic.partitions):
            ready = self.workers[p.worker].ready
            parts.append({"error_code": 0 if ready else errors.LeaderNotAvailableError.code,
                          "partition_index": i, "leader_id": p.worker if ready else -1,
                          "leader_epoch": p.leader_epoch, "replica_nodes": [p.worker],
                          "isr_nodes": [p.worker] if ready else [], "offline_replicas": []})
        return {"error_code": 0, "name": topic.name, "topic_id": topic.topic_id,
                "is_internal": topic.is_internal, "partitions": parts,
                "topic_authorized_operations": -2147483648}

    def _metadata_body(self, names, identity=b"") -> dict:
        topics = []
        for name in names:
            topic = self.metadata.topics.get(name)
            if topic is None:
                try:
                    validate_topic_name(name)
                    code = errors.UnknownTopicOrPartitionError.code
                except KafkaError as exc:
                    code = exc.code
                topics.append({"error_code": code, "name": name, "is_internal": False,
                               "partitions": []})
            else:
                topics.append(self._topic_entry(topic))
        return {"throttle_time_ms": 0, "brokers": self._brokers(identity),
                "cluster_id": self.metadata.cluster_id,
                "controller_id": self._controller_id(identity),
                "topics": topics, "cluster_authorized_operations": -2147483648}

    def _metadata(self, identity, header, body):
        requested = body.get("topics")
        if requested is None or (header.api_version == 0 and not requested):
            return self._metadata_body(sorted(self.metadata.topics), identity)
        names = [t["name"] for t in requested if t.get("name") is not None]
        missing = [n for n in names if n not in self.metadata.topics]
        creatable = []
        if missing and body.get("allow_auto_topic_creation") and self.config.auto_create_topics:
            for name in missing:
                try:
                    validate_topic_name(name)
                    creatable.append(name)
                except KafkaError:
                    pass
        if not creatable:
            return self._metadata_body(names, identity)
        by_worker = self._create(creatable, self.config.default_partitions, {})
        self._dispatch_to_workers(identity, header, by_worker,
                                  lambda timed_out: self._metadata_body(names, identity),
                                  DEFAULT_ADMIN_TIMEOUT_MS)
        return None

    def _create(self, names, partitions: int, configs: dict) -> dict[int, dict]:
        by_worker: dict[int, dict] = {}
        for name in names:
            topic = self.metadata.create_topic(name, partitions, configs, len(self.workers))
            for i, p in enumerate(topic.partitions):
                msg = by_worker.setdefault(p.worker, {"type": "assign", "partitions": []})
                msg["partitions"].append(self._partition_spec(topic, i))
        return by_worker

    # admin

    def _validated_configs(self, configs: dict[str, str]) -> dict[str, str]:
        try:
            self.config.log_config(configs)
        except KafkaError as exc:
            raise errors.InvalidConfigurationError(exc.message) from None
        return configs

    def _create_topics(self, identity, header, body):
        results, to_create = [], []
        for t in body["topics"]:
            name = t["name"]
            out = {"name": name, "error_code": 0, "error_message": None,
                   "num_partitions": -1, "replication_factor": -1, "configs": []}
            results.append(out)
            try:
                validate_topic_name(name)
                if name == OFFSETS_TOPIC:
                    raise errors.InvalidTopicError(
                        f"{OFFSETS_TOPIC} is internal: the group coordinator keeps it")
                if name in self.metadata.topics or name in [n for n, *_ in to_create]:
                    raise errors.TopicAlreadyExistsError(f"topic {name!r} already exists")
                rf = t.get("replication_factor", -1)
                if rf not in (-1, 1):
                    raise errors.InvalidReplicationFactorError(
                        f"replication factor {rf} is not supported: kafkalite has no "
                        f"replication yet, so every partition has exactly 1 replica")
                if t.get("assignments"):
                    raise errors.InvalidReplicaAssignmentError(
                        "manual replica assignment is not supported")
                n = t.get("num_partitions", -1)
                n = self.config.default_partitions if n == -1 else n
                if not 1 <= n <= MAX_PARTITIONS_PER_TOPIC:
                    raise errors.InvalidPartitionsError(
                        f"number of partitions must be 1 to {MAX_PARTITIONS_PER_TOPIC}, not {n}")
                configs = self._validated_configs(
                    {c["name"]: c["value"] for c in t.get("configs") or [] if c["value"] is not None})
                out["num_partitions"], out["replication_factor"] = n, 1
                to_create.append((name, n, configs))
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        by_worker: dict[int, dict] = {}
        if not body.get("validate_only"):
            for name, n, configs in to_create:
                for index, msg in self._create([name], n, configs).items():
                    by_worker.setdefault(index, {"type": "assign", "partitions": []})[
                        "partitions"].extend(msg["partitions"])
                topic = self.metadata.topics[name]
                for out in results:
                    if out["name"] == name and out["error_code"] == 0:
                        out["topic_id"] = topic.topic_id

        def respond(timed_out: bool) -> dict:
            if timed_out:
                for out in results:
                    if out["error_code"] == 0:
                        out["error_code"] = errors.RequestTimedOutError.code
                        out["error_message"] = "the workers did not confirm in time"
            return {"throttle_time_ms": 0, "topics": results}

        self._dispatch_to_workers(identity, header, by_worker, respond,
                                  body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))
        return None

    def _delete_topics(self, identity, header, body):
        names = list(body.get("topic_names") or []) + [
            t["name"] for t in body.get("topics") or [] if t.get("name")]
        results, by_worker = [], {}
        for name in names:
            out = {"name": name, "error_code": 0, "error_message": None}
            results.append(out)
            try:
                topic = self.metadata.delete_topic(name)
                out["topic_id"] = topic.topic_id
                for i, p in enumerate(topic.partitions):
                    msg = by_worker.setdefault(p.worker, {"type": "unassign", "delete": True,
                                                          "partitions": []})
                    msg["partitions"].append({"topic": name, "partition": i})
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        self._dispatch_to_workers(identity, header, by_worker,
                                  lambda timed_out: {"throttle_time_ms": 0, "responses": results},
                                  body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))
        return None

    def _create_partitions(self, identity, header, body):
        results, by_worker = [], {}
        for t in body["topics"]:
            out = {"name": t["name"], "error_code": 0, "error_message": None}
            results.append(out)
            try:
                if t.get("assignments"):
                    raise errors.InvalidReplicaAssignmentError(
                        "manual replica assignment is not supported")
                topic = self.metadata.get(t["name"])
                if t["count"] <= len(topic.partitions):
                    raise errors.InvalidPartitionsError(
                        f"topic {t['name']!r} has {len(topic.partitions)} partitions; the new "
                        f"count must be larger, not {t['count']}")
                if t["count"] > MAX_PARTITIONS_PER_TOPIC:
                    raise errors.InvalidPartitionsError(
                        f"a topic may have at most {MAX_PARTITIONS_PER_TOPIC} partitions, "
                        f"not {t['count']}")
                if body.get("validate_only"):
                    continue
                for i in self.metadata.add_partitions(t["name"], t["count"], len(self.workers)):
                    p = topic.partitions[i]
                    msg = by_worker.setdefault(p.worker, {"type": "assign", "partitions": []})
                    msg["partitions"].append(self._partition_spec(topic, i))
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        def respond(timed_out: bool) -> dict:
            # once the workers serve the new partitions, groups consuming them rebalance
            for out in results:
                if out["error_code"] == 0 and not body.get("validate_only"):
                    self.coordinator.on_partitions_changed(out["name"])
            return {"throttle_time_ms": 0, "results": results}

        self._dispatch_to_workers(identity, header, by_worker, respond,
                                  body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))
        return None

    # groups

    def _partition_count(self, topic: str) -> int | None:
        t = self.metadata.topics.get(topic)
        return None if t is None else len(t.partitions)

    def _coordinator_node(self, identity) -> dict:
        """Where clients find the group coordinator: this process (its Kafka
        listener for Kafka clients)."""
        if is_kafka_client(identity):
            return {"node_id": KAFKA_SUPERVISOR_NODE_ID, "host": self.config.public_host,
                    "port": self.kafka.port}
        return {"node_id": SUPERVISOR_NODE_ID, "host": self.config.public_host, "port": self.port}

    # idempotent producers

    def _init_producer_id(self, identity, header, body):
        if body.get("transactional_id") is not None:
            raise errors.InvalidRequestError("transactions are not supported yet; use an "
                                             "idempotent producer without transactional.id")
        # Without a transactional id Kafka always hands out a new producer id
        # (epoch 0), even when the producer names its old id and epoch.
        return {"throttle_time_ms": 0, "error_code": 0,
                "producer_id": self.producer_ids.next_id(), "producer_epoch": 0}

    def _config_entries(self, topic: TopicMetadata, keys) -> list[dict]:
        effective = self.config.log_config(topic.configs).to_properties()
        static = LogConfig.from_properties(self.config.topic_defaults).to_properties()
        defaults = LogConfig().to_properties()
        out = []
        for name, value in effective.items():
            if keys and name not in keys:
                continue
            if name in topic.configs:
                source = CONFIG_SOURCE_TOPIC
            elif static[name] != defaults[name]:
                source = CONFIG_SOURCE_STATIC
            else:
                source = CONFIG_SOURCE_DEFAULT
            out.append({"name": name, "value": value, "read_only": False,
                        "is_default": source == CONFIG_SOURCE_DEFAULT, "config_source": source,
                        "is_sensitive": False, "synonyms": [], "config_type": 0,
                        "documentation": None})
        return out

    def _describe_configs(self, identity, header, body):
        results = []
        for r in body["resources"]:
            out = {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                   "resource_name": r["resource_name"], "configs": []}
            try:
                if r["resource_type"] != TOPIC_RESOURCE:
                    raise errors.InvalidRequestError(
                        f"only topic configs (resource type {TOPIC_RESOURCE}) can be described")
                topic = self.metadata.get(r["resource_name"])
                out["configs"] = self._config_entries(topic, r.get("configuration_keys"))
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
            results.append(out)
        return {"throttle_time_ms": 0, "results": results}

    def _apply_configs(self, identity, header, body, new_configs) -> None:
        """``new_configs(resource, current) -> dict``; shared by both Alter APIs."""
        responses, by_worker, changed = [], {}, []
        for r in body["resources"]:
            out = {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                   "resource_name": r["resource_name"]}
            responses.append(out)
            try:
                if r["resource_type"] != TOPIC_RESOURCE:
                    raise errors.InvalidRequestError(
                        f"only topic configs (resource type {TOPIC_RESOURCE}) can be altered")
                topic = self.metadata.get(r["resource_name"])
                configs = self._validated_configs(new_configs(r, dict(topic.configs)))
                if not body.get("validate_only"):
                    changed.append((topic, configs))
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        for topic, configs in changed:
            self.metadata.set_configs(topic.name, configs)
            for i, p in enumerate(topic.partitions):
                msg = by_worker.setdefault(p.worker, {"type": "assign", "partitions": []})
                msg["partitions"].append(self._partition_spec(topic, i))
        self._dispatch_to_workers(identity, header, by_worker,
                                  lambda timed_out: {"throttle_time_ms": 0, "responses": responses},
                                  DEFAULT_ADMIN_TIMEOUT_MS)

    def _alter_configs(self, identity, header, body):
        # Legacy AlterConfigs replaces the whole set of topic overrides.
        self._apply_configs(identity, header, body, lambda r, current: {
            c["name"]: c["value"] for c in r["configs"] if c["value"] is not None})
        return None

    def _incremental_alter_configs(self, identity, header, body):
        def apply(r, current):
            for c in r["configs"]:
                op, name, value = c["config_operation"], c["name"], c["value"]
                if op == 0:                              # SET
                    current[name] = value
                elif op == 1:                            # DELETE
                    current.pop(name, None)
                elif op in (2, 3):                       # APPEND / SUBTRACT (list configs)
                    items = [v for v in current.get(name, "").split(",") if v]
                    for v in (value or "").split(","):
                        if op == 2 and v and v not in items:
                            items.append(v)
                        elif op == 3 and v in items:
                            items.remove(v)
                    current[name] = ",".join(items)
                else:
                    raise errors.InvalidRequestError(f"unknown config operation {op}")
            return current
        self._apply_configs(identity, header, body, apply)
        return None

    def _describe_cluster(self, identity, header, body):
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "endpoint_type": 1, "cluster_id": self.metadata.cluster_id,
                "controller_id": self._controller_id(identity),
                "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                             "rack": None} for b in self._brokers(identity)],
                "cluster_authorized_operations": -2147483648}

    # ---- main loop ---------------------------------------------------------------------------

    def request_stop(self, signum=None, frame=None) -> None:
        self._stop = True

    def run(self) -> int:
        poller = zmq.Poller()
        poller.register(self.router, zmq.POLLIN)
        poller.register(self.control, zmq.POLLIN)
        self.kafka.attach(poller)
        while not self._stop:
            try:
                events = dict(poller.poll(100))
            except zmq.ZMQError as exc:
                if exc.errno == zmq.EINTR:
                    continue
                raise
            if self.control in events:
                while True:
                    try:
                        identity, msg = self.control.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    try:
                        self._on_control(identity, json.loads(msg))
                    except (ValueError, KeyError, IndexError) as exc:
                        log.error("bad control message %r: %s", msg[:200], exc)
            if self.router in events:
                for _ in range(256):
                    try:
                        frames = self.router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    if len(frames) >= 2:
                        self._on_request(frames)
            self.kafka.on_events(events)
            if self.pending:
                self._expire_pending()
            self.coordinator.tick()
            self._watch_children()
        self.shutdown()
        return 0

    def shutdown(self, timeout: float = 15.0) -> None:
        for w in self.workers:
            if w.proc is not None and w.proc.poll() is None:
                try:
                    self._send_worker(w.index, {"type": "shutdown"})
                except zmq.ZMQError:
                    pass
        if self.ingest is not None and self.ingest.poll() is None:
            self.ingest.terminate()
        deadline = time.monotonic() + timeout
        procs = [w.proc for w in self.workers if w.proc is not None] + (
            [self.ingest] if self.ingest is not None else [])
        for proc in procs:
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("pid %d did not stop in time; killing it", proc.pid)
                proc.kill()
                proc.wait()
        try:
            os.unlink(os.path.join(self.config.data_dir, SERVER_FILE))
        except FileNotFoundError:
            pass
        self.coordinator.close()
        self.kafka.close()
        self.router.close()
        self.control.close()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def serve(config: ServerConfig) -> int:
    """Run a server in this process until SIGTERM/SIGINT (the CLI's `server`)."""
    logging.basicConfig(level=os.environ.get("KAFKALITE_LOG_LEVEL", "WARNING"),
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    sup = Supervisor(config)
    signal.signal(signal.SIGTERM, sup.request_stop)
    signal.signal(signal.SIGINT, sup.request_stop)
    sup.start()
    return sup.run()
