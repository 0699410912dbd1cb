"""State stores: key-value and window stores, in memory or on RocksDB, each
backed by a compacted changelog topic.

A store belongs to one task (one sub-topology on one partition) and is used
from that task's thread only. Keys are the serialized key bytes (as Kafka
Streams' stores are bytes stores); values are Python objects the store's
value serde can write. Every bulk operation takes whole lists, so that a
processor merges a batch's aggregates with one multi-get and one write
(dict.get mapped in C, or RocksDB multi_get and a WriteBatch), not a Python
call per record.

Changelog: every put is also kept for the changelog topic
``<application.id>-<store>-changelog`` (cleanup.policy=compact, one partition
per input partition; the task writes partition p's changes to partition p),
taken by the task with ``take_changelog`` and produced with the outputs (in
the same transaction under exactly_once_v2). ``restore`` applies changelog
records without logging them again; a store is restored from its
changelog when its task is created.

Window store: a key-value store whose keys are ``key bytes + window start``
(8 bytes, big-endian, as in Kafka's window-store changelog keys, less the
sequence number), so window starts of one key sort together.

On disk (RocksDB, without a write-ahead log: the changelog is the durability):
one database per store per task under
``<state.dir>/<application.id>/<task>/<store>``, keys and values raw bytes
(values written by the store's value serde). What a database left by an
earlier run holds counts only if the task's ``.checkpoint`` (checkpoint.py)
names the changelog offset it reflects: the task then restores only the
changelog's tail from there; otherwise the runtime wipes it and restores the
whole changelog. ``checkpoint_flush`` makes the database durable on disk (the
memtables written to files) before a checkpoint is written for it.
"""
from __future__ import annotations

import collections
import itertools
import os
import shutil
import struct

import pyarrow as pa

from kafkalite.streams.serdes import Serde

_START = struct.Struct(">q")
_MISSING = object()


def window_key(key: bytes, start: int) -> bytes:
    return key + _START.pack(start)


def split_window_key(composite: bytes) -> tuple[bytes, int]:
    return composite[:-8], _START.unpack(composite[-8:])[0]


class KeyValueStore:
    """The in-memory store (a dict); RocksDBKeyValueStore keeps the same API."""

    persistent = False

    def __init__(self, name: str, value_serde: Serde, logged: bool = True):
        self.name = name
        self.value_serde = value_serde
        self.logged = logged
        self._data: dict = {}
        self._changes: dict = {}   # key -> last value since take_changelog (None: deleted)

    # ---- main read interface ----
    def get(self, key: bytes):
        return self.get_many([key])[0]

    def get_many(self, keys: list, default=None) -> list:
        return list(map(self._data.get, keys, itertools.repeat(default)))

    def all(self):
        """(key, value) pairs in key order."""
        return sorted(self._data.items())

    def keys(self) -> list:
        """Every key held (any order)."""
        return list(self._data)

    def approximate_num_entries(self) -> int:
        return len(self._data)

    # ---- main write interface ----
    def put_many(self, keys: list, values: list) -> None:
        """Set ``keys`` to ``values`` (a None value deletes), logging them."""
        self._apply(keys, values)
        if self.logged:
            self._changes.update(zip(keys, values))

    def put(self, key: bytes, value) -> None:
        self.put_many([key], [value])

    def delete(self, key: bytes) -> None:
        self.put_many([key], [None])

    def _apply(self, keys, values) -> None:
        if any(v is None for v in values):
            for k, v in zip(keys, values):
                if v is None:
                    self._data.pop(k, None)
                else:
                    self._data[k] = v
        else:
            self._data.update(zip(keys, values))

    # ---- changelog ----
    def take_changelog(self) -> tuple[list, pa.Array] | None:
        """The changes since the last call, one per key (the last: the
        changelog is compacted anyway), values serialized."""
        if not self._changes:
            return None
        keys, values = list(self._changes), list(self._changes.values())
        self._changes = {}
        return keys, self.value_serde.serialize(self.value_serde.to_column(values))

    def discard_changelog(self) -> None:
        self._changes = {}

    def restore(self, keys: list, values: pa.Array) -> None:
        """Apply changelog records (in log order; null values are deletes)."""
        self._apply(keys, self.value_serde.deserialize(values).to_pylist())

    def flush(self) -> None:
        pass

    def checkpoint_flush(self) -> None:
        """Everything written so far on disk (nothing to do in memory: an
        in-memory store is never checkpointed)."""

    def wipe(self) -> None:
        """Forget everything (before a restore from the changelog)."""
        self._data.clear()
        self._changes = {}

    def close(self) -> None:
        pass


