"""v3's resources: clusters, brokers, topics, partitions and their replicas.

Configs are v3_configs.py's, consumer groups (their consumers, lags and
assignments) v3_groups.py's; the shapes every v3 answer has are
cluster_view.py's.

Each handler first asks the user's ACLs what the Kafka request it makes
would ask (authorization.py): the AdminClient itself is the server's.

Who may call: the proxy's request threads (AdminClient serializes them).
"""
from __future__ import annotations

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.cluster_view import ClusterView
from kafkalite.rest_proxy.errors import (BAD_REQUEST, NOT_FOUND, TOPIC_ALREADY_EXISTS, ProxyError,
                                         from_kafka, topic_not_found)
from kafkalite.rest_proxy.http import Answer


class ClusterResources(ClusterView):
    """The v3 handlers of the cluster, its brokers, topics and partitions."""

    # ---- clusters and brokers -----------------------------------------------------------------

    def _cluster(self, req) -> dict:
        c = self.cluster_id()
        return {"kind": "KafkaCluster", "metadata": self.meta(req, c, c), "cluster_id": c,
                "controller": self.related(req, f"{c}/brokers/{self.controller()}"),
                "acls": self.related(req, f"{c}/acls"),
                "brokers": self.related(req, f"{c}/brokers"),
                "broker_configs": self.related(req, f"{c}/broker-configs"),
                "consumer_groups": self.related(req, f"{c}/consumer-groups"),
                "topics": self.related(req, f"{c}/topics"),
                "partition_reassignments": self.related(req, f"{c}/topics/-/partitions/-/"
                                                               f"reassignment")}

    def _controller(self) -> int:
        meta = self.metadata()
        return meta.controller_id if meta.controller_id >= 0 else min(meta.brokers, default=0)

    def list_clusters(self, req) -> Answer:
        return Answer(200, self.listing(req, "KafkaCluster", [self._cluster(req)]))

    def get_cluster(self, req, cluster_id) -> Answer:
        self.check(cluster_id)
        return Answer(200, self._cluster(req))

    def _broker(self, req, c, b) -> dict:
        return {"kind": "KafkaBroker", "metadata": self.meta(req, f"{c}/brokers/{b.id}",
                                                              f"{c}/broker={b.id}"),
                "cluster_id": c, "broker_id": b.id, "host": b.host, "port": b.port,
                "rack": None, "configs": self.related(req, f"{c}/brokers/{b.id}/configs"),
                "partition_replicas": self.related(req, f"{c}/brokers/{b.id}/"
                                                         f"partition-replicas")}

    def list_brokers(self, req, cluster_id) -> Answer:
        self.check(cluster_id)
        brokers = sorted(self.metadata().brokers.values(), key=lambda b: b.id)
        return Answer(200, self.listing(req, "KafkaBroker",
                                      [self._broker(req, cluster_id, b) for b in brokers]))

    def get_broker(self, req, cluster_id, broker_id) -> Answer:
        self.check(cluster_id)
        b = self.metadata().brokers.get(int(broker_id)) if broker_id.isdigit() else None
        if b is None:
            raise ProxyError(NOT_FOUND, f"Broker {broker_id} cannot be found.")
        return Answer(200, self._broker(req, cluster_id, b))

    # ---- topics -------------------------------------------------------------------------------

    def _topic(self, req, c, t) -> dict:
        p0 = t.partitions.get(0) or next(iter(t.partitions.values()), None)
        path = f"{c}/topics/{t.topic}"
        return {"kind": "KafkaTopic", "metadata": self.meta(req, path, f"{c}/topic={t.topic}"),
                "cluster_id": c, "topic_name": t.topic, "is_internal": t.topic.startswith("__"),
                "replication_factor": len(p0.replicas) if p0 is not None else 0,
                "partitions_count": len(t.partitions),
                "partitions": self.related(req, f"{path}/partitions"),
                "configs": self.related(req, f"{path}/configs"),
                "partition_reassignments": self.related(req, f"{path}/partitions/-/"
                                                              f"reassignment")}

    def list_topics(self, req, cluster_id) -> Answer:
        self.check(cluster_id)
        topics = self.metadata().topics
        sees = req.access.sees(Op.DESCRIBE, Res.TOPIC)   # Metadata of all topics filters so
        return Answer(200, self.listing(req, "KafkaTopic", [
            self._topic(req, cluster_id, topics[n]) for n in sorted(topics)
            if topics[n].error is None and sees(n)]))

    def get_topic(self, req, cluster_id, topic) -> Answer:
        self.check(cluster_id)
        return Answer(200, self._topic(req, cluster_id, self.topic_metadata(req, topic)))

    def create_topic(self, req, cluster_id) -> Answer:
        from kafkalite.client import NewTopic
        self.check(cluster_id)
        body = req.json({})
        if not isinstance(body, dict) or not isinstance(body.get("topic_name"), str) \
                or not body["topic_name"]:
            raise ProxyError(BAD_REQUEST, "topic_name is required")
        name = body["topic_name"]
        req.access.require_topic_create(name)
        configs = body.get("configs") or []
        if not isinstance(configs, list) or not all(
                isinstance(c, dict) and isinstance(c.get("name"), str) for c in configs):
            raise ProxyError(BAD_REQUEST, "configs is a list of {\"name\", \"value\"}")
        count, factor = body.get("partitions_count", -1), body.get("replication_factor", -1)
        if not isinstance(count, int) or not isinstance(factor, int):
            raise ProxyError(BAD_REQUEST, "partitions_count and replication_factor are integers")
        try:
            self.admin.create_topics([NewTopic(
                name, count, factor, config={c["name"]: c.get("value") for c in configs})]
            )[name].result()
        except Exception as exc:
            if type(exc).__name__ == "TopicAlreadyExistsError":
                raise ProxyError(TOPIC_ALREADY_EXISTS,
                                 f"Topic '{name}' already exists.") from None
            if type(exc).__name__ in ("InvalidTopicError", "InvalidPartitionsError",
                                      "InvalidReplicationFactorError", "InvalidConfigError",
                                      "InvalidRequestError", "PolicyViolationError"):
                raise ProxyError(BAD_REQUEST, str(exc)) from None
            raise from_kafka(exc) from None
        # its answer needs no Describe, as CreateTopics' needs none
        return Answer(201, self._topic(req, cluster_id,
                                       self.topic_metadata(req, name, check=False)))

    def delete_topic(self, req, cluster_id, topic) -> Answer:
        self.check(cluster_id)
        req.access.require(Op.DELETE, Res.TOPIC, topic)
        try:
            self.admin.delete_topics([topic])[topic].result()
        except Exception as exc:
            if type(exc).__name__ == "UnknownTopicOrPartitionError":
                raise topic_not_found(topic) from None
            raise from_kafka(exc) from None
        return Answer(204)

    # ---- partitions and replicas --------------------------------------------------------------

    def _partition(self, req, c, topic, p) -> dict:
        path = f"{c}/topics/{topic}/partitions/{p.id}"
        return {"kind": "KafkaPartition",
                "metadata": self.meta(req, path, f"{c}/topic={topic}/partition={p.id}"),
                "cluster_id": c, "topic_name": topic, "partition_id": p.id,
                "leader": self.related(req, f"{path}/replicas/{p.leader}"),
                "replicas": self.related(req, f"{path}/replicas"),
                "reassignment": self.related(req, f"{path}/reassignment")}

    def list_partitions(self, req, cluster_id, topic) -> Answer:
        self.check(cluster_id)
        t = self.topic_metadata(req, topic)
        return Answer(200, self.listing(req, "KafkaPartition", [
            self._partition(req, cluster_id, topic, t.partitions[i]) for i in sorted(
                t.partitions)]))

    def get_partition(self, req, cluster_id, topic, partition) -> Answer:
        self.check(cluster_id)
        _, p = self.partition_metadata(req, topic, partition)
        return Answer(200, self._partition(req, cluster_id, topic, p))

    def _replica(self, req, c, topic, p, broker: int) -> dict:
        """Confluent's ReplicaData: a partition's replica on ``broker``."""
        path = f"{c}/topics/{topic}/partitions/{p.id}/replicas/{broker}"
        return {"kind": "KafkaReplica",
                "metadata": self.meta(req, path, f"{c}/topic={topic}/partition={p.id}/"
                                                 f"replica={broker}"),
                "cluster_id": c, "topic_name": topic, "partition_id": p.id,
                "broker_id": broker, "is_leader": broker == p.leader,
                "is_in_sync": broker in p.isrs,
                "broker": self.related(req, f"{c}/brokers/{broker}")}

    def list_replicas(self, req, cluster_id, topic, partition) -> Answer:
        self.check(cluster_id)
        _, p = self.partition_metadata(req, topic, partition)
        return Answer(200, self.listing(req, "KafkaReplica", [
            self._replica(req, cluster_id, topic, p, b) for b in p.replicas]))

    def get_replica(self, req, cluster_id, topic, partition, broker) -> Answer:
        self.check(cluster_id)
        _, p = self.partition_metadata(req, topic, partition)
        if not broker.isdigit() or int(broker) not in p.replicas:
            raise ProxyError(NOT_FOUND, f"Replica {broker} of {topic}-{partition} cannot be "
                                        f"found.")
        return Answer(200, self._replica(req, cluster_id, topic, p, int(broker)))

    def broker_replicas(self, req, cluster_id, broker) -> Answer:
        """``GET .../brokers/{b}/partition-replicas``: every replica the
        broker holds, of the topics the user may describe (Metadata)."""
        self.check(cluster_id)
        meta = self.metadata()
        if not broker.isdigit() or int(broker) not in meta.brokers:
            raise ProxyError(NOT_FOUND, f"Broker {broker} cannot be found.")
        b, sees = int(broker), req.access.sees(Op.DESCRIBE, Res.TOPIC)
        return Answer(200, self.listing(req, "KafkaReplica", [
            self._replica(req, cluster_id, name, p, b)
            for name in sorted(meta.topics) if meta.topics[name].error is None and sees(name)
            for _, p in sorted(meta.topics[name].partitions.items()) if b in p.replicas]))

