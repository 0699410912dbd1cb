"""Cluster metadata: topics, their configs, and each partition's replicas,
leader, in-sync replicas and leader epoch.

On-disk format: a snapshot, ``<data_dir>/cluster-metadata.json``, replaced
atomically (write, fsync, rename)::

    {"version": 2, "cluster_id": "...", "offset": 41,
     "topics": {"orders": {"topic_id": "<uuid>", "configs": {"retention.ms": "..."},
                           "partitions": [{"replicas": [0, 1, 2], "leader": 0, "isr": [0, 1],
                                           "leader_epoch": 3, "partition_epoch": 7}, ...]}},
     "broker_configs": {"": {"log.retention.ms": "..."}, "0": {...}}}

``broker_configs`` are the dynamic broker configs (config_registry.py): the
cluster-wide defaults under "", each broker's own under its id;
``group_configs`` each group's own configs (group_config.py), by group id.
They change rarely, so each change writes a new snapshot rather than a line
of the log (and a version that predates them reads the file without them).

and the changes since it, ``<data_dir>/cluster-metadata.log``: one JSON
object a line, appended and fsynced before the change is acted on, each the
whole new state of one topic or its deletion::

    {"topic": "orders", "value": {"topic_id": ..., "configs": ..., "partitions": [...]}}
    {"topic": "orders", "value": null}

so that a change costs what the changed topic weighs, not what the whole
cluster does (creating thousands of topics one at a time stays linear).

``offset`` is the end offset of the metadata as KRaft's log would have it:
how many changes were made durable over the cluster's life, each line of
the log one and each snapshot written for a change one (the snapshot keeps
the count so far, the lines replayed add theirs). DescribeQuorum answers it
as the metadata log's high watermark. It only grows: a crash between a
snapshot and the log's emptying replays lines the snapshot holds, which
counts them twice, a gap but never a step back.
Loading replays the log over the snapshot; a torn last line (a crash during
an append) is dropped. When the log outgrows the snapshot (and at least
``MIN_COMPACTION_BYTES``), a new snapshot is written and the log emptied;
replaying a log over a snapshot that already holds its changes is harmless,
so a crash between the two loses nothing.

Version 1 files (``{"worker": 0, "leader_epoch": 3}`` per partition, one
replica each) are read as ``replicas = isr = [worker]``, ``leader = worker``
and written back as version 2 at the next change.

Internal topics (``INTERNAL_TOPICS``: Kafka's ``__consumer_offsets``,
``__transaction_state`` and ``__share_group_state``) are never in this file: their coordinators keep them
in the supervisor, and no client may create, write, delete or alter them. A
file written by an older version that let a client create one as a user
topic is read without it (logged); the coordinator's own data is untouched.

Brokers are the partition workers, by index. A partition has
``replicas`` on distinct brokers (one, unless the topic was created with a
replication factor); the leader is the one whose log serves clients, the
others follow it. The leader epoch goes up every time a leadership
(re)starts, so clients and logs can tell a new leader from the old one;
the partition epoch goes up at every change of leader or ISR, and a change
proposed against an older partition epoch is refused (the role of Kafka's
AlterPartition partition epoch). The ISR changes only through the
controller (replication_control.py), which decides elections.

Where a replica's log lives: ``<data_dir>/<topic>-<partition>`` for a
partition created with one replica (as before replication), and
``<data_dir>/broker-<id>/<topic>-<partition>`` for each replica of one
created replicated (``per_broker_dir``; ``replica_dir``), since several
workers hold a copy. The choice stays with the partition, so its logs are
found again whatever happens to its replica set. A partition created with
one replica that gains replicas by reassignment keeps that replica's log
where it is (``shared_owner``) and gives the new ones their own.

Who may call: the supervisor only (single thread); workers learn what they
own through the control channel.
"""
from __future__ import annotations

import json
import logging
import os
import uuid
import zlib
from dataclasses import dataclass, field

from kafkalite.errors import (InvalidPartitionsError, InvalidRequestError, KafkaStorageError,
                              TopicAlreadyExistsError, UnknownTopicOrPartitionError)
from kafkalite.server.topic import INTERNAL_TOPICS, validate_topic_name
from kafkalite.storage.checkpoint import fsync_dir, write_all, write_atomically

log = logging.getLogger("kafkalite.metadata")

METADATA_FILE = "cluster-metadata.json"
CHANGES_FILE = "cluster-metadata.log"
MIN_COMPACTION_BYTES = 1 << 20


