"""A connector for the lifecycle tests, named by its Python path
(``connect_plugins:ShardedSourceConnector``): one task per shard of
``SHARDS`` (which a test changes, then asks for task reconfiguration);
each task sends ``<shard>-<n>`` records, resuming at its stored offset;
its KIP-875 alter_offsets hook appends each call to ``alter.log`` (a JSON
line), refuses a partition of shard ``refuse-me`` and answers
``alter.handled``.
StallingSinkConnector: a sink whose first put stalls, writing its open,
close and put calls to ``events.file``. SeekingSinkConnector: a sink that,
as an exactly-once sink does, seeks every partition it opens to its own
stored offset (``seek.offset``) and writes each put record's offset to
``events.file``."""
from __future__ import annotations

import json
import threading

import time

from kafkalite.connect import SinkConnector, SinkTask, SourceConnector, SourceRecord, SourceTask
from kafkalite.connect.data import Schema

SHARDS = {"value": ["s0"]}


class ShardedSourceConnector(SourceConnector):
    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return ShardedSourceTask

    def task_configs(self, max_tasks):
        shards = SHARDS["value"]
        n = min(max_tasks, len(shards))
        return [{**self.props, "shards": ",".join(shards[i::n])} for i in range(n)]

    def alter_offsets(self, connector_config, offsets):
        if connector_config.get("alter.log"):
            with open(connector_config["alter.log"], "a") as f:
                f.write(json.dumps(offsets) + "\n")
        if any(p.get("shard") == "refuse-me" for p, _ in offsets):
            raise ValueError("shard refuse-me cannot be moved")
        return connector_config.get("alter.handled") == "true"


class ShardedSourceTask(SourceTask):
    def start(self, props):
        self.topic, self.limit = props["topic"], int(props.get("records.per.shard", 5))
        self.next = {}
        for s in props["shards"].split(","):
            off = self.context.offset_storage_reader().offset({"shard": s})
            self.next[s] = off["n"] + 1 if off else 0
        self.stopped = threading.Event()

    def poll(self):
        out = []
        for s, n in self.next.items():
            if n < self.limit:
                out.append(SourceRecord(self.topic, None, None, None, Schema.STRING, f"{s}-{n}",
                                        source_partition={"shard": s}, source_offset={"n": n}))
                self.next[s] = n + 1
        if not out:
            self.stopped.wait(0.05)
        return out


class TransactionalSourceConnector(SourceConnector):
    """Sends r0..r<count-1>, committing a transaction after every 5th
    record and aborting once when it reaches ``abort.at`` (then resuming at
    its last committed offset): transaction.boundary=connector."""

    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return TransactionalSourceTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]


class TransactionalSourceTask(SourceTask):
    def start(self, props):
        self.topic, self.count = props["topic"], int(props["count"])
        self.abort_at, self.aborted = int(props.get("abort.at", -1)), False
        self.next = self._resume()
        self.stopped = threading.Event()

    def _resume(self):
        off = self.context.offset_storage_reader().offset({"source": "r"})
        return off["n"] + 1 if off else 0

    def poll(self):
        if self.next is None:
            self.next = self._resume()
        if self.next >= self.count:
            self.stopped.wait(0.05)
            return []
        out = []
        txn = self.context.transaction_context()
        for n in range(self.next, min(self.next + 3, self.count)):
            r = SourceRecord(self.topic, None, None, None, Schema.STRING, f"r{n}",
                             source_partition={"source": "r"}, source_offset={"n": n})
            out.append(r)
            if n == self.abort_at and not self.aborted:
                self.aborted = True
                txn.abort_transaction(r)
                self.next = None        # resume at the committed offset, after the abort
                return out
            if n % 5 == 4:
                txn.commit_transaction(r)
        self.next = n + 1
        return out

    def commit(self):
        pass


class StallingSinkConnector(SinkConnector):
    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return StallingSinkTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]


class StallingSinkTask(SinkTask):
    """Its first put sleeps ``stall.ms`` (past the consumer's
    max.poll.interval.ms, so the group drops it); every call is a line of
    ``events.file``: ``open <partitions>``, ``close <partitions>``, ``put
    <first offset>``."""

    def start(self, props):
        self.events, self.stall = props["events.file"], int(props["stall.ms"]) / 1000

    def _log(self, line):
        with open(self.events, "a") as f:
            f.write(line + "\n")

    def open(self, partitions):
        self._log("open " + ",".join(str(p.partition) for p in partitions))

    def close(self, partitions):
        self._log("close " + ",".join(str(p.partition) for p in partitions))

    def put(self, records):
        if records:
            self._log(f"put {records[0].kafka_offset}")
            if self.stall:
                time.sleep(self.stall)
                self.stall = 0

    def stop(self):
        pass


class SeekingSinkConnector(StallingSinkConnector):
    def task_class(self):
        return SeekingSinkTask


class SeekingSinkTask(SinkTask):
    def start(self, props):
        self.events, self.seek = props["events.file"], int(props["seek.offset"])

    def open(self, partitions):
        self.context.offset({(p.topic, p.partition): self.seek for p in partitions})

    def put(self, records):
        with open(self.events, "a") as f:
            f.writelines(f"{r.kafka_offset}\n" for r in records)

    def stop(self):
        pass


class BatchSourceConnector(SourceConnector):
    """The bulk path's source: ``batches`` SourceRecordBatches of ``size``
    string values ``<batch>-<i>`` to ``topic``, resuming after its stored
    ``{"batch": n}``."""

    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return BatchSourceTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]


class BatchSourceTask(SourceTask):
    def start(self, props):
        from kafkalite.connect import SourceRecordBatch
        self.batch_class = SourceRecordBatch
        self.topic = props["topic"]
        self.batches, self.size = int(props["batches"]), int(props["size"])
        off = self.context.offset_storage_reader().offset({"source": "batches"})
        self.next = off["batch"] + 1 if off else 0

    def poll(self):
        if self.next >= self.batches:
            time.sleep(0.05)
            return None
        b = self.next
        self.next += 1
        return self.batch_class(self.topic, Schema.STRING,
                                [f"{b}-{i}" for i in range(self.size)],
                                source_partition={"source": "batches"},
                                source_offset={"batch": b})


class BatchSinkConnector(SinkConnector):
    """A sink with ``put_batch``: each call's record count and values, as a
    JSON line in ``events.file``; a ``put`` (the per-record path) writes
    ``{"put": count}``."""

    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return BatchSinkTask

    def task_configs(self, max_tasks):
        return [dict(self.props)]


class BatchSinkTask(SinkTask):
    def start(self, props):
        self.events = props["events.file"]

    def _log(self, doc):
        with open(self.events, "a") as f:
            f.write(json.dumps(doc) + "\n")

    def put_batch(self, batch):
        self._log({"put_batch": len(batch), "values": list(batch.values),
                   "offsets": [r.kafka_offset for r in batch.records()]})

    def put(self, records):
        self._log({"put": len(records), "values": [r.value for r in records]})
