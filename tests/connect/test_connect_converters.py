"""Converters against the bytes Kafka Connect's own converters write and read."""
import datetime as dt
import json

import pytest

from kafkalite.connect.converters import (ByteArrayConverter, JsonConverter, StringConverter,
                                          converter_from_config)
from kafkalite.connect.data import Schema, SchemaBuilder
from kafkalite.connect.errors import DataException

ROW = SchemaBuilder.struct().name("row").field("id", Schema.INT32) \
    .field("name", Schema.OPTIONAL_STRING).field("at", Schema.OPTIONAL_TIMESTAMP) \
    .field("raw", Schema.OPTIONAL_BYTES).build()
AT = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.timezone.utc)


def conv(cls, is_key=False, **cfg):
    c = cls()
    c.configure(cfg, is_key)
    return c


def test_bytearray_converter_passes_bytes_and_refuses_other_types():
    c = conv(ByteArrayConverter)
    assert c.from_connect_data("t", Schema.BYTES, b"\x00\xff") == b"\x00\xff"
    assert c.to_connect_data("t", b"\x01") == (Schema.OPTIONAL_BYTES, b"\x01")
    assert c.from_connect_data("t", None, None) is None
    with pytest.raises(DataException, match="not compatible"):
        c.from_connect_data("t", Schema.STRING, "text")


def test_string_converter_round_trip_and_bad_utf8():
    c = conv(StringConverter)
    assert c.from_connect_data("t", Schema.STRING, "héllo") == "héllo".encode()
    assert c.from_connect_data("t", Schema.INT32, 42) == b"42"
    assert c.to_connect_data("t", "héllo".encode()) == (Schema.OPTIONAL_STRING, "héllo")
    assert c.to_connect_data("t", None) == (Schema.OPTIONAL_STRING, None)
    with pytest.raises(DataException):
        c.to_connect_data("t", b"\xff\xfe")


def test_json_converter_with_schemas_writes_kafkas_envelope():
    c = conv(JsonConverter)
    value = {"id": 7, "name": "ada", "at": AT, "raw": b"\x01\x02"}
    doc = json.loads(c.from_connect_data("t", ROW, value))
    assert doc == {
        "schema": {"type": "struct", "optional": False, "name": "row", "fields": [
            {"type": "int32", "optional": False, "field": "id"},
            {"type": "string", "optional": True, "field": "name"},
            {"type": "int64", "optional": True, "name": "org.apache.kafka.connect.data.Timestamp",
             "version": 1, "field": "at"},
            {"type": "bytes", "optional": True, "field": "raw"}]},
        "payload": {"id": 7, "name": "ada", "at": 1714979289123, "raw": "AQI="}}
    schema, back = c.to_connect_data("t", json.dumps(doc).encode())
    assert schema == ROW and back == value


def test_json_converter_reads_an_envelope_written_by_kafka():
    # as Kafka's JsonConverter writes an int64 + optional string struct
    raw = (b'{"schema":{"type":"struct","fields":[{"type":"int64","optional":false,"field":"n"},'
           b'{"type":"string","optional":true,"field":"s"}],"optional":false,"name":"x"},'
           b'"payload":{"n":9007199254740993,"s":null}}')
    schema, value = conv(JsonConverter).to_connect_data("t", raw)
    assert [f.name for f in schema.fields] == ["n", "s"] and schema.name == "x"
    assert value == {"n": 9007199254740993, "s": None}


def test_json_converter_decimals_are_kafkas_base64_of_the_unscaled_bytes():
    """Kafka's JsonConverter (decimal.format BASE64, its default) writes a
    Decimal as its unscaled value's two's-complement bytes in base64 (12.34
    at scale 2: 1234, 0x04D2, "BNI="), and reads that or a JSON number
    (NUMERIC); a float would lose digits past the 16th."""
    import decimal
    price = Schema("bytes", name="org.apache.kafka.connect.data.Decimal", version=1,
                   parameters={"scale": "2"}, optional=True)
    row = SchemaBuilder.struct().name("p").field("price", price).build()
    c = conv(JsonConverter)
    for text, payload in (("12.34", "BNI="), ("-0.01", "/w=="), ("0.00", "AA=="),
                          ("1.28", "AIA="), ("-99999999999999999999.99", "/eHmHzZFTcAAAQ==")):
        doc = json.loads(c.from_connect_data("t", row, {"price": decimal.Decimal(text)}))
        assert doc["payload"] == {"price": payload}, text
        _, back = c.to_connect_data("t", json.dumps(doc).encode())
        assert back == {"price": decimal.Decimal(text)} and isinstance(back["price"],
                                                                         decimal.Decimal)
    doc["payload"] = {"price": 12.5}
    assert c.to_connect_data("t", json.dumps(doc).encode())[1] == {
        "price": decimal.Decimal("12.50")}
    doc["payload"] = {"price": "not base64!"}
    with pytest.raises(DataException):
        c.to_connect_data("t", json.dumps(doc).encode())


