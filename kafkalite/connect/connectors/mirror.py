"""MirrorMaker 2 on the Connect framework: cluster-to-cluster mirroring.

Three connectors, as Kafka's MM2 (``connect-mirror``), each run by a worker
whose ``bootstrap.servers`` is the TARGET cluster; the source cluster is
``source.cluster.bootstrap.servers``:

- MirrorSourceConnector: copies the topics matching ``topics`` (regexes,
  comma separated) from the source to the target under the replication
  policy's name (DefaultReplicationPolicy: ``<source.cluster.alias>.<topic>``;
  IdentityReplicationPolicy keeps the name), with the same partition count
  (grown when the source grows) and the source topic's non-default configs
  (MM2's DefaultConfigPropertyFilter excludes). Records keep key, value,
  headers, timestamp and partition, and gain the header
  ``kafkalite.mirror.source`` = source alias. Loop prevention: a topic whose
  name says it came from the target alias is never mirrored, and a record
  carrying ``kafkalite.mirror.source`` = target alias is dropped (the only
  guard under the identity policy). Source offsets are the worker's (in the
  target's ``mm2-offsets.<source>.internal`` topic under ``kafkalite mirror``):
  a restart resumes after the last acknowledged record -- at least once.
  After each offset commit the task writes offset syncs (upstream offset ->
  downstream offset: the first and last record of each partition copied
  since the previous commit and one every ``offset.lag.max``) to ``mm2-offset-syncs.<target alias>.internal`` on the
  source cluster, in MM2's binary format (mirror_records.py).
- MirrorCheckpointConnector: every ``emit.checkpoints.interval.seconds``
  translates the committed offsets of the groups matching ``groups`` through
  the offset syncs (MM2's rule: a sync at exactly the committed offset maps
  to its downstream offset, otherwise to the downstream offset + 1 of the
  latest sync below it) and writes Checkpoint records to
  ``<source alias>.checkpoints.internal`` on the target, keyed by the
  topic's name there (``east.orders``; a topic that came from the target
  by its original name), as MM2's; ``translate_offsets`` (mirror_client.py)
  reads them back as RemoteClusterUtils.translateOffsets does; with
  ``sync.group.offsets.enabled`` it also commits them for the same group on
  the target when that group has no active members there, only forwards.
- MirrorHeartbeatConnector: a Heartbeat record to ``heartbeats`` on the
  target every ``emit.heartbeats.interval.seconds``.

The at-least-once window of a consumer group switched to the target: it
re-reads at most the records of a partition between two offset syncs
(``offset.lag.max``, default 100, upstream offsets) before its committed offset
as last checkpointed,
and after a kill of the mirror the records copied since its last offset
commit appear twice on the target.

The source cluster is reached through kafkalite's own clients (native
protocol, ``source.cluster.protocol=native``, the default) or through
Kafka's protocol (``kafka``: confluent-kafka's clients, for a source that
is Apache Kafka or any other Kafka-speaking cluster, or kafkalite's Kafka
listener); ``_NativeSource``/``_KafkaSource`` hide which. The target is the
worker's cluster (native).

Who calls: the worker (by ``connector.class`` names listed in plugins.py)
and ``kafkalite mirror`` (cli/mirror.py).
"""
from __future__ import annotations

import bisect
import logging
import re
import threading
import time
from dataclasses import dataclass

from kafkalite.connect.api import SourceConnector, SourceRecord, SourceRecordBatch, SourceTask
from kafkalite.connect.config import HIGH, STRING, ConfigDef, one_of
from kafkalite.connect.connectors.mirror_records import (decode_offset_sync, encode_checkpoint,
                                                         encode_heartbeat, encode_offset_sync)
from kafkalite.connect.errors import ConnectException

log = logging.getLogger("kafkalite.connect.mirror")

MIRROR_HEADER = "kafkalite.mirror.source"
_BYTES = "org.apache.kafka.connect.converters.ByteArrayConverter"
# MM2's DefaultConfigPropertyFilter: configs a remote topic never copies
CONFIG_EXCLUDES = re.compile(
    r"follower\.replication\.throttled\.replicas|leader\.replication\.throttled\.replicas|"
    r"message\.timestamp\.difference\.max\.ms|message\.timestamp\.type|"
    r"unclean\.leader\.election\.enable|min\.insync\.replicas")


# ---- replication policies ---------------------------------------------------------------------

