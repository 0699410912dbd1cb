"""The value's columns: a topic's values decoded through the schema registry.

A topic whose subject ``<topic>-value`` (Confluent's TopicNameStrategy)
has an Avro or a JSON Schema gets one column per top-level field of that
subject's latest schema, after the base columns (topic_source.py); a field
named like a base column is ``value_<name>``. Each value in Confluent's
wire format (magic byte 0, the 4-byte schema id, the encoded value) is read
with its own writer's schema (by id, cached) resolved to the latest one
(Avro's rules), so the records of older compatible versions fill the same
columns. A subject the user may not read (the registry's SUBJECT ACLs, asked
with the user's login over HTTP) is as none. A null value (tombstone), a value not in the wire format or one
that does not decode gives nulls in these columns: the raw ``value`` is
still there to look at, and one bad record does not fail a query over a
topic's whole history.

Avro -> Arrow: boolean bool, int int32, long int64, float float32, double
float64, string and enum string, bytes and fixed binary, record struct,
array list, map map<string, _>, a union with null a nullable column, date
date32, timestamp-millis/-micros timestamp[ms/us, UTC], decimal
decimal128, time-millis time32[ms], time-micros time64[us]; other unions
(and anything else unmapped) a string column of the value's text.
JSON Schema -> Arrow: string string, integer int64, number float64,
boolean bool; other types a string column of the JSON text.
Protobuf subjects get no value columns yet (docs/sql.md).

``json_cell``: a cell of an answer as JSON's types, for POST /query, the
CLI's JSON lines and a persistent query's output values.

Who may call: session.py (one ValueColumns per topic per query; its
registry client caches schemas by id); json_cell, anyone.
"""
from __future__ import annotations

import io
import json

import pyarrow as pa

from kafkalite.sql.topic_source import BASE_COLUMNS


class ValueColumns:
    """The columns one topic's values decode into (``fields``), and the
    decoding of a batch's value column into them (``arrays``).
    ``decoded``: how many values this has decoded (a batch whose columns
    no query reads is not decoded)."""

    def __init__(self, fields: list[pa.Field], decode):
        self.fields = fields
        self._decode = decode               # bytes -> dict (field name -> value), or None
        self._struct = pa.struct(fields)
        self._names = [f.name for f in fields]
        self.decoded = 0

    def arrays(self, values: pa.Array, columns=None) -> list[pa.Array]:
        """The value columns of ``values``; only those named in ``columns``
        (None: all) are decoded, the others are nulls of their type (a
        query that reads none of them decodes no value)."""
        if columns is not None and not columns.intersection(self._names):
            return [pa.nulls(len(values), f.type) for f in self.fields]
        rows = []
        for v in values.to_pylist():
            row = None
            if v is not None and len(v) > 5 and v[0] == 0:
                try:
                    row = self._decode(v)
                except Exception:   # noqa: BLE001 -- bytes of another schema, a corrupt value
                    row = None
            rows.append(row)
        self.decoded += len(rows)
        # flatten(), not field(i): a null row's fields are null only through it
        return pa.array(rows, self._struct).flatten()


def registry_client(url: str, user_info: str | None = None):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    conf = {"url": url}
    if user_info:
        conf["basic.auth.user.info"] = user_info
    return SchemaRegistryClient(conf)


def for_topic(client, topic: str) -> ValueColumns | None:
    """The value columns of ``topic``, or None (no registry, no subject, a
    Protobuf subject, a schema with no top-level fields)."""
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    if client is None:
        return None
    try:
        latest = client.get_latest_version(f"{topic}-value")
    except SchemaRegistryError as exc:
        # no subject, or one the user may not read (the registry's SUBJECT
        # ACLs): the raw value only, as the console shows it
        if exc.http_status_code in (401, 403, 404):
            return None
        raise
    kind = (latest.schema.schema_type or "AVRO").upper()
    if kind == "AVRO":
        return _avro(client, json.loads(latest.schema.schema_str))
    if kind == "JSON":
        return _json_schema(json.loads(latest.schema.schema_str))
    return None


def _column_name(name: str) -> str:
    return f"value_{name}" if name in BASE_COLUMNS else name


