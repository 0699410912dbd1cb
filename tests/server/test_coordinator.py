"""The group coordinator's state machine, driven through the real codec.

Each request is encoded and decoded as on the wire (so bodies carry exactly
what a client's would), dispatched to the coordinator's handlers through the
server's RequestDispatcher, and its answer, sent now or later through the
request's context, is encoded and decoded back. State is
kept in real ``__consumer_offsets`` partition logs in a temporary directory.
The end-to-end behaviour with real consumers is in tests/client/test_groups.py.
"""
import time

import pytest

from kafkalite import errors
from kafkalite.protocol import (ApiKey, decode_request, decode_response, encode_assignment,
                                encode_request, encode_response, encode_subscription)
from kafkalite.server.group.coordinator import GroupCoordinator
from kafkalite.server.network.requests import Listener, RequestContext, RequestDispatcher

TOPICS = {"orders": 6, "audit": 2}


class Harness:
    def __init__(self, path, **kwargs):
        self.path = path
        self.clock_offset_ms = 0
        self.replies = {}                 # correlation id -> decoded response body
        self._cid = 0
        self.coord = self._open(**kwargs)

    def _open(self, **kwargs):
        return GroupCoordinator(
            str(self.path), partition_count=TOPICS.get,
            coordinator_node=lambda listener, name=None, key="": {"node_id": 7, "host": "127.0.0.1",
                                                          "port": 9},
            offsets_partitions=4, clock=lambda: int(time.time() * 1000) + self.clock_offset_ms,
            **kwargs)

    def reopen(self, **kwargs):
        self.coord.close()
        self.coord = self._open(**kwargs)

    # the requests' Responder: answers go through the codec, as on the wire
    def send_response(self, ctx, body):
        h = ctx.header
        frame = encode_response(h.api_key, h.api_version, h.correlation_id, body)
        cid, decoded = decode_response(h.api_key, h.api_version, frame)
        self.replies[cid] = decoded

    def send_error(self, ctx, code, message):
        raise AssertionError(f"{ctx!r} failed as a whole: error {code} {message}")

    def send_nothing(self, ctx):
        raise AssertionError(f"{ctx!r} got no answer")

    def send(self, api, body, version=None, client_id="test"):
        """Send a request; returns its correlation id (answer in ``replies``)."""
        from kafkalite.client.connection import VERSIONS
        self._cid += 1
        version = VERSIONS[api] if version is None else version
        header, decoded = decode_request(encode_request(api, version, self._cid, client_id, body))
        ctx = RequestContext(header, Listener.NATIVE, self, None, peer="127.0.0.1:4321")
        RequestDispatcher("coordinator", self.coord.handlers()).dispatch(ctx, decoded)
        return self._cid

    def call(self, api, body, version=None, client_id="test"):
        """Send and return the answer, which must have come at once."""
        cid = self.send(api, body, version, client_id)
        assert cid in self.replies, f"{api.name} was not answered at once"
        return self.replies.pop(cid)

    def answer(self, cid):
        return self.replies.pop(cid, None)


def subscription(topics, owned=()):
    return encode_subscription(2, {"topics": topics, "user_data": None, "owned_partitions": [
        {"topic": t, "partitions": [p]} for t, p in owned], "generation_id": -1})


def assignment(tps):
    return encode_assignment(0, {"assigned_partitions": [
        {"topic": t, "partitions": [p]} for t, p in tps], "user_data": None})


def join_body(group, member_id="", instance=None, session=10_000, topics=("orders",),
              protocols=("range",)):
    return {"group_id": group, "session_timeout_ms": session, "rebalance_timeout_ms": 5_000,
            "member_id": member_id, "group_instance_id": instance, "protocol_type": "consumer",
            "protocols": [{"name": p, "metadata": subscription(list(topics))} for p in protocols],
            "reason": None}


