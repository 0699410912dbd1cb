"""The value's and the key's columns: a topic's values and keys decoded
through the schema registry.

A topic whose subject ``<topic>-value`` (Confluent's TopicNameStrategy)
has an Avro, a JSON Schema or a Protobuf schema (protobuf_columns.py) gets
one column per top-level field of that subject's latest schema, after the
base columns (topic_source.py); a field named like a base column is
``value_<name>``. A subject ``<topic>-key`` gives the key's fields the same
way, as ``key_<name>`` columns after the value's (TopicColumns). Each value in Confluent's
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

``json_cell``: a cell of an answer as JSON's types, for POST /query, the
CLI's JSON lines and a persistent query's output values.

Who may call: session.py (one ValueColumns per topic per query; its
registry client caches schemas by id); json_cell, anyone.
"""
from __future__ import annotations

import io
import json

import numpy as np
import pyarrow as pa

from kafkalite.sql.topic_source import BASE_COLUMNS


class ValueColumns:
    """The columns one topic's values decode into (``fields``), and the
    decoding of a batch's value column into them (``arrays``).
    ``decoded``: how many values this has decoded (a batch whose columns
    no query reads is not decoded)."""

    def __init__(self, fields: list[pa.Field], decode, flat: FlatAvro | None = None):
        self.fields = fields
        self._decode = decode               # bytes -> dict (field name -> value), or None
        self._flat = flat
        self._struct = pa.struct(fields)
        self._names = [f.name for f in fields]
        self.decoded = 0

    def arrays(self, values: pa.Array, columns=None) -> list[pa.Array]:
        """The value columns of ``values``; only those named in ``columns``
        (None: all) are decoded, the others are nulls of their type (a
        query that reads none of them decodes no value). The values a
        FlatAvro reads are read in C, the others (a tombstone, an older
        version's, a value not in the wire format) record by record."""
        if columns is not None and not columns.intersection(self._names):
            return [pa.nulls(len(values), f.type) for f in self.fields]
        self.decoded += len(values)
        if self._flat is not None:
            fast = self._flat.rows(values)
            if fast.all():
                got = self._flat.read(values)
                if got is not None:
                    return got
            elif fast.any():
                got = self._flat.read(values.filter(pa.array(fast)))
                if got is not None:
                    rest = self._per_record(values.filter(pa.array(~fast)))
                    # the two parts back in the records' order
                    order = np.concatenate([np.flatnonzero(fast), np.flatnonzero(~fast)])
                    where = np.empty_like(order)
                    where[order] = np.arange(len(order))
                    return [pa.concat_arrays([a, b]).take(pa.array(where))
                            for a, b in zip(got, rest)]
        return self._per_record(values)

    def _per_record(self, values: pa.Array) -> list[pa.Array]:
        rows = []
        for v in values.to_pylist():
            row = None
            if v is not None and len(v) > 5 and v[0] == 0:
                try:
                    row = self._decode(v)
                except Exception:   # noqa: BLE001 -- bytes of another schema, a corrupt value
                    row = None
            rows.append(row)
        # flatten(), not field(i): a null row's fields are null only through it
        return pa.array(rows, self._struct).flatten()


class FlatAvro:
    """The values of the latest schema (``schema_id``) of a flat record
    (each field a primitive, or a union of one with null: ``_flat_plan``)
    read into Arrow columns in C (ext/avro_columns.pyx) from the value
    column's own buffers, past each value's wire header: fastavro made a
    dict a record, several microseconds each. A value of another schema
    id is the record-by-record decoder's (its writer's schema resolved to
    the latest); so is a whole batch the C reader refuses (a value that
    does not end where its record does, a string that is not UTF-8), so
    that a bad record is a row of nulls either way."""

    def __init__(self, schema_id: int, fields: list[pa.Field], kinds: list, nulls: list):
        self.fields, self.kinds, self.nulls = fields, kinds, nulls
        self._header = b"\0" + schema_id.to_bytes(4, "big")

    def rows(self, values: pa.Array) -> np.ndarray:
        """Which of ``values`` (binary) are in the wire format with this
        schema id (a bool a value)."""
        n = len(values)
        offsets, data = _binary_buffers(values)
        if not n or not len(data):
            return np.zeros(n, np.bool_)
        ok = np.diff(offsets) > WIRE_HEADER
        if values.null_count:
            ok &= values.is_valid().to_numpy(zero_copy_only=False)
        starts = offsets[:-1][ok]
        header = np.frombuffer(self._header, np.uint8)
        match = np.ones(len(starts), np.bool_)
        for i in range(WIRE_HEADER):
            match &= data[starts + i] == header[i]
        ok[ok] = match
        return ok

    def read(self, values: pa.Array) -> list[pa.Array] | None:
        """The columns of ``values``, every one of them this schema id's, or
        None where one does not read."""
        from kafkalite._ext.avro_columns import decode_flat
        n = len(values)
        offsets, data = _binary_buffers(values)
        got = decode_flat(data, np.ascontiguousarray(offsets), self.kinds, self.nulls,
                          WIRE_HEADER)
        if got is None:
            return None
        columns = []
        try:
            for (read, valid), field, kind in zip(got, self.fields, self.kinds):
                nulls = n - int(np.count_nonzero(valid))
                if kind == _BYTES:
                    bits = pa.py_buffer(np.packbits(valid.view(np.bool_), bitorder="little")) \
                        if nulls else None
                    column = pa.Array.from_buffers(field.type, n, [
                        bits, pa.py_buffer(read[0]), pa.py_buffer(read[1])], null_count=nulls)
                    column.validate(full=True)      # a string's UTF-8, as fastavro's
                else:
                    column = pa.array(read.view(np.bool_) if kind == _BOOLEAN else read,
                                      mask=(valid == 0) if nulls else None)
                    if column.type != field.type:   # an int's int64, a float's float64
                        column = column.cast(field.type)
                columns.append(column)
        except (ValueError, pa.ArrowException):
            return None
        return columns


