"""Varints and the other primitive readers and writers."""
from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafkalite.protocol.errors import MalformedInput
from kafkalite.protocol.types import (
    ZERO_UUID,
    read_uuid,
    read_uvarint,
    read_varint,
    read_varlong,
    skip_tagged_fields,
    uuid_bytes,
    write_uvarint,
    write_varint,
    write_varlong,
)

UVARINTS = [(0, "00"), (1, "01"), (127, "7f"), (128, "8001"), (300, "ac02"), (16383, "ff7f"),
            (16384, "808001"), (2**31 - 1, "ffffffff07"), (2**32 - 1, "ffffffff0f")]
VARINTS = [(0, "00"), (-1, "01"), (1, "02"), (-2, "03"), (63, "7e"), (-64, "7f"), (64, "8001"),
           (2**31 - 1, "feffffff0f"), (-(2**31), "ffffffff0f")]
VARLONGS = [(0, "00"), (-1, "01"), (2**63 - 1, "feffffffffffffffff01"), (-(2**63), "ffffffffffffffffff01")]


@pytest.mark.parametrize("value, wire", UVARINTS)
def test_unsigned_varint_vectors(value, wire):
    assert write_uvarint(value).hex() == wire
    assert read_uvarint(memoryview(bytes.fromhex(wire) + b"\xaa"), 0) == (value, len(wire) // 2)


@pytest.mark.parametrize("value, wire", VARINTS)
def test_varint_vectors(value, wire):
    assert write_varint(value).hex() == wire
    assert read_varint(bytes.fromhex(wire), 0) == (value, len(wire) // 2)


@pytest.mark.parametrize("value, wire", VARLONGS)
def test_varlong_vectors(value, wire):
    assert write_varlong(value).hex() == wire
    assert read_varlong(bytes.fromhex(wire), 0) == (value, len(wire) // 2)


@given(st.integers(0, 2**32 - 1), st.binary(max_size=3))
def test_unsigned_varint_round_trip(value, tail):
    data = b"\x05" + write_uvarint(value) + tail
    assert read_uvarint(data, 1) == (value, len(data) - len(tail))


@given(st.integers(-(2**31), 2**31 - 1))
def test_varint_round_trip_and_agrees_with_kafka_python(value):
    from kafka.protocol.old.types import VarInt32

    assert write_varint(value) == VarInt32.encode(value)
    assert read_varint(write_varint(value), 0)[0] == value


@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_round_trip_and_agrees_with_kafka_python(value):
    from kafka.protocol.old.types import VarInt64

    assert write_varlong(value) == VarInt64.encode(value)
    assert read_varlong(write_varlong(value), 0)[0] == value


def test_out_of_range_values_are_refused_on_write():
    for write, value in [(write_uvarint, -1), (write_uvarint, 2**32), (write_varint, 2**31),
                         (write_varlong, -(2**63) - 1)]:
        with pytest.raises(ValueError):
            write(value)


def test_overlong_and_oversized_varints_are_malformed():
    with pytest.raises(MalformedInput, match="longer than 5 bytes"):
        read_uvarint(b"\x80\x80\x80\x80\x80\x00", 0)
    with pytest.raises(MalformedInput, match="32 bits"):
        read_uvarint(b"\xff\xff\xff\xff\x10", 0)
    with pytest.raises(MalformedInput, match="longer than 5 bytes"):
        read_varint(b"\xff\xff\xff\xff\xff\x01", 0)
    with pytest.raises(MalformedInput, match="32 bits"):
        read_varint(b"\xff\xff\xff\xff\x1f", 0)
    with pytest.raises(MalformedInput, match="longer than 10 bytes"):
        read_varlong(b"\xff" * 10 + b"\x01", 0)
    with pytest.raises(MalformedInput, match="64 bits"):
        read_varlong(b"\xff" * 9 + b"\x03", 0)


def test_truncated_varints_run_off_the_end():
    for read in (read_uvarint, read_varint, read_varlong):
        with pytest.raises(IndexError):
            read(memoryview(b"\x80\x80"), 0)


def test_skip_tagged_fields():
    section = b"\x02" + b"\x00\x03abc" + b"\x81\x01\x00"  # tag 0 (3 bytes), tag 129 (empty)
    assert skip_tagged_fields(section + b"rest", 0, len(section) + 4) == len(section)
    with pytest.raises(MalformedInput, match="runs past the end"):
        skip_tagged_fields(b"\x01\x00\x09abc", 0, 5)
    with pytest.raises(MalformedInput, match="cannot fit"):
        skip_tagged_fields(b"\xff\xff\xff\xff\x0f", 0, 5)


def test_uuids():
    value = uuid.uuid4()
    assert uuid_bytes(value) == value.bytes == uuid_bytes(value.bytes)
    assert read_uuid(memoryview(b"\x00" + value.bytes), 1) == value
    assert read_uuid(bytes(16), 0) is ZERO_UUID
    with pytest.raises(IndexError):
        read_uuid(value.bytes[:15], 0)
    with pytest.raises(ValueError):
        uuid_bytes(b"short")
