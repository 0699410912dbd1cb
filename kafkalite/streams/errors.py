"""Exception handlers and the dead-letter queue (Kafka Streams' handlers,
KIP-1034's DLQ), for records that fail deserialization or processing.

Config (StreamsConfig, also given to the TopologyTestDriver):

    deserialization.exception.handler   log_and_fail (default) | log_and_continue
    processing.exception.handler        log_and_fail (default) | log_and_continue
    errors.dead.letter.queue.topic.name a topic: every failing record is written
                                        there (with either handler), unchanged

Kafka's class names (LogAndFailExceptionHandler, LogAndContinueExceptionHandler,
LogAndFailProcessingExceptionHandler, LogAndContinueProcessingExceptionHandler,
with or without a package) are accepted, and so is a callable
``handler(ErrorContext, exception) -> "continue" | "fail"``.

A DLQ record carries the source record's key and value bytes as consumed
and headers naming the error (KIP-1034's): ``__streams.errors.exception``
(the exception's class), ``__streams.errors.message``,
``__streams.errors.stacktrace``, ``__streams.errors.topic``,
``__streams.errors.partition``, ``__streams.errors.offset``.

How a failing record is found without a per-record path for good batches:
a deserialization error of a batch deserializes that batch record by record
(the bad ones are handled, the good ones go on as one batch); a processing
error raised by a node re-runs that node on the batch one row at a time
(processors.ProcessorNode.forward): a node raises before it writes its
store or forwards, so the rows before the failing one are not done twice.
A KafkaError is never handled here: under exactly-once it aborts the
transaction (runtime.py). "fail" raises StreamsException, which stops the
stream thread (the instance goes to ERROR).

Who calls: StreamTask (task.py) and the nodes, in the task's thread.
"""
from __future__ import annotations

import dataclasses
import logging
import traceback

from kafkalite.ratelimit import RateLimitedLog

log = logging.getLogger(__name__)

CONTINUE, FAIL = "continue", "fail"
_NAMES = {"log_and_fail": FAIL, "log_and_continue": CONTINUE,
          "logandfailexceptionhandler": FAIL, "logandcontinueexceptionhandler": CONTINUE,
          "logandfailprocessingexceptionhandler": FAIL,
          "logandcontinueprocessingexceptionhandler": CONTINUE}
HEADER_PREFIX = "__streams.errors."


class StreamsException(Exception):
    """A record's failure that a handler chose to fail on: the stream
    thread stops (Kafka Streams' StreamsException)."""


@dataclasses.dataclass
class ErrorContext:
    """What a handler is told about the failing record."""
    kind: str                 # "deserialization" | "processing"
    topic: str
    partition: int
    offset: int
    timestamp: int
    key: bytes | None         # the source record's bytes as consumed
    value: bytes | None
    node: str | None = None   # the processor that raised (processing errors)
    task_id: str | None = None


def _handler(config: dict, name: str):
    choice = config.get(name, "log_and_fail")
    if callable(choice):
        return choice
    short = str(choice).rsplit(".", 1)[-1].lower()
    if short not in _NAMES:
        raise ValueError(f"{name}: {choice!r} is not log_and_fail, log_and_continue or a "
                         f"callable handler(context, exception) -> 'continue' | 'fail'")
    return lambda _context, _exc, result=_NAMES[short]: result


class ErrorHandling:
    def __init__(self, config: dict | None = None):
        config = config or {}
        self.on_deserialization = _handler(config, "deserialization.exception.handler")
        self.on_processing = _handler(config, "processing.exception.handler")
        self.dlq_topic = config.get("errors.dead.letter.queue.topic.name") or None
        self._log = RateLimitedLog(log)

    def handle(self, task, context: ErrorContext, exc: BaseException) -> None:
        """Log, write the DLQ record, and raise StreamsException unless the
        handler says continue."""
        decide = self.on_deserialization if context.kind == "deserialization" \
            else self.on_processing
        try:
            result = decide(context, exc)
        except Exception as handler_exc:      # noqa: BLE001 - a handler's own bug fails
            raise StreamsException(f"the {context.kind} exception handler failed: "
                                   f"{handler_exc!r}") from exc
        if result not in (CONTINUE, FAIL):
            raise StreamsException(f"the {context.kind} exception handler returned {result!r}, "
                                   f"not 'continue' or 'fail'") from exc
        self._log.warning("%s error in task %s at %s-%d offset %d%s: %r (%s)", context.kind,
                          context.task_id, context.topic, context.partition, context.offset,
                          f" in {context.node}" if context.node else "", exc,
                          "skipped" if result == CONTINUE else "failing")
        task.metrics["dropped_records"] += 1
        if self.dlq_topic:
            task.emit_dead_letter(self.dlq_topic, context.key, context.value, context.timestamp,
                                  self.headers(context, exc))
        if result == FAIL:
            raise StreamsException(f"{context.kind} error in task {context.task_id} at "
                                   f"{context.topic}-{context.partition} offset "
                                   f"{context.offset}: {exc!r}") from exc

    @staticmethod
    def headers(context: ErrorContext, exc: BaseException) -> list:
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        return [(HEADER_PREFIX + k, str(v).encode()) for k, v in (
            ("exception", f"{type(exc).__module__}.{type(exc).__qualname__}"),
            ("message", str(exc)), ("stacktrace", stack[-8000:]), ("topic", context.topic),
            ("partition", context.partition), ("offset", context.offset))]
