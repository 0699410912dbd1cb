"""The remote index bundle's layout (kafkalite/storage/remote/index_bundle.py)."""
import random

import pytest

from kafkalite.storage.remote import index_bundle


def test_every_part_reads_back_from_the_table():
    rng = random.Random(7)
    parts = [(name, rng.randbytes(rng.randrange(0, 3000)))
             for name in ("OFFSET", "TIMESTAMP", "TRANSACTION", "PRODUCER_SNAPSHOT", "LEADER_EPOCH")]
    data = index_bundle.build(parts)
    table = index_bundle.table(data)
    assert list(table) == [name for name, _ in parts]
    for name, part in parts:
        start, length = table[name]
        assert data[start:start + length] == part


@pytest.mark.parametrize("head, why", [
    (b"", "magic"), (b"PK\x03\x04xx", "magic"), (b"KLIB\x02\x01", "version"),
    (b"KLIB\x01\x01", "cut short"), (b"KLIB\x01\x01\x06OFFS", "cut short")])
def test_anything_else_is_refused_with_why(head, why):
    with pytest.raises(ValueError, match=why):
        index_bundle.table(head)


def test_a_head_cut_inside_the_table_is_refused():
    data = index_bundle.build([("OFFSET", b"x" * 10), ("TIMESTAMP", b"y")])
    with pytest.raises(ValueError, match="cut short"):
        index_bundle.table(data[:20])
