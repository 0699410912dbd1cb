"""Partition assignors: properties over random groups, and Kafka's examples."""
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.client.assignors import (MemberSubscription, cooperative_sticky_assign,
                                        parse_strategies, range_assign, rebalance_protocol,
                                        roundrobin_assign,
                                        sticky_assign)


def counts(assignment):
    return sorted(len(v) for v in assignment.values())


groups = st.builds(
    lambda n, topics: ([MemberSubscription(f"m{i}", list(topics)) for i in range(n)],
                       dict(topics)),
    st.integers(1, 12),
    st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), st.integers(1, 40), min_size=1))


@pytest.mark.parametrize("assign", [range_assign, roundrobin_assign, sticky_assign])
@settings(max_examples=150, deadline=None)
@given(group=groups)
def test_every_partition_has_exactly_one_owner(assign, group):
    members, topics = group
    result = assign(members, topics)
    owned = [tp for tps in result.values() for tp in tps]
    assert sorted(owned) == sorted((t, p) for t, n in topics.items() for p in range(n))


@pytest.mark.parametrize("assign", [roundrobin_assign, sticky_assign])
@settings(max_examples=150, deadline=None)
@given(group=groups)
def test_same_subscriptions_are_balanced(assign, group):
    members, topics = group
    c = counts(assign(members, topics))
    assert c[-1] - c[0] <= 1


def test_range_gives_consecutive_ranges_per_topic():
    members = [MemberSubscription("m1", ["t"]), MemberSubscription("m0", ["t"])]
    assert range_assign(members, {"t": 5}) == {"m0": [("t", 0), ("t", 1), ("t", 2)],
                                               "m1": [("t", 3), ("t", 4)]}


def test_members_beyond_the_partition_count_sit_idle():
    members = [MemberSubscription(f"m{i}", ["t"]) for i in range(5)]
    for assign in (range_assign, roundrobin_assign, sticky_assign):
        assert counts(assign(members, {"t": 3})) == [0, 0, 1, 1, 1]


def test_members_only_get_topics_they_subscribe_to():
    members = [MemberSubscription("a", ["x"]), MemberSubscription("b", ["x", "y"])]
    for assign in (range_assign, roundrobin_assign, sticky_assign):
        result = assign(members, {"x": 2, "y": 3})
        assert all(t == "x" for t, _ in result["a"])
        assert sorted(result["a"] + result["b"]) == [("x", 0), ("x", 1), ("y", 0), ("y", 1),
                                                     ("y", 2)]


@settings(max_examples=150, deadline=None)
@given(group=groups, joiners=st.integers(1, 4), seed=st.randoms(use_true_random=False))
def test_cooperative_sticky_converges_in_two_rounds_and_keeps_what_it_can(group, joiners, seed):
    members, topics = group
    first = sticky_assign(members, topics)
    for m in members:
        m.owned = first[m.member_id]
        m.generation = 1
    seed.shuffle(members)
    newcomers = [MemberSubscription(f"new{i}", list(topics)) for i in range(joiners)]
    everyone = members + newcomers
    # round 1: nobody is given a partition someone else still owns
    round1 = cooperative_sticky_assign(everyone, topics)
    for m in members:
        kept = set(round1[m.member_id])
        assert kept <= set(m.owned)          # only revocations for old members
    for n in newcomers:
        assert all(all(tp not in m.owned for m in members) for tp in round1[n.member_id])
    # members revoke what they lost and rejoin: round 2 completes the move
    for m in everyone:
        m.owned = round1[m.member_id]
        m.generation = 2
    round2 = cooperative_sticky_assign(everyone, topics)
    owned = [tp for tps in round2.values() for tp in tps]
    assert sorted(owned) == sorted((t, p) for t, n in topics.items() for p in range(n))
    c = counts(round2)
    assert c[-1] - c[0] <= 1
    for m in everyone:   # nothing owned after round 1 moves in round 2
        assert set(m.owned) <= set(round2[m.member_id])
    # stickiness: an old member keeps min(what it had, its fair share) partitions
    total = sum(topics.values())
    for m in members:
        assert len(round1[m.member_id]) >= min(len(first[m.member_id]), total // len(everyone))


def test_strategy_names_are_checked():
    assert parse_strategies("range, roundrobin") == ["range", "roundrobin"]
    with pytest.raises(ValueError, match="unknown partition.assignment.strategy 'sticky'"):
        parse_strategies("sticky")
    # the Java client's default: listed together, rebalanced eagerly
    assert parse_strategies("range,cooperative-sticky") == ["range", "cooperative-sticky"]
    assert rebalance_protocol(["range", "cooperative-sticky"]) == "eager"
    assert rebalance_protocol(["cooperative-sticky"]) == "cooperative"
