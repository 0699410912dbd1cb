"""A bench producer's ack slots (kafkalite/bench/acks.py): each send's
acknowledgement records its messages' publish latencies once, in whatever
order the sends are acknowledged, a client's batches of one send each
acknowledge their own messages, and a failed delivery fails the run."""
import time

import numpy as np
import pytest

from kafkalite.bench.acks import AckSlots
from kafkalite.bench.recorder import LatencyRecorder


def _slots(slots=4, warm_end=0):
    publish = LatencyRecorder()
    return AckSlots(slots).start(warm_end, publish), publish


class Report:
    def __init__(self, count):
        self.count = count


def test_acks_in_any_order_record_each_message_once_past_the_warm_up():
    now = time.time_ns()
    acks, publish = _slots(warm_end=now - 5_000_000)
    one = acks.take(now - 9_000_000, 1)                   # due in the warm-up: not recorded
    many = acks.take(np.array([now - 6_000_000, now - 4_000_000, now - 3_000_000]), 3)
    last = acks.take(now - 2_000_000, 1)
    assert acks.outstanding == 5
    last()
    many(None, Report(3))
    one(None, None)
    publish.fold()
    assert acks.outstanding == 0 and acks.acked == 5
    assert publish.hist.get_total_count() == 3            # two of many's three, and last
    assert publish.hist.get_min_value() >= 2_000          # µs: from each one's due time


def test_a_send_reported_in_several_batches_acknowledges_its_messages_batch_by_batch():
    acks, publish = _slots()
    on_ack = acks.take(np.arange(1, 11, dtype=np.int64) * 1_000_000, 10)
    on_ack(None, Report(4))
    assert acks.outstanding == 6 and acks.acked == 4
    on_ack(None, Report(6))
    assert acks.outstanding == 0 and acks.acked == 10
    with pytest.raises(RuntimeError, match="twice"):
        on_ack()


def test_slots_are_reused_only_once_acknowledged_and_a_failed_delivery_raises():
    acks, _ = _slots(slots=2)
    first = acks.take(1, 1)
    acks.take(2, 1)
    assert not acks.free()
    with pytest.raises(RuntimeError, match="in flight"):
        acks.take(3, 1)
    first()
    assert acks.free()
    with pytest.raises(RuntimeError, match="delivery failed"):
        acks.take(4, 1)("broker down", None)


def test_acknowledgements_go_to_the_timeline_by_their_time_warm_up_included():
    from kafkalite.bench.recorder import LatencyTimeline, timeline_ms
    now = time.time_ns()
    timeline = LatencyTimeline(now - 10_000_000_000, 1.0)
    acks = AckSlots(4).start(now + 5_000_000_000, LatencyRecorder(), timeline)
    acks.take(now - 3_000_000, 1)()                                      # due in the warm-up
    acks.take(np.array([now - 6_000_000, now - 4_000_000]), 2)(None, Report(2))
    late_ms = (time.time_ns() - now) / 1e6      # how long after ``now`` the acks were taken
    out = timeline_ms([timeline.encoded()])
    assert sum(out["count"]) == 3 and out["count"][-1] == 3
    # the oldest was due 6 ms before ``now``: its latency, taken a moment later (more than
    # a millisecond on a loaded machine), up to the top of its bin (12%)
    assert 6 <= out["max"][-1] < (6 + late_ms) * 1.13 + 0.01
