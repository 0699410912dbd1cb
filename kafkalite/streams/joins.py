"""Join processors: stream-table (inner, left), stream-globaltable (inner,
left), table-table (inner, left, outer) and stream-stream windowed (inner,
left), each working on a whole RecordBatch.

Who calls: the DSL (``KStream.join`` / ``left_join``) builds these nodes;
tasks run them. Both sides of a join are in one sub-topology (a stream-table
join shares the table's store; a stream-stream join's two side nodes share
one child), so their input topics are checked for co-partitioning before
anything runs (topology.py), and a side whose key was changed goes through a
repartition topic first, as in Kafka Streams.

ValueJoiner: a pyarrow.compute Expression or ``@columnar`` function runs
once per batch over ``key``, ``left_value``, ``right_value`` and
``timestamp`` columns (the fast path); any other callable is Kafka's
``joiner(left_value, right_value)``, called once per joined pair. In a left
join ``right_value`` is null where nothing matched.

Stream-table: the batch's distinct keys are looked up in the table's store
with one multi-get; ``pc.index_in`` spreads the values back over the rows.
A stream record with a null key or value is dropped (a left join keeps a
null-key record, with a null right value).

Stream-stream (Kafka's KStreamKStreamJoin, batch at a time): each side keeps
its records in a window store (key + timestamp + sequence, retention before
+ after + grace). Stream time is shared by both sides; per record it is the
largest timestamp seen so far, so a batch is judged as record by record:

- a record at or before stream time - (before + after + grace) is late:
  dropped, counted in ``dropped_records``;
- otherwise it joins the other side's records of its key in its window that
  are still within retention at its stream time (a pyarrow join of the
  batch against the other store's entries for the batch's keys, fetched in
  bulk), each pair forwarded with timestamp max(left, right);
- left join: a left record that matched nothing waits in a store of
  non-joined records; a right record that matches it while stream time is
  at most its timestamp + after + grace takes it out; once stream time
  passes that, it is forwarded with a null right value (Kafka's spurious-
  result fix: a left join emits a left-only result once, after its window
  closes, never before a match could still come).
"""
from __future__ import annotations

import struct

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kafkalite.streams.processors import ProcessorNode, keyed, serde_for
from kafkalite.streams.records import evaluate, is_columnar, replace

_TIME_SEQ = struct.Struct(">qq")


def _col(table: pa.Table, name: str) -> pa.Array:
    col = table.column(name)
    return col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)


def apply_joiner(joiner, keys: pa.Array, left: pa.Array, right: pa.Array,
                 timestamps: pa.Array) -> pa.Array:
    """The joined values of rows of (left, right) values."""
    if is_columnar(joiner):
        batch = pa.RecordBatch.from_arrays([keys, left, right, timestamps],
                                           ["key", "left_value", "right_value", "timestamp"])
        return evaluate(joiner, batch)
    return pa.array([joiner(lv, rv) for lv, rv in zip(left.to_pylist(), right.to_pylist())])


def _live(batch: pa.RecordBatch, keep_null_keys: bool) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    """(rows that join, rows with a null key a left join passes through)."""
    k, v = batch.column("key"), batch.column("value")
    if not (k.null_count or v.null_count):
        return batch, batch.slice(0, 0)
    valid_v = pc.is_valid(v)
    nokey = batch.filter(pc.and_(pc.is_null(k), valid_v)) if keep_null_keys else batch.slice(0, 0)
    return batch.filter(pc.and_(pc.is_valid(k), valid_v)), nokey


