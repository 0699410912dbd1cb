"""TopologyTestDriver: run a topology without a broker (Kafka Streams'
TopologyTestDriver).

Every topic has one partition here, so each sub-topology runs as one task
(``<id>_0``). Input piped into a topic is serialized with the input topic's
serdes, processed at once, and what the topology writes lands in in-memory
output topics: repartition topics are fed straight back to the sub-topology
that reads them, changelog topics (``<application.id>-<store>-changelog``)
are readable like any output. Stores are inspected with
``get_key_value_store`` / ``get_window_store`` (keys are serialized key
bytes). A global table's topic piped in goes straight into its store.
``advance_wall_clock_time`` moves the driver's clock and fires the
Processor API's wall-clock punctuators that are due.
"""
from __future__ import annotations

import collections
import tempfile

import numpy as np
import pyarrow as pa

from kafkalite.client import arrow
from kafkalite.streams.errors import ErrorHandling
from kafkalite.streams.serdes import Serdes
from kafkalite.streams.stores import apply_global, global_store
from kafkalite.streams.task import StreamTask
from kafkalite.streams.topology import Topology


class TopologyTestDriver:
    def __init__(self, topology: Topology, config: dict | None = None,
                 initial_wall_clock_time_ms: int = 0):
        config = dict(config or {})
        self.application_id = config.get("application.id", "test-driver")
        self._tmp = None
        state_dir = config.get("state.dir")
        if state_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="kafkalite-streams-")
            state_dir = self._tmp.name
        self.topology = topology
        self.wall_clock_ms = initial_wall_clock_time_ms
        errors = ErrorHandling(config)
        default_store = config.get("default.dsl.store", "rocksdb")
        # global tables: one copy, read by every task; their topics are piped into it
        self.global_stores = {name: global_store(g.store, state_dir, self.application_id,
                                                 default_store)
                              for name, g in topology.global_tables.items()}
        self._global_topics = {g.topic: self.global_stores[name]
                               for name, g in topology.global_tables.items()}
        self.tasks = [StreamTask(topology, sub, 0, self.application_id, state_dir,
                                 default_store, errors, self.global_stores)
                      for sub in topology.subtopologies()]
        for task in self.tasks:
            task.wall_clock = lambda: self.wall_clock_ms
        self._readers = {t: task for task in self.tasks for t in task.sources}
        self._offsets: collections.Counter = collections.Counter()
        self.topics: dict[str, collections.deque] = collections.defaultdict(collections.deque)

    # ---- input ----
    def create_input_topic(self, topic, key_serde=None, value_serde=None) -> TestInputTopic:
        return TestInputTopic(self, topic, key_serde or Serdes.bytes(),
                              value_serde or Serdes.bytes())

    def pipe(self, topic: str, keys: pa.Array, values: pa.Array, timestamps) -> None:
        """Binary key and value columns into ``topic`` (the columnar way in)."""
        n = len(keys)
        if topic in self._global_topics:
            apply_global(self._global_topics[topic], pa.RecordBatch.from_arrays(
                [keys.cast(pa.binary()), values.cast(pa.binary())], ["key", "value"]))
            return
        if topic not in self._readers:
            raise ValueError(f"no source of the topology reads {topic!r}")
        start = self._offsets[topic]
        self._offsets[topic] += n
        batch = pa.RecordBatch.from_arrays([
            pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([topic])),
            pa.array(np.zeros(n, np.int32)),
            pa.array(np.arange(start, start + n, dtype=np.int64)),
            pa.array(np.asarray(timestamps, np.int64)).cast(pa.timestamp("ms", tz="UTC")),
            pa.array(np.zeros(n, np.int8)),
            keys.cast(pa.binary()), values.cast(pa.binary()),
            pa.array([[]] * n, arrow.HEADER_TYPE)], schema=arrow.SCHEMA)
        self._readers[topic].process(topic, batch)
        self._drain()

    def _drain(self) -> None:
        while True:
            internal = []
            for task in self.tasks:
                for topic, keys, values, ts, headers in task.take_outputs():
                    if topic in self._readers:
                        internal.append((topic, keys, values, ts))
                    else:
                        self.topics[topic].extend(zip(
                            keys.to_pylist(), values.to_pylist(), ts.to_pylist(),
                            [tuple(h or ()) for h in headers] if headers else
                            [()] * len(keys)))
                for topic, keys, values in task.take_changelog():
                    self.topics[topic].extend(zip(keys, values.to_pylist(),
                                                  [self.wall_clock_ms] * len(keys),
                                                  [()] * len(keys)))
                for topic, key, value, ts, headers in task.take_dead_letters():
                    self.topics[topic].append((key, value, ts, tuple(headers)))
            if not internal:
                return
            for topic, keys, values, ts in internal:
                self.pipe(topic, keys, values, ts.to_numpy())

    def advance_wall_clock_time(self, ms: int) -> None:
        """Move the clock; wall-clock punctuators that are due fire."""
        self.wall_clock_ms += int(ms)
        for task in self.tasks:
            task.punctuate(self.wall_clock_ms)
        self._drain()

    # ---- output and state ----
    def create_output_topic(self, topic, key_serde=None, value_serde=None) -> TestOutputTopic:
        return TestOutputTopic(self, topic, key_serde or Serdes.bytes(),
                               value_serde or Serdes.bytes())

    def _store(self, name):
        if name in self.global_stores:
            return self.global_stores[name]
        for task in self.tasks:
            if name in task.stores:
                return task.stores[name]
        raise KeyError(f"no store named {name!r}")

    def get_key_value_store(self, name: str):
        return self._store(name)

    def get_window_store(self, name: str):
        return self._store(name)

    def get_session_store(self, name: str):
        """Keys ``key bytes + session end + session start``."""
        return self._store(name)

    def metrics(self) -> collections.Counter:
        total = collections.Counter()
        for task in self.tasks:
            total.update(task.metrics)
        return total

    def close(self) -> None:
        for task in self.tasks:
            task.close()
        for store in self.global_stores.values():
            store.close()
        if self._tmp is not None:
            self._tmp.cleanup()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class TestInputTopic:
    __test__ = False    # not a pytest class

    def __init__(self, driver, topic, key_serde, value_serde):
        self.driver, self.topic = driver, topic
        self.key_serde, self.value_serde = key_serde, value_serde
        self._time = 0

    def pipe_input(self, key=None, value=None, timestamp: int | None = None) -> None:
        self.pipe_record_list([(key, value, timestamp)])

    def pipe_key_value_list(self, pairs) -> None:
        self.pipe_record_list([(k, v, None) for k, v in pairs])

    def pipe_record_list(self, records) -> None:
        """(key, value, timestamp) triples; a None timestamp is the last one."""
        if not records:
            return
        ts = []
        for _, _, t in records:
            self._time = self._time if t is None else t
            ts.append(self._time)
        keys = self.key_serde.serialize(self.key_serde.to_column([r[0] for r in records]))
        values = self.value_serde.serialize(self.value_serde.to_column([r[1] for r in records]))
        self.driver.pipe(self.topic, keys, values, ts)


