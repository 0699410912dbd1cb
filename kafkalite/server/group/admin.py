"""The group admin APIs over every kind of group: DescribeGroups,
ListGroups and DeleteGroups (Kafka's group coordinator answers them for
classic, consumer and share groups alike).

- DescribeGroups describes a consumer group (KIP-848) in the classic shape
  too, for tools that do not speak ConsumerGroupDescribe.
- ListGroups lists classic and consumer groups, and share groups (type
  "share") to clients that know group types (v5+); relayed by a worker, it
  lists the groups FindCoordinator names that worker for.
- DeleteGroups deletes empty groups of any kind, their offsets with them;
  a share group's deletion is passed on (``share_group_deleted``) so the
  partition leaders drop its state.

Which process runs it: the supervisor, on its event loop, through
coordinator.py's handler table.

What it may import: groups.py, consumer_group.py, group_log.py, share/
(the share groups), network/, kafkalite.protocol and the bottom.
"""
from __future__ import annotations

from kafkalite import errors
from kafkalite.protocol import encode_assignment, encode_subscription
from kafkalite.server.group.consumer_group import ConsumerGroup, ConsumerGroupCoordinator
from kafkalite.server.group.group_log import GroupMetadataLog
from kafkalite.server.group.groups import (CONSUMER_PROTOCOL, DEAD, NONE, STABLE,
                                           ConsumerGroupRecords, Group, now_ms)
from kafkalite.server.network.requests import RequestContext
from kafkalite.server.share.share_group import ShareGroupCoordinator

CLASSIC_TYPE, CONSUMER_TYPE, SHARE_TYPE = "classic", "consumer", "share"   # ListGroups v5 types


class GroupAdmin:
    """Describes, lists and deletes the groups of the group table
    ``groups`` and ``share``'s share groups."""

    def __init__(self, groups: dict[str, Group], store: GroupMetadataLog,
                 consumer: ConsumerGroupCoordinator, consumer_records: ConsumerGroupRecords,
                 share: ShareGroupCoordinator, coordinator_node):
        self.groups = groups
        self.store = store
        self.consumer = consumer
        self.consumer_records = consumer_records
        self.share = share
        # (Listener, Kafka listener name, key) -> {"node_id", "host", "port"}, or
        # None while no node can be named (controller.coordinator_node)
        self.coordinator_node = coordinator_node
        # group id -> None: the supervisor has the partition leaders drop
        # the deleted share group's state
        self.share_group_deleted = lambda gid: None

    def describe_groups(self, ctx: RequestContext, body: dict):
        out = []
        for gid in body["groups"]:
            g = self.groups.get(gid)
            if g is None and ctx.api_version >= 6:
                # KIP-1043: v6 tells a group that does not exist apart from a Dead one
                out.append({"error_code": errors.GroupIdNotFoundError.code,
                            "error_message": f"Group {gid} not found.", "group_id": gid,
                            "group_state": DEAD, "protocol_type": "", "protocol_data": "",
                            "members": []})
                continue
            if g is None:
                out.append({"error_code": NONE, "group_id": gid, "group_state": DEAD,
                            "protocol_type": "", "protocol_data": "", "members": []})
                continue
            if g.consumer is not None:
                out.append(self._describe_consumer_group(g.consumer))
                continue
            stable = g.state == STABLE
            out.append({
                "error_code": NONE, "group_id": gid, "group_state": g.state,
                "protocol_type": g.protocol_type or "",
                "protocol_data": (g.protocol_name or "") if stable else "",
                "members": [{"member_id": m.member_id, "group_instance_id": m.group_instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": m.metadata(g.protocol_name) if stable else b"",
                             "member_assignment": m.assignment if stable else b""}
                            for m in g.members.values()]})
        return {"throttle_time_ms": 0, "groups": out}

    def _describe_consumer_group(self, cg: ConsumerGroup) -> dict:
        """A KIP-848 group in DescribeGroups' classic shape, for tools that
        do not speak ConsumerGroupDescribe: members with a consumer-protocol
        subscription and their current assignment. (Kafka 4 answers
        GROUP_ID_NOT_FOUND here and such tools show nothing.)"""
        names = {t.topic_id: name for name, t in self.consumer.topics().items()}

        def assignment(tps) -> bytes:
            by: dict = {}
            for tid, p in tps:
                by.setdefault(names.get(tid, ""), []).append(p)
            return encode_assignment(0, {"assigned_partitions": [
                {"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by.items())],
                "user_data": None})

        return {"error_code": NONE, "group_id": cg.group_id, "group_state": cg.state,
                "protocol_type": CONSUMER_PROTOCOL, "protocol_data": cg.assignor,
                "members": [{"member_id": m.member_id, "group_instance_id": m.instance_id,
                             "client_id": m.client_id, "client_host": m.client_host,
                             "member_metadata": encode_subscription(0, {
                                 "topics": m.subscribed_topic_names, "user_data": None}),
                             "member_assignment": assignment(m.assigned)}
                            for m in cg.members.values()]}

    def list_groups(self, ctx: RequestContext, body: dict):
        # Kafka's ListGroups lists the groups of the broker asked, which
        # clients ask one by one (list_consumer_groups asks every broker
        # Metadata names): relayed by a worker, the groups FindCoordinator
        # names that worker for; asked here directly (the bootstrap address,
        # not among Metadata's brokers), every group
        def listed(gid: str) -> bool:
            if ctx.relayed_from is None:
                return True
            node = self.coordinator_node(ctx.listener, ctx.listener_name, gid)
            return node is not None and node["node_id"] == ctx.relayed_from
        states = {s.lower() for s in body.get("states_filter") or ()}
        types = {s.lower() for s in body.get("types_filter") or ()}
        out = []
        for g in self.groups.values():
            if not listed(g.group_id):
                continue
            kind = CONSUMER_TYPE if g.consumer is not None else CLASSIC_TYPE
            state = g.consumer.state if g.consumer is not None else g.state
            if (states and state.lower() not in states) or (types and kind not in types):
                continue
            out.append({"group_id": g.group_id, "protocol_type": g.protocol_type or "",
                        "group_state": state, "group_type": kind})
        # share groups only for clients that know group types (v5+): older
        # tools would take them for consumer groups
        for sg in self.share.groups.values() if ctx.api_version >= 5 else ():
            if not listed(sg.group_id):
                continue
            if (states and sg.state.lower() not in states) or (types and SHARE_TYPE not in types):
                continue
            out.append({"group_id": sg.group_id, "protocol_type": SHARE_TYPE,
                        "group_state": sg.state, "group_type": SHARE_TYPE})
        return {"throttle_time_ms": 0, "error_code": NONE, "groups": out}

    def delete_groups(self, ctx: RequestContext, body: dict):
        results = []
        for gid in body["groups_names"]:
            g = self.groups.get(gid)
            if g is None:
                code = self.share.delete(gid)
                if code == NONE:
                    self.share_group_deleted(gid)
            elif g.in_use:
                code = errors.NonEmptyGroupError.code
            else:
                code = NONE
                self.store.write_group(gid, None, now_ms(), offsets_deleted=list(g.offsets))
                self.consumer_records.drop(g)
                del self.groups[gid]
            results.append({"group_id": gid, "error_code": code})
        return {"throttle_time_ms": 0, "results": results}