class RocksDBKeyValueStore(KeyValueStore):
    """RocksDB under a cache of decoded values (Kafka Streams' record cache,
    here counted in entries): a batch's reads of hot keys are one dict
    lookup mapped in C instead of a multi_get and a decode. The cache is
    write-back: puts reach RocksDB at ``flush`` (a checkpoint, a close), the
    last value of each key once, and before the cache is emptied when it
    outgrows ``cache_entries``. Reads see the cache first, so they never
    see RocksDB behind it."""

    persistent = True

    def __init__(self, name: str, value_serde: Serde, path: str, logged: bool = True,
                 cache_entries: int = 1_000_000):
        super().__init__(name, value_serde, logged)
        from rocksdict import Options, WriteBatch
        self._WriteBatch = WriteBatch
        self._options = Options(raw_mode=True)
        self.path = path
        os.makedirs(os.path.dirname(path), exist_ok=True)
        # an earlier run's database is kept: the runtime wipes it unless the
        # task's checkpoint says which changelog offset it reflects
        self._empty = not os.path.exists(path)
        self._db = self._open()
        self._cache: dict = {}      # key -> value, None: known to be absent
        self._dirty: dict = {}      # key -> value not yet in RocksDB (None: delete)
        self._cache_entries = cache_entries

    def _open(self):
        from rocksdict import Rdict, WriteOptions
        db = Rdict(self.path, self._options)
        # no write-ahead log: the changelog topic is the store's durability
        # (a task rebuilds its stores from it), as Kafka Streams' RocksDB stores
        wo = WriteOptions()
        wo.disable_wal = True
        db.set_write_options(wo)
        return db

    def get_many(self, keys: list, default=None) -> list:
        if not keys:
            return []
        cache = self._cache
        # every key cached (the common case once warm): membership mapped in
        # C over bools, cheaper than looking for a sentinel in the values
        # (an int compared with it falls back to NotImplemented each time)
        if all(map(cache.__contains__, keys)):
            got = list(map(cache.__getitem__, keys))
        else:
            got = list(map(cache.get, keys, itertools.repeat(_MISSING)))
            missed = [i for i, v in enumerate(got) if v is _MISSING]
            raw = self._db[[keys[i] for i in missed]]
            present = [v for v in raw if v is not None]
            decoded = iter(self.value_serde.deserialize(pa.array(present, pa.binary()))
                           .to_pylist() if present else ())
            for i, v in zip(missed, raw):
                got[i] = self._cache[keys[i]] = None if v is None else next(decoded)
            self._trim()
        if default is not None:
            return [default if v is None else v for v in got]
        return got

    def _trim(self) -> None:
        if len(self._cache) > self._cache_entries:
            self.flush()
            self._cache.clear()

    def all(self):
        """(key, value) pairs in key order: RocksDB's, under the dirty entries."""
        items = list(self._db.items())
        values = self.value_serde.deserialize(pa.array([v for _, v in items], pa.binary()))
        merged = dict(zip([k for k, _ in items], values.to_pylist()))
        merged.update(dict(self._dirty))
        return sorted((k, v) for k, v in merged.items() if v is not None)

    def approximate_num_entries(self) -> int:
        return len(self.all())

    def keys(self) -> list:
        self.flush()
        return list(self._db.keys())

    def _apply(self, keys, values) -> None:
        self._empty = False
        self._cache.update(zip(keys, values))
        self._dirty.update(zip(keys, values))
        self._trim()

    def _write(self, keys, raw) -> None:
        wb = self._WriteBatch(raw_mode=True)
        if None in raw:
            for k, v in zip(keys, raw):
                if v is None:
                    wb.delete(k)
                else:
                    wb.put(k, v)
        else:       # no deletes: the puts mapped in C, no Python loop per record
            collections.deque(map(wb.put, keys, raw), maxlen=0)
        self._db.write(wb)

    def restore(self, keys: list, values: pa.Array) -> None:
        self.flush()
        self._empty = False
        self._cache.clear()
        self._write(keys, values.to_pylist())

    def flush(self) -> None:
        """Write the dirty entries to RocksDB."""
        if self._dirty:
            keys, values = list(self._dirty), list(self._dirty.values())
            self._dirty = {}
            self._write(keys, self.value_serde.serialize(self.value_serde.to_column(values))
                        .to_pylist())

    def checkpoint_flush(self) -> None:
        """The dirty entries into RocksDB and its memtables to files: without
        a write-ahead log, only what is in files survives a kill -9."""
        self.flush()
        self._db.flush(True)

    def wipe(self) -> None:
        self._changes = {}
        self._dirty = {}
        if self._empty:
            return
        self._db.close()
        self._cache.clear()
        shutil.rmtree(self.path, ignore_errors=True)
        self._db = self._open()
        self._empty = True

    def close(self) -> None:
        self.flush()
        self._db.close()


