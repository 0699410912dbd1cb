"""The processor nodes the DSL builds (Kafka Streams' KStream*/KTable*
processors), each working on a whole RecordBatch (records.py).

A node is a description shared by every task; ``process(task, batch)`` gets
the task whose stores, stream time and outputs it uses, and ``forward``
hands the result to the node's children. Nodes never loop over records in
Python unless given a per-record function (records.py: the slow path).

Aggregations (count, reduce, aggregate, windowed or not) drop records with a
null key or value, as Kafka Streams' do, merge a batch's per-key results
into the store with one multi-get and one write, and forward one table
update per key per batch (what Kafka Streams forwards with record caching
on: the latest value of each key per flush).
"""
from __future__ import annotations

import operator
import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalite.errors import KafkaError
from kafkalite.streams import records
from kafkalite.streams.errors import StreamsException
from kafkalite.streams.records import evaluate, is_columnar, replace
from kafkalite.streams.serdes import Serdes


def serde_for(arrow_type):
    """A serde for a column type the DSL was not told about."""
    if arrow_type in (pa.binary(), pa.null()):
        return Serdes.bytes()
    if arrow_type in (pa.string(), pa.large_string()):
        return Serdes.string()
    if pa.types.is_integer(arrow_type):
        return Serdes.long()
    return Serdes.json()


class ProcessorNode:
    prefix = "KSTREAM-PROCESSOR"

    def __init__(self, name: str):
        self.name = name
        self.children: list[ProcessorNode] = []
        self.parents: list[ProcessorNode] = []

    def process(self, task, batch: pa.RecordBatch) -> None:
        self.forward(task, batch)

    def forward(self, task, batch: pa.RecordBatch) -> None:
        for child in self.children:
            self.forward_to(task, batch, child)

    def forward_to(self, task, batch: pa.RecordBatch, child) -> None:
        """``batch`` to one child only (a node whose children take different
        outputs of it)."""
        if batch.num_rows:
            try:
                child.process(task, batch)
            except (KafkaError, StreamsException):
                raise
            except Exception:       # noqa: BLE001 - the processing exception handler's
                child.process_rows(task, batch)

    def process_rows(self, task, batch: pa.RecordBatch) -> None:
        """After this node raised on ``batch``: the batch again a row at a
        time, each failing row to the processing exception handler (a
        node raises before writing its store or forwarding, and errors of
        the nodes below are handled by this node's own forward)."""
        for i in range(batch.num_rows):
            row = batch.slice(i, 1)
            try:
                self.process(task, row)
            except (KafkaError, StreamsException):
                raise
            except Exception as exc:    # noqa: BLE001
                task.processing_error(self, row, exc)

    def describe(self) -> str:
        return f"Processor: {self.name}"


class SourceNode(ProcessorNode):
    def __init__(self, name, topics, key_serde, value_serde):
        super().__init__(name)
        self.topics = list(topics)
        self.key_serde, self.value_serde = key_serde, value_serde

    def process_input(self, task, consumer_batch: pa.RecordBatch) -> None:
        try:
            batch = records.from_consumer(consumer_batch, self.key_serde, self.value_serde)
        except KafkaError:
            raise
        except Exception:               # noqa: BLE001 - the deserialization exception handler's
            batch = self._deserialize_each(task, consumer_batch)
        self.forward(task, batch)

    def _deserialize_each(self, task, consumer_batch):
        """A batch with a record the serdes cannot read: record by record,
        the bad ones to the handler, the good ones on as one batch."""
        good = []
        for i in range(consumer_batch.num_rows):
            row = consumer_batch.slice(i, 1)
            try:
                records.from_consumer(row, self.key_serde, self.value_serde)
                good.append(i)
            except KafkaError:
                raise
            except Exception as exc:    # noqa: BLE001
                task.record_error("deserialization", row, exc)
        return records.from_consumer(consumer_batch.take(pa.array(good, pa.int64())),
                                     self.key_serde, self.value_serde)

    def describe(self):
        return f"Source: {self.name} (topics: [{', '.join(self.topics)}])"


