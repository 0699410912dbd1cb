"""Connect's data model: schemas of records' keys and values.

A Schema has Kafka Connect's types (int8..int64, float32, float64, boolean,
string, bytes, array, map, struct), ``optional``, a ``name`` (the logical
types Timestamp, Date, Time and Decimal are named schemas, as in Kafka),
``fields`` for a struct and ``parameters``. A struct value is a plain dict
of field name -> value (in field order); a Timestamp value is a
timezone-aware datetime (UTC), a Date a date, a Time a time.

``to_json``/``from_json`` are the JsonConverter's schema form
(``{"type": "struct", "fields": [{"field": ..., "type": ...}], ...}``).
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, replace

TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
DECIMAL = "org.apache.kafka.connect.data.Decimal"

PRIMITIVES = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string",
              "bytes")
TYPES = PRIMITIVES + ("array", "map", "struct")
EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@dataclass(frozen=True)
class Field:
    name: str
    schema: "Schema"


@dataclass(frozen=True)
class Schema:
    type: str
    optional: bool = False
    name: str | None = None
    version: int | None = None
    doc: str | None = None
    default: object = None
    parameters: dict | None = None
    fields: tuple = ()                 # of Field, for struct
    value_schema: "Schema | None" = None   # array items, map values
    key_schema: "Schema | None" = None     # map keys

    def __post_init__(self):
        if self.type not in TYPES:
            raise ValueError(f"unknown Connect schema type {self.type!r}")

    def field(self, name: str) -> Field | None:
        for f in self.fields:
            if f.name == name:
                return f
        return None

    def as_optional(self) -> "Schema":
        return replace(self, optional=True)

    def with_fields(self, fields) -> "Schema":
        return replace(self, fields=tuple(fields))

    # ---- the JsonConverter's schema form ---------------------------------------------------

    def to_json(self) -> dict:
        out: dict = {"type": self.type, "optional": self.optional}
        if self.name:
            out["name"] = self.name
        if self.version is not None:
            out["version"] = self.version
        if self.doc:
            out["doc"] = self.doc
        if self.parameters:
            out["parameters"] = dict(self.parameters)
        if self.default is not None:
            out["default"] = to_json_value(self, self.default)
        if self.type == "struct":
            out["fields"] = [{**f.schema.to_json(), "field": f.name} for f in self.fields]
        elif self.type == "array":
            out["items"] = self.value_schema.to_json()
        elif self.type == "map":
            out["keys"] = self.key_schema.to_json()
            out["values"] = self.value_schema.to_json()
        return out

    @classmethod
    def from_json(cls, j: dict) -> "Schema":
        if not isinstance(j, dict) or "type" not in j:
            raise ValueError(f"a schema is an object with a \"type\": {j!r}")
        t = j["type"]
        fields = tuple(Field(f["field"], cls.from_json(f)) for f in j.get("fields", ())) \
            if t == "struct" else ()
        s = cls(t, bool(j.get("optional", False)), j.get("name"), j.get("version"), j.get("doc"),
                None, j.get("parameters"), fields,
                cls.from_json(j["items"]) if t == "array" else
                cls.from_json(j["values"]) if t == "map" else None,
                cls.from_json(j["keys"]) if t == "map" else None)
        if j.get("default") is not None:
            s = replace(s, default=from_json_value(s, j["default"]))
        return s


def _prim(t):
    return Schema(t), Schema(t, optional=True)


class SchemaBuilder:
    """Kafka's SchemaBuilder, for connectors: SchemaBuilder.struct().field(...).build()."""

    def __init__(self, type_: str):
        self._type, self._optional, self._name, self._fields = type_, False, None, []
        self._params = None

    @classmethod
    def struct(cls):
        return cls("struct")

    def name(self, name):
        self._name = name
        return self

    def optional(self):
        self._optional = True
        return self

    def parameter(self, k, v):
        self._params = {**(self._params or {}), k: v}
        return self

    def field(self, name: str, schema: Schema):
        self._fields.append(Field(name, schema))
        return self

    def build(self) -> Schema:
        return Schema(self._type, self._optional, self._name, parameters=self._params,
                      fields=tuple(self._fields))


(Schema.INT8, Schema.OPTIONAL_INT8) = _prim("int8")
(Schema.INT16, Schema.OPTIONAL_INT16) = _prim("int16")
(Schema.INT32, Schema.OPTIONAL_INT32) = _prim("int32")
(Schema.INT64, Schema.OPTIONAL_INT64) = _prim("int64")
(Schema.FLOAT32, Schema.OPTIONAL_FLOAT32) = _prim("float32")
(Schema.FLOAT64, Schema.OPTIONAL_FLOAT64) = _prim("float64")
(Schema.BOOLEAN, Schema.OPTIONAL_BOOLEAN) = _prim("boolean")
(Schema.STRING, Schema.OPTIONAL_STRING) = _prim("string")
(Schema.BYTES, Schema.OPTIONAL_BYTES) = _prim("bytes")
Schema.TIMESTAMP = Schema("int64", name=TIMESTAMP, version=1)
Schema.OPTIONAL_TIMESTAMP = Schema("int64", True, TIMESTAMP, 1)
Schema.DATE = Schema("int32", name=DATE, version=1)
Schema.OPTIONAL_DATE = Schema("int32", True, DATE, 1)
Schema.TIME = Schema("int32", name=TIME, version=1)
Schema.OPTIONAL_TIME = Schema("int32", True, TIME, 1)


