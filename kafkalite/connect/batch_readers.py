"""Converters' batch readers: a batch of record values (the consumer's
pyarrow binary column) read into Arrow columns at once, each the table the
per-record path's values would make, or None where it could differ (the
converter then decodes record by record, which also names any error).

- ``schemaless_columns``: JsonConverter with ``schemas.enable=false``:
  objects, one a record, read by pyarrow's JSON reader in C; the columns
  and types are those parquet.schemaless_table infers from the
  ``json.loads`` of each (what the Iceberg and Parquet sinks build from
  schemaless values): every key any record has, in the order keys first
  appear, strings kept strings (Arrow's reader would make ISO dates
  timestamps).
- ``AvroBatchReader``: Confluent's AvroConverter, a batch of one schema id
  whose record has flat fields (numbers, booleans, strings, bytes,
  Timestamp, Date; optional ones as ``["null", type]`` unions): the
  payloads laid end to end as one block of an Avro object container file,
  which fastavro's reader walks in its compiled loop (no BytesIO and no
  call per record), logical types read as their ints, then one
  ``pa.array`` of the dicts (C++) cast to ColumnarValues' types.

Who calls: converters.py's JsonConverter and registry_converters.py's
AvroConverter, in ``to_connect_batch`` (the worker's bulk path).
"""
from __future__ import annotations

import io
import os
import re

# JSON tokens Arrow's reader reads otherwise than Python's json (NaN, Infinity), a
# number Python reads as an int Arrow cannot hold (19 digits and more: Arrow makes a
# double of it where from_pylist refuses it), a surrogate escape not in a pair (Python
# keeps it, and from_pylist refuses it), an integer -0 (Python's int 0, 0.0 in a float
# column; Arrow's -0.0 there): a batch holding any of them, even inside a string, is
# decoded record by record
_UNSURE = re.compile(rb"NaN|Inf|\d{19}|-0(?![\d.eE])"
                     rb"|\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])"
                     rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]")


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
    if raw.count(b"\n") != n or b"\r" in raw or _UNSURE.search(raw):
        return None
    return text


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


# Avro field types the batch reader takes: (Avro type, logicalType) -> the Arrow type
# fastavro's values are read as; the Connect type then gives the column's type
_AVRO_PLAIN = {("long", None): "int64", ("int", None): "int64", ("double", None): "float64",
               ("float", None): "float64", ("boolean", None): "bool_", ("string", None): "string",
               ("bytes", None): "binary", ("long", "timestamp-millis"): "int64",
               ("int", "date"): "int64"}


def _plain_field(avro_type):
    """(the field's Avro type with its logical type dropped, the Arrow type
    it reads as, its Avro type's name, whether in a union with null, its
    logical type) of a flat field, or None."""
    import pyarrow as pa
    branches = avro_type if isinstance(avro_type, list) else [avro_type]
    others = [b for b in branches if b != "null"]
    if len(others) != 1 or len(branches) - len(others) > 1:
        return None
    b = others[0]
    name, logical = (b.get("type"), b.get("logicalType")) if isinstance(b, dict) else (b, None)
    if isinstance(b, dict) and set(b) - {"type", "logicalType", "connect.type",
                                         "connect.name", "connect.version",
                                         "connect.parameters", "connect.doc",
                                         "avro.java.string"}:
        return None
    read = _AVRO_PLAIN.get((name, logical))
    if read is None:
        return None
    plain = [name if x is b else x for x in branches] if isinstance(avro_type, list) else name
    return plain, getattr(pa, read)(), name, isinstance(avro_type, list), logical


