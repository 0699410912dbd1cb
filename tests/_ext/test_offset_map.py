"""kafkalite._ext.offset_map: the cleaner's key -> latest offset map."""
import random

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kafkalite._ext.offset_map import OffsetMap, key_hash
from kafkalite.record import RecordBatchBuilder, decode_columns

MASK64 = (1 << 64) - 1


def xxh3_halves(key):
    digest = xxhash.xxh3_128_intdigest(key)
    return (digest & MASK64, digest >> 64)


# ---- key_hash --------------------------------------------------------------------------

def test_key_hash_matches_xxhash_for_many_lengths():
    rng = random.Random(1)
    for length in list(range(0, 260)) + [1000, 4096, 100_000]:
        key = rng.randbytes(length)
        assert key_hash(key) == xxh3_halves(key), length


def test_key_hash_known_values_and_types():
    assert key_hash(b"") == xxh3_halves(b"")
    assert key_hash(b"key") == key_hash(bytearray(b"key")) == key_hash(memoryview(b"key"))
    assert key_hash(np.frombuffer(b"key", dtype=np.uint8)) == xxh3_halves(b"key")
    assert key_hash(b"key") != key_hash(b"kez")
    lo, hi = key_hash(b"abc")
    assert 0 <= lo <= MASK64 and 0 <= hi <= MASK64
    with pytest.raises((TypeError, ValueError)):
        key_hash("text")


# ---- put / get -------------------------------------------------------------------------

def test_put_get_latest_offset_semantics():
    m = OffsetMap(100)
    assert len(m) == 0 and m.latest_offset == -1
    assert m.get(b"a") == -1
    m.put(b"a", 5)
    m.put(b"b", 2)
    assert (m.get(b"a"), m.get(b"b"), m.get(b"c")) == (5, 2, -1)
    m.put(b"a", 3)                 # an older offset never replaces a newer one
    assert m.get(b"a") == 5
    m.put(b"a", 9)
    assert m.get(b"a") == 9
    m.put(b"", 0)                  # the empty key is a key like any other
    assert m.get(b"") == 0
    assert len(m) == 3
    assert m.latest_offset == 9
    assert m.free_entries == 97
    m.put(bytearray(b"b"), 20)
    assert m.get(memoryview(b"b")) == 20
    assert m.latest_offset == 20


def test_clear():
    m = OffsetMap(10, initial_capacity=4)
    for i in range(6):
        m.put(b"k%d" % i, i)
    m.clear()
    assert len(m) == 0 and m.latest_offset == -1
    assert all(m.get(b"k%d" % i) == -1 for i in range(6))
    m.put(b"k1", 1)
    assert m.get(b"k1") == 1 and len(m) == 1


def test_growth_past_initial_capacity_keeps_every_entry():
    m = OffsetMap(1_000_000, initial_capacity=16)
    assert m.capacity == 16
    n = 100_000
    keys = [b"key-%d" % i for i in range(n)]
    for i, key in enumerate(keys):
        m.put(key, i * 2)
    assert len(m) == n
    assert m.capacity >= n * 4 // 3
    assert m.capacity & (m.capacity - 1) == 0
    assert all(m.get(key) == i * 2 for i, key in enumerate(keys))
    assert m.get(b"key-%d" % n) == -1
    assert m.latest_offset == (n - 1) * 2
    # updates after growth hit the same entries
    for i in range(0, n, 1000):
        m.put(keys[i], 10**9 + i)
    assert len(m) == n
    assert m.get(keys[5000]) == 10**9 + 5000


def test_capacity_rounds_up_to_power_of_two_and_validation():
    assert OffsetMap(10, initial_capacity=1000).capacity == 1024
    with pytest.raises(ValueError):
        OffsetMap(0)
    m = OffsetMap.for_memory(24 * 1000)
    assert m.max_entries == 750
    assert OffsetMap.for_memory(1).max_entries == 1


# ---- bulk from decode_columns ------------------------------------------------------------

