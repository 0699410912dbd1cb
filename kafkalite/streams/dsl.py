"""The Streams DSL: StreamsBuilder, KStream, KTable, KGroupedStream,
TimeWindowedKStream, and their config objects (Consumed, Produced, Grouped,
Materialized, Named, Repartitioned, Joined, Suppressed), in Kafka Streams'
vocabulary with snake_case methods. Joins are built here and run in
joins.py; ``KStream.process`` is the Processor API (processor_api.py);
``KTable.suppress`` of a windowed table forwards final results only.

Every operator that takes a function follows one rule (records.py): a
pyarrow.compute Expression or a ``@columnar`` function runs once per batch
(the fast path); any other callable runs once per record with Kafka Streams'
signature (the slow path). For example, the same filter both ways::

    stream.filter(pc.field("value") > 10)          # columnar
    stream.filter(lambda key, value: value > 10)   # per record

``count()`` is always columnar; ``reduce("sum" | "min" | "max")`` is too,
and so is ``aggregate_columns([(field, "count" | "sum" | "min" | "max")])``
(several of them over the fields of a struct value at once);
``reduce(fn)`` and ``aggregate(initializer, aggregator)`` are per record.
``KTable.group_by`` (KGroupedTable: aggregations with an adder and a
subtractor, tables.py) and the foreign-key table join are per record too.

Grouping or joining by a new key (``group_by``; ``group_by_key`` or a join
after ``map`` / ``select_key`` / ``flat_map`` / ``process``; ``repartition``)
writes the records to an internal repartition topic
``<application.id>-<name>-repartition`` and reads them back, so that each
key's records meet in one task, as in Kafka Streams.
"""
from __future__ import annotations

from dataclasses import dataclass

from kafkalite.streams import joins as JoinNodes
from kafkalite.streams import processor_api as PAPI
from kafkalite.streams import processors as P
from kafkalite.streams import tables as TableNodes
from kafkalite.streams.serdes import Serde, Serdes
from kafkalite.streams.topology import StoreSpec, Topology, TopologyException
from kafkalite.streams.windows import (JoinWindows, SessionWindows, SlidingWindows, TimeWindows,
                                      _ms)


@dataclass
class Consumed:
    key_serde: Serde | None = None
    value_serde: Serde | None = None

    @classmethod
    def with_(cls, key_serde=None, value_serde=None):
        return cls(key_serde, value_serde)


@dataclass
class Produced:
    key_serde: Serde | None = None
    value_serde: Serde | None = None

    @classmethod
    def with_(cls, key_serde=None, value_serde=None):
        return cls(key_serde, value_serde)


@dataclass
class Grouped:
    name: str | None = None
    key_serde: Serde | None = None
    value_serde: Serde | None = None

    @classmethod
    def with_(cls, key_serde=None, value_serde=None):
        return cls(None, key_serde, value_serde)

    @classmethod
    def as_(cls, name):
        return cls(name)


Repartitioned = Grouped


@dataclass
class Joined:
    """Serdes of a join's key (and values), Kafka's Joined / StreamJoined."""
    key_serde: Serde | None = None
    value_serde: Serde | None = None
    other_value_serde: Serde | None = None

    @classmethod
    def with_(cls, key_serde=None, value_serde=None, other_value_serde=None):
        return cls(key_serde, value_serde, other_value_serde)


StreamJoined = Joined


@dataclass
class Named:
    name: str

    @classmethod
    def as_(cls, name):
        return cls(name)


class Materialized:
    """Where a table's state lives: the store name (which names its
    changelog topic), the store type ("rocksdb" or "in_memory"; None: the
    config's default.dsl.store), the value serde, and whether it is logged."""

    def __init__(self, name=None, store_type=None, key_serde=None, value_serde=None,
                 logging=True, retention_ms=None):
        self.name, self.store_type = name, store_type
        self.key_serde, self.value_serde, self.logging = key_serde, value_serde, logging
        self.retention_ms = retention_ms

    @classmethod
    def as_(cls, name: str, store_type: str | None = None) -> Materialized:
        if store_type not in (None, "rocksdb", "in_memory"):
            raise ValueError("store_type is 'rocksdb' or 'in_memory'")
        return cls(name, store_type)

    @classmethod
    def with_(cls, key_serde=None, value_serde=None) -> Materialized:
        return cls(key_serde=key_serde, value_serde=value_serde)

    def with_value_serde(self, serde) -> Materialized:
        self.value_serde = serde
        return self

    def with_key_serde(self, serde) -> Materialized:
        self.key_serde = serde
        return self

    def with_logging_disabled(self) -> Materialized:
        self.logging = False
        return self

    def with_retention(self, retention) -> Materialized:
        """How long a window store keeps a window, in stream time (Kafka's
        default: the window's size + grace; it may not be less)."""
        self.retention_ms = _ms(retention)
        return self


class BufferConfig:
    """How much a suppression buffer holds: unbounded (the only choice
    here; the buffer is bounded by the windows still open)."""

    @classmethod
    def unbounded(cls) -> BufferConfig:
        return cls()