# ---- logical values <-> their JSON (and wire) form ------------------------------------------

def timestamp_to_millis(v: _dt.datetime) -> int:
    if v.tzinfo is None:
        v = v.replace(tzinfo=_dt.timezone.utc)
    return (v - EPOCH) // _dt.timedelta(milliseconds=1)


def millis_to_timestamp(ms: int) -> _dt.datetime:
    return EPOCH + _dt.timedelta(milliseconds=ms)


_PLAIN = ("int8", "int16", "int32", "int64", "float32", "float64", "boolean", "string")


def struct_encoder(schema: Schema):
    """A function writing struct values of ``schema`` as to_json_value does,
    with the per-field dispatch decided once (the converter's per-record path)."""
    plan = [(f.name, f.schema.name is None and f.schema.type in _PLAIN, f.schema)
            for f in schema.fields]

    def encode(v):
        return {name: (x if plain or x is None else to_json_value(s, x))
                for name, plain, s in plan for x in (v.get(name),)}
    return encode


def to_json_value(schema: Schema | None, v):
    """A Connect value as JsonConverter writes it (logical types as numbers,
    bytes as base64)."""
    import base64
    if v is None:
        return None
    if schema is None:
        if isinstance(v, (bytes, bytearray)):
            return base64.b64encode(v).decode()
        if isinstance(v, _dt.datetime):
            return timestamp_to_millis(v)
        if isinstance(v, dict):
            return {k: to_json_value(None, x) for k, x in v.items()}
        if isinstance(v, list):
            return [to_json_value(None, x) for x in v]
        return v
    if schema.name == TIMESTAMP:
        return timestamp_to_millis(v) if isinstance(v, _dt.datetime) else int(v)
    if schema.name == DATE:
        return (v - EPOCH.date()).days if isinstance(v, _dt.date) else int(v)
    if schema.name == TIME:
        if isinstance(v, _dt.time):
            return ((v.hour * 60 + v.minute) * 60 + v.second) * 1000 + v.microsecond // 1000
        return int(v)
    if schema.name == DECIMAL:
        # Kafka's JsonConverter (decimal.format BASE64, its default): the
        # unscaled value's two's-complement bytes, as BigInteger.toByteArray
        # gives them, in base64; a float would lose digits
        if not isinstance(v, (bytes, bytearray)):
            v = decimal_unscaled_bytes(v, decimal_scale(schema))
        return base64.b64encode(v).decode()
    if schema.type == "bytes":
        return base64.b64encode(v).decode()
    if schema.type == "struct":
        return {f.name: to_json_value(f.schema, v.get(f.name)) for f in schema.fields}
    if schema.type == "array":
        return [to_json_value(schema.value_schema, x) for x in v]
    if schema.type == "map":
        return {k: to_json_value(schema.value_schema, x) for k, x in v.items()}
    return v


# the values the per-record decoders take for each type: ints by their width, the logical
# types as Python's datetime, date and time hold them (years 1..9999; a Time within its
# day: the decoder wraps or refuses the rest). The converters' batch readers check their
# columns against these (converters._payload_columns, batch_readers)
VALUE_RANGES = {"int8": (-(1 << 7), (1 << 7) - 1), "int16": (-(1 << 15), (1 << 15) - 1),
                "int32": (-(1 << 31), (1 << 31) - 1),
                TIMESTAMP: (-62_135_596_800_000, 253_402_300_799_999),
                DATE: (-719_162, 2_932_896), TIME: (0, 86_399_999)}
_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}


def decimal_scale(schema: Schema) -> int:
    return int((schema.parameters or {}).get("scale", 0))


def decimal_unscaled_bytes(v, scale: int) -> bytes:
    """A Decimal's value at ``scale`` as Java's BigInteger.toByteArray gives
    its unscaled value: big-endian two's complement, the fewest bytes that
    keep the sign bit."""
    import decimal
    unscaled = int(decimal.Decimal(v).scaleb(scale).to_integral_value(decimal.ROUND_HALF_EVEN))
    size = (unscaled if unscaled >= 0 else ~unscaled).bit_length() // 8 + 1
    return unscaled.to_bytes(size, "big", signed=True)