class SinkNode(ProcessorNode):
    def __init__(self, name, topic, key_serde, value_serde, internal=False):
        super().__init__(name)
        self.topic, self.internal = topic, internal
        self.key_serde, self.value_serde = key_serde, value_serde

    def process(self, task, batch):
        key_serde = self.key_serde or serde_for(batch.column("key").type)
        value_serde = self.value_serde or serde_for(batch.column("value").type)
        keys = key_serde.serialize(batch.column("key"))
        if "session_end" in batch.schema.names:
            # Kafka's SessionWindowedSerializer: key bytes + end + start (8 bytes each)
            keys = pc.binary_join_element_wise(keys, long_bytes(batch.column("session_end")),
                                               long_bytes(batch.column("session_start")), b"")
        elif "window_start" in batch.schema.names:
            # Kafka's TimeWindowedSerializer: key bytes + window start (8 bytes, big-endian)
            starts = batch.column("window_start").to_numpy().astype(">i8").tobytes()
            starts = pa.FixedSizeBinaryArray.from_buffers(
                pa.binary(8), batch.num_rows, [None, pa.py_buffer(starts)]).cast(pa.binary())
            keys = pc.binary_join_element_wise(keys, starts, b"")
        task.emit(self.topic, keys, value_serde.serialize(batch.column("value")),
                  batch.column("timestamp"), self.internal, _header_lists(batch))

    def describe(self):
        return f"Sink: {self.name} (topic: {self.topic})"


def _header_lists(batch) -> list | None:
    """The rows' headers as the producer takes them ([(name, bytes)] or
    None per record), or None when no row has any (checked per batch, so
    that records without headers cost no Python work)."""
    if "headers" not in batch.schema.names:
        return None
    h = batch.column("headers")
    if h.null_count == len(h) or not pc.sum(pc.list_value_length(h)).as_py():
        return None
    return [[(e["key"], e["value"]) for e in hs] if hs else None for hs in h.to_pylist()]


class FilterNode(ProcessorNode):
    def __init__(self, name, predicate, negate=False):
        super().__init__(name)
        self.predicate, self.negate = predicate, negate

    def mask(self, batch):
        if is_columnar(self.predicate):
            m = evaluate(self.predicate, batch)
        else:
            m = pa.array([bool(self.predicate(k, v)) for k, v in
                          zip(batch.column("key").to_pylist(), batch.column("value").to_pylist())],
                         pa.bool_())
        m = m.fill_null(False)
        return pc.invert(m) if self.negate else m

    def process(self, task, batch):
        self.forward(task, batch.filter(self.mask(batch)))


class MapNode(ProcessorNode):
    """map, map_values, select_key: one output row per input row."""

    def __init__(self, name, fn, kind):
        super().__init__(name)
        self.fn, self.kind = fn, kind

    def process(self, task, batch):
        fn, kind = self.fn, self.kind
        if is_columnar(fn):
            out = fn(batch) if kind == "map" else evaluate(fn, batch)
            if kind == "map":     # a RecordBatch/Table/dict with key and value
                self.forward(task, replace(batch, key=_column(out, "key"),
                                           value=_column(out, "value")))
                return
        else:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            if kind == "map_values":
                out = pa.array([fn(v) for v in values])
            elif kind == "select_key":
                out = pa.array([fn(k, v) for k, v in zip(keys, values)])
            else:
                pairs = [fn(k, v) for k, v in zip(keys, values)]
                self.forward(task, replace(batch, key=pa.array([p[0] for p in pairs]),
                                           value=pa.array([p[1] for p in pairs])))
                return
        self.forward(task, replace(batch, **{"key" if kind == "select_key" else "value": out}))


def _column(out, name):
    col = out[name] if not isinstance(out, pa.RecordBatch) else out.column(name)
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    return col if isinstance(col, pa.Array) else pa.array(col)


class FlatMapNode(ProcessorNode):
    """flat_map, flat_map_values: zero or more rows per input row. A
    columnar function returns a list array (one list per input row): of
    values for flat_map_values, of struct<key, value> for flat_map."""

    def __init__(self, name, fn, values_only):
        super().__init__(name)
        self.fn, self.values_only = fn, values_only

    def process(self, task, batch):
        if is_columnar(self.fn):
            lists = evaluate(self.fn, batch)
        else:
            keys = batch.column("key").to_pylist()
            values = batch.column("value").to_pylist()
            if self.values_only:
                lists = pa.array([list(self.fn(v)) for v in values])
            else:
                lists = pa.array([[{"key": k2, "value": v2} for k2, v2 in self.fn(k, v)]
                                  for k, v in zip(keys, values)])
        parents = pc.list_parent_indices(lists)
        flat = pc.list_flatten(lists)
        out = batch.take(parents)
        if self.values_only:
            out = replace(out, value=flat)
        else:
            out = replace(out, key=flat.field("key"), value=flat.field("value"))
        self.forward(task, out)


