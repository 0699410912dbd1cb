"""The controller: the admin APIs' handler table, the Metadata answer, and
the managers that hold the cluster metadata (Kafka's QuorumController and
its *ControlManager classes).

It holds the cluster metadata (topics, configs, partition -> broker, leader
epochs; metadata.py) and answers Metadata, DescribeTopicPartitions,
DescribeCluster and DescribeQuorum (its lease as a one-voter quorum) here;
each other API is a manager's, and ``handlers`` is the one table of them:

- cluster_control.py ``ClusterControl``: broker registrations, fencing,
  the brokers' endpoints and which are live;
- replication_control.py ``ReplicationControl``: leaders, ISRs,
  elections, reassignment, and the assigns that tell the brokers;
- placement.py ``ReplicaPlacer``: where new replicas go;
- topic_control.py ``TopicControl``: CreateTopics, DeleteTopics,
  CreatePartitions;
- cluster_admin.py ``ClusterAdmin``: delegation tokens, UpdateFeatures,
  UnregisterBroker, the quorum's voters and ListConfigResources, answered
  from what kafkalite is;
- config_control.py ``ConfigurationControl``: the config APIs (their
  changes are sent to the brokers here, as Kafka's controller publishes
  the records its manager returns).

The managers share state through the objects this class passes them (the
metadata store, the ClusterControl, the BrokerChannel), never through each
other's private names. It also hands out producer ids (``producer_ids``),
which the transaction coordinator gives to producers.

It decides; the brokers act. A change that opens or closes partitions is
sent to the brokers involved through the ``BrokerChannel`` the supervisor
provides (its control channel to the workers), and the request is answered
only when every broker involved has confirmed. A partition that a broker
could not open when it (re)started is offline: Metadata answers
LEADER_NOT_AVAILABLE with the broker in ``offline_replicas``, as Kafka does
for a replica in an offline log directory, until a later assignment opens it.

Internal topics (metadata.INTERNAL_TOPICS) are the broker's: their
coordinators register them (``register_internal_topic``); Metadata lists
them only when asked for by name, with ``is_internal``, led by this node;
no client may produce to them (INVALID_TOPIC_EXCEPTION, as Kafka's replica
manager answers an append to an internal topic). Metadata names only
unfenced brokers and answers LEADER_NOT_AVAILABLE for partitions of fenced
ones, and for those whose newly elected leader has not yet confirmed it
leads (replication_control.py ``leaderships_applied``).

Who may call: the supervisor (supervisor.py), on its single thread. Its
public API (``register_broker``, ``fence_broker``, ``brokers``, ...) is what
the supervisor, the coordinators and metrics.py use; the managers stay
behind it.
"""
from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Callable

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import AUTHORIZED_OPERATIONS_OMITTED, EndpointType
from kafkalite.server.config import ServerConfig
from kafkalite.server.controller.cluster_control import (KAFKA_CONTROLLER_ID, NATIVE_CONTROLLER_ID,
                                                         BrokerRegistration, ClusterControl)
from kafkalite.server.controller.cluster_admin import ClusterAdmin
from kafkalite.server.controller.config_control import ConfigurationControl
from kafkalite.server.controller.metadata import MetadataStore, TopicMetadata
from kafkalite.server.topic import INTERNAL_TOPICS, OFFSETS_TOPIC, validate_topic_name
from kafkalite.server.controller.placement import ReplicaPlacer
from kafkalite.server.controller.replication_control import BrokerChannel, ReplicationControl
from kafkalite.server.controller.topic_control import (TopicControl, failed_partitions,
                                                       open_error)
from kafkalite.server.internal_topic import partition_for
from kafkalite.server.listeners import kafka_listeners
from kafkalite.server.network.per_partition import (each_partition, name_produce_topics,
                                                    produce_topic_id, produce_topic_name)
from kafkalite.server.network.requests import NO_RESPONSE, Listener, RequestContext
from kafkalite.server.replica.replica_apis import (DELETE_RECORDS, PRODUCE, produce_blank,
                                                   alter_replica_log_dirs_response,
                                                   delete_records_blank)
from kafkalite.server.controller.producer_ids import ProducerIdManager

log = logging.getLogger("kafkalite.controller")

