"""KIP-848's online migration at the wire, through the Kafka listener: a
classic group in use becomes a consumer group when a consumer-protocol
member joins (upgrade), its classic members reconcile through JoinGroup,
SyncGroup and Heartbeat (revoke first, then receive), and the group becomes
classic again when its last consumer-protocol member leaves (downgrade);
``group_consumer_migration_policy = "disabled"`` keeps a group in use on its
protocol."""
from __future__ import annotations

import uuid

import pytest
from compat_helpers import KafkaWire, create_topic
from harness import ServerProcess
from test_kip848_wire import beat, describe, join, restarted, topic_id

from kafkalite import errors
from kafkalite.protocol import ApiKey, decode_assignment, encode_assignment, encode_subscription

REBALANCE = errors.RebalanceInProgressError.code


@pytest.fixture
def wire(server):
    w = KafkaWire(server.kafka_bootstrap)
    yield w
    w.close()


def subscription(topic, owned=()) -> bytes:
    return encode_subscription(1, {"topics": [topic], "user_data": None, "owned_partitions":
                                   [{"topic": topic, "partitions": sorted(owned)}]
                                   if owned else []})


def classic_join(wire, group, topic, member_id="", owned=(), protocol="cooperative-sticky",
                 instance=None):
    """A classic JoinGroup (v9) with a consumer protocol subscription; a new
    member's MEMBER_ID_REQUIRED round is done here."""
    body = {"group_id": group, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": protocol, "metadata": subscription(topic, owned)}],
            "reason": None}
    r = wire.request(ApiKey.JOIN_GROUP, 9, body)
    if r["error_code"] == errors.MemberIdRequiredError.code:
        r = wire.request(ApiKey.JOIN_GROUP, 9, {**body, "member_id": r["member_id"]})
    return r


