"""Converters: a record's key or value between Connect's (schema, value)
and the bytes stored in a topic, as Kafka's converters do.

- ByteArrayConverter: bytes as they are (schema: optional bytes).
- StringConverter: UTF-8 text (``converter.encoding``), schema optional string.
- JsonConverter: JSON; with ``schemas.enable`` (Kafka's default: true) the
  envelope ``{"schema": {...}, "payload": ...}`` carries the schema, without
  it the payload alone (schemaless: dicts, lists, numbers).

A null value is a tombstone both ways (None <-> None). Bytes that do not
parse raise DataException (the worker's error tolerance decides what
follows). Configured with the keys after the ``key.converter.`` /
``value.converter.`` prefix; ``is_key`` says which side.

Without schemas, a batch of objects is read the same way into the columns
parquet.schemaless_table makes of the decoded dicts
(batch_readers.schemaless_columns), handed on as ColumnarValues with no
schema.

The JsonConverter's batch path reads a batch of envelopes of one struct
schema of flat fields (numbers, booleans, strings, Timestamp, Date, Time)
with pyarrow's JSON reader into Arrow columns at once, and hands them on as
ColumnarValues: a sink that writes columns (jdbc.py's COPY) takes the
columns, and the dicts every other sink reads are decoded, by the
per-record decoder, only when one is read (a sink that reads the dicts
alone gets no columns after its first batch). A batch the Arrow reader does
not take exactly as the per-record decoder would (see _payload_columns)
is decoded by that decoder alone.
"""
from __future__ import annotations

import json
import operator
import re
from collections.abc import Sequence

from kafkalite.connect.config import BOOLEAN, STRING, ConfigDef
from kafkalite.connect.data import (DATE, TIME, TIMESTAMP, VALUE_RANGES as _RANGES, Schema,
                                    from_json_value, struct_decoder, struct_encoder,
                                    to_json_value)
from kafkalite.connect.errors import DataException


_DECODER = json.JSONDecoder()
# json.dumps with separators makes an encoder per call, and JSONEncoder.encode a C encoder
# per call: one C encoder, made once (the same output as json.dumps(..., separators=(",",
# ":")): ASCII escapes, float repr, NaN allowed; no circular check, which Connect values
# never need)
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def _not_serializable(o):
    raise TypeError(f"Object of type {type(o).__name__} is not JSON serializable")


_C_ENCODE = None if json.encoder.c_make_encoder is None else json.encoder.c_make_encoder(
    None, _not_serializable, json.encoder.encode_basestring_ascii, None, ":", ",", False,
    False, True)


def struct_writer(schema: Schema):
    """A function writing a struct value of ``schema`` (a dict) as JSON text,
    made once per schema: each field's text straight from its value where it
    is an int, a finite float, a bool, a str, a UTC timestamp or a struct (a
    dict, by a writer of its own), and through
    to_json_value and the encoder otherwise, so its output is the general
    path's (``_dumps(struct_encoder(schema)(v))``) byte for byte."""
    from kafkalite.connect import data as cdata
    esc = json.encoder.encode_basestring_ascii
    env = {"int_repr": int.__repr__, "float_repr": float.__repr__, "esc": esc,
           "datetime": cdata._dt.datetime, "UTC": cdata._dt.timezone.utc,
           "EPOCH": cdata.EPOCH, "MS": cdata._dt.timedelta(milliseconds=1)}
    reads, parts = [], []
    for i, f in enumerate(schema.fields):
        t, name = f.schema.type, f.schema.name
        env[f"s{i}"] = (lambda x, fs=f.schema: _dumps(cdata.to_json_value(fs, x)))
        x = f"x{i}"
        if name is None and t in ("int8", "int16", "int32", "int64"):
            fast = f"int_repr({x}) if type({x}) is int else "
        elif name is None and t in ("float32", "float64"):
            # x - x is 0.0 for a finite float only (NaN and infinities take the encoder)
            fast = f"float_repr({x}) if type({x}) is float and {x} - {x} == 0.0 else "
        elif name is None and t == "boolean":
            fast = f"'true' if {x} is True else 'false' if {x} is False else "
        elif name is None and t == "string":
            fast = f"esc({x}) if type({x}) is str else "
        elif name == cdata.TIMESTAMP:
            fast = (f"int_repr(({x} - EPOCH) // MS) if type({x}) is datetime and "
                    f"{x}.tzinfo is UTC else ")
        elif t == "struct":
            # a nested struct (Debezium's before, after and source) by its own writer:
            # to_json_value of a struct is its fields' values, as the writer writes them
            env[f"w{i}"] = struct_writer(f.schema)
            fast = f"w{i}({x}) if type({x}) is dict else "
        else:
            fast = ""
        reads.append(f"{x} = g({f.name!r})")
        key = ("{" if i == 0 else ",") + esc(f.name) + ":"
        parts.append(f"{key!r} + ('null' if {x} is None else {fast}s{i}({x}))")
    if not parts:
        return lambda v: "{}"
    src = ("def write(v):\n    g = v.get\n" + "".join(f"    {r}\n" for r in reads) +
           "    return " + " + ".join(parts) + " + '}'\n")
    exec(src, env)      # noqa: S102 -- source made above from the schema alone, names repr()'d
    return env["write"]