class DefaultReplicationPolicy:
    """``<source alias><separator><topic>`` (MM2's DefaultReplicationPolicy)."""

    def __init__(self, separator: str = "."):
        self.separator = separator

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return f"{source_alias}{self.separator}{topic}"

    def topic_source(self, topic: str) -> str | None:
        alias, sep, _ = topic.partition(self.separator)
        return alias if sep else None

    def upstream_topic(self, topic: str) -> str | None:
        _, sep, rest = topic.partition(self.separator)
        return rest if sep else None

    def original_topic(self, topic: str) -> str:
        """The topic's name on the cluster it was first written to
        (ReplicationPolicy.originalTopic): ``us-west.topic1`` -> ``topic1``."""
        up = self.upstream_topic(topic)
        return topic if up is None else self.original_topic(up)


class IdentityReplicationPolicy(DefaultReplicationPolicy):
    """Remote topics keep their names; loops are stopped by the header only."""

    def format_remote_topic(self, source_alias: str, topic: str) -> str:
        return topic

    def topic_source(self, topic: str) -> str | None:
        return None

    def original_topic(self, topic: str) -> str:
        return topic


def replication_policy(props: dict):
    name = props.get("replication.policy.class", "DefaultReplicationPolicy").rsplit(".", 1)[-1]
    sep = props.get("replication.policy.separator", ".")
    if name == "DefaultReplicationPolicy":
        return DefaultReplicationPolicy(sep)
    if name == "IdentityReplicationPolicy":
        return IdentityReplicationPolicy(sep)
    raise ConnectException(f"replication.policy.class {name!r}: DefaultReplicationPolicy or "
                           f"IdentityReplicationPolicy")


def _patterns(text: str) -> re.Pattern | None:
    parts = [p.strip() for p in (text or "").split(",") if p.strip()]
    return re.compile("|".join(f"(?:{p})" for p in parts)) if parts else None


def is_internal(topic: str) -> bool:
    """Topics MM2 never mirrors: Kafka's and Connect's internal ones, MM2's own."""
    return (topic.startswith("__") or topic.startswith("mm2-") or topic.endswith(".internal")
            or topic.startswith("connect-") or topic == "heartbeats")


def _aliases(props: dict) -> tuple[str, str]:
    return props.get("source.cluster.alias", "source"), props.get("target.cluster.alias", "target")


def _source_client(props: dict) -> dict:
    """The source cluster's client config: ``source.cluster.bootstrap.servers``
    and any ``source.cluster.<client key>``."""
    out = {k[len("source.cluster."):]: v for k, v in props.items()
           if k.startswith("source.cluster.")
           and k not in ("source.cluster.alias", "source.cluster.protocol")}
    if "bootstrap.servers" not in out:
        raise ConnectException("source.cluster.bootstrap.servers is required")
    return out


def source_cluster(props: dict):
    """The source cluster by ``source.cluster.protocol``."""
    protocol = props.get("source.cluster.protocol", "native")
    if protocol == "native":
        return _NativeSource(_source_client(props))
    if protocol == "kafka":
        return _KafkaSource(_source_client(props))
    raise ConnectException(f"source.cluster.protocol {protocol!r}: native or kafka")


class _NativeSource:
    """The source cluster through kafkalite's own clients. Each method is one
    question MM2 asks of its source; _KafkaSource asks the same over Kafka's
    protocol."""

    def __init__(self, client: dict):
        import kafkalite.client as clients
        self.client, self.clients = client, clients
        self.admin = clients.AdminClient(client)

    def topics(self) -> dict[str, int]:
        """{topic: partition count}."""
        return {t: len(m.partitions) for t, m in self.admin.list_topics(timeout=30).topics.items()}

    def dynamic_configs(self, topics: list[str]) -> dict:
        """{topic: {key: value}} of the configs set on each topic."""
        from kafkalite.client import ConfigResource, ConfigSource
        res = [ConfigResource("topic", t) for t in topics]
        return {r.name: {k: e.value for k, e in fut.result().items()
                         if e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG and e.value is not None}
                for r, fut in self.admin.describe_configs(res).items()}

    def ensure_topic(self, name: str, partitions: int, config: dict) -> None:
        ensure_topic(self.admin, name, partitions, config)

    def groups(self) -> list[str]:
        return [g.group_id for g in self.admin.list_consumer_groups().result()]

    def group_offsets(self, group: str) -> list[tuple[str, int, int]]:
        return [(tp.topic, tp.partition, tp.offset)
                for tp in self.admin.list_consumer_group_offsets(group).result()]

    def consumer(self, group: str, assignment: list[tuple[str, int, int | None]]):
        """A consumer of ``assignment`` [(topic, partition, offset or None for
        the beginning)] (consume() and close() as confluent-kafka's: both
        client modules have the same shapes)."""
        m = self.clients
        c = m.Consumer({**self.client, "group.id": group, "enable.auto.commit": False})
        c.assign([m.TopicPartition(t, p, m.OFFSET_BEGINNING if o is None else o)
                  for t, p, o in assignment])
        return c

    def producer(self):
        return self.clients.Producer({**self.client, "linger.ms": 0})

    @staticmethod
    def close_producer(producer) -> None:
        producer.close(10)

    def close(self) -> None:
        self.admin.close()