# DescribeTopicPartitions' page size cap (Kafka's max.request.partition.size.limit)
MAX_DESCRIBED_PARTITIONS = 2000
# DescribeQuorum describes KRaft's metadata log, this one partition (KIP-595).
METADATA_LOG = ("__cluster_metadata", 0)
# The controller's epoch on one host, where no lease is ever handed over
# (with --cluster it is the lease's epoch, which every takeover bumps).
SINGLE_HOST_CONTROLLER_EPOCH = 1
_NO_ID = uuid.UUID(int=0)         # a Metadata topic named by its name alone


def _managed(manager: str, name: str, doc: str) -> property:
    """Controller attribute ``name`` as it is ``manager``'s: the supervisor
    reads and sets these on the controller, the managers own them."""
    return property(lambda self: getattr(getattr(self, manager), name),
                    lambda self, value: setattr(getattr(self, manager), name, value), doc=doc)


class Controller:
    def __init__(self, config: ServerConfig, metadata: MetadataStore, channel: BrokerChannel,
                 broker_count: int, *, partitions_added: Callable[[str], None] = lambda topic: None):
        self.config = config
        self.metadata = metadata
        self.channel = channel
        self.cluster_control = ClusterControl(config, broker_count)
        self.placer = ReplicaPlacer(config, self.cluster_control)
        self.replication_control = ReplicationControl(config, metadata, self.cluster_control,
                                                      self.placer, channel)
        self.config_control = ConfigurationControl(config, metadata, self.cluster_control)
        self.topic_control = TopicControl(config, metadata, self.cluster_control, self.placer,
                                          self.replication_control, self.config_control,
                                          partitions_added=partitions_added)
        # in a cluster the blocks of ids come from PostgreSQL (producer_ids.py)
        self.producer_ids = ProducerIdManager(
            config.data_dir, getattr(metadata, "reserve_producer_ids", None))
        # internal topic -> partition count, registered by its coordinator
        self.internal_topics: dict[str, int] = {}
        self.cluster_admin = ClusterAdmin(
            lambda: metadata.cluster_id, lambda: list(metadata.topics),
            lambda: [b.broker_id for b in self.cluster_control.brokers],
            lambda: list(self.metadata.group_configs),
            {spec.name: spec.protocol for spec in kafka_listeners(config)})

    brokers = _managed("cluster_control", "brokers", "the BrokerRegistrations, by id")
    racks = _managed("cluster_control", "racks", "broker id -> rack (its node, in a cluster)")
    gone = _managed("cluster_control", "gone", "the brokers fenced as gone")
    native_port = _managed("cluster_control", "native_port", "this process's native port")
    kafka_port = _managed("cluster_control", "kafka_port", "this process's Kafka port")
    kafka_listeners = _managed("cluster_control", "kafka_listeners",
                               "this process's Kafka listeners: {name: (host or None, port)}")
    partitions_added = _managed("topic_control", "partitions_added",
                                "called with a topic once the brokers serve its new partitions")
    topic_deleted = _managed("topic_control", "topic_deleted",
                             "called with a deleted topic's id")

    def handlers(self) -> dict:
        replication, topics = self.replication_control, self.topic_control
        return {
            ApiKey.METADATA: self._metadata,
            ApiKey.CREATE_TOPICS: topics.create_topics,
            ApiKey.DELETE_TOPICS: topics.delete_topics,
            ApiKey.CREATE_PARTITIONS: topics.create_partitions,
            ApiKey.DESCRIBE_CONFIGS: self.config_control.describe_configs,
            ApiKey.ALTER_CONFIGS: self._alter_configs,
            ApiKey.INCREMENTAL_ALTER_CONFIGS: self._incremental_alter_configs,
            ApiKey.DESCRIBE_CLUSTER: self._describe_cluster,
            ApiKey.DESCRIBE_QUORUM: self._describe_quorum,
            ApiKey.ALTER_REPLICA_LOG_DIRS: self._alter_replica_log_dirs,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: self._describe_topic_partitions,
            ApiKey.ELECT_LEADERS: replication.elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: replication.alter_partition_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: replication.list_partition_reassignments,
            ApiKey.PRODUCE: self._produce,
            ApiKey.DELETE_RECORDS: self._delete_records,
            **self.cluster_admin.handlers(),
        }

    def register_internal_topic(self, name: str, partitions: int) -> None:
        """A coordinator keeps internal topic ``name`` with ``partitions``
        partitions in this process: Metadata names this node its leader."""
        if name not in INTERNAL_TOPICS:
            raise ValueError(f"{name} is not one of the internal topics {sorted(INTERNAL_TOPICS)}")
        self.internal_topics[name] = partitions

    # ---- brokers: the supervisor's calls, each one manager's or two -------------------------

    def add_broker(self, broker_id: int) -> BrokerRegistration:
        return self.cluster_control.add_broker(broker_id)

    def register_broker(self, broker_id: int, port: int, kafka_port: int,
                        host: str | None = None, rack: str | None = None,
                        kafka_listeners: dict | None = None, adopted: bool = False) -> list[dict]:
        """A broker's process is up: it starts a new leadership of every
        partition it hosts. Returns the partitions to send it.

        ``adopted``: the process is not new but a running one that a
        restarted supervisor adopted (processes.take_workers). It holds
        its partitions as the metadata says (or learns the newer epochs
        from this answer), its followers follow it: its leaderships go on
        at their epochs, as a Kafka broker's survive a controller
        failover. A new epoch would make every follower truncate and
        fetch again and every client refresh its metadata, for nothing."""
        self.cluster_control.register_broker(broker_id, port, kafka_port, host, rack,
                                             kafka_listeners)
        return self.replication_control.broker_registered(broker_id, adopted)

    def unfence_broker(self, broker_id: int) -> None:
        self.cluster_control.unfence_broker(broker_id)

    def fence_broker(self, broker_id: int, elect: bool = True, restarting: bool = False) -> None:
        """``broker_id``'s process is gone: elect new leaders for what it
        led and take it out of the ISRs it was in (unless ``elect`` is
        False: the whole node is stopping). ``restarting``: it died and its
        supervisor is starting it again (live_brokers says why that
        matters)."""
        self.cluster_control.fence_broker(broker_id, gone=elect, restarting=restarting)
        if elect:
            self.replication_control.broker_fenced(broker_id)

    def elect_offline(self, broker_id: int) -> None:
        self.replication_control.elect_offline(broker_id)

    def partitions_opened(self, results: list) -> None:
        self.replication_control.partitions_opened(results)

    def leaderships_applied(self, broker_id: int, results: list) -> None:
        self.replication_control.leaderships_applied(broker_id, results)

    def alter_partition(self, broker_id: int, items: list[dict]) -> None:
        self.replication_control.alter_partition(broker_id, items)

    def resend(self, broker_id: int, items: list[dict]) -> None:
        self.replication_control.resend(broker_id, items)

    def rebalance_leaders(self) -> int:
        return self.replication_control.rebalance_leaders()

    def broker_endpoints(self) -> dict:
        return self.cluster_control.broker_endpoints()

    def native_endpoint(self, broker_id: int) -> str | None:
        return self.cluster_control.native_endpoint(broker_id)

    def controller_node(self, listener: Listener, listener_name: str | None = None) -> dict:
        return self.cluster_control.controller_node(listener, listener_name)

    def live_brokers(self, listener: Listener, listener_name: str | None = None,
                     restarting: bool = False) -> list[dict]:
        return self.cluster_control.live_brokers(listener, listener_name, restarting)

    def partition_counts(self) -> dict[str, int]:
        return self.replication_control.partition_counts()

    def topic_name_of(self, topic_id) -> str | None:
        """The name of the topic with id ``topic_id``; None: no such topic."""
        return next((t.name for t in self.metadata.topics.values() if t.topic_id == topic_id),
                    None)

    def partition_count(self, topic: str) -> int | None:
        return self.replication_control.partition_count(topic)

    def leader_of(self, tp: tuple[str, int]) -> int | None:
        return self.replication_control.leader_of(tp)

    # ---- configs: the Alter APIs' changes reach the brokers ---------------------------------

    def _alter_configs(self, ctx: RequestContext, body: dict):
        return self._publish_configs(ctx, *self.config_control.alter_configs(body))

    def _incremental_alter_configs(self, ctx: RequestContext, body: dict):
        return self._publish_configs(ctx, *self.config_control.incremental_alter_configs(body))

    def _publish_configs(self, ctx: RequestContext, responses: list, resend: list):
        """Send each ``(topic, broker)`` of ``resend`` (broker None: every
        replica) with its new configs, and answer once the brokers confirm."""
        by_broker: dict = {}
        for topic, only in resend:
            self.replication_control.assign(by_broker, topic, range(len(topic.partitions)),
                                            only=only)
        return self.replication_control.send(
            ctx, by_broker, lambda _, timed_out: {"throttle_time_ms": 0, "responses": responses})

    def coordinator_node(self, listener: Listener, listener_name: str | None = None,
                         key: str = "") -> dict | None:
        """The node FindCoordinator names for ``key`` (a group or
        transactional id). On the native protocol this process; on Kafka's,
        the live broker that Metadata names the leader of the key's
        ``__consumer_offsets`` partition (Kafka's choice of coordinator),
        which relays the coordinator's requests here. None while no broker
        is up (COORDINATOR_NOT_AVAILABLE)."""
        if listener is not Listener.KAFKA:
            return self.controller_node(listener, listener_name)
        live = self.live_brokers(listener, listener_name)
        if not live:
            return None
        partitions = self.internal_topics.get(OFFSETS_TOPIC) or 1
        node = live[partition_for(key, partitions) % len(live)]
        return {"node_id": node["node_id"], "host": node["host"], "port": node["port"]}

    # ---- Metadata ----------------------------------------------------------------------------

    def _topic_entry(self, topic: TopicMetadata) -> dict:
        parts = []
        for i, p in enumerate(topic.partitions):
            opened = (topic.name, i) not in self.replication_control.offline
            # a leader elected but not yet leading (its process has not
            # applied the assign) is not named: ReplicationControl
            # .leaderships_applied says why
            live = (opened and not self.brokers[p.leader].fenced
                    and (topic.name, i) not in self.replication_control.unconfirmed)
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

    def _internal_entry(self, name: str, listener: Listener,
                        listener_name: str | None = None) -> dict:
        """An internal topic. This process keeps its partitions (its
        coordinators' logs); on the native protocol it is named their
        leader, on Kafka's, whose clients are told of brokers only, the
        live brokers are, in turn (partition i: the i-th modulo their
        count), as FindCoordinator names them for the keys of each: no
        client may write or read these partitions (INVALID_TOPIC_EXCEPTION,
        from any broker), as before."""
        if listener is Listener.KAFKA:
            live = [b["node_id"] for b in self.live_brokers(listener, listener_name)]
        else:
            live = [NATIVE_CONTROLLER_ID]
        parts = []
        for i in range(self.internal_topics[name]):
            node = live[i % len(live)] if live else -1
            parts.append({"error_code": 0 if live else errors.LeaderNotAvailableError.code,
                          "partition_index": i, "leader_id": node, "leader_epoch": 0,
                          "replica_nodes": [node] if live else [],
                          "isr_nodes": [node] if live else [], "offline_replicas": []})
        return {"error_code": 0, "name": name, "is_internal": True, "partitions": parts,
                "topic_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    def _metadata_body(self, names, listener: Listener, failed: dict | None = None,
                       listener_name: str | None = None) -> dict:
        """``failed``: {topic: KafkaError} of topics auto-created and undone."""
        topics = []
        for name in names:
            topic = self.metadata.topics.get(name)
            if name in self.internal_topics:
                topics.append(self._internal_entry(name, listener, listener_name))
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
        return {"throttle_time_ms": 0,
                "brokers": self.live_brokers(listener, listener_name, restarting=True),
                "cluster_id": self.metadata.cluster_id,
                "controller_id": self.cluster_control.controller_id(listener, listener_name),
                "topics": topics, "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    def _metadata(self, ctx: RequestContext, body: dict):
        requested = body.get("topics")
        if requested is None or (ctx.api_version == 0 and not requested):
            return self._metadata_body(sorted(self.metadata.topics), ctx.listener,
                                       listener_name=ctx.listener_name)
        if ctx.api_version < 12 and any(t.get("name") is None
                                        or t.get("topic_id", _NO_ID) != _NO_ID for t in requested):
            # Kafka's handleTopicMetadataRequest: "Topic IDs are not supported in
            # requests for version" 10 and 11, every topic answered INVALID_REQUEST
            return {**self._metadata_body([], ctx.listener, listener_name=ctx.listener_name),
                    "topics": [{"error_code": errors.InvalidRequestError.code,
                                "name": t.get("name") or "", "topic_id": t.get("topic_id", _NO_ID),
                                "is_internal": False, "partitions": []} for t in requested]}
        names = [t["name"] for t in requested if t.get("name") is not None]
        unknown_ids = []
        if any(t.get("name") is None for t in requested):
            # v10+: topics asked for by id (KIP-516), as KIP-848 consumers do
            # for the topics of their assignment
            by_id = {t.topic_id: name for name, t in self.metadata.topics.items()}
            for t in requested:
                if t.get("name") is None:
                    if t["topic_id"] in by_id:
                        names.append(by_id[t["topic_id"]])
                    else:
                        unknown_ids.append(t["topic_id"])
        if unknown_ids:
            body = self._metadata_body(names, ctx.listener, listener_name=ctx.listener_name)
            body["topics"] += [{"error_code": errors.UnknownTopicIdError.code, "name": None,
                                "topic_id": tid, "is_internal": False, "partitions": []}
                               for tid in unknown_ids]
            return body
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
            return self._metadata_body(names, ctx.listener, listener_name=ctx.listener_name)
        by_broker: dict = {}
        self.replication_control.tell_partition_counts(by_broker, {
            name: len(self.topic_control.create(by_broker, name, self.config.default_partitions,
                                                {}).partitions)
            for name in creatable})

        def respond(results: list, timed_out: bool) -> dict:
            failed = {}
            for name, parts in failed_partitions(results).items():
                if name in creatable and name in self.metadata.topics:
                    failed[name] = open_error(parts, self.config.default_partitions)
                    log.error("auto-creating %s failed: %s", name, failed[name].message)
                    self.topic_control.undo_create(name)
            return self._metadata_body(names, ctx.listener, failed, ctx.listener_name)
        return self.replication_control.send(ctx, by_broker, respond)

    def _describe_topic_partitions(self, ctx: RequestContext, body: dict):
        """DescribeTopicPartitions (KIP-966): Metadata's description of the
        topics named (every topic, internal ones too, when none is), in
        name order, at most ``response_partition_limit`` partitions (Kafka's
        broker caps it at 2000), resumed at ``cursor``; ``next_cursor``
        names where the next page starts. Never creates topics."""
        limit = body["response_partition_limit"]
        limit = MAX_DESCRIBED_PARTITIONS if limit <= 0 else min(limit, MAX_DESCRIBED_PARTITIONS)
        requested = [t["name"] for t in body["topics"]]
        names = sorted(set(requested)) if requested else \
            sorted(set(self.metadata.topics) | set(self.internal_topics))
        cursor = body.get("cursor")
        start = 0
        if cursor is not None:
            if cursor["partition_index"] < 0 or (requested and cursor["topic_name"] not in names):
                # the response has no top-level error: as Kafka's error
                # response, every topic asked for carries it
                return {"throttle_time_ms": 0, "next_cursor": None, "topics": [
                    {"error_code": errors.InvalidRequestError.code, "name": n,
                     "partitions": []} for n in names]}
            names = [n for n in names if n >= cursor["topic_name"]]
            if names and names[0] == cursor["topic_name"]:
                start = cursor["partition_index"]
        topics, next_cursor = [], None
        for k, name in enumerate(names):
            entry = self._metadata_body([name], ctx.listener, listener_name=ctx.listener_name)["topics"][0]
            parts = entry["partitions"][start if k == 0 else 0:]
            if len(parts) > limit:
                first = parts[0]["partition_index"]
                entry["partitions"] = parts[:limit]
                topics.append(entry)
                next_cursor = {"topic_name": name, "partition_index": first + limit}
                break
            entry["partitions"] = parts
            topics.append(entry)
            limit -= len(parts)
            if limit == 0 and k + 1 < len(names):
                next_cursor = {"topic_name": names[k + 1], "partition_index": 0}
                break
        return {"throttle_time_ms": 0, "topics": topics, "next_cursor": next_cursor}

    # ---- cluster -----------------------------------------------------------------------------

    def _describe_cluster(self, ctx: RequestContext, body: dict):
        # every Kafka listener of the node is a broker endpoint (KIP-919):
        # a client asking it for the controllers' is told so, as Kafka's
        # AuthHelper.computeDescribeClusterResponse tells it
        wanted = body.get("endpoint_type", EndpointType.BROKER)
        if wanted != EndpointType.BROKER:
            known = wanted in tuple(EndpointType)
            code = (errors.InvalidRequestError if ctx.api_version == 0 else
                    errors.MismatchedEndpointTypeError if known else
                    errors.UnsupportedEndpointTypeError).code
            return {"throttle_time_ms": 0, "error_code": code,
                    "error_message": f"this is a broker endpoint; endpoint type {wanted} was "
                                     f"asked for", "endpoint_type": EndpointType.BROKER,
                    "cluster_id": self.metadata.cluster_id, "controller_id": -1, "brokers": [],
                    "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}
        brokers = [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                    "rack": None, "is_fenced": False}
                   for b in self.live_brokers(ctx.listener, ctx.listener_name)]
        if body.get("include_fenced_brokers"):
            # v2 (KIP-1073): the fenced brokers too, at their endpoints, marked
            listed = {b["broker_id"] for b in brokers}
            for b in self.cluster_control.brokers:
                endpoint = self.cluster_control.kafka_endpoint(b, ctx.listener_name)
                if b.fenced and b.broker_id not in listed and endpoint is not None:
                    brokers.append({"broker_id": b.broker_id, "host": endpoint[0],
                                    "port": endpoint[1], "rack": None, "is_fenced": True})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "endpoint_type": EndpointType.BROKER, "cluster_id": self.metadata.cluster_id,
                "controller_id": self.cluster_control.controller_id(ctx.listener, ctx.listener_name),
                "brokers": brokers,
                "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    def _describe_quorum(self, ctx: RequestContext, body: dict):
        """DescribeQuorum of the metadata log (KIP-595, KIP-853). kafkalite
        has no KRaft quorum; its controller is the holder of the controller
        lease (PostgreSQL's with --cluster, this process's alone on one
        host), so the quorum it describes is that: this process (Metadata's
        controller_id) its leader and only voter, at the lease's epoch, and
        the live brokers its observers, as KRaft's brokers observe the
        metadata log. The metadata's changes made durable are that log's
        offsets (the store's ``offset``: every change is committed once
        written, so the high watermark is the leader's log end offset);
        the brokers' ends are -1 ("unknown": they fetch no log, the
        controller tells them), and only the leader has fetch times (now,
        as KRaft reports for its leader). Any
        other topic-partition is UNKNOWN_TOPIC_OR_PARTITION, and a process
        that lost its lease answers NOT_LEADER_OR_FOLLOWER, as Kafka does."""
        topics = body["topics"]
        asked = [(t["topic_name"], p["partition_index"]) for t in topics for p in t["partitions"]]
        lease = getattr(self.metadata, "lease", None)
        if asked != [METADATA_LOG] or len(topics) != 1:
            error = errors.UnknownTopicOrPartitionError(
                "the metadata quorum is described as one partition, %s-%d" % METADATA_LOG)
        elif lease is not None and not lease.held:
            error = errors.NotLeaderOrFollowerError(
                f"node {lease.node_id} no longer holds the controller lease")
        else:
            error = None
        if error is not None:
            return {"error_code": 0, "error_message": None, "nodes": [], "topics": [
                {"topic_name": t["topic_name"], "partitions": [
                    {"partition_index": p["partition_index"], "error_code": error.code,
                     "error_message": error.message} for p in t["partitions"]]}
                for t in topics]}
        # the quorum's leader is this process, the controller; KRaft's
        # controllers are not among Metadata's brokers either
        controller = KAFKA_CONTROLLER_ID if ctx.listener is Listener.KAFKA else NATIVE_CONTROLLER_ID
        now_ms = int(time.time() * 1000)
        no_dir = uuid.UUID(int=0)       # Kafka's "no directory id"
        end = self.metadata.offset
        leader = {"replica_id": controller, "replica_directory_id": no_dir,
                  "log_end_offset": end, "last_fetch_timestamp": now_ms,
                  "last_caught_up_timestamp": now_ms}
        observers = [{"replica_id": b["node_id"], "replica_directory_id": no_dir,
                      "log_end_offset": -1, "last_fetch_timestamp": -1,
                      "last_caught_up_timestamp": -1}
                     for b in self.live_brokers(ctx.listener, ctx.listener_name)
                     if b["node_id"] != controller]
        listeners = [{"name": name, "host": host or self.config.public_host, "port": port}
                     for name, (host, port) in self.kafka_listeners.items()]
        return {"error_code": 0, "error_message": None, "topics": [{
            "topic_name": METADATA_LOG[0], "partitions": [{
                "partition_index": METADATA_LOG[1], "error_code": 0, "error_message": None,
                "leader_id": controller,
                "leader_epoch": lease.epoch if lease is not None else SINGLE_HOST_CONTROLLER_EPOCH,
                "high_watermark": end, "current_voters": [leader], "observers": observers}]}],
            "nodes": [{"node_id": controller, "listeners": listeners}]}

    def _alter_replica_log_dirs(self, ctx: RequestContext, body: dict):
        """AlterReplicaLogDirs sent to this process as a broker (node 1000),
        which keeps the internal topics' replicas in its one log dir, the
        data dir; the workers answer for theirs (replica_manager.py). As
        Kafka answers: a path that is not the data dir, LOG_DIR_NOT_FOUND;
        an internal topic's partition, NONE (it is in that dir already);
        another topic's, REPLICA_NOT_AVAILABLE (its replicas are the
        workers'); a partition that does not exist,
        UNKNOWN_TOPIC_OR_PARTITION."""
        log_dir = os.path.abspath(self.config.data_dir)
        codes: dict[tuple[str, int], int] = {}   # a partition named twice: the last dir, as Kafka
        for d in body["dirs"]:
            for t in d["topics"]:
                name = t["name"]
                internal = self.internal_topics.get(name, 0)
                meta = self.metadata.topics.get(name)
                for index in t["partitions"]:
                    if d["path"] != log_dir:
                        code = errors.LogDirNotFoundError.code
                    elif 0 <= index < internal:
                        code = 0
                    elif meta is not None and 0 <= index < len(meta.partitions):
                        code = errors.ReplicaNotAvailableError.code
                    else:
                        code = errors.UnknownTopicOrPartitionError.code
                    codes[(name, index)] = code
        return alter_replica_log_dirs_response(codes)

    # ---- Produce -----------------------------------------------------------------------------

    def _produce(self, ctx: RequestContext, body: dict):
        """Produce sent to this node: Metadata names it the leader of the
        internal topics only, and no client may append to those (Kafka's
        replica manager answers INVALID_TOPIC_EXCEPTION); it leads nothing
        else (NOT_LEADER_OR_FOLLOWER sends a client back to Metadata)."""
        node = KAFKA_CONTROLLER_ID if ctx.listener is Listener.KAFKA else NATIVE_CONTROLLER_ID
        name_produce_topics(body, ctx.api_version, self.topic_name_of)

        def serve(name, topic, pd, out):
            if name in INTERNAL_TOPICS:
                raise errors.InvalidTopicError(f"cannot append to internal topic {name}")
            raise errors.NotLeaderOrFollowerError(
                f"node {node} leads no partition of {name}; ask Metadata for the leader")

        topics = each_partition(PRODUCE, body["topic_data"], serve, produce_blank,
                                resolve=produce_topic_name, topic_fields=produce_topic_id)
        if body.get("acks", 1) == 0:
            return NO_RESPONSE
        return {"responses": topics, "throttle_time_ms": 0}

    def _delete_records(self, ctx: RequestContext, body: dict):
        """DeleteRecords sent to this node, the internal topics' leader: as
        Produce, refused INVALID_TOPIC_EXCEPTION for those (as Kafka refuses
        them), UNKNOWN_TOPIC_OR_PARTITION for what does not exist, and
        NOT_LEADER_OR_FOLLOWER for the rest (their leaders are workers)."""
        def serve(name, topic, p, out):
            if name in INTERNAL_TOPICS:
                raise errors.InvalidTopicError(f"cannot delete records of internal topic {name}")
            meta = self.metadata.topics.get(name)
            if meta is None or not 0 <= p["partition_index"] < len(meta.partitions):
                raise errors.UnknownTopicOrPartitionError(
                    f"{name}-{p['partition_index']} does not exist")
            raise errors.NotLeaderOrFollowerError(
                f"a worker leads {name}-{p['partition_index']}; ask Metadata for it")

        return {"throttle_time_ms": 0, "topics": each_partition(
            DELETE_RECORDS, body["topics"], serve, delete_records_blank)}
