"""The converters' batch readers (kafkalite/connect/batch_readers.py) against
the per-record path they stand in for: over random batches, either the
batch is read as Arrow columns and they are what the per-record path's
values make (the Iceberg and Parquet sinks' arrow_table), value for value
and type for type, or the batch falls back to that path."""
import datetime as dt
import decimal
import json
import random

import pyarrow as pa
import pytest

from kafkalite.connect.connectors.parquet import arrow_type, schemaless_table
from kafkalite.connect.converters import ColumnarValues, JsonConverter
from kafkalite.connect.data import Schema, SchemaBuilder
from kafkalite.connect.errors import DataException


def conv(cls, **cfg):
    c = cls()
    c.configure(cfg, False)
    return c


def exact(v):
    """Values compared with floats by their repr (0.0 is not -0.0), nested too."""
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, dict):
        return {k: exact(x) for k, x in v.items()}
    if isinstance(v, list):
        return [exact(x) for x in v]
    return v


# ---- schemaless JSON ---------------------------------------------------------------------

TEXTS = ["", "ünïcode ✓ 😀", 'q"q', "tab\t", "2024-01-02", "2024-01-02 03:04:05", "NULL",
         "\u2028", "\x7f", "a\\b", "1e5"]
# text spliced in where a value goes: what Python's json and Arrow's reader read otherwise
ODD = ["-0", "-0.0", "1e2", "NaN", "Infinity", "-Infinity", "9223372036854775807",
       "9223372036854775808", "-9223372036854775809", '"\\ud800"', '"\\ud83d\\ude00"',
       "1e400", "[]", "{}", "[[]]", "[null]", "[1, 2.5]", '{"a": {}}', '"\\u0000"', "01"]


def _value(rng, depth=0):
    roll = rng.random()
    if roll < 0.12:
        return None
    if roll < 0.3:
        return rng.choice([0, 1, -1, 2 ** 40, -(2 ** 62), rng.randint(-1000, 1000)])
    if roll < 0.45:
        return rng.choice([0.5, -0.0, 1e300, 1 / 3, float(rng.randint(-5, 5))])
    if roll < 0.55:
        return rng.random() < 0.5
    if roll < 0.72:
        return rng.choice(TEXTS)
    if roll < 0.86 and depth < 2:
        # a struct, or a map (keys that vary by record)
        keys = rng.sample(["x", "y", "ü", "k1", "k2"], rng.randint(0, 3))
        return {k: _value(rng, depth + 1) for k in keys}
    if depth < 2:
        return [_value(rng, depth + 1) for _ in range(rng.randint(0, 3))]
    return rng.randint(0, 9)


def _schemaless_batch(rng) -> list:
    """Records of mostly one shape (a column's type stays put), some odd."""
    n = rng.choice([1, 2, 5, 20])
    shape = {k: _value(rng) for k in rng.sample(["id", "name", "n", "m", "tags", "é"],
                                                 rng.randint(1, 5))}
    out = []
    for _ in range(n):
        rec = {k: (v if rng.random() < 0.7 else None) for k, v in shape.items()}
        if rng.random() < 0.15:
            rec.pop(rng.choice(list(rec)))             # a key missing
        if rng.random() < 0.1:
            rec["extra"] = _value(rng)                 # a key the first record lacks
        text = json.dumps(rec, ensure_ascii=rng.random() < 0.5)
        roll = rng.random()
        if roll < 0.08 and rec:
            k = rng.choice(list(rec))
            text = json.dumps({**rec, k: "@"}).replace('"@"', rng.choice(ODD), 1)
        elif roll < 0.11:
            text = rng.choice(["null", "[1]", '"x"', "7", text + text, " " + text,
                               text.replace(", ", ",\n"), '{"a": 1, "a": 2}', "{"])
        out.append(text.encode())
    return out