def replica_dir(topic: str, partition: int, broker: int, per_broker_dir: bool,
                shared_owner: int | None = None) -> str:
    """A replica's log directory, relative to the data directory.
    ``shared_owner``: the broker of a partition created with one replica
    that gained more by reassignment; its log stays where it was."""
    if not per_broker_dir or broker == shared_owner:
        return f"{topic}-{partition}"
    return os.path.join(f"broker-{broker}", f"{topic}-{partition}")


@dataclass
class PartitionAssignment:
    replicas: list[int]
    leader: int
    isr: list[int]
    leader_epoch: int = 0
    partition_epoch: int = 0
    per_broker_dir: bool = False
    # a partition created with one replica (in the shared layout) that gained
    # replicas by reassignment: the broker whose log is still <topic>-<n>
    shared_owner: int | None = None
    # a reassignment under way (KIP-455): replicas joining, replicas to drop
    # once the joining ones are in sync; ``replicas`` holds both meanwhile
    adding: list[int] = field(default_factory=list)
    removing: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, replicas: list[int]) -> "PartitionAssignment":
        """A new partition on ``replicas``, the first leading, all in sync."""
        return cls(list(replicas), replicas[0], list(replicas),
                   per_broker_dir=len(replicas) > 1)

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
        p.partition_epoch = raw.get("partition_epoch", 0)
        p.per_broker_dir = raw.get("per_broker_dir", False)
        p.shared_owner = raw.get("shared_owner")
        p.adding = list(raw.get("adding", ()))
        p.removing = list(raw.get("removing", ()))
        return p

    def to_json(self) -> dict:
        return {"replicas": self.replicas, "leader": self.leader, "isr": self.isr,
                "leader_epoch": self.leader_epoch, "partition_epoch": self.partition_epoch,
                **({"per_broker_dir": True} if self.per_broker_dir else {}),
                **({"shared_owner": self.shared_owner} if self.shared_owner is not None else {}),
                **({"adding": self.adding, "removing": self.removing}
                   if self.adding or self.removing else {})}


