"""murmur2 key partitioning, byte-compatible with Kafka's Java client."""
import random

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from kafkalite._ext.partitioner import murmur2, partition_for_key, partitions_for_keys

# Test vectors of Kafka's own UtilsTest.testMurmur2 (Java, signed 32-bit).
JAVA_VECTORS = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


def test_java_vectors():
    for key, expected in JAVA_VECTORS.items():
        assert murmur2(key) == expected, key


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=200), st.integers(1, 1000))
def test_same_partition_as_kafka_python(key, n):
    h = kafka_python_murmur2(key)
    assert murmur2(key) == (h - (1 << 32) if h >= 1 << 31 else h)
    assert partition_for_key(key, n) == (h & 0x7FFFFFFF) % n


def test_bulk_partitioning_matches_and_keyless_goes_to_the_given_partition():
    rng = random.Random(3)
    keys = [None if rng.random() < 0.2 else rng.randbytes(rng.randrange(0, 40)) for _ in range(2000)]
    parts = partitions_for_keys(keys, 12, keyless=5)
    for k, p in zip(keys, parts.tolist()):
        assert p == (5 if k is None else partition_for_key(k, 12))


def test_buffer_types_and_bad_counts():
    assert murmur2(bytearray(b"foobar")) == murmur2(memoryview(b"foobar")) == -790332482
    import pytest
    with pytest.raises(ValueError):
        partition_for_key(b"k", 0)
