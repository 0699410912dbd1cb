"""Confluent's JsonSchemaData: Connect's schemas and values <-> JSON
Schema and JSON, as Confluent's JsonSchemaConverter maps them, for the
JsonSchemaConverter (registry_converters.py).

Connect -> JSON Schema (draft-07): the Connect type in ``connect.type``
(ints, floats, bytes, maps), the schema's name as ``title``, an optional
schema a oneOf with null, a struct a closed object (additionalProperties
false) whose properties carry ``connect.index``. Values are
JsonConverter's payload (kafkalite/connect/data.py), a Decimal a number.
"""
from __future__ import annotations

import decimal

from kafkalite.connect.data import DECIMAL, Field, Schema, from_json_value, to_json_value
from kafkalite.connect.errors import DataException

_JSON_INTS = ("int8", "int16", "int32", "int64")


def connect_schema_to_json_schema(s: Schema, top: bool = True) -> dict:
    """The JSON Schema Confluent's JsonSchemaData makes of ``s``: the Connect
    type in ``connect.type`` (ints, floats, bytes, maps), the schema's name
    as ``title``, an optional schema a oneOf with null, a struct a closed
    object whose properties carry ``connect.index``."""
    t = s.type
    if t in _JSON_INTS:
        out = {"type": "integer", "connect.type": t}
    elif t in ("float32", "float64"):
        out = {"type": "number", "connect.type": t}
    elif t == "boolean":
        out = {"type": "boolean"}
    elif t == "string":
        out = {"type": "string"}
    elif t == "bytes":
        out = ({"type": "number", "connect.type": "bytes"} if s.name == DECIMAL else
               {"type": "string", "connect.type": "bytes"})
    elif t == "array":
        out = {"type": "array", "items": connect_schema_to_json_schema(s.value_schema, False)}
    elif t == "map":
        if s.key_schema.type == "string" and not s.key_schema.optional:
            out = {"type": "object", "connect.type": "map", "additionalProperties":
                   connect_schema_to_json_schema(s.value_schema, False)}
        else:
            out = {"type": "array", "connect.type": "map", "items": {
                "type": "object", "additionalProperties": False, "properties": {
                    "key": {**connect_schema_to_json_schema(s.key_schema, False),
                            "connect.index": 0},
                    "value": {**connect_schema_to_json_schema(s.value_schema, False),
                              "connect.index": 1}}}}
    else:
        out = {"type": "object", "additionalProperties": False, "properties": {
            f.name: {**connect_schema_to_json_schema(f.schema, False), "connect.index": i}
            for i, f in enumerate(s.fields)}}
    if s.name:
        out["title"] = s.name
    if s.version is not None:
        out["connect.version"] = s.version
    if s.doc:
        out["description"] = s.doc
    if s.parameters:
        out["connect.parameters"] = {k: str(v) for k, v in s.parameters.items()}
    if s.default is not None and s.name is None and t in _JSON_INTS + (
            "float32", "float64", "boolean", "string"):
        out["default"] = s.default
    if s.optional:
        out = {"oneOf": [{"type": "null"}, out]}
    if top:
        out = {"$schema": "http://json-schema.org/draft-07/schema#", **out}
    return out


