"""A source connector for the zombie fencing tests, named by its Python path
(``connect_fencing_plugins:TaskPerPartitionSourceConnector``): ``tasks.max``
tasks, task ``i`` writing ``<tag>-<i>-<n>`` to partition ``i`` of ``topic``
(one record a poll, every ``poll.interval.ms``), resuming at its stored
offset."""
from __future__ import annotations

import threading

from kafkalite.connect import SourceConnector, SourceRecord, SourceTask
from kafkalite.connect.data import Schema


class TaskPerPartitionSourceConnector(SourceConnector):
    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return TaskPerPartitionSourceTask

    def task_configs(self, max_tasks):
        return [{**self.props, "task": str(i)} for i in range(max_tasks)]


class TaskPerPartitionSourceTask(SourceTask):
    def start(self, props):
        self.topic, self.tag, self.task = props["topic"], props["tag"], int(props["task"])
        self.interval = int(props.get("poll.interval.ms", 50)) / 1000
        off = self.context.offset_storage_reader().offset({"task": self.task})
        self.next = off["n"] + 1 if off else 0
        self.stopped = threading.Event()

    def poll(self):
        self.stopped.wait(self.interval)
        n, self.next = self.next, self.next + 1
        return [SourceRecord(self.topic, self.task, None, None, Schema.STRING,
                             f"{self.tag}-{self.task}-{n}", source_partition={"task": self.task},
                             source_offset={"n": n})]

    def stop(self):
        self.stopped.set()