class Suppressed:
    def __init__(self, kind: str, buffer: BufferConfig, name=None):
        self.kind, self.buffer, self.name = kind, buffer, name

    @classmethod
    def until_window_closes(cls, buffer: BufferConfig | None = None) -> Suppressed:
        return cls("until_window_closes", buffer or BufferConfig.unbounded())

    def with_name(self, name: str) -> Suppressed:
        self.name = name
        return self


class StreamsBuilder:
    def __init__(self):
        self.topology = Topology()

    def _name(self, named, prefix):
        return named.name if isinstance(named, Named) else named or self.topology.next_name(prefix)

    def stream(self, topics, consumed: Consumed | None = None) -> KStream:
        topics = [topics] if isinstance(topics, str) else list(topics)
        c = consumed or Consumed()
        node = self.topology.add(P.SourceNode(self.topology.next_name("KSTREAM-SOURCE"), topics,
                                              c.key_serde or Serdes.bytes(),
                                              c.value_serde or Serdes.bytes()))
        return KStream(self, node, c.key_serde, c.value_serde)

    def table(self, topic: str, consumed: Consumed | None = None,
              materialized: Materialized | None = None) -> KTable:
        c = consumed or Consumed()
        m = materialized or Materialized()
        source = self.topology.add(P.SourceNode(self.topology.next_name("KSTREAM-SOURCE"),
                                                [topic], c.key_serde or Serdes.bytes(),
                                                c.value_serde or Serdes.bytes()))
        store = self._store(m, "KTABLE-SOURCE-STATE-STORE", c.value_serde or Serdes.bytes())
        node = self.topology.add(P.TableSourceNode(self.topology.next_name("KTABLE-SOURCE"),
                                                   store.name, c.key_serde), [source])
        return KTable(self, node, c.key_serde, c.value_serde, store.name)

    def global_table(self, topic: str, consumed: Consumed | None = None,
                     materialized: Materialized | None = None) -> GlobalKTable:
        """Every instance reads every partition of ``topic`` into its own
        store: restored from the topic at start, kept up to date while it
        runs; streams join it by a key they select, with no
        co-partitioning (Kafka's GlobalKTable)."""
        c = consumed or Consumed()
        m = materialized or Materialized()
        name = m.name or self.topology.next_name("GLOBALKTABLE-SOURCE-STATE-STORE")
        spec = StoreSpec(name, m.store_type, m.value_serde or c.value_serde or Serdes.bytes(),
                         False)
        self.topology.add_global_table(topic, spec)
        return GlobalKTable(topic, name, m.key_serde or c.key_serde, spec.value_serde)

    def _store(self, m: Materialized, prefix: str, value_serde, windows=None) -> StoreSpec:
        name = m.name or self.topology.next_name(prefix)
        size = retention = None
        suffix = 8
        if isinstance(windows, SessionWindows):
            # keys end with session end + start; retention goes by session end
            size, least, suffix = windows.gap_ms, windows.least_retention_ms, 16
        elif isinstance(windows, SlidingWindows):
            size, least = windows.difference_ms + 1, windows.least_retention_ms
        elif windows is not None:
            size, least = windows.size_ms, windows.size_ms + windows.grace_ms
        if windows is not None:
            retention = least if m.retention_ms is None else m.retention_ms
            if retention < least:
                what = "inactivity gap" if suffix == 16 else "2 * time difference" \
                    if isinstance(windows, SlidingWindows) else "window size"
                raise ValueError(f"the retention of store {name!r} ({retention} ms) must be at "
                                 f"least the {what} + grace ({least} ms)")
        return self.topology.add_store(StoreSpec(name, m.store_type, m.value_serde or value_serde,
                                                 m.logging, size, retention, suffix))

    def add_state_store(self, spec: StoreSpec) -> StoreSpec:
        """A store for Processor API processors (processor_api.Stores)."""
        return self.topology.add_store(spec)

    def build(self) -> Topology:
        self.topology.subtopologies()
        return self.topology


class GlobalKTable:
    """A table every instance holds whole (builder.global_table): joined by
    streams (``stream.join(global_table, key_selector, joiner)``) and read
    by ``KafkaStreams.store(name)``."""

    def __init__(self, topic, store_name, key_serde, value_serde):
        self.topic, self.queryable_store_name = topic, store_name
        self.key_serde, self.value_serde = key_serde, value_serde


