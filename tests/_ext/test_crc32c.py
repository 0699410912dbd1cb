"""CRC-32C (kafkalite._ext.crc32c) against the reference `crc32c` package.

Every implementation is checked: the dispatching ``crc32c`` (what the codec
uses), the slicing-by-8 table path ``crc32c_sw`` and the SSE4.2 three-stream
path ``crc32c_hw`` (skipped on CPUs without it). The hardware path has three
loops (3 x 8192-byte blocks, 3 x 256-byte blocks, 8-byte words) plus an
alignment prelude, so inputs are chosen to land on and around each boundary
and at every start alignment.
"""
import array
import random

import crc32c as reference
import numpy as np
import pytest

from kafkalite._ext import crc32c as kcrc

IMPLS = ["crc32c", "crc32c_sw", "crc32c_hw"]


@pytest.fixture(params=IMPLS)
def impl(request):
    if request.param == "crc32c_hw" and not kcrc.HARDWARE:
        pytest.skip("CPU has no SSE4.2 crc32 instruction")
    return getattr(kcrc, request.param)


def ref(data, value=0):
    return reference.crc32c(bytes(data), value)


@pytest.fixture(scope="module")
def noise():
    rng = random.Random(0xC2C32C)
    return rng.randbytes(8 * 8192 + 4096)


# ---- known answers ---------------------------------------------------------------------

KNOWN = [
    (b"", 0x00000000),
    (b"123456789", 0xE3069283),                 # the CRC catalogue's check value
    (bytes(32), 0x8A9136AA),                    # RFC 3720 (iSCSI) B.4 vectors
    (b"\xff" * 32, 0x62A8AB43),
    (bytes(range(32)), 0x46DD794E),
    (bytes(range(31, -1, -1)), 0x113FDB5C),
]


@pytest.mark.parametrize("data,expected", KNOWN, ids=[f"vector{i}" for i in range(len(KNOWN))])
def test_known_vectors(impl, data, expected):
    assert impl(data) == expected


def test_hardware_flag_is_a_bool_and_hw_path_guards():
    assert isinstance(kcrc.HARDWARE, bool)
    if not kcrc.HARDWARE:
        with pytest.raises(RuntimeError):
            kcrc.crc32c_hw(b"abc")


# ---- random contents at every length and alignment -------------------------------------

def test_every_length_0_to_4096_at_every_alignment(impl, noise):
    view = memoryview(noise)
    mismatches = []
    for length in range(4097):
        for start in range(8):
            chunk = view[start:start + length]
            got = impl(chunk)
            want = reference.crc32c(chunk)
            if got != want:
                mismatches.append((length, start, hex(got), hex(want)))
    assert mismatches == []


def _boundary_lengths():
    lengths = set()
    for block in (256, 8192):
        for k in (1, 2, 3, 4, 6, 7):
            for d in range(-9, 10):
                lengths.add(k * block + d)
    lengths.add(3 * 8192 * 2 + 17)
    lengths.add(3 * 8192 + 3 * 256 + 5)
    lengths.add(3 * 8192 * 2 + 3 * 256 * 2 + 8 * 3 + 7)
    return sorted(x for x in lengths if x >= 0)


def test_lengths_around_three_stream_block_boundaries(impl, noise):
    view = memoryview(noise)
    mismatches = []
    for length in _boundary_lengths():
        for start in (0, 1, 3, 5, 7):
            assert start + length <= len(noise)
            chunk = view[start:start + length]
            if impl(chunk) != reference.crc32c(chunk):
                mismatches.append((length, start))
    assert mismatches == []


@pytest.mark.parametrize("size", [1 << 20, (1 << 20) + 13, 65535, 65536, 65537])
def test_large_inputs(impl, size):
    data = random.Random(size).randbytes(size + 8)
    for start in (0, 3):
        chunk = memoryview(data)[start:start + size]
        assert impl(chunk) == reference.crc32c(chunk)