def test_json_converter_schemaless_and_tombstones():
    c = conv(JsonConverter, **{"schemas.enable": "false"})
    assert c.from_connect_data("t", None, {"a": [1, 2.5, None]}) == b'{"a":[1,2.5,null]}'
    assert c.to_connect_data("t", b'{"a":1}') == (None, {"a": 1})
    assert c.from_connect_data("t", None, None) is None
    assert conv(JsonConverter).to_connect_data("t", None) == (None, None)


def test_json_converter_refuses_plain_json_when_schemas_are_enabled():
    with pytest.raises(DataException, match="schemas.enable=false"):
        conv(JsonConverter).to_connect_data("t", b'{"a": 1}')
    with pytest.raises(DataException, match="serialization error"):
        conv(JsonConverter).to_connect_data("t", b"{not json")
    with pytest.raises(DataException, match="int32"):
        conv(JsonConverter).to_connect_data("t", json.dumps(
            {"schema": {"type": "int32"}, "payload": "x"}).encode())


def test_converter_named_by_kafkas_class_name_with_prefixed_settings():
    c = converter_from_config({"value.converter": "org.apache.kafka.connect.json.JsonConverter",
                               "value.converter.schemas.enable": "false"}, "value.converter",
                              False, "x")
    assert isinstance(c, JsonConverter) and c.schemas_enable is False
    assert isinstance(converter_from_config({"key.converter": "StringConverter"},
                                            "key.converter", True, "x"), StringConverter)


def test_json_envelope_in_any_layout_reads_the_same():
    """Kafka's layout takes the fast path (schema parsed once per schema
    text); spaced, reordered or trailing-garbage envelopes the general one."""
    c = conv(JsonConverter)
    schema = {"type": "struct", "fields": [{"field": "a", "type": "int32"}]}
    tight = json.dumps({"schema": schema, "payload": {"a": 1}}, separators=(",", ":"))
    spaced = json.dumps({"schema": schema, "payload": {"a": 1}}, indent=2)
    reordered = json.dumps({"payload": {"a": 1}, "schema": schema})
    got = [c.to_connect_data("t", x.encode()) for x in (tight, tight, spaced, reordered)]
    assert all(g == got[0] for g in got) and got[0][1] == {"a": 1}
    assert got[0][0] is got[1][0]            # the second read reused the parsed schema
    with pytest.raises(DataException):
        c.to_connect_data("t", (tight + "x").encode())
    with pytest.raises(DataException, match="int32"):
        c.to_connect_data("t", tight.replace('{"a":1}', '{"a":"x"}').encode())


def test_struct_decoder_reads_every_value_as_the_general_path_does():
    """The converter's per-schema struct decoder (short paths for well-formed
    ints, strings, doubles and timestamps) gives from_json_value's value, or
    its error, for each field value: good ones, nulls, wrong types, bools
    for ints, out-of-range ints, ints for doubles, logical types."""
    from kafkalite.connect.data import from_json_value, struct_decoder
    schema = SchemaBuilder.struct().name("wide").field("i8", Schema.INT8) \
        .field("i32", Schema.OPTIONAL_INT32).field("i64", Schema.INT64) \
        .field("f", Schema.OPTIONAL_FLOAT64).field("s", Schema.STRING) \
        .field("at", Schema.OPTIONAL_TIMESTAMP).field("d", Schema.OPTIONAL_DATE) \
        .field("b", Schema.OPTIONAL_BOOLEAN).field("raw", Schema.OPTIONAL_BYTES).build()
    good = {"i8": 5, "i32": -7, "i64": 2**40, "f": 1.5, "s": "x", "at": 1_700_000_000_123,
            "d": 19000, "b": True, "raw": "AAE="}
    variants = [good, {**good, "i32": None, "f": None, "at": None, "d": None},
                {**good, "f": 3}, {**good, "at": 5.0}, {k: v for k, v in good.items()
                                                        if k != "i32"}]
    bad = [{**good, "i8": 300}, {**good, "i8": True}, {**good, "i64": "1"},
           {**good, "s": 1}, {**good, "s": None}, {**good, "f": "1.0"}, {**good, "at": "x"},
           [1, 2], "text"]
    decode = struct_decoder(schema)
    for v in variants:
        assert decode(v) == from_json_value(schema, v), v
    for v in bad:
        with pytest.raises(DataException) as general:
            from_json_value(schema, v)
        with pytest.raises(DataException) as fast:
            decode(v)
        assert str(fast.value) == str(general.value), v


