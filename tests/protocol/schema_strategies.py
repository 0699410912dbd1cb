"""Hypothesis strategies for message bodies, derived from our schemas.

``body(message, version)`` draws a value for every field present in that
version (tagged fields included; nullable fields sometimes None; arrays
empty or not). ``project(message, version, body)`` keeps only those
fields, turning memoryviews into bytes, so a decoded body (which also holds
defaults for absent fields) can be compared with the drawn one.
"""
from __future__ import annotations

import functools

from hypothesis import strategies as st

from kafkalite.protocol.schema import Field, Message

_INTS = {
    "int8": (-(1 << 7), (1 << 7) - 1),
    "int16": (-(1 << 15), (1 << 15) - 1),
    "int32": (-(1 << 31), (1 << 31) - 1),
    "int64": (-(1 << 63), (1 << 63) - 1),
    "uint16": (0, (1 << 16) - 1),
    "uint32": (0, (1 << 32) - 1),
}
MAX_ARRAY = 3


def primitive(name: str) -> st.SearchStrategy:
    if name in _INTS:
        low, high = _INTS[name]
        return st.integers(low, high)
    if name == "float64":
        return st.floats(allow_nan=False)
    if name == "bool":
        return st.booleans()
    if name == "string":
        return st.text(max_size=12)
    if name in ("bytes", "records"):
        return st.binary(max_size=24)
    if name == "uuid":
        return st.uuids()
    raise AssertionError(name)


def field_value(field: Field, version: int) -> st.SearchStrategy:
    if field.kind == "struct":
        value = struct(field.fields, version)
    elif field.kind == "struct_array":
        value = st.lists(struct(field.fields, version), max_size=MAX_ARRAY)
    elif field.kind == "array":
        value = st.lists(primitive(field.wire.name), max_size=MAX_ARRAY)
    else:
        value = primitive(field.wire.name)
    if field.is_nullable(version) or field.type == "records":
        value = st.none() | value
    return value


def struct(fields, version: int) -> st.SearchStrategy:
    return st.fixed_dictionaries({f.name: field_value(f, version) for f in fields if f.present(version)})


@functools.lru_cache(maxsize=None)
def body(message: Message, version: int) -> st.SearchStrategy:
    return struct(message.fields, version)


def project_fields(fields, version: int, value):
    out = {}
    for f in fields:
        if not f.present(version):
            continue
        v = value[f.name]
        if f.kind == "struct" and v is not None:
            v = project_fields(f.fields, version, v)
        elif f.kind == "struct_array" and v is not None:
            v = [project_fields(f.fields, version, e) for e in v]
        elif isinstance(v, memoryview):
            v = v.tobytes()
        out[f.name] = v
    return out


def project(message: Message, version: int, value: dict) -> dict:
    return project_fields(message.fields, version, value)


def all_versions(table) -> list[tuple[Message, int]]:
    return [(m, v) for m in table.values() for v in range(m.versions.low, m.versions.high + 1)]
