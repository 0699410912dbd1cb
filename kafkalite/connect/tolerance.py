"""Error tolerance: what a task does with a record it cannot convert or
transform, as Kafka Connect's RetryWithToleranceOperator and
DeadLetterQueueReporter.

``errors.tolerance=none`` (the default): the first failure fails the task.
``all``: the record is skipped and the task keeps running; the failure is
logged (``errors.log.enable``, rate-limited) and, for sink connectors with
``errors.deadletterqueue.topic.name``, the original record (its raw key,
value and headers) goes to that topic, with the error context as headers
when ``errors.deadletterqueue.context.headers.enable`` is true: Kafka's
``__connect.errors.topic``, ``.partition``, ``.offset``,
``.connector.name``, ``.task.id``, ``.stage``, ``.class.name``,
``.exception.class.name``, ``.exception.message``,
``.exception.stacktrace``. A RetriableException is tried again until
``errors.retry.timeout`` ms (0: never) with backoff up to
``errors.retry.delay.max.ms``.

Who calls: worker.py, from the task's thread.
"""
from __future__ import annotations

import logging
import time
import traceback

from kafkalite.connect.config import BOOLEAN, LONG, STRING, ConfigDef, one_of
from kafkalite.connect.errors import ConnectException, RetriableException
from kafkalite.ratelimit import RateLimitedLog

log = logging.getLogger("kafkalite.connect")

CONFIG = (ConfigDef()
          .define("errors.tolerance", STRING, "none", one_of("none", "all"),
                  doc="none: a failure fails the task; all: skip the record", group="Error Handling")
          .define("errors.retry.timeout", LONG, 0, group="Error Handling")
          .define("errors.retry.delay.max.ms", LONG, 60_000, group="Error Handling")
          .define("errors.log.enable", BOOLEAN, False, group="Error Handling")
          .define("errors.log.include.messages", BOOLEAN, False, group="Error Handling")
          .define("errors.deadletterqueue.topic.name", STRING, "", group="Error Handling")
          .define("errors.deadletterqueue.topic.replication.factor", LONG, 3,
                  group="Error Handling")
          .define("errors.deadletterqueue.context.headers.enable", BOOLEAN, False,
                  group="Error Handling"))

SKIPPED = object()
PREFIX = "__connect.errors."


class ToleranceExceeded(ConnectException):
    pass


class ErrorHandler:
    """One per task. ``execute(stage, fn, *args, original=msg, cls=...)`` runs
    one stage of one record; returns fn's result, or SKIPPED when the record
    was tolerated (and reported)."""

    def __init__(self, config: dict, connector: str, task_id: int, dlq_producer=None):
        c = CONFIG.parse({k: v for k, v in config.items() if k in CONFIG.keys})
        self.tolerate_all = c["errors.tolerance"].lower() == "all"
        self.retry_timeout = c["errors.retry.timeout"] / 1000.0
        self.max_delay = c["errors.retry.delay.max.ms"] / 1000.0
        self.log_enable = c["errors.log.enable"]
        self.dlq_topic = c["errors.deadletterqueue.topic.name"] or None
        self.context_headers = c["errors.deadletterqueue.context.headers.enable"]
        self.connector, self.task_id = connector, task_id
        self.dlq_producer = dlq_producer
        self.failed = 0
        self._log = RateLimitedLog(log)

    def execute(self, stage: str, fn, *args, original=None, cls=None):
        deadline = time.monotonic() + self.retry_timeout
        delay = 0.3
        while True:
            try:
                return fn(*args)
            except RetriableException as e:
                if time.monotonic() + delay < deadline:
                    time.sleep(delay)
                    delay = min(delay * 2, self.max_delay)
                    continue
                err = e
            except Exception as e:          # noqa: BLE001 -- any failure of a plugin
                err = e
            break
        self.failed += 1
        if not self.tolerate_all:
            raise ToleranceExceeded(f"Tolerance exceeded in error handler: {stage} failed: "
                                    f"{type(err).__name__}: {err}") from err
        self._report(stage, err, original, cls or fn)
        return SKIPPED

    def _report(self, stage, err, msg, cls):
        if self.log_enable:
            self._log.warning("connector %s task %d: error in stage %s (%d tolerated so far): "
                              "%s", self.connector, self.task_id, stage, self.failed, err)
        if self.dlq_topic is None or msg is None or self.dlq_producer is None:
            return
        headers = list(msg.headers() or [])
        if self.context_headers:
            name = getattr(cls, "__qualname__", None) or type(cls).__qualname__
            module = getattr(cls, "__module__", None) or type(cls).__module__
            ctx = {"topic": msg.topic(), "partition": str(msg.partition()),
                   "offset": str(msg.offset()), "connector.name": self.connector,
                   "task.id": str(self.task_id), "stage": stage,
                   "class.name": f"{module}.{name}",
                   "exception.class.name": f"{type(err).__module__}.{type(err).__qualname__}",
                   "exception.message": str(err),
                   "exception.stacktrace": "".join(traceback.format_exception(err))}
            headers += [(PREFIX + k, v.encode()) for k, v in ctx.items()]
        self.dlq_producer.produce(self.dlq_topic, value=msg.value(), key=msg.key(),
                                  headers=headers)