def test_a_batch_is_written_and_read_as_its_records_one_by_one():
    """The bulk path's JsonConverter (a struct schema's writer made once, a
    batch read by its first envelope's head) gives the per-record path's
    bytes and values, for awkward values too: NaN, infinities, bools in an
    int field, naive and non-UTC timestamps, escapes, a changed schema, a
    nested struct (Debezium's before and after: a writer of its own)."""
    import random

    import pyarrow as pa

    from kafkalite.connect.data import Field
    utc = dt.timezone.utc
    flat = (
        Field("id", Schema.INT64), Field('na"me\\ü', Schema.OPTIONAL_STRING),
        Field("amount", Schema.OPTIONAL_FLOAT64), Field("ts", Schema.OPTIONAL_TIMESTAMP),
        Field("b", Schema.OPTIONAL_BOOLEAN), Field("raw", Schema.OPTIONAL_BYTES),
        Field("d", Schema.OPTIONAL_DATE))
    schema = Schema("struct", name="t", fields=flat + (
        Field("inner", Schema("struct", True, "t.Inner", fields=flat)),))
    rnd = random.Random(45)

    def pick(*xs):
        return rnd.choice(xs)
    values = [{"id": pick(i, -2**63, 2**63 - 1, True, None), 'na"me\\ü': pick(
        "x", 'ü\n\t"', "", None, "✓✓"), "amount": pick(0.1, 1e300, float("nan"), float("inf"),
                                                       -0.0, None, 3, 1 / 3),
               "ts": pick(None, dt.datetime(2024, 1, 1, tzinfo=utc) + dt.timedelta(
                   microseconds=rnd.randrange(10**12)), dt.datetime(2020, 5, 5),
                   dt.datetime(2020, 5, 5, tzinfo=dt.timezone(dt.timedelta(hours=3)))),
               "b": pick(True, False, None), "raw": pick(None, b"\x00\xff"),
               "d": pick(None, dt.date(2024, 2, 3))} for i in range(3000)]
    for v in values:
        v["inner"] = pick(None, dict(v), {"id": 7})       # a field missing: null
    for enable in ("true", "false"):
        c = JsonConverter()
        c.configure({"schemas.enable": enable}, False)
        written = c.from_connect_batch("t", schema, values)
        assert written == [c.from_connect_data("t", schema, v) for v in values]
    c = JsonConverter()
    c.configure({}, False)
    other = Schema("struct", fields=(Field("id", Schema.INT64),))
    valid = [v for v in values if type(v["id"]) is int][:200]     # what the schema reads back
    data = c.from_connect_batch("t", schema, valid) + \
        [c.from_connect_data("t", other, {"id": 1})] + [None]
    schemas, got = c.to_connect_batch("t", pa.array(data, pa.binary()))
    one_by_one = [c.to_connect_data("t", d) for d in data]
    assert schemas == [s for s, _ in one_by_one]
    assert repr(got) == repr([v for _, v in one_by_one])     # NaN != NaN: compared as text


# ---- the JsonConverter's Arrow batch path ------------------------------------------------

