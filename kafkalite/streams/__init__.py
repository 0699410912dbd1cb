"""Kafka Streams for kafkalite: stateful stream processing in Python, columnar.

What this folder is for: an application reads input topics, transforms,
groups, counts, aggregates, windows (with retention and suppression) and
joins them with local state backed by compacted changelog topics, and writes
output topics, in Kafka Streams' vocabulary (``StreamsBuilder``, ``KStream``,
``KTable``, ``Topology``, ``KafkaStreams``, ``Serdes``, ``Materialized``,
``TimeWindows``, ``JoinWindows``, ``Grouped``, ``Processor``; methods in
snake_case).

Records flow through a topology as pyarrow RecordBatches (``records.py``
names the columns), one batch per input partition per poll, so that an
operator given a pyarrow.compute Expression or a ``@columnar`` function runs
once per batch; a plain Python function is called once per record (the slow
path, as in Kafka Streams). See ``dsl.py`` for the rule.

Modules, in the order data flows:
    serdes.py     Serdes: Arrow arrays <-> bytes, vectorised where they can be
    records.py    the batch schema inside a topology; the columnar marker
    windows.py    TimeWindows (tumbling, hopping, grace) as array arithmetic;
                  JoinWindows; SessionWindows; SlidingWindows
    stores.py     key-value and window stores, in memory and on RocksDB
    processors.py the processor nodes the DSL builds
    joins.py      stream-table and stream-stream join nodes
    processor_api.py  Processor, ProcessorContext, punctuators, Stores
    topology.py   Topology: nodes, sub-topologies, sources, sinks, stores
    dsl.py        StreamsBuilder, KStream, KTable, KGroupedStream, ...
    task.py       StreamTask: one sub-topology on one partition, its stores
    errors.py     exception handlers and the dead-letter queue
    driver.py     TopologyTestDriver: a topology run without a broker
    restore.py    restoring stores from changelogs: checkpoints, the restore
                  listener, progress
    runtime.py    KafkaStreams: tasks in a consumer group, at_least_once or
                  exactly_once_v2

May import: kafkalite.client, kafkalite.record, kafkalite.errors, pyarrow,
numpy, rocksdict. Never kafkalite.server or kafkalite.storage: this package is
a client of the broker like any other.
"""
from kafkalite.streams.dsl import (BufferConfig, Consumed, GlobalKTable, Grouped, Joined,
                                   KGroupedStream, KGroupedTable,
                                   KStream, KTable, Materialized, Named, Produced, Repartitioned,
                                   SessionWindowedKStream, SlidingWindowedKStream, StreamJoined,
                                   StreamsBuilder,
                                   Suppressed, TimeWindowedKStream)
from kafkalite.streams.driver import TestInputTopic, TestOutputTopic, TopologyTestDriver
from kafkalite.streams.processor_api import (Processor, ProcessorContext, PunctuationType,
                                             Record, Stores)
from kafkalite.streams.records import columnar
from kafkalite.streams.restore import StateRestoreListener
from kafkalite.streams.config import StreamsConfig
from kafkalite.streams.runtime import KafkaStreams
from kafkalite.streams.serdes import Serde, Serdes
from kafkalite.streams.topology import Topology, TopologyException
from kafkalite.streams.windows import (JoinWindows, SessionWindows, SlidingWindows,
                                       TimeWindows)

__all__ = [
    "BufferConfig", "columnar", "Consumed", "GlobalKTable", "Grouped", "Joined", "JoinWindows",
    "KafkaStreams",
    "KGroupedStream", "KGroupedTable", "KStream", "KTable", "Materialized", "Named", "Processor",
    "ProcessorContext", "Produced", "PunctuationType", "Record", "Repartitioned", "Serde",
    "Serdes", "SessionWindowedKStream", "SessionWindows", "SlidingWindowedKStream",
    "SlidingWindows", "StateRestoreListener", "Stores", "StreamJoined",
    "StreamsBuilder", "StreamsConfig", "Suppressed",
    "TestInputTopic", "TestOutputTopic", "TimeWindowedKStream", "TimeWindows", "Topology",
    "TopologyException", "TopologyTestDriver",
]
