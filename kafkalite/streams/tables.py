"""KTable operations that go through internal topics: re-grouping a KTable
(Kafka's KGroupedTable) with an adder and a subtractor, and the foreign-key
table-table join.

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

Foreign-key join (Kafka's KTableKTableForeignKeyJoin, KIP-213):
``left.join(right, foreign_key_extractor, joiner)`` joins each left row
``(k, v)`` with the right row whose key is ``foreign_key_extractor(v)``; the
result is keyed by ``k``, and changes when either side changes. The tables
are not co-partitioned, so, as in Kafka, the work crosses two internal
topics:

- left side (``FkSubscribeNode``, the left table's task): keeps each left
  key's current value (store ``<name>-left-store``); on an update it sends
  an unsubscription to the old foreign key if that changed, and a
  subscription ``(fk, hash of the new value, k)`` to
  ``<name>-subscription-repartition``, keyed by the foreign key serialized
  as the right table's keys are (so it lands in the right table's
  partition); a deleted left row (or, in an inner join, one whose foreign
  key is null) makes a tombstone for ``k`` at once.
- right side (``FkSubscriptionNode`` and ``FkRightUpdateNode``, the right
  table's task): keeps the subscribers of each foreign key (store
  ``<name>-subscription-store``: fk -> "<left key hex>:<hash hex> ...");
  a subscription is
  answered with the right table's current value, and a right update or
  delete with a response to every subscriber, on
  ``<name>-response-repartition`` keyed by the left key.
- left side again (``FkResolveNode``): a response whose hash is not that of
  the left key's current value is stale (the row changed since) and is
  dropped; otherwise it forwards ``joiner(v, right value)``, or for a
  missing right row a tombstone (inner) or ``joiner(v, None)`` (left).

The internal records: subscription value ``S`` (answer always) or ``P``
(answer only if the right row exists: a new row of an inner join, which
needs no tombstone, Kafka's PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE) + 8-byte
hash + left key bytes, or ``U`` + left key bytes; response value 8-byte hash + ``1`` +
right value bytes (the right store's serde), or 8-byte hash + ``0``.

These are per-record Python loops (a subtractor or a foreign-key extractor
is a Python function by nature); the slow path of records.py.

Who calls: dsl.py (KTable.group_by, KGroupedTable); tasks run the nodes.
"""
from __future__ import annotations

import hashlib

import pyarrow as pa
import pyarrow.compute as pc

from kafkalite.streams.processors import ProcessorNode, keyed, serde_for
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
        batch, kb = keyed(batch, self.key_serde)
        if not batch.num_rows:
            return
        kb = kb.to_pylist()
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


def _hash(serialized: bytes) -> bytes:
    return hashlib.blake2b(serialized, digest_size=8).digest()


def _binary(values: list) -> pa.Array:
    return pa.array(values, pa.binary())


def _subscribers(stored: str | None) -> dict:
    """The subscription store's value: "<left key hex>:<hash hex> ..."."""
    return dict(e.split(":") for e in stored.split()) if stored else {}


def _stored(subscribers: dict) -> str | None:
    return " ".join(f"{k}:{h}" for k, h in subscribers.items()) or None


class FkSubscribeNode(ProcessorNode):
    """Foreign-key join, left side: subscriptions out, direct results
    (tombstones, left-join rows without a foreign key) to ``result``."""

    prefix = "KTABLE-FK-JOIN-SUBSCRIBE"

    def __init__(self, name, store, key_serde, fk_serde, extractor, how, joiner):
        super().__init__(name)
        self.store_name, self.store_names = store, [store]
        self.key_serde, self.fk_serde = key_serde, fk_serde
        self.extractor, self.how, self.joiner = extractor, how, joiner
        self.subscriptions = self.result = None      # children, set by the DSL

    def process(self, task, batch):
        batch, kb = keyed(batch, self.key_serde)
        if not batch.num_rows:
            return
        keys, kb = batch.column("key").to_pylist(), kb.to_pylist()
        values = batch.column("value").to_pylist()
        store = task.store(self.store_name)
        # hashed as the store writes them: FkResolveNode hashes the stored value
        vbytes = store.value_serde.serialize(store.value_serde.to_column(values)).to_pylist()
        uniq = list(dict.fromkeys(kb))
        current = dict(zip(uniq, store.get_many(uniq)))
        fk_of = self.extractor
        subs, results = ([], [], []), ([], [], [])     # (rows, keys, values)
        for i, (b, key, v, raw) in enumerate(zip(kb, keys, values, vbytes)):
            old = current[b]
            old_fk = None if old is None else fk_of(old)
            new_fk = None if v is None else fk_of(v)
            if old_fk is not None and old_fk != new_fk:
                for col, x in zip(subs, (i, old_fk, b"U" + b)):
                    col.append(x)
            if new_fk is not None:
                # a new inner-join row needs no tombstone if nothing matches
                # (Kafka's PROPAGATE_ONLY_IF_FK_VAL_AVAILABLE): "P", else "S"
                op = b"P" if old is None and self.how == "inner" else b"S"
                for col, x in zip(subs, (i, new_fk, op + _hash(raw) + b)):
                    col.append(x)
            elif v is not None and self.how == "left":
                for col, x in zip(results, (i, key, self.joiner(v, None))):
                    col.append(x)
            elif old is not None:
                for col, x in zip(results, (i, key, None)):
                    col.append(x)
            current[b] = v
        store.put_many(uniq, [current[b] for b in uniq])
        if subs[0]:
            fks = self.fk_serde.serialize(self.fk_serde.to_column(subs[1]))
            self.forward_to(task, replace(batch.take(pa.array(subs[0], pa.int64())), key=fks,
                                          value=_binary(subs[2])), self.subscriptions)
        if results[0]:
            self.forward_to(task, replace(batch.take(pa.array(results[0], pa.int64())),
                                          key=pa.array(results[1], batch.column("key").type),
                                          value=pa.array(results[2])), self.result)