class KStream:
    """``key_changed``: an operator upstream (map, select_key, flat_map) may
    have changed the keys since the source, so a join or group_by_key
    repartitions first (Kafka Streams' repartitionRequired)."""

    def __init__(self, builder: StreamsBuilder, node, key_serde=None, value_serde=None,
                 key_changed=False):
        self.builder, self.node = builder, node
        self.key_serde, self.value_serde = key_serde, value_serde
        self.key_changed = key_changed

    def _then(self, node, key_serde="same", value_serde="same") -> KStream:
        self.builder.topology.add(node, [self.node])
        return KStream(self.builder, node,
                       self.key_serde if key_serde == "same" else key_serde,
                       self.value_serde if value_serde == "same" else value_serde,
                       self.key_changed or key_serde is None)

    def _n(self, named, prefix):
        return self.builder._name(named, prefix)

    # ---- stateless ----
    def filter(self, predicate, named=None) -> KStream:
        return self._then(P.FilterNode(self._n(named, "KSTREAM-FILTER"), predicate))

    def filter_not(self, predicate, named=None) -> KStream:
        return self._then(P.FilterNode(self._n(named, "KSTREAM-FILTER"), predicate, negate=True))

    def map(self, mapper, named=None) -> KStream:
        """Per record: ``mapper(key, value) -> (key, value)``. Columnar: a
        @columnar ``mapper(batch)`` returning a RecordBatch/Table/dict with
        ``key`` and ``value`` columns."""
        return self._then(P.MapNode(self._n(named, "KSTREAM-MAP"), mapper, "map"), None, None)

    def map_values(self, mapper, named=None) -> KStream:
        return self._then(P.MapNode(self._n(named, "KSTREAM-MAPVALUES"), mapper, "map_values"),
                          value_serde=None)

    def select_key(self, mapper, named=None) -> KStream:
        return self._then(P.MapNode(self._n(named, "KSTREAM-KEY-SELECT"), mapper, "select_key"),
                          key_serde=None)

    def flat_map(self, mapper, named=None) -> KStream:
        return self._then(P.FlatMapNode(self._n(named, "KSTREAM-FLATMAP"), mapper, False),
                          None, None)

    def flat_map_values(self, mapper, named=None) -> KStream:
        return self._then(P.FlatMapNode(self._n(named, "KSTREAM-FLATMAPVALUES"), mapper, True),
                          value_serde=None)

    def peek(self, action, named=None) -> KStream:
        return self._then(P.PeekNode(self._n(named, "KSTREAM-PEEK"), action))

    def foreach(self, action, named=None) -> None:
        self._then(P.PeekNode(self._n(named, "KSTREAM-FOREACH"), action))

    def split(self, named=None) -> BranchedKStream:
        node = self._then(P.BranchNode(self._n(named, "KSTREAM-BRANCH"))).node
        return BranchedKStream(self, node)

    def branch(self, *predicates) -> list[KStream]:
        """Kafka's older form: one stream per predicate, first match wins."""
        s = self.split()
        for p in predicates:
            s.branch(p)
        return s.streams

    def merge(self, other: KStream, named=None) -> KStream:
        node = P.ProcessorNode(self._n(named, "KSTREAM-MERGE"))
        self.builder.topology.add(node, [self.node, other.node])
        return KStream(self.builder, node, self.key_serde, self.value_serde,
                       self.key_changed or other.key_changed)

    # ---- Processor API (processor_api.py) ----
    def process(self, supplier, *store_names, named=None) -> KStream:
        """Run ``supplier()`` (a Processor per task) on every record, with
        access to ``store_names``; what it forwards is the new stream."""
        for s in store_names:
            if s not in self.builder.topology.stores:
                raise TopologyException(f"no store named {s!r}: add it with "
                                        f"builder.add_state_store(Stores....) first")
        node = PAPI.ProcessNode(self._n(named, "KSTREAM-PROCESSOR"), supplier, store_names)
        return self._then(node, None, None)

    # ---- joins (joins.py) ----
    def join(self, other, joiner, windows: JoinWindows | None = None, joined=None,
             named=None) -> KStream:
        """Inner join with a KTable (``windows`` None) or, within
        ``windows``, with another KStream. ``joiner(left_value,
        right_value)`` per pair, or columnar over ``left_value`` /
        ``right_value`` (joins.py)."""
        return self._join(other, joiner, windows, joined, named, outer=False)

    def left_join(self, other, joiner, windows: JoinWindows | None = None, joined=None,
                  named=None) -> KStream:
        """As join, and every left record is forwarded: with a null right
        value where nothing matched (for a stream, once its window closed)."""
        return self._join(other, joiner, windows, joined, named, outer=True)

    def _join(self, other, joiner, windows, joined, named, outer) -> KStream:
        topo = self.builder.topology
        if isinstance(other, GlobalKTable):
            # Kafka's join(globalTable, keySelector, joiner): the second
            # argument selects the table's key, the third joins
            key_selector, joiner = joiner, windows
            if joiner is None:
                raise TopologyException("a join with a GlobalKTable takes (global_table, "
                                        "key_selector, joiner)")
            node = JoinNodes.StreamGlobalTableJoinNode(
                self._n(named, "KSTREAM-LEFTJOIN" if outer else "KSTREAM-JOIN"),
                other.queryable_store_name, key_selector, other.key_serde, joiner, outer)
            return self._then(node, value_serde=None)
        j = joined or Joined()
        left = self._repartitioned_for_join(j.key_serde)
        key_serde = j.key_serde or left.key_serde
        if isinstance(other, KTable):
            if windows is not None:
                raise TopologyException("a stream-table join takes no JoinWindows")
            if other.queryable_store_name is None or other.windowed:
                raise TopologyException(
                    "a stream-table join needs a materialized, non-windowed table: one from "
                    "builder.table() or an aggregation, or .filter(...) of one given "
                    "Materialized.as_(name)")
            node = JoinNodes.StreamTableJoinNode(
                self._n(named, "KSTREAM-LEFTJOIN" if outer else "KSTREAM-JOIN"),
                other.queryable_store_name, key_serde or other.key_serde, joiner, outer)
            return left._then(node, value_serde=None)
        if not isinstance(other, KStream):
            raise TypeError("join() takes a KStream or a KTable")
        if windows is None:
            raise TopologyException("a stream-stream join needs JoinWindows")
        right = other._repartitioned_for_join(j.key_serde)
        name = self._n(named, "KSTREAM-JOIN")
        stores = []
        for side, s, serde in (("this", left, j.value_serde), ("other", right,
                                                                 j.other_value_serde)):
            spec = StoreSpec(f"{name}-{side}-join-store", None,
                             s.value_serde or serde or Serdes.typed(), True,
                             windows.before_ms + windows.after_ms, windows.retention_ms, 16)
            stores.append(topo.add_store(spec).name)
        pending = None
        if outer:
            pending = topo.add_store(StoreSpec(
                f"{name}-outer-shared-join-store", None,
                left.value_serde or j.value_serde or Serdes.typed(), True,
                windows.before_ms + windows.after_ms, None, 16)).name
        sides = [topo.add(JoinNodes.StreamStreamJoinSide(
            f"{name}-{'this' if is_left else 'other'}", name, is_left, this, that, windows,
            joiner, outer, pending, key_serde or right.key_serde), [s.node])
            for is_left, s, this, that in ((True, left, stores[0], stores[1]),
                                           (False, right, stores[1], stores[0]))]
        out = topo.add(P.ProcessorNode(f"{name}-merge"), sides)
        return KStream(self.builder, out, key_serde, None)

    def _repartitioned_for_join(self, key_serde) -> KStream:
        if not self.key_changed:
            return self
        name = self.builder.topology.next_name("KSTREAM-JOIN") + "-left"
        return self._through_repartition(name, key_serde or self.key_serde, self.value_serde)

    def to(self, topic: str, produced: Produced | None = None) -> None:
        p = produced or Produced()
        self._then(P.SinkNode(self.builder.topology.next_name("KSTREAM-SINK"), topic,
                              p.key_serde or self.key_serde, p.value_serde or self.value_serde))

    def repartition(self, repartitioned: Repartitioned | None = None) -> KStream:
        r = repartitioned or Repartitioned()
        name = r.name or self.builder.topology.next_name("KSTREAM-REPARTITION")
        return self._through_repartition(name, r.key_serde or self.key_serde,
                                         r.value_serde or self.value_serde)

    def _through_repartition(self, name, key_serde, value_serde) -> KStream:
        topo = self.builder.topology
        topic = f"{name}-repartition"
        if topic in topo.internal_topics:
            raise TopologyException(f"a repartition topic named {name!r} already exists")
        topo.internal_topics.add(topic)
        # without serdes, the column types are known only at run time, perhaps in
        # another instance than the reader: a tagged encoding carries them
        ks, vs = key_serde or Serdes.typed(), value_serde or Serdes.typed()
        self._then(P.SinkNode(topo.next_name("KSTREAM-SINK"), topic, ks, vs, internal=True))
        source = topo.add(P.SourceNode(topo.next_name("KSTREAM-SOURCE"), [topic], ks, vs))
        return KStream(self.builder, source, key_serde, value_serde)

    # ---- grouping ----
    def group_by_key(self, grouped: Grouped | None = None) -> KGroupedStream:
        g = grouped or Grouped()
        return KGroupedStream(self, g.key_serde or self.key_serde,
                              g.value_serde or self.value_serde, g.name,
                              needs_repartition=self.key_changed)

    def group_by(self, selector, grouped: Grouped | None = None) -> KGroupedStream:
        """Group by a new key (``selector(key, value)``, or columnar): the
        records go through a repartition topic."""
        g = grouped or Grouped()
        keyed = self.select_key(selector)
        return KGroupedStream(keyed, g.key_serde, g.value_serde or self.value_serde, g.name,
                              needs_repartition=True)


