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
``PartitionLog.append``'s (or, for the common one-batch append, the
same steps in one C pass: ext/leader_append.pyx), a refused batch answers
its partition's error with the validator's record errors, the high
watermark moves as ``Partition.append_as_leader`` moves it, and appends
wake the purgatory as ``ReplicaManager.append`` does (through the loop's
gathered wake-ups).
tests/server/test_produce_at_once.py holds it to the full path's answers.

Who calls: ReplicaManager.produce, on its process's event-loop thread.
"""
from __future__ import annotations

import logging

from kafkalite import errors
from kafkalite._ext.leader_append import append_once
from kafkalite._ext.produce_frames import answer_one_frame
from kafkalite._ext.produce_wire import read_produce, write_produce_answer
from kafkalite.errors import KafkaError
from kafkalite.record.layout import ATTR_TRANSACTIONAL, OFF_ATTRIBUTES, OFF_PRODUCER_ID, PRODUCER
from kafkalite.server.network.requests import NO_RESPONSE

log = logging.getLogger("kafkalite.replica")

# a batch shorter than its header is left to the full path, which refuses it
_HEADER_BYTES = OFF_PRODUCER_ID + PRODUCER.size


def qualifying(rm, acks: int, topics) -> list | None:
    """[(topic name, [(partition index, Partition, records)])] when a
    request of ``acks`` and ``topics`` ([(name, [(index, records)])]), with
    no transactional id and no request principal, is the common kind
    (module docstring), else None."""
    if acks not in (1, 0, -1):
        return None
    partitions = rm.partitions
    out = []
    for name, partition_data in topics:
        parts = []
        for index, records in partition_data:
            part = partitions.get((name, index))
            # is_leader, without its call
            if (part is None or part.leader_id != part.broker_id or records is None
                    or len(records) < _HEADER_BYTES
                    or records[OFF_ATTRIBUTES + 1] & ATTR_TRANSACTIONAL):
                return None
            if acks == -1 and (len(part.isr) != 1 or part.pending_isr is not None
                               or part.under_min_isr):
                # followers to wait for, or NOT_ENOUGH_REPLICAS to answer: the full path's
                return None
            parts.append((index, part, records))
        out.append((name, parts))
    return out


def answer_at_once(rm, body: dict) -> dict | None:
    """The request's response body (acks 0: an empty dict, for the caller to
    answer nothing), every partition appended; None when the request is not
    the common kind, nothing changed."""
    if body["transactional_id"] is not None or body.get("request_principal"):
        return None
    request = qualifying(rm, body["acks"], [
        (topic["name"], [(pd["index"], pd["records"]) for pd in topic["partition_data"]])
        for topic in body["topic_data"]])
    if request is None:
        return None
    # what waits on the partitions is woken once the whole request is in (a fetch
    # waiting on two of them gets both appends), as the full path does
    with rm.gathered_wakeups():
        answers, _ = _append_all(rm, request)
    return _response_body(answers)


def answer_frame(rm, payload):
    """The answer to a Produce request frame (header + body, as the TCP
    wire carries it, without its size prefix; a bytearray) when it is the
    common kind, every partition appended: its TCP frame (size prefix and
    all), or a response body when a partition's log refused its batch (for
    the generic encoder: record errors, messages), or NO_RESPONSE (acks 0);
    None when it is not the common kind, nothing read beyond the frame and
    nothing changed: the caller decodes it and serves it as any other.
    A request of one partition (librdkafka's at many partitions), or of
    up to 4,096 (the native producer's: the partitions of a worker whose
    batches were ready), is served in one C pass (ext/produce_frames.pyx),
    any other by ``_answer_frame_generally``."""
    return answer_one_frame(rm, payload, NO_RESPONSE, _answer_one_slowly,
                            _answer_frame_generally, _answer_rows_slowly)


def _answer_frame_generally(rm, payload):
    """answer_frame's answer to a request of more (or fewer) than one partition."""
    request = read_produce(payload)
    if request is None:
        return None
    version, correlation_id, acks, topics = request
    plan = qualifying(rm, acks, topics)
    if plan is None:
        return None
    with rm.gathered_wakeups():
        answers, refused = _append_all(rm, plan)
    return _answer(version, correlation_id, acks, answers, refused)


def _answer(version: int, correlation_id: int, acks: int, answers: list, refused: bool):
    """answer_frame's answer of ``_append_all``'s results."""
    if not acks:
        return NO_RESPONSE
    if refused:
        return _response_body(answers)
    return write_produce_answer(version, correlation_id, answers)


def _answer_one_slowly(rm, plan: list, version: int, correlation_id: int, acks: int,
                       refusal: KafkaError | None):
    """answer_one_frame's request that ``append_once`` did not serve:
    its batch refused with ``refusal``, or (None) appended through
    ``ReplicaManager.append``."""
    if refusal is None:
        answers, refused = _append_all(rm, plan, once=False)
    else:
        (name, ((index, part, _),)), = plan
        answers, refused = [(name, [_refused(rm, part, index, refusal)])], True
    return _answer(version, correlation_id, acks, answers, refused)


def _answer_rows_slowly(rm, version: int, correlation_id: int, acks: int, rows: list,
                        refusal: KafkaError | None):
    """answer_one_frame's request of several partitions from the first
    partition the C pass did not append on (``rows``: [(topic ordinal,
    name, index, Partition, records, answer or None)], answers in
    ``_append_all``'s shape): that one refused with ``refusal``, or (None)
    appended through ``ReplicaManager.append``, the rest as
    ``_append_all`` appends them; answered as ``_answer``."""
    answers: list = []
    refused = False
    topic = first = None
    for ordinal, name, index, part, records, done in rows:
        if ordinal != topic:
            topic = ordinal
            answers.append((name, []))
        outs = answers[-1][1]
        if done is not None:
            outs.append(done)
        elif first is None and refusal is not None:
            outs.append(_refused(rm, part, index, refusal))
            refused = True
        else:
            # the partition the C pass left goes the full path; those after it as usual
            ((_, (out,)),), was_refused = _append_all(rm, [(name, [(index, part, records)])],
                                                      once=first is not None)
            outs.append(out)
            refused = refused or was_refused
        if done is None:
            first = False
    return _answer(version, correlation_id, acks, answers, refused)


def _append_all(rm, request: list, once: bool = True) -> tuple[list, bool]:
    """([(topic name, [answer])], whether any was refused) of
    ``request``'s appends (qualifying's shape): each partition's through
    ``ReplicaManager.append``, the one write path (high watermark, leader
    states, stats, wake-ups), or, for the common one-batch append, its
    steps in one pass (ext/leader_append.pyx: the same steps, a dozen
    Python calls fewer a partition; not tried when ``once`` is False). An
    answer is (index, base offset, log append time, log start offset), or a
    refused partition's response dict."""
    answers = []
    refused = False
    append = rm.append
    for name, parts in request:
        outs = []
        for index, part, records in parts:
            try:
                done = append_once(rm, part, records, index) if once else None
                if done is not None:
                    outs.append(done)
                    continue
                info = append(part, records)
            except KafkaError as exc:
                outs.append(_refused(rm, part, index, exc))
                refused = True
                continue
            outs.append((index, info.first_offset, info.log_append_time, info.log_start_offset))
        answers.append((name, outs))
    return answers, refused


def _response_body(answers: list) -> dict:
    """The response body of ``_append_all``'s answers, for the generic encoder."""
    responses = []
    for name, outs in answers:
        responses.append({"name": name, "partition_responses": [
            out if type(out) is dict else
            {"index": out[0], "error_code": 0, "base_offset": out[1],
             "log_append_time_ms": out[2], "log_start_offset": out[3], "record_errors": [],
             "error_message": None}
            for out in outs]})
    return {"responses": responses, "throttle_time_ms": 0}


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


# For ProduceFrames (ext/produce_frames.pyx): a read's frames given to
# ``answer_frame`` bound to a replica manager go to the C pass directly,
# with these three paths, without this module's Python call around it.
answer_frame.one_pass = (_answer_one_slowly, _answer_frame_generally, _answer_rows_slowly)
