"""Cluster metadata: topics, their configs, and each partition's replicas,
leader, in-sync replicas and leader epoch.

On-disk format: ``<data_dir>/cluster-metadata.json``, replaced atomically
(write, fsync, rename) on every change::

    {"version": 2, "cluster_id": "...",
     "topics": {"orders": {"topic_id": "<uuid>", "configs": {"retention.ms": "..."},
                           "partitions": [{"replicas": [0], "leader": 0, "isr": [0],
                                           "leader_epoch": 3}, ...]}}}

Version 1 files (``{"worker": 0, "leader_epoch": 3}`` per partition, one
replica each) are read as ``replicas = isr = [worker]``, ``leader = worker``
and written back as version 2 at the next change.

Brokers are the partition workers, by index. The leader is the broker
whose log serves the partition; the leader epoch goes up every time a
leadership (re)starts, so clients and logs can tell a restarted leader from
the old one. Until replication lands every partition has one replica.

Who may call: the supervisor only (single thread); workers learn what they
own through the control channel.
"""
from __future__ import annotations

import json
import os
import uuid
import zlib
from dataclasses import dataclass, field

from kafkalite.errors import (InvalidPartitionsError, InvalidTopicError, KafkaStorageError,
                              TopicAlreadyExistsError, UnknownTopicOrPartitionError)
from kafkalite.storage.checkpoint import write_atomically

METADATA_FILE = "cluster-metadata.json"
MAX_TOPIC_NAME = 249
_LEGAL = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def validate_topic_name(name) -> str:
    """Kafka's topic name rules; InvalidTopicError says which one is broken."""
    if not isinstance(name, str) or not name:
        raise InvalidTopicError("topic name must be a non-empty string")
    if name in (".", ".."):
        raise InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > MAX_TOPIC_NAME:
        raise InvalidTopicError(f"topic name is {len(name)} characters long; the limit is "
                                f"{MAX_TOPIC_NAME}")
    bad = sorted(set(name) - _LEGAL)
    if bad:
        raise InvalidTopicError(f"topic name {name!r} contains {''.join(bad)!r}: only ASCII "
                                f"letters, digits, '.', '_' and '-' are allowed")
    return name


@dataclass
class PartitionAssignment:
    replicas: list[int]
    leader: int
    isr: list[int]
    leader_epoch: int = 0

    @classmethod
    def single(cls, broker: int) -> "PartitionAssignment":
        return cls([broker], broker, [broker])

    @classmethod
    def from_json(cls, raw: dict) -> "PartitionAssignment":
        if "worker" in raw:                        # version 1
            p = cls.single(raw["worker"])
        else:
            p = cls(list(raw["replicas"]), raw["leader"], list(raw["isr"]))
        p.leader_epoch = raw["leader_epoch"]
        return p

    def to_json(self) -> dict:
        return {"replicas": self.replicas, "leader": self.leader, "isr": self.isr,
                "leader_epoch": self.leader_epoch}


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionAssignment]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name.startswith("__")


class MetadataStore:
    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, METADATA_FILE)
        self.cluster_id = ""
        self.topics: dict[str, TopicMetadata] = {}
        self._load()

    def _load(self) -> None:
        try:
            with open(self.path, encoding="utf-8") as f:
                raw = json.load(f)
        except FileNotFoundError:
            self.cluster_id = uuid.uuid4().hex[:22]
            return
        except (OSError, ValueError) as exc:
            raise KafkaStorageError(f"cannot read {self.path}: {exc}") from None
        self.cluster_id = raw["cluster_id"]
        for name, t in raw["topics"].items():
            self.topics[name] = TopicMetadata(
                name, uuid.UUID(t["topic_id"]),
                [PartitionAssignment.from_json(p) for p in t["partitions"]],
                dict(t.get("configs", {})))

    def save(self) -> None:
        raw = {"version": 2, "cluster_id": self.cluster_id, "topics": {
            t.name: {"topic_id": str(t.topic_id), "configs": t.configs,
                     "partitions": [p.to_json() for p in t.partitions]}
            for t in self.topics.values()}}
        write_atomically(self.path, json.dumps(raw, indent=1, sort_keys=True).encode())

    def get(self, name: str) -> TopicMetadata:
        topic = self.topics.get(name)
        if topic is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        return topic

    @staticmethod
    def _place(name: str, partition: int, workers: int) -> int:
        # Spread each topic's partitions over the workers, starting at a
        # per-topic offset so single-partition topics do not all land on 0.
        return (zlib.crc32(name.encode()) + partition) % workers

    def create_topic(self, name: str, partitions: int, configs: dict[str, str],
                     workers: int) -> TopicMetadata:
        validate_topic_name(name)
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if partitions < 1:
            raise InvalidPartitionsError(f"a topic needs at least 1 partition, not {partitions}")
        topic = TopicMetadata(name, uuid.uuid4(),
                              [PartitionAssignment.single(self._place(name, p, workers))
                               for p in range(partitions)], dict(configs))
        self.topics[name] = topic
        self.save()
        return topic

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.get(name)
        del self.topics[name]
        self.save()
        return topic

    def add_partitions(self, name: str, total: int, workers: int) -> list[int]:
        """Grow ``name`` to ``total`` partitions; returns the new partition numbers."""
        topic = self.get(name)
        current = len(topic.partitions)
        if total <= current:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions; the new count must be larger, "
                f"not {total}")
        new = list(range(current, total))
        topic.partitions += [PartitionAssignment.single(self._place(name, p, workers))
                             for p in new]
        self.save()
        return new

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.get(name).configs = dict(configs)
        self.save()

    def start_leadership(self, worker: int) -> list[tuple[str, int, int]]:
        """Bump the leader epoch of every partition ``worker`` leads (it is
        (re)starting); returns (topic, partition, new epoch)."""
        started = []
        for topic in self.topics.values():
            for i, p in enumerate(topic.partitions):
                if p.leader == worker:
                    p.leader_epoch += 1
                    started.append((topic.name, i, p.leader_epoch))
        if started:
            self.save()
        return started

    def rebalance(self, workers: int) -> int:
        """Move partitions of workers that no longer exist (the server was
        restarted with fewer); returns how many moved."""
        moved = 0
        for topic in self.topics.values():
            for i, p in enumerate(topic.partitions):
                if p.leader >= workers:
                    epoch = p.leader_epoch
                    topic.partitions[i] = PartitionAssignment.single(
                        self._place(topic.name, i, workers))
                    topic.partitions[i].leader_epoch = epoch
                    moved += 1
        if moved:
            self.save()
        return moved

    def owned_by(self, worker: int) -> list[tuple[TopicMetadata, int, PartitionAssignment]]:
        return [(t, i, p) for t in self.topics.values() for i, p in enumerate(t.partitions)
                if p.leader == worker]
