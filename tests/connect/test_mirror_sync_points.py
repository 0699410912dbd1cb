"""Which copied records get an offset sync (MirrorSourceTask.commit, from a
batch's upstream offsets array): MM2's rule, the first and last of those
copied since the last commit and one every ``offset.lag.max`` upstream
offsets, the same as the per-record loop it replaced, gaps (compaction,
transaction markers) included."""
from __future__ import annotations

import random

import numpy as np

from kafkalite.connect.connectors.mirror import sync_points


def per_record_rule(ups: list, lag_max: int) -> list:
    out, last = [], None
    for i, up in enumerate(ups):
        if i == len(ups) - 1 or last is None or up - last >= lag_max:
            out.append(i)
            last = up
    return out


def test_sync_points_follow_mm2s_rule_with_gaps():
    rnd = random.Random(45)
    for _ in range(300):
        n = rnd.randint(1, 400)
        start = rnd.randint(0, 10_000)
        ups = list(np.cumsum([start] + [rnd.choice((1, 1, 1, 2, 7, 150)) for _ in range(n - 1)]))
        lag = rnd.choice((1, 2, 10, 100, 1000))
        assert sync_points(np.array(ups, dtype=np.int64), lag) == per_record_rule(ups, lag), \
            (ups, lag)
    assert sync_points(np.array([], dtype=np.int64), 100) == []
    assert sync_points(np.arange(10, 260), 100) == [0, 100, 200, 249]
