"""v3's consumer groups: a group, its consumers and their assignments, its lags.

Confluent's ConsumerGroupsResource, ConsumersResource,
ConsumerAssignmentsResource, ConsumerLagsResource and
ConsumerGroupLagSummariesResource:

- ``GET .../consumer-groups``, ``.../consumer-groups/{g}``: a group's
  state, assignor and type (DescribeGroups / ConsumerGroupDescribe);
- ``.../consumers``, ``.../consumers/{member}``: its members (by id), each
  with its ``client_id`` and ``instance_id``; ``.../consumers/{member}/
  assignments`` and ``.../assignments/{t}/partitions/{p}``: the partitions
  a member owns;
- ``.../lags``, ``.../lags/{t}/partitions/{p}``: per partition the group
  committed an offset for, ``current_offset`` (the commit), the
  ``log_end_offset`` and their difference, and the member that owns it
  (OffsetFetch and ListOffsets), the largest lag first; none committed:
  404 "Consumer lags not found.", as Confluent answers;
- ``.../lag-summary``: the largest lag and the total.

A group needs Describe on it (DescribeGroups, OffsetFetch); lags count
only the topics the user may describe (OffsetFetch leaves the others out).

Who may call: the proxy's request threads.
"""
from __future__ import annotations

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.cluster_view import ClusterView
from kafkalite.rest_proxy.errors import NOT_FOUND, ProxyError, from_kafka
from kafkalite.rest_proxy.http import Answer

NOT_FOUND_MESSAGE = "HTTP 404 Not Found"       # jakarta's NotFoundException, as rest-utils answers it


