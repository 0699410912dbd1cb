"""Interactive queries (Kafka's ``KafkaStreams.store``): a read-only view
of one state store over the tasks an instance runs (``LocalStores``), or
over every stream thread of an instance (``ThreadsStores``).

What runtime.py's KafkaStreams.store returns; reads take the instance's
lock, so a view is safe beside its stream thread.
"""
from __future__ import annotations


class LocalStores:
    """Interactive queries on this instance: a store over its local tasks."""

    def __init__(self, streams, name: str):
        self.streams, self.name = streams, name

    def _stores(self):
        with self.streams._lock:
            if self.name in self.streams.global_stores:
                return [self.streams.global_stores[self.name]]
            return [t.stores[self.name] for t in self.streams.tasks.values()
                    if self.name in t.stores]

    def get(self, key: bytes):
        for s in self._stores():
            v = s.get(key)
            if v is not None:
                return v
        return None

    def all(self):
        return sorted(kv for s in self._stores() for kv in s.all())


class ThreadsStores:
    """Interactive queries over every thread's local stores."""

    def __init__(self, parts):
        self.parts = parts

    def get(self, key: bytes):
        for p in self.parts:
            v = p.get(key)
            if v is not None:
                return v
        return None

    def all(self):
        return sorted(kv for p in self.parts for kv in p.all())
