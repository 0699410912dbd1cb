"""kafkalite.record.compression: the five codecs in the framings Kafka uses."""
import gzip
import random
import struct
import zlib

import cramjam
import lz4.frame
import pytest
import zstandard

from kafkalite.errors import CorruptRecordError, UnsupportedCompressionTypeError
from kafkalite.record import RecordBatch, RecordBatchBuilder, decode_columns
from kafkalite.record import compression as comp

CODECS = [comp.GZIP, comp.SNAPPY, comp.LZ4, comp.ZSTD]
IDS = ["gzip", "snappy", "lz4", "zstd"]


def sample(size, seed=0):
    """Half random, half repetitive: compressible but not trivially so."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        if rng.random() < 0.5:
            out += rng.randbytes(rng.randrange(1, 50))
        else:
            out += b"kafkalite record %d " % rng.randrange(100) * rng.randrange(1, 10)
    return bytes(out[:size])


# ---- codec ids -------------------------------------------------------------------------

@pytest.mark.parametrize("name,codec", [
    ("none", 0), ("uncompressed", 0), (None, 0), ("gzip", 1), ("GZip", 1), ("snappy", 2),
    ("lz4", 3), ("ZSTD", 4), (0, 0), (1, 1), (2, 2), (3, 3), (4, 4)])
def test_codec_id(name, codec):
    assert comp.codec_id(name) == codec


@pytest.mark.parametrize("bad", ["brotli", "", "gzip9", 5, 7, -1, 8])
def test_unknown_codec_id(bad):
    with pytest.raises(UnsupportedCompressionTypeError) as info:
        comp.codec_id(bad)
    assert info.value.code == 76


def test_codec_names():
    assert comp.CODEC_NAMES == {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


# ---- round trips -----------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS, ids=IDS)
@pytest.mark.parametrize("size", [0, 1, 100, 32 * 1024 - 1, 32 * 1024, 32 * 1024 + 1,
                                  64 * 1024 - 1, 64 * 1024, 64 * 1024 + 1, 300_000])
def test_round_trip(codec, size):
    data = sample(size, seed=size)
    packed = comp.compress(codec, data)
    assert isinstance(packed, bytes)
    assert comp.decompress(codec, packed) == data
    if size >= 1000:
        assert len(packed) < len(data)


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_accepts_buffer_types(codec):
    data = sample(5000)
    for obj in (bytearray(data), memoryview(data)):
        assert comp.decompress(codec, comp.compress(codec, obj)) == data
    packed = comp.compress(codec, data)
    assert comp.decompress(codec, memoryview(packed)) == data


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_output_is_deterministic(codec):
    data = sample(70_000, seed=3)
    assert comp.compress(codec, data) == comp.compress(codec, data)


@pytest.mark.parametrize("codec,levels", [(comp.GZIP, (1, 9)), (comp.LZ4, (1, 12)),
                                          (comp.ZSTD, (1, 19))], ids=["gzip", "lz4", "zstd"])
def test_levels_are_honoured(codec, levels):
    data = sample(200_000, seed=4)
    low, high = (comp.compress(codec, data, level) for level in levels)
    assert low != high
    assert len(high) < len(low)
    assert comp.decompress(codec, low) == comp.decompress(codec, high) == data
    assert comp.compress(codec, data) == comp.compress(codec, data, comp.DEFAULT_LEVELS[codec])


# ---- framings --------------------------------------------------------------------------

def test_gzip_framing():
    data = sample(10_000)
    packed = comp.compress(comp.GZIP, data)
    assert packed[:3] == b"\x1f\x8b\x08"              # gzip member, deflate
    assert packed[4:8] == b"\x00\x00\x00\x00"         # mtime 0: deterministic
    assert gzip.decompress(packed) == data
    # zlib-wrapped and plain gzip members from other writers are read too
    assert comp.decompress(comp.GZIP, zlib.compress(data)) == data
    assert comp.decompress(comp.GZIP, gzip.compress(data, mtime=12345)) == data


def test_snappy_xerial_framing():
    data = sample(100_000)
    packed = comp.compress(comp.SNAPPY, data)
    magic, version, compat = struct.unpack_from(">8sii", packed)
    assert (magic, version, compat) == (b"\x82SNAPPY\x00", 1, 1)
    pos, out, blocks = 16, b"", 0
    while pos < len(packed):
        (n,) = struct.unpack_from(">i", packed, pos)
        block = bytes(cramjam.snappy.decompress_raw(packed[pos + 4:pos + 4 + n]))
        assert len(block) <= 32 * 1024
        out += block
        pos += 4 + n
        blocks += 1
    assert pos == len(packed)
    assert out == data
    assert blocks == -(-len(data) // (32 * 1024))


def test_snappy_raw_is_accepted_on_read():
    data = sample(50_000)
    raw = bytes(cramjam.snappy.compress_raw(data))
    assert comp.decompress(comp.SNAPPY, raw) == data
    assert comp.decompress(comp.SNAPPY, bytes(cramjam.snappy.compress_raw(b""))) == b""


def test_lz4_framing():
    data = sample(200_000)
    packed = comp.compress(comp.LZ4, data)
    assert packed[:4] == b"\x04\x22\x4d\x18"          # LZ4 frame magic
    flg, bd = packed[4], packed[5]
    assert flg >> 6 == 1                              # version 01
    assert flg & 0x20                                 # independent blocks
    assert not flg & 0x10                             # no block checksum
    assert not flg & 0x08                             # no content size
    assert not flg & 0x04                             # no content checksum
    assert (bd >> 4) & 0x7 == 4                       # 64 KB max block size
    assert lz4.frame.decompress(packed) == data
    # frames with content size and checksums (other clients) are read too
    other = lz4.frame.compress(data, store_size=True, content_checksum=True)
    assert comp.decompress(comp.LZ4, other) == data


def test_zstd_frames_without_content_size_are_accepted():
    data = sample(300_000)
    cobj = zstandard.ZstdCompressor(level=3, write_content_size=False).compressobj()
    streamed = cobj.compress(data) + cobj.flush()
    params = zstandard.get_frame_parameters(streamed)
    assert params.content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert comp.decompress(comp.ZSTD, streamed) == data


def test_zstd_frame_matches_plain_compressor():
    data = sample(40_000)
    assert comp.compress(comp.ZSTD, data) == zstandard.ZstdCompressor(level=3).compress(data)


# ---- corrupt input ---------------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_garbage_raises_corrupt_record(codec):
    rng = random.Random(codec)
    for size in (0, 1, 7, 100, 5000):
        garbage = rng.randbytes(size)
        try:
            out = comp.decompress(codec, garbage)
        except CorruptRecordError as exc:
            assert exc.code == 2
        else:
            # raw snappy may happen to accept tiny random inputs; nothing else may
            assert codec == comp.SNAPPY and size <= 1, (codec, size, out)


@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_truncated_raises_corrupt_record(codec):
    packed = comp.compress(codec, sample(100_000))
    for cut in (1, 10, len(packed) // 2):
        with pytest.raises(CorruptRecordError):
            comp.decompress(codec, packed[:-cut])


def test_xerial_block_length_past_end():
    packed = bytearray(comp.compress(comp.SNAPPY, sample(1000)))
    struct.pack_into(">i", packed, 16, 10**6)
    with pytest.raises(CorruptRecordError):
        comp.decompress(comp.SNAPPY, bytes(packed))
    struct.pack_into(">i", packed, 16, -5)
    with pytest.raises(CorruptRecordError):
        comp.decompress(comp.SNAPPY, bytes(packed))


@pytest.mark.parametrize("codec", [0, 5, 6, 7])
def test_decompress_unknown_codec(codec):
    with pytest.raises(UnsupportedCompressionTypeError):
        comp.decompress(codec, b"abc")


# ---- through the batch codec ------------------------------------------------------------

@pytest.mark.parametrize("codec", CODECS, ids=IDS)
def test_batch_records_section_is_the_compressed_uncompressed_section(codec):
    rng = random.Random(99)
    plain = RecordBatchBuilder(0)
    packed = RecordBatchBuilder(codec)
    for i in range(500):
        args = (1000 + i, b"k%d" % (i % 13), b"value %d " % i * rng.randrange(1, 20),
                [("i", b"%d" % i)])
        plain.append(*args)
        packed.append(*args)
    raw_plain, raw_packed = plain.build(), packed.build()
    section = RecordBatch(raw_plain).records_section()
    batch = RecordBatch(raw_packed)
    assert batch.compression == codec
    assert raw_packed[61:] == comp.compress(codec, section)
    assert batch.records_section() == section
    assert len(raw_packed) < len(raw_plain)
    # identical headers apart from length, CRC and the codec bits
    assert raw_plain[:8] == raw_packed[:8] and raw_plain[12:17] == raw_packed[12:17]
    assert raw_plain[23:61] == raw_packed[23:61]
    assert decode_columns(raw_packed).to_records() == decode_columns(raw_plain).to_records()


@pytest.mark.parametrize("codec", [comp.GZIP, comp.ZSTD], ids=["gzip", "zstd"])
def test_builder_compression_level(codec):
    fast = RecordBatchBuilder(codec, compression_level=1)
    best = RecordBatchBuilder(codec, compression_level=19 if codec == comp.ZSTD else 9)
    data = sample(100_000)
    for i in range(0, len(data), 1000):
        fast.append(i, None, data[i:i + 1000])
        best.append(i, None, data[i:i + 1000])
    a, b = fast.build(), best.build()
    assert len(b) < len(a)
    assert [r.value for r in RecordBatch(a).records()] == \
        [r.value for r in RecordBatch(b).records()]


@pytest.mark.parametrize("codec", [comp.GZIP, comp.ZSTD], ids=["gzip", "zstd"])
def test_concatenated_members_are_all_read(codec):
    # Java's GZIPInputStream / ZstdInputStream read every member or frame.
    a, b = sample(3000), sample(5000)[::-1]
    assert comp.decompress(codec, comp.compress(codec, a) + comp.compress(codec, b)) == a + b
