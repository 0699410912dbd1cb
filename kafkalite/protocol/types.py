"""Kafka's primitive wire types: sizes, struct formats, varints.

All integers are big-endian. The variable-length types, as the protocol
guide defines them:

    STRING / NULLABLE_STRING   int16 length N, then N bytes of UTF-8; -1 = null
    BYTES / NULLABLE_BYTES     int32 length N, then N bytes; -1 = null
    ARRAY                      int32 count N, then N elements; -1 = null
    COMPACT_STRING / _BYTES /  unsigned varint N+1, then N bytes or elements;
    COMPACT_ARRAY              0 = null (flexible versions only, KIP-482)
    UUID                       16 bytes, as ``uuid.UUID`` in Python
    RECORDS                    NULLABLE_BYTES (COMPACT_NULLABLE_BYTES when
                               flexible) holding record batches
    UNSIGNED_VARINT            7 bits per byte, low group first, high bit =
                               more bytes follow; at most 5 bytes (uint32)
    VARINT / VARLONG           zigzag-encoded int32 / int64 in the same
                               7-bit groups; at most 5 / 10 bytes

A tagged-field section (flexible versions) is an unsigned varint count, then
per field: unsigned varint tag, unsigned varint size, ``size`` bytes.

Readers take a ``memoryview`` of format "B" and a position and return
``(value, new_position)``. They raise ``MalformedInput`` for values no writer
produces and let ``IndexError`` escape on truncation; the codec turns both
into a ``ProtocolError`` that names the field.
"""
from __future__ import annotations

import struct
import uuid

from kafkalite.protocol.errors import MalformedInput

ZERO_UUID = uuid.UUID(int=0)

INT8 = struct.Struct(">b")
INT16 = struct.Struct(">h")
INT32 = struct.Struct(">i")
INT64 = struct.Struct(">q")
UINT16 = struct.Struct(">H")
UINT32 = struct.Struct(">I")
FLOAT64 = struct.Struct(">d")
BOOL = struct.Struct(">?")


class WireType:
    """A primitive schema type: its Kafka name, fixed size and zero value.

    ``code`` is the ``struct`` format character for fixed-size numbers (None
    for uuid and the variable-length types); ``min_size`` is the fewest bytes
    a value can occupy (flexible encoding when ``compact``), used to reject
    absurd array counts before allocating anything.
    """

    __slots__ = ("name", "code", "size", "zero", "variable")

    def __init__(self, name: str, code: str | None, size: int, zero, variable: bool = False):
        self.name = name
        self.code = code
        self.size = size
        self.zero = zero
        self.variable = variable

    def min_size(self, compact: bool) -> int:
        if not self.variable:
            return self.size
        if compact:
            return 1
        return 2 if self.name == "string" else 4

    def __repr__(self) -> str:
        return f"WireType({self.name})"


WIRE_TYPES: dict[str, WireType] = {t.name: t for t in (
    WireType("int8", "b", 1, 0),
    WireType("int16", "h", 2, 0),
    WireType("int32", "i", 4, 0),
    WireType("int64", "q", 8, 0),
    WireType("uint16", "H", 2, 0),
    WireType("uint32", "I", 4, 0),
    WireType("float64", "d", 8, 0.0),
    WireType("bool", "?", 1, False),
    WireType("uuid", None, 16, ZERO_UUID),
    WireType("string", None, 0, "", variable=True),
    WireType("bytes", None, 0, b"", variable=True),
    WireType("records", None, 0, None, variable=True),
)}

# Unsigned varints below 128 are one byte; most lengths and counts are.
SMALL_UVARINTS = tuple(bytes((n,)) for n in range(128))


