"""Converters' batch readers: a batch of record values (the consumer's
pyarrow binary column) read into Arrow columns at once, each the table the
per-record path's values would make, or None where it could differ (the
converter then decodes record by record, which also names any error).

- ``schemaless_columns``: JsonConverter with ``schemas.enable=false``:
  objects, one a record, read by ext/json_columns.pyx where every value
  is a scalar (decode_objects), else by pyarrow's JSON reader; the columns
  and types are those parquet.schemaless_table infers from the
  ``json.loads`` of each (what the Iceberg and Parquet sinks build from
  schemaless values): every key any record has, in the order keys first
  appear, strings kept strings (Arrow's reader would make ISO dates
  timestamps).
- ``envelope_columns``: JsonConverter with schemas, a batch of envelopes
  of one flat struct schema: each record read within its own bounds by
  ext/json_columns.pyx into numpy columns (in place of joining the
  payloads into one text for pyarrow's JSON reader and checking that
  text: 0.16 µs of CPU a record of bench_connect_iceberg.py's rows
  against 0.7), or None where it declines, and converters.py reads the
  batch as before.
- ``AvroBatchReader``: Confluent's AvroConverter, a batch of one schema id
  whose record has flat fields (numbers, booleans, strings, bytes,
  Timestamp, Date; optional ones as ``["null", type]`` unions): every
  payload decoded within its own bounds by ext/avro_columns.pyx into
  numpy columns (no dict per record: fastavro's reader made one, over half
  the sink's CPU), logical types read as their ints, made Arrow arrays of
  ColumnarValues' types.

Who calls: converters.py's JsonConverter (envelope_columns from its
_payload_columns) and registry_converters.py's AvroConverter, in
``to_connect_batch`` (the worker's bulk path).
"""
from __future__ import annotations

import re

# A batch holding any of these, even inside a string, is decoded record by record: JSON
# tokens Arrow's reader reads otherwise than Python's json (NaN, Infinity), an integer -0
# (Python's int 0, 0.0 in a float column; Arrow's -0.0 there), a number of 19 digits or
# more (Python's int may be past int64, where Arrow makes a double of it and the sinks'
# table refuses it), a surrogate escape not in a pair (Python keeps it, the table refuses
# it). Each is looked for by bytes' own searches first: one regex over the whole text
# took half the sink's CPU
_NEG_ZERO = re.compile(rb"-0(?![\d.eE])")
_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_DIGITS = bytes.maketrans(b"0123456789", b"0000000000")
_LONG_NUMBER = b"0" * 19


def _unsure(raw: bytes) -> bool:
    if (b"N" in raw or b"I" in raw) and (b"NaN" in raw or b"Inf" in raw):
        return True
    if b"-0" in raw and _NEG_ZERO.search(raw):
        return True
    if _LONG_NUMBER in raw.translate(_DIGITS):
        return True
    if b"\\u" in raw:
        # a high surrogate (d800-dbff) right before a low one (dc00-dfff), or unsure
        low_at = None               # where the low one of a pair has to start
        for m in _SURROGATE.finditer(raw):
            high = m[0][3] in b"89abAB"
            if low_at is None and high:
                low_at = m.end()
            elif low_at is None or high or m.start() != low_at:
                return True
            else:
                low_at = None
        if low_at is not None:
            return True
    return False


def _strings_for_timestamps(t):
    """``t`` with every timestamp (Arrow's reader's guess for a string that
    looks like a date) made a string again, nested types included."""
    import pyarrow as pa
    if pa.types.is_timestamp(t):
        return pa.string()
    if pa.types.is_struct(t):
        return pa.struct([f.with_type(_strings_for_timestamps(f.type)) for f in t])
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_strings_for_timestamps(t.value_type)))
    return t