def _dumps(o) -> str:
    if _C_ENCODE is None or isinstance(o, str):
        return _ENCODER.encode(o)
    return "".join(_C_ENCODE(o, 0))
_SCHEMA_PREFIX = re.compile(r'\s*\{\s*"schema"\s*:\s*')
_PAYLOAD_PREFIX = re.compile(r'\s*,\s*"payload"\s*:\s*')
_CLOSE = re.compile(r'\s*\}\s*\Z')


class Converter:
    CONFIG = ConfigDef()        # its keys, after the key.converter. / value.converter. prefix

    def configure(self, configs: dict, is_key: bool) -> None:
        self.is_key = is_key

    def from_connect_data(self, topic: str, schema: Schema | None, value) -> bytes | None:
        raise NotImplementedError

    def to_connect_data(self, topic: str, data: bytes | None) -> tuple[Schema | None, object]:
        raise NotImplementedError

    # The bulk path (api.py): a batch at a time. A converter that refuses one value raises
    # DataException for the batch, and the worker converts that batch record by record (so
    # the error tolerance sees the record). These defaults are the per-record loop.

    def from_connect_batch(self, topic: str, schema: Schema | None, values: list) -> list:
        """The bytes of every value of one schema."""
        return [self.from_connect_data(topic, schema, v) for v in values]

    def to_connect_batch(self, topic: str, column) -> tuple:
        """(schema, or a list of one per record; values) of a pyarrow binary
        column of keys or values."""
        pairs = [self.to_connect_data(topic, d) for d in column.to_pylist()]
        return [p[0] for p in pairs], [p[1] for p in pairs]


class ByteArrayConverter(Converter):
    def from_connect_data(self, topic, schema, value):
        if value is None:
            return None
        if schema is not None and schema.type != "bytes":
            raise DataException(f"ByteArrayConverter is not compatible with objects of type "
                                f"{schema.type}")
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise DataException(f"ByteArrayConverter is not compatible with objects of type "
                                f"{type(value).__name__}")
        return bytes(value)

    def to_connect_data(self, topic, data):
        return Schema.OPTIONAL_BYTES, (None if data is None else bytes(data))

    def from_connect_batch(self, topic, schema, values):
        if schema is not None and schema.type != "bytes" or \
                not all(v is None or type(v) is bytes for v in values):
            return super().from_connect_batch(topic, schema, values)
        return values

    def to_connect_batch(self, topic, column):
        return Schema.OPTIONAL_BYTES, column.to_pylist()