class BranchedKStream:
    def __init__(self, stream: KStream, node):
        self.stream, self.node = stream, node
        self.streams: list[KStream] = []

    def branch(self, predicate, named=None) -> BranchedKStream:
        self.node.add_branch(predicate)
        child = P.ProcessorNode(self.stream._n(named, "KSTREAM-BRANCHCHILD"))
        self.stream.builder.topology.add(child, [self.node])
        self.streams.append(KStream(self.stream.builder, child, self.stream.key_serde,
                                    self.stream.value_serde))
        return self

    def default_branch(self, named=None) -> list[KStream]:
        self.branch(None, named)
        return self.streams

    def no_default_branch(self) -> list[KStream]:
        return self.streams


class KGroupedStream:
    def __init__(self, stream: KStream, key_serde, value_serde, name, needs_repartition):
        self.stream, self.key_serde, self.value_serde = stream, key_serde, value_serde
        self.name, self.needs_repartition = name, needs_repartition

    def _input(self) -> KStream:
        if not self.needs_repartition:
            return self.stream
        topo = self.stream.builder.topology
        name = self.name or topo.next_name("KSTREAM-AGGREGATE-STATE-STORE") + "-grouped"
        return self.stream._through_repartition(name, self.key_serde, self.value_serde)

    def _aggregate(self, kind, how, initializer, materialized, value_serde, windows=None):
        builder = self.stream.builder
        m = materialized or Materialized()
        store = builder._store(m, "KSTREAM-AGGREGATE-STATE-STORE", value_serde, windows)
        src = self._input()
        node = P.AggregateNode(builder.topology.next_name("KSTREAM-AGGREGATE"), store.name,
                               m.key_serde or self.key_serde, kind, how, initializer, windows)
        src._then(node)
        return KTable(builder, node, m.key_serde or self.key_serde, store.value_serde,
                      store.name, windowed=windows is not None, windows=windows)

    def count(self, materialized: Materialized | None = None) -> KTable:
        return self._aggregate("count", None, None, materialized, Serdes.long())

    def reduce(self, reducer, materialized: Materialized | None = None) -> KTable:
        """``reducer`` "sum", "min" or "max" (columnar) or ``fn(v1, v2)``."""
        if isinstance(reducer, str) and reducer not in ("sum", "min", "max"):
            raise ValueError("a columnar reduce is 'sum', 'min' or 'max'")
        return self._aggregate("reduce", reducer, None, materialized,
                               self.value_serde or Serdes.json())

    def aggregate(self, initializer, aggregator, materialized: Materialized | None = None) -> KTable:
        """Per record: ``aggregator(key, value, aggregate) -> aggregate``."""
        return self._aggregate("aggregate", aggregator, initializer, materialized, Serdes.json())

    def aggregate_columns(self, aggregations, materialized: Materialized | None = None) -> KTable:
        """Columnar: ``aggregations`` [(field of the struct value or None,
        "count" | "sum" | "min" | "max")]; the table's values are structs
        {"a0": ..., "a1": ...}, one field per pair (None: count every
        record; a field: aggregate its non-null values)."""
        return self._aggregate("columns", _checked_columns(aggregations), None, materialized,
                               Serdes.json())

    def windowed_by(self, windows):
        """TimeWindows -> TimeWindowedKStream; SessionWindows ->
        SessionWindowedKStream."""
        if isinstance(windows, SessionWindows):
            return SessionWindowedKStream(self, windows)
        if isinstance(windows, SlidingWindows):
            return SlidingWindowedKStream(self, windows)
        if not isinstance(windows, TimeWindows):
            raise TypeError("windowed_by takes TimeWindows, SlidingWindows or SessionWindows")
        return TimeWindowedKStream(self, windows)

    def _session_aggregate(self, kind, how, initializer, merger, materialized, value_serde,
                           windows):
        builder = self.stream.builder
        m = materialized or Materialized()
        store = builder._store(m, "KSTREAM-AGGREGATE-STATE-STORE", value_serde, windows)
        node = P.SessionAggregateNode(builder.topology.next_name("KSTREAM-AGGREGATE"),
                                      store.name, m.key_serde or self.key_serde, kind, how,
                                      initializer, merger, windows)
        self._input()._then(node)
        return KTable(builder, node, m.key_serde or self.key_serde, store.value_serde,
                      store.name, windowed=True, windows=windows)