def _avro(client, schema) -> ValueColumns | None:
    import fastavro
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    named: dict = {}
    fields = [pa.field(_column_name(f["name"]), *_avro_type(f["type"], named, None))
              for f in schema["fields"]]
    reader = fastavro.parse_schema(schema)
    writers: dict[int, object] = {}
    texts = [f.name for f, src in zip(fields, schema["fields"]) if f.type == pa.string()
             and not _is_textual(src["type"])]
    renamed = {f["name"]: _column_name(f["name"]) for f in schema["fields"]}

    def decode(v: bytes) -> dict:
        sid = int.from_bytes(v[1:5], "big")
        writer = writers.get(sid)
        if writer is None:
            writer = writers[sid] = fastavro.parse_schema(
                json.loads(client.get_schema(sid).schema_str))
        row = fastavro.schemaless_reader(io.BytesIO(v[5:]), writer, reader)
        out = {renamed[k]: x for k, x in row.items()}
        for name in texts:
            if out.get(name) is not None:
                out[name] = json.dumps(out[name], default=str)
        return out
    return ValueColumns(fields, decode)


def _is_textual(avro) -> bool:
    """Whether an Avro type is read as text as it is (a string or an enum),
    so that its string column needs no conversion."""
    if isinstance(avro, list):
        rest = [b for b in avro if b != "null"]
        return len(rest) == 1 and _is_textual(rest[0])
    if isinstance(avro, dict):
        return avro.get("type") in ("string", "enum") and "logicalType" not in avro
    return avro == "string"


_AVRO_PRIMITIVES = {"boolean": pa.bool_(), "int": pa.int32(), "long": pa.int64(),
                    "float": pa.float32(), "double": pa.float64(), "string": pa.string(),
                    "bytes": pa.binary()}


def _avro_type(avro, named: dict, namespace) -> tuple[pa.DataType, bool]:
    """(Arrow type, nullable) of an Avro schema (JSON form)."""
    if isinstance(avro, str):
        if avro in _AVRO_PRIMITIVES:
            return _AVRO_PRIMITIVES[avro], True
        full = avro if "." in avro or not namespace else f"{namespace}.{avro}"
        return named.get(full, named.get(avro, pa.string())), True
    if isinstance(avro, list):
        rest = [b for b in avro if b != "null"]
        return (_avro_type(rest[0], named, namespace) if len(rest) == 1 else (pa.string(), True))
    t, logical = avro["type"], avro.get("logicalType")
    logical_types = {("int", "date"): pa.date32(),
                     ("long", "timestamp-millis"): pa.timestamp("ms", tz="UTC"),
                     ("long", "timestamp-micros"): pa.timestamp("us", tz="UTC"),
                     ("int", "time-millis"): pa.time32("ms"),
                     ("long", "time-micros"): pa.time64("us")}
    if (t, logical) in logical_types:
        return logical_types[(t, logical)], True
    if logical == "decimal" and t in ("bytes", "fixed"):
        return pa.decimal128(min(int(avro.get("precision", 38)), 38), int(avro.get("scale", 0))), \
            True
    if t in ("record", "enum", "fixed"):
        ns = avro.get("namespace", namespace)
        full = avro["name"] if "." in avro["name"] or not ns else f"{ns}.{avro['name']}"
        if t == "enum":
            named[full] = pa.string()
        elif t == "fixed":
            named[full] = pa.binary()
        else:
            inner = full.rpartition(".")[0] or None
            named[full] = pa.struct([pa.field(f["name"], *_avro_type(f["type"], named, inner))
                                     for f in avro["fields"]])
        return named[full], True
    if t == "array":
        return pa.list_(_avro_type(avro["items"], named, namespace)[0]), True
    if t == "map":
        return pa.map_(pa.string(), _avro_type(avro["values"], named, namespace)[0]), True
    return _avro_type(t, named, namespace)


_JSON_TYPES = {"string": pa.string(), "integer": pa.int64(), "number": pa.float64(),
               "boolean": pa.bool_()}


def _json_schema(schema) -> ValueColumns | None:
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not props:
        return None
    fields, texts, renamed = [], [], {}
    for name, prop in props.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if isinstance(kind, list):
            rest = [k for k in kind if k != "null"]
            kind = rest[0] if len(rest) == 1 else None
        renamed[name] = _column_name(name)
        fields.append(pa.field(renamed[name], _JSON_TYPES.get(kind, pa.string())))
        if kind not in _JSON_TYPES:
            texts.append(name)

    def decode(v: bytes) -> dict:
        doc = json.loads(v[5:])
        if not isinstance(doc, dict):
            return None
        out = {}
        for name, column in renamed.items():
            x = doc.get(name)
            out[column] = json.dumps(x) if name in texts and x is not None else x
        return out
    return ValueColumns(fields, decode)


def json_cell(v):
    """A cell of an answer as JSON's types: bytes as UTF-8 text (\\x escapes
    for bytes that are not), times and dates ISO 8601, decimals as text."""
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    if isinstance(v, dict):
        return {k: json_cell(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [json_cell(x) for x in v]
    if hasattr(v, "isoformat"):
        return v.isoformat()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    return str(v)
