"""KIP-848 (the next-generation consumer group protocol) at the wire, through
the Kafka listener: ConsumerGroupHeartbeat's joins, epochs and errors,
incremental reconciliation (a partition goes to its new owner only after
its previous owner's heartbeat no longer holds it), ConsumerGroupDescribe,
OffsetCommit with the member epoch, and a malformed classic JoinGroup to a
consumer group."""
from __future__ import annotations

import uuid

import pytest
from compat_helpers import KafkaWire, create_topic

from harness import wait_until

from kafkalite import errors
from kafkalite.protocol import ApiKey

HB = ApiKey.CONSUMER_GROUP_HEARTBEAT


@pytest.fixture
def wire(server):
    w = KafkaWire(server.kafka_bootstrap)
    yield w
    w.close()


def topic_id(wire, topic) -> uuid.UUID:
    md = wire.request(ApiKey.METADATA, 12, {"topics": [{"name": topic}]})
    return md["topics"][0]["topic_id"]


def join(wire, group, topics=None, member_id=None, instance=None, regex=None,
         assignor=None, rebalance_timeout_ms=30_000, version=0) -> dict:
    body = {"group_id": group, "member_id": member_id or str(uuid.uuid4()), "member_epoch": 0,
            "instance_id": instance, "rack_id": None, "rebalance_timeout_ms": rebalance_timeout_ms,
            "subscribed_topic_names": topics, "server_assignor": assignor,
            "topic_partitions": []}
    if version >= 1:
        body["subscribed_topic_regex"] = regex
    return wire.request(HB, version, body)


def beat(wire, group, member_id, epoch, owned=None) -> dict:
    """A heartbeat with nothing changed but the owned partitions (a
    {topic id: [partitions]}, None for "unchanged")."""
    return wire.request(HB, 0, {
        "group_id": group, "member_id": member_id, "member_epoch": epoch, "instance_id": None,
        "rack_id": None, "rebalance_timeout_ms": -1, "subscribed_topic_names": None,
        "server_assignor": None,
        "topic_partitions": None if owned is None else
        [{"topic_id": t, "partitions": ps} for t, ps in owned.items()]})


def describe(wire, group) -> dict:
    """ConsumerGroupDescribe (v0) of one group: its described group."""
    return wire.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0, {
        "group_ids": [group], "include_authorized_operations": False})["groups"][0]


def restarted(server) -> KafkaWire:
    """Stop ``server`` cleanly, start it again, and connect to it."""
    assert server.stop() == 0
    server.start()
    return KafkaWire(server.kafka_bootstrap)


def assigned(resp) -> dict:
    assert resp["assignment"] is not None, resp
    return {t["topic_id"]: sorted(t["partitions"]) for t in resp["assignment"]["topic_partitions"]
            if t["partitions"]}


