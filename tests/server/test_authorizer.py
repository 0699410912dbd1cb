"""The ACL model's rules (kafkalite/server/auth/authorizer.py), as Kafka's AclAuthorizer decides:
literal, wildcard and prefixed patterns, deny over allow, ALL, implied
operations, super users, allow.everyone.if.no.acl.found, and the filters of
DescribeAcls / DeleteAcls; and the ACL file surviving a reload."""
from __future__ import annotations

import pytest

from kafkalite import errors
from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import AclPermissionType as Perm
from kafkalite.protocol.enums import PatternType as Pat
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.server.controller.acl_control import AclStore
from kafkalite.server.auth.authorizer import (AclBinding, AclFilter, Authorizer,
                                         binding_from_request)
from kafkalite.server.metrics import RequestStats

ALICE, BOB = "User:alice", "User:bob"
HOST = "10.0.0.7"


def acl(name, op, perm=Perm.ALLOW, principal=ALICE, pattern=Pat.LITERAL, res=Res.TOPIC,
        host="*"):
    return AclBinding(res, name, pattern, principal, host, op, perm)


def allows(a: Authorizer, op, name, principal=ALICE, res=Res.TOPIC, host=HOST) -> bool:
    return a.authorize(principal, host, op, res, name)


def test_literal_acl_covers_only_its_resource_and_principal():
    a = Authorizer(acls=[acl("orders", Op.READ)])
    assert allows(a, Op.READ, "orders")
    assert not allows(a, Op.READ, "orders2")
    assert not allows(a, Op.WRITE, "orders")
    assert not allows(a, Op.READ, "orders", principal=BOB)
    assert not allows(a, Op.READ, "orders", res=Res.GROUP)


def test_wildcards_for_resource_principal_and_host():
    a = Authorizer(acls=[acl("*", Op.READ, principal="User:*")])
    assert allows(a, Op.READ, "anything", principal=BOB)
    a = Authorizer(acls=[acl("orders", Op.READ, host="10.0.0.8")])
    assert not allows(a, Op.READ, "orders")
    assert allows(a, Op.READ, "orders", host="10.0.0.8")


def test_prefixed_pattern():
    a = Authorizer(acls=[acl("team-a.", Op.WRITE, pattern=Pat.PREFIXED)])
    assert allows(a, Op.WRITE, "team-a.orders")
    assert allows(a, Op.WRITE, "team-a.")
    assert not allows(a, Op.WRITE, "team-b.orders")
    assert not allows(a, Op.WRITE, "team-a")


def test_deny_overrides_allow_whatever_the_pattern():
    a = Authorizer(acls=[acl("team-a.", Op.ALL, pattern=Pat.PREFIXED),
                         acl("team-a.secret", Op.READ, Perm.DENY)])
    assert allows(a, Op.READ, "team-a.orders")
    assert not allows(a, Op.READ, "team-a.secret")
    assert allows(a, Op.WRITE, "team-a.secret")       # the deny names Read only
    a = Authorizer(acls=[acl("orders", Op.READ), acl("*", Op.ALL, Perm.DENY,
                                                     principal="User:*")])
    assert not allows(a, Op.READ, "orders")


def test_all_and_implied_operations():
    a = Authorizer(acls=[acl("orders", Op.ALL)])
    for op in (Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER, Op.DESCRIBE,
               Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS):
        assert allows(a, op, "orders"), op
    for op in (Op.READ, Op.WRITE, Op.DELETE, Op.ALTER):
        a = Authorizer(acls=[acl("orders", op)])
        assert allows(a, Op.DESCRIBE, "orders"), op
    a = Authorizer(acls=[acl("orders", Op.CREATE)])
    assert not allows(a, Op.DESCRIBE, "orders")
    a = Authorizer(acls=[acl("orders", Op.ALTER_CONFIGS)])
    assert allows(a, Op.DESCRIBE_CONFIGS, "orders")
    assert not allows(a, Op.DESCRIBE, "orders")
    # an implied Describe is not allowed against a Describe deny
    a = Authorizer(acls=[acl("orders", Op.READ), acl("orders", Op.DESCRIBE, Perm.DENY)])
    assert not allows(a, Op.DESCRIBE, "orders")
    assert allows(a, Op.READ, "orders")


def test_super_users_and_no_acl_found():
    a = Authorizer(super_users=["User:admin"], acls=[acl("orders", Op.READ, Perm.DENY,
                                                         principal="User:*")])
    assert allows(a, Op.READ, "orders", principal="User:admin")
    assert not allows(a, Op.READ, "orders")
    assert not allows(a, Op.READ, "payments")           # no ACL: denied by default
    open_ = Authorizer(allow_everyone_if_no_acl_found=True, acls=[acl("orders", Op.READ)])
    assert allows(open_, Op.WRITE, "payments", principal=BOB)
    assert not allows(open_, Op.READ, "orders", principal=BOB)   # ACLs exist: they decide


def test_authorize_any_for_idempotent_producers():
    a = Authorizer(acls=[acl("team-a.", Op.WRITE, pattern=Pat.PREFIXED)])
    assert a.authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC)
    assert not a.authorize_any(BOB, HOST, Op.WRITE, Res.TOPIC)
    a.replace([*a.acls, acl("*", Op.WRITE, Perm.DENY)])
    assert not a.authorize_any(ALICE, HOST, Op.WRITE, Res.TOPIC)


