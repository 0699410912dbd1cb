"""The admin client (kafkalite/client/admin.py) over the shared server:
remove_members_from_consumer_group (the Java Admin's
removeMembersFromConsumerGroup, LeaveGroup v3+ naming group.instance.ids)
empties a group whose static member closed at once, rather than after its
session timeout; an instance id not in the group is Kafka's per-member
UNKNOWN_MEMBER_ID.
"""
from __future__ import annotations

import pytest

from harness import create, wait_until
from kafkalite import errors
from kafkalite.client import AdminClient, Consumer

SESSION_MS = 45_000     # Kafka's default: what a closed static member holds the group for


def members(admin: AdminClient, group: str) -> list:
    return admin.describe_consumer_groups([group])[group].result(10).members


def test_a_closed_static_member_is_removed_by_its_instance_id(server, topic_name, group_name):
    create(server, topic_name, 2)
    consumer = Consumer(server.config(**{
        "group.id": group_name, "group.instance.id": "static-a",
        "session.timeout.ms": SESSION_MS, "auto.offset.reset": "earliest"}))
    consumer.subscribe([topic_name])
    wait_until(lambda: consumer.poll(0.2) is None and consumer.assignment(), 30,
               "the static member's assignment")
    consumer.close()        # a static member's close does not leave (KIP-345)
    with AdminClient(server.config()) as admin:
        assert [m.group_instance_id for m in members(admin, group_name)] == ["static-a"]
        result = admin.remove_members_from_consumer_group(group_name, ["static-a", "nobody"])
        assert result.member_result("static-a").result(10) is None
        with pytest.raises(errors.UnknownMemberIdError,
                           match=f"consumer group '{group_name}', member 'nobody': "
                                 f"UNKNOWN_MEMBER_ID"):
            result.member_result("nobody").result(10)
        with pytest.raises(errors.UnknownMemberIdError):
            result.all().result(10)
        with pytest.raises(ValueError, match="'other' was not asked to be removed"):
            result.member_result("other")
        # gone at once, far within the session timeout it would have held the group for
        wait_until(lambda: members(admin, group_name) == [], 10, "the group to be empty")
        assert admin.describe_consumer_groups([group_name])[group_name].result(10).state \
            == "Empty"
        with pytest.raises(ValueError, match="name at least one group.instance.id"):
            admin.remove_members_from_consumer_group(group_name, [])
