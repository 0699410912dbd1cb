"""The CDC source's poll batches (connectors/cdc.py ``_Batches``): a run of
changes added at once (``extend``, the C change run's and the snapshot's
path) makes the batches that adding them one by one (``add``) makes --
the same runs per relation and key, values, keys, timestamps, count and
offset -- after a run of the same relation (continued) or of another (a
new batch), keyed or not."""
from __future__ import annotations

from kafkalite.connect.connectors.cdc import _Batches, _Relation
from kafkalite.connect.connectors.cdc_envelopes import ChangeSource


def relation(relid: int, table: str, keyed: bool) -> _Relation:
    cols = [("id", 20, keyed), ("name", 25, False)]
    return _Relation(("R", relid, "public", table, "d" if keyed else "n", cols),
                     ["id"] if keyed else [], "srv", "precise")


def change(k: int) -> tuple:
    return ("c", None, False, [str(k).encode(), b"n"], 1000 + k, "false", 7, 100 + k, 99, k)


def shape(b: _Batches) -> list:
    return [b.count] + [(x.topic, x.values.changes, None if x.keys is None else x.keys.changes,
                         x.timestamps, x.source_offset, x.tombstones) for x in b.out]


def test_a_run_added_at_once_makes_the_batches_of_one_add_each():
    source = ChangeSource("srv", "db", None)
    a, b = relation(1, "a", True), relation(2, "b", False)
    # (relation, keyed, changes): a run continued, another relation, unkeyed, one change
    plan = [(a, True, [change(k) for k in range(0, 3)]),
            (a, True, [change(k) for k in range(3, 8)]),
            (b, False, [change(k) for k in range(8, 12)]),
            (a, True, [change(12)])]
    one_by_one, at_once = _Batches({"server": "srv"}, source), _Batches({"server": "srv"}, source)
    for rel, keyed, changes in plan:
        offset = {"lsn_commit": 99, "change": changes[-1][9]}
        for c in changes:
            one_by_one.add(rel, c, 5, offset, keyed)
        at_once.extend(rel, changes, 5, offset, keyed)
    assert shape(at_once) == shape(one_by_one)
    assert len(at_once.out) == 3 and at_once.count == 13