FLAT = {"type": "struct", "optional": False, "name": "flat", "fields": [
    {"field": "id", "type": "int64", "optional": False},
    {"field": "small", "type": "int8", "optional": True},
    {"field": "mid", "type": "int32", "optional": True},
    {"field": "name", "type": "string", "optional": True},
    {"field": "amount", "type": "float64", "optional": True},
    {"field": "ratio", "type": "float32", "optional": True},
    {"field": "ok", "type": "boolean", "optional": True},
    {"field": "at", "type": "int64", "optional": True,
     "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
    {"field": "day", "type": "int32", "optional": True,
     "name": "org.apache.kafka.connect.data.Date", "version": 1},
    {"field": "clock", "type": "int32", "optional": True,
     "name": "org.apache.kafka.connect.data.Time", "version": 1}]}
NASTY_TEXT = ["", "a,b", 'q"q', "l\nl", "\r\n", "\\.", "x\\y", "\\N", "tab\t", "NULL",
              "ünïcode ✓ 😀", " ", '"', "\u2028", "\x7f"]


def flat_payload(i):
    return {"id": i, "small": (i % 256) - 128, "mid": i * 1000 - 5, "name":
            None if i % 7 == 0 else NASTY_TEXT[i % len(NASTY_TEXT)],
            "amount": None if i % 5 == 0 else (i / 3 if i % 2 else -i * 1e300),
            "ratio": i * 0.1, "ok": None if i % 3 == 0 else i % 2 == 0,
            "at": None if i % 4 == 0 else 1_700_000_000_000 + i * 86_400_017 - 10 ** 12,
            "day": i * 1000 - 700_000, "clock": i * 3_600_001 % 86_400_000}


def envelope_bytes(payload: str, schema=FLAT) -> bytes:
    return ('{"schema":' + json.dumps(schema, separators=(",", ":")) + ',"payload":' + payload +
            '}').encode()


# text spliced into a payload where a value or a field goes: JSON Python and Arrow read
# differently, values out of a field's range, layouts one path takes and the other not
MUTATIONS = ["-0", "-0.0", "1.0", "1e2", "true", "null", '"7"', "NaN", "Infinity", "-Infinity",
             "Inf", "-NaN", "9223372036854775808", "128", "-129", "2147483648", '"\\ud800"',
             '"\\u0000"', '"a\x01b"', "1e400", "[1]", "{}", "-62135596800001",
             "253402300800000", "2932897", "86400000", "-1", "0.5", "\n1", "\r1", " 1 ",
             "1/*c*/", "01", "+1", ".5", "1.", "'x'", '"\\/\\b\\f"', "nul", "tru"]


def _mutated(rng, i):
    """The i-th payload, maybe mutated: (payload text, whole-record text or None)."""
    p = json.dumps(flat_payload(i), separators=(",", ":"), ensure_ascii=rng.random() < 0.5)
    roll = rng.random()
    if roll < 0.55:
        return p, None
    if roll < 0.8:
        # a value replaced: the text after one "field": up to its next , or }
        field = rng.choice(FLAT["fields"])["field"]
        key = f'"{field}":'
        at = p.index(key) + len(key)
        end = at
        depth, in_str = 0, False
        while end < len(p):
            ch = p[end]
            if in_str:
                in_str = ch != '"' or p[end - 1] == "\\"
            elif ch == '"':
                in_str = True
            elif ch in ",}" and depth == 0:
                break
            end += 1
        return p[:at] + rng.choice(MUTATIONS) + p[end:], None
    if roll < 0.86:
        extra = rng.choice(['"id":1', '"zz":[1,{"a":null}]', '"zz":NaN', '"zz":Inf',
                            '"zz":"\\ud83d\\ude00"'])
        return "{" + extra + "," + p[1:], None
    if roll < 0.9:
        return p.replace('"id":', '"ID":'), None            # a required field missing
    if roll < 0.94:
        return rng.choice(["null", "[]", '"x"', p + p, p + " x", p + "null", " " + p,
                           p + " ", "{", ""]), None
    if roll < 0.97:
        return p, envelope_bytes(p).replace(b'"payload":', b'"payload" :')
    return p, envelope_bytes(p)[:-1] + b" }"


def _per_record(c, datas):
    """What the per-record path makes of each record: (schema, value) or the
    DataException's type."""
    out = []
    for d in datas:
        try:
            out.append(c.to_connect_data("t", d))
        except (DataException, OverflowError, ValueError) as e:
            out.append(type(e))
    return out


def exact(values):
    """Struct values compared with floats by their repr: 0.0 == -0.0, and the
    sign is what a float column stores."""
    return [{k: repr(x) if isinstance(x, float) else x for k, x in v.items()}
            if isinstance(v, dict) else v for v in values]


def test_a_json_batch_read_as_arrow_columns_is_what_the_per_record_path_reads():
    """The JsonConverter reads a batch of flat structs with pyarrow's JSON
    reader into columns (ColumnarValues) only where that reading is the
    per-record path's: over batches of nasty and mutated payloads, either
    the batch's values (and its columns, value for value) are what each
    record alone reads as, or the batch falls back and fails or reads
    exactly as the records one by one do."""
    import random

    import pyarrow as pa

    from kafkalite.connect.converters import ColumnarValues
    c = conv(JsonConverter)
    rng = random.Random(45)
    columnar = 0
    ok = json.dumps(flat_payload(1))

    def raw(field, text):        # flat_payload(1) with ``text`` as the field's JSON
        return json.dumps({**flat_payload(1), field: "@"}).replace('"@"', text)
    # besides the random ones: two objects in one record, a -0 where a float goes
    # (Python's 0.0), a lone surrogate, a null payload, text that is not UTF-8
    batches = [[ok, ok + ok], [ok, ok + ok, "{}"], [ok, raw("amount", "-0")],
               [ok, raw("ratio", "-0")], [ok, raw("name", '"\\ud800"')], ["null", ok],
               [ok, envelope_bytes(ok).replace(b"a,b", b"a\xff,b")],
               [ok, envelope_bytes(ok).replace(b"a,b", b"a\xc3")]]
    for b in range(400):
        batch = []
        for i in range(rng.choice([1, 3, 20])):
            payload, whole = _mutated(rng, b * 20 + i)
            batch.append(whole if whole is not None else payload)
        batches.append(batch)
    for b, batch in enumerate(batches):
        datas = [x if isinstance(x, bytes) else envelope_bytes(x) for x in batch]
        want = _per_record(c, datas)
        try:
            schema, values = c.to_connect_batch("t", pa.array(datas, pa.binary()))
        except (DataException, OverflowError, ValueError):
            assert any(isinstance(w, type) for w in want), (b, datas)
            continue
        assert all(not isinstance(w, type) for w in want), (b, datas, want)
        if isinstance(values, ColumnarValues):
            columnar += 1
            # the table read first, as a sink that takes it does (one that reads the dicts
            # alone gets no more tables)
            assert exact(values.table.to_pylist()) == exact([w[1] for w in want]), (b, datas)
        assert exact(list(values)) == exact([w[1] for w in want]), (b, datas)
    # the nasty but valid batches took the Arrow path (a batch of 20 is mutated somewhere
    # nearly always: most columnar batches are the shorter ones)
    assert columnar >= 40, columnar


def test_a_json_batch_of_flat_structs_is_columnar_and_decoded_only_when_read():
    import pyarrow as pa

    from kafkalite.connect.converters import ColumnarValues
    c = conv(JsonConverter)
    datas = [envelope_bytes(json.dumps(flat_payload(i))) for i in range(1, 500)]
    schema, values = c.to_connect_batch("t", pa.array(datas, pa.binary()))
    assert isinstance(values, ColumnarValues) and values._values is None
    assert values.table.column_names == [f["field"] for f in FLAT["fields"]]
    assert str(values.table.schema.field("at").type) == "timestamp[ms, tz=UTC]"
    assert values[3] == c.to_connect_data("t", datas[3])[1]
    assert len(values) == 499
    # a sink that read the table: the next batch has one too; one that read the dicts
    # alone: no table after it (the Arrow reading would be work for nothing)
    _, values = c.to_connect_batch("t", pa.array(datas, pa.binary()))
    assert isinstance(values, ColumnarValues)
    assert values[0] == c.to_connect_data("t", datas[0])[1]
    schema, values = c.to_connect_batch("t", pa.array(datas, pa.binary()))
    assert type(values) is list and values == [c.to_connect_data("t", d)[1] for d in datas]
    c = conv(JsonConverter)
    # a field type the columns do not hold (bytes): the per-record decoder's list
    with_bytes = {**FLAT, "fields": FLAT["fields"] + [
        {"field": "raw", "type": "bytes", "optional": True}]}
    datas = [envelope_bytes(json.dumps(flat_payload(i)), with_bytes) for i in range(1, 50)]
    schema, values = c.to_connect_batch("t", pa.array(datas, pa.binary()))
    assert type(values) is list
    # all keys null: no converter call per record
    assert c.to_connect_batch("t", pa.array([None] * 3, pa.binary())) == (None, [None] * 3)


@pytest.mark.unit
@pytest.mark.parametrize("schemas", [True, False])
def test_a_value_its_schema_cannot_hold_is_a_data_exception(schemas):
    """Kafka's JsonConverter answers a value that does not fit its schema
    with DataException: the worker's batch path falls back record by record
    on it, and the error tolerance then skips the record. A ValueError (a
    Timestamp field holding text) escaped before, and failed the task."""
    from kafkalite.connect.converters import StructColumns
    c = JsonConverter()
    c.configure({"schemas.enable": str(schemas).lower()}, False)
    schema = SchemaBuilder.struct().field("id", Schema.INT64) \
        .field("at", Schema.OPTIONAL_TIMESTAMP).build()
    good = {"id": 1, "at": dt.datetime(2026, 11, 28, tzinfo=dt.timezone.utc)}
    bad = {"id": 2, "at": "not a time"}
    assert c.from_connect_data("t", schema, good)
    with pytest.raises(DataException, match="at"):
        c.from_connect_data("t", schema, bad)
    with pytest.raises(DataException):
        c.from_connect_data("t", Schema.OPTIONAL_TIMESTAMP, "not a time")
    with pytest.raises(DataException):
        c.from_connect_batch("t", schema, [good, bad])
    columns = StructColumns(["id", "at"], [[1, 2], [good["at"], "not a time"]])
    with pytest.raises(DataException):
        c.from_connect_batch("t", schema, columns)