@dataclass
class TopicMetadata:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionAssignment]
    configs: dict[str, str] = field(default_factory=dict)

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class MetadataStore:
    def __init__(self, data_dir: str):
        self.path = os.path.join(data_dir, METADATA_FILE)
        self.changes_path = os.path.join(data_dir, CHANGES_FILE)
        self.cluster_id = ""
        self.topics: dict[str, TopicMetadata] = {}
        # dynamic broker configs: "" (cluster-wide default) or a broker id -> {name: value}
        self.broker_configs: dict[str, dict[str, str]] = {}
        # group configs (KIP-848): group id -> {name: value}
        self.group_configs: dict[str, dict[str, str]] = {}
        self.offset = 0          # the changes made durable (module docstring)
        self._snapshot_bytes = 0
        self._changes_bytes = 0
        self._load()

    @staticmethod
    def _topic(name: str, t: dict) -> TopicMetadata:
        return TopicMetadata(name, uuid.UUID(t["topic_id"]),
                             [PartitionAssignment.from_json(p) for p in t["partitions"]],
                             dict(t.get("configs", {})))

    @staticmethod
    def _topic_json(t: TopicMetadata) -> dict:
        return {"topic_id": str(t.topic_id), "configs": t.configs,
                "partitions": [p.to_json() for p in t.partitions]}

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
                data = f.read()
            raw = json.loads(data)
        except FileNotFoundError:
            raw = None
        except (OSError, ValueError) as exc:
            raise KafkaStorageError(f"cannot read {self.path}: {exc}") from None
        if raw is None:
            self.cluster_id = uuid.uuid4().hex[:22]
        else:
            self._snapshot_bytes = len(data)
            self.cluster_id = raw["cluster_id"]
            self.offset = raw.get("offset", 0)
            self.broker_configs = {k: dict(v) for k, v in raw.get("broker_configs", {}).items()}
            self.group_configs = {k: dict(v) for k, v in raw.get("group_configs", {}).items()}
            for name, t in raw["topics"].items():
                self.topics[name] = self._topic(name, t)
        replayed = self._replay_changes()
        self.offset += replayed
        if raw is None and not replayed:
            return
        refused = [name for name in self.topics if name in INTERNAL_TOPICS]
        for name in refused:
            del self.topics[name]
            # An older version let clients create these as user topics, whose
            # partitions then shared the coordinator's directories. The
            # directories are the coordinator's: leave them, drop the topic.
            log.error("%s lists %r as a user topic (an older version let a client create it); "
                      "it is internal and kept by its coordinator, so it is no longer a user "
                      "topic. Its directories %s-N are left as they are for the coordinator.",
                      self.path, name, os.path.join(os.path.dirname(self.path), name))
        if refused or raw is None:
            self.save()

    def _replay_changes(self) -> int:
        """Apply cluster-metadata.log; returns how many changes it held."""
        try:
            with open(self.changes_path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise KafkaStorageError(f"cannot read {self.changes_path}: {exc}") from None
        good = count = 0
        for line in data.splitlines(keepends=True):
            try:
                if not line.endswith(b"\n"):
                    raise ValueError("no end of line")
                change = json.loads(line)
                name, value = change["topic"], change["value"]
                if value is None:
                    self.topics.pop(name, None)
                else:
                    self.topics[name] = self._topic(name, value)
            except (ValueError, KeyError, TypeError) as exc:
                if good + len(line) < len(data):
                    raise KafkaStorageError(f"{self.changes_path} is damaged at byte {good}: "
                                            f"{exc}") from None
                log.warning("%s: dropping a torn last change (%d bytes): %s",
                            self.changes_path, len(line), exc)
                try:   # so that the next change does not follow the torn one
                    os.truncate(self.changes_path, good)
                except OSError as err:
                    raise KafkaStorageError(f"cannot truncate {self.changes_path}: "
                                            f"{err}") from None
                break
            good += len(line)
            count += 1
        self._changes_bytes = good
        return count

    def save(self, changed=None) -> None:
        """Make the current state durable: the topics named in ``changed``
        appended to the change log, or (``changed`` None, or a log grown
        past the snapshot) a whole new snapshot."""
        if changed is not None and self._snapshot_bytes and self._changes_bytes < max(
                self._snapshot_bytes, MIN_COMPACTION_BYTES):
            lines = b"".join(json.dumps({"topic": name, "value": (
                self._topic_json(self.topics[name]) if name in self.topics else None)},
                sort_keys=True).encode() + b"\n" for name in changed)
            self._append_changes(lines, len(changed))
            return
        raw = {"version": 2, "cluster_id": self.cluster_id, "offset": self.offset + 1, "topics": {
            t.name: self._topic_json(t) for t in self.topics.values()},
            **({"broker_configs": self.broker_configs} if self.broker_configs else {}),
            **({"group_configs": self.group_configs} if self.group_configs else {})}
        data = json.dumps(raw, indent=1, sort_keys=True).encode()
        write_atomically(self.path, data)
        self.offset += 1
        self._snapshot_bytes = len(data)
        if self._changes_bytes or os.path.exists(self.changes_path):
            # the snapshot holds every change: the log can start again
            write_atomically(self.changes_path, b"")
        self._changes_bytes = 0

    def _append_changes(self, lines: bytes, count: int) -> None:
        new = not os.path.exists(self.changes_path)
        try:
            fd = os.open(self.changes_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                write_all(fd, lines)
                os.fsync(fd)
            finally:
                os.close(fd)
            if new:
                fsync_dir(os.path.dirname(self.changes_path) or ".")
        except OSError as exc:
            # A partial line is dropped at the next load as a torn change;
            # resynchronise with a snapshot so nothing follows it.
            log.error("cannot append to %s (%s); writing a snapshot instead",
                      self.changes_path, exc.strerror or exc)
            self.save()
            return
        self._changes_bytes += len(lines)
        self.offset += count

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

    @classmethod
    def _replicas(cls, name: str, partition: int, workers: int, factor: int) -> PartitionAssignment:
        # The leader as _place puts it, its followers on the next workers:
        # distinct brokers, and leaderships spread as evenly as before.
        first = cls._place(name, partition, workers)
        return PartitionAssignment.of([(first + k) % workers for k in range(factor)])

    def create_topic(self, name: str, partitions: int, configs: dict[str, str],
                     workers: int, replication_factor: int = 1,
                     assignments: list[list[int]] | None = None) -> TopicMetadata:
        """``assignments``: each partition's replicas (the first leads),
        given instead of ``partitions`` and ``replication_factor``."""
        validate_topic_name(name)
        if name in INTERNAL_TOPICS:
            raise InvalidRequestError(f"creation of internal topic {name} is prohibited")
        if name in self.topics:
            raise TopicAlreadyExistsError(f"topic {name!r} already exists")
        if partitions < 1:
            raise InvalidPartitionsError(f"a topic needs at least 1 partition, not {partitions}")
        if assignments:
            placed = [PartitionAssignment.of(r) for r in assignments]
        else:
            placed = [self._replicas(name, p, workers, replication_factor)
                      for p in range(partitions)]
        topic = TopicMetadata(name, uuid.uuid4(), placed, dict(configs))
        self.topics[name] = topic
        self.save([name])
        return topic

    def delete_topic(self, name: str) -> TopicMetadata:
        topic = self.get(name)
        del self.topics[name]
        self.save([name])
        return topic

    def add_partitions(self, name: str, total: int, workers: int,
                       assignments: list[list[int]] | None = None) -> list[int]:
        """Grow ``name`` to ``total`` partitions, with the topic's
        replication factor (or the ``assignments`` given); returns the new
        partition numbers."""
        topic = self.get(name)
        current = len(topic.partitions)
        if total <= current:
            raise InvalidPartitionsError(
                f"topic {name!r} has {current} partitions; the new count must be larger, "
                f"not {total}")
        new = list(range(current, total))
        factor = len(topic.partitions[0].replicas) if topic.partitions else 1
        if assignments:
            topic.partitions += [PartitionAssignment.of(r) for r in assignments]
        else:
            topic.partitions += [self._replicas(name, p, workers, factor) for p in new]
        self.save([name])
        return new

    def remove_partitions(self, name: str, count: int) -> None:
        """Shrink ``name`` back to ``count`` partitions: undoes an
        ``add_partitions`` whose new partitions could not be opened (no
        client has been told they succeeded)."""
        topic = self.get(name)
        del topic.partitions[count:]
        self.save([name])

    def set_configs(self, name: str, configs: dict[str, str]) -> None:
        self.get(name).configs = dict(configs)
        self.save([name])

    def set_broker_configs(self, resource: str, configs: dict[str, str]) -> None:
        """Make ``configs`` the dynamic configs of broker ``resource`` (its
        id, or "" for the cluster-wide defaults), durably; on failure
        nothing changed."""
        before = self.broker_configs.get(resource)
        if configs:
            self.broker_configs[resource] = dict(configs)
        else:
            self.broker_configs.pop(resource, None)
        try:
            self._save_broker_configs(resource)
        except Exception:
            if before is None:
                self.broker_configs.pop(resource, None)
            else:
                self.broker_configs[resource] = before
            raise

    def _save_broker_configs(self, resource: str) -> None:
        self.save()

    def set_group_configs(self, group: str, configs: dict[str, str]) -> None:
        """Make ``configs`` group ``group``'s own configs, durably; on
        failure nothing changed."""
        before = self.group_configs.get(group)
        if configs:
            self.group_configs[group] = dict(configs)
        else:
            self.group_configs.pop(group, None)
        try:
            self._save_group_configs(group)
        except Exception:
            if before is None:
                self.group_configs.pop(group, None)
            else:
                self.group_configs[group] = before
            raise

    def _save_group_configs(self, group: str) -> None:
        self.save()

    def start_leadership(self, worker: int) -> list[tuple[str, int, int]]:
        """Bump the leader epoch of every partition ``worker`` leads (it is
        (re)starting: nobody took its partitions over, because they have
        one replica or no other in-sync one was alive); returns (topic,
        partition, new epoch)."""
        started = []
        for topic in self.topics.values():
            for i, p in enumerate(topic.partitions):
                if p.leader == worker:
                    p.leader_epoch += 1
                    p.partition_epoch += 1
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
                if any(b >= workers for b in p.replicas):
                    epoch = p.leader_epoch
                    kept = [b for b in p.replicas if b < workers]
                    if len(p.replicas) > 1 and kept:
                        # a replicated partition keeps its remaining replicas
                        # (and their logs); one of them leads
                        isr = [b for b in p.isr if b < workers] or kept[:1]
                        topic.partitions[i] = PartitionAssignment(
                            kept, isr[0], isr, per_broker_dir=True,
                            shared_owner=p.shared_owner if p.shared_owner in kept else None)
                    else:
                        topic.partitions[i] = self._replicas(topic.name, i, workers,
                                                             min(len(p.replicas), workers))
                    topic.partitions[i].leader_epoch = epoch + 1
                    topic.partitions[i].partition_epoch = p.partition_epoch + 1
                    moved += 1
        if moved:
            self.save()
        return moved

    def owned_by(self, worker: int) -> list[tuple[TopicMetadata, int, PartitionAssignment]]:
        """The partitions ``worker`` leads."""
        return [(t, i, p) for t in self.topics.values() for i, p in enumerate(t.partitions)
                if p.leader == worker]

    def hosted_by(self, worker: int) -> list[tuple[TopicMetadata, int, PartitionAssignment]]:
        """The partitions ``worker`` has a replica of (leads or follows)."""
        return [(t, i, p) for t in self.topics.values() for i, p in enumerate(t.partitions)
                if worker in p.replicas]