class TimeWindowedKStream:
    def __init__(self, grouped: KGroupedStream, windows: TimeWindows):
        self.grouped, self.windows = grouped, windows

    def count(self, materialized: Materialized | None = None) -> KTable:
        return self.grouped._aggregate("count", None, None, materialized, Serdes.long(),
                                       self.windows)

    def reduce(self, reducer, materialized: Materialized | None = None) -> KTable:
        return self.grouped._aggregate("reduce", reducer, None, materialized,
                                       self.grouped.value_serde or Serdes.json(), self.windows)

    def aggregate(self, initializer, aggregator, materialized: Materialized | None = None) -> KTable:
        return self.grouped._aggregate("aggregate", aggregator, initializer, materialized,
                                       Serdes.json(), self.windows)

    def aggregate_columns(self, aggregations, materialized: Materialized | None = None) -> KTable:
        """KGroupedStream.aggregate_columns, per window."""
        return self.grouped._aggregate("columns", _checked_columns(aggregations), None,
                                       materialized, Serdes.json(), self.windows)


def _checked_columns(aggregations) -> list:
    out = [(field, op) for field, op in aggregations]
    bad = [op for _, op in out if op not in ("count", "sum", "min", "max")]
    if bad:
        raise ValueError(f"a columnar aggregate is 'count', 'sum', 'min' or 'max', not {bad[0]!r}")
    return out


