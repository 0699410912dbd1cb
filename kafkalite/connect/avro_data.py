"""Confluent's AvroData: Connect's schemas and values <-> Avro's, as
Confluent's AvroConverter maps them (connect.meta.data on), for the
AvroConverter (registry_converters.py). Avro binary itself is fastavro's.

Connect -> Avro: optional = a union with null first and default null;
int8/int16 = int with ``connect.type``; Decimal, Date, Time, Timestamp =
Avro's logical types with ``connect.name``/``connect.version``; a struct a
record named by the schema's name (``io.confluent.connect.avro.ConnectDefault``,
ConnectDefault2, ... for nameless ones); a map with string keys an Avro
map, with other keys an array of MapEntry records; ``connect.doc``,
``connect.parameters`` keep the rest. Avro -> Connect reads those back,
and for a schema Connect did not write: an enum is a string, a fixed
bytes, time/timestamp-micros Connect's millisecond Time/Timestamp. Unions
other than [null, T] are refused (DataException).
"""
from __future__ import annotations

import datetime as _dt

from kafkalite.connect.data import DATE, DECIMAL, TIME, TIMESTAMP, Field, Schema
from kafkalite.connect.errors import DataException

# Confluent's names for what the Connect schema does not say
AVRO_NAMESPACE = "io.confluent.connect.avro"
DEFAULT_RECORD = "ConnectDefault"
DECIMAL_PRECISION = "connect.decimal.precision"
DECIMAL_DEFAULT_PRECISION = 64


def _split_name(full: str) -> tuple[str | None, str]:
    ns, _, name = full.rpartition(".")
    return (ns or None), name


class _AvroSchemaWriter:
    """A Connect schema as Confluent's AvroData writes it (connect.meta.data
    on): optional = a union with null first and default null; int8/int16 =
    int with ``connect.type``; the logical types with Avro's logicalType and
    ``connect.name``/``connect.version``; a struct a record named by the
    schema's name (``io.confluent.connect.avro.ConnectDefault``, then
    ConnectDefault2, ... for nameless ones); a map with string keys an Avro
    map, with other keys an array of MapEntry records."""

    def __init__(self):
        self.defined: set = set()
        self.defaults = 0

    def schema(self, s: Schema):
        body = self._plain(s)
        return ["null", body] if s.optional else body

    def _meta(self, s: Schema, out: dict) -> dict:
        if s.name and "connect.name" not in out:
            out["connect.name"] = s.name
        if s.version is not None:
            out["connect.version"] = s.version
        if s.doc:
            out["connect.doc"] = s.doc
        if s.parameters:
            out["connect.parameters"] = {k: str(v) for k, v in s.parameters.items()}
        return out

    def _plain(self, s: Schema):
        t = s.type
        if s.name == DECIMAL:
            params = s.parameters or {}
            return self._meta(s, {"type": "bytes", "logicalType": "decimal",
                                  "precision": int(params.get(DECIMAL_PRECISION,
                                                              DECIMAL_DEFAULT_PRECISION)),
                                  "scale": int(params.get("scale", 0))})
        if s.name in (DATE, TIME, TIMESTAMP):
            base, logical = {DATE: ("int", "date"), TIME: ("int", "time-millis"),
                             TIMESTAMP: ("long", "timestamp-millis")}[s.name]
            return self._meta(s, {"type": base, "logicalType": logical})
        if t == "struct":
            full = s.name or AVRO_NAMESPACE + "." + DEFAULT_RECORD
            if s.name is None:
                self.defaults += 1
                if self.defaults > 1:
                    full += str(self.defaults)
            if full in self.defined:
                return full          # a record defined once, named after
            self.defined.add(full)
            ns, name = _split_name(full)
            out = {"type": "record", "name": name}
            if ns:
                out["namespace"] = ns
            if s.doc:
                out["doc"] = s.doc
            out["fields"] = [self._field(f) for f in s.fields]
            return self._meta(s, out) if s.name else out
        if t == "array":
            return self._meta(s, {"type": "array", "items": self.schema(s.value_schema)})
        if t == "map":
            if s.key_schema.type == "string" and not s.key_schema.optional:
                return self._meta(s, {"type": "map", "values": self.schema(s.value_schema)})
            entry = AVRO_NAMESPACE + ".MapEntry"
            items = entry if entry in self.defined else {
                "type": "record", "name": "MapEntry", "namespace": AVRO_NAMESPACE,
                "fields": [{"name": "key", "type": self.schema(s.key_schema)},
                           {"name": "value", "type": self.schema(s.value_schema)}]}
            self.defined.add(entry)
            return self._meta(s, {"type": "array", "items": items})
        base = {"int8": "int", "int16": "int", "int32": "int", "int64": "long",
                "float32": "float", "float64": "double", "boolean": "boolean",
                "string": "string", "bytes": "bytes"}[t]
        out = {"type": base}
        if t in ("int8", "int16"):
            out["connect.type"] = t
        out = self._meta(s, out)
        return base if len(out) == 1 else out

    def _field(self, f: Field) -> dict:
        out = {"name": f.name, "type": self.schema(f.schema)}
        if f.schema.optional:
            out["default"] = None
        elif f.schema.default is not None and f.schema.type in (
                "int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string") \
                and f.schema.name is None:
            out["default"] = f.schema.default
        return out