class StreamGlobalTableJoinNode(ProcessorNode):
    """KStream.join / left_join with a GlobalKTable: ``key_selector(key,
    value)`` (or columnar) names each record's key in the global table,
    looked up with one multi-get per batch in the instance's copy of the
    table (every partition of it: no co-partitioning). The output keeps
    the stream's key. A record with a null value is dropped; one whose
    selected key is null or not in the table is dropped by an inner join
    and joined with a null right value by a left join."""

    prefix = "KSTREAM-JOIN"

    def __init__(self, name, global_store, key_selector, key_serde, joiner, left: bool):
        super().__init__(name)
        self.global_store_name = global_store
        self.key_selector, self.key_serde = key_selector, key_serde
        self.joiner, self.left = joiner, left

    def process(self, task, batch):
        v = batch.column("value")
        if v.null_count:
            batch = batch.filter(pc.is_valid(v))
        if not batch.num_rows:
            return
        sel = self.key_selector
        if is_columnar(sel):
            gkeys = evaluate(sel, batch)
        else:
            gkeys = pa.array([sel(k, x) for k, x in zip(batch.column("key").to_pylist(),
                                                        batch.column("value").to_pylist())])
        store = task.global_store(self.global_store_name)
        keys = (self.key_serde or serde_for(gkeys.type)).serialize(gkeys)
        uniq = pc.unique(keys.filter(pc.is_valid(keys)))
        values = store.value_serde.to_column(store.get_many(uniq.to_pylist()))
        right = values.take(pc.index_in(keys, value_set=uniq))
        if not self.left:
            found = pc.is_valid(right)
            batch, right = batch.filter(found), right.filter(found)
        if batch.num_rows:
            self.forward(task, replace(batch, value=apply_joiner(
                self.joiner, batch.column("key"), batch.column("value"), right,
                batch.column("timestamp"))))

    def describe(self):
        return f"Processor: {self.name} (global store: {self.global_store_name})"


class TableTableJoinSide(ProcessorNode):
    """One side of a KTable-KTable join (inner, left, outer; Kafka's
    KTableKTableJoin): an update of this side's table (its store already
    written) is joined with the other table's current value of the key.
    Per batch, the last update of each key counts (as with Kafka's record
    cache). A join result exists for a key when both values do (inner),
    the left one does (left) or either does (outer); it is forwarded when
    it exists, and a tombstone when it did exist and no longer does. Whether
    it exists is kept in a logged store of its own (``presence``), since
    the tables forward new values only; keys with no result never get a
    tombstone."""

    prefix = "KTABLE-JOINTHIS"

    def __init__(self, name, is_left, other_store, presence, key_serde, joiner, how):
        super().__init__(name)
        self.is_left, self.other_store, self.presence = is_left, other_store, presence
        self.store_names = [other_store, presence]
        self.key_serde, self.joiner, self.how = key_serde, joiner, how

    def process(self, task, batch):
        batch, keys = keyed(batch, self.key_serde)
        if not batch.num_rows:
            return
        last = pa.table({"k": keys, "row": pa.array(np.arange(batch.num_rows))}).group_by(
            "k", use_threads=False).aggregate([("row", "max")])
        last_rows = _col(last, "row_max")
        order = pc.sort_indices(last_rows)
        batch = batch.take(last_rows.take(order))
        keys = _col(last, "k").take(order)
        kl = keys.to_pylist()
        other = task.store(self.other_store)
        mine = batch.column("value")
        theirs = other.value_serde.to_column(other.get_many(kl))
        if not self.is_left:
            mine, theirs = theirs, mine         # (left values, right values) from here on
        has_l, has_r = pc.is_valid(mine), pc.is_valid(theirs)
        exists = {"inner": pc.and_(has_l, has_r), "left": has_l,
                  "outer": pc.or_(has_l, has_r)}[self.how]
        presence = task.store(self.presence)
        existed = pc.is_valid(pa.array(presence.get_many(kl), pa.int64()))
        out = pc.or_(exists, existed)
        presence.put_many(kl, [1 if e else None for e in exists.to_pylist()])
        if not pc.any(out).as_py():
            return
        batch, mine, theirs, exists = (batch.filter(out), mine.filter(out), theirs.filter(out),
                                       exists.filter(out))
        joined = apply_joiner(self.joiner, batch.column("key"), mine, theirs,
                              batch.column("timestamp"))
        self.forward(task, replace(batch, value=pc.if_else(exists, joined,
                                                           pa.scalar(None, joined.type))))

    def describe(self):
        return f"Processor: {self.name} (stores: [{self.other_store}, {self.presence}])"


