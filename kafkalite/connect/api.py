"""The connector and task API: Kafka Connect's, in snake_case.

A connector (SourceConnector / SinkConnector) is configured once
(``start(props)``), splits its work into task configs
(``task_configs(max_tasks)``) and names its task class (``task_class()``);
the worker runs each task in a thread of its own:

- SourceTask: ``start(props)``, ``poll()`` -> list of SourceRecord (or None
  when there is nothing yet; it may block briefly), ``commit()`` and
  ``commit_record(record, metadata)`` once records are acknowledged,
  ``stop()`` (from another thread: make ``poll`` return soon).
  ``self.context.offset_storage_reader().offset(partition)`` gives the last
  stored offset of a source partition, to resume from.
- SinkTask: ``start(props)``, ``put(records)``, ``flush(offsets)``,
  ``pre_commit(offsets)`` (by default flush, then commit these offsets),
  ``open(partitions)``/``close(partitions)`` on rebalance, ``stop()``.

The bulk path (ours, not Kafka's): a source task's ``poll()`` may return
one SourceRecordBatch (or a list of them) instead of a list of records,
acknowledged through ``commit_batch(batch)``, and a sink task may define
``put_batch(batch)`` (a SinkRecordBatch) beside ``put``. Where the
connector has no transforms the worker then converts the batch's keys and
values a batch at a time and hands them, with its timestamps and headers,
to the producer's ``produce_batch``, or
takes the consumer's ``consume_batch`` and hands its converted columns to
``put_batch``, with no object per record; otherwise (transforms, a value a
converter refuses, a task without ``put_batch``, Kafka's clients) it makes
the per-record objects (``records()``) and the per-record API runs as ever.

``version()``, ``config_def()`` (a ConfigDef) and ``validate(props)`` as
Kafka's. A connector asks for new task configs with
``self.context.request_task_reconfiguration()`` and reports a failure with
``self.context.raise_error(exc)``.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kafkalite.connect.config import ConfigDef
from kafkalite.connect.data import Schema


@dataclass
class ConnectRecord:
    topic: str
    kafka_partition: int | None
    key_schema: Schema | None
    key: object
    value_schema: Schema | None
    value: object
    timestamp: int | None = None           # ms
    headers: list = field(default_factory=list)   # [(name, bytes | str | None)]

    def new_record(self, **changes) -> "ConnectRecord":
        """A copy with ``changes`` (Kafka's newRecord), as transforms make them."""
        # a shallow copy of the fields, not dataclasses.replace nor copy.copy (which
        # goes through __reduce_ex__): this runs per record per transform
        out = object.__new__(type(self))
        fields = out.__dict__
        fields.update(self.__dict__)
        for k, v in changes.items():
            if k not in fields:
                raise TypeError(f"{type(self).__name__} has no field {k!r}")
            fields[k] = v
        return out


@dataclass
class SourceRecord(ConnectRecord):
    source_partition: dict | None = None
    source_offset: dict | None = None


@dataclass
class SinkRecord(ConnectRecord):
    kafka_offset: int = -1
    timestamp_type: str = "CreateTime"
    original_topic: str | None = None        # before transforms (KIP-793)
    original_kafka_partition: int | None = None
    original_kafka_offset: int | None = None


@dataclass
class SourceRecordBatch:
    """Records of one source partition to one topic (and one partition, or
    the producer's choice) with one key and one value schema, as columns:
    what a source task's ``poll()`` may return instead of a list (or a list
    of them, one per source partition). ``source_offset`` is the offset
    after the last record (the one a restart resumes from: the worker
    stores it once every record of the batch is acknowledged, as it stores
    a list's last offset). ``keys``: one per record, or None (no keys).
    ``timestamps``: one per record in ms (a list or an int64 array; a
    negative one, or None in a list: now), else ``timestamp`` for every
    record (None: now). ``headers``: one header list ([(name, bytes | str
    | None)], or None) per record, or None (no headers); the lists are
    only read. ``tombstones``: the indexes, ascending, of the records whose
    value is null with no schema (a delete's tombstone among the changes
    of a table: the converter writes no value for them, whatever
    ``value_schema``), or None. A task may subclass it to carry what its ``commit_batch``
    needs (the mirror's upstream offsets)."""
    topic: str
    value_schema: Schema | None
    values: list
    source_partition: dict | None = None
    source_offset: dict | None = None
    kafka_partition: int | None = None
    key_schema: Schema | None = None
    keys: list | None = None
    timestamp: int | None = None
    timestamps: object = None
    headers: list | None = None
    tombstones: list | None = None

    def __len__(self) -> int:
        return len(self.values)

    def records(self) -> list[SourceRecord]:
        """The batch as SourceRecords, for the per-record path; only the last
        carries the source offset (the worker stores a partition's latest)."""
        n = len(self.values)
        keys = self.keys if self.keys is not None else [None] * n
        if self.timestamps is not None:
            stamps = [t if t is not None and t >= 0 else None
                      for t in (self.timestamps.tolist() if hasattr(self.timestamps, "tolist")
                                else self.timestamps)]
        else:
            stamps = [self.timestamp] * n
        # each record its own header list: a transform may change one in place
        headers = [list(h) if h else [] for h in self.headers] if self.headers is not None \
            else [[] for _ in range(n)]
        out = [SourceRecord(self.topic, self.kafka_partition, self.key_schema, k,
                            self.value_schema, v, ts, hs,
                            source_partition=self.source_partition)
               for k, v, ts, hs in zip(keys, self.values, stamps, headers)]
        for i in self.tombstones or ():
            out[i].value_schema = out[i].value = None
        if out:
            out[-1].source_offset = self.source_offset
        return out


class SinkRecordBatch:
    """Consumed records as columns, converted: what ``put_batch`` gets.
    ``rows``: the consumer's pyarrow RecordBatch (kafkalite.client.arrow's
    schema: topic, partition, offset, timestamp, key, value, headers);
    ``keys`` and ``values``: the converted keys and values, a list each,
    ``key_schema`` / ``value_schema``: one schema for the batch, or a list
    of one per record. ``records()`` makes the SinkRecords (once)."""

    def __init__(self, rows, key_schema, keys, value_schema, values):
        self.rows = rows
        self.key_schema, self.keys = key_schema, keys
        self.value_schema, self.values = value_schema, values
        self._records = None

    def __len__(self) -> int:
        return len(self.values)

    def records(self) -> list[SinkRecord]:
        if self._records is None:
            rows = self.rows
            topics = rows.column("topic").to_pylist()
            parts = rows.column("partition").to_numpy().tolist()
            offs = rows.column("offset").to_numpy().tolist()
            stamps = rows.column("timestamp").cast("int64").to_pylist()
            types = rows.column("timestamp_type").to_numpy().tolist()
            headers = rows.column("headers").to_pylist()
            n = len(offs)
            ks = self.key_schema if isinstance(self.key_schema, list) else [self.key_schema] * n
            vs = self.value_schema if isinstance(self.value_schema, list) else \
                [self.value_schema] * n
            self._records = [
                SinkRecord(t, p, ks[i], self.keys[i], vs[i], self.values[i],
                           ts if ts is not None and ts >= 0 else None,
                           [(h["key"], h["value"]) for h in hs] if hs else [], o,
                           "LogAppendTime" if tt == 1 else "CreateTime", t, p, o)
                for i, (t, p, o, ts, tt, hs) in enumerate(zip(topics, parts, offs, stamps,
                                                              types, headers))]
        return self._records


class _Plugin:
    """Common to connectors and tasks: a context (set before start), a
    version, start and stop."""

    def __init__(self):
        self.context = None

    def initialize(self, context) -> None:
        self.context = context

    def version(self) -> str:
        from kafkalite import __version__
        return __version__

    def start(self, props: dict) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        pass


class Connector(_Plugin):
    """Common to source and sink connectors; ``context`` is a ConnectorContext."""

    def task_class(self) -> type:
        raise NotImplementedError

    def task_configs(self, max_tasks: int) -> list[dict]:
        raise NotImplementedError

    def config_def(self) -> ConfigDef:
        return ConfigDef()

    def validate(self, props: dict) -> list[dict]:
        """ConfigValues of this connector's keys (see ConfigDef.validate)."""
        return self.config_def().validate(props)


class SourceConnector(Connector):
    TYPE = "source"

    def alter_offsets(self, connector_config: dict, offsets: list) -> bool:
        """KIP-875: asked before a PATCH or DELETE /connectors/<name>/offsets
        writes, on a new instance of the class (not started; the connector
        is STOPPED). ``offsets``: [(source partition dict, source offset
        dict, or None to reset it)], every partition a DELETE resets.
        Return True when the connector has altered whatever it keeps outside
        the framework's offsets too (or keeps nothing), False when that
        must be done by hand (the answer says so; Kafka's default); raise to
        refuse the change, which then writes nothing (500 with the message)."""
        return False


class SinkConnector(Connector):
    TYPE = "sink"

    def alter_offsets(self, connector_config: dict, offsets: dict) -> bool:
        """KIP-875, as SourceConnector's; ``offsets``: {TopicPartition: the
        consumer group's new offset, or None for a reset}."""
        return False


class Task(_Plugin):
    """Common to source and sink tasks; ``context`` is a Source/SinkTaskContext."""


class SourceTask(Task):
    def poll(self) -> list[SourceRecord] | None:
        raise NotImplementedError

    def commit(self) -> None:
        """Called after the offsets of the records polled so far are stored."""

    def commit_record(self, record: SourceRecord, metadata) -> None:
        """Called for each polled record once it was acknowledged (or dropped
        by a transform or the error tolerance), at the worker's next offset
        commit; ``metadata`` is None (no per-record offsets on the bulk path)."""

    def commit_batch(self, batch: SourceRecordBatch) -> None:
        """Called for each polled SourceRecordBatch once its records were
        acknowledged (or dropped), at the worker's next offset commit: by
        default ``commit_record`` of each of its records, made only when the
        task has a ``commit_record`` of its own. A task that returns batches
        overrides this to take a batch's columns whole."""
        if type(self).commit_record is not SourceTask.commit_record:
            for r in batch.records():
                self.commit_record(r, None)


class SinkTask(Task):
    def put(self, records: list[SinkRecord]) -> None:
        raise NotImplementedError

    def flush(self, current_offsets: dict) -> None:
        """Make everything ``put`` so far durable; {(topic, partition): next offset}."""

    def pre_commit(self, current_offsets: dict) -> dict:
        """The offsets the worker may commit for the group: by default flush
        and commit what was put (Kafka's default)."""
        self.flush(current_offsets)
        return current_offsets

    def open(self, partitions: list) -> None:
        pass

    def close(self, partitions: list) -> None:
        pass