class SessionWindowedKStream:
    """A grouped stream in session windows (SessionWindows). Its tables'
    rows carry ``session_start`` and ``session_end``; written to a topic,
    their keys are Kafka's session-windowed keys (key + end + start:
    Serdes.session_windowed reads them)."""

    def __init__(self, grouped: KGroupedStream, windows: SessionWindows):
        self.grouped, self.windows = grouped, windows

    def count(self, materialized: Materialized | None = None) -> KTable:
        return self.grouped._session_aggregate("count", None, None, None, materialized,
                                               Serdes.long(), self.windows)

    def reduce(self, reducer, materialized: Materialized | None = None) -> KTable:
        """``reducer`` "sum", "min", "max" or ``fn(v1, v2)``; it also merges sessions."""
        if isinstance(reducer, str) and reducer not in ("sum", "min", "max"):
            raise ValueError("a named reduce is 'sum', 'min' or 'max'")
        return self.grouped._session_aggregate("reduce", reducer, None, None, materialized,
                                               self.grouped.value_serde or Serdes.json(),
                                               self.windows)

    def aggregate(self, initializer, aggregator, session_merger,
                  materialized: Materialized | None = None) -> KTable:
        """Per record ``aggregator(key, value, aggregate)``; two sessions a
        record bridges are combined by ``session_merger(key, agg1, agg2)``."""
        return self.grouped._session_aggregate("aggregate", aggregator, initializer,
                                               session_merger, materialized, Serdes.json(),
                                               self.windows)


class SlidingWindowedKStream:
    """A grouped stream in sliding windows (SlidingWindows): count and
    aggregate; the table's rows carry window_start and window_end (both
    inclusive), written to a topic with the time-windowed key (key +
    start). The store keeps each window's latest record time beside its
    aggregate (Kafka's timestamped window store)."""

    def __init__(self, grouped: KGroupedStream, windows: SlidingWindows):
        self.grouped, self.windows = grouped, windows

    def _build(self, kind, initializer, aggregator, materialized, value_serde) -> KTable:
        g = self.grouped
        builder = g.stream.builder
        m = materialized or Materialized()
        inner = m.value_serde or value_serde
        m = Materialized(m.name, m.store_type, m.key_serde, Serdes.value_and_timestamp(inner),
                         m.logging, m.retention_ms)
        store = builder._store(m, "KSTREAM-AGGREGATE-STATE-STORE", None, self.windows)
        node = P.SlidingAggregateNode(builder.topology.next_name("KSTREAM-AGGREGATE"),
                                      store.name, m.key_serde or g.key_serde, kind, initializer,
                                      aggregator, self.windows)
        g._input()._then(node)
        return KTable(builder, node, m.key_serde or g.key_serde, inner, store.name,
                      windowed=True, windows=self.windows)

    def count(self, materialized: Materialized | None = None) -> KTable:
        return self._build("count", None, None, materialized, Serdes.long())

    def aggregate(self, initializer, aggregator, materialized: Materialized | None = None) -> KTable:
        """Per record ``aggregator(key, value, aggregate)``."""
        return self._build("aggregate", initializer, aggregator, materialized, Serdes.json())


