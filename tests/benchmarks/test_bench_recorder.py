"""The harness's payloads: a block of a few values is joined from bytes
(the cheap path every message at a moderate rate takes), a larger one built
in numpy; both must be the same bytes, and each value must carry its stamp."""
import numpy as np
import pytest

from kafkalite.bench.recorder import Payloads, stamps_of_block
from kafkalite.bench.workload import Workload


@pytest.mark.parametrize("size", [8, 9, 100, 1024])
def test_small_blocks_are_the_bytes_numpy_builds(size):
    w = Workload(name="t", path="t.yaml", message_size=size)
    joined, built = Payloads(w, seed=3), Payloads(w, seed=3)
    built._tails = None            # every block through numpy
    base = 1_795_000_000_000_000_000
    sent = 0
    for n in [1, 2, 16, 17, 1, 300, 5, 1000, 3]:     # across the template's wrap-around
        stamps = base + np.arange(sent, sent + n, dtype=np.int64) * 100_000
        a, b = joined.block(stamps), built.block(stamps)
        assert a == b
        assert len(a) == n * size
        assert stamps_of_block(a, size).tolist() == stamps.tolist()
        sent += n
