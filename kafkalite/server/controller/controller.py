"""The controller: cluster metadata, broker registrations, and the admin APIs.

It holds the cluster metadata (topics, configs, partition -> broker, leader
epochs; metadata.py) and answers Metadata, CreateTopics, DeleteTopics,
CreatePartitions, DescribeConfigs, AlterConfigs, IncrementalAlterConfigs,
DescribeCluster and DescribeQuorum (its lease as a one-voter quorum). It
also hands out producer ids (``producer_ids``), which the transaction
coordinator gives to producers.

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

Replication (one host): a partition may have several replicas on distinct
brokers; the controller decides who leads and who is in sync, the brokers
replicate (replica_fetcher.py). When a broker's process dies
(``fence_broker``) every partition it led gets a new leader from the
in-sync replicas still alive (a new leader epoch; with
``unclean.leader.election.enable`` any live replica when none in sync is
left, else the partition stays offline until an in-sync one returns), and
it leaves the ISR of the partitions it followed. A leader proposes ISR
changes (``alter_partition``: a follower fell behind, or caught up) against
the partition epoch it knows; a proposal against an older one is refused
and the leader is sent the current state. Every decision goes to every
live replica as an ``assign`` naming the leader, so followers follow the
right broker and a deposed leader steps down.

Node ids: on the native protocol the brokers are 0..n-1 and this process
is node -1; on Kafka's protocol the brokers keep their ids, each with its
Kafka listener's port, and this process (controller and coordinators) is
node 1000 at the bootstrap address only: Metadata, DescribeCluster and
FindCoordinator name brokers, which relay to it.

Who may call: the supervisor (supervisor.py), on its single thread.
"""
from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Protocol

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.protocol import ApiKey
from kafkalite.protocol.enums import (AUTHORIZED_OPERATIONS_OMITTED, AlterConfigOp, ConfigResourceType,
                                      EndpointType)
from kafkalite.protocol.native import NATIVE_BOOTSTRAP_CONFIG
from kafkalite.server import config_registry as registry
from kafkalite.server.config import ServerConfig
from kafkalite.server.internal_topic import partition_for
from kafkalite.server.network.listeners import kafka_listeners
from kafkalite.server.controller.metadata import (INTERNAL_TOPICS, OFFSETS_TOPIC, MetadataStore,
                                       TopicMetadata, replica_dir, validate_topic_name)
from kafkalite.server.network.per_partition import each_partition
from kafkalite.server.txn.producer_ids import ProducerIdManager
from kafkalite.server.replica.replica_manager import (DELETE_RECORDS, PRODUCE, produce_blank,
                                              alter_replica_log_dirs_response,
                                              delete_records_blank)
from kafkalite.server.network.requests import DEFERRED, NO_RESPONSE, Listener, RequestContext

NO_TOPIC_ID = uuid.UUID(int=0)      # Kafka's Uuid.ZERO_UUID: a topic named by name

log = logging.getLogger("kafkalite.controller")

NATIVE_CONTROLLER_ID = -1
# The supervisor's node id on the Kafka wire, where its own listener (the
# bootstrap address) names itself; Metadata, DescribeCluster and
# FindCoordinator name brokers only (workers 0..n-1, and n never reaches
# 1000), which relay what they do not serve to it.
KAFKA_CONTROLLER_ID = 1000
DEFAULT_ADMIN_TIMEOUT_MS = 30_000
# Each partition is a directory and open files in one worker; a bound keeps
# one request (or a fuzzed one) from asking for millions.
MAX_PARTITIONS_PER_TOPIC = 10_000