class StringConverter(Converter):
    CONFIG = ConfigDef().define("converter.encoding", STRING, "UTF-8",
                                doc="the character encoding of the text")
    def configure(self, configs, is_key):
        super().configure(configs, is_key)
        self.encoding = configs.get("converter.encoding", "UTF-8")

    def from_connect_data(self, topic, schema, value):
        if value is None:
            return None
        if isinstance(value, (bytes, bytearray)):
            value = bytes(value).decode(self.encoding)
        return str(value).encode(self.encoding)

    def to_connect_data(self, topic, data):
        if data is None:
            return Schema.OPTIONAL_STRING, None
        try:
            return Schema.OPTIONAL_STRING, bytes(data).decode(self.encoding)
        except UnicodeDecodeError as e:
            raise DataException(f"StringConverter: not {self.encoding} text: {e}") from None

    def from_connect_batch(self, topic, schema, values):
        enc = self.encoding
        try:
            # str values (a file source's lines): encoded in one comprehension
            return [v.encode(enc) for v in values]
        except (AttributeError, UnicodeEncodeError):
            return super().from_connect_batch(topic, schema, values)

    def to_connect_batch(self, topic, column):
        if self.encoding.replace("-", "").upper() != "UTF8":
            return super().to_connect_batch(topic, column)
        import pyarrow as pa
        try:
            # Arrow checks the UTF-8 of the whole column in one pass
            return Schema.OPTIONAL_STRING, column.cast(pa.string()).to_pylist()
        except pa.ArrowInvalid as e:
            raise DataException(f"StringConverter: not {self.encoding} text: {e}") from None


