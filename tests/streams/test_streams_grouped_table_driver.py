"""KTable.group_by(...).count / reduce / aggregate with adder and subtractor
(KGroupedTable, tables.py) in the TopologyTestDriver, against a plain-Python
model: after any sequence of table updates and deletes (piped one at a time
or in batches), each group's last output is the aggregate over the table's
current rows that map to it (0 / the subtractor's result for a group left
empty); and a filtered, materialized KTable joined with another table.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import (Consumed, Grouped, Materialized, Produced, Serdes,
                               StreamsBuilder, TopologyException, TopologyTestDriver)

S, L = Serdes.string(), Serdes.long()


def build(kind, store_type):
    """users: key user, value "region:amount"; grouped by region."""
    b = StreamsBuilder()
    users = b.table("users", Consumed.with_(S, S), Materialized.as_("users", store_type))
    g = users.group_by(lambda k, v: (v.split(":")[0], int(v.split(":")[1])),
                       Grouped.with_(S, L))
    m = Materialized.as_("agg", store_type)
    if kind == "count":
        t = g.count(m)
    elif kind == "reduce":
        t = g.reduce(lambda a, v: a + v, lambda a, v: a - v, m.with_value_serde(L))
    else:
        t = g.aggregate(lambda: [0, 0], lambda k, v, a: [a[0] + 1, a[1] + v],
                        lambda k, v, a: [a[0] - 1, a[1] - v], m)
    t.to_stream().to("out", Produced.with_(S, None if kind == "aggregate" else L))
    return b.build()


def model(updates, kind) -> dict:
    """{region: aggregate} of every region that ever had a row."""
    table, seen = {}, set()
    for k, v in updates:
        if v is None:
            table.pop(k, None)
        else:
            table[k] = v
            seen.add(v.split(":")[0])
    out = {}
    for region in seen:
        amounts = [int(v.split(":")[1]) for v in table.values() if v.split(":")[0] == region]
        out[region] = {"count": len(amounts), "reduce": sum(amounts),
                       "aggregate": [len(amounts), sum(amounts)]}[kind]
    return out


updates_st = st.lists(st.tuples(
    st.sampled_from(["u1", "u2", "u3", "u4"]),
    st.one_of(st.none(), st.builds(lambda r, n: f"{r}:{n}", st.sampled_from("abc"),
                                   st.integers(0, 9)))), max_size=40)


def read_table(d, kind) -> dict:
    import json
    if kind == "aggregate":
        got = d.create_output_topic("out", S, Serdes.bytes()).read_key_values_to_map()
        return {k: json.loads(v) for k, v in got.items()}
    return d.create_output_topic("out", S, L).read_key_values_to_map()


@settings(max_examples=40, deadline=None)
@given(updates_st, st.sampled_from(["count", "reduce", "aggregate"]),
       st.sampled_from(["in_memory", "rocksdb"]), st.integers(1, 6))
def test_grouped_table_aggregations_match_the_model(tmp_path_factory, updates, kind, store_type,
                                                   batch):
    with TopologyTestDriver(build(kind, store_type), {
            "application.id": "app", "state.dir": str(tmp_path_factory.mktemp("s"))}) as d:
        users = d.create_input_topic("users", S, S)
        for i in range(0, len(updates), batch):
            users.pipe_record_list([(k, v, 0) for k, v in updates[i:i + batch]])
        want = model(updates, kind)
        assert read_table(d, kind) == want
        store = dict(d.get_key_value_store("agg").all())
        assert {k.decode(): v for k, v in store.items()} == want


def test_a_row_moving_between_groups_leaves_the_old_one():
    with TopologyTestDriver(build("count", "in_memory"), {"application.id": "app"}) as d:
        users = d.create_input_topic("users", S, S)
        users.pipe_input("u1", "a:1", 0)
        users.pipe_input("u2", "a:2", 0)
        users.pipe_input("u1", "b:1", 0)      # a: 2 -> 1, b: 0 -> 1
        users.pipe_input("u2", None, 0)       # a: 1 -> 0
        out = d.create_output_topic("out", S, L).read_key_values_to_list()
        assert out == [("a", 1), ("a", 2), ("a", 1), ("b", 1), ("a", 0)]


def test_join_of_a_filtered_materialized_table():
    b = StreamsBuilder()
    users = b.table("users", Consumed.with_(S, S))
    adults = users.filter(lambda k, v: int(v) >= 18, materialized=Materialized.as_("adults"))
    names = b.table("names", Consumed.with_(S, S), Materialized.as_("names"))
    adults.join(names, lambda age, name: f"{name}:{age}").to_stream().to(
        "out", Produced.with_(S, S))
    with pytest.raises(TopologyException, match="materialized"):
        users.filter(lambda k, v: True).join(names, lambda a, c: a)
    with TopologyTestDriver(b.build(), {"application.id": "app"}) as d:
        ages, nm = d.create_input_topic("users", S, S), d.create_input_topic("names", S, S)
        nm.pipe_input("u1", "ann", 0)
        nm.pipe_input("u2", "bob", 0)
        ages.pipe_input("u1", "30", 0)
        ages.pipe_input("u2", "12", 0)
        ages.pipe_input("u2", "19", 0)
        ages.pipe_input("u1", "17", 0)        # filtered out: the join result is deleted
        out = d.create_output_topic("out", S, S).read_key_values_to_list()
        assert out == [("u1", "ann:30"), ("u2", "bob:19"), ("u1", None)]
        assert dict(d.get_key_value_store("adults").all()) == {b"u2": "19"}