def join_new(h, group, client_id="test", **kw):
    """A new dynamic member: MEMBER_ID_REQUIRED, then the real join (deferred)."""
    first = h.call(ApiKey.JOIN_GROUP, join_body(group, **kw), client_id=client_id)
    assert first["error_code"] == errors.MemberIdRequiredError.code
    return first["member_id"], h.send(ApiKey.JOIN_GROUP, join_body(group, first["member_id"], **kw),
                                      client_id=client_id)


def sync(h, group, gen, member_id, assignments=()):
    return h.send(ApiKey.SYNC_GROUP, {
        "group_id": group, "generation_id": gen, "member_id": member_id,
        "group_instance_id": None, "protocol_type": "consumer", "protocol_name": "range",
        "assignments": [{"member_id": m, "assignment": a} for m, a in assignments]})


def heartbeat(h, group, gen, member_id, instance=None):
    return h.call(ApiKey.HEARTBEAT, {"group_id": group, "generation_id": gen,
                                     "member_id": member_id, "group_instance_id": instance})["error_code"]


def commit(h, group, gen, member_id, offsets, metadata=""):
    resp = h.call(ApiKey.OFFSET_COMMIT, {
        "group_id": group, "generation_id_or_member_epoch": gen, "member_id": member_id,
        "group_instance_id": None, "topics": [
            {"name": t, "partitions": [{"partition_index": p, "committed_offset": o,
                                        "committed_leader_epoch": -1,
                                        "committed_metadata": metadata}]}
            for (t, p), o in offsets.items()]})
    return {(t["name"], p["partition_index"]): p["error_code"]
            for t in resp["topics"] for p in t["partitions"]}


def fetch_offsets(h, group):
    resp = h.call(ApiKey.OFFSET_FETCH, {"groups": [{"group_id": group, "topics": None}],
                                        "require_stable": False})
    return {(t["name"], p["partition_index"]): (p["committed_offset"], p["metadata"])
            for t in resp["groups"][0]["topics"] for p in t["partitions"]}


def stable_pair(h, group="g"):
    """Two members, generation complete; returns (gen, leader, follower)."""
    a, ja = join_new(h, group)
    # alone, a's join completes at once
    ra = h.answer(ja)
    assert ra["error_code"] == 0 and ra["leader"] == a and ra["generation_id"] == 1
    b, jb = join_new(h, group)
    assert h.answer(jb) is None                   # waits for a to rejoin
    assert heartbeat(h, group, 1, a) == errors.RebalanceInProgressError.code
    ja2 = h.send(ApiKey.JOIN_GROUP, join_body(group, a))
    ra, rb = h.answer(ja2), h.answer(jb)
    assert ra["generation_id"] == rb["generation_id"] == 2
    assert ra["leader"] == rb["leader"] == a
    assert {m["member_id"] for m in ra["members"]} == {a, b} and rb["members"] == []
    sb = sync(h, group, 2, b)
    assert h.answer(sb) is None                   # waits for the leader's assignment
    sa = sync(h, group, 2, a, [(a, assignment([("orders", 0), ("orders", 1)])),
                               (b, assignment([("orders", 2)]))])
    assert h.answer(sa)["assignment"] == assignment([("orders", 0), ("orders", 1)])
    assert h.answer(sb)["assignment"] == assignment([("orders", 2)])
    return 2, a, b


@pytest.fixture
def h(tmp_path):
    harness = Harness(tmp_path / "data")
    yield harness
    harness.coord.close()


def test_join_sync_heartbeat_and_generations(h):
    gen, a, b = stable_pair(h)
    assert heartbeat(h, "g", gen, a) == 0
    assert heartbeat(h, "g", gen, b) == 0
    desc = h.call(ApiKey.DESCRIBE_GROUPS, {"groups": ["g"]})["groups"][0]
    assert desc["group_state"] == "Stable" and desc["protocol_data"] == "range"
    assert {m["member_id"] for m in desc["members"]} == {a, b}
    # b leaves: a is told to rejoin, and alone gets generation 3
    left = h.call(ApiKey.LEAVE_GROUP, {"group_id": "g", "members": [
        {"member_id": b, "group_instance_id": None, "reason": None}]})
    assert left["members"][0]["error_code"] == 0
    assert heartbeat(h, "g", gen, a) == errors.RebalanceInProgressError.code
    ra = h.answer(h.send(ApiKey.JOIN_GROUP, join_body("g", a)))
    assert ra["generation_id"] == 3 and [m["member_id"] for m in ra["members"]] == [a]


