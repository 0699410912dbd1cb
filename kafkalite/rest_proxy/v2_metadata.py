"""v2's topics, partitions and brokers: Confluent's v2 TopicsResource,
PartitionsResource and BrokersResource.

- ``GET /topics``: the topic names (those the user may describe; Kafka's
  internal ``__`` topics left out, as AdminClient's listTopics leaves them);
- ``GET /topics/{t}``: ``{"name", "configs": {name: value},
  "partitions": [...]}`` (Metadata and DescribeConfigs);
- ``GET /topics/{t}/partitions``, ``.../partitions/{p}``: ``{"partition",
  "leader", "replicas": [{"broker", "leader", "in_sync"}]}``;
- ``GET /topics/{t}/partitions/{p}/offsets``: ``{"beginning_offset",
  "end_offset"}`` (ListOffsets);
- ``GET /brokers``: ``{"brokers": [id, ...]}``.

Answers are ``application/vnd.kafka.v2+json``; an unknown topic is 40401,
an unknown partition 40402. Producing to one partition (``POST
/topics/{t}/partitions/{p}``) is app.py's, beside the topic's produce.

Who may call: the proxy's request threads.
"""
from __future__ import annotations

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.cluster_view import ClusterView
from kafkalite.rest_proxy.errors import from_kafka
from kafkalite.rest_proxy.http import V2, Answer

EARLIEST, LATEST = -2, -1          # ListOffsets' timestamps


def _partition(p) -> dict:
    return {"partition": p.id, "leader": p.leader,
            "replicas": [{"broker": b, "leader": b == p.leader, "in_sync": b in p.isrs}
                         for b in p.replicas]}


class MetadataResources(ClusterView):
    """The v2 metadata handlers."""

    def list_topics(self, req) -> Answer:
        topics = self.metadata().topics
        sees = req.access.sees(Op.DESCRIBE, Res.TOPIC)   # Metadata of all topics filters so
        return Answer(200, [n for n in sorted(topics) if topics[n].error is None
                            and not n.startswith("__") and sees(n)], V2)

    def get_topic(self, req, topic) -> Answer:
        from kafkalite.client import ConfigResource
        t = self.topic_metadata(req, topic)
        req.access.require(Op.DESCRIBE_CONFIGS, Res.TOPIC, topic)
        res = ConfigResource("TOPIC", topic)
        try:
            configs = self.admin.describe_configs([res])[res].result()
        except Exception as exc:
            raise from_kafka(exc) from None
        return Answer(200, {"name": topic,
                            "configs": {e.name: None if e.is_sensitive else e.value
                                        for e in sorted(configs.values(), key=lambda e: e.name)},
                            "partitions": [_partition(t.partitions[i])
                                           for i in sorted(t.partitions)]}, V2)

    def list_partitions(self, req, topic) -> Answer:
        t = self.topic_metadata(req, topic)
        return Answer(200, [_partition(t.partitions[i]) for i in sorted(t.partitions)], V2)

    def get_partition(self, req, topic, partition) -> Answer:
        _, p = self.partition_metadata(req, topic, partition)
        return Answer(200, _partition(p), V2)

    def partition_offsets(self, req, topic, partition) -> Answer:
        _, p = self.partition_metadata(req, topic, partition)
        key = (topic, p.id)
        try:
            first = self.admin.list_offsets({key: EARLIEST})[key]
            end = self.admin.list_offsets({key: LATEST})[key]
        except Exception as exc:
            raise from_kafka(exc) from None
        return Answer(200, {"beginning_offset": first, "end_offset": end}, V2)

    def list_brokers(self, req) -> Answer:
        return Answer(200, {"brokers": sorted(self.metadata().brokers)}, V2)
