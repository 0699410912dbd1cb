"""The Iceberg sink's batch path (``put_batch``): batches consumed from a
real server and converted as the worker converts them (consume_batch, the
JsonConverter or ByteArrayConverter a column at a time), written into a
real SQL catalog on SQLite, beside the per-record path (``put`` of the same
batches' SinkRecords) into a table of the same catalog: the two tables must
be equal, schema and rows; a batch the column path cannot take goes record
by record; a restarted task handed records the table already holds writes
each record once."""
from __future__ import annotations

import json
import time

import pytest
from harness import create
from test_connect_iceberg import T0, catalog, envelope, sink_config

from kafkalite.client import Producer

pytest.importorskip("pyiceberg")

BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
# every type the JsonConverter hands as Arrow columns, which the per-record path writes
FIELDS = [{"field": "id", "type": "int64", "optional": False},
          {"field": "small", "type": "int8", "optional": True},
          {"field": "name", "type": "string", "optional": True},
          {"field": "amount", "type": "float64", "optional": True},
          {"field": "ratio", "type": "float32", "optional": True},
          {"field": "ok", "type": "boolean", "optional": True},
          {"field": "at", "type": "int64", "optional": True,
           "name": "org.apache.kafka.connect.data.Timestamp", "version": 1},
          {"field": "day", "type": "int32", "optional": True,
           "name": "org.apache.kafka.connect.data.Date", "version": 1}]
TEXTS = ["", "ünïcode ✓ 😀", "a,b", 'q"q', "\\N", "NULL", " ", "\u2028", "日本語"]


def payload(i):
    return {"id": i, "small": (i % 256) - 128,
            "name": None if i % 7 == 0 else TEXTS[i % len(TEXTS)],
            "amount": None if i % 5 == 0 else (i / 3 if i % 2 else -i * 1.5e300),
            "ratio": i * 0.1, "ok": None if i % 3 == 0 else i % 2 == 0,
            "at": None if i % 4 == 0 else T0 + (i % 3) * 86_400_000 + i * 17 - 10 ** 12,
            "day": None if i % 6 == 0 else i * 1000 - 700_000}


def produce(server, topic, values, partitions=2, keys=None):
    p = Producer(server.config())
    for i, v in enumerate(values):
        p.produce(topic, partition=i % partitions, value=v,
                  key=None if keys is None else keys[i], timestamp=T0 + i * 1000)
    p.flush(30)
    p.close()


def sink_batches(server, topic, n, partitions=2, value_converter=None, starts=None):
    """The topic's n records as the worker hands them to put_batch:
    consume_batch slices of at most 150 rows, keys and values converted a
    batch at a time (JsonConverter, or ``value_converter``'s class)."""
    from kafkalite.client import Consumer, TopicPartition
    from kafkalite.connect.api import SinkRecordBatch
    from kafkalite.connect.converters import ByteArrayConverter, JsonConverter
    kafka = value_converter == BYTES
    keys = ByteArrayConverter() if kafka else JsonConverter()
    keys.configure({}, True)
    if isinstance(value_converter, str) or value_converter is None:
        values = ByteArrayConverter() if kafka else JsonConverter()
        values.configure({}, False)
    else:
        values = value_converter            # a configured converter of the test's
    c = Consumer(server.config())
    out, got = [], 0
    try:
        c.assign([TopicPartition(topic, p, (starts or {}).get(p, 0)) for p in range(partitions)])
        deadline = time.monotonic() + 30
        while got < n and time.monotonic() < deadline:
            rows = c.consume_batch(1)
            for lo in range(0, rows.num_rows, 150):
                part = rows.slice(lo, 150)
                out.append(SinkRecordBatch(
                    part, *keys.to_connect_batch(topic, part.column("key")),
                    *values.to_connect_batch(topic, part.column("value"))))
            got += rows.num_rows
    finally:
        c.close()
    assert got == n
    return out


