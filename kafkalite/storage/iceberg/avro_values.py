"""An Avro value schema as Iceberg columns, and values decoded into them.

Redpanda's translation (docs.redpanda.com, "Specify Iceberg Schema"): each
field of the top-level record is a column beside ``redpanda``:

    boolean, int, long, float, double, bytes, string -> the same type
    record -> struct; array -> list; map -> map<string, V>; enum -> string
    fixed -> fixed; decimal -> decimal(p, s); date -> date
    time-millis/-micros -> time; timestamp-millis/-micros -> timestamptz
    local-timestamp-millis/-micros -> timestamp; uuid -> string
    ["null", T] -> T (optional); other unions -> a struct with one optional
        field per non-null branch, named by its index ("0", "1", ...)
    "null" alone -> no column

Every column is optional, the ``required`` of an Avro field not kept: a
later schema may drop the field (or make it nullable), and the rows
written under it would then be refused by a required column. Recursive
schemas cannot be columns: ``Unsupported``, and their records go to the
dead-letter table, as Redpanda does.

A value decodes only if its body is exactly one datum of its schema: a
body with bytes left over does not decode either.
"""
from __future__ import annotations

import datetime
import decimal
import io
import json
import uuid

PRIMITIVES = ("boolean", "int", "long", "float", "double", "bytes", "string")


class Unsupported(Exception):
    """The schema cannot be Iceberg columns."""


class AvroValues:
    """One Avro schema: ``fields`` (Arrow fields of its columns) and
    ``decode(body)`` -> {column: value as Arrow takes it}; raises on a body
    that is not one datum of the schema."""

    def __init__(self, text: str):
        import fastavro
        try:
            raw = json.loads(text)
        except ValueError as exc:
            raise Unsupported(f"not JSON: {exc}") from None
        self._parsed = fastavro.parse_schema(raw)
        self._reader = fastavro.schemaless_reader
        names: dict = {}
        top = _resolve(raw, names, None, ())
        if not isinstance(top, dict) or top.get("type") != "record":
            raise Unsupported("the value schema is not a record")
        self._columns = [(f["name"], _arrow_type(f["type"]), _converter(f["type"]))
                         for f in top["fields"] if not _is_null(f["type"])]
        pa = _pa()
        self.fields = [pa.field(name, t, nullable=True) for name, t, _ in self._columns]

    def decode(self, body: bytes) -> dict:
        stream = io.BytesIO(body)
        datum = self._reader(stream, self._parsed, None)
        if stream.tell() != len(body):
            raise ValueError(f"{len(body) - stream.tell()} bytes after the datum")
        return {name: convert(datum.get(name)) for name, _, convert in self._columns}


def _pa():
    import pyarrow as pa
    return pa


def _full_name(name: str, namespace: str | None) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _resolve(schema, names: dict, namespace, stack: tuple):
    """``schema`` with every named type's reference replaced by its
    definition (Unsupported on a recursive one)."""
    if isinstance(schema, str):
        if schema in PRIMITIVES or schema == "null":
            return schema
        full = schema if schema in names else _full_name(schema, namespace)
        if full in stack or schema in stack:
            raise Unsupported(f"recursive type {full}")
        if full not in names:
            raise Unsupported(f"unknown type {schema}")
        return names[full]
    if isinstance(schema, list):
        return [_resolve(s, names, namespace, stack) for s in schema]
    kind = schema.get("type")
    if kind in ("record", "error", "enum", "fixed"):
        full = _full_name(schema["name"], schema.get("namespace", namespace))
        ns = full.rpartition(".")[0] or None
        out = dict(schema)
        names[full] = out
        if kind in ("record", "error"):
            out["fields"] = [dict(f, type=_resolve(f["type"], names, ns, stack + (full,)))
                             for f in schema["fields"]]
        return out
    if kind == "array":
        return dict(schema, items=_resolve(schema["items"], names, namespace, stack))
    if kind == "map":
        return dict(schema, values=_resolve(schema["values"], names, namespace, stack))
    if isinstance(kind, (str, list, dict)) and kind not in PRIMITIVES and kind != "null":
        return _resolve(kind, names, namespace, stack)
    return schema


def _is_null(schema) -> bool:
    return schema == "null" or (isinstance(schema, dict) and schema.get("type") == "null")


def _branches(union: list) -> list:
    return [s for s in union if not _is_null(s)]


