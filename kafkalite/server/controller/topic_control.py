"""Topics: CreateTopics, DeleteTopics and CreatePartitions (in Kafka,
ReplicationControlManager's createTopics, deleteTopics and
createPartitions; here a module of their own, as they are the admin APIs'
largest part and the rest of replication does not need them).

A topic is created (or grows) in the metadata first, then every broker
involved is sent its new partitions, and the request is answered only when
they all confirmed, so a client that creates a topic can produce to it at
once. The brokers confirm with a result per partition: a topic (or new
partitions) that a broker could not open (out of file descriptors, disk)
is answered with that error and undone, so that CreateTopics and
CreatePartitions never report a success that is not there.

Internal topics (metadata.INTERNAL_TOPICS) are the broker's: no client may
create them (INVALID_REQUEST, as Kafka answers for its own metadata topic),
delete or grow them (TOPIC_AUTHORIZATION_FAILED).

Which process runs it: the supervisor holding the controller, on its
single thread, through controller.py's ``Controller``. It works through
the other managers, passed in: cluster_control.py's (how many brokers),
placement.py's (where replicas go), replication_control.py's (the assigns
to send) and config_control.py's (a new topic's configs); it imports
metadata.py and replication_control.py's timeout.
"""
from __future__ import annotations

import logging
import uuid
from collections import Counter
from typing import Callable

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.server import config_registry as registry
from kafkalite.server.controller.metadata import TopicMetadata
from kafkalite.server.topic import INTERNAL_TOPICS, refuse_internal, validate_topic_name
from kafkalite.server.controller.replication_control import DEFAULT_ADMIN_TIMEOUT_MS
from kafkalite.server.network.requests import RequestContext

NO_TOPIC_ID = uuid.UUID(int=0)      # Kafka's Uuid.ZERO_UUID: a topic named by name

log = logging.getLogger("kafkalite.controller")

# Each partition is a directory and open files in one worker; a bound keeps
# one request (or a fuzzed one) from asking for millions.
MAX_PARTITIONS_PER_TOPIC = 10_000


def failed_partitions(results: list) -> dict[str, list[dict]]:
    """The partitions a broker could not open, by topic."""
    out: dict[str, list[dict]] = {}
    for r in results:
        if r.get("error"):
            out.setdefault(r["topic"], []).append(r)
    return out


def open_error(failed: list[dict], total: int) -> KafkaError:
    """The error of a topic some of whose ``total`` new partitions could not be opened."""
    first = min(failed, key=lambda r: r["partition"])
    cls = errors.error_for_code(first["error"])
    return cls(f"{len(failed)} of {total} partition(s) could not be opened, so the change was "
               f"undone; partition {first['partition']}: {first.get('message') or cls.__name__}")