class PeekNode(ProcessorNode):
    """peek (forwards) and foreach (terminal): ``fn(key, value)`` per record,
    or a @columnar ``fn(batch)`` once per batch."""

    def __init__(self, name, fn):
        super().__init__(name)
        self.fn = fn

    def process(self, task, batch):
        if is_columnar(self.fn):
            self.fn(batch)
        else:
            for k, v in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist()):
                self.fn(k, v)
        self.forward(task, batch)


class BranchNode(ProcessorNode):
    """split(): each record goes to the first branch whose predicate holds
    (children[i] for branches[i]); the default branch, if any, is last."""

    def __init__(self, name):
        super().__init__(name)
        self.branches: list[FilterNode | None] = []     # None: the default branch

    def add_branch(self, predicate) -> None:
        self.branches.append(None if predicate is None else FilterNode(self.name, predicate))

    def process(self, task, batch):
        left = batch
        for branch, child in zip(self.branches, self.children):
            if not left.num_rows:
                return
            if branch is None:
                child.process(task, left)
                return
            m = branch.mask(left)
            taken = left.filter(m)
            if taken.num_rows:
                child.process(task, taken)
            left = left.filter(pc.invert(m))


def keyed(batch, key_serde):
    """A table's rows: ``batch`` without its null-key rows (no row has a null
    key), and their keys serialized (``key_serde``, or one for the column)."""
    k = batch.column("key")
    if k.null_count:
        batch = batch.filter(pc.is_valid(k))
    return batch, (key_serde or serde_for(batch.column("key").type)).serialize(
        batch.column("key"))


def _valid(batch):
    """Rows an aggregation takes: key and value not null."""
    k, v = batch.column("key"), batch.column("value")
    if k.null_count or v.null_count:
        return batch.filter(pc.and_(pc.is_valid(k), pc.is_valid(v)))
    return batch