def classic_sync(wire, group, member_id, generation, assignments=(), protocol="cooperative-sticky"):
    r = wire.request(ApiKey.SYNC_GROUP, 5, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "group_instance_id": None, "protocol_type": "consumer", "protocol_name": protocol,
        "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]})
    parts = []
    if r["error_code"] == 0 and r["assignment"]:
        for t in decode_assignment(r["assignment"])[1]["assigned_partitions"]:
            parts += t["partitions"]
    return r["error_code"], sorted(parts)


def classic_heartbeat(wire, group, member_id, generation, instance=None) -> int:
    return wire.request(ApiKey.HEARTBEAT, 4, {
        "group_id": group, "generation_id": generation, "member_id": member_id,
        "group_instance_id": instance})["error_code"]


def commit(wire, group, member_id, generation, version, topic) -> int:
    r = wire.request(ApiKey.OFFSET_COMMIT, version, {
        "group_id": group, "generation_id_or_member_epoch": generation, "member_id": member_id,
        "group_instance_id": None, "retention_time_ms": -1, "topics": [
            {"name": topic, "partitions": [
                {"partition_index": 0, "committed_offset": 3, "committed_leader_epoch": -1,
                 "committed_metadata": ""}]}]})
    return r["topics"][0]["partitions"][0]["error_code"]


def stable_classic_group(wire, group, topic, partitions=6) -> tuple[str, int]:
    """One cooperative classic member owning every partition: (its id, generation)."""
    c = classic_join(wire, group, topic)
    assert c["error_code"] == 0 and c["leader"] == c["member_id"], c
    everything = encode_assignment(1, {"assigned_partitions": [
        {"topic": topic, "partitions": list(range(partitions))}], "user_data": None})
    code, parts = classic_sync(wire, group, c["member_id"], c["generation_id"],
                               [(c["member_id"], everything)])
    assert code == 0 and parts == list(range(partitions))
    return c["member_id"], c["generation_id"]


def group_type(wire, group) -> str | None:
    listed = wire.request(ApiKey.LIST_GROUPS, 5, {"states_filter": [], "types_filter": []})
    return {g["group_id"]: g["group_type"] for g in listed["groups"]}.get(group)


def test_upgrade_reconcile_classic_member_and_downgrade(server, wire, topic_name):
    create_topic(server, topic_name, 6)
    tid = topic_id(wire, topic_name)
    group = f"mig-{uuid.uuid4().hex[:8]}"
    c_id, gen = stable_classic_group(wire, group, topic_name)
    assert group_type(wire, group) == "classic"

    # a consumer-protocol member joins the Stable classic group: upgraded; the
    # new member gets nothing the classic member still owns
    n = join(wire, group, [topic_name])
    assert n["error_code"] == 0, n
    n_id, n_epoch = n["member_id"], n["member_epoch"]
    assert n_epoch > gen and n["assignment"]["topic_partitions"] in ([], [
        {"topic_id": tid, "partitions": []}])
    assert group_type(wire, group) == "consumer"
    # the classic member's commit at its generation (its member epoch) still works, v7
    # (to a topic that does not exist: the group check passed, the topic's failed)
    missing = topic_name + "-missing"
    assert commit(wire, group, c_id, gen, 7, missing) == \
        errors.UnknownTopicOrPartitionError.code
    assert commit(wire, group, c_id, gen - 1, 7, missing) == errors.IllegalGenerationError.code

    # its heartbeat says rejoin; it rejoins still owning all six (cooperative)
    assert classic_heartbeat(wire, group, c_id, gen) == REBALANCE
    r = classic_join(wire, group, topic_name, c_id, owned=range(6))
    assert r["error_code"] == 0 and r["leader"] != c_id and r["members"] == []
    assert r["generation_id"] == gen          # it has partitions to revoke first
    code, kept = classic_sync(wire, group, c_id, gen)
    assert code == 0 and len(kept) == 3
    # the new member waits: those three are not revoked yet
    b = beat(wire, group, n_id, n_epoch, {})
    assert b["error_code"] == 0 and (b["assignment"] is None or not any(
        t["partitions"] for t in b["assignment"]["topic_partitions"]))
    assert classic_heartbeat(wire, group, c_id, gen) == REBALANCE
    # it revoked them and rejoins: now at the new epoch with its three
    r = classic_join(wire, group, topic_name, c_id, owned=kept)
    assert r["error_code"] == 0 and r["generation_id"] == n_epoch
    assert classic_sync(wire, group, c_id, n_epoch) == (0, kept)
    assert classic_heartbeat(wire, group, c_id, n_epoch) == 0
    b = beat(wire, group, n_id, n_epoch, {})
    got = sorted(p for t in b["assignment"]["topic_partitions"] for p in t["partitions"])
    assert sorted(got + kept) == list(range(6))

    described = describe(wire, group)
    assert described["group_state"] == "Stable"
    assert {m["member_id"] for m in described["members"]} == {c_id, n_id}

    # the consumer-protocol member leaves: a classic group again, rebalancing;
    # the classic member learns it from its heartbeat at the same generation
    assert beat(wire, group, n_id, -1)["error_code"] == 0
    assert group_type(wire, group) == "classic"
    assert classic_heartbeat(wire, group, c_id, n_epoch) == REBALANCE
    r = classic_join(wire, group, topic_name, c_id, owned=kept)
    assert r["error_code"] == 0 and r["leader"] == c_id and r["generation_id"] == n_epoch + 1
    assert [m["member_id"] for m in r["members"]] == [c_id]


def test_an_eager_classic_member_in_a_consumer_group_needs_no_second_round(server, wire,
                                                                            topic_name):
    """An eager member (range) revokes everything before it rejoins: the
    coordinator sees it owns nothing and moves it to the new epoch at once."""
    create_topic(server, topic_name, 4)
    group = f"mig-{uuid.uuid4().hex[:8]}"
    n = join(wire, group, [topic_name])
    assert n["error_code"] == 0
    c = classic_join(wire, group, topic_name, protocol="range")
    assert c["error_code"] == 0 and c["leader"] == "" and c["members"] == []
    gen = c["generation_id"]
    assert classic_sync(wire, group, c["member_id"], gen, protocol="range") == (0, [])
    # the consumer member gives two up; the classic one gets them once released
    b = beat(wire, group, n["member_id"], n["member_epoch"],
             {topic_id(wire, topic_name): [0, 1, 2, 3]})
    kept = sorted(p for t in b["assignment"]["topic_partitions"] for p in t["partitions"])
    assert len(kept) == 2
    beat(wire, group, n["member_id"], n["member_epoch"], {topic_id(wire, topic_name): kept})
    assert classic_heartbeat(wire, group, c["member_id"], gen) == REBALANCE
    r = classic_join(wire, group, topic_name, c["member_id"], protocol="range")
    code, got = classic_sync(wire, group, c["member_id"], r["generation_id"], protocol="range")
    assert code == 0 and sorted(got + kept) == [0, 1, 2, 3]
    # a protocol name it did not offer is refused
    assert classic_sync(wire, group, c["member_id"], r["generation_id"],
                        protocol="roundrobin")[0] == errors.InconsistentGroupProtocolError.code


def test_a_rebalancing_classic_group_is_not_upgraded(server, wire, topic_name):
    create_topic(server, topic_name, 2)
    group = f"mig-{uuid.uuid4().hex[:8]}"
    c = classic_join(wire, group, topic_name)              # CompletingRebalance: no SyncGroup
    assert c["error_code"] == 0
    assert join(wire, group, [topic_name])["error_code"] == errors.GroupIdNotFoundError.code
    assert group_type(wire, group) == "classic"


@pytest.mark.processes
def test_migration_policy_disabled_keeps_each_group_on_its_protocol(tmp_path, topic_name):
    conf = tmp_path / "server.toml"
    conf.write_text('group_consumer_migration_policy = "disabled"\n')
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(conf)]).start()
    w = KafkaWire(srv.kafka_bootstrap)
    try:
        create_topic(srv, topic_name, 2)
        classic = f"mig-{uuid.uuid4().hex[:8]}"
        stable_classic_group(w, classic, topic_name, partitions=2)
        assert join(w, classic, [topic_name])["error_code"] == errors.GroupIdNotFoundError.code
        consumer = f"mig-{uuid.uuid4().hex[:8]}"
        assert join(w, consumer, [topic_name])["error_code"] == 0
        assert classic_join(w, consumer, topic_name)["error_code"] == \
            errors.InconsistentGroupProtocolError.code
    finally:
        w.close()
        srv.stop()
        srv.kill()


