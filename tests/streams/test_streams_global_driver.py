"""GlobalKTable in the TopologyTestDriver, against a plain-Python model:
``builder.global_table(topic)`` holds every record of its topic (a null
value deletes), and ``KStream.join / left_join(global_table, key_selector,
joiner)`` looks each stream record up by the key it selects, per record or
columnar, the stream's key kept.
"""
from __future__ import annotations

import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import (Consumed, Materialized, Produced, Serdes, StreamsBuilder,
                               TopologyException, TopologyTestDriver, columnar)

S, L = Serdes.string(), Serdes.long()


def build(left, columnar_joiner, store_type="in_memory"):
    b = StreamsBuilder()
    g = b.global_table("products", Consumed.with_(S, S), Materialized.as_("products", store_type))
    orders = b.stream("orders", Consumed.with_(L, S))     # key: order id, value: product id
    if columnar_joiner:
        selector = pc.field("value")
        joiner = columnar(lambda batch: pc.binary_join_element_wise(
            batch.column("left_value"), pc.fill_null(batch.column("right_value"), "-"), ":"))
    else:
        selector = lambda order, product: product                     # noqa: E731
        joiner = lambda product, name: f"{product}:{'-' if name is None else name}"  # noqa: E731
    (orders.left_join if left else orders.join)(g, selector, joiner).to(
        "out", Produced.with_(L, S))
    return b.build()


events_st = st.lists(st.one_of(
    st.tuples(st.just("product"), st.sampled_from(["p1", "p2", "p3"]),
              st.one_of(st.none(), st.sampled_from(["apple", "pear"]))),
    st.tuples(st.just("order"), st.integers(0, 50), st.sampled_from(["p1", "p2", "p3"]))),
    max_size=40)


@settings(max_examples=30, deadline=None)
@given(events_st, st.booleans(), st.booleans(), st.sampled_from(["in_memory", "rocksdb"]))
def test_global_table_join_matches_the_model(events, left, columnar_joiner, store_type):
    table, expected = {}, []
    for kind, a, b in events:
        if kind == "product":
            if b is None:
                table.pop(a, None)
            else:
                table[a] = b
        elif b in table or left:
            expected.append((a, f"{b}:{table.get(b, '-')}"))
    with TopologyTestDriver(build(left, columnar_joiner, store_type),
                            {"application.id": "app"}) as d:
        products = d.create_input_topic("products", S, S)
        orders = d.create_input_topic("orders", L, S)
        for kind, a, b in events:
            (products if kind == "product" else orders).pipe_input(a, b, 0)
        assert d.create_output_topic("out", L, S).read_key_values_to_list() == expected
        assert dict((k.decode(), v) for k, v in d.get_key_value_store("products").all()) == table


def test_global_table_is_not_a_source_and_joins_need_a_joiner():
    b = StreamsBuilder()
    g = b.global_table("t")
    with pytest.raises(TopologyException, match="key_selector, joiner"):
        b.stream("s").join(g, lambda k, v: v)
    b.stream("t")
    with pytest.raises(TopologyException, match="global table and a source"):
        b.build()
