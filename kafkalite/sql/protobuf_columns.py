"""A Protobuf subject's columns: the top-level fields of its latest schema's
first message (the one Confluent's serializers write by default), each
value read with its own writer's message (its schema id and message
indexes, in Confluent's wire format) and its fields taken by name.

Protobuf -> Arrow: double float64, float float32, int32/sint32/sfixed32
int32, int64/sint64/sfixed64 int64, uint32/fixed32 int64, uint64/fixed64
uint64, bool bool, string string, bytes binary, an enum its value's name
(string); a message, a repeated or a map field a string of its JSON text
(protobuf's json_format, the fields' own names). A proto3 field without
presence reads as its default when unset (0, "", false: Protobuf does not
tell them apart); one with presence (``optional``, a message) as null.

Who may call: values.py (``protobuf_columns``), on the query's thread; the
registry client caches schemas, this module the message classes by id.
"""
from __future__ import annotations

import json

import pyarrow as pa

from kafkalite.client.serialization import protobuf_message_indexes, protobuf_schema_classes

# FieldDescriptor.TYPE_* -> Arrow
_TYPES = {1: pa.float64(), 2: pa.float32(), 3: pa.int64(), 4: pa.uint64(), 5: pa.int32(),
          6: pa.uint64(), 7: pa.int64(), 8: pa.bool_(), 9: pa.string(), 12: pa.binary(),
          13: pa.int64(), 14: pa.string(), 15: pa.int32(), 16: pa.int64(), 17: pa.int32(),
          18: pa.int64()}
_ENUM = 14


def protobuf_columns(client, schema_id: int, name_of):
    """(Arrow fields, decode: wire-format bytes -> {column: value}) of the
    registered Protobuf schema ``schema_id``, or None when its first
    message has no fields."""
    classes: dict = {}

    def classes_of(sid: int):
        got = classes.get(sid)
        if got is None:
            registered = client.get_schema(sid, fmt="serialized")

            def fetch(subject, version):
                sub = client.get_version(subject, version, fmt="serialized")
                return sub.schema.schema_str, _triples(sub.schema.references)
            got = classes[sid] = protobuf_schema_classes(
                registered.schema_str, _triples(registered.references), fetch, f"{sid}.proto")
        return got

    descriptor = classes_of(schema_id)((0,)).DESCRIPTOR
    if not descriptor.fields:
        return None
    plan = [(fd.name, name_of(fd.name), _kind(fd)) for fd in descriptor.fields]
    fields = [pa.field(column, _TYPES.get(kind, pa.string())) for _, column, kind in plan]

    def decode(v: bytes) -> dict:
        indexes, start = protobuf_message_indexes(v, 5)
        msg = classes_of(int.from_bytes(v[1:5], "big"))(indexes)()
        msg.ParseFromString(v[start:])
        present = msg.DESCRIPTOR.fields_by_name
        out = {}
        for name, column, kind in plan:
            fd = present.get(name)
            out[column] = None if fd is None else _cell(msg, fd, kind)
        return out
    return fields, decode


def _kind(fd):
    """How a field reads: its FieldDescriptor type, or "json" (a message, a
    repeated or a map field: its JSON text)."""
    if _repeated(fd) or fd.type not in _TYPES:
        return "json"
    return fd.type


def _repeated(fd) -> bool:
    # protobuf 5.28+ (is_repeated); ``label`` before, gone in 7
    repeated = getattr(fd, "is_repeated", None)
    return repeated if repeated is not None else fd.label == fd.LABEL_REPEATED


def _cell(msg, fd, kind):
    if kind == "json" or _kind(fd) == "json":
        if not _repeated(fd) and not msg.HasField(fd.name):
            return None
        from google.protobuf import json_format
        doc = json_format.MessageToDict(msg, preserving_proto_field_name=True)
        return json.dumps(doc.get(fd.name, [] if _repeated(fd) else None))
    if fd.has_presence and not msg.HasField(fd.name):
        return None
    v = getattr(msg, fd.name)
    if fd.type == _ENUM:
        hit = fd.enum_type.values_by_number.get(v)
        return hit.name if hit is not None else str(v)
    return v


def _triples(references) -> list:
    return [(ref.name, ref.subject, ref.version) for ref in references or ()]