def test_fenced_and_unknown_members_get_clear_errors(h):
    gen, a, b = stable_pair(h)
    assert heartbeat(h, "g", gen - 1, a) == errors.IllegalGenerationError.code
    assert heartbeat(h, "g", gen, "nobody") == errors.UnknownMemberIdError.code
    assert heartbeat(h, "missing-group", 1, a) == errors.UnknownMemberIdError.code
    # a commit from an old generation, from an unknown member, and from outside
    # the group while it has members: all refused, nothing stored
    assert commit(h, "g", gen - 1, a, {("orders", 0): 5}) == {
        ("orders", 0): errors.IllegalGenerationError.code}
    assert commit(h, "g", gen, "nobody", {("orders", 0): 5}) == {
        ("orders", 0): errors.UnknownMemberIdError.code}
    assert commit(h, "g", -1, "", {("orders", 0): 5}) == {
        ("orders", 0): errors.UnknownMemberIdError.code}
    assert fetch_offsets(h, "g") == {}
    # the current generation commits; bad partitions and oversized metadata are refused
    assert commit(h, "g", gen, a, {("orders", 0): 5, ("orders", 99): 1, ("nope", 0): 1}) == {
        ("orders", 0): 0, ("orders", 99): errors.UnknownTopicOrPartitionError.code,
        ("nope", 0): errors.UnknownTopicOrPartitionError.code}
    assert commit(h, "g", gen, a, {("orders", 1): 5}, metadata="x" * 5000) == {
        ("orders", 1): errors.OffsetMetadataTooLargeError.code}
    assert fetch_offsets(h, "g") == {("orders", 0): (5, "")}
    # a sync for an old generation
    r = h.answer(sync(h, "g", gen - 1, a))
    assert r["error_code"] == errors.IllegalGenerationError.code


def test_bad_joins(h):
    r = h.call(ApiKey.JOIN_GROUP, join_body(""))
    assert r["error_code"] == errors.InvalidGroupIdError.code
    r = h.call(ApiKey.JOIN_GROUP, join_body("g", session=10))
    assert r["error_code"] == errors.InvalidSessionTimeoutError.code
    r = h.call(ApiKey.JOIN_GROUP, join_body("g", member_id="made-up"))
    assert r["error_code"] == errors.UnknownMemberIdError.code
    gen, a, b = stable_pair(h)
    # no assignor in common with the members: refused before it gets a member id
    r = h.call(ApiKey.JOIN_GROUP, join_body("g", protocols=("roundrobin",)))
    assert r["error_code"] == errors.InconsistentGroupProtocolError.code
    assert set(h.coord.groups["g"].members) == {a, b}


def test_session_timeout_removes_a_silent_member(h):
    gen, a, b = stable_pair(h)
    for m in h.coord.groups["g"].members.values():
        m.session_timeout_ms = 1_000
    time.sleep(0.6)                              # within the 1 s session timeout
    assert heartbeat(h, "g", gen, a) == 0        # a stays alive, b goes silent
    time.sleep(0.6)                              # b's session timeout passed, not a's
    h.coord.tick()
    g = h.coord.groups["g"]
    assert set(g.members) == {a} and g.state == "PreparingRebalance"
    ra = h.answer(h.send(ApiKey.JOIN_GROUP, join_body("g", a)))
    assert ra["generation_id"] == gen + 1 and ra["error_code"] == 0