def _from_pylist(datas):
    """The per-record path: each record's value (the converter alone), and
    the table the sinks build of them (or the error either raises)."""
    c = conv(JsonConverter, **{"schemas.enable": "false"})
    try:
        values = [c.to_connect_data("t", d)[1] for d in datas]
    except DataException:
        return DataException, None
    if not all(isinstance(v, dict) for v in values):
        return values, DataException      # arrow_table: "writes struct or map values"
    try:
        return values, schemaless_table(values)
    except (pa.ArrowException, OverflowError, ValueError, TypeError) as e:
        return values, type(e)


def test_a_schemaless_json_batch_read_as_columns_is_the_table_the_sinks_make_of_its_dicts():
    rng = random.Random(75)
    columnar = 0
    batches = [[b'{"a": 1}', b'{"a": 2.5, "b": "x"}'], [b'{"d": "2024-01-02"}'],
               [b'{"a": {"x": 1}}', b'{"a": {"y": "s"}}'], [b'{}', b'{}'],
               [b'{"a": 18446744073709551616}'], [b'{"s": "\\ud800"}'], [b'{"a": NaN}']]
    batches += [_schemaless_batch(rng) for _ in range(600)]
    for b, datas in enumerate(batches):
        values, table = _from_pylist(datas)
        c = conv(JsonConverter, **{"schemas.enable": "false"})
        try:
            schema, got = c.to_connect_batch("t", pa.array(datas, pa.binary()))
        except DataException:
            assert values is DataException, (b, datas)
            continue
        assert schema is None or schema == [None] * len(datas)
        if isinstance(got, ColumnarValues):
            columnar += 1
            assert isinstance(table, pa.Table), (b, datas, table)
            assert got.table.schema == table.schema, (b, datas, got.table.schema, table.schema)
            assert exact(got.table.to_pylist()) == exact(table.to_pylist()), (b, datas)
        assert exact(list(got)) == exact(values), (b, datas)
    assert columnar >= 250, columnar



def test_schemaless_objects_of_scalars_pretty_or_sparse_are_read_as_columns_by_the_compiled_reader():
    """Objects of scalar values laid out by any writer -- indented over
    lines, keys first seen in a later record, keys left out, integers and
    fractions in one key, escapes -- are read as columns by the compiled
    reader (ext/json_columns.pyx, decode_objects) and are the table the
    sinks make of the per-record dicts. Before it, a line break inside a
    record sent the batch record by record. Kinds Arrow's inference refuses
    or reads otherwise (text beside numbers, true beside 1, 2**53 + 1
    beside a fraction, a nested value) are left to the readers before it,
    and read as they did."""
    rng = random.Random(7)
    recs = []
    for i in range(300):
        rec = {"id": i, "name": rng.choice(TEXTS), "amount": rng.choice([i, i / 4, None]),
               "ok": i % 3 == 0}
        if i % 5 == 0:
            del rec["name"]
        if i > 100 and i % 7 == 0:
            rec["late"] = "ü\u00e9"
        recs.append(json.dumps(rec, indent=2 if i % 2 else None, ensure_ascii=i % 3 == 0))
    datas = [r.encode() for r in recs]
    values, table = _from_pylist(datas)
    c = conv(JsonConverter, **{"schemas.enable": "false"})
    _, got = c.to_connect_batch("t", pa.array(datas, pa.binary()))
    assert isinstance(got, ColumnarValues), "the batch went record by record"
    assert got.table.schema == table.schema
    assert exact(got.table.to_pylist()) == exact(table.to_pylist())
    from kafkalite.connect.batch_readers import _flat_objects
    assert _flat_objects(pa.array(datas, pa.binary()), len(datas)) is not None
    # 2**53 + 1 beside a fraction: declined here; pyarrow's reader, after it, makes
    # a double of it where the per-record table refuses it (not this reader's to mend)
    big = [b'{"a": 9007199254740993}', b'{"a": 0.5}']
    assert _flat_objects(pa.array(big, pa.binary()), 2) is None
    for odd in (['{"a": "x"}', '{"a": 1}'], ['{"a": true}', '{"a": 1}'],
                ['{"a": {"b": 1}}'],
                ['{"a": 1, "a": 2}'], ['{"a": 1} x']):
        datas = [o.encode() for o in odd]
        assert _flat_objects(pa.array(datas, pa.binary()), len(datas)) is None, odd
        values, table = _from_pylist(datas)
        try:
            _, got = c.to_connect_batch("t", pa.array(datas, pa.binary()))
        except DataException:
            assert values is DataException, odd
            continue
        assert exact(list(got)) == exact(values), odd
        if isinstance(got, ColumnarValues):
            assert isinstance(table, pa.Table), odd
            assert exact(got.table.to_pylist()) == exact(table.to_pylist()), odd