class WindowStore:
    """A window view over a key-value store of ``key bytes + time (8 bytes,
    big-endian) [+ sequence (8 bytes)]``: the time is a window start
    (windowed aggregations, suppression buffers: ``suffix`` 8) or a record
    timestamp (a stream-stream join's records: ``suffix`` 16, the sequence
    keeping records of one key and timestamp apart).

    Retention (Kafka's window-store rule): entries whose time is older than
    ``stream time - retention_ms + 1`` are dropped by ``expire`` and logged
    as tombstones, so a windowed store holds a bounded span of time. For a
    windowed aggregation retention is at least size + grace (Kafka's
    default is exactly that), so a window is dropped only once it is closed.

    Two in-memory indexes (rebuilt on restore) make expiry and per-key
    lookups cheap without scanning the store: time -> entries, and key
    bytes -> entries. They hold what the store holds, so they are bounded
    by the retention too."""

    def __init__(self, inner: KeyValueStore, size_ms: int, retention_ms: int | None = None,
                 suffix: int = 8):
        self.inner = inner
        self.size_ms = size_ms
        self.retention_ms = retention_ms
        self.suffix = suffix
        self._by_time: dict[int, set] = {}
        self._by_key: dict[bytes, set] = {}
        self.expired = 0            # entries dropped by retention (a metric)

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _time(self, composite: bytes) -> int:
        return _START.unpack_from(composite, len(composite) - self.suffix)[0]

    def _index(self, keys, present) -> None:
        by_time, by_key, suffix = self._by_time, self._by_key, self.suffix
        for k, live in zip(keys, present):
            t = _START.unpack_from(k, len(k) - suffix)[0]
            base = k[:-suffix]
            if live:
                by_time.setdefault(t, set()).add(k)
                by_key.setdefault(base, set()).add(k)
            else:
                for index, ik in ((by_time, t), (by_key, base)):
                    entries = index.get(ik)
                    if entries is not None:
                        entries.discard(k)
                        if not entries:
                            del index[ik]

    # ---- main write interface ----
    def put_many(self, keys: list, values: list) -> None:
        self.inner.put_many(keys, values)
        self._index(keys, [v is not None for v in values])

    def put(self, key: bytes, value) -> None:
        self.put_many([key], [value])

    def delete(self, key: bytes) -> None:
        self.put_many([key], [None])

    def expire(self, stream_time: int) -> int:
        """Drop (and tombstone in the changelog) every entry whose time is
        at most ``stream_time - retention_ms``; -> how many."""
        if self.retention_ms is None or not self._by_time:
            return 0
        min_live = stream_time - self.retention_ms + 1
        old = [t for t in self._by_time if t < min_live]
        if not old:
            return 0
        keys = [k for t in old for k in self._by_time[t]]
        self.put_many(keys, [None] * len(keys))
        self.expired += len(keys)
        return len(keys)

    def restore(self, keys: list, values: pa.Array) -> None:
        self.inner.restore(keys, values)
        self._index(keys, values.is_valid().to_pylist())

    def reindex(self) -> None:
        """The indexes from what the inner store holds (a persistent store
        kept from an earlier run, before its changelog's tail is restored)."""
        self._by_time.clear()
        self._by_key.clear()
        keys = self.inner.keys()
        self._index(keys, [True] * len(keys))

    def wipe(self) -> None:
        self.inner.wipe()
        self._by_time.clear()
        self._by_key.clear()

    # ---- main read interface ----
    def fetch(self, key: bytes, start: int):
        """The aggregate of ``key`` in the window starting at ``start``."""
        return self.inner.get(window_key(key, start))

    def fetch_range(self, key: bytes, time_from: int, time_to: int) -> list:
        """(time, value) of ``key``'s entries with time_from <= time <=
        time_to, by time (Kafka's WindowStore.fetch(key, from, to))."""
        entries = sorted(k for k in self._by_key.get(key, ())
                         if time_from <= self._time(k) <= time_to)
        return list(zip(map(self._time, entries), self.inner.get_many(entries)))

    def entries_of(self, keys) -> list:
        """The composite keys held for each of ``keys`` (key bytes), flat."""
        get = self._by_key.get
        return [k for key in keys for k in get(key, ())]

    def times(self) -> list:
        """The distinct times held, ascending."""
        return sorted(self._by_time)

    def entries_at(self, times) -> list:
        return [k for t in times for k in self._by_time.get(t, ())]

    def fetch_all(self):
        """((key, start), value) of every window, by key then start."""
        return [((k[:-self.suffix], self._time(k)), v) for k, v in self.inner.all()]

    def approximate_num_entries(self) -> int:
        return sum(map(len, self._by_key.values()))


def global_store(spec, state_dir: str | None, application_id: str, default_store: str):
    """The local copy of a GlobalKTable's store (not logged: its topic is
    its changelog); RocksDB under ``<state.dir>/<application.id>/global``."""
    kind = spec.kind or default_store
    if kind == "rocksdb":
        if state_dir is None:
            raise ValueError("RocksDB stores need state.dir")
        return RocksDBKeyValueStore(spec.name, spec.value_serde,
                                    os.path.join(state_dir, application_id, "global", spec.name),
                                    logged=False)
    return KeyValueStore(spec.name, spec.value_serde, logged=False)


def apply_global(store: KeyValueStore, consumer_batch: pa.RecordBatch) -> None:
    """Records of a global table's topic (a consumer batch: key and value
    bytes) into its store; a null value deletes, a null key is skipped."""
    keys = consumer_batch.column("key")
    if keys.null_count:
        consumer_batch = consumer_batch.filter(keys.is_valid())
    if consumer_batch.num_rows:
        store.restore(consumer_batch.column("key").cast(pa.binary()).to_pylist(),
                      consumer_batch.column("value").cast(pa.binary()))