class StreamTableJoinNode(ProcessorNode):
    prefix = "KSTREAM-JOIN"

    def __init__(self, name, table_store, key_serde, joiner, left: bool):
        super().__init__(name)
        self.table_store, self.store_names = table_store, [table_store]
        self.key_serde, self.joiner, self.left = key_serde, joiner, left

    def process(self, task, batch):
        batch, nokey = _live(batch, self.left)
        store = task.store(self.table_store)
        if nokey.num_rows:
            self._forward_joined(task, nokey, pa.nulls(nokey.num_rows))
        if not batch.num_rows:
            return
        keys = (self.key_serde or serde_for(batch.column("key").type)).serialize(
            batch.column("key"))
        uniq = pc.unique(keys)
        values = store.value_serde.to_column(store.get_many(uniq.to_pylist()))
        right = values.take(pc.index_in(keys, value_set=uniq))
        if not self.left:
            found = pc.is_valid(right)
            batch, right = batch.filter(found), right.filter(found)
        self._forward_joined(task, batch, right)

    def _forward_joined(self, task, batch, right):
        if batch.num_rows:
            self.forward(task, replace(batch, value=apply_joiner(
                self.joiner, batch.column("key"), batch.column("value"), right,
                batch.column("timestamp"))))

    def describe(self):
        return f"Processor: {self.name} (stores: [{self.table_store}])"


