"""v3's resources: clusters, brokers, topics, partitions, configs, consumer groups.

Each answer is Confluent's shape: a resource is ``{"kind": "Kafka...",
"metadata": {"self", "resource_name"}, ...fields, ...{"related": url}}``,
a list ``{"kind": "Kafka...List", "metadata": {"self", "next": null},
"data": [...]}``. kafkalite serves one cluster, whose id is the node's
(DescribeCluster); another id is 404.

Each handler first asks the user's ACLs what the Kafka request it makes
would ask (authorization.py): the AdminClient itself is the server's.

Who may call: the proxy's request threads (AdminClient serializes them).
"""
from __future__ import annotations

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.errors import (BAD_REQUEST, NOT_FOUND, PARTITION_NOT_FOUND,
                                         TOPIC_ALREADY_EXISTS, ProxyError, from_kafka,
                                         topic_not_found)
from kafkalite.rest_proxy.http import Answer


class ClusterResources:
    """The v3 handlers over one AdminClient."""

    def __init__(self, admin):
        self.admin = admin
        self._cluster_id = None

    # ---- helpers ------------------------------------------------------------------------------

    def cluster_id(self) -> str:
        if self._cluster_id is None:
            try:
                self._cluster_id = self.admin.describe_cluster()["cluster_id"]
            except Exception as exc:
                raise from_kafka(exc) from None
        return self._cluster_id

    def check(self, cluster_id: str) -> None:
        if cluster_id != self.cluster_id():
            raise ProxyError(NOT_FOUND, f"Cluster {cluster_id} cannot be found.")

    @staticmethod
    def _meta(req, path: str, crn: str) -> dict:
        return {"self": f"{req.base_url}/v3/clusters/{path}",
                "resource_name": f"crn:///kafka={crn}"}

    @staticmethod
    def _list(req, kind: str, data: list) -> dict:
        return {"kind": f"{kind}List", "metadata": {"self": req.base_url + req.path,
                                                    "next": None}, "data": data}

    def _related(self, req, path: str) -> dict:
        return {"related": f"{req.base_url}/v3/clusters/{path}"}

    def _metadata(self, topic=None):
        try:
            return self.admin.list_topics(topic, timeout=10.0)
        except Exception as exc:
            raise from_kafka(exc) from None

    def _topic_meta(self, req, topic: str, check: bool = True):
        if check:                   # Metadata of a named topic
            req.access.require(Op.DESCRIBE, Res.TOPIC, topic)
        t = self._metadata(topic).topics.get(topic)
        if t is None or t.error is not None:
            raise topic_not_found(topic)
        return t

    # ---- clusters and brokers -----------------------------------------------------------------

    def _cluster(self, req) -> dict:
        c = self.cluster_id()
        return {"kind": "KafkaCluster", "metadata": self._meta(req, c, c), "cluster_id": c,
                "controller": self._related(req, f"{c}/brokers/{self._controller()}"),
                "acls": self._related(req, f"{c}/acls"),
                "brokers": self._related(req, f"{c}/brokers"),
                "broker_configs": self._related(req, f"{c}/broker-configs"),
                "consumer_groups": self._related(req, f"{c}/consumer-groups"),
                "topics": self._related(req, f"{c}/topics"),
                "partition_reassignments": self._related(req, f"{c}/topics/-/partitions/-/"
                                                               f"reassignment")}

    def _controller(self) -> int:
        meta = self._metadata()
        return meta.controller_id if meta.controller_id >= 0 else min(meta.brokers, default=0)

    def list_clusters(self, req) -> Answer:
        return Answer(200, self._list(req, "KafkaCluster", [self._cluster(req)]))

    def get_cluster(self, req, cluster_id) -> Answer:
        self.check(cluster_id)
        return Answer(200, self._cluster(req))

    def _broker(self, req, c, b) -> dict:
        return {"kind": "KafkaBroker", "metadata": self._meta(req, f"{c}/brokers/{b.id}",
                                                              f"{c}/broker={b.id}"),
                "cluster_id": c, "broker_id": b.id, "host": b.host, "port": b.port,
                "rack": None, "configs": self._related(req, f"{c}/brokers/{b.id}/configs"),
                "partition_replicas": self._related(req, f"{c}/brokers/{b.id}/"
                                                         f"partition-replicas")}

    def list_brokers(self, req, cluster_id) -> Answer:
        self.check(cluster_id)
        brokers = sorted(self._metadata().brokers.values(), key=lambda b: b.id)
        return Answer(200, self._list(req, "KafkaBroker",
                                      [self._broker(req, cluster_id, b) for b in brokers]))

    def get_broker(self, req, cluster_id, broker_id) -> Answer:
        self.check(cluster_id)
        b = self._metadata().brokers.get(int(broker_id)) if broker_id.isdigit() else None
        if b is None:
            raise ProxyError(NOT_FOUND, f"Broker {broker_id} cannot be found.")
        return Answer(200, self._broker(req, cluster_id, b))

    # ---- topics -------------------------------------------------------------------------------

    def _topic(self, req, c, t) -> dict:
        p0 = t.partitions.get(0) or next(iter(t.partitions.values()), None)
        path = f"{c}/topics/{t.topic}"
        return {"kind": "KafkaTopic", "metadata": self._meta(req, path, f"{c}/topic={t.topic}"),
                "cluster_id": c, "topic_name": t.topic, "is_internal": t.topic.startswith("__"),
                "replication_factor": len(p0.replicas) if p0 is not None else 0,
                "partitions_count": len(t.partitions),
                "partitions": self._related(req, f"{path}/partitions"),
                "configs": self._related(req, f"{path}/configs"),
                "partition_reassignments": self._related(req, f"{path}/partitions/-/"
                                                              f"reassignment")}

    def list_topics(self, req, cluster_id) -> Answer:
        self.check(cluster_id)
        topics = self._metadata().topics
        sees = req.access.sees(Op.DESCRIBE, Res.TOPIC)   # Metadata of all topics filters so
        return Answer(200, self._list(req, "KafkaTopic", [
            self._topic(req, cluster_id, topics[n]) for n in sorted(topics)
            if topics[n].error is None and sees(n)]))

    def get_topic(self, req, cluster_id, topic) -> Answer:
        self.check(cluster_id)
        return Answer(200, self._topic(req, cluster_id, self._topic_meta(req, topic)))

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
                                       self._topic_meta(req, name, check=False)))

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

    # ---- partitions and configs ---------------------------------------------------------------

    def _partition(self, req, c, topic, p) -> dict:
        path = f"{c}/topics/{topic}/partitions/{p.id}"
        return {"kind": "KafkaPartition",
                "metadata": self._meta(req, path, f"{c}/topic={topic}/partition={p.id}"),
                "cluster_id": c, "topic_name": topic, "partition_id": p.id,
                "leader": self._related(req, f"{path}/replicas/{p.leader}"),
                "replicas": self._related(req, f"{path}/replicas"),
                "reassignment": self._related(req, f"{path}/reassignment")}

    def list_partitions(self, req, cluster_id, topic) -> Answer:
        self.check(cluster_id)
        t = self._topic_meta(req, topic)
        return Answer(200, self._list(req, "KafkaPartition", [
            self._partition(req, cluster_id, topic, t.partitions[i]) for i in sorted(
                t.partitions)]))

    def get_partition(self, req, cluster_id, topic, partition) -> Answer:
        self.check(cluster_id)
        t = self._topic_meta(req, topic)
        p = t.partitions.get(int(partition)) if partition.isdigit() else None
        if p is None:
            raise ProxyError(PARTITION_NOT_FOUND,
                             "This server does not host this topic-partition.")
        return Answer(200, self._partition(req, cluster_id, topic, p))

    def list_topic_configs(self, req, cluster_id, topic) -> Answer:
        from kafkalite.client import ConfigResource
        self.check(cluster_id)
        self._topic_meta(req, topic)
        req.access.require(Op.DESCRIBE_CONFIGS, Res.TOPIC, topic)
        try:
            res = ConfigResource("TOPIC", topic)
            entries = self.admin.describe_configs([res])[res].result()
        except Exception as exc:
            raise from_kafka(exc) from None
        c = cluster_id
        return Answer(200, self._list(req, "KafkaTopicConfig", [{
            "kind": "KafkaTopicConfig",
            "metadata": self._meta(req, f"{c}/topics/{topic}/configs/{e.name}",
                                   f"{c}/topic={topic}/config={e.name}"),
            "cluster_id": c, "topic_name": topic, "name": e.name,
            "value": None if e.is_sensitive else e.value, "is_default": e.is_default,
            "is_read_only": e.is_read_only, "is_sensitive": e.is_sensitive,
            "source": e.source.name if hasattr(e.source, "name") else str(e.source),
            "synonyms": []} for e in sorted(entries.values(), key=lambda e: e.name)]))

    # ---- consumer groups ----------------------------------------------------------------------

    def _group(self, req, c, g) -> dict:
        path = f"{c}/consumer-groups/{g.group_id}"
        return {"kind": "KafkaConsumerGroup",
                "metadata": self._meta(req, path, f"{c}/consumer-group={g.group_id}"),
                "cluster_id": c, "consumer_group_id": g.group_id,
                "is_simple": bool(getattr(g, "is_simple_consumer_group", False)),
                "partition_assignor": getattr(g, "partition_assignor", "") or "",
                "state": str(g.state or "UNKNOWN").upper(),
                "type": str(g.type or "classic").upper(),
                "coordinator": self._related(req, f"{c}/brokers/{self._controller()}"),
                "consumers": self._related(req, f"{path}/consumers"),
                "lag_summary": self._related(req, f"{path}/lag-summary")}

    def list_groups(self, req, cluster_id) -> Answer:
        self.check(cluster_id)
        try:
            listed = self.admin.list_consumer_groups().result()
            sees = req.access.sees(Op.DESCRIBE, Res.GROUP, or_cluster=True)   # ListGroups
            ids = sorted(g.group_id for g in getattr(listed, "valid", listed) if sees(g.group_id))
            described = self.admin.describe_consumer_groups(ids) if ids else {}
            groups = [described[i].result() for i in ids]
        except Exception as exc:
            raise from_kafka(exc) from None
        return Answer(200, self._list(req, "KafkaConsumerGroup",
                                      [self._group(req, cluster_id, g) for g in groups]))

    def _describe_group(self, req, group: str):
        req.access.require(Op.DESCRIBE, Res.GROUP, group)
        try:
            return self.admin.describe_consumer_groups([group])[group].result()
        except Exception as exc:
            if type(exc).__name__ == "GroupIdNotFoundError":
                raise ProxyError(NOT_FOUND, f"Consumer group {group} cannot be found.") \
                    from None
            raise from_kafka(exc) from None

    def get_group(self, req, cluster_id, group) -> Answer:
        self.check(cluster_id)
        return Answer(200, self._group(req, cluster_id, self._describe_group(req, group)))

    def group_lag_summary(self, req, cluster_id, group) -> Answer:
        self.check(cluster_id)
        self._describe_group(req, group)
        try:
            lags = self.admin.describe_group_offsets(group)
        except Exception as exc:
            raise from_kafka(exc) from None
        sees = req.access.sees(Op.DESCRIBE, Res.TOPIC)   # OffsetFetch leaves the rest out
        known = [x for x in lags if x.lag is not None and sees(x.topic)]
        top = max(known, key=lambda x: x.lag, default=None)
        c = cluster_id
        return Answer(200, {
            "kind": "KafkaConsumerGroupLagSummary",
            "metadata": self._meta(req, f"{c}/consumer-groups/{group}/lag-summary",
                                   f"{c}/consumer-group={group}/lag-summary"),
            "cluster_id": c, "consumer_group_id": group,
            "max_lag_consumer_id": (top.member_id or "") if top else "",
            "max_lag_instance_id": None, "max_lag_client_id": (top.client_id or "") if top
            else "",
            "max_lag_topic_name": top.topic if top else "",
            "max_lag_partition_id": top.partition if top else 0,
            "max_lag": top.lag if top else 0, "total_lag": sum(x.lag for x in known),
            "max_lag_consumer": self._related(req, f"{c}/consumer-groups/{group}/consumers/"
                                                   f"{(top.member_id or '') if top else ''}"),
            "max_lag_partition": self._related(req, f"{c}/topics/{top.topic if top else ''}/"
                                                    f"partitions/{top.partition if top else 0}")})