def keyed_batches(rng, n_batches, key_pool, start_offset=0):
    raws, offset = [], start_offset
    for _ in range(n_batches):
        builder = RecordBatchBuilder(rng.choice([0, 1, 3, 4]), base_offset=offset)
        for _ in range(rng.randrange(1, 40)):
            key = rng.choice(key_pool) if rng.random() > 0.1 else None
            builder.append(1000, key, b"v")
        raw = builder.build()
        raws.append(raw)
        offset += builder.record_count + rng.choice([0, 0, 5])
    return b"".join(raws)


def dict_model(cols):
    model = {}
    for off, key in zip(cols.offsets, cols.keys()):
        if key is not None:
            model[key] = max(model.get(key, -1), int(off))
    return model


def put_cols(m, cols):
    m.put_columns(cols.key_data, cols.key_offsets, cols.key_valid.view(np.uint8), cols.offsets)


def latest(m, cols):
    return m.latest_offsets(cols.key_data, cols.key_offsets, cols.key_valid.view(np.uint8))


@pytest.mark.parametrize("seed", range(5))
def test_put_columns_and_latest_offsets_agree_with_dict(seed):
    rng = random.Random(seed)
    pool = [rng.randbytes(rng.randrange(0, 24)) for _ in range(rng.choice([5, 50, 3000]))]
    cols = decode_columns(keyed_batches(rng, 30, pool))
    m = OffsetMap(10**6, initial_capacity=8)
    put_cols(m, cols)
    model = dict_model(cols)
    assert len(m) == len(model)
    assert m.latest_offset == max(model.values())
    got = latest(m, cols)
    assert got.dtype == np.int64 and len(got) == len(cols)
    want = [model[k] if k is not None else -1 for k in cols.keys()]
    assert list(got) == want
    # the cleaner's keep rule: a record survives iff it is its key's latest
    keep = cols.key_valid & (got <= cols.offsets)
    assert int(keep.sum()) == len(model)
    # keys from another key space are absent
    other = decode_columns(keyed_batches(rng, 5, [b"other-%d" % i for i in range(20)]))
    assert all(x == -1 for x in latest(m, other))
    for key, off in model.items():
        assert m.get(key) == off


@settings(max_examples=100, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=6)), st.integers(0, 50)),
                min_size=1, max_size=60))
def test_put_columns_matches_dict_model_hypothesis(entries):
    """Records in any offset order (several batches, base offsets out of order)."""
    raws = []
    for key, base in entries:
        builder = RecordBatchBuilder(base_offset=base)
        builder.append(0, key, b"")
        raws.append(builder.build())
    cols = decode_columns(b"".join(raws))
    m = OffsetMap(1000, initial_capacity=2)
    put_cols(m, cols)
    model = {}
    for key, base in entries:
        if key is not None:
            model[key] = max(model.get(key, -1), base)
    assert len(m) == len(model)
    assert list(latest(m, cols)) == [model[k] if k is not None else -1 for k, _ in entries]
    for key, off in model.items():
        assert m.get(key) == off


def test_null_keys_give_minus_one_and_are_not_stored():
    builder = RecordBatchBuilder()
    for key in (None, b"a", None, b"", b"a", None):
        builder.append(0, key, b"v")
    cols = decode_columns(builder.build())
    m = OffsetMap(100)
    put_cols(m, cols)
    assert len(m) == 2
    assert list(latest(m, cols)) == [-1, 4, -1, 3, 4, -1]


def test_empty_columns():
    cols = decode_columns(b"")
    m = OffsetMap(10)
    put_cols(m, cols)
    assert len(m) == 0
    assert len(latest(m, cols)) == 0


def test_put_columns_equals_individual_puts():
    rng = random.Random(42)
    pool = [b"k%d" % i for i in range(500)]
    cols = decode_columns(keyed_batches(rng, 20, pool))
    bulk, single = OffsetMap(10**5), OffsetMap(10**5)
    put_cols(bulk, cols)
    for off, key in zip(cols.offsets, cols.keys()):
        if key is not None:
            single.put(key, int(off))
    assert len(bulk) == len(single)
    assert all(bulk.get(k) == single.get(k) for k in pool)