class StreamStreamJoinSide(ProcessorNode):
    """One side of a stream-stream join; both sides forward to one child."""

    prefix = "KSTREAM-JOINTHIS"

    def __init__(self, name, shared, is_left, this_store, other_store, windows, joiner,
                 outer: bool, pending_store, key_serde):
        super().__init__(name)
        self.shared, self.is_left = shared, is_left
        self.this_store, self.other_store = this_store, other_store
        self.pending_store = pending_store
        self.store_names = [this_store, other_store] + ([pending_store] if pending_store else [])
        self.windows, self.joiner, self.outer, self.key_serde = windows, joiner, outer, key_serde
        w = windows
        # the other side's timestamps a record at t joins: [t - lo, t + hi]
        self.lo, self.hi = (w.before_ms, w.after_ms) if is_left else (w.after_ms, w.before_ms)

    def process(self, task, batch):
        batch, nokey = _live(batch, self.outer and self.is_left)
        if nokey.num_rows:
            self.forward(task, replace(nokey, value=apply_joiner(
                self.joiner, nokey.column("key"), nokey.column("value"),
                pa.nulls(nokey.num_rows), nokey.column("timestamp"))))
        if not batch.num_rows:
            return
        retention = self.windows.retention_ms
        state = task.node_state.setdefault(self.shared, {"stream_time": -1})
        ts = batch.column("timestamp").to_numpy()
        stream_times = np.maximum.accumulate(np.maximum(ts, state["stream_time"]))
        state["stream_time"] = stream_time = int(stream_times[-1])
        on_time = ts > stream_times - retention
        if not on_time.all():
            task.metrics["dropped_records"] += int((~on_time).sum())
            batch, ts, stream_times = (batch.filter(pa.array(on_time)), ts[on_time],
                                       stream_times[on_time])
        key_serde = self.key_serde or serde_for(batch.column("key").type)
        keys = key_serde.serialize(batch.column("key"))
        this, other = task.store(self.this_store), task.store(self.other_store)
        pairs = self._matches(batch, keys, ts, stream_times, other, retention)
        rows = _col(pairs, "row").to_numpy()
        if len(rows):
            mine = batch.take(pa.array(rows))
            other_values = _col(pairs, "other_value")
            left, right = (mine.column("value"), other_values) if self.is_left else \
                (other_values, mine.column("value"))
            when = pc.max_element_wise(mine.column("timestamp"), _col(pairs, "other_ts"))
            self.forward(task, replace(mine, timestamp=when, value=apply_joiner(
                self.joiner, mine.column("key"), left, right, when)))
        entries = self._entries(keys, ts, batch.column("offset").to_numpy())
        if self.outer:
            pending = task.store(self.pending_store)
            if self.is_left:
                lonely = np.ones(batch.num_rows, bool)
                lonely[rows] = False
                idx = np.flatnonzero(lonely)
                pending.put_many([entries[i] for i in idx],
                                 batch.column("value").take(pa.array(idx)).to_pylist())
            elif len(rows):
                # a match while the left record's window is open takes it out
                w = self.windows
                open_ = stream_times[rows] <= _col(pairs, "other_ts").to_numpy() \
                    + w.after_ms + w.grace_ms
                ids = [e for e, o in zip(_col(pairs, "other_entry").to_pylist(), open_) if o]
                ids = [e for e, v in zip(ids, pending.get_many(ids)) if v is not None]
                if ids:
                    pending.put_many(ids, [None] * len(ids))
        this.put_many(entries, batch.column("value").to_pylist())
        this.expire(stream_time)
        other.expire(stream_time)
        if self.outer:
            self._emit_closed(task, batch, key_serde, stream_time)

    def _matches(self, batch, keys, ts, stream_times, other, retention) -> pa.Table:
        """(row, other_ts, other_value, other_entry) of every joined pair,
        by row then other timestamp."""
        entries = other.entries_of(pc.unique(keys).to_pylist())
        times = np.array([_TIME_SEQ.unpack_from(e, len(e) - 16)[0] for e in entries], np.int64)
        cand = pa.table({"k": pa.array([e[:-16] for e in entries], pa.binary()),
                         "other_ts": pa.array(times, pa.int64()),
                         "other_entry": pa.array(entries, pa.binary()),
                         "other_value": other.value_serde.to_column(other.get_many(entries))})
        mine = pa.table({"k": keys, "row": pa.array(np.arange(batch.num_rows)),
                         "lo": pa.array(ts - self.lo), "hi": pa.array(ts + self.hi),
                         "expired": pa.array(stream_times - retention)})
        joined = mine.join(cand, keys="k", join_type="inner", use_threads=False)
        o = joined.column("other_ts")
        keep = pc.and_(pc.and_(pc.greater_equal(o, joined.column("lo")),
                               pc.less_equal(o, joined.column("hi"))),
                       pc.greater(o, joined.column("expired")))
        return joined.filter(keep).sort_by([("row", "ascending"), ("other_ts", "ascending")])

    def _entries(self, keys, ts, offsets) -> list:
        """Store keys of the batch's records: key + timestamp + a sequence
        (input offset and row, so that records of one key and timestamp
        stay apart, and a replay after a failure writes the same keys)."""
        seq = (offsets.astype(np.int64) << 20) | np.arange(len(ts), dtype=np.int64)
        suffix = np.empty(len(ts), dtype=[("t", ">i8"), ("s", ">i8")])
        suffix["t"], suffix["s"] = ts, seq
        raw = suffix.tobytes()
        return [k + raw[16 * i:16 * i + 16] for i, k in enumerate(keys.to_pylist())]

    def _emit_closed(self, task, batch, key_serde, stream_time) -> None:
        """Left records that found no match and whose window closed."""
        pending = task.store(self.pending_store)
        w = self.windows
        closed = [t for t in pending.times() if t + w.after_ms + w.grace_ms < stream_time]
        if not closed:
            return
        entries = sorted(pending.entries_at(closed), key=lambda e: e[-16:])
        values = pending.value_serde.to_column(pending.get_many(entries))
        pending.put_many(entries, [None] * len(entries))
        keys = key_serde.deserialize(pa.array([e[:-16] for e in entries], pa.binary()))
        when = pa.array([_TIME_SEQ.unpack_from(e, len(e) - 16)[0] for e in entries], pa.int64())
        n = len(entries)
        self.forward(task, pa.RecordBatch.from_arrays([
            keys, apply_joiner(self.joiner, keys, values, pa.nulls(n), when), when,
            pa.array(np.full(n, task.partition, np.int32)), pa.array(np.full(n, -1, np.int64)),
            pa.nulls(n, batch.column("headers").type)],
            names=["key", "value", "timestamp", "partition", "offset", "headers"]))

    def describe(self):
        return f"Processor: {self.name} (stores: [{', '.join(self.store_names)}])"
