"""records.merge_runs, the order in which a task with several input
partitions takes one poll's records (the runtime's _process): against a
plain-Python model of Kafka's PartitionGroup, record by record: always the
head with the smallest timestamp (ties: the partition listed first), each
partition in offset order, out-of-order timestamps included (hypothesis).
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kafkalite.streams.records import merge_runs


def model(timestamps) -> list:
    heads, out = [0] * len(timestamps), []
    while True:
        live = [(t[h], i) for i, (t, h) in enumerate(zip(timestamps, heads)) if h < len(t)]
        if not live:
            return out
        _, i = min(live)
        out.append((i, heads[i]))
        heads[i] += 1


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 20), max_size=12), min_size=1, max_size=4))
def test_merge_runs_takes_records_as_kafka_does(parts):
    runs = merge_runs([np.array(p, dtype=np.int64) for p in parts])
    got = [(i, k) for i, start, end in runs for k in range(start, end)]
    assert got == model(parts)
    assert all(end > start for _, start, end in runs)


def test_a_join_input_in_timestamp_order_in_few_runs():
    table = np.array([100, 200, 300], dtype=np.int64)
    stream = np.array([150, 160, 250, 350, 360], dtype=np.int64)
    assert merge_runs([table, stream]) == [(0, 0, 1), (1, 0, 2), (0, 1, 2), (1, 2, 3),
                                           (0, 2, 3), (1, 3, 5)]