def _joined(column, n):
    """The values of a binary column joined by line breaks (one buffer), or
    None where a value is not one object on one line."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    if not pc.all(pc.starts_with(column, pattern=b"{")).as_py() or \
            not pc.all(pc.ends_with(column, pattern=b"}")).as_py():
        return None
    lines = pc.binary_join_element_wise(column, pa.scalar(b""), pa.scalar(b"\n"))
    at = np.frombuffer(lines.buffers()[1], dtype=np.int32)[lines.offset:lines.offset + n + 1]
    text = lines.buffers()[2][int(at[0]):int(at[-1])]
    raw = text.to_pybytes()
    if raw.count(b"\n") != n or b"\r" in raw or _unsure(raw):
        return None
    return text


def _text_column(arrow_type, n, at, text, valid):
    """An Arrow string or binary column of ``n`` values from a compiled
    reader's offsets ``at``, bytes ``text`` and ``valid`` flags (0: null),
    without a copy; a string column's UTF-8 checked (ValueError or
    ArrowInvalid), as the per-record decode checks it."""
    import numpy as np
    import pyarrow as pa
    nulls = int(n - np.count_nonzero(valid))
    bits = None if not nulls else pa.py_buffer(
        np.packbits(valid.view(np.bool_), bitorder="little"))
    col = pa.Array.from_buffers(arrow_type, n, [bits, pa.py_buffer(at), pa.py_buffer(text)],
                                null_count=nulls)
    col.validate(full=True)
    return col


def _flat_objects(column, n):
    """The Table of ``column``'s objects when every value is a scalar, read
    by ext/json_columns.pyx's decode_objects (each record within its own
    bounds, no text joined and checked), or None: nested values, and kinds
    Arrow's inference would refuse, are left to pyarrow's reader."""
    import numpy as np
    import pyarrow as pa

    from kafkalite._ext.json_columns import decode_objects
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[
        column.offset:column.offset + n + 1]
    data = column.buffers()[2]
    got = None if data is None else decode_objects(
        np.frombuffer(data, dtype=np.uint8), np.ascontiguousarray(offsets))
    if not got:
        return None
    names, cols = [], []
    for name, kind, values, valid in got:
        names.append(name.decode())     # a key that is not UTF-8: UnicodeDecodeError, None
        nulls = None if valid.all() else valid == 0
        if kind == "null":
            col = pa.nulls(n)
        elif kind == "string":
            col = _text_column(pa.string(), n, *values, valid)
        else:
            col = pa.array(values.view(np.bool_) if kind == "bool" else values,
                           {"bool": pa.bool_(), "int64": pa.int64(),
                            "double": pa.float64()}[kind], mask=nulls)
        cols.append(col)
    return pa.Table.from_arrays(cols, names=names)


def schemaless_columns(column):
    """The objects of ``column`` as the Table parquet.schemaless_table makes
    of their ``json.loads``, or None (module docstring)."""
    import pyarrow as pa
    import pyarrow.json as pj
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    n = len(column)
    if not n or column.null_count or not pa.types.is_binary(column.type):
        return None
    try:
        table = _flat_objects(column, n)
        if table is not None:
            return table
        text = _joined(column, n)
        if text is None:
            return None
        table = pj.read_json(pa.BufferReader(text))
        plain = pa.schema([f.with_type(_strings_for_timestamps(f.type)) for f in table.schema])
        # read again with the types the first reading found where it had to guess a
        # nested type: pyarrow 26's reader misplaces a list's values when the list's
        # first value is null ([null, -1] read as [-1, 0]); told the type, it does not
        if plain != table.schema or any(pa.types.is_nested(t) for t in plain.types):
            table = pj.read_json(pa.BufferReader(text),
                                 parse_options=pj.ParseOptions(explicit_schema=plain))
        if table.num_rows != n:
            return None
        return table
    except (pa.ArrowException, ValueError, UnicodeDecodeError, KeyError):
        return None


# the Arrow types converters._payload_columns reads a field as -> json_columns' kind
_JSON_KINDS = {"int64": 0, "double": 1, "bool": 3, "string": 4}


def envelope_columns(column, prefix: bytes, names: list, types: list):
    """The payloads of ``column`` (binary, no nulls: envelopes beginning
    with ``prefix``) as a Table of one column per name of its Arrow type in
    ``types`` (int64, float64, bool or string), or None (module docstring)."""
    import numpy as np
    import pyarrow as pa

    from kafkalite._ext.json_columns import decode_envelopes
    kinds = [_JSON_KINDS.get(str(t)) for t in types]
    n = len(column)
    if None in kinds or not n or len(names) > 64:
        return None
    offsets = np.frombuffer(column.buffers()[1], dtype=np.int32)[
        column.offset:column.offset + n + 1]
    data = column.buffers()[2]
    if data is None:
        return None
    got = decode_envelopes(np.frombuffer(data, dtype=np.uint8), np.ascontiguousarray(offsets),
                           prefix, [name.encode() for name in names], kinds)
    if got is None:
        return None
    cols = []
    try:
        for (values, valid), kind, t in zip(got, kinds, types):
            if kind == 4:
                col = _text_column(pa.string(), n, *values, valid)
            else:
                col = pa.array(values.view(np.bool_) if kind == 3 else values, t,
                               mask=None if valid.all() else valid == 0)
            cols.append(col)
    except (ValueError, pa.ArrowException):
        return None
    return pa.Table.from_arrays(cols, names=names)


# Avro field types the batch reader takes: (Avro type, logicalType) -> the kind
# avro_columns.decode_flat reads it as (0 a varint, 1 double, 2 float, 3 boolean, 4 bytes)
# and the Arrow type of the values read
_AVRO_KINDS = {("long", None): (0, "int64"), ("int", None): (0, "int64"),
               ("double", None): (1, "float64"), ("float", None): (2, "float64"),
               ("boolean", None): (3, "bool_"), ("string", None): (4, "string"),
               ("bytes", None): (4, "binary"), ("long", "timestamp-millis"): (0, "int64"),
               ("int", "date"): (0, "int64")}
# the properties a flat field's type may carry besides its type and logical type
_AVRO_PROPS = {"type", "logicalType", "connect.type", "connect.name", "connect.version",
               "connect.parameters", "connect.doc", "avro.java.string"}


def _flat_field(avro_type):
    """(the kind decode_flat reads, the Arrow type of the values, the union
    branch that is null or -1, the logical type) of a flat field, or None."""
    branches = avro_type if isinstance(avro_type, list) else [avro_type]
    others = [b for b in branches if b != "null"]
    if len(others) != 1 or len(branches) - len(others) > 1:
        return None
    b = others[0]
    if isinstance(b, dict) and set(b) - _AVRO_PROPS:
        return None
    name, logical = (b.get("type"), b.get("logicalType")) if isinstance(b, dict) else (b, None)
    hit = _AVRO_KINDS.get((name, logical))
    if hit is None:
        return None
    null_at = branches.index("null") if len(branches) == 2 else -1
    return hit[0], hit[1], null_at, logical


class AvroBatchReader:
    """The batch reader of one writer's schema (module docstring); ``of``
    makes one, or gives None for a schema it does not take."""

    def __init__(self, schema, plan: list):
        self.schema = schema
        self.names = [f.name for f in schema.fields]
        self.kinds = [p[0] for p in plan]
        self.types = [p[1] for p in plan]
        self.nulls = [p[2] for p in plan]

    @classmethod
    def of(cls, doc, schema):
        if not isinstance(doc, dict) or doc.get("type") != "record" or \
                schema.type != "struct" or len(doc.get("fields", ())) != len(schema.fields) \
                or len(schema.fields) > 64:
            return None
        plan = []
        for f, cf in zip(doc["fields"], schema.fields):
            p = _flat_field(f.get("type"))
            # a logical type read as its int is Connect's Timestamp or Date, and only they
            if p is None or f.get("name") != cf.name or \
                    (p[3] is None) != (cf.schema.name is None):
                return None
            plan.append(p)
        return cls(schema, plan)

    def read(self, payloads):
        """The Table of ``payloads`` (the records' bytes after the wire
        header), ColumnarValues' column types; or None."""
        import numpy as np
        import pyarrow as pa

        from kafkalite._ext.avro_columns import decode_flat
        n = len(payloads)
        offsets = np.frombuffer(payloads.buffers()[1], dtype=np.int32)[
            payloads.offset:payloads.offset + n + 1]
        data = payloads.buffers()[2]
        got = decode_flat(np.frombuffer(data, dtype=np.uint8) if data is not None
                          else np.zeros(0, np.uint8), np.ascontiguousarray(offsets),
                          self.kinds, self.nulls)
        if got is None:
            return None
        cols = []
        try:
            for (values, valid), t, f in zip(got, self.types, self.schema.fields):
                nulls = None if valid.all() else valid == 0
                if t in ("string", "binary"):
                    col = _text_column(getattr(pa, t)(), n, *values, valid)
                else:
                    col = pa.array(values.view(np.bool_) if t == "bool_" else values,
                                   mask=nulls)
                col = _column(col, f.schema)
                if col is None:
                    return None
                cols.append(col)
        except (ValueError, pa.ArrowException):
            return None
        return pa.Table.from_arrays(cols, names=self.names)


def _column(col, s):
    """A field's column as ColumnarValues holds it (converters.py), or None
    for a Timestamp or Date the per-record decoder's datetime cannot hold."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kafkalite.connect import data as cdata
    if s.name in (cdata.TIMESTAMP, cdata.DATE):
        lo, hi = cdata.VALUE_RANGES[s.name]
        if col.null_count < len(col):
            got = pc.min_max(col)
            if got["min"].as_py() < lo or got["max"].as_py() > hi:
                return None
        if s.name == cdata.DATE:
            return col.cast(pa.int32()).cast(pa.date32())
        return col.cast(pa.timestamp("ms", tz="UTC"))
    if s.name is not None:
        return None
    kinds = {"int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
             "float32": pa.float64(), "float64": pa.float64(), "boolean": pa.bool_(),
             "string": pa.string(), "bytes": pa.binary()}
    return col.cast(kinds[s.type]) if s.type in kinds else None