class AvroBatchReader:
    """The batch reader of one writer's schema (module docstring); ``of``
    makes one, or gives None for a schema it does not take."""

    def __init__(self, doc: dict, schema, plan: list):
        import fastavro
        self.schema = schema
        self.names = [f.name for f in schema.fields]
        self.plain = dict(doc, fields=[dict(f, type=p[0]) for f, p in zip(doc["fields"], plan)])
        self.read_type = __import__("pyarrow").struct(
            [(n, p[1]) for n, p in zip(self.names, plan)])
        self.kinds = [(p[2], p[3]) for p in plan]      # (Avro type, in a union with null)
        self.sync = os.urandom(16)
        head = io.BytesIO()
        fastavro.writer(head, fastavro.parse_schema(self.plain), [], sync_marker=self.sync)
        self.head = head.getvalue()

    @classmethod
    def of(cls, doc, schema):
        if not isinstance(doc, dict) or doc.get("type") != "record" or \
                schema.type != "struct" or len(doc.get("fields", ())) != len(schema.fields):
            return None
        plan = []
        for f, cf in zip(doc["fields"], schema.fields):
            p = _plain_field(f.get("type"))
            # a logical type read as its int is Connect's Timestamp or Date, and only they
            if p is None or f.get("name") != cf.name or \
                    (p[4] is None) != (cf.schema.name is None):
                return None
            plan.append(p)
        return cls(doc, schema, plan)

    def read(self, payloads):
        """The Table of ``payloads`` (the records' bytes after the wire
        header), ColumnarValues' column types; or None."""
        import fastavro
        import numpy as np
        import pyarrow as pa
        n = len(payloads)
        at = np.frombuffer(payloads.buffers()[1], dtype=np.int32)[
            payloads.offset:payloads.offset + n + 1]
        lo, hi = int(at[0]), int(at[-1])
        block = _long(n) + _long(hi - lo) + payloads.buffers()[2][lo:hi].to_pybytes() + self.sync
        try:
            dicts = list(fastavro.reader(io.BytesIO(self.head + block)))
            if len(dicts) != n:
                return None
            got = pa.array(dicts, type=self.read_type)
            if not np.array_equal(self._lengths(got), np.diff(at)):
                return None
            cols = [_column(got.field(i), f.schema) for i, f in enumerate(self.schema.fields)]
            if any(c is None for c in cols):
                return None
        except (ValueError, EOFError, IndexError, UnicodeDecodeError, pa.ArrowException):
            return None
        return pa.Table.from_arrays(cols, names=self.names)

    def _lengths(self, got):
        """The bytes each record's values take in Avro's encoding: equal to
        each payload's length only if the block was read a record a payload
        (one with bytes left over, which the per-record reader ignores, or a
        varint written long, shifts or stretches the reading)."""
        import numpy as np
        import pyarrow.compute as pc
        total = np.zeros(len(got), dtype=np.int64)
        for i, (kind, union) in enumerate(self.kinds):
            col = got.field(i)
            if union:
                total += 1                   # the branch's index, 0 or 1: one byte
            if kind in ("long", "int"):
                size = _varint_sizes(col.fill_null(0).to_numpy(zero_copy_only=False))
            elif kind in ("string", "bytes"):
                n = pc.binary_length(col).fill_null(0).to_numpy(zero_copy_only=False)
                size = n + _varint_sizes(n.astype(np.int64))
            else:
                size = {"double": 8, "float": 4, "boolean": 1}[kind]
            total += np.where(col.is_valid().to_numpy(zero_copy_only=False), size, 0)
        return total


def _column(col, s):
    """A field's column as ColumnarValues holds it (converters.py), or None
    for a Timestamp or Date the per-record decoder's datetime cannot hold."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from kafkalite.connect import data as cdata
    from kafkalite.connect.converters import _RANGES
    if s.name in (cdata.TIMESTAMP, cdata.DATE):
        lo, hi = _RANGES[s.name]
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


def _varint_sizes(v):
    """The bytes of Avro's zig-zag varint of each int64 of ``v``."""
    import numpy as np
    v = v.astype(np.int64)
    zz = ((v << 1) ^ (v >> 63)).view(np.uint64)
    size = np.ones(len(v), dtype=np.int64)
    for k in range(1, 10):
        size += zz >= np.uint64(1 << (7 * k))
    return size


def _long(v: int) -> bytes:
    """Avro's zig-zag varint of ``v``."""
    v = (v << 1) ^ (v >> 63)
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)
