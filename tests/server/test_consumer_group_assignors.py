"""The KIP-848 server-side assignors (kafkalite/server/group/consumer_group.py):
``uniform`` balances and moves no more partitions than balance needs when a
member joins or leaves; ``range`` gives each topic's subscribers consecutive
ranges. Plain functions of members and topics: called directly."""
from __future__ import annotations

import uuid

import pytest

from kafkalite.server.group.consumer_group import ConsumerGroupMember, assign_range, assign_uniform

T, U = uuid.uuid4(), uuid.uuid4()


def members(n, topics=("t",)) -> dict:
    out = {}
    for i in range(n):
        m = ConsumerGroupMember(f"m{i:03}", None, None, "", "", 1000)
        m.topics = frozenset(topics)
        out[m.member_id] = m
    return out


def moved(before, after) -> int:
    return sum(1 for mid, tps in before.items() for tp in tps if tp not in after.get(mid, ()))


@pytest.mark.parametrize("n,partitions", [(1, 100), (10, 100), (50, 100), (200, 10_000)])
def test_uniform_joins_and_leaves_move_only_what_balance_needs(n, partitions):
    topics = {"t": (T, partitions)}
    before = assign_uniform(members(n), topics, {})
    after = assign_uniform(members(n + 1), topics, before)
    sizes = [len(v) for v in after.values()]
    assert sum(sizes) == partitions and len(set().union(*after.values())) == partitions
    assert max(sizes) - min(sizes) <= 1
    assert moved(before, after) == min(sizes)          # the new member's share, nothing else
    back = assign_uniform(members(n), topics, after)   # the newest member leaves again
    assert moved({k: v for k, v in after.items() if k in back}, back) == 0


def test_uniform_with_different_subscriptions():
    ms = members(3)
    ms["m000"].topics = frozenset({"t", "u"})
    out = assign_uniform(ms, {"t": (T, 4), "u": (U, 4)}, {})
    # only m000 may own u's partitions: it gets them all, t is shared by the others
    assert sorted(out["m000"]) == [(U, p) for p in range(4)]
    assert sorted(out["m001"] | out["m002"]) == [(T, p) for p in range(4)]
    assert len(out["m001"]) == len(out["m002"]) == 2


def test_range_gives_consecutive_ranges_per_topic():
    ms = members(2, ("t", "u"))
    ms["m001"].topics = frozenset({"u"})
    out = assign_range(ms, {"t": (T, 3), "u": (U, 5)}, {})
    assert out["m000"] == {(T, 0), (T, 1), (T, 2), (U, 0), (U, 1), (U, 2)}
    assert out["m001"] == {(U, 3), (U, 4)}