class AggregateNode(ProcessorNode):
    """count / reduce / aggregate of a grouped stream, windowed or not.

    kind: "count" (columnar); "reduce" with ``how`` a pyarrow hash aggregate
    that combines ("sum", "min", "max": columnar) or a per-record function
    (v1, v2) -> v; "aggregate" with ``initializer()`` and per-record
    ``aggregator(key, value, aggregate)``; "columns" (columnar): ``how`` a
    list of (field of the struct value or None, "count" | "sum" | "min" |
    "max"), the aggregate a struct {"a0": ..., "a1": ...} of one per pair
    (None: every record counted; a field: its non-null values)."""

    prefix = "KSTREAM-AGGREGATE"

    def __init__(self, name, store, key_serde, kind, how=None, initializer=None, windows=None):
        super().__init__(name)
        self.store_name, self.store_names = store, [store]
        self.key_serde, self.kind, self.how = key_serde, kind, how
        self.initializer, self.windows = initializer, windows

    def process(self, task, batch):
        batch = _valid(batch)
        if not batch.num_rows:
            return
        key_serde = self.key_serde or serde_for(batch.column("key").type)
        store_keys = key_serde.serialize(batch.column("key"))
        store = task.store(self.store_name)
        window_starts = None
        if self.windows is not None:
            batch, store_keys, window_starts = self._windows(task, batch, store_keys)
            if not batch.num_rows:
                self._expire(task, store)
                return
        ts = batch.column("timestamp")
        if self.kind == "columns":
            uniq, new, last_rows, last_ts = self._columns(store, batch, store_keys)
        elif self.kind == "count" or (self.kind == "reduce" and isinstance(self.how, str)):
            table = pa.table({"k": store_keys, "row": pa.array(np.arange(batch.num_rows)),
                              "ts": ts})
            aggs = [("row", "max"), ("ts", "max")]
            if self.kind == "reduce":
                table = table.append_column("v", batch.column("value"))
                aggs.append(("v", self.how))
            grouped = table.group_by("k", use_threads=False).aggregate(
                aggs + ([("row", "count")] if self.kind == "count" else []))
            uniq = grouped.column("k").to_pylist()
            last_rows = grouped.column("row_max").combine_chunks()
            last_ts = grouped.column("ts_max").combine_chunks()
            if self.kind == "count":
                # absent keys: null -> 0 in Arrow, not a Python test per key
                old = pa.array(store.get_many(uniq), pa.int64()).fill_null(0).to_numpy()
                new = pa.array(old + grouped.column("row_count").to_numpy())
            else:
                fresh = grouped.column(f"v_{self.how}").combine_chunks()
                old = pa.array(store.get_many(uniq), fresh.type)
                both = getattr(pc, {"sum": "add", "min": "min_element_wise",
                                    "max": "max_element_wise"}[self.how])(old, fresh)
                new = pc.if_else(pc.is_null(old), fresh, both)
            store.put_many(uniq, new.to_pylist())
        else:
            uniq, new, last_rows, last_ts = self._per_record(store, batch, store_keys)
        # an update carries the latest timestamp of the records it took in this
        # batch (Kafka: max(record, aggregate) timestamps), so that what reads
        # the table downstream (suppress) sees the stream time of the records
        out = replace(batch.take(last_rows), timestamp=last_ts.cast(pa.int64()))
        if window_starts is None:
            self.forward(task, replace(out, value=new))
            return
        self._expire(task, store)
        self.forward(task, replace(out, value=new, window_start=window_starts.take(last_rows),
                                   window_end=pc.add(window_starts.take(last_rows),
                                                     self.windows.size_ms)))

    def _expire(self, task, store) -> None:
        """Windows past retention leave the store and the changelog (after
        the batch's puts: a window a record reached early in the batch may
        be past retention by the batch's last record, as record by record)."""
        store.expire(task.node_state[self.name]["stream_time"])

    def _columns(self, store, batch, store_keys):
        """Several columnar aggregates of a struct value in one pass: one
        pyarrow hash aggregate per pair, each combined with the stored
        aggregate of its key (null-aware: a group whose values are all null
        leaves a sum, min or max as it was)."""
        value = batch.column("value")
        rows = pa.array(np.arange(batch.num_rows))
        table = pa.table({"k": store_keys, "row": rows, "ts": batch.column("timestamp")})
        aggs = [("row", "max"), ("ts", "max")]
        for i, (field, op) in enumerate(self.how):
            table = table.append_column(f"a{i}", rows if field is None else value.field(field))
            aggs.append((f"a{i}", op))
        grouped = table.group_by("k", use_threads=False).aggregate(aggs)
        uniq = grouped.column("k").to_pylist()
        old = store.get_many(uniq)
        # the stored structs (dicts) as one Arrow struct, in C++: flatten()
        # gives each field with the rows of absent keys null
        known = None
        if any(o is not None for o in old):
            stored = pa.array(old)
            known = dict(zip((f.name for f in stored.type), stored.flatten()))
        names, merged = [], []
        for i, (_, op) in enumerate(self.how):
            fresh = grouped.column(f"a{i}_{op}").combine_chunks()
            before = pa.nulls(len(old), fresh.type) if known is None else \
                known[f"a{i}"].cast(fresh.type)
            if op == "count":
                both = pc.add(before.fill_null(0), fresh)
            else:
                both = pc.if_else(pc.is_null(before), fresh, pc.if_else(
                    pc.is_null(fresh), before, getattr(pc, {
                        "sum": "add_checked", "min": "min_element_wise",
                        "max": "max_element_wise"}[op])(before, fresh)))
            names.append(f"a{i}")
            merged.append(both)
        new = pa.StructArray.from_arrays(merged, names) if merged else \
            pa.array([{}] * len(uniq), pa.struct([]))
        store.put_many(uniq, new.to_pylist())
        return (uniq, new, grouped.column("row_max").combine_chunks(),
                grouped.column("ts_max").combine_chunks())

    def _per_record(self, store, batch, store_keys):
        """The slow path: the aggregator called once per record, in order."""
        kb = store_keys.to_pylist()
        uniq = list(dict.fromkeys(kb))
        current = dict(zip(uniq, store.get_many(uniq)))
        last, latest = {}, {}
        for b, t in zip(kb, batch.column("timestamp").to_pylist()):
            if t > latest.get(b, t - 1):
                latest[b] = t
        keys = batch.column("key").to_pylist()
        values = batch.column("value").to_pylist()
        if self.kind == "reduce":
            fn = self.how
            for i, (b, v) in enumerate(zip(kb, values)):
                a = current[b]
                current[b] = v if a is None else fn(a, v)
                last[b] = i
        else:
            init, fn = self.initializer, self.how
            for i, (b, k, v) in enumerate(zip(kb, keys, values)):
                a = current[b]
                current[b] = fn(k, v, init() if a is None else a)
                last[b] = i
        uniq = list(last)
        new = [current[b] for b in uniq]
        store.put_many(uniq, new)
        return (uniq, pa.array(new), pa.array(list(last.values()), pa.int64()),
                pa.array([latest[b] for b in uniq], pa.int64()))

    def _windows(self, task, batch, store_keys):
        """Each record once per window it falls in and is not late for;
        the late ones counted in ``dropped_records``."""
        ts = batch.column("timestamp").to_numpy()
        state = task.node_state.setdefault(self.name, {"stream_time": -1})
        stream_times = np.maximum.accumulate(np.maximum(ts, state["stream_time"]))
        state["stream_time"] = int(stream_times[-1])
        rows, starts, accepted = self.windows.assign(ts, stream_times)
        task.metrics["dropped_records"] += int((~accepted).sum())
        rows, starts = rows[accepted], starts[accepted]
        idx = pa.array(rows, pa.int64())
        keys = pc.binary_join_element_wise(store_keys.take(idx), long_bytes(starts), b"")
        return batch.take(idx), keys, pa.array(starts, pa.int64())