# ---- Avro through the registry -----------------------------------------------------------

FLAT_TYPES = [Schema.INT8, Schema.INT16, Schema.INT32, Schema.INT64, Schema.FLOAT32,
              Schema.FLOAT64, Schema.BOOLEAN, Schema.STRING, Schema.BYTES, Schema.TIMESTAMP,
              Schema.DATE]
UTC = dt.timezone.utc


def _optional(s):
    return Schema(s.type, True, s.name, s.version, parameters=s.parameters)


def _flat_value(rng, s):
    if s.optional and rng.random() < 0.2:
        return None
    if s.name == Schema.TIMESTAMP.name:
        return rng.choice([dt.datetime(1, 1, 1, tzinfo=UTC), dt.datetime(9999, 12, 31, 23, 59,
                                                                         59, 999000, tzinfo=UTC),
                           dt.datetime(2024, 2, 29, 12, 0, 0, 123000, tzinfo=UTC),
                           dt.datetime(1969, 12, 31, 23, 59, 59, 999000, tzinfo=UTC)])
    if s.name == Schema.DATE.name:
        return rng.choice([dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(1970, 1, 1),
                           dt.date(2024, 2, 29)])
    bits = {"int8": 7, "int16": 15, "int32": 31, "int64": 63}.get(s.type)
    if bits:
        return rng.choice([0, -1, (1 << bits) - 1, -(1 << bits), rng.randint(-100, 100)])
    if s.type == "float32":
        return rng.choice([0.5, -0.0, 3.0e38, 1.5, -2.25])
    if s.type == "float64":
        return rng.choice([0.1, -0.0, 1e308, 1 / 3, float("inf"), float("nan")])
    if s.type == "boolean":
        return rng.random() < 0.5
    if s.type == "string":
        return rng.choice(TEXTS)
    return rng.choice([b"", b"\x00\xff", "ü".encode()])


def _avro_schema(rng, k):
    b = SchemaBuilder.struct().name(f"r{k}")
    for i in range(rng.randint(1, 6)):
        s = rng.choice(FLAT_TYPES)
        b.field(f"f{i}", _optional(s) if rng.random() < 0.5 else s)
    roll = rng.random()
    # a field the batch reader does not take: the batch goes record by record
    if roll < 0.1:
        b.field("nested", SchemaBuilder.struct().name(f"n{k}").optional()
                .field("x", Schema.OPTIONAL_INT32).build())
    elif roll < 0.15:
        b.field("items", Schema("array", True, value_schema=Schema.STRING))
    elif roll < 0.2:
        b.field("price", Schema("bytes", True, "org.apache.kafka.connect.data.Decimal", 1,
                                parameters={"scale": "2"}))
    elif roll < 0.25:
        b.field("clock", Schema.OPTIONAL_TIME)
    return b.build()


def _nested_value(s, rng):
    if s.name == "org.apache.kafka.connect.data.Decimal":
        return decimal.Decimal("12.34")
    if s.name == Schema.TIME.name:
        return dt.time(1, 2, 3, 4000)
    if s.type == "array":
        return ["a", "ü"]
    return {"x": rng.choice([None, 5])}