class _KafkaSource(_NativeSource):
    """The source cluster over Kafka's protocol (confluent-kafka's clients)."""

    def __init__(self, client: dict):
        import confluent_kafka as clients
        from confluent_kafka.admin import AdminClient
        self.client, self.clients = client, clients
        self.admin = AdminClient(client)

    def dynamic_configs(self, topics: list[str]) -> dict:
        from confluent_kafka.admin import ConfigResource, ConfigSource, ResourceType
        res = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
        dynamic = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
        return {r.name: {k: e.value for k, e in fut.result().items()
                         if getattr(e.source, "value", e.source) == dynamic
                         and e.value is not None}
                for r, fut in self.admin.describe_configs(res).items()}

    def ensure_topic(self, name: str, partitions: int, config: dict) -> None:
        from confluent_kafka import KafkaError, KafkaException
        from confluent_kafka.admin import NewTopic
        fut = self.admin.create_topics([NewTopic(name, partitions, config=dict(config))])[name]
        try:
            fut.result()
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise

    def groups(self) -> list[str]:
        return [g.group_id for g in self.admin.list_consumer_groups().result().valid]

    def group_offsets(self, group: str) -> list[tuple[str, int, int]]:
        from confluent_kafka import ConsumerGroupTopicPartitions
        res = self.admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)])
        return [(tp.topic, tp.partition, tp.offset)
                for tp in res[group].result().topic_partitions]

    @staticmethod
    def close_producer(producer) -> None:
        producer.flush(10)

    def close(self) -> None:
        pass                # confluent-kafka's AdminClient has no close


def _target_client(props: dict) -> dict:
    out = {k[len("target.cluster."):]: v for k, v in props.items()
           if k.startswith("target.cluster.") and k != "target.cluster.alias"}
    if "bootstrap.servers" not in out:
        raise ConnectException("target.cluster.bootstrap.servers is required")
    return out


def offset_syncs_topic(props: dict) -> str:
    return f"mm2-offset-syncs.{_aliases(props)[1]}.internal"


def checkpoints_topic(props: dict) -> str:
    return checkpoints_topic_of(_aliases(props)[0])


def checkpoints_topic_of(source_alias: str) -> str:
    """Where the checkpoints of the groups of cluster ``source_alias`` go on
    the target (ReplicationPolicy.checkpointsTopic)."""
    return f"{source_alias}.checkpoints.internal"


def ensure_topic(admin, name: str, partitions: int = 1, config: dict | None = None) -> None:
    from kafkalite.client import NewTopic
    from kafkalite.errors import TopicAlreadyExistsError
    try:
        admin.create_topics([NewTopic(name, partitions, config=dict(config or {}))])[name].result()
    except TopicAlreadyExistsError:
        pass


class OffsetSyncStore:
    """The offset syncs of a cluster pair read from the offset-syncs topic:
    per (topic, partition) a bounded, upstream-sorted history."""

    KEEP = 256

    def __init__(self, source, topic: str):
        """``source``: the source cluster (source_cluster()), or a native
        client config."""
        if isinstance(source, dict):
            source = _NativeSource(source)
        self._consumer = source.consumer(f"{topic}-reader", [(topic, 0, None)])
        self.syncs: dict = {}      # (topic, partition) -> [(upstream, downstream)] sorted

    def read(self, timeout: float = 0.5) -> None:
        """Reads what arrived since the last call."""
        while True:
            msgs = self._consumer.consume(10_000, timeout)
            if not msgs:
                return
            for m in msgs:
                if m.error() or m.key() is None or m.value() is None:
                    continue
                t, p, up, down = decode_offset_sync(m.key(), m.value())
                hist = self.syncs.setdefault((t, p), [])
                # a restart may write syncs of upstream offsets seen before (at least once):
                # the newest one of an upstream offset wins
                i = bisect.bisect_left(hist, (up,))
                del hist[i:]
                hist.append((up, down))
                del hist[:-self.KEEP]
            timeout = 0

    def translate(self, topic: str, partition: int, upstream: int) -> int | None:
        """The downstream offset a consumer at ``upstream`` resumes from, or
        None when no sync is at or below it."""
        hist = self.syncs.get((topic, partition))
        if not hist:
            return None
        i = bisect.bisect_right(hist, (upstream, float("inf"))) - 1
        if i < 0:
            return None
        up, down = hist[i]
        return down if up == upstream else down + 1

    def close(self) -> None:
        self._consumer.close()


