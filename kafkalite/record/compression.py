"""Compression codecs of RecordBatch v2, in the framings Kafka uses.

A batch is compressed as a whole: everything after the 61-byte header (the
records) goes through the codec named by ``attributes & 7``. This module is
called once per batch by the codec (``kafkalite._ext.builder``, ``.reader``,
``.columns``, ``.batch_scan``); it must not
import anything else from kafkalite.

Framings, as the Java client writes them:
- gzip (1): a gzip member (RFC 1952), mtime 0 so output is deterministic.
- snappy (2): xerial's "snappy-java" stream framing; raw snappy is also
  accepted on read (librdkafka and older clients send it).
- lz4 (3): the LZ4 frame format, independent 64 KB blocks, no block or
  content checksum and no content size (Kafka's KafkaLZ4BlockOutputStream).
- zstd (4): a zstd frame; frames without a content size are accepted on read.
"""
from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

from kafkalite.errors import CorruptRecordError, UnsupportedCompressionTypeError

NONE = 0
GZIP = 1
SNAPPY = 2
LZ4 = 3
ZSTD = 4

CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}
CODEC_IDS = {name: codec for codec, name in CODEC_NAMES.items()}
CODEC_IDS["uncompressed"] = NONE

# Kafka's defaults (compression.gzip.level, compression.lz4.level, compression.zstd.level).
DEFAULT_LEVELS = {GZIP: 6, LZ4: 9, ZSTD: 3}

_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = struct.Struct(">8sii")
_XERIAL_BLOCK = 32 * 1024
_BE_INT = struct.Struct(">i")

_zstd_compressors: dict[int, zstandard.ZstdCompressor] = {}
_zstd_decompressor = zstandard.ZstdDecompressor()


def codec_id(codec: int | str | None) -> int:
    """Resolve ``compression.type`` (a name or a number) to the attribute value."""
    if codec is None:
        return NONE
    if isinstance(codec, str):
        try:
            return CODEC_IDS[codec.lower()]
        except KeyError:
            raise UnsupportedCompressionTypeError(
                f"unknown compression type {codec!r}; expected one of "
                f"{', '.join(sorted(CODEC_IDS))}") from None
    if codec not in CODEC_NAMES:
        raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")
    return codec


def compress(codec: int, data, level: int | None = None) -> bytes:
    """Compress a records section with the codec's Kafka framing."""
    if codec == GZIP:
        level = DEFAULT_LEVELS[GZIP] if level is None else level
        c = zlib.compressobj(level, zlib.DEFLATED, 31)  # wbits 31: gzip wrapper, mtime 0
        return c.compress(data) + c.flush()
    if codec == LZ4:
        return lz4.frame.compress(
            data, compression_level=DEFAULT_LEVELS[LZ4] if level is None else level,
            block_size=lz4.frame.BLOCKSIZE_MAX64KB, block_linked=False,
            content_checksum=False, block_checksum=False, store_size=False)
    if codec == ZSTD:
        level = DEFAULT_LEVELS[ZSTD] if level is None else level
        comp = _zstd_compressors.get(level)
        if comp is None:
            comp = _zstd_compressors[level] = zstandard.ZstdCompressor(level=level)
        return comp.compress(data)
    if codec == SNAPPY:
        return _xerial_compress(data)
    raise UnsupportedCompressionTypeError(f"cannot compress with codec id {codec}")


def decompress(codec: int, data) -> bytes:
    """Decompress a records section; CorruptRecordError if it does not decode."""
    try:
        if codec == GZIP:
            return _gzip_decompress(data)
        if codec == LZ4:
            return lz4.frame.decompress(data)
        if codec == ZSTD:
            return _zstd_decompress(data)
        if codec == SNAPPY:
            return _snappy_decompress(data)
    except (zlib.error, RuntimeError, zstandard.ZstdError, cramjam.DecompressionError,
            ValueError, struct.error) as exc:
        raise CorruptRecordError(
            f"{CODEC_NAMES.get(codec, codec)} records section does not decompress: {exc}") from None
    raise UnsupportedCompressionTypeError(f"unknown compression codec id {codec}")


def _all_members(new_decompressor, data, what: str) -> bytes:
    """Decompress every member/frame of a concatenated stream, as Java's
    GZIPInputStream and zstd-jni's ZstdInputStream do (at least one)."""
    out, rest = [], bytes(data)
    while True:
        d = new_decompressor()
        out.append(d.decompress(rest))
        if not d.eof:
            raise ValueError(f"{what} is truncated")
        rest = d.unused_data
        if not rest:
            return b"".join(out)


def _gzip_decompress(data) -> bytes:
    return _all_members(lambda: zlib.decompressobj(47), data, "gzip stream")  # gzip or zlib header


def _zstd_decompress(data) -> bytes:
    # The streaming decoder also takes frames without a content size, which
    # Java's zstd-jni writes and the one-shot API refuses.
    return _all_members(_zstd_decompressor.decompressobj, data, "zstd frame")


def _xerial_compress(data) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER.pack(_XERIAL_MAGIC, 1, 1)]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start:start + _XERIAL_BLOCK]))
        parts.append(_BE_INT.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_decompress(data) -> bytes:
    view = memoryview(data)
    if len(view) >= 16 and bytes(view[:8]) == _XERIAL_MAGIC:
        pos, out = 16, []
        while pos < len(view):
            (size,) = _BE_INT.unpack_from(view, pos)
            pos += 4
            if size < 0 or pos + size > len(view):
                raise ValueError("xerial snappy block runs past the end of the data")
            out.append(bytes(cramjam.snappy.decompress_raw(view[pos:pos + size])))
            pos += size
        return b"".join(out)
    return bytes(cramjam.snappy.decompress_raw(view))
