"""Re-grouping a KTable (Kafka's KGroupedTable) and its aggregation with an
adder and a subtractor.

``table.group_by(selector)`` maps each row ``(key, value)`` to ``(new key,
new value)``; the aggregate of a new key is over the *current* rows of the
table that map to it, so an update of a table row must take its old mapped
value out of the old group before the new one goes into the new group.
Kafka gets the old value from the upstream table (Change<old, new>); here
the re-grouping node keeps the table's current value per key in a logged
store of its own (``<name>-table-store``), which also makes it work
downstream of tables that are not materialized (filter, map_values).

Each update becomes up to two records on the repartition topic
``<name>-repartition``, keyed by the new key: a subtraction of the old
mapped value (if the row existed and mapped to a non-null key) and then an
addition of the new one (unless it is a tombstone). The value is one flag
byte (``-`` or ``+``) and the mapped value's bytes (its serde, or the typed
repartition serde). When old and new map to the same key both records go to
one partition in that order, so the group's aggregate passes through
``subtract(old)`` then ``add(new)``, as Kafka's KTableAggregate does.

The aggregation node (``TableAggregateNode``) applies them in order:
count (``+1`` / ``-1``), reduce (``adder(agg, v)``, ``subtractor(agg, v)``;
the first value of an empty group is the aggregate) and aggregate
(``adder(key, v, agg)``, ``subtractor(key, v, agg)`` from
``initializer()``). A group is never deleted by subtraction (Kafka keeps
count 0 and the subtractor's result), and it forwards the new aggregate of
each group it touched, once per batch.

These are per-record Python loops (a subtractor is a Python function by
nature); the slow path of records.py.

Who calls: dsl.py (KTable.group_by, KGroupedTable); tasks run the nodes.
"""
from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from kafkalite.streams.processors import ProcessorNode, serde_for
from kafkalite.streams.records import replace

SUBTRACT, ADD = b"-", b"+"


class TableGroupByNode(ProcessorNode):
    """KTable.group_by's map: table updates -> subtract/add records."""

    prefix = "KTABLE-SELECT"

    def __init__(self, name, store, key_serde, selector, value_serde):
        super().__init__(name)
        self.store_name, self.store_names = store, [store]
        self.key_serde, self.selector, self.value_serde = key_serde, selector, value_serde

    def process(self, task, batch):
        k = batch.column("key")
        if k.null_count:
            batch = batch.filter(pc.is_valid(k))
        if not batch.num_rows:
            return
        kb = (self.key_serde or serde_for(batch.column("key").type)).serialize(
            batch.column("key")).to_pylist()
        store = task.store(self.store_name)
        uniq = list(dict.fromkeys(kb))
        current = dict(zip(uniq, store.get_many(uniq)))
        rows, new_keys, mapped, flags = [], [], [], []
        select = self.selector
        for i, (b, key, value) in enumerate(zip(kb, batch.column("key").to_pylist(),
                                                batch.column("value").to_pylist())):
            for flag, v in ((SUBTRACT, current[b]), (ADD, value)):
                if v is None:
                    continue
                g, x = select(key, v)
                if g is None or x is None:
                    continue        # Kafka drops a null key or value here
                rows.append(i)
                new_keys.append(g)
                mapped.append(x)
                flags.append(flag)
            current[b] = value
        store.put_many(uniq, [current[b] for b in uniq])
        if not rows:
            return
        values = pa.array(mapped)
        inner = (self.value_serde or serde_for(values.type)).serialize(values)
        flagged = pc.binary_join_element_wise(pa.array(flags, pa.binary()), inner, b"")
        self.forward(task, replace(batch.take(pa.array(rows, pa.int64())),
                                   key=pa.array(new_keys), value=flagged))


class TableAggregateNode(ProcessorNode):
    """KGroupedTable.count / reduce / aggregate over subtract/add records."""

    prefix = "KTABLE-AGGREGATE"

    def __init__(self, name, store, key_serde, value_serde, kind, adder=None, subtractor=None,
                 initializer=None):
        super().__init__(name)
        self.store_name, self.store_names = store, [store]
        self.key_serde, self.value_serde, self.kind = key_serde, value_serde, kind
        self.adder, self.subtractor, self.initializer = adder, subtractor, initializer

    def process(self, task, batch):
        k, raw = batch.column("key"), batch.column("value")
        if k.null_count or raw.null_count:
            batch = batch.filter(pc.and_(pc.is_valid(k), pc.is_valid(raw)))
            k, raw = batch.column("key"), batch.column("value")
        if not batch.num_rows:
            return
        flags = pc.binary_slice(raw, 0, 1).to_pylist()
        values = self.value_serde.deserialize(pc.binary_slice(raw, 1, 1 << 30)).to_pylist()
        kb = (self.key_serde or serde_for(k.type)).serialize(k).to_pylist()
        store = task.store(self.store_name)
        uniq = list(dict.fromkeys(kb))
        current = dict(zip(uniq, store.get_many(uniq)))
        last, latest = {}, {}
        keys = k.to_pylist()
        for i, (b, key, flag, v, t) in enumerate(zip(kb, keys, flags, values,
                                                     batch.column("timestamp").to_pylist())):
            current[b] = self._apply(key, flag, v, current[b])
            last[b] = i
            latest[b] = max(latest.get(b, t), t)
        touched = list(last)
        new = [current[b] for b in touched]
        store.put_many(touched, new)
        out = batch.take(pa.array(list(last.values()), pa.int64()))
        self.forward(task, replace(out, value=store.value_serde.to_column(new),
                                   timestamp=pa.array([latest[b] for b in touched],
                                                      pa.int64())))

    def _apply(self, key, flag, v, agg):
        if self.kind == "count":
            return (agg or 0) + (1 if flag == ADD else -1)
        if self.kind == "reduce":
            if flag == ADD:
                return v if agg is None else self.adder(agg, v)
            return None if agg is None else self.subtractor(agg, v)
        if agg is None:
            agg = self.initializer()
        return self.adder(key, v, agg) if flag == ADD else self.subtractor(key, v, agg)

    def describe(self):
        return f"Processor: {self.name} (stores: [{self.store_name}])"