@pytest.mark.processes
def test_an_avro_batch_read_as_columns_is_what_the_records_make(server, topic_name):
    """Random flat schemas (every type the reader takes, optional or not,
    extreme values) and some it does not take (nested, array, Decimal,
    Time): the columns, cast to the sink's types, are arrow_table's of the
    per-record values; the values are the per-record path's."""
    from kafkalite.connect.registry_converters import AvroConverter
    url = server.info["schema_registry"]
    writer = conv(AvroConverter, **{"schema.registry.url": url})
    rng = random.Random(75)
    columnar = fallback = 0
    for k in range(60):
        schema = _avro_schema(rng, k)
        values = [{f.name: _flat_value(rng, f.schema) if f.name.startswith("f")
                   else _nested_value(f.schema, rng) for f in schema.fields}
                  for _ in range(rng.choice([1, 3, 40]))]
        datas = [writer.from_connect_data(f"{topic_name}-{k}", schema, v) for v in values]
        reader = conv(AvroConverter, **{"schema.registry.url": url})
        want = [reader.to_connect_data("t", d) for d in datas]
        got_schema, got = reader.to_connect_batch("t", pa.array(datas, pa.binary()))
        if not isinstance(got, ColumnarValues):
            fallback += 1
            assert [exact(v) for v in got] == [exact(w[1]) for w in want]
            continue
        columnar += 1
        assert got_schema == want[0][0]
        for f in got_schema.fields:
            t = arrow_type(f.schema)
            column = got.table.column(f.name).cast(t)
            assert exact(column.to_pylist()) == exact(
                pa.array([w[1][f.name] for w in want], t).to_pylist()), (k, f.name)
        assert [exact(v) for v in got] == [exact(w[1]) for w in want]
    assert columnar >= 30 and fallback >= 5, (columnar, fallback)


@pytest.mark.processes
def test_avro_batches_of_two_schema_ids_or_bad_bytes_go_record_by_record(server, topic_name):
    from kafkalite.connect.registry_converters import AvroConverter
    url = server.info["schema_registry"]
    writer = conv(AvroConverter, **{"schema.registry.url": url})
    one = SchemaBuilder.struct().name("one").field("a", Schema.INT64).build()
    two = SchemaBuilder.struct().name("two").field("b", Schema.STRING).build()
    a = writer.from_connect_data(topic_name + "-a", one, {"a": 5})
    b = writer.from_connect_data(topic_name + "-b", two, {"b": "x"})
    reader = conv(AvroConverter, **{"schema.registry.url": url})
    schemas, values = reader.to_connect_batch("t", pa.array([a, b, a], pa.binary()))
    assert values == [{"a": 5}, {"b": "x"}, {"a": 5}] and schemas == [one, two, one]
    # a payload with a byte too many: the block would be misread, so the per-record path
    # reads each (as Confluent's deserializer, which ignores the byte)
    schemas, values = reader.to_connect_batch("t", pa.array([a, a + b"\x02", a], pa.binary()))
    assert not isinstance(values, ColumnarValues) and values == [{"a": 5}] * 3
    with pytest.raises(DataException):
        reader.to_connect_batch("t", pa.array([a, b"\x01" + a[1:]], pa.binary()))


# ---- JSON with schema: the compiled envelope reader --------------------------------------

def _json_batch(payloads):
    """(the envelopes of ``payloads`` (texts) in FLAT's schema, as a binary
    column; the bytes up to the first one's payload)."""
    from test_connect_converters import envelope_bytes
    datas = [envelope_bytes(p) for p in payloads]
    return datas, datas[0][:datas[0].index(b'"payload":') + len(b'"payload":')]


def _read_types():
    from test_connect_converters import FLAT
    kinds = {"int8": pa.int64(), "int32": pa.int64(), "int64": pa.int64(),
             "string": pa.string(), "float64": pa.float64(), "float32": pa.float64(),
             "boolean": pa.bool_()}
    return [f["field"] for f in FLAT["fields"]], [kinds[f["type"]] for f in FLAT["fields"]]


