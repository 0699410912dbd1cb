"""Partition assignors: how a group's leader shares partitions among members.

The group leader runs one of these over every member's subscription and
hands the result out through SyncGroup (the coordinator only relays it, as
in Kafka). Names match Kafka's ``partition.assignment.strategy`` values:

- ``range``: per topic, members (sorted by member id) take consecutive
  ranges; the first ``partitions % members`` take one more.
- ``roundrobin``: every subscribed partition, sorted, dealt to members in
  turn (skipping members not subscribed to its topic).
- ``cooperative-sticky``: balanced (counts differ by at most one among
  members with the same subscription), and each member keeps as many of
  the partitions it owns as balance allows. A partition moving from one
  member to another is left unassigned in this round; its owner revokes
  it, rejoins, and the next round hands it to its new member (KIP-429), so
  no partition ever has two owners and nobody stops consuming what stays.

Who may call: kafkalite.client.group (the leader's side of SyncGroup);
pure functions of their inputs, so tests call them directly.
"""
from __future__ import annotations

from dataclasses import dataclass, field

EAGER = "eager"
COOPERATIVE = "cooperative"


@dataclass
class MemberSubscription:
    member_id: str
    topics: list[str]
    owned: list[tuple[str, int]] = field(default_factory=list)
    generation: int = -1
    group_instance_id: str | None = None


def _sort_key(m: MemberSubscription):
    # Kafka orders static members by instance id, so a restart keeps ranges
    return (m.group_instance_id is None, m.group_instance_id or "", m.member_id)


def range_assign(members: list[MemberSubscription], partitions: dict[str, int]) -> dict:
    out = {m.member_id: [] for m in members}
    for topic in sorted(partitions):
        subscribed = sorted((m for m in members if topic in m.topics), key=_sort_key)
        if not subscribed:
            continue
        count = partitions[topic]
        per, extra = divmod(count, len(subscribed))
        start = 0
        for i, m in enumerate(subscribed):
            n = per + (1 if i < extra else 0)
            out[m.member_id].extend((topic, p) for p in range(start, start + n))
            start += n
    return out


def roundrobin_assign(members: list[MemberSubscription], partitions: dict[str, int]) -> dict:
    out = {m.member_id: [] for m in members}
    ordered = sorted(members, key=_sort_key)
    if not ordered:
        return out
    i = 0
    for topic in sorted(partitions):
        for p in range(partitions[topic]):
            for _ in range(len(ordered)):
                m = ordered[i % len(ordered)]
                i += 1
                if topic in m.topics:
                    out[m.member_id].append((topic, p))
                    break
    return out


def sticky_assign(members: list[MemberSubscription], partitions: dict[str, int]) -> dict:
    """Balanced and sticky; the cooperative filtering is in cooperative_sticky_assign."""
    ordered = sorted(members, key=_sort_key)
    subs = {m.member_id: set(m.topics) for m in ordered}
    valid = {(t, p) for t, n in partitions.items() for p in range(n)}
    # Who owns what: a partition claimed by two members (a stale claim) goes
    # to the claim from the newest generation.
    claims: dict[tuple[str, int], tuple[int, str]] = {}
    for m in ordered:
        for tp in m.owned:
            tp = (tp[0], tp[1])
            if tp in valid and tp[0] in subs[m.member_id]:
                if tp not in claims or m.generation > claims[tp][0]:
                    claims[tp] = (m.generation, m.member_id)
    out: dict[str, list] = {m.member_id: [] for m in ordered}
    for tp, (_, mid) in sorted(claims.items()):
        out[mid].append(tp)
    eligible_count = {tp: sum(1 for m in ordered if tp[0] in subs[m.member_id]) for tp in valid}
    # Quotas: members subscribed to the same set share their partitions
    # evenly. For mixed subscriptions, balance greedily by count.
    total = sum(1 for tp in valid if eligible_count[tp])
    n = len(ordered)
    if n == 0:
        return out
    floor, extra = divmod(total, n)
    # Members keeping the most owned partitions get the "+1" slots, so fewer move.
    by_owned = sorted(ordered, key=lambda m: -len(out[m.member_id]))
    quota = {m.member_id: floor + (1 if i < extra else 0) for i, m in enumerate(by_owned)}
    unassigned = [tp for tp in sorted(valid) if tp not in claims and eligible_count[tp]]
    for m in ordered:
        mine = out[m.member_id]
        while len(mine) > quota[m.member_id]:
            unassigned.append(mine.pop())
    unassigned.sort()
    for tp in unassigned:
        candidates = [m for m in ordered if tp[0] in subs[m.member_id]]
        if not candidates:
            continue
        under = [m for m in candidates if len(out[m.member_id]) < quota[m.member_id]]
        pick = min(under or candidates, key=lambda m: (len(out[m.member_id]), _sort_key(m)))
        out[pick.member_id].append(tp)
    for mine in out.values():
        mine.sort()
    return out


def cooperative_sticky_assign(members: list[MemberSubscription], partitions: dict[str, int]) -> dict:
    target = sticky_assign(members, partitions)
    owner = {}
    for m in members:
        for tp in m.owned:
            owner.setdefault((tp[0], tp[1]), m.member_id)
    # A partition that changes hands is withheld until its owner has revoked it.
    return {mid: [tp for tp in tps if owner.get(tp, mid) == mid] for mid, tps in target.items()}


ASSIGNORS = {
    "range": (range_assign, EAGER),
    "roundrobin": (roundrobin_assign, EAGER),
    "cooperative-sticky": (cooperative_sticky_assign, COOPERATIVE),
}


def parse_strategies(value: str) -> list[str]:
    """``partition.assignment.strategy`` -> assignor names; ValueError if unknown.
    Eager and cooperative assignors may be listed together, as in the Java
    client's default ``range,cooperative-sticky``: see ``rebalance_protocol``."""
    names = [s.strip().lower() for s in str(value).split(",") if s.strip()]
    if not names:
        raise ValueError("partition.assignment.strategy is empty")
    unknown = [n for n in names if n not in ASSIGNORS]
    if unknown:
        raise ValueError(f"unknown partition.assignment.strategy {unknown[0]!r}: use "
                         f"{', '.join(ASSIGNORS)}")
    return names


def rebalance_protocol(names: list[str]) -> str:
    """COOPERATIVE only if every listed assignor is cooperative, else EAGER:
    the Java client's rule (ConsumerCoordinator). A member listing
    ``range,cooperative-sticky`` can join a group whose members all chose
    cooperative-sticky, and it revokes everything before each rejoin, which
    is safe under either protocol."""
    return COOPERATIVE if all(ASSIGNORS[n][1] == COOPERATIVE for n in names) else EAGER