def long_bytes(values) -> pa.Array:
    """int64s as 8-byte big-endian binaries (window starts, timestamps)."""
    values = np.asarray(values, dtype=np.int64)
    return pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(8), len(values), [None, pa.py_buffer(values.astype(">i8").tobytes())]
    ).cast(pa.binary())


_SESSION = struct.Struct(">qq")
_START = struct.Struct(">q")
_COMBINE = {"sum": operator.add, "min": min, "max": max}


def _windowed_keys(node, task, batch):
    """For a session or sliding aggregation over ``batch``: the records' key
    bytes, the node's store, its state (stream time) and the stored entries
    of those keys."""
    key_serde = node.key_serde or serde_for(batch.column("key").type)
    kb = key_serde.serialize(batch.column("key")).to_pylist()
    store = task.store(node.store_name)
    state = task.node_state.setdefault(node.name, {"stream_time": -1})
    return kb, store, state, store.entries_of(dict.fromkeys(kb))


class SessionAggregateNode(ProcessorNode):
    """count / reduce / aggregate of a session-windowed grouped stream
    (Kafka's KStreamSessionWindowAggregate), record by record in time order
    per batch: a record finds its key's sessions ending at or after t - gap
    and starting at or before t + gap, merges them (``merger``) into one
    session spanning them and itself, and unless that session ends before
    stream time - grace (late: dropped and counted) replaces them with it.

    The store (a WindowStore with a 16-byte suffix) is keyed ``key bytes +
    session end + session start``, Kafka's session-key layout, so expiry
    by retention goes by session end. Store reads and writes are one
    multi-get and one write per batch; the merging is per record (a
    record's session depends on every earlier one of its key). Forwarded,
    per batch: each session's last value, and a tombstone for each session
    that was in the store before the batch and was merged away; the
    timestamp is the session's end (Kafka's)."""

    prefix = "KSTREAM-AGGREGATE"

    def __init__(self, name, store, key_serde, kind, how, initializer, merger, windows):
        super().__init__(name)
        self.store_name, self.store_names = store, [store]
        self.key_serde, self.kind, self.windows = key_serde, kind, windows
        if kind == "count":
            self.init, self.fold = (lambda: 0), (lambda k, v, a: a + 1)
            self.merge = lambda k, a, b: a + b
        elif kind == "reduce":
            fn = _COMBINE[how] if isinstance(how, str) else how
            self.init, self.fold = (lambda: None), (lambda k, v, a: v if a is None else fn(a, v))
            self.merge = lambda k, a, b: b if a is None else fn(a, b)
        else:
            self.init, self.fold, self.merge = initializer, how, merger

    def process(self, task, batch):
        batch = _valid(batch)
        if not batch.num_rows:
            return
        kb, store, state, held = _windowed_keys(self, task, batch)
        sessions: dict = {}     # key bytes -> {(start, end): aggregate}
        for e, v in zip(held, store.get_many(held)):
            end, start = _SESSION.unpack_from(e, len(e) - 16)
            sessions.setdefault(e[:-16], {})[(start, end)] = v
        before = set(held)
        changed: dict = {}      # composite key -> (aggregate or None, timestamp, row)
        gap, grace = self.windows.gap_ms, self.windows.grace_ms
        retention = store.retention_ms
        st, dropped = state["stream_time"], 0
        init, fold, merge = self.init, self.fold, self.merge
        for i, (b, k, v, t) in enumerate(zip(kb, batch.column("key").to_pylist(),
                                             batch.column("value").to_pylist(),
                                             batch.column("timestamp").to_pylist())):
            st = max(st, t)
            own = sessions.setdefault(b, {})
            min_live = st - retention + 1
            found = sorted(w for w in own if w[1] >= t - gap and w[0] <= t + gap
                           and w[1] >= min_live)
            start = end = t
            agg = init()
            for w in found:
                agg = merge(k, agg, own[w])
                start, end = min(start, w[0]), max(end, w[1])
            if end < st - grace:
                dropped += 1
                continue
            for w in found:
                del own[w]
                ck = b + _SESSION.pack(w[1], w[0])
                changed.pop(ck, None)
                changed[ck] = (None, w[1], i)
            own[(start, end)] = agg = fold(k, v, agg)
            ck = b + _SESSION.pack(end, start)
            changed.pop(ck, None)
            changed[ck] = (agg, end, i)
        state["stream_time"] = st
        task.metrics["dropped_records"] += dropped
        # a session made and merged away within the batch was never seen outside it
        out = [(ck, c) for ck, c in changed.items() if c[0] is not None or ck in before]
        store.put_many([ck for ck, _ in out], [c[0] for _, c in out])
        store.expire(st)
        if not out:
            return
        rows = pa.array([c[2] for _, c in out], pa.int64())
        times = np.frombuffer(b"".join(ck[-16:] for ck, _ in out), ">i8").astype(np.int64)
        values = [c[0] for _, c in out]
        self.forward(task, replace(
            batch.take(rows), value=store.value_serde.to_column(values),
            timestamp=pa.array([c[1] for _, c in out], pa.int64()),
            session_start=pa.array(times[1::2]), session_end=pa.array(times[0::2])))