class JsonConverter(Converter):
    CONFIG = ConfigDef().define("schemas.enable", BOOLEAN, True,
                                doc="the schema and payload in one envelope, or the payload "
                                    "alone")
    def configure(self, configs, is_key):
        super().configure(configs, is_key)
        self.schemas_enable = str(configs.get("schemas.enable", "true")).lower() == "true"
        self._schemas: dict = {}       # id(Schema) -> (schema, its JSON, struct encoder)
        self._parsed: dict = {}        # schema JSON text -> (Schema, its value decoder) (reading)
        self._writers: dict = {}       # schema JSON text -> its struct_writer (batches)
        self._columns_read = True      # whether batches are read as Arrow columns too

    def from_connect_data(self, topic, schema, value):
        if value is None and schema is None:
            return None
        try:
            if schema is not None and schema.type == "struct" and isinstance(value, dict):
                payload = self._compiled(schema)[2](value)
            else:
                payload = to_json_value(schema, value)
        except DataException:
            raise
        except (TypeError, ValueError, AttributeError, OverflowError) as e:
            # a value its schema cannot hold (text in a Timestamp field): Kafka's
            # DataException, which the batch path and the error tolerance act on
            raise DataException(f"JsonConverter: a value does not fit its schema"
                                f"{_misfit(schema, value)}: {type(e).__name__}: {e}") from None
        try:
            body = _dumps(payload)
        except (TypeError, ValueError) as e:
            raise DataException(f"JsonConverter: cannot serialize: {e}") from None
        if not self.schemas_enable:
            return body.encode()
        return f'{{"schema":{self._schema_json(schema)},"payload":{body}}}'.encode()

    def from_connect_batch(self, topic, schema, values):
        if schema is None or schema.type != "struct":
            return super().from_connect_batch(topic, schema, values)
        _, schema_json, _ = self._compiled(schema)
        if isinstance(values, JsonStructValues) and values.schema is schema:
            head = f'{{"schema":{schema_json},"payload":'.encode() if self.schemas_enable else b""
            try:
                return values.json_payloads(head, b"}" if head else b"")
            except (TypeError, ValueError):
                # a value its writer does not take: record by record, from the dicts
                return super().from_connect_batch(topic, schema, values)
        if isinstance(values, StructColumns) and values.names == [f.name for f in schema.fields]:
            head = f'{{"schema":{schema_json},"payload":' if self.schemas_enable else ""
            try:
                return _write_columns(schema, values.columns, head, "}" if head else "")
            except (AttributeError, TypeError, ValueError):
                # a value the general path refuses: record by record, which names it
                return super().from_connect_batch(topic, schema, values)
        write = self._writers.get(schema_json)
        if write is None:
            if len(self._writers) > 1000:
                self._writers.clear()
            write = self._writers[schema_json] = struct_writer(schema)
        try:
            if not self.schemas_enable:
                return [write(v).encode() for v in values]
            head = f'{{"schema":{schema_json},"payload":'
            return [f"{head}{write(v)}}}".encode() for v in values]
        except (AttributeError, TypeError, ValueError):
            # a null (tombstone) or a value that is no dict: record by record, which
            # writes the first and names what is wrong with the second
            return super().from_connect_batch(topic, schema, values)

    def to_connect_batch(self, topic, column):
        n = len(column)
        if column.null_count == n:
            # every key (or value) null: what to_connect_data makes of each, without a call
            return None, [None] * n
        if not self.schemas_enable:
            from kafkalite.connect.batch_readers import schemaless_columns
            table = schemaless_columns(column) if self._columns_read else None
            if table is not None:
                return None, ColumnarValues(
                    table, lambda: super(JsonConverter, self).to_connect_batch(topic, column)[1],
                    self._columns_unused)
            return super().to_connect_batch(topic, column)
        if column[0].as_py() is None:
            return super().to_connect_batch(topic, column)
        head = self._envelope_head(column[0].as_py())
        if head is None:
            return super().to_connect_batch(topic, column)
        schema = head[1]
        # columns while the sink reads them: one that read a batch's dicts alone (a sink
        # without put_batch, an upsert) gets dicts alone from then on
        table = _payload_columns(column, head[0], schema) if self._columns_read else None
        if table is not None:
            return schema, ColumnarValues(
                table, lambda: self._decode_envelopes(topic, column.to_pylist(), head)[1],
                self._columns_unused)
        return self._decode_envelopes(topic, column.to_pylist(), head)

    def _columns_unused(self) -> None:
        self._columns_read = False

    def _decode_envelopes(self, topic, datas, head):
        """(schema, or one per record; values) of ``datas``: the payload
        alone decoded where a record has the first one's schema text,
        ``to_connect_data`` for any other."""
        prefix, schema, decode = head
        k = len(prefix)
        scan = _DECODER.scan_once       # the C scanner: one JSON value from an index
        schemas, values, mixed = [], [], False
        for d in datas:
            # a record with the first one's schema text: only its payload is parsed, and
            # it must be exactly one JSON value (the record is that envelope, or the
            # general path decides)
            if d is not None and d.startswith(prefix) and d.endswith(b"}"):
                try:
                    text = d[k:-1].decode()
                    payload, end = scan(text, 0)
                    if end == len(text):
                        values.append(decode(payload))
                        schemas.append(schema)
                        continue
                except (ValueError, StopIteration):
                    pass
            s, v = self.to_connect_data(topic, d)
            mixed = mixed or s is not schema
            schemas.append(s)
            values.append(v)
        return (schemas if mixed else schema), values

    def _envelope_head(self, data):
        """(the bytes of ``data`` up to its payload, its schema, the
        schema's value decoder), for an envelope laid out as Kafka's
        JsonConverter writes it; None otherwise."""
        try:
            text = bytes(data).decode()
        except UnicodeDecodeError:
            return None
        m = _SCHEMA_PREFIX.match(text)
        if m is None:
            return None
        try:
            schema_doc, end = _DECODER.raw_decode(text, m.end())
        except ValueError:
            return None
        m2 = _PAYLOAD_PREFIX.match(text, end)
        if m2 is None or schema_doc is None:
            return None
        hit = self._parsed_schema(text[m.end():end], schema_doc)
        return text[:m2.end()].encode(), hit[0], hit[1]

    def _parsed_schema(self, raw: str, schema_doc):
        hit = self._parsed.get(raw)
        if hit is None:
            try:
                schema = Schema.from_json(schema_doc)
            except (ValueError, KeyError, TypeError) as e:
                raise DataException(f"JsonConverter: bad schema: {e}") from None
            if len(self._parsed) > 1000:
                self._parsed.clear()
            hit = self._parsed[raw] = (schema, struct_decoder(schema) if schema.type == "struct"
                                       else lambda v, s=schema: from_json_value(s, v))
        return hit

    def _envelope_fast(self, data):
        """(schema, value) of an envelope laid out as Kafka's JsonConverter
        writes it (``{"schema":...,"payload":...}``, in that order), the
        schema parsed once per distinct schema text; None for any other
        layout (the general path then decides)."""
        try:
            text = bytes(data).decode()
        except UnicodeDecodeError:
            return None
        m = _SCHEMA_PREFIX.match(text)
        if m is None:
            return None
        try:
            schema_doc, end = _DECODER.raw_decode(text, m.end())
            m2 = _PAYLOAD_PREFIX.match(text, end)
            if m2 is None:
                return None
            payload, done = _DECODER.raw_decode(text, m2.end())
        except ValueError:
            return None
        if _CLOSE.match(text, done) is None:
            return None
        if schema_doc is None:
            return None, payload
        hit = self._parsed_schema(text[m.end():end], schema_doc)
        return hit[0], hit[1](payload)

    def _schema_json(self, schema) -> str:
        return "null" if schema is None else self._compiled(schema)[1]

    def _compiled(self, schema):
        """(schema, its JSON, its struct encoder): a source's records share one
        Schema object, so these are made once, not per record."""
        hit = self._schemas.get(id(schema))
        if hit is None or hit[0] is not schema:
            if len(self._schemas) > 1000:
                self._schemas.clear()
            hit = self._schemas[id(schema)] = (
                schema, json.dumps(schema.to_json(), separators=(",", ":")),
                struct_encoder(schema) if schema.type == "struct" else None)
        return hit

    def to_connect_data(self, topic, data):
        if data is None:
            return None, None
        if self.schemas_enable:
            fast = self._envelope_fast(data)
            if fast is not None:
                return fast
        try:
            doc = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise DataException(f"Converting byte[] to Kafka Connect data failed due to "
                                f"serialization error: {e}") from None
        if not self.schemas_enable:
            return None, doc
        if not (isinstance(doc, dict) and set(doc) == {"schema", "payload"}):
            raise DataException(
                'JsonConverter with schemas.enable requires "schema" and "payload" fields and '
                'may not contain additional fields. If you are trying to deserialize plain JSON '
                'data, set schemas.enable=false in your converter configuration.')
        if doc["schema"] is None:
            return None, doc["payload"]
        try:
            schema = Schema.from_json(doc["schema"])
        except (ValueError, KeyError, TypeError) as e:
            raise DataException(f"JsonConverter: bad schema: {e}") from None
        return schema, from_json_value(schema, doc["payload"])