def test_json_envelopes_pretty_reordered_or_sparse_are_read_as_columns_by_the_compiled_reader():
    """Payloads of one flat schema as other writers lay them out -- line
    breaks and indents, keys in another order, optional fields left out,
    every non-ASCII character escaped -- are read as columns by the
    compiled reader (ext/json_columns.pyx) and are what each record reads
    alone. Before it, pyarrow's line-delimited reader could not take a line
    break inside a payload, and such a batch went record by record."""
    from test_connect_converters import FLAT, _per_record, flat_payload

    from kafkalite.connect.converters import _payload_columns
    c = conv(JsonConverter)
    payloads = []
    for i in range(1, 200):
        v = flat_payload(i)
        if i % 3 == 0:
            v = dict(reversed(list(v.items())))
        if i % 4 == 0:
            v = {k: x for k, x in v.items() if k == "id" or x is not None and k != "ratio"}
        payloads.append(json.dumps(v, indent=1 if i % 2 else None, ensure_ascii=i % 5 == 0))
    datas, prefix = _json_batch(payloads)
    want = [w[1] for w in _per_record(c, datas)]
    schema, got = c.to_connect_batch("t", pa.array(datas, pa.binary()))
    assert isinstance(got, ColumnarValues), "the batch went record by record"
    assert exact(got.table.to_pylist()) == exact(want)
    assert exact(list(got)) == exact(want)
    # the compiled reader took it itself (pyarrow's reader declines line breaks)
    from kafkalite.connect.batch_readers import envelope_columns
    names, types = _read_types()
    read = envelope_columns(pa.array(datas, pa.binary()), prefix, names, types)
    assert read is not None and read.num_rows == len(datas)
    assert _payload_columns(pa.array(datas, pa.binary()), prefix,
                            c.to_connect_data("t", datas[0])[0]).equals(got.table)
    assert len(FLAT["fields"]) == read.num_columns


def test_json_envelopes_the_compiled_reader_declines_are_read_as_before():
    """What the compiled reader must not decide -- a nested value, a number
    as text, a fraction or an exponent in an integer field, a number past
    int64, a key that is no field or comes twice, a lone surrogate, a raw
    control character, -0.0 in a float field, NaN, a key with an escape,
    text after the payload -- it declines (None); and a batch of those, or
    with a required field left out (read, then refused by the converter's
    checks), reads as each record alone does: the same values, or the same
    DataException (the task's error, as before)."""
    from test_connect_converters import _per_record, flat_payload

    from kafkalite.connect.batch_readers import envelope_columns
    c = conv(JsonConverter)
    ok = json.dumps(flat_payload(1), separators=(",", ":"))

    def with_value(field, text):
        return json.dumps({**flat_payload(1), field: "@"}).replace('"@"', text)
    declined = [with_value("name", '{"a":1}'), with_value("mid", '"7"'),
                with_value("id", "1.0"), with_value("id", "1e2"),
                with_value("id", "9223372036854775808"), '{"zz":1,' + ok[1:],
                '{"id":2,' + ok[1:], ok.replace('"id":', '"ID":'),
                with_value("name", '"\\ud800"'), with_value("name", '"a\x01b"'),
                with_value("amount", "-0.0"), with_value("amount", "NaN"),
                ok.replace('"name":', '"n\\u0061me":'), ok + " x", "null", "[]"]
    names, types = _read_types()
    required_left_out = json.dumps({k: v for k, v in flat_payload(1).items() if k != "id"})
    for text in declined + [required_left_out]:
        datas, prefix = _json_batch([ok, text])
        if text is not required_left_out:
            assert envelope_columns(pa.array(datas, pa.binary()), prefix, names,
                                    types) is None, text
        want = _per_record(c, datas)
        try:
            _, got = c.to_connect_batch("t", pa.array(datas, pa.binary()))
        except (DataException, OverflowError, ValueError) as e:
            assert type(e) in want, (text, want)
            continue
        assert exact(list(got)) == exact([w[1] for w in want]), text