def connect_schema_to_avro(schema: Schema) -> object:
    """The Avro schema (JSON form) Confluent's AvroData makes of ``schema``."""
    return _AvroSchemaWriter().schema(schema)


_AVRO_PRIMITIVES = {"boolean": Schema.BOOLEAN, "int": Schema.INT32, "long": Schema.INT64,
                    "float": Schema.FLOAT32, "double": Schema.FLOAT64, "bytes": Schema.BYTES,
                    "string": Schema.STRING}


def avro_schema_to_connect(avro, named: dict | None = None, namespace: str | None = None
                           ) -> Schema:
    """The Connect schema of an Avro schema (JSON form), as AvroData reads
    one: the ``connect.*`` properties restore what Connect said; a union of
    null and one type is that type, optional; an enum is a string, a fixed
    bytes. Other unions are refused (DataException)."""
    named = {} if named is None else named
    if isinstance(avro, str):
        if avro in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[avro]
        full = avro if "." in avro or namespace is None else f"{namespace}.{avro}"
        hit = named.get(full, named.get(avro))
        if hit is None:
            raise DataException(f"Avro schema names an unknown type {avro!r}")
        return hit
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) == 1 and len(avro) == 2:
            return avro_schema_to_connect(branches[0], named, namespace).as_optional()
        raise DataException(f"Avro unions other than [null, T] are not supported: {avro!r}")
    if not isinstance(avro, dict):
        raise DataException(f"not an Avro schema: {avro!r}")
    t = avro["type"]
    logical = avro.get("logicalType")
    params = avro.get("connect.parameters")
    meta = {"version": avro.get("connect.version"), "doc": avro.get("connect.doc"),
            "parameters": dict(params) if params else None}
    if logical == "decimal" and t in ("bytes", "fixed"):
        p = {**(params or {}), "scale": str(avro.get("scale", 0))}
        if "precision" in avro and params is None:
            # written by another writer than Connect: its precision kept as Confluent does
            p[DECIMAL_PRECISION] = str(avro["precision"])
        return Schema("bytes", name=DECIMAL, version=1, parameters=p, doc=meta["doc"])
    if logical == "date" and t == "int":
        return Schema.DATE
    if logical in ("time-millis", "time-micros"):
        return Schema.TIME
    if logical in ("timestamp-millis", "timestamp-micros"):
        return Schema.TIMESTAMP
    if t == "record":
        ns = avro.get("namespace", namespace)
        full = avro["name"] if "." in avro["name"] or not ns else f"{ns}.{avro['name']}"
        name = avro.get("connect.name", full)
        if name.startswith(AVRO_NAMESPACE + "." + DEFAULT_RECORD):
            name = None
        fns = full.rpartition(".")[0] or None
        # a placeholder while the fields are read (a record that names itself is refused)
        fields = tuple(Field(f["name"], avro_schema_to_connect(f["type"], named, fns))
                       for f in avro["fields"])
        s = Schema("struct", name=name, fields=fields, doc=avro.get("doc"),
                   version=meta["version"], parameters=meta["parameters"])
        named[full] = s
        return s
    if t == "enum":
        ns = avro.get("namespace", namespace)
        full = avro["name"] if "." in avro["name"] or not ns else f"{ns}.{avro['name']}"
        named[full] = Schema.STRING
        return Schema.STRING
    if t == "fixed":
        ns = avro.get("namespace", namespace)
        full = avro["name"] if "." in avro["name"] or not ns else f"{ns}.{avro['name']}"
        named[full] = Schema.BYTES
        return Schema.BYTES
    if t == "array":
        items = avro["items"]
        if isinstance(items, dict) and items.get("type") == "record" and \
                items.get("name") == "MapEntry" and \
                [f["name"] for f in items.get("fields", ())] == ["key", "value"]:
            entry = avro_schema_to_connect(items, named, namespace)
            return Schema("map", key_schema=entry.fields[0].schema,
                          value_schema=entry.fields[1].schema, **meta)
        return Schema("array", value_schema=avro_schema_to_connect(items, named, namespace),
                      **meta)
    if t == "map":
        return Schema("map", key_schema=Schema.STRING,
                      value_schema=avro_schema_to_connect(avro["values"], named, namespace),
                      **meta)
    if isinstance(t, (dict, list)) or t not in _AVRO_PRIMITIVES:
        return avro_schema_to_connect(t, named, namespace)
    connect_type = avro.get("connect.type")
    base = connect_type if connect_type in ("int8", "int16") and t == "int" else \
        _AVRO_PRIMITIVES[t].type
    name = avro.get("connect.name")
    if name is None and all(v is None for v in meta.values()) and base == _AVRO_PRIMITIVES[t].type:
        return _AVRO_PRIMITIVES[t]
    return Schema(base, name=name, **meta)