def _misfit(schema, value) -> str:
    """Where in ``value`` its ``schema`` is not met, for an error message:
    the first struct field whose value does not convert, else the schema."""
    if schema is not None and schema.type == "struct" and isinstance(value, dict):
        for f in schema.fields:
            try:
                to_json_value(f.schema, value.get(f.name))
            except Exception:  # noqa: BLE001 -- any failure names the field
                return f" (field {f.name!r}, {f.schema.name or f.schema.type})"
    return f" ({schema.name or schema.type})" if schema is not None else ""


class StructColumns(Sequence):
    """The struct values of a batch held as columns (``columns[i]``: the
    values of ``names[i]``, one per record, Connect's values already), as a
    source that reads rows a column at a time hands them (jdbc.py): the
    JsonConverter writes a batch of them from the columns (_write_columns),
    and a dict per record is made only when one is read (a transform, the
    per-record path). ``names`` are unique: the dicts hold every column."""

    def __init__(self, names: list, columns: list):
        self.names = names
        self.columns = columns
        self._values = None

    def _list(self) -> list:
        if self._values is None:
            names = self.names
            self._values = [dict(zip(names, row)) for row in zip(*self.columns)]
        return self._values

    def __len__(self):
        return len(self.columns[0]) if self.columns else 0

    def __getitem__(self, i):
        return self._list()[i]

    def __iter__(self):
        return iter(self._list())


