"""The Jepsen-style checker's own cases (tests/jepsen.py): an
acknowledgement that came without an offset (librdkafka acknowledges an
idempotent producer's earlier batches implicitly, offset unknown, once a
later batch of the partition is acknowledged) counts as kept when its
value is in its partition, and as moved or lost otherwise; one with an
offset must be at that offset."""
from jepsen import History, check


def test_an_acknowledgement_without_an_offset_is_kept_in_its_partition():
    final = {0: [(0, b"w-0"), (1, b"w-1")], 1: [(0, b"w-2")]}
    assert check(History(acked=[(0, None, b"w-1"), (1, 0, b"w-2")]), final).ok


def test_an_acknowledgement_without_an_offset_elsewhere_or_nowhere_fails():
    final = {0: [(0, b"w-0")], 1: [(0, b"w-1")]}
    moved = check(History(acked=[(0, None, b"w-1")]), final)
    assert moved.moved == [(0, None, b"w-1", [(1, 0)])]
    assert check(History(acked=[(0, None, b"w-9")]), final).lost == [(0, None, b"w-9")]


def test_an_acknowledgement_at_another_offset_is_moved():
    final = {0: [(0, b"w-0"), (1, b"w-1")]}
    assert check(History(acked=[(0, 0, b"w-1")]), final).moved == [(0, 0, b"w-1", [(0, 1)])]