def test_static_member_comes_back_without_a_rebalance(h):
    r = h.call(ApiKey.JOIN_GROUP, join_body("s", instance="i-1"))   # static: no MEMBER_ID_REQUIRED
    first = r["member_id"]
    assert r["error_code"] == 0 and r["generation_id"] == 1
    assert h.answer(sync(h, "s", 1, first, [(first, assignment([("orders", 3)]))]))[
        "assignment"] == assignment([("orders", 3)])
    # restarted: same instance id, no member id
    r = h.call(ApiKey.JOIN_GROUP, join_body("s", instance="i-1"))
    assert r["error_code"] == 0 and r["generation_id"] == 1        # same generation
    second = r["member_id"]
    assert second != first
    assert h.answer(sync(h, "s", 1, second))["assignment"] == assignment([("orders", 3)])
    assert h.coord.groups["s"].state == "Stable"
    # the old incarnation is fenced
    assert heartbeat(h, "s", 1, first, instance="i-1") == errors.FencedInstanceIdError.code


def test_state_survives_a_restart(h):
    gen, a, b = stable_pair(h)
    assert commit(h, "g", gen, a, {("orders", 0): 42}, metadata="ckpt-7") == {("orders", 0): 0}
    assert commit(h, "standalone", -1, "", {("audit", 1): 9}) == {("audit", 1): 0}
    h.reopen()
    assert fetch_offsets(h, "g") == {("orders", 0): (42, "ckpt-7")}
    assert fetch_offsets(h, "standalone") == {("audit", 1): (9, "")}
    g = h.coord.groups["g"]
    assert g.state == "Stable" and g.generation_id == gen and set(g.members) == {a, b}
    # members carry on in their generation, and get their assignment back
    assert heartbeat(h, "g", gen, b) == 0
    assert h.answer(sync(h, "g", gen, b))["assignment"] == assignment([("orders", 2)])


def test_a_member_whose_client_gave_up_during_a_restart_is_replaced_at_its_new_join(h):
    """After a restart, a client whose own session ran out while the
    coordinator was away (librdkafka drops its member id then, and joins
    with none, sending no LeaveGroup) takes the place of its old member at
    once: the rebalance its join starts waits for the members still alive,
    not a session for one that will never rejoin (issue 68 item 4; before,
    the old member stayed until its session ran out here, 10 s and more)."""
    gen, a, b = stable_pair(h)           # both of client id "test", as the joins below
    h.reopen()
    for _ in range(2):      # b kept its membership: heartbeats, not replaced
        assert heartbeat(h, "g", gen, b) == 0
    # a's heartbeat in flight when the coordinator died, re-sent by the
    # worker that relayed it (its client gave up waiting for the answer)
    assert heartbeat(h, "g", gen, a) == 0
    # a member of another client id replaces no one
    other, j_other = join_new(h, "g", client_id="other")
    assert set(h.coord.groups["g"].members) == {a, b, other}
    assert h.answer(h.send(ApiKey.LEAVE_GROUP, {"group_id": "g", "member_id": other,
                                                "members": [{"member_id": other,
                                                             "group_instance_id": None,
                                                             "reason": None}]}))
    assert h.answer(j_other)["error_code"] == errors.UnknownMemberIdError.code
    # a's client comes back as a new member
    c, jc = join_new(h, "g")
    assert set(h.coord.groups["g"].members) == {b, c}
    assert h.answer(jc) is None                       # waits for b, which is alive
    assert heartbeat(h, "g", gen, b) == errors.RebalanceInProgressError.code
    rb, rc = h.answer(h.send(ApiKey.JOIN_GROUP, join_body("g", b))), h.answer(jc)
    assert rb["error_code"] == rc["error_code"] == 0
    assert rb["generation_id"] == rc["generation_id"] == gen + 1
    # the old member is gone: its client learns so if it was not the one
    assert heartbeat(h, "g", gen + 1, a) == errors.UnknownMemberIdError.code


