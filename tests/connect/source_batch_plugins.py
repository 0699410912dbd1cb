"""A source connector for the worker's batch path (``poll()`` returning
SourceRecordBatches with per-record keys, timestamps and headers):
``source_batch_plugins:HeaderBatchSourceConnector``. Its task sends
``batches`` batches of ``size`` records to ``topic``, resuming after its
stored ``{"batch": n}``; record j (counted over all batches) is
``expected_record(j)``. With ``bad.index`` the value at that index of each
batch is a str, which ByteArrayConverter refuses. Each ``commit_batch``
call appends ``{"batch": n, "records": len}`` to ``events.file``, each
``commit_record`` call ``{"record": source offset}``."""
from __future__ import annotations

import json
import time

from kafkalite.connect import SourceConnector, SourceRecordBatch, SourceTask
from kafkalite.connect.data import Field, Schema

TS0 = 1_600_000_000_000


def expected_record(j: int) -> tuple:
    """(key, value, headers as the topic holds them, timestamp or None for
    "stamped when produced") of record j: null keys, null values, binary
    bytes, no headers, str and null header values, a ``drop`` header."""
    key = None if j % 3 == 0 else f"k{j}".encode()
    value = None if j % 5 == 0 else bytes([j % 256, 0, 255]) * (j % 7) + f"v{j}".encode()
    if j % 4 == 0:
        headers = []
    else:
        headers = [("seq", str(j).encode()), ("text", f"ü{j}".encode())]
        if j % 4 == 1:
            headers.append(("drop", b"1"))
        if j % 4 == 2:
            headers.append(("nullh", None))
    ts = None if j % 11 == 0 else TS0 + j * 1000
    return key, value, headers, ts


class HeaderBatchSourceConnector(SourceConnector):
    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return HeaderBatchSourceTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]


class HeaderBatchSourceTask(SourceTask):
    def start(self, props):
        self.topic = props["topic"]
        self.batches, self.size = int(props["batches"]), int(props["size"])
        self.bad = int(props.get("bad.index", -1))
        self.events = props["events.file"]
        off = self.context.offset_storage_reader().offset({"source": "headers"})
        self.next = off["batch"] + 1 if off else 0

    def poll(self):
        if self.next >= self.batches:
            time.sleep(0.05)
            return None
        b = self.next
        self.next += 1
        keys, values, stamps, headers = [], [], [], []
        for j in range(b * self.size, (b + 1) * self.size):
            key, value, hs, ts = expected_record(j)
            keys.append(key)
            values.append(value)
            stamps.append(ts)
            # the str header value goes in as str: the worker encodes it (UTF-8)
            headers.append([(k, v.decode() if k == "text" else v) for k, v in hs] or None)
        if self.bad >= 0:
            values[self.bad] = "not bytes"
        return [SourceRecordBatch(self.topic, Schema.OPTIONAL_BYTES, values,
                                  source_partition={"source": "headers"},
                                  source_offset={"batch": b}, kafka_partition=0,
                                  key_schema=Schema.OPTIONAL_BYTES, keys=keys,
                                  timestamps=stamps, headers=headers)]

    def _log(self, doc):
        with open(self.events, "a") as f:
            f.write(json.dumps(doc) + "\n")

    def commit_batch(self, batch):
        self._log({"batch": batch.source_offset["batch"], "records": len(batch)})

    def commit_record(self, record, metadata):
        self._log({"record": record.source_offset})


# ``source_batch_plugins:TombstoneBatchSourceConnector``: one batch of ``size``
# struct records to ``topic`` whose every third is a tombstone (``tombstones``:
# null value, no schema), as the CDC source sends a delete's tombstone amid a
# table's changes; keys are structs too.
TOMBSTONE_VALUE = Schema("struct", True, "tomb.Value", fields=(
    Field("id", Schema.INT64), Field("name", Schema.OPTIONAL_STRING)))
TOMBSTONE_KEY = Schema("struct", False, "tomb.Key", fields=(Field("id", Schema.INT64),))


class TombstoneBatchSourceConnector(HeaderBatchSourceConnector):
    def task_class(self):
        return TombstoneBatchSourceTask


class TombstoneBatchSourceTask(SourceTask):
    def start(self, props):
        self.topic, self.size = props["topic"], int(props["size"])
        self.sent = bool(self.context.offset_storage_reader().offset({"source": "tomb"}))

    def poll(self):
        if self.sent:
            time.sleep(0.05)
            return None
        self.sent = True
        n = self.size
        gone = [j for j in range(n) if j % 3 == 2]
        return SourceRecordBatch(
            self.topic, TOMBSTONE_VALUE,
            [None if j in gone else {"id": j, "name": f"ü{j}"} for j in range(n)],
            source_partition={"source": "tomb"}, source_offset={"sent": n},
            kafka_partition=0, key_schema=TOMBSTONE_KEY, keys=[{"id": j} for j in range(n)],
            timestamp=TS0, tombstones=gone)