def test_denials_are_counted_and_filters_are_not(caplog):
    stats = RequestStats()
    a = Authorizer(acls=[acl("orders", Op.READ)], stats=stats)
    with caplog.at_level("WARNING", logger="kafkalite.authorizer"):
        assert not a.authorize(BOB, HOST, Op.READ, Res.TOPIC, "orders")
        assert not a.authorize(BOB, HOST, Op.DESCRIBE, Res.TOPIC, "orders", audit=False)
    assert stats.denied == {"Topic:Read": 1}
    assert "Principal = User:bob is Denied Operation = Read from host = 10.0.0.7" in caplog.text


def _filter(res=Res.ANY, name=None, pattern=Pat.ANY, principal=None, op=Op.ANY,
            perm=Perm.ANY) -> AclFilter:
    return AclFilter(res, name, pattern, principal, None, op, perm)


def test_filters_of_describe_and_delete():
    lit, wild, pre = (acl("orders", Op.READ), acl("*", Op.READ, principal=BOB),
                      acl("ord", Op.WRITE, pattern=Pat.PREFIXED))
    group = acl("g1", Op.READ, res=Res.GROUP)
    every = [lit, wild, pre, group]
    assert [b for b in every if _filter().matches(b)] == every
    assert [b for b in every if _filter(res=Res.GROUP).matches(b)] == [group]
    assert [b for b in every if _filter(name="orders").matches(b)] == [lit]
    assert [b for b in every if _filter(name="orders", pattern=Pat.MATCH).matches(b)] == [
        lit, wild, pre]
    assert [b for b in every if _filter(pattern=Pat.PREFIXED).matches(b)] == [pre]
    assert [b for b in every if _filter(principal=BOB).matches(b)] == [wild]
    assert [b for b in every if _filter(op=Op.WRITE).matches(b)] == [pre]


def _creation(**over) -> dict:
    c = {"resource_type": Res.TOPIC, "resource_name": "orders",
         "resource_pattern_type": Pat.LITERAL, "principal": ALICE, "host": "*",
         "operation": Op.READ, "permission_type": Perm.ALLOW}
    c.update(over)
    return c


@pytest.mark.parametrize("bad", [
    {"resource_type": Res.ANY}, {"resource_pattern_type": Pat.MATCH},
    {"operation": Op.ANY}, {"permission_type": Perm.ANY}, {"principal": "alice"},
    {"resource_type": Res.CLUSTER, "resource_name": "other"}, {"resource_name": ""},
    {"resource_pattern_type": Pat.PREFIXED, "resource_name": "*"}, {"operation": 99},
])
def test_invalid_creations_are_refused(bad):
    with pytest.raises(errors.InvalidRequestError):
        binding_from_request(_creation(**bad))


def test_acl_file_round_trip(tmp_path):
    acls = [binding_from_request(_creation()),
            binding_from_request(_creation(resource_type=Res.CLUSTER,
                                           resource_name="kafka-cluster", operation=Op.ALTER)),
            binding_from_request(_creation(resource_pattern_type=Pat.PREFIXED,
                                           permission_type=Perm.DENY))]
    assert AclStore(str(tmp_path)).load() == ([], 0)
    AclStore(str(tmp_path)).save(acls, 7)
    assert AclStore(str(tmp_path)).load() == (acls, 7)      # the version is kept (issue 67)
    (tmp_path / "acls.json").write_text("{not json")
    with pytest.raises(errors.KafkaStorageError):
        AclStore(str(tmp_path)).load()


def test_indexed_decisions_agree_with_every_acl_scanned():
    """The authorizer looks ACLs up by name and type; a decision must be the
    one a scan of every ACL with AclBinding.matches_resource gives."""
    import random
    rng = random.Random(7)
    names = ["orders", "orders-eu", "ord", "payments", "*", "o"]
    acls = [AclBinding(rng.choice([Res.TOPIC, Res.GROUP]), rng.choice(names),
                       rng.choice([Pat.LITERAL, Pat.PREFIXED]), rng.choice([ALICE, BOB, "User:*"]),
                       "*", rng.choice([Op.READ, Op.WRITE, Op.ALL, Op.DESCRIBE]),
                       rng.choice([Perm.ALLOW, Perm.ALLOW, Perm.DENY]))
            for _ in range(40)]
    acls = list(dict.fromkeys(a for a in acls
                              if not (a.pattern_type == Pat.PREFIXED and a.resource_name == "*")))
    a = Authorizer(acls=acls)
    for name in names + ["orders-us", "p", "zzz"]:
        for res in (Res.TOPIC, Res.GROUP):
            scanned = [b for b in acls if b.matches_resource(res, name)]
            assert sorted(a._index.matching(res, name), key=acls.index) == scanned, (res, name)


def test_the_reserved_user_name_prefix_is_the_local_doors_principal():
    """credentials.py repeats protocol/curve.py's prefix (importing it would load the codecs
    before a server's workers are spawned): the two must agree."""
    from kafkalite.protocol.curve import LOCAL_PRINCIPAL_PREFIX
    from kafkalite.server.auth import credentials
    assert credentials.LOCAL_PRINCIPAL_PREFIX == LOCAL_PRINCIPAL_PREFIX
    assert credentials.reserved("unix:root") and not credentials.reserved("unixroot")
