"""The common Produce request, appended and answered in one pass (issue 72).

Nearly every Produce request a broker gets is the same kind: no
transaction, acks 0 or 1 (or -1 on a partition whose only in-sync replica
is its leader), every partition led here, one record batch each -- and
librdkafka sends one per partition batch, thousands a second, each of one
record at 100 partitions. ``ReplicaManager.produce`` serves every kind
through layers that each cost a call, a closure or a dict per partition
(``each_partition``, ``serve``, ``append``, ``append_as_leader``,
verification of transactions, DelayedProduce). ``answer_at_once`` takes
the common kind in one loop: it looks at the whole request first and
changes nothing unless every partition qualifies, so whatever it returns
None for is served by the full path exactly as before; what it serves it
serves as the full path would, error for error: the log's checks
(validation, producer-state sequence rules, sizes) are the same
``PartitionLog.append``, a refused batch answers its partition's error
with the validator's record errors, the high watermark moves as
``Partition.append_as_leader`` moves it, and appends wake the purgatory as
``ReplicaManager.append`` does (through the loop's gathered wake-ups).
tests/server/test_produce_at_once.py holds it to the full path's answers.

Who calls: ReplicaManager.produce, on its process's event-loop thread.
"""
from __future__ import annotations

import logging

from kafkalite import errors
from kafkalite.errors import KafkaError
from kafkalite.record.layout import ATTR_TRANSACTIONAL, OFF_ATTRIBUTES, OFF_PRODUCER_ID, PRODUCER

log = logging.getLogger("kafkalite.replica")

# a batch shorter than its header is left to the full path, which refuses it
_HEADER_BYTES = OFF_PRODUCER_ID + PRODUCER.size


def qualifying(rm, body: dict) -> list | None:
    """[(topic name, [(partition index, Partition, records)])] when the
    request is the common kind (module docstring), else None."""
    acks = body["acks"]
    if body["transactional_id"] is not None or acks not in (1, 0, -1) \
            or body.get("request_principal"):
        return None
    partitions = rm.partitions
    out = []
    for topic in body["topic_data"]:
        name = topic["name"]
        parts = []
        for pd in topic["partition_data"]:
            records = pd["records"]
            part = partitions.get((name, pd["index"]))
            if (part is None or not part.is_leader or records is None
                    or len(records) < _HEADER_BYTES
                    or records[OFF_ATTRIBUTES + 1] & ATTR_TRANSACTIONAL):
                return None
            if acks == -1 and (len(part.isr) != 1 or part.pending_isr is not None
                               or part.under_min_isr):
                # followers to wait for, or NOT_ENOUGH_REPLICAS to answer: the full path's
                return None
            parts.append((pd["index"], part, records))
        out.append((name, parts))
    return out


def answer_at_once(rm, body: dict) -> dict | None:
    """The request's response body (acks 0: an empty dict, for the caller to
    answer nothing), every partition appended; None when the request is not
    the common kind, nothing changed."""
    request = qualifying(rm, body)
    if request is None:
        return None
    # what waits on the partitions is woken once the whole request is in (a fetch
    # waiting on two of them gets both appends), as the full path does
    with rm.gathered_wakeups():
        responses = _append_all(rm, request)
    return {"responses": responses, "throttle_time_ms": 0}


def _append_all(rm, request: list) -> list:
    """The response topics of ``request``'s appends (qualifying's shape):
    each partition's through ``ReplicaManager.append``, the one write path
    (high watermark, leader states, stats, wake-ups)."""
    responses = []
    for name, parts in request:
        outs = []
        for index, part, records in parts:
            try:
                info = rm.append(part, records)
            except KafkaError as exc:
                outs.append(_refused(rm, part, index, exc))
                continue
            outs.append({"index": index, "error_code": 0, "base_offset": info.first_offset,
                         "log_append_time_ms": info.log_append_time,
                         "log_start_offset": part.log.log_start_offset, "record_errors": [],
                         "error_message": None})
        responses.append({"name": name, "partition_responses": outs})
    return responses


def _refused(rm, part, index: int, exc: KafkaError) -> dict:
    """A partition's answer to a batch its log refused, as the full path's
    (``ReplicaManager._produce``'s serve, through each_partition)."""
    if isinstance(exc, errors.OutOfOrderSequenceNumberError):
        # fatal to most clients: what the partition knew says why
        log.info("broker %d: %s: %s (log end %d, leader epoch %d)", rm.broker_id,
                 part.name, exc, part.log.log_end_offset, part.leader_epoch)
        record_errors = []
    else:
        # which records caused it, when the validator knows, lets a client fail only those
        record_errors = [{"batch_index": i, "batch_index_error_message": m}
                         for i, m in exc.record_errors]
    return {"index": index, "error_code": exc.code, "base_offset": -1,
            "log_append_time_ms": -1, "log_start_offset": -1,
            "record_errors": record_errors, "error_message": exc.message}