class JsonStructValues(Sequence):
    """The struct values of a batch, all of ``schema``, held by a source in
    a form it writes as JSON faster than their dicts can be
    (connectors/cdc_envelopes.py: pgoutput's column texts): the
    JsonConverter takes ``json_payloads(head, tail)`` -- ``head + payload +
    tail`` of each value as bytes, byte for byte what it writes of the
    value's dict -- and a dict is made only when one is read (a transform,
    another converter, the per-record path). ``without(indexes)``: the same
    values but those (the worker leaves a batch's tombstones out so)."""
    schema: Schema

    def json_payloads(self, head: bytes, tail: bytes) -> list:
        raise NotImplementedError

    def without(self, indexes: set) -> "JsonStructValues":
        raise NotImplementedError


_BOOL_TEXT = {True: "true", False: "false"}
_NON_FINITE = frozenset(("nan", "inf", "-inf"))
_TZINFO = operator.attrgetter("tzinfo")


def _fast_texts(schema: Schema, values: list, types: set):
    """The JSON texts of a column's non-null ``values`` (of ``types``) through
    C-level maps where struct_writer has a fast path for them, else None."""
    from kafkalite.connect import data as cdata
    t, name = schema.type, schema.name
    if name is None and t in ("int8", "int16", "int32", "int64") and types == {int}:
        return list(map(int.__repr__, values))
    if name is None and t in ("float32", "float64") and types == {float}:
        texts = list(map(float.__repr__, values))
        return None if _NON_FINITE.intersection(texts) else texts
    if name is None and t == "boolean" and types == {bool}:
        return list(map(_BOOL_TEXT.__getitem__, values))
    if name is None and t == "string" and types == {str}:
        return list(map(json.encoder.encode_basestring_ascii, values))
    if name == TIMESTAMP and types == {cdata._dt.datetime} and \
            set(map(_TZINFO, values)) == {cdata._dt.timezone.utc}:
        try:
            import numpy as np
            import pyarrow as pa
        except ImportError:
            ms = cdata._dt.timedelta(milliseconds=1)
            return list(map(int.__repr__,
                            map(ms.__rfloordiv__, map(cdata.EPOCH.__rsub__, values))))
        # microseconds since the epoch in one Arrow conversion (half the time of a
        # timedelta per value), floored to ms as (x - EPOCH) // 1 ms floors
        us = pa.array(values, type=pa.timestamp("us", tz="UTC")).cast(pa.int64()).to_numpy()
        return list(map(int.__repr__, np.floor_divide(us, 1000).tolist()))
    return None


def _write_columns(schema: Schema, columns: list, head: str, tail: str) -> list:
    """The encoded JSON of each record of a struct batch given as columns,
    byte for byte what ``head + struct_writer(schema)(record) + tail``
    writes: each column's texts at once (a C-level map where the column is
    all of one fast type, the general path per value otherwise), then a
    record's texts put in one format string."""
    from kafkalite.connect import data as cdata
    esc = json.encoder.encode_basestring_ascii
    if not schema.fields:
        return [f"{head}{{}}{tail}".encode()] * (len(columns[0]) if columns else 0)
    texts, parts = [], []
    for i, (f, col) in enumerate(zip(schema.fields, columns)):
        parts.append(("{" if i == 0 else ",") + esc(f.name) + ":")
        types = set(map(type, col))
        nulls = type(None) in types
        types.discard(type(None))
        values = [v for v in col if v is not None] if nulls else col
        fast = _fast_texts(f.schema, values, types) if types else []
        if fast is None:
            fs = f.schema
            fast = [_dumps(cdata.to_json_value(fs, v)) for v in values]
        if nulls:
            it = iter(fast)
            fast = ["null" if v is None else next(it) for v in col]
        texts.append(fast)
    # the constant text's own "%" (in a field name, in the schema's JSON) doubled
    fmt = (head.replace("%", "%%") + "".join(p.replace("%", "%%") + "%s" for p in parts) +
           "}" + tail.replace("%", "%%"))
    return list(map(str.encode, map(fmt.__mod__, zip(*texts))))