class TestOutputTopic:
    __test__ = False

    def __init__(self, driver, topic, key_serde, value_serde):
        self.driver, self.topic = driver, topic
        self.key_serde, self.value_serde = key_serde, value_serde

    def read_records_to_list(self) -> list[tuple]:
        """(key, value, timestamp) of every record not read yet."""
        return [r[:3] for r in self.read_records_with_headers()]

    def read_records_with_headers(self) -> list[tuple]:
        """(key, value, timestamp, headers) of every record not read yet;
        headers as (name, bytes) pairs."""
        q = self.driver.topics[self.topic]
        got = [q.popleft() for _ in range(len(q))]
        if not got:
            return []
        keys = self.key_serde.deserialize(pa.array([g[0] for g in got], pa.binary())).to_pylist()
        values = self.value_serde.deserialize(pa.array([g[1] for g in got], pa.binary()))
        return list(zip(keys, values.to_pylist(), [g[2] for g in got], [g[3] for g in got]))

    def read_key_values_to_list(self) -> list[tuple]:
        return [(k, v) for k, v, _ in self.read_records_to_list()]

    def read_key_values_to_map(self) -> dict:
        """The latest value per key (a null value deletes the key)."""
        out = {}
        for k, v in self.read_key_values_to_list():
            if v is None:
                out.pop(k, None)
            else:
                out[k] = v
        return out

    def is_empty(self) -> bool:
        return not self.driver.topics[self.topic]

    def get_queue_size(self) -> int:
        return len(self.driver.topics[self.topic])
