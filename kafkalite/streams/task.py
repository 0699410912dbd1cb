"""StreamTask: one sub-topology on one partition, with its state stores.

Task ``<sub-topology>_<partition>`` (Kafka's task id) gets the records of
partition p of every source topic of its sub-topology, runs them through the
nodes, and collects what they produce: output records (``take_outputs``) and
store changes for the changelog topics' partition p (``take_changelog``).
Whoever runs the task (the TopologyTestDriver or KafkaStreams) decides where
those go. One thread uses a task at a time.
"""
from __future__ import annotations

import collections
import os
import time

import pyarrow as pa
import pyarrow.compute as pc

from kafkalite.streams.errors import ErrorContext, ErrorHandling
from kafkalite.streams.stores import KeyValueStore, RocksDBKeyValueStore, WindowStore
from kafkalite.streams.topology import SubTopology, Topology


class StreamTask:
    def __init__(self, topology: Topology, sub: SubTopology, partition: int,
                 application_id: str, state_dir: str | None, default_store: str = "rocksdb",
                 errors: ErrorHandling | None = None, global_stores: dict | None = None):
        self.topology, self.sub, self.partition = topology, sub, partition
        self.application_id = application_id
        self.id = f"{sub.id}_{partition}"
        # the task's state directory: its RocksDB stores and checkpoint (restore.py)
        self.dir = os.path.join(state_dir, application_id, self.id) if state_dir else None
        self.changelog_records = 0      # changelog records taken since the last checkpoint
        # a standby task: {(changelog, partition): next offset} its stores hold
        # the changelog up to (restore.start_offsets starts there on promotion)
        self.restored_to: dict | None = None
        self.sources = {topology.topic_name(t, application_id): node
                        for t, node in sub.sources.items()}
        self.stores = {}
        for name, spec in sub.stores.items():
            kind = spec.kind or default_store
            if kind == "rocksdb":
                if state_dir is None:
                    raise ValueError("RocksDB stores need state.dir")
                store = RocksDBKeyValueStore(name, spec.value_serde,
                                             os.path.join(self.dir, name), spec.logged)
            else:
                store = KeyValueStore(name, spec.value_serde, spec.logged)
            self.stores[name] = store if spec.window_size_ms is None else \
                WindowStore(store, spec.window_size_ms, spec.retention_ms, spec.time_suffix)
        self.changelogs = {spec.changelog(application_id): name
                           for name, spec in sub.stores.items() if spec.logged}
        self.global_stores = global_stores or {}     # shared by the instance's tasks
        self.errors = errors or ErrorHandling()
        self.node_state: dict = {}
        self._dead_letters: list = []
        self._input = None          # (topic, consumer batch) being processed
        self.punctuators: list = []     # Processor API nodes with a processor in this task
        self.wall_clock = lambda: int(time.time() * 1000)   # the driver sets its own
        self.metrics = collections.Counter(dropped_records=0, processed=0)
        self._outputs: list = []

    def store(self, name: str):
        return self.stores[name]

    def global_store(self, name: str):
        return self.global_stores[name]

    # ---- what nodes call ----
    def emit(self, topic: str, keys, values, timestamps, internal: bool,
             headers: list | None = None) -> None:
        name = f"{self.application_id}-{topic}" if internal else topic
        self._outputs.append((name, keys, values, timestamps, headers))

    def emit_dead_letter(self, topic, key, value, timestamp, headers) -> None:
        self._dead_letters.append((topic, key, value, timestamp, headers))

    def record_error(self, kind: str, consumer_row, exc, node=None) -> None:
        """A source record (a one-row consumer batch) failed: to the handler."""
        col = consumer_row.column
        self.errors.handle(self, ErrorContext(
            kind, self._input[0], col("partition")[0].as_py(), col("offset")[0].as_py(),
            col("timestamp").cast(pa.int64())[0].as_py(), col("key")[0].as_py(),
            col("value")[0].as_py(), node, self.id), exc)

    def processing_error(self, node, row, exc) -> None:
        """``node`` raised on ``row`` (a one-row topology batch): find the
        source record it came from in the input being processed."""
        topic, consumer_batch = self._input
        offset = row.column("offset")[0].as_py()
        at = pc.index(consumer_batch.column("offset"), offset).as_py() if offset is not None \
            else -1
        if at >= 0:
            self.record_error("processing", consumer_batch.slice(at, 1), exc, node.name)
            return
        # a row no single input record made (a join's or suppression's late emit)
        self.errors.handle(self, ErrorContext(
            "processing", topic, self.partition, -1, row.column("timestamp")[0].as_py(), None,
            None, node.name, self.id), exc)

    # ---- what the runner calls ----
    def process(self, topic: str, consumer_batch) -> None:
        """Records of this task's partition of ``topic`` (a consumer batch)."""
        self._input = (topic, consumer_batch)
        try:
            self.sources[topic].process_input(self, consumer_batch)
        finally:
            self._input = None
            # counted once the batch is in the stores: a reader that waits for
            # "processed" (interactive queries, the tests) then sees its writes
            self.metrics["processed"] += consumer_batch.num_rows

    def punctuate(self, now_ms: int) -> None:
        """Wall-clock punctuators that are due (processor_api.py)."""
        for node in self.punctuators:
            node.punctuate_wall_clock(self, now_ms)

    def stream_times(self) -> dict:
        """{node name: stream time} of the nodes that keep one (windows,
        joins, suppression, processors): what a commit records."""
        return {name: st["stream_time"] for name, st in self.node_state.items()
                if isinstance(st, dict) and st.get("stream_time", -1) >= 0}

    def resume(self, stream_times: dict) -> None:
        """Back to a commit: the nodes' stream times as they were, and the
        Processor API's processors created afresh (their in-memory state
        may hold work that did not count), as Kafka re-creates a task."""
        for node in self.punctuators:
            node.close_task(self)
            self.node_state.pop(node.name, None)
        self.punctuators = []
        for name, st in list(self.node_state.items()):
            if isinstance(st, dict) and "stream_time" in st:
                st["stream_time"] = -1
        for name, st in stream_times.items():
            self.node_state.setdefault(name, {})["stream_time"] = int(st)

    def take_dead_letters(self) -> list:
        """[(topic, key, value, timestamp, headers)] for the dead-letter queue."""
        out, self._dead_letters = self._dead_letters, []
        return out

    def take_outputs(self) -> list:
        """[(topic, keys, values, timestamps, headers)]: binary key and value
        arrays, int64 timestamps, headers None or a header list per record."""
        out, self._outputs = self._outputs, []
        return out

    def take_changelog(self) -> list:
        """[(changelog topic, keys, values)] for this task's partition."""
        out = []
        for topic, name in self.changelogs.items():
            got = self.stores[name].take_changelog()
            if got is not None:
                out.append((topic, got[0], got[1]))
                self.changelog_records += len(got[0])
        return out

    def discard_changelog(self) -> None:
        for store in self.stores.values():
            store.discard_changelog()
        self._outputs = []
        self._dead_letters = []

    def flush(self) -> None:
        for store in self.stores.values():
            store.flush()

    def close(self) -> None:
        for node in self.punctuators:
            node.close_task(self)
        self.punctuators = []
        for store in self.stores.values():
            store.close()