class ColumnarValues(Sequence):
    """The struct values of a batch (dicts, as the per-record decoder makes
    them) with the same values as Arrow columns: ``table``, a pyarrow Table
    of one column per field, in the schema's order, each of its field's
    Arrow type (int8..int64, float64 for float32 too: the per-record value
    is a Python float; bool, string, Timestamp as timestamp[ms, UTC], Date
    as date32, Time as time32[ms]). The dicts are decoded on the first read
    of one, from the records' bytes: a sink that takes ``table`` never
    pays for them. ``unused`` is called if the dicts are read and the table
    never was (the converter then stops making tables for that sink)."""

    def __init__(self, table, decode, unused=None):
        self._table = table
        self._decode = decode
        self._unused = unused
        self._table_read = False
        self._values = None

    @property
    def table(self):
        self._table_read = True
        return self._table

    def _list(self) -> list:
        if self._values is None:
            self._values = self._decode()
            if not self._table_read and self._unused is not None:
                self._unused()
        return self._values

    def __len__(self):
        return self._table.num_rows

    def __getitem__(self, i):
        return self._list()[i]

    def __iter__(self):
        return iter(self._list())


# A field's Arrow type when the JSON reader parses it (ints, and the logical types' ints,
# parsed as int64 and range-checked before the cast: Arrow's own narrowing is not the
# per-record decoder's error) and once checked; fields of any other type or with a
# default keep a batch on the per-record decoder.
def _arrow_types():
    import pyarrow as pa
    ints = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64()}
    plain = {**ints, "float32": pa.float64(), "float64": pa.float64(), "boolean": pa.bool_(),
             "string": pa.string()}
    logical = {TIMESTAMP: ("int64", pa.timestamp("ms", tz="UTC")),
               DATE: ("int32", pa.date32()), TIME: ("int32", pa.time32("ms"))}
    return plain, logical


# JSON tokens Arrow's reader takes and Python's refuses (Inf, -NaN), or takes with
# another meaning: a batch holding any of them, even inside a string, is decoded per record
_NON_FINITE_TOKENS = (b"Inf", b"NaN")


