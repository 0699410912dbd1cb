"""The console's authorization table (kafkalite/webconsole/authorization.py)
against its route table (app.py ROUTES), and one request's decisions made
with the server's real Authorizer. No server: the end-to-end tests, as a
user logged in, are tests/security/test_console_as_user.py.
"""
import pytest

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import AclPermissionType, PatternType
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.server.auth.authorizer import AclBinding, Authorizer
from kafkalite.webconsole import app, authorization
from kafkalite.webconsole.authorization import FILTER, REFUSE, Access, Denied, NoRule


def test_every_route_has_a_rule_and_a_handler_and_every_rule_a_route():
    actions = {action for _, _, action in app.ROUTES}
    missing = sorted(a for a in actions if a not in authorization.RULES)
    assert not missing, f"routes without an authorization rule: {missing}"
    assert not sorted(set(authorization.RULES) - actions), "rules of no route"
    for _, _, action in app.ROUTES:
        assert action == "page" or callable(getattr(app.ConsoleApp, "_" + action, None)), action
    # a refusing need on a topic or group is checked before the action when
    # its route names one; otherwise the action must name it (Access.require)
    for method, pattern, action in app.ROUTES:
        for need in authorization.RULES[action]:
            assert need.scope in (REFUSE, FILTER), (action, need)
            assert need.resource_type in (Res.TOPIC, Res.GROUP, Res.CLUSTER), (action, need)


def test_a_route_without_a_rule_is_refused_not_served():
    with pytest.raises(NoRule) as caught:
        Access({}, "no_such_action")
    assert caught.value.status == 403 and "no authorization rule" in str(caught.value)


def authorizer_with(*acls) -> Authorizer:
    return Authorizer(super_users=["User:admin"], acls=[
        AclBinding(rt, name, PatternType.LITERAL, principal, "*", op, AclPermissionType.ALLOW)
        for rt, name, principal, op in acls])


def environ_of(authorizer: Authorizer, principal: str) -> dict:
    def authorize(operation, resource_type, name, audit=True):
        return authorizer.authorize(principal, "127.0.0.1", operation, resource_type, name,
                                    audit=audit)
    return {authorization.ENVIRON_PRINCIPAL: principal,
            authorization.ENVIRON_AUTHORIZE: authorize}


def test_a_refusal_names_the_operation_and_the_resource():
    authz = authorizer_with((Res.TOPIC, "a", "User:alice", Op.READ))
    alice = environ_of(authz, "User:alice")
    Access(alice, "read_records").check_route({"topic": "a"})
    with pytest.raises(Denied) as caught:
        Access(alice, "read_records").check_route({"topic": "b"})
    assert caught.value.as_json() == {
        "error": "User:alice may not Read topic 'b'", "code": "TOPIC_AUTHORIZATION_FAILED",
        "operation": "READ", "resource": {"type": "TOPIC", "name": "b"}}
    with pytest.raises(Denied) as caught:
        Access(alice, "metrics").check_route({})
    assert caught.value.as_json()["resource"] == {"type": "CLUSTER", "name": "kafka-cluster"}
    assert caught.value.as_json()["code"] == "CLUSTER_AUTHORIZATION_FAILED"
    # the super user, and anyone when the authorizer is off (no decisions given)
    Access(environ_of(authz, "User:admin"), "read_records").check_route({"topic": "b"})
    Access({}, "read_records").check_route({"topic": "b"})


def test_create_is_allowed_by_create_on_the_cluster_or_on_the_topic():
    authz = authorizer_with((Res.TOPIC, "mine", "User:alice", Op.CREATE),
                            (Res.CLUSTER, "kafka-cluster", "User:bob", Op.CREATE))
    alice, bob = environ_of(authz, "User:alice"), environ_of(authz, "User:bob")
    Access(alice, "create_topic").require(Op.CREATE, Res.TOPIC, ["mine"])
    with pytest.raises(Denied):
        Access(alice, "create_topic").require(Op.CREATE, Res.TOPIC, ["theirs"])
    Access(bob, "create_topic").require(Op.CREATE, Res.TOPIC, ["anything"])


def test_lists_are_filtered_without_auditing_and_groups_by_describe_on_the_cluster(caplog):
    authz = authorizer_with((Res.TOPIC, "a", "User:alice", Op.READ),
                            (Res.GROUP, "ga", "User:alice", Op.READ),
                            (Res.CLUSTER, "kafka-cluster", "User:ops", Op.DESCRIBE))
    alice = Access(environ_of(authz, "User:alice"), "list_groups")
    assert [t for t in ("a", "b") if alice.sees(Op.DESCRIBE, Res.TOPIC)(t)] == ["a"]
    assert [g for g in ("ga", "gb") if alice.sees(Op.DESCRIBE, Res.GROUP)(g)] == ["ga"]
    ops = Access(environ_of(authz, "User:ops"), "list_groups")
    assert ops.sees(Op.DESCRIBE, Res.GROUP)("gb")          # ListGroups: Describe on the cluster
    assert not ops.sees(Op.DESCRIBE, Res.TOPIC)("b")        # Metadata has no such shortcut
    # a filter is not an attempt: the authorizer's log has no denial; a refusal is one
    assert not [r for r in caplog.records if r.name == "kafkalite.authorizer"]
    with pytest.raises(Denied):
        Access(environ_of(authz, "User:alice"), "describe_group").check_route({"group": "gb"})
    assert [r.getMessage() for r in caplog.records if r.name == "kafkalite.authorizer"] == [
        "Principal = User:alice is Denied Operation = Describe from host = 127.0.0.1 on "
        "resource = Group:LITERAL:gb"]


def test_an_action_may_ask_only_what_its_rule_declares():
    access = Access({}, "list_topics")
    with pytest.raises(KeyError):
        access.sees(Op.READ, Res.TOPIC)
    with pytest.raises(KeyError):
        access.require(Op.DELETE, Res.TOPIC, ["a"])
    reset = Access({}, "reset_offsets")
    reset.check_route({"group": "g"})
    assert reset.unchecked() == ["READ on TOPIC"]           # the action must name its topics
    reset.require(Op.READ, Res.TOPIC, ["a"])
    assert reset.unchecked() == []