def _bracket(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


# DescribeTopicPartitions' page size cap (Kafka's max.request.partition.size.limit)
MAX_DESCRIBED_PARTITIONS = 2000
# DescribeQuorum describes KRaft's metadata log, this one partition (KIP-595).
METADATA_LOG = ("__cluster_metadata", 0)
# The controller's epoch on one host, where no lease is ever handed over
# (with --cluster it is the lease's epoch, which every takeover bumps).
SINGLE_HOST_CONTROLLER_EPOCH = 1


@dataclass
class BrokerRegistration:
    broker_id: int
    port: int = 0                 # native ZeroMQ ROUTER
    kafka_port: int = 0           # Kafka TCP listener
    fenced: bool = True
    # fenced because its process died, and its supervisor is starting it
    # again at the same endpoints, until it serves: Metadata still lists it
    # (live_brokers)
    restarting: bool = False
    host: str | None = None       # another node's (advertised) host; None: this node's
    rack: str | None = None       # its node, as Kafka's broker.rack
    # {listener name: (advertised host or None, port)} of each of its Kafka
    # listeners (listeners.py); empty: only ``kafka_port``, the primary's
    kafka_listeners: dict = field(default_factory=dict)


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
        # broker id -> rack (its node, in a cluster); replicas go to distinct
        # racks where there are several
        self.racks: dict[int, str] = {}
        # in a cluster the blocks of ids come from PostgreSQL (producer_ids.py)
        self.producer_ids = ProducerIdManager(
            config.data_dir, getattr(metadata, "reserve_producer_ids", None))
        self.partitions_added = partitions_added
        # a topic was deleted (its id): the share coordinator drops its state
        self.topic_deleted: Callable[[object], None] = lambda topic_id: None
        # internal topic -> partition count, registered by its coordinator
        self.internal_topics: dict[str, int] = {}
        # (topic, partition) -> why its broker could not open it
        self.offline: dict[tuple[str, int], str] = {}
        # this process's own endpoints, set by the supervisor once bound
        self.native_port = 0
        self.kafka_port = 0
        self.kafka_listeners: dict = {}   # {name: (advertised host or None, port)}
        # brokers fenced as gone (dead, silent, absent), until they serve again
        self.gone: set[int] = set()

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
            ApiKey.DESCRIBE_QUORUM: self._describe_quorum,
            ApiKey.ALTER_REPLICA_LOG_DIRS: self._alter_replica_log_dirs,
            ApiKey.DESCRIBE_TOPIC_PARTITIONS: self._describe_topic_partitions,
            ApiKey.ELECT_LEADERS: self._elect_leaders,
            ApiKey.ALTER_PARTITION_REASSIGNMENTS: self._alter_reassignments,
            ApiKey.LIST_PARTITION_REASSIGNMENTS: self._list_reassignments,
            ApiKey.PRODUCE: self._produce,
            ApiKey.DELETE_RECORDS: self._delete_records,
        }

    def register_internal_topic(self, name: str, partitions: int) -> None:
        """A coordinator keeps internal topic ``name`` with ``partitions``
        partitions in this process: Metadata names this node its leader."""
        if name not in INTERNAL_TOPICS:
            raise ValueError(f"{name} is not one of the internal topics {sorted(INTERNAL_TOPICS)}")
        self.internal_topics[name] = partitions

    # ---- brokers -----------------------------------------------------------------------------

    def add_broker(self, broker_id: int) -> BrokerRegistration:
        """A broker of another node of the cluster, known from its first
        hello: the broker list grows to hold it (fenced until it registers)."""
        while len(self.brokers) <= broker_id:
            self.brokers.append(BrokerRegistration(len(self.brokers)))
        return self.brokers[broker_id]

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
        b = self.add_broker(broker_id)
        b.port, b.kafka_port, b.fenced = port, kafka_port, True
        b.kafka_listeners = dict(kafka_listeners or {})
        b.host, b.rack = host, rack
        if rack is not None:
            self.racks[broker_id] = rack
        started = [] if adopted else self.metadata.start_leadership(broker_id)
        log.info("broker %d registered on port %d; leading %d partitions", broker_id, port,
                 len(started))
        # The other live replicas of what it leads again follow its new epoch.
        by_broker: dict = {}
        for name, i, _ in started:
            topic = self.metadata.topics[name]
            if len(topic.partitions[i].replicas) > 1:
                self._assign(by_broker, topic, [i], skip=broker_id, fenced_too=True)
        self._notify(by_broker)
        return [self.partition_spec(t, i, broker_id)
                for t, i, _ in self.metadata.hosted_by(broker_id)]

    def unfence_broker(self, broker_id: int) -> None:
        self.brokers[broker_id].fenced = self.brokers[broker_id].restarting = False
        self.gone.discard(broker_id)

    def elect_offline(self, broker_id: int) -> None:
        """``broker_id`` serves again: partitions left offline by a broker
        fenced as gone (their leader, when no live in-sync replica could
        take over) come back with it if it is in their ISR, as Kafka's
        offline partitions do."""
        by_broker: dict = {}
        changed = set()
        for topic in self.metadata.topics.values():
            for i, p in enumerate(topic.partitions):
                old = p.leader
                if (old in self.gone and broker_id in p.isr and len(p.replicas) > 1
                        and self._elect(topic, i, exclude=old)):
                    changed.add(topic.name)
                    self._assign(by_broker, topic, [i], skip=old, fenced_too=True)
        if changed:
            self.metadata.save(sorted(changed))
        self._notify(by_broker)

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

    def fence_broker(self, broker_id: int, elect: bool = True, restarting: bool = False) -> None:
        """``broker_id``'s process is gone: elect new leaders for what it
        led and take it out of the ISRs it was in (unless ``elect`` is
        False: the whole node is stopping). ``restarting``: it died and its
        supervisor is starting it again (live_brokers says why that
        matters)."""
        self.brokers[broker_id].fenced = True
        self.brokers[broker_id].restarting = restarting
        if not elect:
            return
        self.gone.add(broker_id)
        by_broker: dict = {}
        changed = set()
        for topic in self.metadata.topics.values():
            for i, p in enumerate(topic.partitions):
                if len(p.replicas) < 2 or broker_id not in p.replicas:
                    continue
                if p.leader == broker_id:
                    if self._elect(topic, i, exclude=broker_id):
                        changed.add(topic.name)
                        self._assign(by_broker, topic, [i], skip=broker_id, fenced_too=True)
                elif broker_id in p.isr:
                    p.isr = [b for b in p.isr if b != broker_id]
                    p.partition_epoch += 1
                    changed.add(topic.name)
                    self._assign(by_broker, topic, [i], skip=broker_id, fenced_too=True)
        if changed:
            self.metadata.save(sorted(changed))
        self._notify(by_broker)

    def _elect(self, topic: TopicMetadata, index: int, exclude: int = -1) -> bool:
        """Move the leadership of a partition whose leader is gone to a live
        in-sync replica (or, if the topic allows unclean election, to any
        live replica); returns whether a leader was found. Without one the
        partition keeps its dead leader and ISR: it is offline until one of
        them comes back, which then leads with everything it had."""
        p = topic.partitions[index]
        live = [b for b in p.replicas if b != exclude and not self.brokers[b].fenced]
        candidates = [b for b in live if b in p.isr]
        unclean = False
        if not candidates and live and self.log_config(topic).unclean_leader_election_enable:
            candidates, unclean = live[:1], True
        if not candidates:
            log.error("%s-%d is offline: no in-sync replica of %s is alive", topic.name, index,
                      p.isr)
            return False
        self._move_leader(topic, index, candidates[0], unclean, exclude)
        return True

    def _move_leader(self, topic: TopicMetadata, index: int, leader: int, unclean: bool = False,
                     exclude: int = -1) -> None:
        p = topic.partitions[index]
        p.leader = leader
        p.leader_epoch += 1
        p.partition_epoch += 1
        p.isr = [leader] if unclean else [b for b in p.isr if b != exclude]
        log.warning("%s-%d: broker %d leads at epoch %d%s (isr %s)", topic.name, index, leader,
                    p.leader_epoch, " after an UNCLEAN election" if unclean else "", p.isr)

    def _elect_one(self, topic: TopicMetadata, index: int, election_type: int) -> None:
        """ElectLeaders for one partition: the preferred replica (the first)
        if it is alive and in sync, or (unclean, type 1) a live replica for
        a partition without a live leader. Raises the partition's error."""
        p = topic.partitions[index]
        if election_type == 0:
            preferred = p.replicas[0]
            if p.leader == preferred and not self.brokers[preferred].fenced:
                raise errors.ElectionNotNeededError(
                    f"{topic.name}-{index}: broker {preferred} leads already")
            if self.brokers[preferred].fenced or preferred not in p.isr:
                raise errors.PreferredLeaderNotAvailableError(
                    f"{topic.name}-{index}: preferred replica {preferred} is "
                    f"{'down' if self.brokers[preferred].fenced else 'not in sync'}")
            self._move_leader(topic, index, preferred)
        elif election_type == 1:
            if not self.brokers[p.leader].fenced:
                raise errors.ElectionNotNeededError(
                    f"{topic.name}-{index}: broker {p.leader} leads it")
            live = [b for b in p.replicas if not self.brokers[b].fenced]
            if not live:
                raise errors.EligibleLeadersNotAvailableError(
                    f"{topic.name}-{index}: no replica of {p.replicas} is alive")
            in_sync = [b for b in live if b in p.isr]
            self._move_leader(topic, index, (in_sync or live)[0], unclean=not in_sync)
        else:
            raise errors.InvalidRequestError(f"unknown election type {election_type}")

    def _elect_leaders(self, ctx: RequestContext, body: dict):
        """ElectLeaders: preferred or unclean elections, for the partitions
        named (all when none are), answered once decided; the brokers take
        the new leaderships from the assigns that follow."""
        election_type = body.get("election_type", 0)
        wanted = body.get("topic_partitions")
        if wanted is None:
            wanted = [{"topic": t.name, "partitions": list(range(len(t.partitions)))}
                      for t in self.metadata.topics.values()]
        by_broker: dict = {}
        changed = set()
        results = []
        for entry in wanted:
            out = {"topic": entry["topic"], "partition_result": []}
            results.append(out)
            topic = self.metadata.topics.get(entry["topic"])
            for i in entry["partitions"]:
                r = {"partition_id": i, "error_code": 0, "error_message": None}
                out["partition_result"].append(r)
                try:
                    if topic is None or not 0 <= i < len(topic.partitions):
                        raise errors.UnknownTopicOrPartitionError(
                            f"{entry['topic']}-{i} does not exist")
                    self._elect_one(topic, i, election_type)
                    changed.add(topic.name)
                    self._assign(by_broker, topic, [i], fenced_too=True)
                except KafkaError as exc:
                    r["error_code"], r["error_message"] = exc.code, exc.message
        if changed:
            self.metadata.save(sorted(changed))
        self._notify(by_broker)
        return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": results}

    # ---- reassignment (KIP-455) --------------------------------------------------------------

    def _alter_reassignments(self, ctx: RequestContext, body: dict):
        """AlterPartitionReassignments: the new replicas join as followers
        (their logs copied from the leader by replication); once all of them
        are in sync the partition takes the target replica set, leadership
        moves if its leader is leaving, and the leaving replicas are deleted.
        Null replicas cancel a reassignment under way."""
        by_broker: dict = {}
        changed = set()
        responses = []
        for t in body["topics"]:
            out = {"name": t["name"], "partitions": []}
            responses.append(out)
            topic = self.metadata.topics.get(t["name"])
            for entry in t["partitions"]:
                i = entry["partition_index"]
                r = {"partition_index": i, "error_code": 0, "error_message": None}
                out["partitions"].append(r)
                try:
                    if topic is None or not 0 <= i < len(topic.partitions):
                        raise errors.UnknownTopicOrPartitionError(f"{t['name']}-{i} does not exist")
                    if topic.is_internal or topic.name in INTERNAL_TOPICS:
                        raise errors.TopicAuthorizationFailedError(
                            f"{topic.name} is an internal topic")
                    if entry["replicas"] is None:
                        self._cancel_reassignment(by_broker, topic, i)
                    else:
                        target = self._assignments([{"broker_ids": entry["replicas"]}], 0)[0]
                        self._start_reassignment(by_broker, topic, i, target)
                    changed.add(topic.name)
                except KafkaError as exc:
                    r["error_code"], r["error_message"] = exc.code, exc.message
        if changed:
            self.metadata.save(sorted(changed))
        self._notify(by_broker)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "responses": responses}

    def _start_reassignment(self, by_broker: dict, topic: TopicMetadata, i: int,
                            target: list[int]) -> None:
        p = topic.partitions[i]
        if p.adding or p.removing:
            raise errors.InvalidReplicaAssignmentError(
                f"{topic.name}-{i} is being reassigned already (to "
                f"{[b for b in p.replicas if b not in p.removing]}); cancel it first")
        if target == p.replicas:
            return
        if not p.per_broker_dir and len(target) > 1:
            # created with one replica, its log is <topic>-<partition>, and
            # it gains replicas: that log stays where it is, the joining
            # replicas' logs go in their own directories
            p.per_broker_dir, p.shared_owner = True, p.replicas[0]
        if not p.per_broker_dir:
            # created with one replica and kept at one: its log,
            # <topic>-<partition>, any worker can open, so it moves whole
            old = p.leader
            self._move_leader(topic, i, target[0])
            p.replicas, p.isr = list(target), list(target)
            # the new broker opens the log only once the old one closed it:
            # two writers of one directory would corrupt it
            then: dict = {}
            self._assign(then, topic, [i], fenced_too=True)
            if self.brokers[old].fenced:
                self._notify(then)
            else:
                self.channel.send(
                    {old: {"type": "unassign", "delete": False, "partitions": [
                        {"topic": topic.name, "partition": i,
                         "dir": replica_dir(topic.name, i, old, False)}]}},
                    lambda results, timed_out: self._notify(then), DEFAULT_ADMIN_TIMEOUT_MS)
            return
        p.adding = [b for b in target if b not in p.replicas]
        p.removing = [b for b in p.replicas if b not in target]
        p.replicas = list(target) + p.removing
        p.partition_epoch += 1
        log.info("%s-%d: reassigning to %s (adding %s, removing %s)", topic.name, i, target,
                 p.adding, p.removing)
        if not self._complete_reassignment(by_broker, topic, i):
            self._assign(by_broker, topic, [i], fenced_too=True)

    def _complete_reassignment(self, by_broker: dict, topic: TopicMetadata, i: int) -> bool:
        """Finish a reassignment whose joining replicas are all in sync;
        returns whether it did (and queued the messages)."""
        p = topic.partitions[i]
        if any(b not in p.isr for b in p.adding):
            return False
        target = [b for b in p.replicas if b not in p.removing]
        removed = list(p.removing)
        p.replicas = target
        p.isr = [b for b in p.isr if b in target]
        p.adding, p.removing = [], []
        p.partition_epoch += 1
        if p.leader not in target:
            live = [b for b in target if b in p.isr and not self.brokers[b].fenced]
            self._move_leader(topic, i, live[0] if live else target[0])
        log.info("%s-%d: reassignment done: replicas %s, isr %s", topic.name, i, p.replicas,
                 p.isr)
        self._assign(by_broker, topic, [i], fenced_too=True)
        for b in removed:
            where = replica_dir(topic.name, i, b, p.per_broker_dir, p.shared_owner)
            if b == p.shared_owner:
                p.shared_owner = None       # its log is deleted: no replica has it
            if self.brokers[b].fenced:
                shutil.rmtree(os.path.join(self.config.data_dir, where), ignore_errors=True)
                continue
            by_broker.setdefault(b, {"type": "unassign", "delete": True, "partitions": []})[
                "partitions"].append({"topic": topic.name, "partition": i, "dir": where})
        return True

    def _cancel_reassignment(self, by_broker: dict, topic: TopicMetadata, i: int) -> None:
        p = topic.partitions[i]
        if not p.adding and not p.removing:
            raise errors.NoReassignmentInProgressError(f"{topic.name}-{i} is not being reassigned")
        dropped = list(p.adding)
        p.replicas = [b for b in p.replicas if b not in p.adding]
        p.isr = [b for b in p.isr if b not in p.adding]
        p.adding, p.removing = [], []
        p.partition_epoch += 1
        self._assign(by_broker, topic, [i], fenced_too=True)
        for b in dropped:
            where = replica_dir(topic.name, i, b, p.per_broker_dir, p.shared_owner)
            by_broker.setdefault(b, {"type": "unassign", "delete": True, "partitions": []})[
                "partitions"].append({"topic": topic.name, "partition": i, "dir": where})

    def _list_reassignments(self, ctx: RequestContext, body: dict):
        wanted = body.get("topics")
        names = [t["name"] for t in wanted] if wanted is not None else sorted(self.metadata.topics)
        only = {t["name"]: set(t["partition_indexes"]) for t in wanted or ()}
        topics = []
        for name in names:
            topic = self.metadata.topics.get(name)
            if topic is None:
                continue
            parts = [{"partition_index": i, "replicas": p.replicas, "adding_replicas": p.adding,
                      "removing_replicas": p.removing}
                     for i, p in enumerate(topic.partitions)
                     if (p.adding or p.removing) and (name not in only or i in only[name])]
            if parts:
                topics.append({"name": name, "partitions": parts})
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": topics}

    def rebalance_leaders(self) -> int:
        """Kafka's auto.leader.rebalance: hand each replicated partition back
        to its preferred replica when that one is alive and in sync (after
        failovers, leaderships pile up on the survivors). Returns how many
        moved."""
        by_broker: dict = {}
        changed = set()
        moved = 0
        for topic in self.metadata.topics.values():
            for i, p in enumerate(topic.partitions):
                preferred = p.replicas[0]
                if (len(p.replicas) > 1 and p.leader != preferred and preferred in p.isr
                        and not self.brokers[preferred].fenced):
                    self._move_leader(topic, i, preferred)
                    self._assign(by_broker, topic, [i], fenced_too=True)
                    changed.add(topic.name)
                    moved += 1
        if changed:
            self.metadata.save(sorted(changed))
        self._notify(by_broker)
        return moved

    def alter_partition(self, broker_id: int, items: list[dict]) -> None:
        """A leader's ISR proposals (Kafka's AlterPartition): applied when
        it still leads at the epochs it names, and only with live replicas
        joining; either way the leader is sent the partition's state."""
        by_broker: dict = {}
        changed = set()
        for item in items:
            topic = self.metadata.topics.get(item["topic"])
            if topic is None or not 0 <= item["partition"] < len(topic.partitions):
                continue
            i = item["partition"]
            p = topic.partitions[i]
            isr = [b for b in dict.fromkeys(item["isr"]) if b in p.replicas]
            joining = set(isr) - set(p.isr)
            if (p.leader == broker_id and item["leader_epoch"] == p.leader_epoch
                    and item["partition_epoch"] == p.partition_epoch and broker_id in isr
                    and not any(self.brokers[b].fenced for b in joining)):
                if isr != p.isr:
                    log.info("%s-%d: isr %s -> %s", topic.name, i, p.isr, isr)
                    p.isr = isr
                    p.partition_epoch += 1
                    changed.add(topic.name)
                    if p.adding and self._complete_reassignment(by_broker, topic, i):
                        continue
            else:
                log.info("%s-%d: refused broker %d's isr %s at epochs %d/%d (leader %d, epochs "
                         "%d/%d)", topic.name, i, broker_id, isr, item["leader_epoch"],
                         item["partition_epoch"], p.leader, p.leader_epoch, p.partition_epoch)
            self._assign(by_broker, topic, [i], only=broker_id)
        if changed:
            self.metadata.save(sorted(changed))
        self._notify(by_broker)

    def resend(self, broker_id: int, items: list[dict]) -> None:
        """A broker asks again for partitions it believes stale (its leader
        answers with a newer epoch than it was told of)."""
        by_broker: dict = {}
        for item in items:
            topic = self.metadata.topics.get(item["topic"])
            if topic is not None and 0 <= item["partition"] < len(topic.partitions) \
                    and broker_id in topic.partitions[item["partition"]].replicas:
                self._assign(by_broker, topic, [item["partition"]], only=broker_id,
                             fenced_too=True)
        self._notify(by_broker)

    def _notify(self, by_broker: dict) -> None:
        """Send decisions no request waits for (elections, ISR changes)."""
        if by_broker:
            self.channel.send(by_broker, lambda results, timed_out: None,
                              DEFAULT_ADMIN_TIMEOUT_MS)

    def broker_endpoints(self) -> dict:
        """The brokers' native endpoints, for followers to fetch from (a
        registering broker's too: it is fenced until it confirms, and its
        followers are told of it before)."""
        host = self.config.host
        host = "127.0.0.1" if host in ("", "0.0.0.0", "*") else host
        return {str(b.broker_id): f"tcp://{_bracket(b.host or host)}:{b.port}"
                for b in self.brokers if b.port}

    def partition_spec(self, topic: TopicMetadata, index: int, broker: int | None = None) -> dict:
        p = topic.partitions[index]
        broker = p.leader if broker is None else broker
        return {"topic": topic.name, "partition": index, "topic_id": str(topic.topic_id),
                "leader": p.leader, "leader_epoch": p.leader_epoch,
                "partition_epoch": p.partition_epoch, "replicas": p.replicas, "isr": p.isr,
                "dir": replica_dir(topic.name, index, broker, p.per_broker_dir,
                                   p.shared_owner),
                # the dynamic broker-wide topic defaults of that broker under
                # the topic's own configs (the worker puts its server's static
                # defaults under both)
                "configs": {**self._dynamic_topic_defaults(broker), **topic.configs}}

    def partition_counts(self) -> dict[str, int]:
        """Every topic's partition count: what a (re)started broker is told."""
        return {name: len(t.partitions) for name, t in self.metadata.topics.items()}

    def _tell_partition_counts(self, by_broker: dict, counts: dict[str, int]) -> None:
        """Every live broker learns the new partition counts of ``counts``'
        topics (0: deleted), as Kafka's brokers learn them from the metadata
        log: a request for a partition the cluster does not have is
        UNKNOWN_TOPIC_OR_PARTITION there, for one another broker has
        NOT_LEADER_OR_FOLLOWER (replica_manager.py ``hosted``). Called once
        per request, after its assigns and unassigns: a broker that has a
        message already gets the counts in it, the others a "topics" message
        (one made earlier would take a later assign's partitions)."""
        if not counts:
            return
        for registration in self.brokers:
            if not registration.fenced:
                msg = by_broker.setdefault(registration.broker_id, {"type": "topics"})
                msg.setdefault("topic_partitions", {}).update(counts)

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
        return f"tcp://{_bracket(b.host or self.config.public_host)}:{b.port}"

    def controller_id(self, listener: Listener, listener_name: str | None = None) -> int:
        """The controller id Metadata and DescribeCluster give. Kafka's
        clients are told of brokers only (``live_brokers``), so on Kafka's
        protocol it is a live broker's id, as a KRaft cluster names a
        random broker: that broker relays what it does not serve (admin,
        group and transaction requests) to this process (relay.py), as
        Kafka's brokers forward to their controller. -1 while no broker is
        up."""
        if listener is not Listener.KAFKA:
            return NATIVE_CONTROLLER_ID
        live = self.live_brokers(listener, listener_name)
        return live[0]["node_id"] if live else -1

    def controller_node(self, listener: Listener, listener_name: str | None = None) -> dict:
        """This process as a node of ``listener``'s protocol: the native
        protocol's controller and coordinator; on Kafka's, the bootstrap
        address of the Kafka listener ``listener_name`` (None: the primary),
        which answers every request but is not among Metadata's brokers."""
        if listener is not Listener.KAFKA:
            return {"node_id": NATIVE_CONTROLLER_ID, "host": self.config.public_host,
                    "port": self.native_port}
        host, port = self.kafka_listeners.get(listener_name, (None, self.kafka_port))
        return {"node_id": KAFKA_CONTROLLER_ID, "host": host or self.config.public_host,
                "port": port}

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

    def _kafka_endpoint(self, b: BrokerRegistration, listener_name: str | None):
        """(host, port) of broker ``b`` on the Kafka listener
        ``listener_name``; None when it has no listener of that name (a node
        of a cluster configured with other listeners): clients of that
        listener are not told of it."""
        if listener_name is None or not b.kafka_listeners:
            return b.host or self.config.public_host, b.kafka_port
        entry = b.kafka_listeners.get(listener_name)
        if entry is None:
            return None
        # a worker of this node leaves the host to the node's listener setting
        host = entry[0] or b.host or self.kafka_listeners.get(listener_name, (None, 0))[0]
        return host or self.config.public_host, entry[1]

    def live_brokers(self, listener: Listener, listener_name: str | None = None,
                     restarting: bool = False) -> list[dict]:
        """The nodes a client of ``listener`` may talk to: every unfenced
        broker, at its endpoint of the Kafka listener ``listener_name``; on
        Kafka's protocol, not this process (it holds no replica: a tool that
        places replicas on every broker Metadata lists would fail on it),
        though its listener still answers the clients bootstrapping there.
        While no broker is up (the server starting, every worker restarting)
        it is the one listed: a Metadata answer naming no broker at all made
        librdkafka drop every broker handle, the bootstrap one too, and its
        producers never asked again (compat/test_restarts.py, 2 runs in 6).

        A broker whose process died and is being started again at the
        same endpoints stays in Metadata's brokers (``restarting``), leading
        nothing, until it registers; it is never named controller or
        coordinator (those take the unfenced only). A Metadata answer that
        dropped it made librdkafka decommission its broker handle, and that
        handle, terminating, took back the partitions the same answer had
        just moved to their new leaders and parked them on no broker until
        the client's next leader query, 0.5-1 s later (the restart
        matrix's slowest worker kills). Kafka fences a dead broker only
        after its session timeout, so its clients meet this only when a
        broker leaves for good.
        """
        if listener is not Listener.KAFKA:
            host = self.config.public_host
            return [{"node_id": b.broker_id, "host": b.host or host, "port": b.port,
                     "rack": b.rack} for b in self.brokers if not b.fenced]
        nodes, serving = [], False
        for b in self.brokers:
            endpoint = (None if b.fenced and not (restarting and b.restarting)
                        else self._kafka_endpoint(b, listener_name))
            if endpoint is not None:
                nodes.append({"node_id": b.broker_id, "host": endpoint[0], "port": endpoint[1],
                              "rack": b.rack})
                serving = serving or not b.fenced
        if not serving:
            nodes.append({**self.controller_node(listener, listener_name), "rack": None})
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
        """Tell the replicas to close and delete ``partitions`` (no one waits)."""
        by_broker: dict = {}
        self._delete_replicas(by_broker, partitions)
        self._notify(by_broker)

    def _delete_replicas(self, by_broker: dict, partitions) -> None:
        """Unassign-and-delete messages for every replica of ``partitions``;
        the logs of replicas on brokers that are down are removed here (their
        process is gone, and it is sent only the partitions that exist when
        it comes back)."""
        for topic, i in partitions:
            p = topic.partitions[i]
            self.offline.pop((topic.name, i), None)
            for b in p.replicas:
                where = replica_dir(topic.name, i, b, p.per_broker_dir, p.shared_owner)
                if self.brokers[b].fenced and b != p.leader:
                    shutil.rmtree(os.path.join(self.config.data_dir, where), ignore_errors=True)
                    continue
                msg = by_broker.setdefault(b, {"type": "unassign", "delete": True,
                                               "partitions": []})
                msg["partitions"].append({"topic": topic.name, "partition": i, "dir": where})

    def _undo_create(self, name: str) -> None:
        """Delete a topic whose partitions could not all be opened."""
        topic = self.metadata.delete_topic(name)
        log.warning("topic %s deleted again: its partitions could not all be opened", name)
        self._unassign([(topic, i) for i in range(len(topic.partitions))])

    def _assign(self, by_broker: dict, topic: TopicMetadata, indexes, *, skip: int = -1,
                only: int | None = None, fenced_too: bool = False) -> None:
        """Assign messages for ``indexes`` to their leader and their live
        followers (or ``only`` that broker; never ``skip``). A dead follower
        is sent its partitions when it registers again -- but decisions no
        request waits for go to fenced followers too (``fenced_too``): one
        that is registering (fenced until it confirms) was sent its
        partitions already, and must hear of a newer leader epoch."""
        for i in indexes:
            p = topic.partitions[i]
            for b in p.replicas:
                if b == skip or (only is not None and b != only):
                    continue
                if b != p.leader and self.brokers[b].fenced and not fenced_too:
                    continue
                msg = by_broker.setdefault(b, {"type": "assign", "partitions": [],
                                               "brokers": self.broker_endpoints()})
                msg["partitions"].append(self.partition_spec(topic, i, b))

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
                "controller_id": self.controller_id(listener, listener_name),
                "topics": topics, "cluster_authorized_operations": AUTHORIZED_OPERATIONS_OMITTED}

    def _metadata(self, ctx: RequestContext, body: dict):
        requested = body.get("topics")
        if requested is None or (ctx.api_version == 0 and not requested):
            return self._metadata_body(sorted(self.metadata.topics), ctx.listener,
                                       listener_name=ctx.listener_name)
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
        self._tell_partition_counts(by_broker, {
            name: len(self._create(by_broker, name, self.config.default_partitions, {}).partitions)
            for name in creatable})

        def respond(results: list, timed_out: bool) -> dict:
            failed = {}
            for name, parts in _failed(results).items():
                if name in creatable and name in self.metadata.topics:
                    failed[name] = _open_error(parts, self.config.default_partitions)
                    log.error("auto-creating %s failed: %s", name, failed[name].message)
                    self._undo_create(name)
            return self._metadata_body(names, ctx.listener, failed, ctx.listener_name)
        return self._send(ctx, by_broker, respond)

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

    # ---- topics ------------------------------------------------------------------------------

    def _create(self, by_broker: dict, name: str, partitions: int, configs: dict,
                replication_factor: int | None = None, assignments=None) -> TopicMetadata:
        rf = self.config.default_replication_factor if replication_factor is None \
            else replication_factor
        rf = min(rf, len(self.brokers))
        if not assignments and rf > 1 and len(set(self.racks.values())) > 1:
            assignments = self._rack_aware(name, partitions, rf)
        topic = self.metadata.create_topic(name, partitions, configs, len(self.brokers),
                                           rf, assignments)
        log.info("topic %s created: %d partition(s), replication factor %d%s", name,
                 len(topic.partitions), len(topic.partitions[0].replicas) if topic.partitions else 0,
                 f", configs {configs}" if configs else "")
        self._assign(by_broker, topic, range(len(topic.partitions)))
        return topic

    def _rack_aware(self, name: str, partitions: int, rf: int) -> list[list[int]]:
        """Replicas on distinct racks (a cluster's nodes) where there are
        enough: the brokers are taken alternating between racks (the first
        of each rack, then the second of each, ...), and each partition's
        replicas are consecutive in that order, starting where the
        single-rack placement would start."""
        by_rack: dict = {}
        for b in range(len(self.brokers)):
            by_rack.setdefault(self.racks.get(b), []).append(b)
        order = [b for k in range(max(len(v) for v in by_rack.values()))
                 for rack in sorted(by_rack, key=str) for b in by_rack[rack][k:k + 1]]
        n = len(order)
        return [[order[(zlib.crc32(name.encode()) + p + k) % n] for k in range(rf)]
                for p in range(partitions)]

    def _replication_factor(self, rf: int) -> int:
        rf = self.config.default_replication_factor if rf == -1 else rf
        if not 1 <= rf <= len(self.brokers):
            raise errors.InvalidReplicationFactorError(
                f"replication factor must be 1 to {len(self.brokers)} (the number of brokers), "
                f"not {rf}")
        return rf

    def _assignments(self, given: list[dict], first_index: int) -> list[list[int]]:
        """CreateTopics / CreatePartitions replica assignments, checked as
        Kafka checks them: consecutive partitions, the same number of
        replicas each, distinct existing brokers."""
        out = []
        for n, a in enumerate(given):
            index = a.get("partition_index", first_index + n)
            replicas = list(a.get("broker_ids") or ())
            if index != first_index + n:
                raise errors.InvalidReplicaAssignmentError(
                    f"partitions in the assignment must be consecutive from {first_index}, "
                    f"not {index}")
            if not replicas or len(set(replicas)) != len(replicas):
                raise errors.InvalidReplicaAssignmentError(
                    f"partition {index}: replicas {replicas} must be distinct and not empty")
            bad = [b for b in replicas if not 0 <= b < len(self.brokers)]
            if bad:
                raise errors.InvalidReplicaAssignmentError(
                    f"partition {index}: brokers {bad} do not exist (brokers are "
                    f"0..{len(self.brokers) - 1})")
            if out and len(replicas) != len(out[0]):
                raise errors.InvalidReplicaAssignmentError(
                    "every partition must have the same number of replicas")
            out.append(replicas)
        return out

    def _validated_configs(self, configs: dict, topic: str) -> dict[str, str]:
        """A new topic's configs, checked against every topic config Kafka
        has (config_registry.py); INVALID_CONFIG names the one refused."""
        return registry.check_topic_configs(
            configs, self.config.log_config(), topic,
            tiered_storage=self.config.remote_log_storage_system_enable)

    def _create_topics(self, ctx: RequestContext, body: dict):
        results, to_create = [], []
        layers = self._layers(None)         # the cluster's view of new topics' defaults
        named = Counter(t["name"] for t in body["topics"])
        for t in body["topics"]:
            name = t["name"]
            out = {"name": name, "error_code": 0, "error_message": None,
                   "num_partitions": -1, "replication_factor": -1, "configs": []}
            results.append(out)
            try:
                if named[name] > 1:
                    # Kafka refuses every entry of a name given twice and
                    # creates none of them (KafkaApis, "Duplicate topic")
                    raise errors.InvalidRequestError(f"topic {name!r} is named more than once "
                                                      f"in the request")
                validate_topic_name(name)
                if name in INTERNAL_TOPICS:
                    # Kafka's answer for its own internal metadata topic
                    raise errors.InvalidRequestError(
                        f"creation of internal topic {name} is prohibited")
                if name in self.metadata.topics or name in [n for n, *_ in to_create]:
                    raise errors.TopicAlreadyExistsError(f"topic {name!r} already exists")
                assignments = None
                if t.get("assignments"):
                    if t.get("num_partitions", -1) != -1 or t.get("replication_factor", -1) != -1:
                        raise errors.InvalidRequestError(
                            "with replica assignments, num_partitions and replication_factor "
                            "must both be -1")
                    assignments = self._assignments(t["assignments"], 0)
                    n, rf = len(assignments), len(assignments[0])
                else:
                    rf = self._replication_factor(t.get("replication_factor", -1))
                    n = t.get("num_partitions", -1)
                    n = self.config.default_partitions if n == -1 else n
                if not 1 <= n <= MAX_PARTITIONS_PER_TOPIC:
                    raise errors.InvalidPartitionsError(
                        f"number of partitions must be 1 to {MAX_PARTITIONS_PER_TOPIC}, not {n}")
                configs = self._validated_configs(
                    {c["name"]: c["value"] for c in t.get("configs") or []}, name)
                effective = registry.effective_log_config(self.config, layers, configs)
                if effective.min_insync_replicas > rf:
                    log.warning("topic %s: min.insync.replicas %d is more than its %d replicas; "
                                "acks=all produces will be refused", name,
                                effective.min_insync_replicas, rf)
                out["num_partitions"], out["replication_factor"] = n, rf
                # CreateTopics v5+: the new topic's configs, as DescribeConfigs has them
                out["configs"] = [
                    {k: e[k] for k in ("name", "value", "read_only", "config_source",
                                       "is_sensitive")}
                    for e in registry.describe_topic(configs, effective, layers)]
                to_create.append((name, n, configs, out, rf, assignments))
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        by_broker: dict = {}
        if not body.get("validate_only"):
            for name, n, configs, out, rf, assignments in to_create:
                out["topic_id"] = self._create(by_broker, name, n, configs, rf,
                                               assignments).topic_id
            self._tell_partition_counts(by_broker, {name: self.partition_count(name)
                                                    for name, *_ in to_create})

        def respond(results_of_brokers: list, timed_out: bool) -> dict:
            failed = _failed(results_of_brokers)
            for name, n, configs, out, *_ in to_create:
                if name in failed and out["error_code"] == 0 and name in self.metadata.topics:
                    exc = _open_error(failed[name], n)
                    log.error("creating topic %s failed: %s", name, exc.message)
                    self._undo_create(name)
                    out["error_code"], out["error_message"] = exc.code, exc.message
                    out["num_partitions"] = out["replication_factor"] = -1
                    out["configs"] = []
            if timed_out:
                for out in results:
                    if out["error_code"] == 0:
                        out["error_code"] = errors.RequestTimedOutError.code
                        out["error_message"] = "the workers did not confirm in time"
            return {"throttle_time_ms": 0, "topics": results}

        return self._send(ctx, by_broker, respond, body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))

    def _delete_topics(self, ctx: RequestContext, body: dict):
        # v6 names a topic by name or by id (KIP-516), never both
        entries = [(name, None) for name in body.get("topic_names") or []] + [
            (t.get("name"), t.get("topic_id")) for t in body.get("topics") or []]
        by_id = {t.topic_id: t.name for t in self.metadata.topics.values()}
        results, by_broker, deleted = [], {}, {}
        for name, topic_id in entries:
            given_id = topic_id is not None and topic_id != NO_TOPIC_ID
            out = {"name": name, "error_code": 0, "error_message": None}
            if given_id:
                out["topic_id"] = topic_id
            results.append(out)
            try:
                if given_id and name:
                    raise errors.InvalidRequestError("a topic name and a topic id can not both "
                                                      "be given")
                if given_id:
                    name = out["name"] = by_id.get(topic_id)
                    if name is None:
                        raise errors.UnknownTopicIdError(f"no topic has id {topic_id}")
                if not name:
                    raise errors.InvalidRequestError("neither a topic name nor a topic id")
                _refuse_internal(name, "delete")
                topic = self.metadata.delete_topic(name)
                log.info("topic %s deleted (%d partition(s))", name, len(topic.partitions))
                out["topic_id"] = topic.topic_id
                self.topic_deleted(topic.topic_id)
                self._delete_replicas(by_broker, [(topic, i) for i in range(len(topic.partitions))])
                deleted[name] = 0
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        self._tell_partition_counts(by_broker, deleted)
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
                topic = self.metadata.get(t["name"])
                assignments = None
                if t.get("assignments"):
                    assignments = self._assignments(
                        [{"broker_ids": a["broker_ids"]} for a in t["assignments"]],
                        len(topic.partitions))
                    if len(assignments) != t["count"] - len(topic.partitions):
                        raise errors.InvalidReplicaAssignmentError(
                            f"{len(assignments)} assignments for "
                            f"{t['count'] - len(topic.partitions)} new partitions")
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
                             self.metadata.add_partitions(t["name"], t["count"], len(self.brokers),
                                                          assignments))
                log.info("topic %s: partitions %d -> %d", t["name"], before, t["count"])
                grown[t["name"]] = (before, out)
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        self._tell_partition_counts(by_broker, {name: self.partition_count(name) for name in grown})

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
    #
    # What each config is (type, default, scope, synonyms, sensitivity) and
    # the rules of the three config APIs are config_registry.py's; here is
    # where the values are: topics' own configs and the dynamic broker
    # configs in the metadata (``broker_configs``: "" for the cluster-wide
    # defaults, a broker id for its own), the server's settings, and what
    # the brokers are (ids, listeners, racks).

    def _broker_info(self, broker_id: int) -> registry.BrokerInfo:
        """One broker's own read-only configs: its listeners as it binds
        and advertises them, its rack, and the node's native address."""
        native = self.controller_node(Listener.NATIVE)
        bind, told = [], []
        for spec in kafka_listeners(self.config):
            if broker_id == KAFKA_CONTROLLER_ID:
                host, port = self.kafka_listeners.get(spec.name, (None, self.kafka_port))
                endpoint = (host or self.config.public_host, port)
                bind_host = spec.host
            else:
                b = self.brokers[broker_id]
                endpoint = self._kafka_endpoint(b, spec.name if b.kafka_listeners else None)
                bind_host = b.host or spec.host
            if endpoint is None:
                continue
            bind.append(f"{spec.name}://{_bracket(bind_host)}:{endpoint[1]}")
            told.append(f"{spec.name}://{_bracket(endpoint[0])}:{endpoint[1]}")
        return registry.BrokerInfo(broker_id, ",".join(bind), ",".join(told),
                                   self.racks.get(broker_id),
                                   f"{_bracket(native['host'])}:{native['port']}")

    def _broker_id(self, resource_name: str) -> int | None:
        """A broker resource's id (None: "", the cluster-wide defaults);
        INVALID_REQUEST for anything else than a broker of this cluster, as
        Kafka answers a name that is not its own id."""
        if resource_name == "":
            return None
        try:
            broker_id = int(resource_name)
        except ValueError:
            raise errors.InvalidRequestError(
                f"Broker id must be an integer, but it is: {resource_name}") from None
        if broker_id != KAFKA_CONTROLLER_ID and not 0 <= broker_id < len(self.brokers):
            raise errors.InvalidRequestError(
                f"Unexpected broker id {resource_name}: the brokers are 0.."
                f"{len(self.brokers) - 1} and {KAFKA_CONTROLLER_ID} (or \"\" for every broker)")
        return broker_id

    def _layers(self, broker_id: int | None) -> registry.Layers:
        """Broker ``broker_id``'s config values by level (None: the cluster's
        view, without any one broker's dynamic or own configs)."""
        dynamic = self.metadata.broker_configs
        info = None if broker_id is None else self._broker_info(broker_id)
        return registry.Layers(
            dict(dynamic.get(str(broker_id), {})) if broker_id is not None else {},
            dict(dynamic.get("", {})), registry.static_configs(self.config, info))

    def _dynamic_topic_defaults(self, broker_id: int | None) -> dict[str, str]:
        """The topic configs the dynamic broker configs set on that broker."""
        dynamic = self.metadata.broker_configs
        if not dynamic:
            return {}
        return {**registry.dynamic_topic_defaults(dynamic.get("", {})),
                **registry.dynamic_topic_defaults(
                    dynamic.get(str(broker_id), {}) if broker_id is not None else {})}

    def log_config(self, topic: TopicMetadata, broker_id: int | None = None):
        """``topic``'s effective LogConfig (on ``broker_id``; None: as the
        cluster-wide settings make it)."""
        return self.config.log_config({**self._dynamic_topic_defaults(broker_id),
                                       **topic.configs})

    def _config_entries(self, topic: TopicMetadata, keys, broker_id: int | None,
                        synonyms: bool, documentation: bool) -> list[dict]:
        """A topic's configs as broker ``broker_id`` (the one the client
        asked; None: the controller) has them, as Kafka's answering broker
        describes them with its own dynamic configs."""
        layers = self._layers(broker_id)
        effective = registry.effective_log_config(self.config, layers, topic.configs)
        return registry.describe_topic(topic.configs, effective, layers, keys, synonyms,
                                       documentation)

    def _broker_config_entries(self, resource_name: str, keys, synonyms: bool = False,
                               documentation: bool = False) -> list[dict]:
        """A broker's configs: every broker config with its source, as
        Kafka's DescribeConfigs of a broker id; for "", the cluster-wide
        dynamic defaults, as Kafka's. Both carry kafkalite's native
        bootstrap address (``NATIVE_BOOTSTRAP_CONFIG``: every broker and the
        controller answer the same, the one address of this controller), by
        which kafkalite's clients given a Kafka listener's address find the
        native port (protocol/native.py, client/bootstrap.py)."""
        broker_id = self._broker_id(resource_name)
        if broker_id is not None:
            return registry.describe_broker(self._layers(broker_id), keys, synonyms,
                                            documentation)
        layers = self._layers(None)
        entries = registry.describe_broker(layers, keys, synonyms, documentation,
                                           cluster_default=True)
        native = self._broker_info(KAFKA_CONTROLLER_ID).native_bootstrap
        entries += registry.describe_broker(
            registry.Layers({}, {}, {NATIVE_BOOTSTRAP_CONFIG: native}),
            [NATIVE_BOOTSTRAP_CONFIG], synonyms, documentation)
        return [e for e in entries if not keys or e["name"] in keys]

    def _describe_configs(self, ctx: RequestContext, body: dict):
        synonyms = bool(body.get("include_synonyms"))
        documentation = bool(body.get("include_documentation"))
        # the broker the client addressed, whose dynamic configs a topic's
        # values include (a request to this process: the cluster's defaults)
        via = ctx.relayed_from if ctx.relayed_from is not None \
            and 0 <= ctx.relayed_from < len(self.brokers) else None
        results = []
        for r in body["resources"]:
            out = {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                   "resource_name": r["resource_name"], "configs": []}
            try:
                keys = r.get("configuration_keys")
                if r["resource_type"] == ConfigResourceType.BROKER:
                    out["configs"] = self._broker_config_entries(r["resource_name"], keys,
                                                                 synonyms, documentation)
                elif r["resource_type"] == ConfigResourceType.TOPIC:
                    topic = self.metadata.get(r["resource_name"])
                    out["configs"] = self._config_entries(topic, keys, via, synonyms,
                                                          documentation)
                else:
                    raise errors.InvalidRequestError(
                        f"unsupported resource type {r['resource_type']}: kafkalite describes "
                        f"topic ({int(ConfigResourceType.TOPIC)}) and broker "
                        f"({int(ConfigResourceType.BROKER)}) configs")
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
            results.append(out)
        return {"throttle_time_ms": 0, "results": results}

    def _apply_configs(self, ctx: RequestContext, body: dict, new_configs):
        """Both Alter APIs: ``new_configs(resource, current, is_topic,
        default_of)`` -> the resource's configs as they become (``default_of``:
        a config's value where the resource has none of its own). Topic
        configs are checked as CreateTopics checks them (INVALID_CONFIG),
        broker configs as Kafka's DynamicBrokerConfig does
        (INVALID_REQUEST). Kafka's request-level rules first: a resource
        named twice, or a config twice in one resource, is INVALID_REQUEST."""
        responses, by_broker = [], {}
        named = [(r["resource_type"], r["resource_name"]) for r in body["resources"]]
        for r in body["resources"]:
            out = {"error_code": 0, "error_message": None, "resource_type": r["resource_type"],
                   "resource_name": r["resource_name"]}
            responses.append(out)
            try:
                if named.count((r["resource_type"], r["resource_name"])) > 1:
                    raise errors.InvalidRequestError("Each resource must appear at most once.")
                names = [c["name"] for c in r["configs"]]
                if len(set(names)) != len(names):
                    raise errors.InvalidRequestError("Error due to duplicate config keys")
                if r["resource_type"] == ConfigResourceType.TOPIC:
                    self._alter_topic_configs(r, body.get("validate_only"), new_configs,
                                              by_broker)
                elif r["resource_type"] == ConfigResourceType.BROKER:
                    self._alter_broker_configs(r, body.get("validate_only"), new_configs,
                                               by_broker)
                else:
                    raise errors.InvalidRequestError(
                        f"unsupported resource type {r['resource_type']}: kafkalite alters "
                        f"topic ({int(ConfigResourceType.TOPIC)}) and broker "
                        f"({int(ConfigResourceType.BROKER)}) configs")
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        return self._send(ctx, by_broker,
                          lambda _, timed_out: {"throttle_time_ms": 0, "responses": responses})

    def _alter_topic_configs(self, r: dict, validate_only: bool, new_configs,
                             by_broker: dict) -> None:
        name = r["resource_name"]
        _refuse_internal(name, "alter")
        topic = self.metadata.get(name)
        cluster_view = self.config.log_config(self._dynamic_topic_defaults(None)).to_properties()
        configs = registry.check_topic_configs(
            new_configs(r, dict(topic.configs), True, cluster_view.get), self.config.log_config(),
            name, topic.configs, tiered_storage=self.config.remote_log_storage_system_enable)
        if validate_only:
            return
        before = dict(topic.configs)
        self.metadata.set_configs(topic.name, configs)
        log.info("topic %s: configs %s -> %s", topic.name, before or "{}", configs or "{}")
        self._assign(by_broker, topic, range(len(topic.partitions)))

    def _alter_broker_configs(self, r: dict, validate_only: bool, new_configs,
                              by_broker: dict) -> None:
        """Dynamic broker configs of one broker or ("") of every broker.
        Those that are topic defaults go to the brokers at once: every
        partition of a topic without its own value of one that changed is
        sent to its replicas on the brokers concerned with its new configs."""
        broker_id = self._broker_id(r["resource_name"])
        resource = "" if broker_id is None else str(broker_id)
        before = dict(self.metadata.broker_configs.get(resource, {}))

        def default_of(name: str):
            return registry.broker_config(name).default if registry.broker_config(name) else None
        configs = new_configs(r, dict(before), False, default_of)
        registry.check_broker_configs(configs, per_broker=broker_id is not None)
        if validate_only:
            return
        self.metadata.set_broker_configs(resource, configs)
        log.info("dynamic configs of %s: %s -> %s",
                 f"broker {broker_id}" if broker_id is not None else "every broker (default)",
                 registry.loggable(before, False) or "{}",
                 registry.loggable(configs, False) or "{}")
        old, new = registry.dynamic_topic_defaults(before), registry.dynamic_topic_defaults(configs)
        changed = {k for k in {*old, *new} if old.get(k) != new.get(k)}
        if not changed:
            return
        for topic in self.metadata.topics.values():
            if changed - set(topic.configs):
                self._assign(by_broker, topic, range(len(topic.partitions)), only=broker_id)

    def _alter_configs(self, ctx: RequestContext, body: dict):
        # Legacy AlterConfigs replaces the resource's whole set of configs.
        def replace(r, current, is_topic, default_of):
            nulls = [c["name"] for c in r["configs"] if c["value"] is None]
            if nulls:
                raise errors.InvalidRequestError(
                    f"Null value not supported for : {', '.join(nulls)}")
            return {c["name"]: c["value"] for c in r["configs"]}
        return self._apply_configs(ctx, body, replace)

    def _incremental_alter_configs(self, ctx: RequestContext, body: dict):
        def apply(r, current, is_topic, default_of):
            nulls = [c["name"] for c in r["configs"]
                     if c["value"] is None and c["config_operation"] != AlterConfigOp.DELETE]
            if nulls:
                raise errors.InvalidRequestError(
                    f"Null value not supported for : {', '.join(nulls)}")
            for c in r["configs"]:
                op, name, value = c["config_operation"], c["name"], c["value"]
                if op == AlterConfigOp.SET:
                    current[name] = value
                elif op == AlterConfigOp.DELETE:
                    current.pop(name, None)
                elif op in (AlterConfigOp.APPEND, AlterConfigOp.SUBTRACT):
                    if not registry.is_list(is_topic, name):
                        raise errors.InvalidConfigurationError(
                            f"Can't {AlterConfigOp(op).name} to key {name} because its type is "
                            f"not LIST.")
                    # from the resource's own value, else the one it has now
                    # (a topic: the server's default; SUBTRACTing the last
                    # cleanup.policy leaves an empty list, as Kafka 4 allows)
                    start = current[name] if name in current else (default_of(name) or "")
                    items = [v.strip() for v in start.split(",") if v.strip()]
                    for v in (x.strip() for x in value.split(",")):
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
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "endpoint_type": EndpointType.BROKER, "cluster_id": self.metadata.cluster_id,
                "controller_id": self.controller_id(ctx.listener, ctx.listener_name),
                "brokers": [{"broker_id": b["node_id"], "host": b["host"], "port": b["port"],
                             "rack": None}
                            for b in self.live_brokers(ctx.listener, ctx.listener_name)],
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

        def serve(name, topic, pd, out):
            if name in INTERNAL_TOPICS:
                raise errors.InvalidTopicError(f"cannot append to internal topic {name}")
            raise errors.NotLeaderOrFollowerError(
                f"node {node} leads no partition of {name}; ask Metadata for the leader")

        topics = each_partition(PRODUCE, body["topic_data"], serve, produce_blank)
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