def json_schema_to_connect(j, required: bool = False) -> Schema:
    """The Connect schema of a JSON Schema, as JsonSchemaData reads one: the
    ``connect.*`` keywords restore what Connect said; otherwise an integer
    is int64, a number float64, an object with properties a struct (a
    property not ``required`` optional), an object with only
    additionalProperties a map of strings."""
    if j is True or j == {}:
        raise DataException("JSON Schema: an unconstrained schema has no Connect type")
    if not isinstance(j, dict):
        raise DataException(f"not a JSON Schema: {j!r}")
    for key in ("oneOf", "anyOf"):
        if key in j:
            branches = [b for b in j[key] if b != {"type": "null"}]
            if len(branches) == 1 and len(j[key]) == 2:
                return json_schema_to_connect(branches[0]).as_optional()
            raise DataException(f"JSON Schema: {key} other than [null, T] is not supported")
    if "$ref" in j:
        raise DataException("JSON Schema: $ref is not supported by the converter")
    t = j.get("type")
    optional = False
    if isinstance(t, list):
        rest = [x for x in t if x != "null"]
        optional, t = len(rest) < len(t), (rest[0] if len(rest) == 1 else None)
    ct = j.get("connect.type")
    params = j.get("connect.parameters")
    meta = {"name": j.get("title"), "version": j.get("connect.version"),
            "doc": j.get("description"), "parameters": dict(params) if params else None}
    if t == "integer":
        s = Schema(ct if ct in _JSON_INTS else "int64", **meta)
    elif t == "number":
        s = Schema("bytes" if ct == "bytes" else ct if ct in ("float32", "float64")
                   else "float64", **meta)
    elif t == "boolean":
        s = Schema("boolean", **meta)
    elif t == "string":
        s = Schema("bytes" if ct == "bytes" else "string", **meta)
    elif t == "array" and ct == "map":
        props = j["items"]["properties"]
        s = Schema("map", key_schema=json_schema_to_connect(props["key"]),
                   value_schema=json_schema_to_connect(props["value"]), **meta)
    elif t == "array":
        s = Schema("array", value_schema=json_schema_to_connect(j.get("items", {})), **meta)
    elif t == "object" and "properties" not in j and isinstance(
            j.get("additionalProperties"), dict):
        s = Schema("map", key_schema=Schema.STRING,
                   value_schema=json_schema_to_connect(j["additionalProperties"]), **meta)
    elif t == "object" or "properties" in j:
        props = j.get("properties", {})
        order = sorted(props, key=lambda n: props[n].get("connect.index", len(props)))
        needed = set(j.get("required", ()))
        fields = []
        for n in order:
            fs = json_schema_to_connect(props[n])
            # a hand-written schema: a property it does not require may be absent
            if "connect.index" not in props[n] and n not in needed:
                fs = fs.as_optional()
            fields.append(Field(n, fs))
        s = Schema("struct", fields=tuple(fields), **meta)
    else:
        raise DataException(f"JSON Schema: type {t!r} has no Connect type")
    if "default" in j and j["default"] is not None:
        from dataclasses import replace
        s = replace(s, default=j["default"])
    return s.as_optional() if optional else s


def to_json_payload(s: Schema, v):
    """A Connect value as JsonSchemaData writes it (a Decimal a number)."""
    if v is None:
        return None
    if s.name == DECIMAL:
        return float(v)
    if s.type == "struct":
        return {f.name: to_json_payload(f.schema, v.get(f.name)) for f in s.fields}
    if s.type == "array":
        return [to_json_payload(s.value_schema, x) for x in v]
    if s.type == "map":
        if s.key_schema.type == "string" and not s.key_schema.optional:
            return {k: to_json_payload(s.value_schema, x) for k, x in v.items()}
        return [{"key": to_json_payload(s.key_schema, k),
                 "value": to_json_payload(s.value_schema, x)} for k, x in v.items()]
    return to_json_value(s, v)


def from_json_payload(s: Schema, v):
    """The inverse of to_json_payload; a value that does not fit its schema
    raises DataException (from_json_value's)."""
    if v is None:
        return from_json_value(s, v)
    if s.name == DECIMAL:
        if isinstance(v, bool) or not isinstance(v, (int, float, str)):
            raise DataException(f"Decimal schema, value {v!r} is not a number")
        scale = int((s.parameters or {}).get("scale", 0))
        return decimal.Decimal(str(v)).quantize(decimal.Decimal(1).scaleb(-scale))
    if s.type == "struct":
        if not isinstance(v, dict):
            raise DataException(f"struct schema, value {v!r} is not an object")
        return {f.name: from_json_payload(f.schema, v.get(f.name)) for f in s.fields}
    if s.type == "array":
        if not isinstance(v, list):
            raise DataException(f"array schema, value {v!r} is not an array")
        return [from_json_payload(s.value_schema, x) for x in v]
    if s.type == "map":
        if isinstance(v, list):
            return {from_json_payload(s.key_schema, e["key"]):
                    from_json_payload(s.value_schema, e["value"]) for e in v}
        if not isinstance(v, dict):
            raise DataException(f"map schema, value {v!r} is not an object")
        return {k: from_json_payload(s.value_schema, x) for k, x in v.items()}
    return from_json_value(s, v)
