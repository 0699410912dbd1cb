"""FileStreamSource and FileStreamSink, as Kafka's file connectors.

Source: tails ``file`` (or stdin when unset) and produces each line
(without its newline) as a string value to ``topic``; ``batch.size`` lines
per poll at most, as one SourceRecordBatch (api.py: no object per line).
Its source partition is ``{"filename": <file>}`` and its offset
``{"position": <byte offset after the last line sent>}``, so a restarted
task resumes at the line after the last one whose offset was stored. A
partial last line (no newline yet) waits for its newline. The file is read
``READ_SIZE`` bytes at a time, when the lines of the last read are all
polled, and split once per read (a poll takes a slice of those lines, so a
poll's cost is its own lines', whatever the file's size).

Sink: appends each record's value (as text) and a newline to ``file``
(``tasks.max`` tasks append to the same file, each put in one write);
``put_batch`` writes a batch's values as one join; ``flush`` fsyncs, so
the offsets the worker commits after it are of lines on disk.

Files: only where the worker lets connectors open files
(file_access.py: under ``kafkalite.file.allowed.paths``, no symbolic link
below it, never a kafkalite data directory), checked by ``validate`` when
the connector is created (a 400 naming ``file``) and again, as it opens,
by each task. With ``file`` unset the source reads the worker's stdin and
the sink writes its stdout, as Kafka's.

Who calls: the worker's task threads (one task, one thread).
"""
from __future__ import annotations

import os
import sys
import time

from kafkalite.connect.api import (SinkConnector, SinkTask, SourceConnector, SourceRecordBatch,
                                   SourceTask)
from kafkalite.connect.config import INT, STRING, ConfigDef, at_least
from kafkalite.connect.data import Schema
from kafkalite.connect.errors import ConnectException

SOURCE_CONFIG = (ConfigDef()
                 .define("file", STRING, None, doc="the file to read (default: stdin)")
                 .define("topic", STRING, doc="the topic to write to")
                 .define("batch.size", INT, 2000, at_least(1), doc="lines per poll at most"))
# the bytes read at a time: a few thousand lines of the usual length
READ_SIZE = 1 << 20
SINK_CONFIG = ConfigDef().define("file", STRING, None, doc="the file to append to (default: stdout)")


def validate_file(connector, props: dict, values: list[dict]) -> list[dict]:
    """``values`` (ConfigValues) with the refusal of ``file``, if the worker
    would not let the connector open it."""
    path = props.get("file")
    # a config provider's reference (${dir:...}) is checked as it resolves, at the task's open
    if path and "${" not in path and connector.context is not None:
        try:
            connector.context.file_access.check(path)
        except ConnectException as e:
            for v in values:
                if v["name"] == "file":
                    v["errors"].append(str(e))
    return values


class FileStreamSourceConnector(SourceConnector):
    def config_def(self):
        return SOURCE_CONFIG

    def validate(self, props):
        return validate_file(self, props, super().validate(props))

    def start(self, props):
        self.props = SOURCE_CONFIG.parse(props)
        if "," in self.props["topic"]:
            raise ConnectException("topic: FileStreamSourceConnector writes to one topic")

    def task_class(self):
        return FileStreamSourceTask

    def alter_offsets(self, connector_config, offsets):
        """Kafka's checks: each partition names a ``filename``, each offset
        (None: reset) has a ``position`` that is an integer >= 0. Every
        offset is the framework's, so True."""
        for partition, offset in offsets:
            if "filename" not in partition:
                raise ConnectException(f"partition {partition} names no 'filename'")
            if offset is None:
                continue
            position = offset.get("position")
            if isinstance(position, bool) or not isinstance(position, int) or position < 0:
                raise ConnectException(f"offset {offset} for {partition} needs a 'position' "
                                       f"that is an integer >= 0")
        return True

    def task_configs(self, max_tasks):
        # one file, one reader
        return [{k: str(v) for k, v in self.props.items()
                 if k in SOURCE_CONFIG.keys and v is not None}]