class _Context:
    def __init__(self):
        self.seeks = {}

    def offset(self, offsets):
        self.seeks.update(offsets)


def sink_task(tmp_path, topic, table, partitions=2, **more):
    from kafkalite.client import TopicPartition
    from kafkalite.connect.connectors.iceberg import IcebergSinkTask
    task = IcebergSinkTask()
    task.initialize(_Context())
    task.start({"name": "ice", **sink_config(tmp_path, topic, table, **more)})
    task.open([TopicPartition(topic, p) for p in range(partitions)])
    return task


def contents(cat, name, order):
    """(the table's columns: name, type, required; its rows sorted by
    ``order``; the offsets its snapshot carries)."""
    t = cat.load_table(name)
    cols = [(f.name, str(f.field_type), f.required) for f in t.schema().fields]
    rows = sorted(t.scan().to_arrow().to_pylist(), key=lambda r: [r[c] for c in order])
    offsets = json.loads(t.current_snapshot().summary.additional_properties[
        "kafka.connect.offsets.connect-ice"])
    return cols, rows, offsets, [str(f.transform) for f in t.spec().fields]


def equal_rows(a, b):
    """Row lists equal, a float NaN equal to itself (repr: -0.0 is not 0.0)."""
    norm = [[{k: repr(v) if isinstance(v, float) else v for k, v in r.items()} for r in rows]
            for rows in (a, b)]
    return norm[0] == norm[1]