def test_join_reconcile_incrementally_and_describe(server, wire, topic_name):
    create_topic(server, topic_name, 6)
    tid = topic_id(wire, topic_name)
    group = f"g-{topic_name}"
    a = join(wire, group, [topic_name])
    assert a["error_code"] == 0 and a["member_epoch"] >= 1 and a["heartbeat_interval_ms"] > 0
    a_id, a_epoch = a["member_id"], a["member_epoch"]
    assert assigned(a) == {tid: [0, 1, 2, 3, 4, 5]}

    # a second member joins: it gets the new epoch but none of A's partitions yet
    b = join(wire, group, [topic_name])
    b_id, epoch = b["member_id"], b["member_epoch"]
    assert epoch > a_epoch and assigned(b) == {}
    # A is asked to revoke three partitions and stays at its epoch until it does
    r = beat(wire, group, a_id, a_epoch, {tid: [0, 1, 2, 3, 4, 5]})
    assert r["error_code"] == 0 and r["member_epoch"] == a_epoch
    kept = assigned(r)[tid]
    assert len(kept) == 3
    # B still waits: A has not acknowledged the revocation
    r = beat(wire, group, b_id, epoch, {})
    assert r["error_code"] == 0 and r["member_epoch"] == epoch
    assert not (r["assignment"] and assigned(r))

    described = wire.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                             {"group_ids": [group], "include_authorized_operations": False})
    g = described["groups"][0]
    assert (g["error_code"], g["group_state"], g["group_epoch"], g["assignment_epoch"],
            g["assignor_name"]) == (0, "Reconciling", epoch, epoch, "uniform")
    members = {m["member_id"]: m for m in g["members"]}
    assert members[a_id]["member_epoch"] == a_epoch and members[b_id]["member_epoch"] == epoch
    assert members[a_id]["subscribed_topic_names"] == [topic_name]
    a_target = members[a_id]["target_assignment"]["topic_partitions"]
    assert [(t["topic_name"], sorted(t["partitions"])) for t in a_target] == [(topic_name, kept)]
    assert members[a_id]["assignment"]["topic_partitions"][0]["partitions"] == kept
    assert members[b_id]["assignment"]["topic_partitions"] == []
    b_target = sorted(members[b_id]["target_assignment"]["topic_partitions"][0]["partitions"])
    assert b_target == sorted(set(range(6)) - set(kept))

    # A acknowledges (owns only what it kept): it moves to the new epoch...
    r = beat(wire, group, a_id, a_epoch, {tid: kept})
    assert r["error_code"] == 0 and r["member_epoch"] == epoch
    # ... and B's next heartbeat gets the released partitions
    r = beat(wire, group, b_id, epoch, {})
    assert assigned(r) == {tid: b_target}
    g = wire.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                     {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    assert g["group_state"] == "Stable"

    listed = wire.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    mine = [x for x in listed["groups"] if x["group_id"] == group]
    assert mine == [{"group_id": group, "protocol_type": "consumer", "group_state": "Stable",
                     "group_type": "consumer"}]
    only_classic = wire.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [],
                                                        "types_filter": ["classic"]})
    assert group not in [x["group_id"] for x in only_classic["groups"]]
    dg = wire.request(ApiKey.DESCRIBE_GROUPS, 5, {"groups": [group],
                                                  "include_authorized_operations": False})
    assert dg["groups"][0]["protocol_type"] == "consumer"
    assert {m["member_id"] for m in dg["groups"][0]["members"]} == {a_id, b_id}

    # A leaves (epoch -1): B is given everything at the next epoch
    r = beat(wire, group, a_id, -1)
    assert (r["error_code"], r["member_epoch"]) == (0, -1)
    r = beat(wire, group, b_id, epoch, {tid: b_target})
    assert r["member_epoch"] > epoch and assigned(r) == {tid: list(range(6))}