class FileStreamSourceTask(SourceTask):
    def start(self, props):
        c = SOURCE_CONFIG.parse(props)
        self.filename, self.topic, self.batch = c["file"], c["topic"], c["batch.size"]
        self.partition = {"filename": self.filename or "stdin"}
        self.stream = None
        # the complete lines of the last read (without newlines), the first not yet polled,
        # and the bytes after the last read's last newline (a line still being written)
        self.lines: list[bytes] = []
        self.taken = 0
        self.partial = b""
        stored = self.context.offset_storage_reader().offset(self.partition) \
            if self.filename else None
        self.position = int(stored["position"]) if stored else 0

    def _open(self):
        if self.filename is None:
            self.stream = sys.stdin.buffer
            return True
        try:
            self.stream = os.fdopen(self.context.file_access.open(self.filename), "rb")
        except FileNotFoundError:
            return False
        self.stream.seek(self.position)
        return True

    def _read(self) -> None:
        """The next complete lines from the file into ``lines``."""
        chunk = self.stream.read(READ_SIZE) if self.filename else self.stream.read1(READ_SIZE)
        if not chunk:
            return
        data = self.partial + chunk if self.partial else chunk
        end = data.rfind(b"\n")
        if end < 0:
            self.partial = data
            return
        self.lines, self.taken, self.partial = data[:end].split(b"\n"), 0, data[end + 1:]

    def poll(self):
        if self.stream is None and not self._open():
            time.sleep(0.1)
            return None
        if self.taken >= len(self.lines):
            self._read()
        if self.taken >= len(self.lines):
            time.sleep(0.05)      # tailing: nothing new yet
            return None
        lines = self.lines[self.taken:self.taken + self.batch]
        self.taken += len(lines)
        self.position += sum(map(len, lines)) + len(lines)
        # one decode for the poll: a newline byte is never part of a UTF-8 sequence, so
        # the text splits back into the same lines, bad bytes replaced line by line alike
        joined = b"\n".join(lines)
        values = joined.decode("utf-8", "replace").split("\n")
        if b"\r" in joined:
            values = [v.rstrip("\r") for v in values]
        return SourceRecordBatch(self.topic, Schema.STRING, values,
                                 source_partition=self.partition,
                                 source_offset={"position": self.position})

    def stop(self):
        if self.stream is not None and self.filename is not None:
            self.stream.close()


class FileStreamSinkConnector(SinkConnector):
    def config_def(self):
        return SINK_CONFIG

    def validate(self, props):
        return validate_file(self, props, super().validate(props))

    def start(self, props):
        self.props = dict(props)

    def task_class(self):
        return FileStreamSinkTask

    def alter_offsets(self, connector_config, offsets):
        return True      # the consumer group's offsets are all there is

    def task_configs(self, max_tasks):
        # as Kafka's: max_tasks copies (each appends whole puts, see put)
        return [{"file": self.props["file"]} if self.props.get("file") else {}] * max_tasks


class FileStreamSinkTask(SinkTask):
    def start(self, props):
        self.filename = props.get("file")
        # unbuffered O_APPEND: a put is one write(), so tasks sharing the file never
        # interleave parts of lines
        self.out = sys.stdout.buffer if not self.filename else os.fdopen(
            self.context.file_access.open(self.filename, os.O_WRONLY | os.O_APPEND | os.O_CREAT),
            "ab", buffering=0)

    def put(self, records):
        lines = []
        for r in records:
            v = r.value
            lines.append(bytes(v) if isinstance(v, (bytes, bytearray)) else str(v).encode())
        if lines:
            self.out.write(b"\n".join(lines) + b"\n")

    def put_batch(self, batch):
        values = batch.values
        if not values:
            return
        try:
            text = "\n".join(values)
        except TypeError:       # a null or a non-text value: as put writes each
            self.put(batch.records())
            return
        self.out.write((text + "\n").encode())

    def flush(self, offsets):
        if self.filename:
            os.fsync(self.out.fileno())
        else:
            self.out.flush()

    def stop(self):
        if self.filename and not self.out.closed:
            self.out.close()