class KTable:
    """A changelog stream: the latest value per key (a null value deletes).
    ``queryable_store_name`` names its store when it is materialized."""

    def __init__(self, builder, node, key_serde, value_serde, store_name=None, windowed=False,
                 windows=None):
        self.builder, self.node = builder, node
        self.key_serde, self.value_serde = key_serde, value_serde
        self.queryable_store_name, self.windowed = store_name, windowed
        self.windows = windows

    def _then(self, node, value_serde="same") -> KTable:
        self.builder.topology.add(node, [self.node])
        return KTable(self.builder, node, self.key_serde,
                      self.value_serde if value_serde == "same" else value_serde,
                      None, self.windowed, self.windows)

    def suppress(self, suppressed: Suppressed, named=None) -> KTable:
        """Of a windowed table: forward each window's final result once,
        after stream time passes its end + grace (processors.SuppressNode)."""
        if isinstance(self.windows, (SessionWindows, SlidingWindows)):
            raise TopologyException("suppress(until_window_closes) here takes a TimeWindows "
                                    "table, not a session- or sliding-windowed one")
        if self.windows is None:
            raise TopologyException("suppress(until_window_closes) needs a windowed table "
                                     "(group_by_key().windowed_by(...).count() and the like)")
        if not isinstance(suppressed, Suppressed) or suppressed.kind != "until_window_closes":
            raise TopologyException("suppress takes Suppressed.until_window_closes(...)")
        name = suppressed.name or self.builder._name(named, "KTABLE-SUPPRESS")
        spec = self.builder.topology.add_store(StoreSpec(
            f"{name}-store", "in_memory", Serdes.bytes(), True, self.windows.size_ms, None, 8))
        return self._then(P.SuppressNode(name, spec.name, self.windows, self.key_serde,
                                         self.value_serde))

    def filter(self, predicate, named=None, materialized: Materialized | None = None) -> KTable:
        """Rows that fail become tombstones; with ``materialized`` the
        result has a store of its own (queryable, joinable)."""
        return self._materialized(self._then(P.TableFilterNode(
            self.builder._name(named, "KTABLE-FILTER"), predicate)), materialized)

    def filter_not(self, predicate, named=None,
                   materialized: Materialized | None = None) -> KTable:
        return self._materialized(self._then(P.TableFilterNode(
            self.builder._name(named, "KTABLE-FILTER"), predicate, negate=True)), materialized)

    def map_values(self, mapper, named=None, materialized: Materialized | None = None) -> KTable:
        return self._materialized(self._then(P.TableMapValuesNode(
            self.builder._name(named, "KTABLE-MAPVALUES"), mapper), value_serde=None),
            materialized)

    def _materialized(self, table: KTable, m: Materialized | None) -> KTable:
        """``table`` written to a store of its own (Kafka's Materialized
        argument of KTable.filter / map_values)."""
        if m is None:
            return table
        if table.windowed:
            raise TopologyException("materializing a windowed table's filter or map_values "
                                    "is not supported")
        value_serde = m.value_serde or table.value_serde
        if value_serde is None:
            raise TopologyException("materializing a map_values result needs its value serde: "
                                    "Materialized.as_(name).with_value_serde(...)")
        store = self.builder._store(m, "KTABLE-STATE-STORE", value_serde)
        node = self.builder.topology.add(P.TableSourceNode(
            self.builder.topology.next_name("KTABLE-MATERIALIZE"), store.name,
            m.key_serde or table.key_serde), [table.node])
        return KTable(self.builder, node, m.key_serde or table.key_serde, value_serde,
                      store.name)

    def group_by(self, selector, grouped: Grouped | None = None) -> KGroupedTable:
        """Re-group the table's rows by ``selector(key, value) -> (new_key,
        new_value)`` (per record) for an aggregation with an adder and a
        subtractor (KGroupedTable; tables.py)."""
        if self.windowed:
            raise TopologyException("group_by of a windowed table is not supported")
        return KGroupedTable(self, selector, grouped or Grouped())

    # ---- table-table joins (joins.TableTableJoinSide; foreign key: tables.py) ----
    def join(self, other: KTable, joiner, fk_joiner=None, named=None) -> KTable:
        """Inner join with another KTable of the same key (co-partitioned):
        ``join(other, joiner)``, ``joiner(left_value, right_value)`` or
        columnar. Foreign-key join: ``join(other, foreign_key_extractor,
        joiner)``, each left row joined with the right row whose key is
        ``foreign_key_extractor(left_value)`` (per record; tables.py)."""
        return self._any_join(other, joiner, fk_joiner, "inner", named)

    def left_join(self, other: KTable, joiner, fk_joiner=None, named=None) -> KTable:
        return self._any_join(other, joiner, fk_joiner, "left", named)

    def _any_join(self, other, joiner, fk_joiner, how, named) -> KTable:
        if fk_joiner is None or isinstance(fk_joiner, (str, Named)):
            return self._table_join(other, joiner, how, named or fk_joiner)
        return self._fk_join(other, joiner, fk_joiner, how, named)

    def _fk_join(self, other, extractor, joiner, how, named) -> KTable:
        if not isinstance(other, KTable) or other.queryable_store_name is None or \
                other.windowed:
            raise TopologyException("a foreign-key join needs a materialized, non-windowed "
                                    "right table: from builder.table() or an aggregation")
        if self.windowed:
            raise TopologyException("a foreign-key join of a windowed table is not supported")
        builder, topo = self.builder, self.builder.topology
        name = builder._name(named, "KTABLE-FK-JOIN")
        # the keys must serialize as their topics' keys do: the internal
        # topics are partitioned like the left and the right table's topics
        left_keys, fk_keys = self.key_serde or Serdes.bytes(), other.key_serde or Serdes.bytes()
        right_values = topo.stores[other.queryable_store_name].value_serde
        left_store = topo.add_store(StoreSpec(f"{name}-left-store", None,
                                              self.value_serde or Serdes.typed(), True)).name
        subs_store = topo.add_store(StoreSpec(f"{name}-subscription-store", None,
                                              Serdes.string(), True)).name
        subscribe = topo.add(TableNodes.FkSubscribeNode(
            f"{name}-subscribe", left_store, left_keys, fk_keys, extractor, how, joiner),
            [self.node])
        received = KStream(builder, subscribe, Serdes.bytes(), Serdes.bytes()) \
            ._through_repartition(f"{name}-subscription", Serdes.bytes(), Serdes.bytes())
        subscribe.subscriptions = subscribe.children[-1]
        answer = topo.add(TableNodes.FkSubscriptionNode(
            f"{name}-subscription-receive", subs_store, other.queryable_store_name),
            [received.node])
        right = topo.add(TableNodes.FkRightUpdateNode(
            f"{name}-right-update", subs_store, fk_keys, right_values), [other.node])
        topic = f"{name}-response-repartition"
        topo.internal_topics.add(topic)
        topo.add(P.SinkNode(topo.next_name("KSTREAM-SINK"), topic, Serdes.bytes(),
                            Serdes.bytes(), internal=True), [answer, right])
        source = topo.add(P.SourceNode(topo.next_name("KSTREAM-SOURCE"), [topic],
                                       Serdes.bytes(), Serdes.bytes()))
        resolve = topo.add(TableNodes.FkResolveNode(
            f"{name}-resolve", left_store, left_keys, right_values, how, joiner), [source])
        out = topo.add(P.ProcessorNode(f"{name}-result"), [subscribe, resolve])
        subscribe.result = out
        return KTable(builder, out, self.key_serde, None)

    def outer_join(self, other: KTable, joiner, named=None) -> KTable:
        return self._table_join(other, joiner, "outer", named)

    def _table_join(self, other, joiner, how, named) -> KTable:
        if not isinstance(other, KTable):
            raise TypeError("a table join takes a KTable")
        for t in (self, other):
            if t.queryable_store_name is None or t.windowed:
                raise TopologyException(
                    "a table-table join needs two materialized, non-windowed tables: from "
                    "builder.table() or an aggregation")
        topo = self.builder.topology
        name = self.builder._name(named, "KTABLE-JOIN")
        presence = topo.add_store(StoreSpec(f"{name}-join-store", None, Serdes.long(), True)).name
        key_serde = self.key_serde or other.key_serde
        sides = [topo.add(JoinNodes.TableTableJoinSide(
            f"{name}-{'this' if is_left else 'other'}", is_left, that.queryable_store_name,
            presence, key_serde, joiner, how), [this.node])
            for is_left, this, that in ((True, self, other), (False, other, self))]
        out = topo.add(P.ProcessorNode(f"{name}-merge"), sides)
        return KTable(self.builder, out, key_serde, None)

    def to_stream(self, named=None) -> KStream:
        node = P.ProcessorNode(self.builder._name(named, "KTABLE-TOSTREAM"))
        self.builder.topology.add(node, [self.node])
        return KStream(self.builder, node, self.key_serde, self.value_serde)


