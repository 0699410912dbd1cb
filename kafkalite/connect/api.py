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