def test_offsets_of_empty_groups_expire(h):
    h.reopen(offsets_retention_minutes=1)
    assert commit(h, "old", -1, "", {("orders", 0): 1}) == {("orders", 0): 0}
    h.coord.expire_offsets()
    assert fetch_offsets(h, "old") == {("orders", 0): (1, "")}
    h.clock_offset_ms = 61_000
    h.coord.expire_offsets()
    assert fetch_offsets(h, "old") == {}
    assert "old" not in h.coord.groups
    h.reopen(offsets_retention_minutes=1)          # the expiry was written down
    assert fetch_offsets(h, "old") == {}


def test_delete_groups(h):
    gen, a, b = stable_pair(h)
    commit(h, "empty", -1, "", {("orders", 0): 3})
    r = h.call(ApiKey.DELETE_GROUPS, {"groups_names": ["g", "empty", "nope"]})
    codes = {x["group_id"]: x["error_code"] for x in r["results"]}
    assert codes == {"g": errors.NonEmptyGroupError.code, "empty": 0,
                     "nope": errors.GroupIdNotFoundError.code}
    assert fetch_offsets(h, "empty") == {}
    listed = h.call(ApiKey.LIST_GROUPS, {"states_filter": []})["groups"]
    assert [x["group_id"] for x in listed] == ["g"]


def test_find_coordinator_points_at_the_supervisor(h):
    r = h.call(ApiKey.FIND_COORDINATOR, {"key_type": 0, "coordinator_keys": ["a", "b"]})
    assert [(c["key"], c["node_id"], c["port"]) for c in r["coordinators"]] == [
        ("a", 7, 9), ("b", 7, 9)]
    r = h.call(ApiKey.FIND_COORDINATOR, {"key": "a", "key_type": 0}, version=2)
    assert (r["error_code"], r["node_id"], r["host"]) == (0, 7, "127.0.0.1")


def test_commit_during_completing_rebalance_checks_member_and_generation_first(h):
    """Kafka's ClassicGroup.validateOffsetCommit: while the group waits for
    its leader's assignment, a stale generation is ILLEGAL_GENERATION and an
    unknown member UNKNOWN_MEMBER_ID; only a member of the current
    generation hears REBALANCE_IN_PROGRESS (librdkafka's 0113 tells them
    apart)."""
    gen, a, b = stable_pair(h)
    h.call(ApiKey.LEAVE_GROUP, {"group_id": "g", "members": [
        {"member_id": b, "group_instance_id": None, "reason": None}]})
    ra = h.answer(h.send(ApiKey.JOIN_GROUP, join_body("g", a)))
    assert ra["generation_id"] == gen + 1
    assert h.coord.groups["g"].state == "CompletingRebalance"
    tp = ("orders", 0)
    assert commit(h, "g", gen, a, {tp: 5}) == {tp: errors.IllegalGenerationError.code}
    assert commit(h, "g", gen + 1, "nobody", {tp: 5}) == {tp: errors.UnknownMemberIdError.code}
    assert commit(h, "g", gen + 1, b, {tp: 5}) == {tp: errors.UnknownMemberIdError.code}
    assert commit(h, "g", -1, "", {tp: 5}) == {tp: errors.UnknownMemberIdError.code}
    assert commit(h, "g", gen + 1, a, {tp: 5}) == {tp: errors.RebalanceInProgressError.code}
    assert fetch_offsets(h, "g") == {}


def test_commit_before_v7_has_no_static_instance(h):
    """OffsetCommit v2-v6 has no group_instance_id (it decodes as ""): the
    member is checked by its id alone, as aiokafka's commits need."""
    gen, a, b = stable_pair(h)
    resp = h.call(ApiKey.OFFSET_COMMIT, {
        "group_id": "g", "generation_id_or_member_epoch": gen, "member_id": a,
        "retention_time_ms": -1, "topics": [{"name": "orders", "partitions": [
            {"partition_index": 0, "committed_offset": 3, "committed_metadata": ""}]}]},
        version=2)
    assert resp["topics"][0]["partitions"][0]["error_code"] == 0
    assert fetch_offsets(h, "g") == {("orders", 0): (3, "")}