class SlidingAggregateNode(ProcessorNode):
    """count / aggregate of a sliding-windowed grouped stream (Kafka's
    KStreamSlidingWindowAggregate, windows.SlidingWindows), record by
    record: a record updates the windows of its key that hold it, creates
    its left window (from the aggregate of the window before it when that
    one's records reach into it) and its right window (a copy of the
    aggregate of the windows after it) when a later record falls there,
    and the right window of the record before it. The store is timestamped
    (values {"value", "timestamp"}: the aggregate and its latest record's
    time, Kafka's layout on the changelog) and keyed key + window start,
    read with one multi-get and written with one write per batch. Forwarded
    per batch: each window's last aggregate, with window_start/window_end
    (end = start + difference, inclusive) and the window's latest record
    time."""

    prefix = "KSTREAM-AGGREGATE"

    def __init__(self, name, store, key_serde, kind, initializer, aggregator, windows):
        super().__init__(name)
        self.store_name, self.store_names = store, [store]
        self.key_serde, self.windows = key_serde, windows
        if kind == "count":
            self.init, self.fold = (lambda: 0), (lambda k, v, a: a + 1)
        else:
            self.init, self.fold = initializer, aggregator

    def process(self, task, batch):
        batch = _valid(batch)
        if not batch.num_rows:
            return
        kb, store, state, held = _windowed_keys(self, task, batch)
        windows: dict = {}      # key bytes -> {start: {"value", "timestamp"}}
        for e, vt in zip(held, store.get_many(held)):
            windows.setdefault(e[:-8], {})[_START.unpack_from(e, len(e) - 8)[0]] = vt
        changed: dict = {}      # composite key -> (row, {"value", "timestamp"})
        d, grace = self.windows.difference_ms, self.windows.grace_ms
        st, dropped = state["stream_time"], 0
        for i, (b, k, v, t) in enumerate(zip(kb, batch.column("key").to_pylist(),
                                             batch.column("value").to_pylist(),
                                             batch.column("timestamp").to_pylist())):
            st = max(st, t)
            close = st - grace
            if t + 1 + d <= close:
                dropped += 1
                continue
            min_live = st - store.retention_ms + 1
            own = windows.setdefault(b, {})
            put = {}
            dropped += (self._early if t < d else self._in_order)(own, k, v, t, close, min_live,
                                                                   put)
            for start, vt in put.items():
                own[start] = vt
                ck = b + _START.pack(start)
                changed.pop(ck, None)
                changed[ck] = (i, vt)
        state["stream_time"] = st
        task.metrics["dropped_records"] += dropped
        if changed:
            store.put_many(list(changed), [c[1] for c in changed.values()])
        store.expire(st)
        if not changed:
            return
        rows = pa.array([c[0] for c in changed.values()], pa.int64())
        starts = np.frombuffer(b"".join(ck[-8:] for ck in changed), ">i8").astype(np.int64)
        vts = [c[1] for c in changed.values()]
        self.forward(task, replace(
            batch.take(rows), value=store.value_serde.inner.to_column([x["value"] for x in vts]),
            timestamp=pa.array([x["timestamp"] for x in vts], pa.int64()),
            window_start=pa.array(starts), window_end=pa.array(starts + d)))

    def _update(self, k, v, t, start, vt, close, put) -> int:
        """The record into window ``start`` (aggregate ``vt``) unless the
        window is closed: -> 1 if it was (a dropped update), else 0."""
        if start + self.windows.difference_ms < close:
            return 1
        put[start] = {"value": self.fold(k, v, vt["value"]),
                      "timestamp": max(t, vt["timestamp"])}
        return 0

    def _in_order(self, own, k, v, t, close, min_live, put) -> int:
        d = self.windows.difference_ms
        left_agg = right_agg = prev = None
        left_made = right_made = False
        seen, dropped = set(), 0
        for start in sorted(s for s in own if max(0, t - 2 * d, min_live) <= s <= t + 1):
            vt, end = own[start], start + d
            seen.add(start)
            if end < t:
                left_agg, prev = vt, vt["timestamp"]
            elif end == t:
                left_made = True
                if vt["timestamp"] < t:
                    prev = vt["timestamp"]
                dropped += self._update(k, v, t, start, vt, close, put)
            elif start <= t:
                right_agg = vt
                dropped += self._update(k, v, t, start, vt, close, put)
            else:                       # start == t + 1: this record's right window
                right_made = True
        fresh = {"value": self.init(), "timestamp": t}
        if prev is not None and prev + 1 not in seen and prev + 1 + d >= t:
            dropped += self._update(k, v, t, prev + 1, fresh, close, put)
        if not left_made:
            base = fresh
            if prev is not None and t - d <= prev:
                base = {"value": left_agg["value"], "timestamp": t}
            dropped += self._update(k, v, t, t - d, base, close, put)
        if not right_made and right_agg is not None and right_agg["timestamp"] > t:
            put[t + 1] = right_agg
        return dropped

    def _early(self, own, k, v, t, close, min_live, put) -> int:
        """A record before the difference: its left window is [0, difference]."""
        combined = right_agg = prev = None
        right_made, seen, dropped = False, set(), 0
        for start in sorted(s for s in own if max(0, min_live) <= s <= t + 1):
            vt = own[start]
            seen.add(start)
            if start == 0:
                combined = vt
                if vt["timestamp"] < t:
                    prev = vt["timestamp"]
            elif start <= t:
                right_agg = vt
                dropped += self._update(k, v, t, start, vt, close, put)
            else:
                right_made = True
        if right_agg is None and combined is not None and combined["timestamp"] > t:
            right_agg = combined
        if not right_made and right_agg is not None and right_agg["timestamp"] > t:
            put[t + 1] = right_agg
        fresh = {"value": self.init(), "timestamp": t}
        if prev is not None and prev + 1 not in seen:
            dropped += self._update(k, v, t, prev + 1, fresh, close, put)
        return dropped + self._update(k, v, t, 0, combined or fresh, close, put)