def test_errors_unknown_member_fenced_epochs_and_bad_joins(server, wire, topic_name):
    create_topic(server, topic_name, 2)
    tid = topic_id(wire, topic_name)
    group = f"g-{topic_name}"
    a = join(wire, group, [topic_name])
    a_id, epoch = a["member_id"], a["member_epoch"]
    assert beat(wire, group, "no-such-member", 1)["error_code"] == errors.UnknownMemberIdError.code
    assert beat(wire, group, a_id, epoch + 1)["error_code"] == errors.FencedMemberEpochError.code
    # B joins and leaves at once: A moves two epochs on
    b = join(wire, group, [topic_name])
    assert beat(wire, group, b["member_id"], -1)["error_code"] == 0
    r = beat(wire, group, a_id, epoch, {tid: [0, 1]})
    assert r["error_code"] == 0 and r["member_epoch"] == b["member_epoch"] + 1
    first, epoch = epoch, r["member_epoch"]
    # an older epoch is accepted only as the previous epoch with owned partitions inside
    # the current assignment (its last answer was lost)
    assert beat(wire, group, a_id, first, {tid: [1]})["error_code"] == 0
    assert beat(wire, group, a_id, first)["error_code"] == errors.FencedMemberEpochError.code
    assert beat(wire, group, a_id, epoch - 1, {tid: [1]})["error_code"] == \
        errors.FencedMemberEpochError.code
    assert beat(wire, group, a_id, epoch, {tid: [0, 1]})["error_code"] == 0
    # joining without a subscription, with owned partitions, or with an unknown assignor
    assert join(wire, group, None)["error_code"] == errors.InvalidRequestError.code
    bad = wire.request(HB, 0, {"group_id": group, "member_id": str(uuid.uuid4()),
                               "member_epoch": 0, "rebalance_timeout_ms": 1000,
                               "subscribed_topic_names": [topic_name],
                               "topic_partitions": [{"topic_id": tid, "partitions": [0]}]})
    assert bad["error_code"] == errors.InvalidRequestError.code
    assert join(wire, group, [topic_name], assignor="sticky")["error_code"] == \
        errors.UnsupportedAssignorError.code
    assert join(wire, group, None, regex="(unclosed", version=1)["error_code"] == \
        errors.InvalidRegularExpressionError.code

    # a classic JoinGroup to this consumer group without a consumer protocol
    # subscription is refused (a well-formed one joins: test_kip848_migration_wire.py)
    jg = wire.request(ApiKey.JOIN_GROUP, 9, {
        "group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}], "reason": None})
    assert jg["error_code"] == errors.InconsistentGroupProtocolError.code

    # OffsetCommit v9: the member epoch is the generation
    def commit(member_id, gen, version=9):
        resp = wire.request(ApiKey.OFFSET_COMMIT, version, {
            "group_id": group, "generation_id_or_member_epoch": gen, "member_id": member_id,
            "group_instance_id": None, "topics": [{"name": topic_name, "partitions": [
                {"partition_index": 0, "committed_offset": 7, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
        return resp["topics"][0]["partitions"][0]["error_code"]

    assert commit(a_id, epoch - 1) == errors.StaleMemberEpochError.code
    assert commit("someone", epoch) == errors.UnknownMemberIdError.code
    assert commit("", -1) == errors.UnknownMemberIdError.code   # the group has members
    assert commit(a_id, epoch, version=8) == errors.UnsupportedVersionError.code
    assert commit(a_id, epoch) == 0
    fetched = wire.request(ApiKey.OFFSET_FETCH, 9, {"groups": [
        {"group_id": group, "member_id": a_id, "member_epoch": epoch, "topics": None}],
        "require_stable": False})
    parts = fetched["groups"][0]["topics"][0]["partitions"]
    assert [(p["partition_index"], p["committed_offset"]) for p in parts] == [(0, 7)]
    # an admin's fetch (v8: no member) is not checked against the members
    admin = wire.request(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "topics": None}], "require_stable": False})
    assert admin["groups"][0]["error_code"] == 0
    assert admin["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 7
    stale = wire.request(ApiKey.OFFSET_FETCH, 9, {"groups": [
        {"group_id": group, "member_id": a_id, "member_epoch": epoch + 3, "topics": None}],
        "require_stable": False})
    assert stale["groups"][0]["error_code"] == errors.StaleMemberEpochError.code

    # once the last member left, the group is empty and a classic member may take it
    assert beat(wire, group, a_id, -1)["error_code"] == 0
    assert beat(wire, group, a_id, epoch)["error_code"] == errors.UnknownMemberIdError.code
    jg = wire.request(ApiKey.JOIN_GROUP, 9, {
        "group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
        "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}], "reason": None})
    assert jg["error_code"] == errors.MemberIdRequiredError.code
    # and a consumer-protocol member cannot join the classic group now in use
    # while it rebalances (CompletingRebalance: no SyncGroup yet)
    wire.request(ApiKey.JOIN_GROUP, 9, {
        "group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
        "member_id": jg["member_id"], "group_instance_id": None, "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}], "reason": None})
    assert join(wire, group, [topic_name])["error_code"] == errors.GroupIdNotFoundError.code
    # the committed offset is still there
    fetched = wire.request(ApiKey.OFFSET_FETCH, 8, {"groups": [
        {"group_id": group, "topics": None}], "require_stable": False})
    assert fetched["groups"][0]["topics"][0]["partitions"][0]["committed_offset"] == 7


def test_rebalance_timeout_fences_a_member_that_does_not_revoke(server, wire, topic_name):
    create_topic(server, topic_name, 2)
    tid = topic_id(wire, topic_name)
    group = f"g-{topic_name}"
    a = join(wire, group, [topic_name], rebalance_timeout_ms=500)
    a_id, a_epoch = a["member_id"], a["member_epoch"]
    b = join(wire, group, [topic_name])
    r = beat(wire, group, a_id, a_epoch, {tid: [0, 1]})
    assert len(assigned(r)[tid]) == 1                       # one partition to revoke
    # A keeps heartbeating with both partitions until its rebalance timeout fences it
    code = wait_until(lambda: beat(wire, group, a_id, a_epoch, {tid: [0, 1]})["error_code"],
                      10, "A to be fenced", interval=0.2)
    assert code == errors.UnknownMemberIdError.code
    r = beat(wire, group, b["member_id"], b["member_epoch"], {})
    assert assigned(r) == {tid: [0, 1]}


def test_static_member_rejoins_with_its_assignment(server, wire, topic_name):
    create_topic(server, topic_name, 4)
    tid = topic_id(wire, topic_name)
    group = f"g-{topic_name}"
    a = join(wire, group, [topic_name], instance="app-1")
    a_id, a_epoch = a["member_id"], a["member_epoch"]
    # while it is active, another incarnation cannot take its instance id
    assert join(wire, group, [topic_name], instance="app-1")["error_code"] == \
        errors.UnreleasedInstanceIdError.code
    r = wire.request(HB, 0, {"group_id": group, "member_id": a_id, "member_epoch": -2,
                             "instance_id": "app-1", "rebalance_timeout_ms": -1})
    assert (r["error_code"], r["member_epoch"]) == (0, -2)
    # the restarted instance comes back with a new member id: same epoch, same partitions
    back = join(wire, group, [topic_name], instance="app-1")
    assert back["error_code"] == 0 and back["member_id"] != a_id
    assert back["member_epoch"] == a_epoch and assigned(back) == {tid: [0, 1, 2, 3]}
    assert beat(wire, group, a_id, a_epoch)["error_code"] == errors.UnknownMemberIdError.code


def test_range_assignor_and_regex_subscription(server, wire, topic_name):
    create_topic(server, topic_name + ".a", 3)
    create_topic(server, topic_name + ".b", 3)
    ta, tb = topic_id(wire, topic_name + ".a"), topic_id(wire, topic_name + ".b")
    group = f"g-{topic_name}"
    regex = topic_name.replace(".", r"\.") + r"\.[a-c]"
    a = join(wire, group, None, regex=regex, assignor="range", version=1,
             member_id="m-a")
    assert a["error_code"] == 0 and assigned(a) == {ta: [0, 1, 2], tb: [0, 1, 2]}
    b = join(wire, group, [topic_name + ".b"], assignor="range", member_id="m-b")
    r = beat(wire, group, "m-a", a["member_epoch"], {ta: [0, 1, 2], tb: [0, 1, 2]})
    # range: per topic, subscribers in member-id order get consecutive ranges
    assert assigned(r) == {ta: [0, 1, 2], tb: [0, 1]}
    r = beat(wire, group, "m-a", a["member_epoch"], {ta: [0, 1, 2], tb: [0, 1]})
    r = beat(wire, group, "m-b", b["member_epoch"], {})
    assert assigned(r) == {tb: [2]}
    # a topic created later that matches the regex joins the assignment; one that
    # does not, does not
    create_topic(server, topic_name + ".ab", 1)
    create_topic(server, topic_name + ".c", 1)
    tc = topic_id(wire, topic_name + ".c")
    r = beat(wire, group, "m-a", a["member_epoch"], {ta: [0, 1, 2], tb: [0, 1]})
    assert r["member_epoch"] > a["member_epoch"]
    assert assigned(r) == {ta: [0, 1, 2], tb: [0, 1], tc: [0]}
    g = wire.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                     {"group_ids": [group], "include_authorized_operations": False})["groups"][0]
    assert {m["member_id"]: m["subscribed_topic_regex"] for m in g["members"]} == \
        {"m-a": regex, "m-b": None}
    missing = wire.request(ApiKey.CONSUMER_GROUP_DESCRIBE, 0,
                           {"group_ids": [group + "-missing"],
                            "include_authorized_operations": False})
    assert missing["groups"][0]["error_code"] == errors.GroupIdNotFoundError.code


def test_groups_survive_a_restart_members_carry_on_at_their_epochs(own_server, topic_name):
    """The group's records in __consumer_offsets (consumer_group_log.py):
    after a restart its members heartbeat on at their epochs with their
    partitions, a reconciliation under way goes on where it was, and the
    committed offsets are there."""
    create_topic(own_server, topic_name, 4)
    group = f"g-{topic_name}"
    wire = KafkaWire(own_server.kafka_bootstrap)
    try:
        tid = topic_id(wire, topic_name)
        a = join(wire, group, [topic_name], instance="a-1")
        a_id, a_epoch = a["member_id"], a["member_epoch"]
        assert assigned(a) == {tid: [0, 1, 2, 3]}
        resp = wire.request(ApiKey.OFFSET_COMMIT, 9, {
            "group_id": group, "generation_id_or_member_epoch": a_epoch,
            "member_id": a_id, "group_instance_id": "a-1",
            "topics": [{"name": topic_name, "partitions": [
                {"partition_index": 1, "committed_offset": 42, "committed_leader_epoch": -1,
                 "committed_metadata": "m"}]}]})
        assert resp["topics"][0]["partitions"][0]["error_code"] == 0
        # B joins; A is asked to revoke two partitions and has not yet
        b = join(wire, group, [topic_name], assignor="range")
        b_id, epoch = b["member_id"], b["member_epoch"]
        kept = assigned(beat(wire, group, a_id, a_epoch, {tid: [0, 1, 2, 3]}))[tid]
        assert len(kept) == 2
        described = describe(wire, group)
    finally:
        wire.close()
    wire = restarted(own_server)
    try:
        after = describe(wire, group)
        assert after == described
        # B still waits for A's revocation; A is still at its epoch with two
        r = beat(wire, group, b_id, epoch, {})
        assert r["error_code"] == 0 and r["member_epoch"] == epoch
        assert r["assignment"] is None or assigned(r) == {}
        r = beat(wire, group, a_id, a_epoch, {tid: kept})
        assert r["error_code"] == 0 and r["member_epoch"] == epoch and assigned(r) == {tid: kept}
        r = beat(wire, group, b_id, epoch, {})
        assert sorted(assigned(r)[tid] + kept) == [0, 1, 2, 3]
        # the committed offsets came back too
        fetched = wire.request(ApiKey.OFFSET_FETCH, 9, {"groups": [
            {"group_id": group, "member_id": b_id, "member_epoch": epoch,
             "topics": [{"name": topic_name, "partition_indexes": [1]}]}],
            "require_stable": True})
        p = fetched["groups"][0]["topics"][0]["partitions"][0]
        assert (p["committed_offset"], p["metadata"]) == (42, "m")
        # both leave; the empty group is deleted and stays deleted over a restart
        assert beat(wire, group, a_id, -1)["error_code"] == 0
        assert beat(wire, group, b_id, -1)["error_code"] == 0
        deleted = wire.request(ApiKey.DELETE_GROUPS, 2, {"groups_names": [group]})
        assert deleted["results"][0]["error_code"] == 0
    finally:
        wire.close()
    wire = restarted(own_server)
    try:
        gone = describe(wire, group)
        assert gone["error_code"] == errors.GroupIdNotFoundError.code
    finally:
        wire.close()
