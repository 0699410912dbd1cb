"""The Processor API: user processors with state-store access and
punctuators on stream time and wall-clock time (Kafka Streams'
``org.apache.kafka.streams.processor.api``), under the DSL.

    class Dedup(Processor):
        def init(self, context):
            self.context = context
            self.seen = context.get_state_store("seen")
            context.schedule(60_000, PunctuationType.WALL_CLOCK_TIME, self.report)
        def process(self, record):
            if self.seen.get(record.key.encode()) is None:
                self.seen.put(record.key.encode(), 1)
                self.context.forward(record)

    builder.add_state_store(Stores.key_value_store_builder("seen", Serdes.long()))
    stream.process(Dedup, "seen").to("out")

Who calls: ``KStream.process`` builds a ProcessNode; the task runs it. One
processor instance per task (``supplier()`` then ``init``), its ``process``
called once per record in order (this API is per record by nature: the
slow path of records.py). What a processor forwards is collected and handed
to the node's children as one batch after each input batch or punctuation.
Store keys are bytes (stores.py), values what the store's serde writes.

Punctuation, as Kafka Streams:
- STREAM_TIME: the node's stream time is the largest record timestamp it
  has seen; the first record fires the punctuator, and it fires again each
  time stream time reaches the next multiple of the interval after the last
  firing (missed intervals are skipped, not replayed); called with the
  stream time.
- WALL_CLOCK_TIME: fires when the clock (the runtime's, or the test
  driver's ``advance_wall_clock_time``) reaches schedule time + k *
  interval, once per check however many intervals passed; called with the
  clock's time.
"""
from __future__ import annotations

import dataclasses
import time

import numpy as np
import pyarrow as pa

from kafkalite.client import arrow
from kafkalite.streams.errors import StreamsException
from kafkalite.streams.processors import ProcessorNode
from kafkalite.streams.topology import StoreSpec


class PunctuationType:
    STREAM_TIME = "stream_time"
    WALL_CLOCK_TIME = "wall_clock_time"


@dataclasses.dataclass
class Record:
    key: object
    value: object
    timestamp: int
    headers: list = dataclasses.field(default_factory=list)

    def with_key(self, key) -> Record:
        return dataclasses.replace(self, key=key)

    def with_value(self, value) -> Record:
        return dataclasses.replace(self, value=value)

    def with_timestamp(self, timestamp: int) -> Record:
        return dataclasses.replace(self, timestamp=timestamp)


class Processor:
    """Subclass and override; ``KStream.process`` takes the class (or any
    supplier returning a fresh instance per task)."""

    def init(self, context: ProcessorContext) -> None:
        pass

    def process(self, record: Record) -> None:
        pass

    def close(self) -> None:
        pass


class Cancellable:
    def __init__(self, schedule: list):
        self._schedule = schedule

    def cancel(self) -> None:
        self._schedule[:] = []


class Stores:
    """Store builders for ``StreamsBuilder.add_state_store`` (Kafka's Stores)."""

    @staticmethod
    def key_value_store_builder(name: str, value_serde, store_type: str | None = None,
                                logged: bool = True) -> StoreSpec:
        return StoreSpec(name, store_type, value_serde, logged)

    @staticmethod
    def window_store_builder(name: str, value_serde, window_size_ms: int, retention_ms: int,
                             store_type: str | None = None, logged: bool = True) -> StoreSpec:
        """Keys ``stores.window_key(key bytes, window start)``; entries
        older than stream time - retention go when ``expire`` is called."""
        return StoreSpec(name, store_type, value_serde, logged, window_size_ms, retention_ms)


