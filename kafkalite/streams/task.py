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

from kafkalite.streams.stores import KeyValueStore, RocksDBKeyValueStore, WindowStore
from kafkalite.streams.topology import SubTopology, Topology


class StreamTask:
    def __init__(self, topology: Topology, sub: SubTopology, partition: int,
                 application_id: str, state_dir: str | None, default_store: str = "rocksdb"):
        self.topology, self.sub, self.partition = topology, sub, partition
        self.application_id = application_id
        self.id = f"{sub.id}_{partition}"
        self.sources = {topology.topic_name(t, application_id): node
                        for t, node in sub.sources.items()}
        self.stores = {}
        for name, spec in sub.stores.items():
            kind = spec.kind or default_store
            if kind == "rocksdb":
                if state_dir is None:
                    raise ValueError("RocksDB stores need state.dir")
                store = RocksDBKeyValueStore(name, spec.value_serde,
                                             os.path.join(state_dir, application_id, self.id,
                                                          name), spec.logged)
            else:
                store = KeyValueStore(name, spec.value_serde, spec.logged)
            self.stores[name] = store if spec.window_size_ms is None else \
                WindowStore(store, spec.window_size_ms, spec.retention_ms, spec.time_suffix)
        self.changelogs = {spec.changelog(application_id): name
                           for name, spec in sub.stores.items() if spec.logged}
        self.node_state: dict = {}
        self.metrics = collections.Counter(dropped_records=0, processed=0)
        self._outputs: list = []

    def store(self, name: str):
        return self.stores[name]

    # ---- what nodes call ----
    def emit(self, topic: str, keys, values, timestamps, internal: bool) -> None:
        name = f"{self.application_id}-{topic}" if internal else topic
        self._outputs.append((name, keys, values, timestamps))

    # ---- what the runner calls ----
    def process(self, topic: str, consumer_batch) -> None:
        """Records of this task's partition of ``topic`` (a consumer batch)."""
        self.metrics["processed"] += consumer_batch.num_rows
        self.sources[topic].process_input(self, consumer_batch)

    def take_outputs(self) -> list:
        """[(topic, keys, values, timestamps)]: binary key and value arrays."""
        out, self._outputs = self._outputs, []
        return out

    def take_changelog(self) -> list:
        """[(changelog topic, keys, values)] for this task's partition."""
        out = []
        for topic, name in self.changelogs.items():
            got = self.stores[name].take_changelog()
            if got is not None:
                out.append((topic, got[0], got[1]))
        return out

    def discard_changelog(self) -> None:
        for store in self.stores.values():
            store.discard_changelog()
        self._outputs = []

    def flush(self) -> None:
        for store in self.stores.values():
            store.flush()

    def close(self) -> None:
        for store in self.stores.values():
            store.close()