class KGroupedTable:
    """A KTable re-grouped by ``KTable.group_by`` (Kafka's KGroupedTable):
    each aggregation takes an adder for a row that maps into a group and a
    subtractor for a row that leaves it (updated or deleted)."""

    def __init__(self, table: KTable, selector, grouped: Grouped):
        self.table, self.selector, self.grouped = table, selector, grouped

    def _aggregate(self, kind, adder, subtractor, initializer, materialized, value_serde):
        builder, g = self.table.builder, self.grouped
        topo = builder.topology
        name = g.name or topo.next_name("KTABLE-AGGREGATE-STATE-STORE") + "-grouped"
        mapped_serde = g.value_serde or Serdes.typed()
        previous = topo.add_store(StoreSpec(f"{name}-table-store", None,
                                            self.table.value_serde or Serdes.typed(), True))
        select = topo.add(TableNodes.TableGroupByNode(
            topo.next_name("KTABLE-SELECT"), previous.name, self.table.key_serde, self.selector,
            mapped_serde), [self.table.node])
        source = KStream(builder, select, g.key_serde, Serdes.bytes())._through_repartition(
            name, g.key_serde, Serdes.bytes())
        m = materialized or Materialized()
        store = builder._store(m, "KTABLE-AGGREGATE-STATE-STORE", value_serde)
        node = TableNodes.TableAggregateNode(
            topo.next_name("KTABLE-AGGREGATE"), store.name, m.key_serde or g.key_serde,
            mapped_serde, kind, adder, subtractor, initializer)
        source._then(node)
        return KTable(builder, node, m.key_serde or g.key_serde, store.value_serde, store.name)

    def count(self, materialized: Materialized | None = None) -> KTable:
        return self._aggregate("count", None, None, None, materialized, Serdes.long())

    def reduce(self, adder, subtractor, materialized: Materialized | None = None) -> KTable:
        """``adder(aggregate, value)``, ``subtractor(aggregate, value)``."""
        return self._aggregate("reduce", adder, subtractor, None, materialized,
                               self.grouped.value_serde or Serdes.json())

    def aggregate(self, initializer, adder, subtractor,
                  materialized: Materialized | None = None) -> KTable:
        """``adder(key, value, aggregate)``, ``subtractor(key, value,
        aggregate)``, from ``initializer()``."""
        return self._aggregate("aggregate", adder, subtractor, initializer, materialized,
                               Serdes.json())
