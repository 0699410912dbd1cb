"""Partitions: who leads, who is in sync, where the replicas are, and
how the brokers hear of it (Kafka's ReplicationControlManager).

Replication (one host): a partition may have several replicas on distinct
brokers; the controller decides who leads and who is in sync, the brokers
replicate (replica_fetcher.py). When a broker's process dies
(``broker_fenced``) every partition it led gets a new leader from the
in-sync replicas still alive (a new leader epoch; with
``unclean.leader.election.enable`` any live replica when none in sync is
left, else the partition stays offline until an in-sync one returns), and
it leaves the ISR of the partitions it followed. A leader proposes ISR
changes (``alter_partition``: a follower fell behind, or caught up) against
the partition epoch it knows; a proposal against an older one is refused
and the leader is sent the current state. Every decision goes to every
live replica as an ``assign`` naming the leader, so followers follow the
right broker and a deposed leader steps down. ElectLeaders, Kafka's
auto.leader.rebalance (``rebalance_leaders``) and reassignment (KIP-455:
AlterPartitionReassignments, ListPartitionReassignments) are here too.

The brokers hear of decisions through the ``BrokerChannel`` the supervisor
provides (its control channel to the workers): ``assign``, ``unassign``
and ``topics`` messages, built per broker (``by_broker``) by ``assign``,
``delete_replicas`` and ``tell_partition_counts`` and sent by ``notify``
(no one waits) or ``send`` (a request is answered once the brokers
confirm). A partition that a broker could not open is offline
(``offline``, from ``partitions_opened``) until a later assign opens it.
An elected leader is ``unconfirmed`` until its broker answers the assign
leading at that epoch (``leaderships_applied``): Metadata names no leader
for the partition meanwhile.

Which process runs it: the supervisor holding the controller, on its
single thread, through controller.py's ``Controller``. It reads the broker
registrations (cluster_control.py, passed in), places replicas with
placement.py's ``ReplicaPlacer`` (passed in), and imports
config_control.py's read side (a topic's effective configs) and
metadata.py.
"""
from __future__ import annotations

import logging
import os
import shutil
from typing import Callable, Protocol

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.server.controller.config_control import dynamic_topic_defaults, log_config
from kafkalite.server.controller.metadata import TopicMetadata, replica_dir
from kafkalite.server.topic import INTERNAL_TOPICS
from kafkalite.server.network.requests import DEFERRED, RequestContext

log = logging.getLogger("kafkalite.controller")

DEFAULT_ADMIN_TIMEOUT_MS = 30_000


class BrokerChannel(Protocol):
    """How the controller reaches its brokers (the supervisor's control channel)."""

    def send(self, by_broker: dict[int, dict], on_done: Callable[[list, bool], None],
             timeout_ms: int) -> None:
        """Send ``by_broker[i]`` to broker i; call ``on_done(results,
        timed_out)`` once all confirmed or ``timeout_ms`` passed. ``results``
        are the brokers' per-partition results of an assign: {"topic",
        "partition", "error" (a Kafka error code, 0 for none), "message"}."""

    def tell(self, by_broker: dict[int, dict]) -> None:
        """Send ``by_broker[i]`` to broker i, waiting for no confirmation."""


