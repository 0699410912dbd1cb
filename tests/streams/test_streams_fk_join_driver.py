"""Foreign-key table-table joins (inner, left; tables.py) in the
TopologyTestDriver, against a plain-Python model: after any interleaving of
updates and deletes on both tables (piped one at a time or in batches), the
output read as a table is the join of the two tables' final states: each
order joined with the customer its value names, none for an order whose
customer is missing (inner) or with None (left), never a stale result of a
row that changed since.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import (Consumed, Materialized, Produced, Serdes, StreamsBuilder,
                               TopologyException, TopologyTestDriver)

S = Serdes.string()


def customer_of(order: str):
    c = order.split(":")[0]
    return None if c == "-" else c


def joiner(order, customer):
    return f"{order}|{customer}"


def build(how, store_type):
    b = StreamsBuilder()
    orders = b.table("orders", Consumed.with_(S, S))
    customers = b.table("customers", Consumed.with_(S, S), Materialized.as_("c", store_type))
    getattr(orders, {"inner": "join", "left": "left_join"}[how])(
        customers, customer_of, joiner).to_stream().to("out", Produced.with_(S, S))
    return b.build()


def model(updates, how) -> dict:
    tables = ({}, {})
    for side, k, v in updates:
        if v is None:
            tables[side].pop(k, None)
        else:
            tables[side][k] = v
    orders, customers = tables
    out = {}
    for k, v in orders.items():
        c = customers.get(customer_of(v)) if customer_of(v) is not None else None
        if c is not None or how == "left":
            out[k] = joiner(v, c)
    return out


updates_st = st.lists(st.one_of(
    st.tuples(st.just(0), st.sampled_from(["o1", "o2", "o3", "o4"]),
              st.one_of(st.none(), st.builds(lambda c, n: f"{c}:{n}",
                                             st.sampled_from(["c1", "c2", "c3", "-"]),
                                             st.integers(0, 3)))),
    st.tuples(st.just(1), st.sampled_from(["c1", "c2", "c3"]),
              st.one_of(st.none(), st.sampled_from(["ann", "bob", "cyd"])))), max_size=40)


@settings(max_examples=50, deadline=None)
@given(updates_st, st.sampled_from(["inner", "left"]), st.sampled_from(["in_memory", "rocksdb"]),
       st.integers(1, 5))
def test_fk_join_ends_as_the_model(tmp_path_factory, updates, how, store_type, batch):
    with TopologyTestDriver(build(how, store_type), {
            "application.id": "app", "state.dir": str(tmp_path_factory.mktemp("s"))}) as d:
        topics = [d.create_input_topic("orders", S, S), d.create_input_topic("customers", S, S)]
        i = 0
        while i < len(updates):
            side, j = updates[i][0], i
            while j < len(updates) and j - i < batch and updates[j][0] == side:
                j += 1
            topics[side].pipe_record_list([(k, v, 0) for _, k, v in updates[i:j]])
            i = j
        assert d.create_output_topic("out", S, S).read_key_values_to_map() == model(updates, how)


def test_fk_join_follows_both_sides():
    with TopologyTestDriver(build("inner", "in_memory"), {"application.id": "app"}) as d:
        orders, customers = (d.create_input_topic("orders", S, S),
                             d.create_input_topic("customers", S, S))
        out = d.create_output_topic("out", S, S)
        orders.pipe_input("o1", "c1:5", 0)          # no customer yet: nothing
        customers.pipe_input("c1", "ann", 0)
        assert out.read_key_values_to_list() == [("o1", "c1:5|ann")]
        customers.pipe_input("c1", "anne", 0)       # a right update reaches its subscribers
        orders.pipe_input("o1", "c2:5", 0)          # moved to a customer that is missing
        assert out.read_key_values_to_list() == [("o1", "c1:5|anne"), ("o1", None)]
        customers.pipe_input("c2", "bob", 0)
        customers.pipe_input("c1", "zed", 0)        # o1 left c1: no output
        orders.pipe_input("o1", None, 0)
        assert out.read_key_values_to_list() == [("o1", "c2:5|bob"), ("o1", None)]


def test_fk_join_needs_a_materialized_right_table():
    b = StreamsBuilder()
    t = b.table("t")
    with pytest.raises(TopologyException, match="materialized"):
        t.join(t.map_values(lambda v: v), customer_of, joiner)