class SuppressNode(ProcessorNode):
    """KTable.suppress(Suppressed.until_window_closes(...)) of a windowed
    table: each window's latest update waits in a buffer (a logged store
    keyed like the window store, value: 8-byte timestamp + the serialized
    value) and is forwarded once, when the stream time this node has seen
    (the largest timestamp of the updates reaching it) reaches window end
    + grace: the window's final result. Emitted in window-start order."""

    prefix = "KTABLE-SUPPRESS"

    def __init__(self, name, store, windows, key_serde, value_serde):
        super().__init__(name)
        self.store_name, self.store_names = store, [store]
        self.windows, self.key_serde, self.value_serde = windows, key_serde, value_serde

    def process(self, task, batch):
        key_serde = self.key_serde or serde_for(batch.column("key").type)
        value_serde = self.value_serde or serde_for(batch.column("value").type)
        buffer = task.store(self.store_name)
        ts = batch.column("timestamp")
        state = task.node_state.setdefault(self.name, {"stream_time": -1})
        state["stream_time"] = stream_time = max(state["stream_time"], pc.max(ts).as_py())
        keys = pc.binary_join_element_wise(key_serde.serialize(batch.column("key")),
                                           long_bytes(batch.column("window_start")), b"")
        held = pc.binary_join_element_wise(long_bytes(ts.to_numpy()),
                                           value_serde.serialize(batch.column("value")), b"")
        buffer.put_many(keys.to_pylist(), held.to_pylist())
        w = self.windows
        closed = [s for s in buffer.times() if s + w.size_ms + w.grace_ms <= stream_time]
        if not closed:
            return
        entries = sorted(buffer.entries_at(closed), key=lambda e: (e[-8:], e))
        raw = pa.array(buffer.get_many(entries), pa.binary())
        buffer.put_many(entries, [None] * len(entries))
        starts = np.frombuffer(b"".join(e[-8:] for e in entries), ">i8").astype(np.int64)
        n = len(entries)
        self.forward(task, pa.RecordBatch.from_arrays([
            key_serde.deserialize(pa.array([e[:-8] for e in entries], pa.binary())),
            value_serde.deserialize(pc.binary_slice(raw, 8, 1 << 30)),
            pa.array(np.frombuffer(b"".join(r[:8] for r in raw.to_pylist()), ">i8")
                     .astype(np.int64)),
            pa.array(np.full(n, task.partition, np.int32)), pa.array(np.full(n, -1, np.int64)),
            pa.nulls(n, batch.column("headers").type),
            pa.array(starts), pa.array(starts + w.size_ms)],
            names=["key", "value", "timestamp", "partition", "offset", "headers",
                   "window_start", "window_end"]))