class ReplicationControl:
    """``cluster`` the ClusterControl (which brokers are fenced, their
    endpoints), ``placer`` the ReplicaPlacer, ``channel`` the BrokerChannel."""

    def __init__(self, config, metadata, cluster, placer, channel: BrokerChannel):
        self.config = config
        self.metadata = metadata
        self.cluster = cluster
        self.placer = placer
        self.channel = channel
        # (topic, partition) -> why its broker could not open it
        self.offline: dict[tuple[str, int], str] = {}
        # (topic, partition) -> (leader, leader epoch) of an election the new
        # leader has not confirmed yet: Metadata names no leader for it until
        # the broker says it leads (``leaderships_applied``)
        self.unconfirmed: dict[tuple[str, int], tuple[int, int]] = {}

    def broker_registered(self, broker_id: int, adopted: bool) -> list[dict]:
        """Broker ``broker_id`` registered (controller.py
        ``register_broker``): unless ``adopted``, it starts a new leadership
        of every partition it hosts, which the partitions' other live
        replicas follow. Returns the partitions to send it."""
        started = [] if adopted else self.metadata.start_leadership(broker_id)
        log.info("broker %d registered on port %d; leading %d partitions", broker_id,
                 self.cluster.brokers[broker_id].port, len(started))
        # The other live replicas of what it leads again follow its new epoch.
        by_broker: dict = {}
        for name, i, _ in started:
            topic = self.metadata.topics[name]
            if len(topic.partitions[i].replicas) > 1:
                self.assign(by_broker, topic, [i], skip=broker_id, fenced_too=True)
        self.notify(by_broker)
        return [self.partition_spec(t, i, broker_id)
                for t, i, _ in self.metadata.hosted_by(broker_id)]

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
                if (old in self.cluster.gone and broker_id in p.isr and len(p.replicas) > 1
                        and self._elect(topic, i, exclude=old)):
                    changed.add(topic.name)
                    self.assign(by_broker, topic, [i], skip=old, fenced_too=True)
        if changed:
            self.metadata.save(sorted(changed))
        self.notify(by_broker)

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

    def leaderships_applied(self, broker_id: int, results: list) -> None:
        """A broker's per-partition results of an assign (each with the
        leader and leader epoch it now holds): the elections it confirms
        leading at their epoch (or a later one) are served in Metadata.

        Why wait: until the new leader's process applied the assign it
        answers NOT_LEADER_OR_FOLLOWER, and a client sent there by Metadata
        can have its retried first batch refused while a later batch of the
        same producer, pipelined behind it, arrives after the assign and is
        written -- a leader with no state for that producer takes any first
        sequence (Kafka's rule, after retention or DeleteRecords). An
        idempotent producer then counts the refused batch delivered by the
        later one's success (librdkafka does), and those records are lost.
        A Kafka broker answers Metadata from the metadata it loaded itself,
        which leaves that window as wide as the brokers' lag behind each
        other; here the controller answers, and it names a leader only
        once that leader applied the election."""
        if not self.unconfirmed:
            return
        for r in results:
            key = (r["topic"], r["partition"])
            elected = self.unconfirmed.get(key)
            if (elected is not None and not r.get("error") and elected[0] == broker_id
                    and r.get("leader") == broker_id
                    and r.get("leader_epoch", -1) >= elected[1]):
                del self.unconfirmed[key]

    def broker_fenced(self, broker_id: int) -> None:
        """``broker_id``'s process is gone (cluster_control.py fenced it):
        elect new leaders for what it led and take it out of the ISRs it
        was in."""
        by_broker: dict = {}
        changed = set()
        for topic in self.metadata.topics.values():
            for i, p in enumerate(topic.partitions):
                if len(p.replicas) < 2 or broker_id not in p.replicas:
                    continue
                if p.leader == broker_id:
                    if self._elect(topic, i, exclude=broker_id):
                        changed.add(topic.name)
                        self.assign(by_broker, topic, [i], skip=broker_id, fenced_too=True)
                elif broker_id in p.isr:
                    p.isr = [b for b in p.isr if b != broker_id]
                    p.partition_epoch += 1
                    changed.add(topic.name)
                    self.assign(by_broker, topic, [i], skip=broker_id, fenced_too=True)
        if changed:
            self.metadata.save(sorted(changed))
        self.notify(by_broker)

    def _elect(self, topic: TopicMetadata, index: int, exclude: int = -1) -> bool:
        """Move the leadership of a partition whose leader is gone to a live
        in-sync replica (or, if the topic allows unclean election, to any
        live replica); returns whether a leader was found. Without one the
        partition keeps its dead leader and ISR: it is offline until one of
        them comes back, which then leads with everything it had."""
        p = topic.partitions[index]
        live = [b for b in p.replicas if b != exclude and not self.cluster.brokers[b].fenced]
        candidates = [b for b in live if b in p.isr]
        unclean = False
        if not candidates and live and log_config(self.config, self.metadata.broker_configs,
                                                  topic).unclean_leader_election_enable:
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
        self.unconfirmed[(topic.name, index)] = (leader, p.leader_epoch)
        log.warning("%s-%d: broker %d leads at epoch %d%s (isr %s)", topic.name, index, leader,
                    p.leader_epoch, " after an UNCLEAN election" if unclean else "", p.isr)

    def _elect_one(self, topic: TopicMetadata, index: int, election_type: int) -> None:
        """ElectLeaders for one partition: the preferred replica (the first)
        if it is alive and in sync, or (unclean, type 1) a live replica for
        a partition without a live leader. Raises the partition's error."""
        p = topic.partitions[index]
        if election_type == 0:
            preferred = p.replicas[0]
            if p.leader == preferred and not self.cluster.brokers[preferred].fenced:
                raise errors.ElectionNotNeededError(
                    f"{topic.name}-{index}: broker {preferred} leads already")
            if self.cluster.brokers[preferred].fenced or preferred not in p.isr:
                raise errors.PreferredLeaderNotAvailableError(
                    f"{topic.name}-{index}: preferred replica {preferred} is "
                    f"{'down' if self.cluster.brokers[preferred].fenced else 'not in sync'}")
            self._move_leader(topic, index, preferred)
        elif election_type == 1:
            if not self.cluster.brokers[p.leader].fenced:
                raise errors.ElectionNotNeededError(
                    f"{topic.name}-{index}: broker {p.leader} leads it")
            live = [b for b in p.replicas if not self.cluster.brokers[b].fenced]
            if not live:
                raise errors.EligibleLeadersNotAvailableError(
                    f"{topic.name}-{index}: no replica of {p.replicas} is alive")
            in_sync = [b for b in live if b in p.isr]
            self._move_leader(topic, index, (in_sync or live)[0], unclean=not in_sync)
        else:
            raise errors.InvalidRequestError(f"unknown election type {election_type}")

    def elect_leaders(self, ctx: RequestContext, body: dict):
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
                    self.assign(by_broker, topic, [i], fenced_too=True)
                except KafkaError as exc:
                    r["error_code"], r["error_message"] = exc.code, exc.message
        if changed:
            self.metadata.save(sorted(changed))
        self.notify(by_broker)
        return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": results}

    # ---- reassignment (KIP-455) --------------------------------------------------------------

    def alter_partition_reassignments(self, ctx: RequestContext, body: dict):
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
                        target = self.placer.assignments([{"broker_ids": entry["replicas"]}], 0)[0]
                        current = topic.partitions[i]
                        if (not body.get("allow_replication_factor_change", True)
                                and len(target) != len(current.replicas)):
                            # v1 (KIP-860), Kafka's message
                            raise errors.InvalidReplicationFactorError(
                                f"The replication factor is changed from "
                                f"{len(current.replicas)} to {len(target)} but "
                                f"allowReplicationFactorChange is false")
                        self._start_reassignment(by_broker, topic, i, target)
                    changed.add(topic.name)
                except KafkaError as exc:
                    r["error_code"], r["error_message"] = exc.code, exc.message
        if changed:
            self.metadata.save(sorted(changed))
        self.notify(by_broker)
        return {"throttle_time_ms": 0, "error_code": 0, "error_message": None,
                "allow_replication_factor_change": body.get("allow_replication_factor_change",
                                                            True),
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
            self.assign(then, topic, [i], fenced_too=True)
            if self.cluster.brokers[old].fenced:
                self.notify(then)
            else:
                self.channel.send(
                    {old: {"type": "unassign", "delete": False, "partitions": [
                        {"topic": topic.name, "partition": i,
                         "dir": replica_dir(topic.name, i, old, False)}]}},
                    lambda results, timed_out: self.notify(then), DEFAULT_ADMIN_TIMEOUT_MS)
            return
        p.adding = [b for b in target if b not in p.replicas]
        p.removing = [b for b in p.replicas if b not in target]
        p.replicas = list(target) + p.removing
        p.partition_epoch += 1
        log.info("%s-%d: reassigning to %s (adding %s, removing %s)", topic.name, i, target,
                 p.adding, p.removing)
        if not self._complete_reassignment(by_broker, topic, i):
            self.assign(by_broker, topic, [i], fenced_too=True)

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
            live = [b for b in target if b in p.isr and not self.cluster.brokers[b].fenced]
            self._move_leader(topic, i, live[0] if live else target[0])
        log.info("%s-%d: reassignment done: replicas %s, isr %s", topic.name, i, p.replicas,
                 p.isr)
        self.assign(by_broker, topic, [i], fenced_too=True)
        for b in removed:
            where = replica_dir(topic.name, i, b, p.per_broker_dir, p.shared_owner)
            if b == p.shared_owner:
                p.shared_owner = None       # its log is deleted: no replica has it
            if self.cluster.brokers[b].fenced:
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
        self.assign(by_broker, topic, [i], fenced_too=True)
        for b in dropped:
            where = replica_dir(topic.name, i, b, p.per_broker_dir, p.shared_owner)
            by_broker.setdefault(b, {"type": "unassign", "delete": True, "partitions": []})[
                "partitions"].append({"topic": topic.name, "partition": i, "dir": where})

    def list_partition_reassignments(self, ctx: RequestContext, body: dict):
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
                        and not self.cluster.brokers[preferred].fenced):
                    self._move_leader(topic, i, preferred)
                    self.assign(by_broker, topic, [i], fenced_too=True)
                    changed.add(topic.name)
                    moved += 1
        if changed:
            self.metadata.save(sorted(changed))
        self.notify(by_broker)
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
                    and not any(self.cluster.brokers[b].fenced for b in joining)):
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
            self.assign(by_broker, topic, [i], only=broker_id)
        if changed:
            self.metadata.save(sorted(changed))
        self.notify(by_broker)

    def resend(self, broker_id: int, items: list[dict]) -> None:
        """A broker asks again for partitions it believes stale (its leader
        answers with a newer epoch than it was told of)."""
        by_broker: dict = {}
        for item in items:
            topic = self.metadata.topics.get(item["topic"])
            if topic is not None and 0 <= item["partition"] < len(topic.partitions) \
                    and broker_id in topic.partitions[item["partition"]].replicas:
                self.assign(by_broker, topic, [item["partition"]], only=broker_id,
                            fenced_too=True)
        self.notify(by_broker)

    def notify(self, by_broker: dict) -> None:
        """Send decisions no request waits for (elections, ISR changes)."""
        if by_broker:
            self.channel.send(by_broker, lambda results, timed_out: None,
                              DEFAULT_ADMIN_TIMEOUT_MS)

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
                "configs": {**dynamic_topic_defaults(self.metadata.broker_configs, broker),
                            **topic.configs}}

    def partition_counts(self) -> dict[str, int]:
        """Every topic's partition count: what a (re)started broker is told."""
        return {name: len(t.partitions) for name, t in self.metadata.topics.items()}

    def tell_partition_counts(self, by_broker: dict, counts: dict[str, int]) -> None:
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
        for registration in self.cluster.brokers:
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
        return None if self.cluster.brokers[leader].fenced else leader

    def send(self, ctx: RequestContext, by_broker: dict[int, dict], respond,
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

    def unassign(self, partitions: list[tuple[TopicMetadata, int]]) -> None:
        """Tell the replicas to close and delete ``partitions`` (no one waits)."""
        by_broker: dict = {}
        self.delete_replicas(by_broker, partitions)
        self.notify(by_broker)

    def delete_replicas(self, by_broker: dict, partitions) -> None:
        """Unassign-and-delete messages for every replica of ``partitions``;
        the logs of replicas on brokers that are down are removed here (their
        process is gone, and it is sent only the partitions that exist when
        it comes back)."""
        for topic, i in partitions:
            p = topic.partitions[i]
            self.offline.pop((topic.name, i), None)
            self.unconfirmed.pop((topic.name, i), None)
            for b in p.replicas:
                where = replica_dir(topic.name, i, b, p.per_broker_dir, p.shared_owner)
                if self.cluster.brokers[b].fenced and b != p.leader:
                    shutil.rmtree(os.path.join(self.config.data_dir, where), ignore_errors=True)
                    continue
                # the partition is gone: a tiered one's remote segments too
                msg = by_broker.setdefault(b, {"type": "unassign", "delete": True,
                                               "delete_remote": True, "partitions": []})
                msg["partitions"].append({"topic": topic.name, "partition": i, "dir": where})

    def assign(self, by_broker: dict, topic: TopicMetadata, indexes, *, skip: int = -1,
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
                if b != p.leader and self.cluster.brokers[b].fenced and not fenced_too:
                    continue
                msg = by_broker.setdefault(b, {"type": "assign", "partitions": [],
                                               "brokers": self.cluster.broker_endpoints()})
                msg["partitions"].append(self.partition_spec(topic, i, b))
