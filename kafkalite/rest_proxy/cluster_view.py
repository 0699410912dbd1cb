"""What the proxy's resource handlers share: the cluster, its metadata, and Confluent's shapes.

Confluent's v3 resource is ``{"kind": "Kafka...", "metadata": {"self",
"resource_name"}, ...fields, ...{"related": url}}``, a list ``{"kind":
"Kafka...List", "metadata": {"self", "next": null}, "data": [...]}``;
``resource_name`` is a CRN, ``crn:///kafka=<cluster>/topic=<t>/...``.
kafkalite serves one cluster, whose id is the node's (DescribeCluster);
another id is 404.

Who may call: the handler classes of v3.py, v3_configs.py, v3_groups.py
and v2_metadata.py (each a ClusterView over the proxy's one AdminClient,
which serializes its requests), on the proxy's request threads.
"""
from __future__ import annotations

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.errors import (NOT_FOUND, PARTITION_NOT_FOUND, ProxyError,
                                         from_kafka, topic_not_found)


class ClusterView:
    """The cluster as one AdminClient sees it, and the answers' shapes."""

    def __init__(self, admin):
        self.admin = admin
        self._cluster_id = None

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
    def meta(req, path: str, crn: str) -> dict:
        return {"self": f"{req.base_url}/v3/clusters/{path}",
                "resource_name": f"crn:///kafka={crn}"}

    @staticmethod
    def listing(req, kind: str, data: list) -> dict:
        return {"kind": f"{kind}List", "metadata": {"self": req.base_url + req.path,
                                                    "next": None}, "data": data}

    @staticmethod
    def related(req, path: str) -> dict:
        return {"related": f"{req.base_url}/v3/clusters/{path}"}

    def metadata(self, topic=None):
        try:
            return self.admin.list_topics(topic, timeout=10.0)
        except Exception as exc:
            raise from_kafka(exc) from None

    def topic_metadata(self, req, topic: str, check: bool = True):
        """The topic's metadata (Describe on it asked first, as Metadata of
        a named topic asks it); 40401 for a topic there is not."""
        if check:
            req.access.require(Op.DESCRIBE, Res.TOPIC, topic)
        t = self.metadata(topic).topics.get(topic)
        if t is None or t.error is not None:
            raise topic_not_found(topic)
        return t

    def partition_metadata(self, req, topic: str, partition: str):
        """(topic metadata, its partition ``partition``); 40402 for a
        partition there is not (or a number that is not one)."""
        t = self.topic_metadata(req, topic)
        p = t.partitions.get(int(partition)) if partition.isdigit() else None
        if p is None:
            raise ProxyError(PARTITION_NOT_FOUND,
                             "This server does not host this topic-partition.")
        return t, p

    def controller(self) -> int:
        meta = self.metadata()
        return meta.controller_id if meta.controller_id >= 0 else min(meta.brokers, default=0)