def test_all_ones_and_zero_runs_long(impl):
    # Degenerate contents exercise the shift tables with constant streams.
    for size in (3 * 8192 + 1, 3 * 8192 * 3, 3 * 256 * 5 + 2):
        for byte in (b"\x00", b"\xff"):
            data = byte * size
            assert impl(data) == reference.crc32c(data)


def test_implementations_agree_with_each_other(noise):
    impls = [kcrc.crc32c, kcrc.crc32c_sw] + ([kcrc.crc32c_hw] if kcrc.HARDWARE else [])
    rng = random.Random(7)
    for _ in range(300):
        start = rng.randrange(0, 64)
        length = rng.randrange(0, len(noise) - 64)
        chunk = memoryview(noise)[start:start + length]
        assert len({f(chunk) for f in impls}) == 1


def test_result_independent_of_buffer_alignment(impl, noise):
    payload = noise[:5000]
    want = reference.crc32c(payload)
    for pad in range(16):
        buf = bytearray(pad) + payload
        assert impl(memoryview(buf)[pad:]) == want


# ---- continuation ----------------------------------------------------------------------

def test_incremental_continuation(impl, noise):
    rng = random.Random(11)
    for _ in range(400):
        total = rng.choice([rng.randrange(0, 64), rng.randrange(0, 2000),
                            rng.randrange(0, len(noise))])
        split = rng.randrange(0, total + 1)
        a, b = noise[:split], noise[split:total]
        whole = reference.crc32c(noise[:total])
        assert impl(b, impl(a)) == whole
        assert impl(a + b) == whole


def test_continuation_in_many_pieces(impl, noise):
    data = noise[:30000]
    rng = random.Random(5)
    crc, pos = 0, 0
    while pos < len(data):
        step = rng.randrange(0, 3000)
        crc = impl(data[pos:pos + step], crc)
        pos += step
    assert crc == reference.crc32c(data)


def test_arbitrary_initial_value_matches_reference(impl, noise):
    rng = random.Random(3)
    for _ in range(200):
        value = rng.getrandbits(32)
        length = rng.randrange(0, 3 * 8192 + 100)
        chunk = noise[:length]
        assert impl(chunk, value) == reference.crc32c(chunk, value)
    assert impl(b"", 0xDEADBEEF) == 0xDEADBEEF


def test_initial_value_out_of_range_is_rejected(impl):
    with pytest.raises(OverflowError):
        impl(b"abc", -1)
    with pytest.raises(OverflowError):
        impl(b"abc", 1 << 32)


# ---- input types -----------------------------------------------------------------------

def test_accepts_buffer_protocol_objects(impl, noise):
    raw = noise[:1001]
    want = reference.crc32c(raw)
    assert impl(raw) == want
    assert impl(bytearray(raw)) == want
    assert impl(memoryview(raw)) == want
    assert impl(np.frombuffer(raw, dtype=np.uint8)) == want
    assert impl(array.array("B", raw)) == want
    words = np.frombuffer(noise[:4000], dtype=np.int32)
    assert impl(words) == reference.crc32c(noise[:4000])
    assert impl(np.frombuffer(raw, dtype=np.uint8)[17:900]) == reference.crc32c(raw[17:900])


def test_rejects_str_and_non_contiguous(impl):
    with pytest.raises(TypeError):
        impl("123456789")
    with pytest.raises((ValueError, BufferError, TypeError)):
        impl(np.arange(100, dtype=np.uint8)[::2])
    with pytest.raises(TypeError):
        impl(None)


def test_batch_crc_like_kafka(impl):
    """The CRC the codec writes: over attributes..end of a batch."""
    from kafkalite.record import RecordBatchBuilder

    builder = RecordBatchBuilder()
    for i in range(20):
        builder.append(1000 + i, b"k%d" % i, b"v" * i)
    batch = builder.build()
    assert impl(batch[21:]) == int.from_bytes(batch[17:21], "big")
