"""The JDBC source's batch path: rows read as columns (StructColumns) and
written by the JsonConverter a column at a time must give the bytes the
per-row path gives (issue 45), and values it cannot take fall back."""
import datetime as dt

import pytest

from kafkalite.connect.converters import JsonConverter, StructColumns
from kafkalite.connect.data import Field, Schema
from kafkalite.connect.errors import DataException

UTC = dt.timezone.utc

SCHEMA = Schema("struct", name="every%type", fields=(
    Field("id", Schema.OPTIONAL_INT64), Field('n%s"\u00e9', Schema.OPTIONAL_STRING),
    Field("f", Schema.OPTIONAL_FLOAT64), Field("ts", Schema.OPTIONAL_TIMESTAMP),
    Field("b", Schema.OPTIONAL_BOOLEAN), Field("raw", Schema.OPTIONAL_BYTES),
    Field("d", Schema.OPTIONAL_DATE), Field("tm", Schema.OPTIONAL_TIME),
    Field("i32", Schema.OPTIONAL_INT32), Field("f32", Schema.OPTIONAL_FLOAT32)))

ROWS = [
    (1, 'a"\u00e9\n\u2603', 1.5, dt.datetime(2024, 1, 1, tzinfo=UTC), True, b"\x00\xff",
     dt.date(2020, 1, 2), dt.time(1, 2, 3, 4000), 7, 0.1),
    (None,) * 10,
    (-3, "", float("nan"), dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC), False,
     b"", dt.date(1970, 1, 1), dt.time(0), -1, float("inf")),
    (2 ** 40, "x", 1e300, dt.datetime(2024, 1, 1, 12, 0, 0, 123456, tzinfo=UTC), False, b"a",
     None, None, None, -0.0),
    (5, "plain", 2.0, dt.datetime(1900, 1, 1, 0, 0, 0, 1, tzinfo=UTC), True, None,
     dt.date(2000, 2, 29), dt.time(23, 59, 59), 3, 1.25),
]


def _converter(schemas):
    c = JsonConverter()
    c.configure({"schemas.enable": str(schemas).lower()}, False)
    return c


@pytest.mark.parametrize("schemas", [True, False])
@pytest.mark.parametrize("rows", [ROWS, [r for r in ROWS if r[0] is not None and r[0] > 0]],
                         ids=["nulls", "no-nulls"])
def test_columns_write_the_per_row_bytes(schemas, rows):
    names = [f.name for f in SCHEMA.fields]
    columns = [list(c) for c in zip(*rows)]
    batch = _converter(schemas).from_connect_batch("t", SCHEMA, StructColumns(names, columns))
    per_row = [_converter(schemas).from_connect_data("t", SCHEMA, dict(zip(names, r)))
               for r in rows]
    assert batch == per_row
    # and the dicts a transform would read are the per-row path's
    assert list(StructColumns(names, columns)) == [dict(zip(names, r)) for r in rows]


def test_a_column_the_general_path_refuses_falls_back_per_record():
    # a timestamp column holding a string: the batch goes record by record, failing as
    # the per-record path fails on that record (Kafka's DataException, naming the field)
    schema = Schema("struct", name="t", fields=(Field("ts", Schema.OPTIONAL_TIMESTAMP),))
    with pytest.raises(DataException) as per_record:
        _converter(True).from_connect_data("t", schema, {"ts": "not a time"})
    with pytest.raises(DataException) as batch:
        _converter(True).from_connect_batch("t", schema,
                                            StructColumns(["ts"], [["not a time"]]))
    assert str(batch.value) == str(per_record.value)
    # a naive datetime takes the general path per value, as the per-row writer does
    naive = [dt.datetime(2024, 1, 1), dt.datetime(2024, 1, 1, tzinfo=UTC)]
    out = _converter(False).from_connect_batch("t", schema, StructColumns(["ts"], [naive]))
    assert out == [_converter(False).from_connect_data("t", schema, {"ts": v}) for v in naive]