def _payload_columns(column, prefix: bytes, schema: Schema):
    """The payloads of ``column`` (envelopes that all begin with ``prefix``,
    the bytes up to the first one's payload) as a pyarrow Table, one column
    per field of ``schema`` (ColumnarValues' types), or None where the
    per-record decoder could decide otherwise than this reading: a field
    type it does not take, a null record or one of another layout, text
    that is not UTF-8, a payload that is not one object on one line, JSON
    Arrow reads and Python does not, a null in a required field, a number
    out of its field's range, a float -0.0 (``-0`` is 0.0 per record).
    Read by the compiled reader (batch_readers.envelope_columns), or, where
    it declines, by pyarrow's JSON reader (_arrow_read)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    plain, logical = _arrow_types()
    if schema.type != "struct" or not schema.fields:
        return None
    names = [f.name for f in schema.fields]
    if len(set(names)) != len(names):
        return None
    read, want = [], []
    for f in schema.fields:
        fs = f.schema
        if fs.default is not None:
            return None
        if fs.name is None and fs.type in plain:
            t = plain[fs.type]
            read.append(pa.int64() if fs.type in _RANGES or fs.type == "int64" else t)
        elif fs.name in logical and logical[fs.name][0] == fs.type:
            read.append(pa.int64())
            t = logical[fs.name][1]
        else:
            return None
        want.append(t)
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    try:
        if column.null_count or not pa.types.is_binary(column.type):
            return None
        from kafkalite.connect.batch_readers import envelope_columns
        table = envelope_columns(column, prefix, names, read)
        if table is None:
            table = _arrow_read(column, prefix, names, read)
        if table is None or table.num_rows != n:
            return None
        cols = []
        for f, col, t in zip(schema.fields, table.columns, want):
            fs = f.schema
            if col.null_count and not fs.optional:
                return None
            bounds = _RANGES.get(fs.name or fs.type)
            if bounds is not None and col.null_count < n:
                lo, hi = pc.min_max(col).values()
                if lo.as_py() < bounds[0] or hi.as_py() > bounds[1]:
                    return None
            if t == pa.float64():
                x = col.to_numpy()
                if np.any(np.signbit(x) & (x == 0.0)):
                    return None
            if fs.name in (DATE, TIME):
                col = col.cast(pa.int32())      # Arrow casts to date32 / time32 from int32
            cols.append(col.cast(t))
        return pa.Table.from_arrays(cols, names=names)
    except (pa.ArrowException, ValueError):
        # what Arrow refuses, the per-record decoder reads or names the error of
        return None


def _arrow_read(column, prefix: bytes, names: list, read: list):
    """The payloads of ``column`` read by pyarrow's JSON reader (joined one
    a line) into columns of the ``read`` types, or None (_payload_columns)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.json as pj
    n = len(column)
    if not pc.all(pc.starts_with(column, pattern=prefix)).as_py() or \
            not pc.all(pc.ends_with(column, pattern=b"}")).as_py():
        return None
    payloads = pc.binary_slice(column, len(prefix), -1)
    # UTF-8, as the per-record decode() checks it: the prefix is the first record's
    # decoded text and the last byte "}", so the payloads alone are left to check
    payloads.cast(pa.string())
    # one object per line: a payload that begins with "{" is one row or more (Arrow's
    # reader crashes on a first line of null), and n rows from n of them is one each
    if not pc.all(pc.starts_with(payloads, pattern=b"{")).as_py():
        return None
    lines = pc.binary_join_element_wise(payloads, pa.scalar(b""), pa.scalar(b"\n"))
    at = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset:lines.offset + n + 1]
    text = lines.buffers()[2][int(at[0]):int(at[-1])]
    # no line break within a payload (the n after each are the join's) and no
    # token of _NON_FINITE_TOKENS: bytes' own searches over the joined text (a regex
    # per payload took about 2 ms of the 16 ms this reading took for 10,000 payloads)
    raw = text.to_pybytes()
    if raw.count(b"\n") != n or b"\r" in raw or \
            any(t in raw for t in _NON_FINITE_TOKENS):
        return None
    return pj.read_json(pa.BufferReader(text), parse_options=pj.ParseOptions(
        explicit_schema=pa.schema(list(zip(names, read))),
        unexpected_field_behavior="ignore"))


CONVERTERS = {
    "org.apache.kafka.connect.converters.ByteArrayConverter": ByteArrayConverter,
    "org.apache.kafka.connect.storage.StringConverter": StringConverter,
    "org.apache.kafka.connect.json.JsonConverter": JsonConverter,
    # Confluent's, through the schema registry (registry_converters.py, loaded
    # when a connector names one: "module:Class")
    "io.confluent.connect.avro.AvroConverter":
        "kafkalite.connect.registry_converters:AvroConverter",
    "io.confluent.connect.protobuf.ProtobufConverter":
        "kafkalite.connect.registry_converters:ProtobufConverter",
    "io.confluent.connect.json.JsonSchemaConverter":
        "kafkalite.connect.registry_converters:JsonSchemaConverter",
}


def converter_from_config(config: dict, prefix: str, is_key: bool, default: str) -> Converter:
    """The converter named by ``config[prefix]`` (Kafka's class name, its
    short name, or ``module:Class``), configured with the ``prefix.`` keys."""
    from kafkalite.connect.plugins import load_class
    name = config.get(prefix, default)
    cls = load_class(name, CONVERTERS, Converter)
    conv = cls()
    sub = {k[len(prefix) + 1:]: v for k, v in config.items() if k.startswith(prefix + ".")}
    conv.configure(sub, is_key)
    return conv