def _decimal_from_json(schema: Schema, v):
    """A Decimal as Kafka's JsonConverter reads one: base64 of the unscaled
    bytes (decimal.format BASE64), or a JSON number (NUMERIC)."""
    import base64
    import binascii
    import decimal

    from kafkalite.connect.errors import DataException
    scale = decimal_scale(schema)
    if isinstance(v, str):
        try:
            raw = base64.b64decode(v, validate=True)
        except (binascii.Error, ValueError):
            raise DataException(f"Decimal schema, value {v!r} is not base64") from None
        return decimal.Decimal(int.from_bytes(raw, "big", signed=True)).scaleb(-scale)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise DataException(f"Decimal schema, value {v!r} is neither base64 nor a number")
    return decimal.Decimal(str(v)).quantize(decimal.Decimal(1).scaleb(-scale))


def from_json_value(schema: Schema, v):
    """The inverse of to_json_value under ``schema``; a value that does not
    fit raises DataException naming the schema type."""
    import base64

    from kafkalite.connect.errors import DataException
    if v is None:
        if not schema.optional and schema.default is None:
            raise DataException(f"null value for a required {schema.type} schema")
        return schema.default
    t = schema.type
    if schema.name == DECIMAL:
        return _decimal_from_json(schema, v)
    if schema.name in (TIMESTAMP, DATE, TIME):
        try:
            n = int(v)
        except (TypeError, ValueError):
            raise DataException(f"{schema.name} schema, value {v!r} is not an integer") from None
        if schema.name == TIMESTAMP:
            return millis_to_timestamp(n)
        if schema.name == DATE:
            return EPOCH.date() + _dt.timedelta(days=n)
        return (_dt.datetime.min + _dt.timedelta(milliseconds=n)).time()
    if t in _INT_RANGES:
        if isinstance(v, bool) or not isinstance(v, int):
            raise DataException(f"{t} schema, value {v!r} is not an integer")
        bits = _INT_RANGES[t]
        if not -(1 << (bits - 1)) <= v < (1 << (bits - 1)):
            raise DataException(f"{t} schema, value {v} out of range")
        return v
    if t in ("float32", "float64"):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise DataException(f"{t} schema, value {v!r} is not a number")
        return float(v)
    if t == "boolean":
        if not isinstance(v, bool):
            raise DataException(f"boolean schema, value {v!r}")
        return v
    if t == "string":
        if not isinstance(v, str):
            raise DataException(f"string schema, value {v!r}")
        return v
    if t == "bytes":
        return base64.b64decode(v)
    if t == "struct":
        if not isinstance(v, dict):
            raise DataException(f"struct schema, value {v!r} is not an object")
        return {f.name: from_json_value(f.schema, v.get(f.name)) for f in schema.fields}
    if t == "array":
        return [from_json_value(schema.value_schema, x) for x in v]
    return {k: from_json_value(schema.value_schema, x) for k, x in v.items()}


def _value_decoder(schema: Schema):
    """from_json_value for one schema with its dispatch decided once: the
    common well-formed values take a short path, anything else (null, a
    wrong type, out of range) the general one, so results and errors are
    from_json_value's."""
    t, name = schema.type, schema.name
    if name is None and t in _INT_RANGES:
        lo, hi = -(1 << (_INT_RANGES[t] - 1)), 1 << (_INT_RANGES[t] - 1)
        return lambda v: v if type(v) is int and lo <= v < hi else from_json_value(schema, v)
    if name is None and t == "string":
        return lambda v: v if type(v) is str else from_json_value(schema, v)
    if name is None and t in ("float32", "float64"):
        return lambda v: v if type(v) is float else from_json_value(schema, v)
    if name == TIMESTAMP:
        return lambda v: (EPOCH + _dt.timedelta(milliseconds=v) if type(v) is int
                          else from_json_value(schema, v))
    return lambda v: from_json_value(schema, v)


def struct_decoder(schema: Schema):
    """A function reading struct values of ``schema`` as from_json_value
    does, each field's decoder chosen once (the converter's per-record path)."""
    plan = [(f.name, _value_decoder(f.schema)) for f in schema.fields]

    def decode(v):
        if type(v) is not dict:
            return from_json_value(schema, v)
        get = v.get
        return {name: dec(get(name)) for name, dec in plan}
    return decode


def infer_schema(v) -> Schema | None:
    """A schema for a schemaless value (as a sink that needs columns sees it)."""
    if v is None:
        return None
    if isinstance(v, bool):
        return Schema.OPTIONAL_BOOLEAN
    if isinstance(v, int):
        return Schema.OPTIONAL_INT64
    if isinstance(v, float):
        return Schema.OPTIONAL_FLOAT64
    if isinstance(v, str):
        return Schema.OPTIONAL_STRING
    if isinstance(v, (bytes, bytearray)):
        return Schema.OPTIONAL_BYTES
    if isinstance(v, _dt.datetime):
        return Schema.OPTIONAL_TIMESTAMP
    if isinstance(v, dict):
        return Schema("struct", True, fields=tuple(
            Field(k, infer_schema(x) or Schema.OPTIONAL_STRING) for k, x in v.items()))
    return None