class ProcessorContext:
    def __init__(self, node: ProcessNode, task, clock):
        self._node, self._task, self._clock = node, task, clock
        self.task_id, self.partition = task.id, task.partition
        self.application_id = task.application_id
        self.stream_time = -1
        self._out: list = []
        self._current: Record | None = None
        self._offset = -1
        self.schedules: list = []   # [interval, type, callback, next due]

    def forward(self, record: Record) -> None:
        self._out.append((record, self._offset))

    def get_state_store(self, name: str):
        if name not in self._node.store_names:
            raise KeyError(f"processor {self._node.name} was not connected to store {name!r}: "
                           f"give its name to KStream.process")
        return self._task.store(name)

    def schedule(self, interval_ms: int, punctuation_type: str, callback) -> Cancellable:
        if interval_ms <= 0:
            raise ValueError("a punctuation interval must be positive")
        if punctuation_type not in (PunctuationType.STREAM_TIME,
                                    PunctuationType.WALL_CLOCK_TIME):
            raise ValueError("punctuation_type is STREAM_TIME or WALL_CLOCK_TIME")
        due = None if punctuation_type == PunctuationType.STREAM_TIME \
            else self._clock() + interval_ms
        entry = [int(interval_ms), punctuation_type, callback, due]
        self.schedules.append(entry)
        return Cancellable(entry)

    def current_system_time_ms(self) -> int:
        return self._clock()

    def current_stream_time_ms(self) -> int:
        return self.stream_time

    def record_metadata(self):
        """(topic partition, offset) of the record being processed."""
        return self.partition, self._offset

    def commit(self) -> None:
        """A hint in Kafka; commits here follow commit.interval.ms."""

    # ---- what the node calls ----
    def _punctuate(self, kind: str, now: int) -> None:
        for entry in list(self.schedules):
            if not entry or entry[1] != kind:
                continue
            interval, _, callback, due = entry
            if due is not None and now < due:
                continue
            base = now if due is None else due
            entry[3] = base + interval * ((now - base) // interval + 1)
            callback(now)


class ProcessNode(ProcessorNode):
    prefix = "KSTREAM-PROCESSOR"

    def __init__(self, name, supplier, store_names):
        super().__init__(name)
        self.supplier, self.store_names = supplier, list(store_names)

    def _context(self, task) -> ProcessorContext:
        state = task.node_state.get(self.name)
        if state is None or "processor" not in state:     # new, or resumed from a commit
            ctx = ProcessorContext(self, task, task.wall_clock)
            processor = self.supplier()
            if not isinstance(processor, Processor) and not hasattr(processor, "process"):
                raise TypeError(f"{self.supplier!r} did not return a Processor")
            try:
                processor.init(ctx)
            except Exception as exc:    # noqa: BLE001 - no record to blame: the task fails
                raise StreamsException(f"processor {self.name} failed to initialize in task "
                                       f"{task.id}: {exc!r}") from exc
            ctx.stream_time = task.node_state.get(self.name, {}).get("stream_time", -1)
            task.node_state[self.name] = state = {"context": ctx, "processor": processor}
            task.punctuators.append(self)
        return state["context"]

    def process(self, task, batch):
        ctx = self._context(task)
        processor = task.node_state[self.name]["processor"]
        cols = [batch.column(c).to_pylist() for c in ("key", "value", "timestamp", "offset")]
        headers = batch.column("headers").to_pylist()
        for key, value, ts, offset, h in zip(*cols, headers):
            ctx._offset = offset
            processor.process(Record(key, value, ts, h or []))
            if ts > ctx.stream_time:
                ctx.stream_time = task.node_state[self.name]["stream_time"] = ts
                ctx._punctuate(PunctuationType.STREAM_TIME, ts)
        self._flush(task, ctx)

    def punctuate_wall_clock(self, task, now: int) -> None:
        ctx = task.node_state[self.name]["context"]
        ctx._offset = -1
        ctx._punctuate(PunctuationType.WALL_CLOCK_TIME, now)
        self._flush(task, ctx)

    def _flush(self, task, ctx) -> None:
        out, ctx._out = ctx._out, []
        if not out:
            return
        n = len(out)
        headers = [[{"key": k, "value": v} for k, v in (r.headers or [])] for r, _ in out]
        self.forward(task, pa.RecordBatch.from_arrays([
            pa.array([r.key for r, _ in out]), pa.array([r.value for r, _ in out]),
            pa.array([r.timestamp for r, _ in out], pa.int64()),
            pa.array(np.full(n, task.partition, np.int32)),
            pa.array([o for _, o in out], pa.int64()),
            pa.array(headers, arrow.HEADER_TYPE)],
            names=["key", "value", "timestamp", "partition", "offset", "headers"]))

    def close_task(self, task) -> None:
        state = task.node_state.get(self.name)
        if state is not None and "processor" in state:
            state["processor"].close()


def system_clock() -> int:
    return int(time.time() * 1000)