class TableSourceNode(ProcessorNode):
    """builder.table(): materializes the topic (a null value deletes the
    key) and forwards every change."""

    prefix = "KTABLE-SOURCE"

    def __init__(self, name, store, key_serde):
        super().__init__(name)
        self.store_name, self.store_names, self.key_serde = store, [store], key_serde

    def process(self, task, batch):
        k = batch.column("key")
        if k.null_count:
            batch = batch.filter(pc.is_valid(k))
        keys = (self.key_serde or serde_for(k.type)).serialize(batch.column("key")).to_pylist()
        task.store(self.store_name).put_many(keys, batch.column("value").to_pylist())
        self.forward(task, batch)


class TableFilterNode(FilterNode):
    """KTable.filter: a row that fails becomes a tombstone for its key."""

    def mask(self, batch):
        if is_columnar(self.predicate):
            return super().mask(batch)
        keep = [True if v is None else bool(self.predicate(k, v)) != self.negate
                for k, v in zip(batch.column("key").to_pylist(), batch.column("value").to_pylist())]
        return pa.array(keep, pa.bool_())

    def process(self, task, batch):
        keep = pc.or_(self.mask(batch), pc.is_null(batch.column("value")))
        value = batch.column("value")
        self.forward(task, replace(batch, value=pc.if_else(keep, value,
                                                          pa.scalar(None, value.type))))


class TableMapValuesNode(MapNode):
    """KTable.map_values: tombstones stay tombstones."""

    def __init__(self, name, fn):
        super().__init__(name, fn, "map_values")

    def process(self, task, batch):
        live = pc.is_valid(batch.column("value"))
        if not is_columnar(self.fn):
            fn = self.fn
            values = [None if v is None else fn(v) for v in batch.column("value").to_pylist()]
            self.forward(task, replace(batch, value=pa.array(values)))
            return
        out = evaluate(self.fn, batch)
        self.forward(task, replace(batch, value=pc.if_else(live, out, pa.scalar(None, out.type))))