def write_uvarint(value: int) -> bytes:
    """The unsigned varint bytes of ``0 <= value < 2**32``."""
    if value < 0x80:
        if value < 0:
            raise ValueError(f"unsigned varint cannot hold {value}")
        return SMALL_UVARINTS[value]
    if value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint cannot hold {value} (more than 32 bits)")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def read_uvarint(buf, pos: int) -> tuple[int, int]:
    """(value, position after it) of the unsigned varint at ``pos``."""
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = b & 0x7F
    shift = 7
    while True:
        pos += 1
        b = buf[pos]
        if b < 0x80:
            if shift == 28 and b > 0x0F:
                raise MalformedInput("unsigned varint does not fit in 32 bits")
            return value | (b << shift), pos + 1
        value |= (b & 0x7F) << shift
        shift += 7
        if shift > 28:
            raise MalformedInput("unsigned varint longer than 5 bytes")


def _zigzag_bytes(value: int, bits: int) -> bytes:
    return write_uvarint_long((value << 1) ^ (value >> (bits - 1)))


def write_uvarint_long(value: int) -> bytes:
    """Unsigned varint of up to 64 bits (the raw form behind VARLONG)."""
    if 0 <= value < 0x80:
        return SMALL_UVARINTS[value]
    if value < 0 or value > 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"unsigned varlong cannot hold {value}")
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def write_varint(value: int) -> bytes:
    """Zigzag VARINT bytes of a signed 32-bit ``value``."""
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise ValueError(f"varint cannot hold {value} (not a signed 32-bit integer)")
    return _zigzag_bytes(value, 32)


def write_varlong(value: int) -> bytes:
    """Zigzag VARLONG bytes of a signed 64-bit ``value``."""
    if not -0x8000000000000000 <= value <= 0x7FFFFFFFFFFFFFFF:
        raise ValueError(f"varlong cannot hold {value} (not a signed 64-bit integer)")
    return _zigzag_bytes(value, 64)


def _read_unsigned(buf, pos: int, max_bytes: int, bits: int, what: str) -> tuple[int, int]:
    value = 0
    shift = 0
    for _ in range(max_bytes):
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            if value >> bits:
                raise MalformedInput(f"{what} does not fit in {bits} bits")
            return value, pos
        shift += 7
    raise MalformedInput(f"{what} longer than {max_bytes} bytes")


def read_varint(buf, pos: int) -> tuple[int, int]:
    """(value, position after it) of the zigzag VARINT at ``pos``."""
    raw, pos = _read_unsigned(buf, pos, 5, 32, "varint")
    return (raw >> 1) ^ -(raw & 1), pos


def read_varlong(buf, pos: int) -> tuple[int, int]:
    """(value, position after it) of the zigzag VARLONG at ``pos``."""
    raw, pos = _read_unsigned(buf, pos, 10, 64, "varlong")
    return (raw >> 1) ^ -(raw & 1), pos


def skip_tagged_fields(buf, pos: int, end: int) -> int:
    """Position after the tagged-field section at ``pos``, all tags unknown."""
    count, pos = read_uvarint(buf, pos)
    if count > (end - pos) // 2:
        raise MalformedInput(f"{count} tagged fields cannot fit in {end - pos} bytes")
    for _ in range(count):
        _tag, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > end:
            raise MalformedInput(f"tagged field of {size} bytes runs past the end ({end} bytes)")
    return pos


def uuid_bytes(value) -> bytes:
    """The 16 wire bytes of a ``uuid.UUID`` (16-byte bytes are accepted too)."""
    if type(value) is uuid.UUID:
        return value.bytes
    raw = bytes(value)
    if len(raw) != 16:
        raise ValueError(f"a UUID is 16 bytes, got {len(raw)}")
    return raw


def read_uuid(buf, pos: int) -> uuid.UUID:
    raw = bytes(buf[pos:pos + 16])
    if len(raw) != 16:
        raise IndexError("uuid truncated")
    if raw == _ZERO_UUID_BYTES:
        return ZERO_UUID
    return uuid.UUID(bytes=raw)


_ZERO_UUID_BYTES = bytes(16)