def to_avro_value(s: Schema, v):
    """A Connect value as fastavro writes it under connect_schema_to_avro(s):
    the same, but for maps with keys other than strings (MapEntry lists)."""
    if v is None:
        return None
    t = s.type
    if t == "struct":
        return {f.name: to_avro_value(f.schema, v.get(f.name)) for f in s.fields}
    if t == "array":
        return [to_avro_value(s.value_schema, x) for x in v]
    if t == "map":
        if s.key_schema.type == "string" and not s.key_schema.optional:
            return {k: to_avro_value(s.value_schema, x) for k, x in v.items()}
        return [{"key": to_avro_value(s.key_schema, k), "value": to_avro_value(
            s.value_schema, x)} for k, x in v.items()]
    if s.name == TIMESTAMP and isinstance(v, _dt.datetime) and v.tzinfo is None:
        return v.replace(tzinfo=_dt.timezone.utc)
    return v


def needs_conversion(s: Schema, writing: bool = False) -> bool:
    """Whether values of ``s`` need to_avro_value (``writing``) or
    from_avro_value, or are fastavro's as they are (the per-record walk
    skipped: fastavro takes Connect's dicts, lists, datetimes and Decimals,
    a naive datetime as UTC as Connect does)."""
    if s.type == "map":
        return not writing or s.key_schema.type != "string" or s.key_schema.optional or \
            needs_conversion(s.value_schema, writing)
    if s.type == "struct":
        return any(needs_conversion(f.schema, writing) for f in s.fields)
    if s.type == "array":
        return needs_conversion(s.value_schema, writing)
    return not writing and (s.type == "string" or s.name in (TIME, TIMESTAMP))


def from_avro_value(s: Schema, v):
    """What fastavro read, as the Connect value of ``s``: MapEntry lists
    back to dicts, a uuid or an enum to its text, a micros time to Connect's
    millisecond precision."""
    if v is None:
        return None
    t = s.type
    if t == "struct":
        return {f.name: from_avro_value(f.schema, v.get(f.name)) for f in s.fields}
    if t == "array":
        return [from_avro_value(s.value_schema, x) for x in v]
    if t == "map":
        if isinstance(v, list):
            return {from_avro_value(s.key_schema, e["key"]):
                    from_avro_value(s.value_schema, e["value"]) for e in v}
        return {k: from_avro_value(s.value_schema, x) for k, x in v.items()}
    if t == "string" and not isinstance(v, str):
        return str(v)
    if s.name in (TIME, TIMESTAMP) and v.microsecond % 1000:
        return v.replace(microsecond=v.microsecond // 1000 * 1000)
    return v