def _binary_buffers(values: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    """(the n + 1 int32 offsets, the data bytes) of a binary array, no copy."""
    buffers = values.buffers()
    offsets = np.frombuffer(buffers[1], np.int32)[values.offset:values.offset + len(values) + 1]
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None and buffers[2].size \
        else np.zeros(0, np.uint8)
    return offsets, data


# Confluent's wire format: magic byte 0, the schema id (4 bytes, big-endian), the value
WIRE_HEADER = 5
# ext/avro_columns.decode_flat's kinds: 0 a varint, 1 double, 2 float, 3 boolean, 4 bytes
_BOOLEAN, _BYTES = 3, 4
_FLAT_KINDS = {"long": 0, "int": 0, "double": 1, "float": 2, "boolean": _BOOLEAN,
               "string": _BYTES, "bytes": _BYTES}


def _flat_plan(schema: dict) -> tuple[list, list] | None:
    """(decode_flat's kind a field, the union branch that is null or -1)
    of a record whose every field is a primitive without a logical type
    (or a union of one with null), else None."""
    kinds, nulls = [], []
    for f in schema["fields"]:
        branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
        others = [b for b in branches if b != "null"]
        if len(others) != 1 or len(branches) > 2:
            return None
        b = others[0]
        if isinstance(b, dict):
            if set(b) - {"type", "avro.java.string"}:
                return None
            b = b["type"]
        if b not in _FLAT_KINDS:
            return None
        kinds.append(_FLAT_KINDS[b])
        nulls.append(branches.index("null") if len(branches) == 2 else -1)
    return kinds, nulls


def registry_client(url: str, user_info: str | None = None):
    from confluent_kafka.schema_registry import SchemaRegistryClient
    conf = {"url": url}
    if user_info:
        conf["basic.auth.user.info"] = user_info
    return SchemaRegistryClient(conf)


class TopicColumns:
    """A topic's decoded columns: its value's, then its key's
    (``key_<field>``, from the subject ``<topic>-key``), each part a
    ValueColumns over its binary column of a batch."""

    def __init__(self, parts: list[tuple[str, ValueColumns]]):
        self.parts = parts                  # (the batch's column: key or value, its columns)
        self.fields = [f for _, part in parts for f in part.fields]

    @property
    def decoded(self) -> int:
        return sum(part.decoded for _, part in self.parts)

    def arrays(self, batch: pa.RecordBatch, columns=None) -> list[pa.Array]:
        """The decoded columns of ``batch`` (BASE_SCHEMA), as ValueColumns.arrays."""
        return [a for source, part in self.parts
                for a in part.arrays(batch.column(source), columns)]


def for_topic(client, topic: str) -> TopicColumns | None:
    """The key's and the value's columns of ``topic``, or None (no registry,
    no subject, a schema with no top-level fields)."""
    if client is None:
        return None
    parts = [(source, part) for source, part in (
        ("value", _for_subject(client, f"{topic}-value", _column_name)),
        ("key", _for_subject(client, f"{topic}-key", _key_column_name))) if part is not None]
    return TopicColumns(parts) if parts else None


def _for_subject(client, subject: str, name_of) -> ValueColumns | None:
    # imported here: a query without a registry (the CLI's one query a process) skips it
    from confluent_kafka.schema_registry.error import SchemaRegistryError
    try:
        latest = client.get_latest_version(subject)
    except SchemaRegistryError as exc:
        # no subject, or one the user may not read (the registry's SUBJECT
        # ACLs): the raw bytes only, as the console shows them
        if exc.http_status_code in (401, 403, 404):
            return None
        raise
    kind = (latest.schema.schema_type or "AVRO").upper()
    if kind == "AVRO":
        return _avro(client, json.loads(latest.schema.schema_str), latest.schema_id, name_of)
    if kind == "JSON":
        return _json_schema(json.loads(latest.schema.schema_str), name_of)
    if kind == "PROTOBUF":
        from kafkalite.sql.protobuf_columns import protobuf_columns
        got = protobuf_columns(client, latest.schema_id, name_of)
        return ValueColumns(*got) if got is not None else None
    return None


def _key_column_name(name: str) -> str:
    return f"key_{name}"


def _column_name(name: str) -> str:
    return f"value_{name}" if name in BASE_COLUMNS else name


def _avro(client, schema, schema_id: int | None = None,
          name_of=None) -> ValueColumns | None:
    import fastavro
    if not isinstance(schema, dict) or schema.get("type") != "record":
        return None
    name_of = name_of or _column_name
    named: dict = {}
    fields = [pa.field(name_of(f["name"]), *_avro_type(f["type"], named, None))
              for f in schema["fields"]]
    reader = fastavro.parse_schema(schema)
    writers: dict[int, object] = {}
    texts = [f.name for f, src in zip(fields, schema["fields"]) if f.type == pa.string()
             and not _is_textual(src["type"])]
    renamed = {f["name"]: name_of(f["name"]) for f in schema["fields"]}

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
    plan = _flat_plan(schema)
    flat = None if plan is None or schema_id is None else FlatAvro(schema_id, fields, *plan)
    return ValueColumns(fields, decode, flat)


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


def _json_schema(schema, name_of=None) -> ValueColumns | None:
    props = schema.get("properties") if isinstance(schema, dict) else None
    if not props:
        return None
    fields, texts, renamed = [], [], {}
    for name, prop in props.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if isinstance(kind, list):
            rest = [k for k in kind if k != "null"]
            kind = rest[0] if len(rest) == 1 else None
        renamed[name] = (name_of or _column_name)(name)
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