class TopicControl:
    """``cluster``, ``placer``, ``replication`` and ``configs``: the other
    managers. ``partitions_added(topic)`` is called once the brokers serve
    a topic's new partitions (groups consuming it rebalance);
    ``topic_deleted(topic_id)`` when a topic is deleted (the share
    coordinator drops its state)."""

    def __init__(self, config, metadata, cluster, placer, replication, configs, *,
                 partitions_added: Callable[[str], None] = lambda topic: None):
        self.config = config
        self.metadata = metadata
        self.cluster = cluster
        self.placer = placer
        self.replication = replication
        self.configs = configs
        self.partitions_added = partitions_added
        # a topic was deleted (its id): the share coordinator drops its state
        self.topic_deleted: Callable[[object], None] = lambda topic_id: None

    def undo_create(self, name: str) -> None:
        """Delete a topic whose partitions could not all be opened."""
        topic = self.metadata.delete_topic(name)
        log.warning("topic %s deleted again: its partitions could not all be opened", name)
        self.replication.unassign([(topic, i) for i in range(len(topic.partitions))])

    # ---- topics ------------------------------------------------------------------------------

    def create(self, by_broker: dict, name: str, partitions: int, configs: dict,
               replication_factor: int | None = None, assignments=None) -> TopicMetadata:
        rf = self.config.default_replication_factor if replication_factor is None \
            else replication_factor
        rf = min(rf, len(self.cluster.brokers))
        if not assignments and rf > 1 and len(set(self.cluster.racks.values())) > 1:
            assignments = self.placer.rack_aware(name, partitions, rf)
        topic = self.metadata.create_topic(name, partitions, configs, len(self.cluster.brokers),
                                           rf, assignments)
        log.info("topic %s created: %d partition(s), replication factor %d%s", name,
                 len(topic.partitions), len(topic.partitions[0].replicas) if topic.partitions else 0,
                 f", configs {configs}" if configs else "")
        self.replication.assign(by_broker, topic, range(len(topic.partitions)))
        return topic

    def create_topics(self, ctx: RequestContext, body: dict):
        results, to_create = [], []
        layers = self.configs.layers(None)         # the cluster's view of new topics' defaults
        named = Counter(t["name"] for t in body["topics"])
        for t in body["topics"]:
            name = t["name"]
            out = {"name": name, "error_code": 0, "error_message": None,
                   "num_partitions": -1, "replication_factor": -1, "configs": []}
            results.append(out)
            try:
                to_create.append(self._new_topic(t, named, to_create, layers, out))
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        by_broker: dict = {}
        if not body.get("validate_only"):
            for name, n, configs, out, rf, assignments in to_create:
                out["topic_id"] = self.create(by_broker, name, n, configs, rf,
                                              assignments).topic_id
            self.replication.tell_partition_counts(
                by_broker, {name: self.replication.partition_count(name)
                            for name, *_ in to_create})

        def respond(results_of_brokers: list, timed_out: bool) -> dict:
            failed = failed_partitions(results_of_brokers)
            for name, n, configs, out, *_ in to_create:
                if name in failed and out["error_code"] == 0 and name in self.metadata.topics:
                    exc = open_error(failed[name], n)
                    log.error("creating topic %s failed: %s", name, exc.message)
                    self.undo_create(name)
                    out["error_code"], out["error_message"] = exc.code, exc.message
                    out["num_partitions"] = out["replication_factor"] = -1
                    out["configs"] = []
            if timed_out:
                for out in results:
                    if out["error_code"] == 0:
                        out["error_code"] = errors.RequestTimedOutError.code
                        out["error_message"] = "the workers did not confirm in time"
            return {"throttle_time_ms": 0, "topics": results}

        return self.replication.send(ctx, by_broker, respond,
                                     body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))

    def _new_topic(self, t: dict, named: Counter, to_create: list, layers, out: dict) -> tuple:
        """One CreateTopics entry checked (KafkaError if refused) and its answer
        ``out`` filled: (name, partitions, configs, out, replication factor,
        assignments or None) for ``to_create``."""
        name = t["name"]
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
            assignments = self.placer.assignments(t["assignments"], 0)
            n, rf = len(assignments), len(assignments[0])
        else:
            rf = self.placer.replication_factor(t.get("replication_factor", -1))
            n = t.get("num_partitions", -1)
            n = self.config.default_partitions if n == -1 else n
        if not 1 <= n <= MAX_PARTITIONS_PER_TOPIC:
            raise errors.InvalidPartitionsError(
                f"number of partitions must be 1 to {MAX_PARTITIONS_PER_TOPIC}, not {n}")
        configs = self.configs.validated_configs(
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
        return name, n, configs, out, rf, assignments

    def delete_topics(self, ctx: RequestContext, body: dict):
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
                refuse_internal(name, "delete")
                topic = self.metadata.delete_topic(name)
                log.info("topic %s deleted (%d partition(s))", name, len(topic.partitions))
                out["topic_id"] = topic.topic_id
                self.topic_deleted(topic.topic_id)
                self.replication.delete_replicas(
                    by_broker, [(topic, i) for i in range(len(topic.partitions))])
                deleted[name] = 0
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        self.replication.tell_partition_counts(by_broker, deleted)
        return self.replication.send(
            ctx, by_broker, lambda _, timed_out: {"throttle_time_ms": 0, "responses": results},
            body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))

    def create_partitions(self, ctx: RequestContext, body: dict):
        results, by_broker, grown = [], {}, {}
        for t in body["topics"]:
            out = {"name": t["name"], "error_code": 0, "error_message": None}
            results.append(out)
            try:
                refuse_internal(t["name"], "add partitions to")
                topic = self.metadata.get(t["name"])
                assignments = None
                if t.get("assignments"):
                    assignments = self.placer.assignments(
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
                self.replication.assign(
                    by_broker, topic, self.metadata.add_partitions(
                        t["name"], t["count"], len(self.cluster.brokers), assignments))
                log.info("topic %s: partitions %d -> %d", t["name"], before, t["count"])
                grown[t["name"]] = (before, out)
            except KafkaError as exc:
                out["error_code"], out["error_message"] = exc.code, exc.message
        self.replication.tell_partition_counts(
            by_broker, {name: self.replication.partition_count(name) for name in grown})

        def respond(results_of_brokers: list, timed_out: bool) -> dict:
            failed = failed_partitions(results_of_brokers)
            for name, (before, out) in grown.items():
                topic = self.metadata.topics.get(name)
                new = [r for r in failed.get(name, ()) if r["partition"] >= before]
                if new and topic is not None:
                    exc = open_error(new, len(topic.partitions) - before)
                    log.error("adding partitions to %s failed: %s", name, exc.message)
                    self.replication.unassign(
                        [(topic, i) for i in range(before, len(topic.partitions))])
                    self.metadata.remove_partitions(name, before)
                    out["error_code"], out["error_message"] = exc.code, exc.message
                else:
                    # once the brokers serve the new partitions, groups consuming them rebalance
                    self.partitions_added(name)
            return {"throttle_time_ms": 0, "results": results}

        return self.replication.send(ctx, by_broker, respond,
                                     body.get("timeout_ms", DEFAULT_ADMIN_TIMEOUT_MS))
