"""The leader's assignment of connectors and tasks to the workers of a
Connect group: the assignment units (Kafka's ConnectorTaskId, as JSON
strings) and the incremental cooperative assignor of KIP-415 (Kafka's
IncrementalCooperativeAssignor).

Which process runs it: a ``kafkalite connect distributed`` worker, on its
membership thread when the group makes it leader (every member keeps the
last round it was sent, should it lead the next).

What it may import: the standard library only: the assignor is pure
computation over the members' metadata, tested on its own
(tests/connect/test_connect_cooperative.py).
"""
from __future__ import annotations

import json
import time


def connector_unit(name: str) -> str:
    """The assignment unit of a connector instance (JSON: no connector name can
    make it collide with a task's)."""
    return json.dumps([name])


def task_unit(name: str, task: int) -> str:
    """The assignment unit of a connector's task (Kafka's ConnectorTaskId)."""
    return json.dumps([name, task])


def parse_unit(unit: str) -> tuple:
    """(name,) for a connector, (name, task) for a task."""
    return tuple(json.loads(unit))


def unit_connector(unit: str) -> str:
    """The connector a unit belongs to (the assignor's group: tasks spread)."""
    return json.loads(unit)[0]


class IncrementalCooperativeAssignor:
    """The leader's incremental cooperative assignment (Kafka's KIP-415
    IncrementalCooperativeAssignor); its units are opaque strings (the
    herder's are connectors and tasks: connector_unit, task_unit).

    Each member's metadata says what it runs (``owned``). A round:
    units no longer configured are revoked; units of members that left
    (known from this leader's previous round) are held for
    ``scheduled.rebalance.max.delay.ms`` in case the member comes back
    (members rejoin when the delay ends), then dealt out like new units;
    a member above its fair share (total / members, the remainder to the
    members that hold most) revokes the excess; units nobody runs go to
    the members furthest below their share, and among those to the one
    running fewest units of the same group (``group_of``: a task's
    connector), so a connector's tasks spread over the workers. A unit
    revoked in a round is given to no one in the same round: its member
    stops it and rejoins, and the next round hands it out, so a unit never
    runs on two members at once. Units that stay put are in no list and
    keep running.

    Assignment per member: ``{"units": [what it runs after this round],
    "assigned": [of those, the new ones: to start], "revoked": [to stop],
    "delay": ms until a rejoin is due (0: none), "owners": {unit: owner
    url}, "previous": {unit: url} (what the next leader compares with)}``.
    A new leader starts the delay afresh."""

    def __init__(self, max_delay_ms: int, group_of=None):
        self.max_delay_ms = max_delay_ms
        self.group_of = group_of or (lambda unit: unit)
        # unit -> its owner's url after the last round: every member keeps the one it was
        # sent (``remember``), so a new leader still knows what a departed member ran
        self.previous: dict[str, str] = {}
        self.lost_deadline: float | None = None   # monotonic s when held units are dealt out

    def assign(self, members: list, units: list[str], now: float | None = None) -> dict:
        now = time.monotonic() if now is None else now
        units_set = set(units)
        ids = sorted(m for m, _ in members)
        meta = dict(members)
        owned: dict[str, list] = {m: [] for m in ids}
        revoked: dict[str, list] = {m: [] for m in ids}
        taken = set()
        for m in ids:
            for u in sorted(meta[m].get("owned", [])):
                if u not in units_set or u in taken:      # deleted, or claimed twice
                    revoked[m].append(u)
                else:
                    owned[m].append(u)
                    taken.add(u)
        present = {meta[m]["url"] for m in ids}
        lost = {u for u, url in self.previous.items()
                if url not in present and u in units_set and u not in taken}
        delay = 0
        if lost and self.max_delay_ms > 0:
            if self.lost_deadline is None:
                self.lost_deadline = now + self.max_delay_ms / 1000
            if now < self.lost_deadline:
                delay = max(1, int((self.lost_deadline - now) * 1000))
            else:
                lost = set()                  # the delay is over: dealt out as new units
                self.lost_deadline = None
        else:
            lost = set()
            self.lost_deadline = None
        held = lost
        total = len(units_set - held)
        n = len(ids)
        base, extra = divmod(total, n) if n else (0, 0)
        # who keeps one above the base share: those holding most already (fewest moves)
        by_load = sorted(ids, key=lambda m: (-len(owned[m]), m))
        share = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_load)}
        for m in ids:
            excess = len(owned[m]) - share[m]
            if excess > 0:
                revoked[m] += owned[m][-excess:]
                owned[m] = owned[m][:-excess]
        revoked_now = {u for r in revoked.values() for u in r}
        free = sorted(units_set - taken - held)
        free = [u for u in free if u not in revoked_now]
        group_of = self.group_of
        for u in free:
            g = group_of(u)
            m = min(ids, key=lambda x: (len(owned[x]) - share[x],
                                        sum(1 for o in owned[x] if group_of(o) == g),
                                        len(owned[x]), x))
            owned[m].append(u)
        owners = {u: meta[m]["url"] for m in ids for u in owned[m]}
        # held units stay their departed member's, and a unit being revoked its member's
        # until it rejoins: lost if that member goes before then
        previous = {**{u: self.previous[u] for u in held},
                    **{u: meta[m]["url"] for m in ids for u in revoked[m] if u in units_set},
                    **owners}
        self.previous = previous
        return {m: {"units": sorted(owned[m]),
                    "assigned": sorted(set(owned[m]) - set(meta[m].get("owned", []))),
                    "revoked": sorted(revoked[m]), "delay": delay, "owners": owners,
                    "previous": previous} for m in ids}

    def remember(self, assignment: dict) -> None:
        """A member's copy of the round it was sent, should it lead the next."""
        self.previous = dict(assignment.get("previous", {}))