@pytest.mark.processes
def test_a_bad_migration_policy_is_refused(tmp_path):
    conf = tmp_path / "server.toml"
    conf.write_text('group_consumer_migration_policy = "sideways"\n')
    srv = ServerProcess(str(tmp_path / "data"), extra_args=["--config", str(conf)])
    with pytest.raises(Exception) as info:
        srv.start()
    assert "group_consumer_migration_policy must be one of" in str(info.value) + srv.output()


def test_a_classic_member_of_a_consumer_group_carries_on_after_a_restart(own_server,
                                                                        topic_name):
    create_topic(own_server, topic_name, 2)
    group = f"mig-{uuid.uuid4().hex[:8]}"
    w = KafkaWire(own_server.kafka_bootstrap)
    try:
        n = join(w, group, [topic_name])
        c = classic_join(w, group, topic_name)
        gen = c["generation_id"]
        assert classic_sync(w, group, c["member_id"], gen) == (0, [])
    finally:
        w.close()
    w = restarted(own_server)
    try:
        # both are still members at their epochs; the classic one keeps its
        # session timeout and protocols, and still waits for its partition
        assert classic_heartbeat(w, group, c["member_id"], gen) in (0, REBALANCE)
        tid = topic_id(w, topic_name)
        b = beat(w, group, n["member_id"], n["member_epoch"], {tid: [0, 1]})
        kept = b["assignment"]["topic_partitions"][0]["partitions"]
        assert b["error_code"] == 0 and len(kept) == 1          # gives one up
        beat(w, group, n["member_id"], n["member_epoch"], {tid: kept})
        r = classic_join(w, group, topic_name, c["member_id"])
        assert r["error_code"] == 0 and r["protocol_name"] == "cooperative-sticky"
        code, parts = classic_sync(w, group, c["member_id"], r["generation_id"])
        assert code == 0 and len(parts) == 1
        # the consumer-protocol member leaves: downgraded, and that is kept too
        assert beat(w, group, n["member_id"], -1)["error_code"] == 0
        assert group_type(w, group) == "classic"
    finally:
        w.close()
    w = restarted(own_server)
    try:
        assert group_type(w, group) == "classic"
    finally:
        w.close()


def test_a_static_classic_member_comes_back_to_its_partitions(server, wire, topic_name):
    """A restarted static classic member (same group.instance.id, no member
    id) takes its old incarnation's place in the consumer group: same
    partitions, no new group epoch; the old incarnation is fenced."""
    create_topic(server, topic_name, 2)
    group = f"mig-{uuid.uuid4().hex[:8]}"
    tid = topic_id(wire, topic_name)
    n = join(wire, group, [topic_name])
    c = classic_join(wire, group, topic_name, instance="worker-7")
    # the consumer-protocol member gives one of its two partitions up
    kept = beat(wire, group, n["member_id"], n["member_epoch"], {tid: [0, 1]})
    mine = kept["assignment"]["topic_partitions"][0]["partitions"]
    assert len(mine) == 1
    beat(wire, group, n["member_id"], n["member_epoch"], {tid: mine})
    assert classic_heartbeat(wire, group, c["member_id"], c["generation_id"],
                             "worker-7") == REBALANCE
    c = classic_join(wire, group, topic_name, c["member_id"], instance="worker-7")
    code, parts = classic_sync(wire, group, c["member_id"], c["generation_id"])
    assert code == 0 and len(parts) == 1
    epoch = describe(wire, group)["group_epoch"]

    again = classic_join(wire, group, topic_name, instance="worker-7")   # restarted
    assert again["error_code"] == 0 and again["member_id"] != c["member_id"]
    assert again["generation_id"] == c["generation_id"]
    assert classic_sync(wire, group, again["member_id"], again["generation_id"]) == (0, parts)
    described = describe(wire, group)
    assert described["group_epoch"] == epoch and len(described["members"]) == 2
    # the old incarnation is fenced; a wrong member id for the instance too
    assert classic_heartbeat(wire, group, c["member_id"], c["generation_id"],
                             "worker-7") == errors.FencedInstanceIdError.code
    assert classic_join(wire, group, topic_name, "someone-else",
                        instance="worker-7")["error_code"] == errors.FencedInstanceIdError.code
    # it leaves for good with LeaveGroup by instance id
    left = wire.request(ApiKey.LEAVE_GROUP, 5, {"group_id": group, "members": [
        {"member_id": "", "group_instance_id": "worker-7", "reason": None}]})
    assert left["members"][0]["error_code"] == 0
    assert len(describe(wire, group)[
            "members"]) == 1
