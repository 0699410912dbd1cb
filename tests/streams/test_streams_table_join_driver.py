"""KTable-KTable joins (inner, left, outer) in the TopologyTestDriver,
against a plain-Python model: after every update of either table the join
result of its key is forwarded when it exists, and a tombstone when it
existed and no longer does (never for a key that had none).
"""
from __future__ import annotations

import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams import (Consumed, Materialized, Produced, Serdes, StreamsBuilder,
                               TopologyException, TopologyTestDriver, columnar)

S = Serdes.string()


def joiner_of(columnar_joiner):
    if columnar_joiner:
        return columnar(lambda b: pc.binary_join_element_wise(
            pc.fill_null(b.column("left_value"), "-"), pc.fill_null(b.column("right_value"), "-"),
            "+"))
    return lambda lv, rv: f"{'-' if lv is None else lv}+{'-' if rv is None else rv}"


def build(how, columnar_joiner, store_type):
    b = StreamsBuilder()
    left = b.table("left", Consumed.with_(S, S), Materialized.as_("l", store_type))
    right = b.table("right", Consumed.with_(S, S), Materialized.as_("r", store_type))
    getattr(left, {"inner": "join", "left": "left_join", "outer": "outer_join"}[how])(
        right, joiner_of(columnar_joiner)).to_stream().to("out", Produced.with_(S, S))
    return b.build()


def model(updates, how):
    """The records the join forwards, update by update."""
    tables, out, present = ({}, {}), [], set()
    for side, k, v in updates:
        t = tables[side]
        if v is None:
            t.pop(k, None)
        else:
            t[k] = v
        lv, rv = tables[0].get(k), tables[1].get(k)
        exists = {"inner": lv is not None and rv is not None, "left": lv is not None,
                  "outer": lv is not None or rv is not None}[how]
        if exists:
            out.append((k, f"{'-' if lv is None else lv}+{'-' if rv is None else rv}"))
            present.add(k)
        elif k in present:
            out.append((k, None))
            present.discard(k)
    return out


updates_st = st.lists(st.tuples(st.sampled_from([0, 1]), st.sampled_from(["a", "b", "c"]),
                                st.one_of(st.none(), st.sampled_from(["x", "y", "z"]))),
                      max_size=40)


@settings(max_examples=40, deadline=None)
@given(updates_st, st.sampled_from(["inner", "left", "outer"]), st.booleans(),
       st.sampled_from(["in_memory", "rocksdb"]))
def test_table_joins_match_the_model(updates, how, columnar_joiner, store_type):
    with TopologyTestDriver(build(how, columnar_joiner, store_type),
                            {"application.id": "app"}) as d:
        topics = [d.create_input_topic("left", S, S), d.create_input_topic("right", S, S)]
        for side, k, v in updates:
            topics[side].pipe_input(k, v, 0)
        assert d.create_output_topic("out", S, S).read_key_values_to_list() == model(updates, how)


@settings(max_examples=20, deadline=None)
@given(updates_st, st.sampled_from(["inner", "left", "outer"]), st.integers(1, 8))
def test_batched_updates_end_in_the_same_table(updates, how, batch):
    """Piped a batch at a time (one update per key per batch forwarded), the
    output, read as a table, is the model's."""
    with TopologyTestDriver(build(how, False, "in_memory"), {"application.id": "app"}) as d:
        topics = [d.create_input_topic("left", S, S), d.create_input_topic("right", S, S)]
        i = 0
        while i < len(updates):
            side = updates[i][0]
            j = i
            while j < len(updates) and j - i < batch and updates[j][0] == side:
                j += 1
            topics[side].pipe_record_list([(k, v, 0) for _, k, v in updates[i:j]])
            i = j
        want = {}
        for k, v in model(updates, how):
            if v is None:
                want.pop(k, None)
            else:
                want[k] = v
        assert d.create_output_topic("out", S, S).read_key_values_to_map() == want


def test_table_join_needs_materialized_tables():
    b = StreamsBuilder()
    t = b.table("t")
    with pytest.raises(TopologyException, match="materialized"):
        t.join(t.map_values(lambda v: v), lambda a, c: a)