class GroupResources(ClusterView):
    """The v3 handlers of consumer groups."""

    def _group(self, req, c, g) -> dict:
        path = f"{c}/consumer-groups/{g.group_id}"
        return {"kind": "KafkaConsumerGroup",
                "metadata": self.meta(req, path, f"{c}/consumer-group={g.group_id}"),
                "cluster_id": c, "consumer_group_id": g.group_id,
                "is_simple": bool(getattr(g, "is_simple_consumer_group", False)),
                "partition_assignor": getattr(g, "partition_assignor", "") or "",
                "state": str(g.state or "UNKNOWN").upper(),
                "type": str(g.type or "classic").upper(),
                "coordinator": self.related(req, f"{c}/brokers/{self.controller()}"),
                "consumers": self.related(req, f"{path}/consumers"),
                "lag_summary": self.related(req, f"{path}/lag-summary")}

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
        return Answer(200, self.listing(req, "KafkaConsumerGroup",
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
        known = self._lags(req, group)
        top = max(known, key=lambda x: x.lag, default=None)
        c = cluster_id
        return Answer(200, {
            "kind": "KafkaConsumerGroupLagSummary",
            "metadata": self.meta(req, f"{c}/consumer-groups/{group}/lag-summary",
                                   f"{c}/consumer-group={group}/lag-summary"),
            "cluster_id": c, "consumer_group_id": group,
            "max_lag_consumer_id": (top.member_id or "") if top else "",
            "max_lag_instance_id": None, "max_lag_client_id": (top.client_id or "") if top
            else "",
            "max_lag_topic_name": top.topic if top else "",
            "max_lag_partition_id": top.partition if top else 0,
            "max_lag": top.lag if top else 0, "total_lag": sum(x.lag for x in known),
            "max_lag_consumer": self.related(req, f"{c}/consumer-groups/{group}/consumers/"
                                                   f"{(top.member_id or '') if top else ''}"),
            "max_lag_partition": self.related(req, f"{c}/topics/{top.topic if top else ''}/"
                                                    f"partitions/{top.partition if top else 0}")})

    # ---- consumers and their assignments ------------------------------------------------------

    def _consumer(self, req, c, group: str, m) -> dict:
        path = f"{c}/consumer-groups/{group}/consumers/{m.member_id}"
        return {"kind": "KafkaConsumer",
                "metadata": self.meta(req, path, f"{c}/consumer-group={group}/"
                                                 f"consumer={m.member_id}"),
                "cluster_id": c, "consumer_group_id": group, "consumer_id": m.member_id,
                "instance_id": m.group_instance_id, "client_id": m.client_id or "",
                "assignments": self.related(req, f"{path}/assignments")}

    def _member(self, req, group: str, member: str):
        for m in self._describe_group(req, group).members:
            if m.member_id == member:
                return m
        raise ProxyError(NOT_FOUND, NOT_FOUND_MESSAGE)

    def list_consumers(self, req, cluster_id, group) -> Answer:
        self.check(cluster_id)
        members = sorted(self._describe_group(req, group).members, key=lambda m: m.member_id)
        return Answer(200, self.listing(req, "KafkaConsumer", [
            self._consumer(req, cluster_id, group, m) for m in members]))

    def get_consumer(self, req, cluster_id, group, member) -> Answer:
        self.check(cluster_id)
        return Answer(200, self._consumer(req, cluster_id, group,
                                          self._member(req, group, member)))

    def _assignment(self, req, c, group: str, member: str, tp) -> dict:
        path = (f"{c}/consumer-groups/{group}/consumers/{member}/assignments/{tp.topic}/"
                f"partitions/{tp.partition}")
        return {"kind": "KafkaConsumerAssignment",
                "metadata": self.meta(req, path, f"{c}/consumer-group={group}/consumer={member}/"
                                                 f"assignment={tp.topic}/partition={tp.partition}"),
                "cluster_id": c, "consumer_group_id": group, "consumer_id": member,
                "topic_name": tp.topic, "partition_id": tp.partition,
                "partition": self.related(req, f"{c}/topics/{tp.topic}/partitions/{tp.partition}"),
                "lag": self.related(req, f"{c}/consumer-groups/{group}/lags/{tp.topic}/"
                                         f"partitions/{tp.partition}")}

    def list_assignments(self, req, cluster_id, group, member) -> Answer:
        self.check(cluster_id)
        m = self._member(req, group, member)
        return Answer(200, self.listing(req, "KafkaConsumerAssignment", [
            self._assignment(req, cluster_id, group, member, tp)
            for tp in sorted(m.assignment, key=lambda tp: (tp.topic, tp.partition))]))

    def get_assignment(self, req, cluster_id, group, member, topic, partition) -> Answer:
        self.check(cluster_id)
        for tp in self._member(req, group, member).assignment:
            if tp.topic == topic and str(tp.partition) == partition:
                return Answer(200, self._assignment(req, cluster_id, group, member, tp))
        raise ProxyError(NOT_FOUND, NOT_FOUND_MESSAGE)

    # ---- lags ---------------------------------------------------------------------------------

    def _lags(self, req, group: str) -> list:
        """The group's partitions with a committed offset, of the topics
        the user may describe."""
        self._describe_group(req, group)
        try:
            lags = self.admin.describe_group_offsets(group)
        except Exception as exc:
            raise from_kafka(exc) from None
        sees = req.access.sees(Op.DESCRIBE, Res.TOPIC)   # OffsetFetch leaves the rest out
        return [x for x in lags if x.lag is not None and sees(x.topic)]

    def _lag(self, req, c, group: str, x) -> dict:
        path = f"{c}/consumer-groups/{group}/lags/{x.topic}/partitions/{x.partition}"
        return {"kind": "KafkaConsumerLag",
                "metadata": self.meta(req, path, f"{c}/consumer-group={group}/lag={x.topic}/"
                                                 f"partition={x.partition}"),
                "cluster_id": c, "consumer_group_id": group, "topic_name": x.topic,
                "partition_id": x.partition, "consumer_id": x.member_id or "",
                "instance_id": None, "client_id": x.client_id or "",
                "current_offset": x.committed, "log_end_offset": x.log_end, "lag": x.lag}

    def list_lags(self, req, cluster_id, group) -> Answer:
        self.check(cluster_id)
        lags = self._lags(req, group)
        if not lags:
            raise ProxyError(NOT_FOUND, "Consumer lags not found.")
        # Confluent's order: the largest lag first, then by topic and partition
        lags.sort(key=lambda x: (-x.lag, x.topic, x.partition))
        return Answer(200, self.listing(req, "KafkaConsumerLag", [
            self._lag(req, cluster_id, group, x) for x in lags]))

    def get_lag(self, req, cluster_id, group, topic, partition) -> Answer:
        self.check(cluster_id)
        for x in self._lags(req, group):
            if x.topic == topic and str(x.partition) == partition:
                return Answer(200, self._lag(req, cluster_id, group, x))
        raise ProxyError(NOT_FOUND, NOT_FOUND_MESSAGE)