def _arrow_type(schema):
    pa = _pa()
    if isinstance(schema, list):
        branches = _branches(schema)
        if len(branches) == 1:
            return _arrow_type(branches[0])
        return pa.struct([pa.field(str(i), _arrow_type(b), nullable=True)
                          for i, b in enumerate(branches)])
    if isinstance(schema, str):
        return {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                "float": pa.float32(), "double": pa.float64(), "bytes": pa.binary(),
                "string": pa.string()}[schema]
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal" and kind in ("bytes", "fixed"):
        return pa.decimal128(int(schema["precision"]), int(schema.get("scale", 0)))
    if logical == "uuid":
        return pa.string()
    if logical == "date" and kind == "int":
        return pa.date32()
    if logical in ("time-millis", "time-micros"):
        return pa.time64("us")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return pa.timestamp("us", tz="UTC")
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return pa.timestamp("us")
    if kind in ("record", "error"):
        return pa.struct([pa.field(f["name"], _arrow_type(f["type"]), nullable=True)
                          for f in schema["fields"] if not _is_null(f["type"])])
    if kind == "enum":
        return pa.string()
    if kind == "array":
        return pa.list_(pa.field("element", _arrow_type(schema["items"]), nullable=True))
    if kind == "map":
        return pa.map_(pa.string(), pa.field("value", _arrow_type(schema["values"]),
                                             nullable=True))
    if kind == "fixed":
        return pa.binary(int(schema["size"]))
    if kind in PRIMITIVES:
        return _arrow_type(kind)
    raise Unsupported(f"type {kind}")


def _same(value):
    return value


def _converter(schema):
    """value as fastavro decodes it -> value as Arrow takes it for _arrow_type(schema)."""
    if isinstance(schema, list):
        branches = _branches(schema)
        if len(branches) == 1:
            inner = _converter(branches[0])
            return lambda v: None if v is None else inner(v)
        converters = [_converter(b) for b in branches]
        matches = [_matcher(b) for b in branches]
        names = [str(i) for i in range(len(branches))]

        def union(v):
            if v is None:
                return None
            out = dict.fromkeys(names)
            for name, match, convert in zip(names, matches, converters):
                if match(v):
                    out[name] = convert(v)
                    break
            return out
        return union
    if isinstance(schema, str):
        return _same
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "uuid":
        return lambda v: None if v is None else str(v)
    if kind in ("record", "error"):
        fields = [(f["name"], _converter(f["type"])) for f in schema["fields"]
                  if not _is_null(f["type"])]
        return lambda v: None if v is None else {n: c(v.get(n)) for n, c in fields}
    if kind == "array":
        item = _converter(schema["items"])
        return lambda v: None if v is None else [item(x) for x in v]
    if kind == "map":
        value = _converter(schema["values"])
        return lambda v: None if v is None else [(k, value(x)) for k, x in v.items()]
    return _same


def _matcher(schema):
    """Whether a decoded value came from this branch of a union (fastavro
    hands over the value, not the branch it was written with)."""
    if isinstance(schema, str):
        kinds = {"boolean": bool, "int": int, "long": int, "float": float, "double": float,
                 "bytes": bytes, "string": str}[schema]
        return lambda v: isinstance(v, kinds) and not (kinds is int and isinstance(v, bool))
    kind, logical = schema["type"], schema.get("logicalType")
    if logical == "decimal":
        return lambda v: isinstance(v, decimal.Decimal)
    if logical == "uuid":
        return lambda v: isinstance(v, uuid.UUID)
    if logical == "date":
        return lambda v: isinstance(v, datetime.date) and not isinstance(v, datetime.datetime)
    if logical and logical.startswith("time-"):
        return lambda v: isinstance(v, datetime.time)
    if logical and "timestamp" in logical:
        return lambda v: isinstance(v, datetime.datetime)
    if kind in ("record", "error"):
        names = {f["name"] for f in schema["fields"]}
        return lambda v: isinstance(v, dict) and set(v) == names
    if kind == "map":
        return lambda v: isinstance(v, dict)
    if kind == "array":
        return lambda v: isinstance(v, list)
    if kind == "enum":
        symbols = set(schema["symbols"])
        return lambda v: v in symbols
    if kind == "fixed":
        return lambda v: isinstance(v, bytes) and len(v) == int(schema["size"])
    return _matcher(kind) if kind in PRIMITIVES else (lambda v: False)