def test_batch_path_writes_the_table_the_per_record_path_writes(server, topic_name, tmp_path):
    """Values handed as Arrow columns (ints of every width, NULLs, unicode,
    doubles of every size, a float32, booleans, timestamps and dates,
    partitioned by day of a timestamp) become the same table, column types
    and rows, with the same offsets in the snapshot, as ``put`` of the
    same records; no SinkRecord is made on the way."""
    from kafkalite.connect.converters import ColumnarValues
    create(server, topic_name, 2)
    n = 900
    produce(server, topic_name, [envelope(FIELDS, payload(i)) for i in range(n)])
    cat = catalog(tmp_path)
    more = {"iceberg.tables.default-partition-by": "day(at)", "flush.size": "250"}
    columns = sink_task(tmp_path, topic_name, "lake.columns", **more)
    records = sink_task(tmp_path, topic_name, "lake.records", **more)
    for batch in sink_batches(server, topic_name, n):
        assert isinstance(batch.values, ColumnarValues), "no Arrow columns: the test shows nothing"
        columns.put_batch(batch)
        assert batch._records is None, "put_batch made the batch's SinkRecords"
        records.put(batch.records())
    for task in (columns, records):
        task.pre_commit({(topic_name, 0): n // 2, (topic_name, 1): n // 2})
    order = ["__kafka_partition", "__kafka_offset"]
    got, want = contents(cat, "lake.columns", order), contents(cat, "lake.records", order)
    assert got[0] == want[0] and got[2:] == want[2:]
    assert len(got[1]) == n and equal_rows(got[1], want[1])
    assert got[2] == {topic_name: {"0": n // 2, "1": n // 2}}
    # written in pieces of flush.size rows (the memory bound), one snapshot of them all
    table = cat.load_table("lake.columns")
    assert len(table.metadata.snapshots) == 1 and len(table.scan().plan_files()) > 2


def test_kafka_format_batch_path_writes_the_records_the_per_record_path_writes(
        server, topic_name, tmp_path):
    """record-format=kafka from the consumer's columns: keys and values the
    log's bytes (null keys, tombstones), topic, partition, offset, the
    timestamp with its zone and its type, equal to ``put``'s table."""
    create(server, topic_name, 2)
    n = 400
    values = [None if i % 7 == 0 else b"\x00\xffv%d" % i for i in range(n)]
    keys = [None if i % 5 == 0 else "k✓%d".encode() % i for i in range(n)]
    produce(server, topic_name, values, keys=keys)
    cat = catalog(tmp_path)
    more = {"iceberg.tables.record-format": "kafka", "key.converter": BYTES,
            "value.converter": BYTES, "flush.size": "150"}
    columns = sink_task(tmp_path, topic_name, "lake.columns", **more)
    records = sink_task(tmp_path, topic_name, "lake.records", **more)
    for batch in sink_batches(server, topic_name, n, value_converter=BYTES):
        columns.put_batch(batch)
        assert batch._records is None, "put_batch made the batch's SinkRecords"
        records.put(batch.records())
    for task in (columns, records):
        task.pre_commit({(topic_name, 0): n // 2, (topic_name, 1): n // 2})
    order = ["partition", "offset"]
    got, want = contents(cat, "lake.columns", order), contents(cat, "lake.records", order)
    assert got == want
    assert len(got[1]) == n and sum(r["value"] is None for r in got[1]) == 58
    assert {str(r["timestamp"].tzinfo) for r in got[1]} == {"UTC"}
    assert [r["timestampType"] for r in got[1]] == [0] * n


@pytest.mark.parametrize("fmt", ["schemaless", "avro"])
def test_schemaless_json_and_avro_batches_write_the_table_the_per_record_path_writes(
        server, topic_name, tmp_path, fmt):
    """The other two common value formats' batches, read as Arrow columns
    (batch_readers.py), become the table ``put`` of the same records makes:
    schemaless JSON objects (nested structs and lists too, a key missing
    here and there), Avro records through the registry (every flat type
    the batch reader takes, NULLs)."""
    from kafkalite.connect.converters import ColumnarValues, JsonConverter
    from kafkalite.connect.data import Schema
    from kafkalite.connect.registry_converters import AvroConverter
    create(server, topic_name, 2)
    n = 600
    if fmt == "schemaless":
        conv = JsonConverter()
        conv.configure({"schemas.enable": "false"}, False)
        objs = [{**payload(i), "tags": [TEXTS[i % 9], None] if i % 4 else [],
                 "meta": {"k": i % 3, "s": None if i % 5 else "x"}} for i in range(n)]
        values = [json.dumps({k: v for k, v in o.items() if k != "ok" or i % 11}).encode()
                  for i, o in enumerate(objs)]
    else:
        url = {"schema.registry.url": server.info["schema_registry"]}
        conv, writer, json_conv = AvroConverter(), AvroConverter(), JsonConverter()
        for c in (conv, writer, json_conv):
            c.configure(url, False)
        schema = Schema.from_json({"type": "struct", "optional": False, "fields": FIELDS})
        values = [writer.from_connect_data(topic_name, schema,
                                           json_conv.to_connect_data("t", envelope(
                                               FIELDS, payload(i)))[1]) for i in range(n)]
    produce(server, topic_name, values)
    cat = catalog(tmp_path)
    more = {"flush.size": "250"}
    columns = sink_task(tmp_path, topic_name, "lake.columns", **more)
    records = sink_task(tmp_path, topic_name, "lake.records", **more)
    for batch in sink_batches(server, topic_name, n, value_converter=conv):
        assert isinstance(batch.values, ColumnarValues), "no Arrow columns: the test shows nothing"
        columns.put_batch(batch)
        assert batch._records is None, "put_batch made the batch's SinkRecords"
        records.put(batch.records())
    for task in (columns, records):
        task.pre_commit({(topic_name, 0): n // 2, (topic_name, 1): n // 2})
    order = ["__kafka_partition", "__kafka_offset"]
    got, want = contents(cat, "lake.columns", order), contents(cat, "lake.records", order)
    assert got[0] == want[0] and got[2:] == want[2:]
    assert len(got[1]) == n and equal_rows(got[1], want[1])


def test_a_batch_the_column_path_cannot_take_goes_record_by_record(
        server, topic_name, tmp_path):
    """Values whose schema changes within a batch (a field added, then an
    old producer again) and tombstones come without Arrow columns: put_batch
    writes them as ``put`` does, the table evolved to the new field."""
    create(server, topic_name, 1)
    v1, v2 = FIELDS[:3], FIELDS[:3] + [{"field": "score", "type": "float64", "optional": True}]
    values = []
    for i in range(300):
        values.append(None if i % 50 == 7 else envelope(v2, {**payload(i), "score": i / 4})
                      if i % 3 == 0 else envelope(v1, {"id": i, "small": 1, "name": f"n{i}"}))
    produce(server, topic_name, values, partitions=1)
    cat = catalog(tmp_path)
    columns = sink_task(tmp_path, topic_name, "lake.columns", partitions=1)
    records = sink_task(tmp_path, topic_name, "lake.records", partitions=1)
    batches = sink_batches(server, topic_name, 300, partitions=1)
    assert all(isinstance(b.value_schema, list) for b in batches), \
        "one schema per batch: the test shows nothing"
    for batch in batches:
        columns.put_batch(batch)
        records.put(batch.records())
    for task in (columns, records):
        task.pre_commit({(topic_name, 0): 300})
    got, want = contents(cat, "lake.columns", ["__kafka_offset"]), \
        contents(cat, "lake.records", ["__kafka_offset"])
    assert got == want
    rows = got[1]
    assert [r["id"] for r in rows] == [i for i in range(300) if i % 50 != 7]
    assert all((r["score"] == r["id"] / 4) if r["id"] % 3 == 0 else r["score"] is None
               for r in rows)


def test_a_restarted_task_writes_each_record_once_from_batches(server, topic_name, tmp_path):
    """A task commits batches to the table, then is restarted (a new task,
    as after a crash between the table's commit and the group's): it seeks
    to the table's offsets, and the records before them that the consumer
    still hands over (fetched from the group's older offsets before the seek
    took hold) are dropped: every record lands once, and the snapshot's
    offsets are the topic's ends."""
    from kafkalite.connect.api import SinkRecordBatch
    create(server, topic_name, 2)
    produce(server, topic_name, [envelope(FIELDS, payload(i)) for i in range(600)])
    cat = catalog(tmp_path)
    first = sink_task(tmp_path, topic_name, "lake.resumed")
    batches = sink_batches(server, topic_name, 600)
    taken = 0
    for batch in batches:
        if taken >= 400:
            break
        first.put_batch(batch)
        taken += len(batch)
    done = first.pre_commit({(topic_name, 0): 300, (topic_name, 1): 300})
    assert sum(done.values()) == taken
    again = sink_task(tmp_path, topic_name, "lake.resumed")
    assert again.context.seeks == done
    for batch in batches:           # everything again, from offset 0 of each partition
        assert isinstance(batch, SinkRecordBatch)
        again.put_batch(batch)
    again.pre_commit({(topic_name, 0): 300, (topic_name, 1): 300})
    got = contents(cat, "lake.resumed", ["__kafka_partition", "__kafka_offset"])
    assert [(r["__kafka_partition"], r["__kafka_offset"]) for r in got[1]] == \
        [(p, o) for p in (0, 1) for o in range(300)]
    assert got[2] == {topic_name: {"0": 300, "1": 300}}


def test_time_and_decimal_fields_reach_the_table_as_their_logical_types(
        server, topic_name, tmp_path):
    """Connect's Time (ms of the day) and Decimal (the JsonConverter's base64
    of the unscaled value, Kafka's default) come out of the converter as
    datetime.time and decimal.Decimal: the table has Iceberg's time and
    decimal columns holding them (both failed to make the Arrow table)."""
    import base64
    import datetime
    import decimal
    create(server, topic_name, 1)
    fields = FIELDS[:1] + [
        {"field": "at_time", "type": "int32", "optional": True,
         "name": "org.apache.kafka.connect.data.Time", "version": 1},
        {"field": "price", "type": "bytes", "optional": True,
         "name": "org.apache.kafka.connect.data.Decimal", "version": 1,
         "parameters": {"scale": "2"}}]

    def unscaled(d: decimal.Decimal) -> str:
        n = int(d.scaleb(2))
        return base64.b64encode(n.to_bytes((n.bit_length() + 8) // 8, "big", signed=True)).decode()

    prices = [decimal.Decimal(x) for x in ("12.34", "-876.54", "0.01", "99999999999999999.99")]
    values = [envelope(fields, {"id": i, "at_time": None if i == 3 else i * 3_600_001,
                                "price": None if i == 2 else unscaled(prices[i % 4])})
              for i in range(8)]
    produce(server, topic_name, values, partitions=1)
    cat = catalog(tmp_path)
    task = sink_task(tmp_path, topic_name, "lake.logical", partitions=1)
    for batch in sink_batches(server, topic_name, 8, partitions=1):
        task.put_batch(batch)
    task.pre_commit({(topic_name, 0): 8})
    t = cat.load_table("lake.logical")
    types = {f.name: str(f.field_type) for f in t.schema().fields}
    assert types["at_time"] == "time" and types["price"].startswith("decimal("), types
    rows = sorted(t.scan().to_arrow().to_pylist(), key=lambda r: r["id"])
    assert [r["at_time"] for r in rows] == [
        None if i == 3 else (datetime.datetime.min + datetime.timedelta(
            milliseconds=i * 3_600_001)).time() for i in range(8)]
    assert [r["price"] for r in rows] == [None if i == 2 else prices[i % 4] for i in range(8)]


class _WorkerContext(_Context):
    """The worker's side a task asks about: each partition's lag (``lags``,
    None: a consumer that keeps no end), and whether the commit under way
    is the interval's own."""

    def __init__(self, topic, lags):
        super().__init__()
        self.topic, self.lags, self.requests = topic, lags, 0

    def current_lag(self, topic, partition):
        return self.lags[partition]

    def assignment(self):
        return [(self.topic, p) for p in self.lags]

    def request_commit(self):
        self.requests += 1

    def interval_commit(self):
        return True


@pytest.mark.parametrize("lags,snapshots", [({0: 5, 1: 0}, 0), ({0: None, 1: 0}, 1)],
                         ids=["behind", "end-unknown"])
def test_the_interval_commit_waits_for_the_backlog_end_only_where_it_is_known(
        server, topic_name, tmp_path, lags, snapshots):
    """A task reading a backlog (a partition still 5 records behind) lets
    the worker's interval commit pass; at the fifth in a row it commits.
    Where the consumer keeps no end (a lag of None) the backlog's end would
    never be seen: the interval commits as it always did. The code before
    committed at every interval."""
    from kafkalite.client import TopicPartition
    from kafkalite.connect.connectors.iceberg import IcebergSinkTask
    create(server, topic_name, 2)
    produce(server, topic_name, [envelope(FIELDS, payload(i)) for i in range(20)])
    task = IcebergSinkTask()
    task.initialize(_WorkerContext(topic_name, lags))
    task.start({"name": "ice", **sink_config(tmp_path, topic_name, "lake.interval")})
    task.open([TopicPartition(topic_name, p) for p in range(2)])
    for batch in sink_batches(server, topic_name, 20):
        task.put_batch(batch)
    cat = catalog(tmp_path)
    offsets = {(topic_name, 0): 10, (topic_name, 1): 10}

    def table_snapshots():
        return len(cat.load_table("lake.interval").metadata.snapshots) \
            if cat.table_exists("lake.interval") else 0
    task.pre_commit(offsets)
    assert table_snapshots() == snapshots
    for _ in range(4):                  # docs/connect.md: at most 4 let pass in a row
        task.pre_commit(offsets)
    assert table_snapshots() == 1, "a long backlog still commits every fifth interval"
    assert task.context.requests == 0
