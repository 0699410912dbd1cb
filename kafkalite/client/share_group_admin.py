"""The admin client's share group calls (KIP-932): list and describe
share groups, read and alter their share-partition start offsets.

``ShareGroupAdmin`` is a part of admin.py's ``AdminClient`` (which
inherits it and holds its connection, lock and timeout), in a module of
its own so that AdminClient stays one readable class; ``_done`` and
``_by_topic``, the futures and grouping every admin call uses, are here
for both.
"""
from __future__ import annotations

from concurrent.futures import Future

from kafkalite.client.types import TopicPartition
from kafkalite.errors import error_or_none
from kafkalite.protocol import ApiKey


def _by_topic(partitions) -> dict[str, list]:
    """[TopicPartition] -> {topic: [partition numbers]}, in the order given."""
    out: dict[str, list] = {}
    for tp in partitions:
        out.setdefault(tp.topic, []).append(tp.partition)
    return out


def _done(value=None, exc=None) -> Future:
    f = Future()
    if exc is not None:
        f.set_exception(exc)
    else:
        f.set_result(value)
    return f



class ShareGroupAdmin:
    """Share group calls of ``AdminClient`` (this module's docstring)."""

    def list_share_groups(self, request_timeout: float | None = None) -> Future:
        """A Future of [(group id, state)] of the share groups (KIP-932)."""
        with self._lock:
            resp = self._meta.admin_request(ApiKey.LIST_GROUPS, {
                "states_filter": [], "types_filter": ["share"]},
                request_timeout or self._timeout, 5)
        exc = error_or_none(resp["error_code"])
        return _done(None if exc else sorted((g["group_id"], g["group_state"])
                                             for g in resp["groups"]), exc)

    def describe_share_groups(self, group_ids: list[str],
                              request_timeout: float | None = None) -> dict:
        """{group id: Future of the ShareGroupDescribe entry} (a dict: state,
        epochs, members with their assignments by topic name)."""
        with self._lock:
            resp = self._meta.admin_request(ApiKey.SHARE_GROUP_DESCRIBE, {
                "group_ids": list(group_ids), "include_authorized_operations": False},
                request_timeout or self._timeout, 0)
        return {g["group_id"]: _done(None if g["error_code"] else g,
                                     error_or_none(g["error_code"], g["error_message"]))
                for g in resp["groups"]}

    def list_share_group_offsets(self, groups: dict,
                                 request_timeout: float | None = None) -> dict:
        """{group id: [TopicPartition] or None for every partition the group
        has state for} -> {group id: Future of {TopicPartition: share-partition
        start offset}} (-1: the group has no state for the partition yet).
        A group that does not exist fails with GroupIdNotFoundError; a
        partition's error (an unknown topic) fails its group's Future."""
        with self._lock:
            resp = self._meta.admin_request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, {"groups": [
                {"group_id": gid, "topics": None if tps is None else [
                    {"topic_name": t, "partitions": ps}
                    for t, ps in _by_topic(tps).items()]}
                for gid, tps in groups.items()]}, request_timeout or self._timeout, 0)
        out = {}
        for g in resp["groups"]:
            exc = error_or_none(g["error_code"], g["error_message"])
            offsets = {}
            for t in g["topics"]:
                for p in t["partitions"]:
                    exc = exc or error_or_none(p["error_code"], p["error_message"])
                    offsets[TopicPartition(t["topic_name"], p["partition_index"])] = \
                        p["start_offset"]
            out[g["group_id"]] = _done(None if exc else offsets, exc)
        return out

    def alter_share_group_offsets(self, group_id: str, offsets: dict,
                                  request_timeout: float | None = None) -> dict:
        """{TopicPartition: new share-partition start offset} -> {TopicPartition:
        Future}: refused (NonEmptyGroupError) while the group has members."""
        by: dict = {}
        for tp, offset in offsets.items():
            by.setdefault(tp.topic, []).append({"partition_index": tp.partition,
                                                "start_offset": offset})
        with self._lock:
            resp = self._meta.admin_request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, {
                "group_id": group_id,
                "topics": [{"topic_name": t, "partitions": ps} for t, ps in by.items()]},
                request_timeout or self._timeout, 0)
        top = error_or_none(resp["error_code"], resp["error_message"])    # Kafka's: all failed
        if top is not None:
            return {tp: _done(None, top) for tp in offsets}
        return {TopicPartition(t["topic_name"], p["partition_index"]):
                _done(None, error_or_none(p["error_code"], p["error_message"]))
                for t in resp["responses"] for p in t["partitions"]}