# ---- MirrorSourceConnector ----------------------------------------------------------------------

def _mirror_def() -> ConfigDef:
    return (ConfigDef()
            .define("source.cluster.alias", STRING, "source", importance=HIGH,
                    doc="alias of the source cluster (remote topics are <alias>.<topic>)")
            .define("target.cluster.alias", STRING, "target", importance=HIGH,
                    doc="alias of the target cluster")
            .define("source.cluster.bootstrap.servers", STRING, importance=HIGH,
                    doc="bootstrap servers of the source cluster")
            .define("target.cluster.bootstrap.servers", STRING, importance=HIGH,
                    doc="bootstrap servers of the target cluster")
            .define("source.cluster.protocol", STRING, "native", one_of("native", "kafka"),
                    doc="native: kafkalite's own protocol; kafka: Kafka's (any Kafka cluster, "
                        "or kafkalite's Kafka listener), through confluent-kafka")
            .define("topics", STRING, ".*", doc="regexes (comma separated) of topics to mirror")
            .define("groups", STRING, ".*", doc="regexes of consumer groups to checkpoint"))


class _MirrorConnector(SourceConnector):
    def config_def(self) -> ConfigDef:
        return _mirror_def()


class MirrorSourceConnector(_MirrorConnector):
    """Finds the source partitions to copy, keeps the remote topics' partition
    counts and configs in step (every ``refresh.topics.interval.seconds``) and
    splits the partitions among tasks."""

    def start(self, props: dict) -> None:
        from kafkalite.client import AdminClient
        self.props = dict(props)
        self.source_alias, self.target_alias = _aliases(props)
        self.policy = replication_policy(props)
        self.topics = _patterns(props.get("topics", ".*"))
        self.excludes = _patterns(props.get("topics.exclude", ""))
        self.sync_configs = props.get("sync.topic.configs.enabled", "true").lower() == "true"
        self.source = source_cluster(props)
        self.target = AdminClient(_target_client(props))
        self.source.ensure_topic(offset_syncs_topic(props), 1, {"cleanup.policy": "compact"})
        self.partitions = self._refresh()
        self._stop = threading.Event()
        interval = float(props.get("refresh.topics.interval.seconds", 10))
        self._thread = threading.Thread(target=self._refresh_loop, args=(interval,), daemon=True,
                                        name="mirror-source-refresh")
        self._thread.start()

    def should_replicate(self, topic: str) -> bool:
        if is_internal(topic) or self.topics is None or not self.topics.fullmatch(topic):
            return False
        if self.excludes is not None and self.excludes.fullmatch(topic):
            return False
        # loop prevention: a topic that came from the target (or, in a chain, is already
        # this pair's remote topic) is never sent back
        return self.policy.topic_source(topic) != self.target_alias

    def _refresh(self) -> list[tuple[str, int]]:
        """Creates or grows the remote topics and copies their configs; the
        source partitions to mirror."""
        from kafkalite.client import ConfigResource, NewPartitions
        wanted = {t: n for t, n in self.source.topics().items() if self.should_replicate(t)}
        if not wanted:
            return []
        remote_meta = self.target.list_topics(timeout=30).topics
        configs = self._source_configs(list(wanted)) if self.sync_configs else {}
        for topic, count in sorted(wanted.items()):
            remote = self.policy.format_remote_topic(self.source_alias, topic)
            have = remote_meta.get(remote)
            if have is None or not have.partitions:
                ensure_topic(self.target, remote, count, configs.get(topic, {}))
                continue
            if len(have.partitions) < count:
                self.target.create_partitions([NewPartitions(remote, count)])[remote].result()
            if configs.get(topic):
                res = ConfigResource("topic", remote, set_config=configs[topic])
                cur = self.target.describe_configs([ConfigResource("topic", remote)])
                now = {k: e.value for k, e in next(iter(cur.values())).result().items()}
                if any(now.get(k) != v for k, v in configs[topic].items()):
                    self.target.alter_configs([res])[res].result()
        return sorted((t, p) for t, n in wanted.items() for p in range(n))

    def _source_configs(self, topics: list[str]) -> dict:
        return {t: {k: v for k, v in cfg.items() if not CONFIG_EXCLUDES.fullmatch(k)}
                for t, cfg in self.source.dynamic_configs(topics).items()}

    def _refresh_loop(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                parts = self._refresh()
            except Exception as e:      # noqa: BLE001 -- a source briefly down: next round
                log.warning("mirror %s->%s: topic refresh failed: %s",
                            self.source_alias, self.target_alias, e)
                continue
            if parts != self.partitions:
                self.partitions = parts
                self.context.request_task_reconfiguration()

    def task_class(self) -> type:
        return MirrorSourceTask

    def task_configs(self, max_tasks: int) -> list[dict]:
        if not self.partitions:
            return []
        n = max(1, min(max_tasks, len(self.partitions)))
        return [{**self.props, "task.assigned.partitions": ",".join(
            f"{t}:{p}" for t, p in self.partitions[i::n])} for i in range(n)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.source.close()
        self.target.close()


def sync_points(upstream, lag_max: int) -> list[int]:
    """Which of the upstream offsets copied since the last commit (ascending)
    get an offset sync, by index: the first, then each one at least
    ``lag_max`` above the last synced one, and the last (MM2's rule)."""
    import numpy as np
    n = len(upstream)
    if not n:
        return []
    out = [0]
    while True:
        nxt = int(np.searchsorted(upstream, upstream[out[-1]] + lag_max, side="left"))
        if nxt >= n:
            break
        out.append(nxt)
    if out[-1] != n - 1:
        out.append(n - 1)
    return out


@dataclass
class MirrorRecordBatch(SourceRecordBatch):
    """A source partition's records for the target, with their upstream
    offsets (an int64 array): the task's offset syncs are made from them
    once the batch is acknowledged (commit_batch)."""
    upstream_offsets: object = None

    def records(self) -> list[SourceRecord]:
        # per record its own source offset: commit_record and a transaction the
        # connector bounds at a record need them
        out = super().records()
        for r, off in zip(out, self.upstream_offsets.tolist()):
            r.source_offset = {"offset": off}
        return out


class MirrorSourceTask(SourceTask):
    """Consumes its assigned source partitions (from the stored source
    offsets, else the beginning) and hands the records to the worker."""

    def start(self, props: dict) -> None:
        from kafkalite.client import AdminClient
        self.source_alias, self.target_alias = _aliases(props)
        self.policy = replication_policy(props)
        self.batch = int(props.get("consumer.max.poll.records", 10_000))
        self.source = source_cluster(props)
        self.target_admin = AdminClient(_target_client(props))
        self.sync_producer = self.source.producer()
        self.syncs_topic = offset_syncs_topic(props)
        self.remote = {}
        assign = []
        reader = self.context.offset_storage_reader()
        for item in props.get("task.assigned.partitions", "").split(","):
            if not item:
                continue
            topic, _, p = item.rpartition(":")
            stored = reader.offset(self._partition(topic, int(p)))
            assign.append((topic, int(p), stored["offset"] + 1 if stored else None))
            self.remote[topic] = self.policy.format_remote_topic(self.source_alias, topic)
        self.consumer = self.source.consumer(f"mm2-{self.source_alias}-task", assign)
        self.loop_header = (MIRROR_HEADER, self.target_alias.encode())
        self.source_header = (MIRROR_HEADER, self.source_alias.encode())
        # (source topic, partition) -> upstream offsets copied since the last commit: int64
        # arrays (batches) and lists (records)
        self.committed: dict = {}
        self.source_partitions: dict = {}
        self.lag_max = int(props.get("offset.lag.max", 100))

    def _partition(self, topic: str, partition: int) -> dict:
        return {"cluster": self.source_alias, "topic": topic, "partition": partition}

    def poll(self) -> list[MirrorRecordBatch] | None:
        """A MirrorRecordBatch per source partition (at most ``batch``
        records each) of what the consumer had: kafkalite's consumer hands
        its Arrow columns (consume_batch), Kafka's client its messages."""
        if hasattr(self.consumer, "consume_batch"):
            rows = self.consumer.consume_batch(0.2)
            out = [b for lo in range(0, rows.num_rows, self.batch)
                   for b in self._batches_of_rows(rows.slice(lo, self.batch))]
        else:
            out = self._batches_of_messages(self.consumer.consume(self.batch, 0.2))
        return out or None

    def _batches_of_rows(self, rows) -> list:
        import numpy as np
        n = rows.num_rows
        if not n:
            return []
        topic_col = rows.column("topic")
        topics = topic_col.dictionary.to_pylist()
        parts = rows.column("partition").to_numpy(zero_copy_only=False)
        if len(topics) == 1 and (parts == parts[0]).all():
            return [self._batch_of_rows(topics[0], int(parts[0]), rows)]
        # records of several partitions: one batch each, in offset order
        idx = topic_col.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        key = (idx << 32) | parts.astype(np.int64)
        out = []
        for k in np.unique(key).tolist():
            out.append(self._batch_of_rows(topics[k >> 32], k & 0xFFFFFFFF,
                                           rows.take(np.flatnonzero(key == k))))
        return [b for b in out if b is not None]

    def _batch_of_rows(self, topic: str, partition: int, rows):
        """One source partition's rows as a batch: the loop header's records
        dropped, the source header added, key, value and timestamp as read."""
        import pyarrow as pa
        n = rows.num_rows
        header_col = rows.column("headers")
        if len(header_col.flatten()):
            # some records have headers: per record, to drop those from the target
            hs = [[(h["key"], h["value"]) for h in r] if r else []
                  for r in header_col.to_pylist()]
            keep = [self.loop_header not in h for h in hs]
            if not all(keep):
                rows = rows.filter(pa.array(keep))
                hs = [h for h, k in zip(hs, keep) if k]
                n = rows.num_rows
                if not n:
                    return None
            for h in hs:
                h.append(self.source_header)
        else:
            # no record has headers (the usual case): one shared list, only read
            hs = [[self.source_header]] * n
        key_col = rows.column("key")
        keys = None if key_col.null_count == n else key_col.to_pylist()
        # a record without a timestamp (-1): the producer stamps it
        stamps = rows.column("timestamp").cast(pa.int64()).fill_null(-1).to_numpy()
        offsets = rows.column("offset").to_numpy()
        return MirrorRecordBatch(
            self.remote[topic], None, rows.column("value").to_pylist(),
            source_partition=self._source_partition(topic, partition),
            source_offset={"offset": int(offsets[-1])}, kafka_partition=partition,
            keys=keys, timestamps=stamps, headers=hs, upstream_offsets=offsets)

    def _batches_of_messages(self, msgs) -> list:
        import numpy as np
        cols: dict = {}     # (topic, partition) -> (keys, values, stamps, headers, offsets)
        for m in msgs:
            if m.error():
                continue
            headers = list(m.headers() or ())
            # (name, value) tuples: one C-level containment test per record
            if headers and self.loop_header in headers:
                continue        # it came from the target: never send it back (loop)
            headers.append(self.source_header)
            c = cols.get((m.topic(), m.partition()))
            if c is None:
                c = cols[(m.topic(), m.partition())] = ([], [], [], [], [])
            c[0].append(m.key())
            c[1].append(m.value())
            c[2].append(m.timestamp()[1])
            c[3].append(headers)
            c[4].append(m.offset())
        return [MirrorRecordBatch(
            self.remote[t], None, values, source_partition=self._source_partition(t, p),
            source_offset={"offset": offsets[-1]}, kafka_partition=p, keys=keys,
            timestamps=np.array(stamps, dtype=np.int64), headers=headers,
            upstream_offsets=np.array(offsets, dtype=np.int64))
            for (t, p), (keys, values, stamps, headers, offsets) in cols.items()]

    def _source_partition(self, topic: str, partition: int) -> dict:
        """The partition's source-partition dict, one object for the task's
        life (the worker keys its pending offsets by it)."""
        sp = self.source_partitions.get((topic, partition))
        if sp is None:
            sp = self.source_partitions[(topic, partition)] = self._partition(topic, partition)
        return sp

    def _copied(self, topic: str, partition: int) -> list:
        chunks = self.committed.get((topic, partition))
        if chunks is None:
            chunks = self.committed[(topic, partition)] = []
        return chunks

    def commit_batch(self, batch) -> None:
        sp = batch.source_partition
        self._copied(sp["topic"], sp["partition"]).append(batch.upstream_offsets)

    def commit_record(self, record, metadata) -> None:
        # a record of a batch the worker sent record by record (transforms, or a
        # transaction boundary the connector set)
        sp = record.source_partition
        chunks = self._copied(sp["topic"], sp["partition"])
        if not chunks or not isinstance(chunks[-1], list):
            chunks.append([])
        chunks[-1].append(record.source_offset["offset"])

    def commit(self) -> None:
        """The worker flushed and stored offsets: every record handed over so
        far is on the target, this task is its partition's only writer and
        its producer is idempotent, so the i-th of the n records copied since
        the last commit is at log end - n + i. Syncs: the first and last of
        them and one every ``offset.lag.max`` upstream offsets (as MM2)."""
        import numpy as np
        if not self.committed:
            return
        sent, self.committed = self.committed, {}
        ends = self.target_admin.list_offsets({(self.remote[t], p): -1 for (t, p) in sent})
        for (t, p), chunks in sent.items():
            ups = np.concatenate([np.asarray(c, dtype=np.int64) for c in chunks])
            n = len(ups)
            end = ends.get((self.remote[t], p), -1)
            if end < n:
                continue        # not where expected (the topic was recreated?): no sync
            base = end - n
            for i in sync_points(ups, self.lag_max):
                key, value = encode_offset_sync(t, p, int(ups[i]), base + i)
                self.sync_producer.produce(self.syncs_topic, key=key, value=value)
        self.sync_producer.flush(30)

    def stop(self) -> None:
        for close in (self.consumer.close, self.target_admin.close,
                      lambda: self.source.close_producer(self.sync_producer), self.source.close):
            try:
                close()
            except Exception:       # noqa: BLE001 -- stopping anyway
                log.exception("mirror task stop")


# ---- MirrorCheckpointConnector --------------------------------------------------------------------

class MirrorCheckpointConnector(_MirrorConnector):
    """One task translating the groups matching ``groups`` (default ``.*``)."""

    def start(self, props: dict) -> None:
        self.props = dict(props)

    def task_class(self) -> type:
        return MirrorCheckpointTask

    def task_configs(self, max_tasks: int) -> list[dict]:
        return [dict(self.props)]


class MirrorCheckpointTask(SourceTask):
    def start(self, props: dict) -> None:
        from kafkalite.client import AdminClient
        self.source_alias, self.target_alias = _aliases(props)
        self.policy = replication_policy(props)
        self.groups = _patterns(props.get("groups", ".*"))
        self.groups_exclude = _patterns(props.get("groups.exclude", ""))
        self.topics = _patterns(props.get("topics", ".*"))
        self.interval = float(props.get("emit.checkpoints.interval.seconds", 60))
        self.sync_groups = props.get("sync.group.offsets.enabled", "false").lower() == "true"
        self.sync_interval = float(props.get("sync.group.offsets.interval.seconds", 60))
        self.source = source_cluster(props)
        self.target = AdminClient(_target_client(props))
        self.source.ensure_topic(offset_syncs_topic(props), 1, {"cleanup.policy": "compact"})
        self.topic = checkpoints_topic(props)
        ensure_topic(self.target, self.topic, 1, {"cleanup.policy": "compact"})
        self.store = OffsetSyncStore(self.source, offset_syncs_topic(props))
        self._stop = threading.Event()
        self.next_emit = time.monotonic()
        self.next_sync = time.monotonic()

    def rename_topic(self, topic: str) -> str:
        """A source topic's name on the target, as MirrorCheckpointTask's
        renameTopicPartition: a topic that came from the target goes back to
        its original name (``west.orders`` -> ``orders``), any other gets
        the source's prefix (``orders`` -> ``east.orders``)."""
        if self.policy.topic_source(topic) == self.target_alias:
            return self.policy.original_topic(topic)
        return self.policy.format_remote_topic(self.source_alias, topic)

    def _group_ok(self, g: str) -> bool:
        return (self.groups is not None and bool(self.groups.fullmatch(g))
                and not (self.groups_exclude and self.groups_exclude.fullmatch(g)))

    def checkpoints(self) -> dict:
        """{group: {(remote topic, partition, upstream topic): (upstream, downstream)}}."""
        self.store.read(0.2)
        out: dict = {}
        for g in self.source.groups():
            if not self._group_ok(g):
                continue
            for topic, partition, offset in self.source.group_offsets(g):
                # a topic that came from the target is checkpointed too (renamed back):
                # it has offset syncs only where something mirrored it here
                if offset < 0 or is_internal(topic) or \
                        not (self.topics and self.topics.fullmatch(topic)):
                    continue
                down = self.store.translate(topic, partition, offset)
                if down is not None:
                    out.setdefault(g, {})[(self.rename_topic(topic), partition, topic)] = (
                        offset, down)
        return out

    def poll(self) -> list[SourceRecord] | None:
        now = time.monotonic()
        if now < min(self.next_emit, self.next_sync if self.sync_groups else float("inf")):
            self._stop.wait(min(0.2, self.next_emit - now))
            return None
        cps = self.checkpoints()
        out = []
        if now >= self.next_emit:
            self.next_emit = now + self.interval
            stamp = int(time.time() * 1000)
            for g, parts in cps.items():
                for (remote, p, _), (up, down) in parts.items():
                    key, value = encode_checkpoint(g, remote, p, up, down)
                    out.append(SourceRecord(self.topic, 0, None, key, None, value, stamp))
        if self.sync_groups and now >= self.next_sync:
            self.next_sync = now + self.sync_interval
            self.sync_group_offsets(cps)
        return out or None

    def sync_group_offsets(self, cps: dict) -> None:
        """Commits the translated offsets for groups idle on the target, only
        forwards (a consumer there may already be further)."""
        from kafkalite.client import TopicPartition
        from kafkalite.errors import KafkaError
        for g, parts in cps.items():
            try:
                desc = self.target.describe_consumer_groups([g])[g].result()
                if desc.members:
                    continue
            except KafkaError:
                pass      # no such group on the target yet
            have = {(tp.topic, tp.partition): tp.offset
                    for tp in self.target.list_consumer_group_offsets(g).result()}
            moves = [TopicPartition(t, p, down) for (t, p, _), (_, down) in parts.items()
                     if down > have.get((t, p), -1)]
            if moves:
                try:
                    self.target.alter_consumer_group_offsets(g, moves).result()
                except KafkaError as e:
                    log.info("mirror: group %s offsets not synced: %s", g, e)

    def stop(self) -> None:
        self._stop.set()
        for close in (self.store.close, self.source.close, self.target.close):
            try:
                close()
            except Exception:       # noqa: BLE001 -- stopping anyway
                log.exception("mirror checkpoint task stop")


# ---- MirrorHeartbeatConnector ---------------------------------------------------------------------

class MirrorHeartbeatConnector(_MirrorConnector):
    def start(self, props: dict) -> None:
        self.props = dict(props)

    def task_class(self) -> type:
        return MirrorHeartbeatTask

    def task_configs(self, max_tasks: int) -> list[dict]:
        return [dict(self.props)]


class MirrorHeartbeatTask(SourceTask):
    def start(self, props: dict) -> None:
        from kafkalite.client import AdminClient
        self.source_alias, self.target_alias = _aliases(props)
        self.interval = float(props.get("emit.heartbeats.interval.seconds", 1))
        admin = AdminClient(_target_client(props))
        try:
            ensure_topic(admin, "heartbeats", 1, {"cleanup.policy": "compact"})
        finally:
            admin.close()
        self._stop = threading.Event()
        self.next = time.monotonic()

    def poll(self) -> list[SourceRecord] | None:
        wait = self.next - time.monotonic()
        if wait > 0:
            self._stop.wait(min(wait, 0.2))
            return None
        self.next = time.monotonic() + self.interval
        stamp = int(time.time() * 1000)
        key, value = encode_heartbeat(self.source_alias, self.target_alias, stamp)
        return [SourceRecord("heartbeats", 0, None, key, None, value, stamp)]

    def stop(self) -> None:
        self._stop.set()


def connector_configs(source: str, target: str, topics: str, groups: str | None = None,
                      source_alias: str = "source", target_alias: str = "target",
                      **extra) -> dict:
    """{name: connector config} of the three connectors for one source -> target
    pair (what ``kafkalite mirror`` runs)."""
    common = {"source.cluster.alias": source_alias, "target.cluster.alias": target_alias,
              "source.cluster.bootstrap.servers": source,
              "target.cluster.bootstrap.servers": target,
              "key.converter": _BYTES, "value.converter": _BYTES, "topics": topics,
              "tasks.max": "1", **{k: str(v) for k, v in extra.items()}}
    out = {f"{source_alias}->{target_alias}.MirrorSourceConnector":
           {**common, "connector.class": "MirrorSourceConnector"},
           f"{source_alias}->{target_alias}.MirrorHeartbeatConnector":
           {**common, "connector.class": "MirrorHeartbeatConnector"}}
    if groups:
        out[f"{source_alias}->{target_alias}.MirrorCheckpointConnector"] = {
            **common, "connector.class": "MirrorCheckpointConnector", "groups": groups}
    return out