class FkSubscriptionNode(ProcessorNode):
    """Foreign-key join, right side: a (un)subscription from the left."""

    prefix = "KTABLE-FK-JOIN-SUBSCRIPTION"

    def __init__(self, name, subscriptions_store, right_store):
        super().__init__(name)
        self.subs, self.right = subscriptions_store, right_store
        self.store_names = [subscriptions_store, right_store]

    def process(self, task, batch):
        fks = batch.column("key").to_pylist()
        ops = batch.column("value").to_pylist()
        store, right = task.store(self.subs), task.store(self.right)
        uniq = list(dict.fromkeys(f for f in fks if f is not None))
        subscribers = {f: _subscribers(s) for f, s in zip(uniq, store.get_many(uniq))}
        rvalues = dict(zip(uniq, right.get_many(uniq)))
        answer = [(i, f, op) for i, (f, op) in enumerate(zip(fks, ops))
                  if f is not None and op and (op[:1] == b"S" or op[:1] == b"P" and
                                               rvalues[f] is not None)]
        rows, keys, values = [], [], []
        for i, (f, op) in enumerate(zip(fks, ops)):
            if f is None or not op:
                continue
            if op[:1] == b"U":
                subscribers[f].pop(op[1:].hex(), None)
            else:
                subscribers[f][op[9:].hex()] = op[1:9].hex()
        store.put_many(uniq, [_stored(subscribers[f]) for f in uniq])
        if not answer:
            return
        present = [f for _, f, _ in answer if rvalues[f] is not None]
        raw = dict(zip(present, right.value_serde.serialize(right.value_serde.to_column(
            [rvalues[f] for f in present])).to_pylist())) if present else {}
        for i, f, op in answer:
            rows.append(i)
            keys.append(op[9:])
            values.append(op[1:9] + (b"1" + raw[f] if f in raw else b"0"))
        self.forward(task, replace(batch.take(pa.array(rows, pa.int64())), key=_binary(keys),
                                   value=_binary(values)))


class FkRightUpdateNode(ProcessorNode):
    """Foreign-key join, right side: a right table update, answered to
    every subscriber of its key."""

    prefix = "KTABLE-FK-JOIN-RIGHT"

    def __init__(self, name, subscriptions_store, key_serde, right_value_serde):
        super().__init__(name)
        self.subs, self.store_names = subscriptions_store, [subscriptions_store]
        self.key_serde, self.right_value_serde = key_serde, right_value_serde

    def process(self, task, batch):
        batch, fks = keyed(batch, self.key_serde)
        if not batch.num_rows:
            return
        fks = fks.to_pylist()
        raw = self.right_value_serde.serialize(
            self.right_value_serde.to_column(batch.column("value").to_pylist())).to_pylist()
        uniq = list(dict.fromkeys(fks))
        subscribers = dict(zip(uniq, task.store(self.subs).get_many(uniq)))
        rows, keys, values = [], [], []
        for i, (f, r) in enumerate(zip(fks, raw)):
            for pk, h in _subscribers(subscribers[f]).items():
                rows.append(i)
                keys.append(bytes.fromhex(pk))
                values.append(bytes.fromhex(h) + (b"0" if r is None else b"1" + r))
        if rows:
            self.forward(task, replace(batch.take(pa.array(rows, pa.int64())),
                                       key=_binary(keys), value=_binary(values)))


class FkResolveNode(ProcessorNode):
    """Foreign-key join, left side: responses joined with the current left
    value, stale ones dropped."""

    prefix = "KTABLE-FK-JOIN-RESOLVE"

    def __init__(self, name, left_store, left_key_serde, right_value_serde, how, joiner):
        super().__init__(name)
        self.store_name, self.store_names = left_store, [left_store]
        self.left_key_serde, self.right_value_serde = left_key_serde, right_value_serde
        self.how, self.joiner = how, joiner

    def process(self, task, batch):
        kb = batch.column("key").to_pylist()
        responses = batch.column("value").to_pylist()
        left = task.store(self.store_name)
        uniq = list(dict.fromkeys(kb))
        current = dict(zip(uniq, left.get_many(uniq)))
        live = [b for b in uniq if current[b] is not None]
        lraw = dict(zip(live, left.value_serde.serialize(left.value_serde.to_column(
            [current[b] for b in live])).to_pylist())) if live else {}
        rights = [r[9:] for r in responses if r is not None and r[8:9] == b"1"]
        rvals = iter(self.right_value_serde.deserialize(_binary(rights)).to_pylist()
                     if rights else ())
        rows, values = [], []
        for i, (b, r) in enumerate(zip(kb, responses)):
            if r is None:
                continue
            rv = next(rvals) if r[8:9] == b"1" else None
            if b not in lraw or _hash(lraw[b]) != r[:8]:
                continue            # the left row changed (or went) since it subscribed
            if rv is None and self.how == "inner":
                rows.append(i)
                values.append(None)
            else:
                rows.append(i)
                values.append(self.joiner(current[b], rv))
        if rows:
            out = batch.take(pa.array(rows, pa.int64()))
            keys = self.left_key_serde.deserialize(out.column("key"))
            self.forward(task, replace(out, key=keys, value=pa.array(values)))
