"""A connector for the lifecycle tests, named by its Python path
(``connect_plugins:ShardedSourceConnector``): one task per shard of
``SHARDS`` (which a test changes, then asks for task reconfiguration);
each task sends ``<shard>-<n>`` records, resuming at its stored offset."""
from __future__ import annotations

import threading

from kafkalite.connect import SourceConnector, SourceRecord, SourceTask
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
