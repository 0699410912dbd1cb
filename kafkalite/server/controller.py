"""The controller: cluster metadata, broker registrations, and the admin APIs.

It holds the cluster metadata (topics, configs, partition -> broker, leader
epochs; metadata.py) and answers Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs
and DescribeCluster. It also hands out producer ids (``producer_ids``),
which the transaction coordinator gives to producers.

It decides; the brokers act. A change that opens or closes partitions is
sent to the brokers involved through the ``BrokerChannel`` the supervisor
provides (its control channel to the workers), and the request is answered
only when every broker involved has confirmed, so a client that creates a
topic can produce to it at once. The brokers confirm with a result per
partition: a topic (or new partitions) that a broker could not open (out of
file descriptors, disk) is answered with that error and undone, so that
CreateTopics and CreatePartitions never report a success that is not there.
A partition that a broker could not open when it (re)started is offline:
Metadata answers LEADER_NOT_AVAILABLE with the broker in
``offline_replicas``, as Kafka does for a replica in an offline log
directory, until a later assignment opens it.

Internal topics (metadata.INTERNAL_TOPICS) are the broker's: their
coordinators register them (``register_internal_topic``); Metadata lists
them only when asked for by name, with ``is_internal``, led by this node;
no client may create them (INVALID_REQUEST, as Kafka answers for its own
metadata topic), delete, grow or alter them (TOPIC_AUTHORIZATION_FAILED), or
produce to them (INVALID_TOPIC_EXCEPTION, as Kafka's replica manager
answers an append to an internal topic).

Brokers (the partition workers) register when their process is up
(``register_broker``: every partition the broker hosts gets a new leader
epoch, and the broker is sent its partitions) and are unfenced once they
confirm; a broker whose process died is fenced (``fence_broker``) and
leads nothing until it registers again. Metadata names only unfenced
brokers and answers LEADER_NOT_AVAILABLE for partitions of fenced ones.

Node ids: on the native protocol the brokers are 0..n-1 and this process
is node -1; on Kafka's protocol the brokers keep their ids and this
process is broker 1000 (controller and group coordinator), each with its
Kafka listener's port.

Who may call: the supervisor (supervisor.py), on its single thread.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable, Protocol

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import (AUTHORIZED_OPERATIONS_OMITTED, AlterConfigOp, ConfigResourceType,
                                      ConfigSource, ConfigType, EndpointType)
from kafkalite.server.config import ServerConfig
from kafkalite.server.metadata import (INTERNAL_TOPICS, MetadataStore, TopicMetadata,
                                       validate_topic_name)
from kafkalite.server.per_partition import each_partition
from kafkalite.server.producer_ids import ProducerIdManager
from kafkalite.server.replica_manager import PRODUCE, _produce_blank
from kafkalite.server.requests import DEFERRED, NO_RESPONSE, Listener, RequestContext
from kafkalite.storage.config import LogConfig

log = logging.getLogger("kafkalite.controller")

NATIVE_CONTROLLER_ID = -1
# The supervisor's broker id on the Kafka wire (controller, group coordinator):
# workers are brokers 0..n-1, and n never reaches 1000.
KAFKA_CONTROLLER_ID = 1000
DEFAULT_ADMIN_TIMEOUT_MS = 30_000
# Each partition is a directory and open files in one worker; a bound keeps
# one request (or a fuzzed one) from asking for millions.
MAX_PARTITIONS_PER_TOPIC = 10_000


@dataclass
class BrokerRegistration:
    broker_id: int
    port: int = 0                 # native ZeroMQ ROUTER
    kafka_port: int = 0           # Kafka TCP listener
    fenced: bool = True


class BrokerChannel(Protocol):
    """How the controller reaches its brokers (the supervisor's control channel)."""

    def send(self, by_broker: dict[int, dict], on_done: Callable[[list, bool], None],
             timeout_ms: int) -> None:
        """Send ``by_broker[i]`` to broker i; call ``on_done(results,
        timed_out)`` once all confirmed or ``timeout_ms`` passed. ``results``
        are the brokers' per-partition results of an assign: {"topic",
        "partition", "error" (a Kafka error code, 0 for none), "message"}."""


def _refuse_internal(name: str, verb: str) -> None:
    if name in INTERNAL_TOPICS:
        raise errors.TopicAuthorizationFailedError(
            f"{name} is an internal topic: only the broker may {verb} it")


def _failed(results: list) -> dict[str, list[dict]]:
    """The partitions a broker could not open, by topic."""
    out: dict[str, list[dict]] = {}
    for r in results:
        if r.get("error"):
            out.setdefault(r["topic"], []).append(r)
    return out


def _open_error(failed: list[dict], total: int) -> KafkaError:
    """The error of a topic some of whose ``total`` new partitions could not be opened."""
    first = min(failed, key=lambda r: r["partition"])
    cls = errors.error_for_code(first["error"])
    return cls(f"{len(failed)} of {total} partition(s) could not be opened, so the change was "
               f"undone; partition {first['partition']}: {first.get('message') or cls.__name__}")


class Controller:
    def __init__(self, config: ServerConfig, metadata: MetadataStore, channel: BrokerChannel,
                 broker_count: int, *, partitions_added: Callable[[str], None] = lambda topic: None):
        self.config = config
        self.metadata = metadata
        self.channel = channel
        self.brokers = [BrokerRegistration(i) for i in range(broker_count)]
        self.producer_ids = ProducerIdManager(config.data_dir)
        self.partitions_added = partitions_added
        # internal topic -> partition count, registered by its coordinator
        self.internal_topics: dict[str, int] = {}
        # (topic, partition) -> why its broker could not open it
        self.offline: dict[tuple[str, int], str] = {}
        # this process's own endpoints, set by the supervisor once bound
        self.native_port = 0
        self.kafka_port = 0

    def handlers(self) -> dict:
        return {
            ApiKey.METADATA: self._metadata,
            ApiKey.CREATE_TOPICS: self._create_topics,
            ApiKey.DELETE_TOPICS: self._delete_topics,
            ApiKey.CREATE_PARTITIONS: self._create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self._describe_configs,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._incremental_alter_configs,
            ApiKey.DESCRIBE_CLUSTER: self._describe_cluster,
            ApiKey.PRODUCE: self._produce,
        }

    def register_internal_topic(self, name: str, partitions: int) -> None:
        """A coordinator keeps internal topic ``name`` with ``partitions``
        partitions in this process: Metadata names this node its leader."""
        if name not in INTERNAL_TOPICS:
            raise ValueError(f"{name} is not one of the internal topics {sorted(INTERNAL_TOPICS)}")
        self.internal_topics[name] = partitions

    # ---- brokers -----------------------------------------------------------------------------

    def register_broker(self, broker_id: int, port: int, kafka_port: int) -> list[dict]:
        """A broker's process is up: it starts a new leadership of every
        partition it hosts. Returns the partitions to send it."""
        b = self.brokers[broker_id]
        b.port, b.kafka_port, b.fenced = port, kafka_port, True
        started = self.metadata.start_leadership(broker_id)
        log.info("broker %d registered on port %d; leading %d partitions", broker_id, port,
                 len(started))
        return [self.partition_spec(t, i) for t, i, _ in self.metadata.owned_by(broker_id)]

    def unfence_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].fenced = False

    def partitions_opened(self, results: list) -> None:
        """A broker's per-partition results of an assign: a partition it
        could not open is offline until a later assign opens it."""
        for r in results:
            key = (r["topic"], r["partition"])
            if r.get("error"):
                if key not in self.offline:
                    log.error("%s-%d is offline: its broker could not open it: %s", *key,
                              r.get("message"))
                self.offline[key] = r.get("message") or ""
            elif self.offline.pop(key, None) is not None:
                log.info("%s-%d is online again", *key)

    def fence_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].fenced = True

    def partition_spec(self, topic: TopicMetadata, index: int) -> dict:
        p = topic.partitions[index]
        return {"topic": topic.name, "partition": index, "topic_id": str(topic.topic_id),
                "leader_epoch": p.leader_epoch, "replicas": p.replicas, "isr": p.isr,
                "configs": topic.configs}

    def partition_count(self, topic: str) -> int | None:
        t = self.metadata.topics.get(topic)
        return None if t is None else len(t.partitions)

    def leader_of(self, tp: tuple[str, int]) -> int | None:
        """The broker leading a partition now, None when it has no live leader."""
        t = self.metadata.topics.get(tp[0])
        if t is None or not 0 <= tp[1] < len(t.partitions):
            return None
        leader = t.partitions[tp[1]].leader
        return None if self.brokers[leader].fenced else leader

    def native_endpoint(self, broker_id: int) -> str | None:
        b = self.brokers[broker_id] if 0 <= broker_id < len(self.brokers) else None
        if b is None or b.fenced or not b.port:
            return None
        return f"tcp://{self.config.public_host}:{b.port}"

    def controller_id(self, listener: Listener) -> int:
        return KAFKA_CONTROLLER_ID if listener is Listener.KAFKA else NATIVE_CONTROLLER_ID

    def controller_node(self, listener: Listener) -> dict:
        """This process as a node of ``listener``'s protocol (it is the group
        coordinator too)."""
        port = self.kafka_port if listener is Listener.KAFKA else self.native_port
        return {"node_id": self.controller_id(listener), "host": self.config.public_host,
                "port": port}

    def live_brokers(self, listener: Listener) -> list[dict]:
        """The nodes a client of ``listener`` may talk to: every unfenced
        broker, and on Kafka's protocol this process as broker 1000."""
        host = self.config.public_host
        kafka = listener is Listener.KAFKA
        nodes = [{"node_id": b.broker_id, "host": host, "port": b.kafka_port if kafka else b.port,
                  "rack": None} for b in self.brokers if not b.fenced]
        if kafka:
            nodes.append({**self.controller_node(listener), "rack": None})
        return nodes

    def _send(self, ctx: RequestContext, by_broker: dict[int, dict], respond,
              timeout_ms: int = DEFAULT_ADMIN_TIMEOUT_MS):
        """Send changes to brokers and answer ``ctx`` with ``respond(results,
        timed_out)`` once they confirm (``results``: the per-partition
        results of assigns, already applied to ``offline``)."""
        if not by_broker:
            return respond([], False)

        def done(results: list, timed_out: bool) -> None:
            self.partitions_opened(results)
            ctx.respond(respond(results, timed_out))
        self.channel.send(by_broker, done, timeout_ms)
        return DEFERRED

    def _unassign(self, partitions: list[tuple[TopicMetadata, int]]) -> None:
        """Tell the leaders to close and delete ``partitions`` (no one waits)."""
        by_broker: dict = {}
        for topic, i in partitions:
            msg = by_broker.setdefault(topic.partitions[i].leader,
                                       {"type": "unassign", "delete": True, "partitions": []})
            msg["partitions"].append({"topic": topic.name, "partition": i})
            self.offline.pop((topic.name, i), None)
        if by_broker:
            self.channel.send(by_broker, lambda results, timed_out: None,
                              DEFAULT_ADMIN_TIMEOUT_MS)

    def _undo_create(self, name: str) -> None:
        """Delete a topic whose partitions could not all be opened."""
        topic = self.metadata.delete_topic(name)
        self._unassign([(topic, i) for i in range(len(topic.partitions))])

    def _assign(self, by_broker: dict, topic: TopicMetadata, indexes) -> None:
        for i in indexes:
            msg = by_broker.setdefault(topic.partitions[i].leader,
                                       {"type": "assign", "partitions": []})
            msg["partitions"].append(self.partition_spec(topic, i))

    # ---- Metadata ----------------------------------------------------------------------------

    def _topic_entry(self, topic: TopicMetadata) -> dict:
        parts = []
        for i, p in enumerate(topic.partitions):
            opened = (topic.name, i) not in self.offline
            live = opened and not self.brokers[p.leader].fenced
            offline = [b for b in p.replicas if self.brokers[b].fenced
                       or (not opened and b == p.leader)]
            parts.append({"error_code": 0 if live else errors.LeaderNotAvailableError.code,
                          "partition_index": i, "leader_id": p.leader if live else -1,
                          "leader_epoch": p.leader_epoch, "replica_nodes": p.replicas,
                          "isr_nodes": [b for b in p.isr if b not in offline],
                          "offline_replicas": offline})
        return {"error_code": 0, "name": topic.name, "topic_id": topic.topic_id,
                "is_internal": topic.is_internal, "partitions": parts,
                "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    def _internal_entry(self, name: str, listener: Listener) -> dict:
        """An internal topic, led by this node (its coordinator)."""
        node = self.controller_id(listener)
        return {"error_code": 0, "name": name, "is_internal": True,
                "partitions": [{"error_code": 0, "partition_index": i, "leader_id": node,
                                "leader_epoch": 0, "replica_nodes": [node], "isr_nodes": [node],
                                "offline_replicas": []}
                               for i in range(self.internal_topics[name])],
                "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    def _metadata_body(self, names, listener: Listener, failed: dict | None = None) -> dict:
        """``failed``: {topic: KafkaError} of topics auto-created and undone."""
        topics = []
        for name in names:
            topic = self.metadata.topics.get(name)
            if name in self.internal_topics:
                topics.append(self._internal_entry(name, listener))
            elif topic is None:
                try:
                    validate_topic_name(name)
                    code = errors.UnknownTopicOrPartitionError.code
                    if failed and name in failed:
                        code = failed[name].code
                except KafkaError as exc:
                    code = exc.code
                topics.append({"error_code": code, "name": name, "is_internal": False,
                               "partitions": []})
            else:
                topics.append(self._topic_entry(topic))
        return {"throttle_time_ms": 0, "brokers": self.live_brokers(listener),
                "cluster_id": self.metadata.cluster_id,
                "controller_id": self.controller_id(listener),
                "topics": topics, "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    def _metadata(self, ctx: RequestContext, body: dict):
        requested = body.get("topics")
        if requested is None or (ctx.api_version == 0 and not requested):
            return self._metadata_body(sorted(self.metadata.topics), ctx.listener)
        names = [t["name"] for t in requested if t.get("name") is not None]
        missing = [n for n in names if n not in self.metadata.topics and n not in INTERNAL_TOPICS]
        creatable = []
        if missing and body.get("allow_auto_topic_creation") and self.config.auto_create_topics:
            for name in dict.fromkeys(missing):
                try:
                    validate_topic_name(name)
                    creatable.append(name)
                except KafkaError:
                    pass
        if not creatable:
            return self._metadata_body(names, ctx.listener)
        by_broker: dict = {}
        for name in creatable:
            self._create(by_broker, name, self.config.default_partitions, {})

        def respond(results: list, timed_out: bool) -> dict:
            failed = {}
            for name, parts in _failed(results).items():
                if name in creatable and name in self.metadata.topics:
                    failed[name] = _open_error(parts, self.config.default_partitions)
                    log.error("auto-creating %s failed: %s", name, failed[name].message)
                    self._undo_create(name)
            return self._metadata_body(names, ctx.listener, failed)
        return self._send(ctx, by_broker, respond)

    # ---- topics ------------------------------------------------------------------------------

    def _create(self, by_broker: dict, name: str, partitions: int, configs: dict) -> TopicMetadata:
        topic = self.metadata.create_topic(name, partitions, configs, len(self.brokers))
        self._assign(by_broker, topic, range(partitions))
        return topic

    def _validated_configs(self, configs: dict[str, str]) -> dict[str, str]:
        try:
            self.config.log_config(configs)
        except KafkaError as exc:
            raise errors.InvalidConfigurationError(exc.message) from None
        return configs

    def _create_topics(self, ctx: RequestContext, body: dict):
        results, to_create = [], []
        for t in body["topics"]:
            name = t["name"]
            out = {"name": name, "error_code": 0, "error_message": None,
                   "num_partitions": -1, "replication_factor": -1, "configs": []}
            results.append(out)
            try:
                validate_topic_name(name)
                if name in INTERNAL_TOPICS:
                    # Kafka's answer for its own internal metadata topic
                    raise errors.InvalidRequestError(
                        f"creation of internal topic {name} is prohibited")
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
                to_create.append((name, n, configs, out))
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        by_broker: dict = {}
        if not body.get("validate_only"):
            for name, n, configs, out in to_create:
                out["topic_id"] = self._create(by_broker, name, n, configs).topic_id

        def respond(results_of_brokers: list, timed_out: bool) -> dict:
            failed = _failed(results_of_brokers)
            for name, n, configs, out in to_create:
                if name in failed and out["error_code"] == 0 and name in self.metadata.topics:
                    exc = _open_error(failed[name], n)
                    log.error("creating topic %s failed: %s", name, exc.message)
                    self._undo_create(name)
                    out["error_code"], out["error_message"] = exc.code, exc.message
                    out["num_partitions"] = out["replication_factor"] = -1
            if timed_out:
                for out in results:
                    if out["error_code"] == 0:
                        out["error_code"] = errors.RequestTimedOutError.code
                        out["error_message"] = "the workers did not confirm in time"
            return {"throttle_time_ms": 0, "topics": results}

        return self._send(ctx, by_broker, respond, body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))

    def _delete_topics(self, ctx: RequestContext, body: dict):
        names = list(body.get("topic_names") or []) + [
            t["name"] for t in body.get("topics") or [] if t.get("name")]
        results, by_broker = [], {}
        for name in names:
            out = {"name": name, "error_code": 0, "error_message": None}
            results.append(out)
            try:
                _refuse_internal(name, "delete")
                topic = self.metadata.delete_topic(name)
                out["topic_id"] = topic.topic_id
                for i in range(len(topic.partitions)):
                    self.offline.pop((name, i), None)
                for i, p in enumerate(topic.partitions):
                    msg = by_broker.setdefault(p.leader, {"type": "unassign", "delete": True,
                                                          "partitions": []})
                    msg["partitions"].append({"topic": name, "partition": i})
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        return self._send(ctx, by_broker,
                          lambda _, timed_out: {"throttle_time_ms": 0, "responses": results},
                          body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))

    def _create_partitions(self, ctx: RequestContext, body: dict):
        results, by_broker, grown = [], {}, {}
        for t in body["topics"]:
            out = {"name": t["name"], "error_code": 0, "error_message": None}
            results.append(out)
            try:
                _refuse_internal(t["name"], "add partitions to")
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
                before = len(topic.partitions)
                self._assign(by_broker, topic,
                             self.metadata.add_partitions(t["name"], t["count"], len(self.brokers)))
                grown[t["name"]] = (before, out)
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message

        def respond(results_of_brokers: list, timed_out: bool) -> dict:
            failed = _failed(results_of_brokers)
            for name, (before, out) in grown.items():
                topic = self.metadata.topics.get(name)
                new = [r for r in failed.get(name, ()) if r["partition"] >= before]
                if new and topic is not None:
                    exc = _open_error(new, len(topic.partitions) - before)
                    log.error("adding partitions to %s failed: %s", name, exc.message)
                    self._unassign([(topic, i) for i in range(before, len(topic.partitions))])
                    self.metadata.remove_partitions(name, before)
                    out["error_code"], out["error_message"] = exc.code, exc.message
                else:
                    # once the brokers serve the new partitions, groups consuming them rebalance
                    self.partitions_added(name)
            return {"throttle_time_ms": 0, "results": results}

        return self._send(ctx, by_broker, respond, body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))

    # ---- configs -----------------------------------------------------------------------------

    def _config_entries(self, topic: TopicMetadata, keys) -> list[dict]:
        effective = self.config.log_config(topic.configs).to_properties()
        static = LogConfig.from_properties(self.config.topic_defaults).to_properties()
        defaults = LogConfig().to_properties()
        out = []
        for name, value in effective.items():
            if keys and name not in keys:
                continue
            if name in topic.configs:
                source = ConfigSource.DYNAMIC_TOPIC_CONFIG
            elif static[name] != defaults[name]:
                source = ConfigSource.STATIC_BROKER_CONFIG
            else:
                source = ConfigSource.DEFAULT_CONFIG
            out.append({"name": name, "value": value, "read_only": False,
                        "is_default": source == ConfigSource.DEFAULT_CONFIG,
                        "config_source": source, "is_sensitive": False, "synonyms": [],
                        "config_type": ConfigType.UNKNOWN, "documentation": None})
        return out

    @staticmethod
    def _topic_resource(r: dict, verb: str) -> str:
        if r["resource_type"] != ConfigResourceType.TOPIC:
            raise errors.InvalidRequestError(
                f"only topic configs (resource type {int(ConfigResourceType.TOPIC)}) can be {verb}")
        return r["resource_name"]

    def _describe_configs(self, ctx: RequestContext, body: dict):
        results = []
        for r in body["resources"]:
            out = {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                   "resource_name": r["resource_name"], "configs": []}
            try:
                topic = self.metadata.get(self._topic_resource(r, "described"))
                out["configs"] = self._config_entries(topic, r.get("configuration_keys"))
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
            results.append(out)
        return {"throttle_time_ms": 0, "results": results}

    def _apply_configs(self, ctx: RequestContext, body: dict, new_configs):
        """``new_configs(resource, current) -> dict``; shared by both Alter APIs."""
        responses, by_broker, changed = [], {}, []
        for r in body["resources"]:
            out = {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                   "resource_name": r["resource_name"]}
            responses.append(out)
            try:
                name = self._topic_resource(r, "altered")
                _refuse_internal(name, "alter")
                topic = self.metadata.get(name)
                configs = self._validated_configs(new_configs(r, dict(topic.configs)))
                if not body.get("validate_only"):
                    changed.append((topic, configs))
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        for topic, configs in changed:
            self.metadata.set_configs(topic.name, configs)
            self._assign(by_broker, topic, range(len(topic.partitions)))
        return self._send(ctx, by_broker,
                          lambda _, timed_out: {"throttle_time_ms": 0, "responses": responses})

    def _alter_configs(self, ctx: RequestContext, body: dict):
        # Legacy AlterConfigs replaces the whole set of topic overrides.
        return self._apply_configs(ctx, body, lambda r, current: {
            c["name"]: c["value"] for c in r["configs"] if c["value"] is not None})

    def _incremental_alter_configs(self, ctx: RequestContext, body: dict):
        def apply(r, current):
            for c in r["configs"]:
                op, name, value = c["config_operation"], c["name"], c["value"]
                if op == AlterConfigOp.SET:
                    current[name] = value
                elif op == AlterConfigOp.DELETE:
                    current.pop(name, None)
                elif op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):   # list configs
                    items = [v for v in current.get(name, "").split(",") if v]
                    for v in (value or "").split(","):
                        if op == AlterConfigOp.APPEND and v and v not in items:
                            items.append(v)
                        elif op == AlterConfigOp.SUBTRACT and v in items:
                            items.remove(v)
                    current[name] = ",".join(items)
                else:
                    raise errors.InvalidRequestError(f"unknown config operation {op}")
            return current
        return self._apply_configs(ctx, body, apply)

    # ---- cluster -----------------------------------------------------------------------------

    def _describe_cluster(self, ctx: RequestContext, body: dict):
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "endpoint_type": EndpointType.BROKER, "cluster_id": self.metadata.cluster_id,
                "controller_id": self.controller_id(ctx.listener),
                "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                             "rack": None} for b in self.live_brokers(ctx.listener)],
                "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    # ---- Produce -----------------------------------------------------------------------------

    def _produce(self, ctx: RequestContext, body: dict):
        """Produce sent to this node: Metadata names it the leader of the
        internal topics only, and no client may append to those (Kafka's
        replica manager answers INVALID_TOPIC_EXCEPTION); it leads nothing
        else (NOT_LEADER_OR_FOLLOWER sends a client back to Metadata)."""
        node = self.controller_id(ctx.listener)

        def serve(name, topic, pd, out):
            if name in INTERNAL_TOPICS:
                raise errors.InvalidTopicError(f"cannot append to internal topic {name}")
            raise errors.NotLeaderOrFollowerError(
                f"node {node} leads no partition of {name}; ask Metadata for the leader")

        topics = each_partition(PRODUCE, body["topic_data"], serve, _produce_blank)
        if body.get("acks", 1) == 0:
            return NO_RESPONSE
        return {"responses": topics, "throttle_time_ms": 0}
