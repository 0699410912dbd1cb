"""Connectors for the schema-registry converter tests
(test_registry_converters.py), named by their Python path.

StructSourceConnector: ``count`` records of ROW (a struct of the types the
converters map) to ``topic``, values ``row(i)``, then idle.
RecordingSinkConnector: each put record's value schema and value appended
to ``PUT[props["sink.id"]]`` (the worker runs in the test's process).
"""
from __future__ import annotations

import datetime as dt
import decimal
import time

from kafkalite.connect import SinkConnector, SinkTask, SourceConnector, SourceRecord, SourceTask
from kafkalite.connect.data import DECIMAL, Field, Schema

PUT: dict = {}

ADDRESS = Schema("struct", optional=True, name="demo.Address",
                 fields=(Field("city", Schema.STRING),))
ROW = Schema("struct", name="demo.Row", fields=(
    Field("id", Schema.INT32), Field("name", Schema.OPTIONAL_STRING),
    Field("score", Schema.FLOAT64), Field("big", Schema.INT64),
    Field("active", Schema.BOOLEAN), Field("raw", Schema.OPTIONAL_BYTES),
    Field("at", Schema.TIMESTAMP), Field("day", Schema.OPTIONAL_DATE),
    Field("price", Schema("bytes", name=DECIMAL, version=1, parameters={"scale": "2"})),
    Field("tags", Schema("array", value_schema=Schema.STRING)),
    Field("counts", Schema("map", key_schema=Schema.STRING, value_schema=Schema.INT32)),
    Field("address", ADDRESS)))
AT = dt.datetime(2024, 5, 6, 7, 8, 9, 123000, tzinfo=dt.timezone.utc)


def row(i: int) -> dict:
    return {"id": i, "name": None if i % 3 == 0 else f"user-{i}", "score": i / 4,
            "big": (1 << 40) + i, "active": i % 2 == 0, "raw": bytes([i, 255]),
            "at": AT + dt.timedelta(seconds=i), "day": dt.date(2024, 2, 29) if i % 2 else None,
            "price": decimal.Decimal(f"{i}.25"), "tags": [f"t{i}", "x"], "counts": {"n": i},
            "address": {"city": f"city-{i}"} if i % 2 else None}


class StructSourceConnector(SourceConnector):
    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return StructSourceTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]


class StructSourceTask(SourceTask):
    def start(self, props):
        self.topic, self.count, self.sent = props["topic"], int(props["count"]), False

    def poll(self):
        if self.sent:
            time.sleep(0.05)
            return None
        self.sent = True
        return [SourceRecord(self.topic, None, Schema.OPTIONAL_STRING, f"k{i}", ROW, row(i),
                             source_partition={"source": "rows"}, source_offset={"n": i})
                for i in range(self.count)]


class RecordingSinkConnector(SinkConnector):
    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return RecordingSinkTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]


class RecordingSinkTask(SinkTask):
    def start(self, props):
        self.out = PUT.setdefault(props["sink.id"], [])

    def put(self, records):
        self.out.extend((r.value_schema, r.value) for r in records)
