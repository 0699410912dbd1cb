"""v2's consumer instances' partitions and positions: ``.../assignments`` and ``.../positions``.

Confluent's v2 ConsumersResource:

- ``POST .../assignments`` ``{"partitions": [{"topic", "partition"}]}``:
  the instance reads these partitions itself, in no group's rebalance
  (Kafka's ``assign``); an instance that subscribed is 40903, as Kafka's
  consumer refuses to mix the two (IllegalStateException). Read on each
  topic is asked (Fetch). 204.
- ``GET .../assignments``: ``{"partitions": [...]}``, what it reads now
  (assigned, or given by its group).
- ``POST .../positions`` ``{"offsets": [{"topic", "partition", "offset"}],
  "timestamps": [{"topic", "partition", "timestamp"}]}``: the next record
  read from each partition is at that offset, or the first at or after
  that time (ISO 8601, or ms since the epoch; ListOffsets by time);
  ``.../positions/beginning`` and ``.../positions/end`` with
  ``{"partitions": [...]}``: at the first record, or after the last. A
  partition not assigned to the instance is 40903 ("No current assignment
  for partition t-p", Kafka's IllegalStateException). Records fetched
  before and not yet answered for a partition that moves are dropped, so
  the next ``GET .../records`` starts at the new position. 204.

Who may call: ConsumerInstances (consumers.py), of which this is a part:
its handlers run under the instance's lock (``_using``).
"""
from __future__ import annotations

import collections
from datetime import datetime

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.rest_proxy.errors import BAD_REQUEST, ILLEGAL_STATE, ProxyError, from_kafka
from kafkalite.rest_proxy.http import V2, Answer


def _partitions(body, field: str = "partitions") -> list[tuple[str, int]]:
    items = body.get(field) if isinstance(body, dict) else None
    try:
        if not isinstance(items, list):
            raise TypeError
        return [(str(p["topic"]), int(p["partition"])) for p in items]
    except (KeyError, TypeError, ValueError):
        raise ProxyError(BAD_REQUEST, f"{field} is a list of {{topic, partition}}") from None


def _epoch_ms(value) -> int:
    """A seek's timestamp: ms since the epoch, or ISO 8601 as Confluent
    writes it (``2026-01-02T03:04:05.678Z``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    try:
        return int(datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        raise ProxyError(BAD_REQUEST, f"timestamp {value!r} is neither ISO 8601 nor ms since "
                                      f"the epoch") from None


class Positions:
    """The assignments and positions handlers of ConsumerInstances."""

    def assign(self, req, group, name) -> Answer:
        from kafkalite.client import TopicPartition
        wanted = _partitions(req.json({}) or {})

        def work(inst):
            if inst.topics:
                raise ProxyError(ILLEGAL_STATE, "Illegal state: Subscription to topics, "
                                                "partitions and pattern are mutually exclusive")
            req.access.require(Op.READ, Res.TOPIC, *dict.fromkeys(t for t, _ in wanted))
            try:
                inst.consumer.assign([TopicPartition(t, p) for t, p in wanted])
            except Exception as exc:
                raise from_kafka(exc) from None
            inst.assigned = list(wanted)
            inst.backlog.clear()
        self._using(req, group, name, work)
        return Answer(204, None, V2)

    def assignments(self, req, group, name) -> Answer:
        def work(inst):
            return [{"topic": tp.topic, "partition": tp.partition}
                    for tp in inst.consumer.assignment()]
        return Answer(200, {"partitions": self._using(req, group, name, work)}, V2)

    def seek(self, req, group, name) -> Answer:
        from kafkalite.client import TopicPartition
        body = req.json({}) or {}
        offsets = body.get("offsets") or [] if isinstance(body, dict) else None
        times = body.get("timestamps") or [] if isinstance(body, dict) else None
        try:
            to_offset = [(str(o["topic"]), int(o["partition"]), int(o["offset"]))
                         for o in offsets]
            to_time = [(str(o["topic"]), int(o["partition"]), _epoch_ms(o["timestamp"]))
                       for o in times]
        except (KeyError, TypeError, ValueError):
            raise ProxyError(BAD_REQUEST, "offsets is a list of {topic, partition, offset}, "
                                          "timestamps of {topic, partition, timestamp}") from None

        def work(inst):
            self._require_assigned(inst, [(t, p) for t, p, _ in to_offset + to_time])
            targets = list(to_offset)
            if to_time:
                req.access.require(Op.DESCRIBE, Res.TOPIC,
                                   *dict.fromkeys(t for t, _, _ in to_time))     # ListOffsets
                try:
                    found = inst.consumer.offsets_for_times(
                        [TopicPartition(t, p, ms) for t, p, ms in to_time])
                except Exception as exc:
                    raise from_kafka(exc) from None
                targets += [(tp.topic, tp.partition, tp.offset) for tp in found]
            self._move(inst, targets)
        self._using(req, group, name, work)
        return Answer(204, None, V2)

    def seek_to_beginning(self, req, group, name) -> Answer:
        return self._seek_to_end_of(req, group, name, beginning=True)

    def seek_to_end(self, req, group, name) -> Answer:
        return self._seek_to_end_of(req, group, name, beginning=False)

    def _seek_to_end_of(self, req, group, name, beginning: bool) -> Answer:
        from kafkalite.client import OFFSET_BEGINNING, OFFSET_END
        wanted = _partitions(req.json({}) or {})

        def work(inst):
            self._require_assigned(inst, wanted)
            req.access.require(Op.DESCRIBE, Res.TOPIC, *dict.fromkeys(t for t, _ in wanted))
            self._move(inst, [(t, p, OFFSET_BEGINNING if beginning else OFFSET_END)
                              for t, p in wanted])
        self._using(req, group, name, work)
        return Answer(204, None, V2)

    @staticmethod
    def _require_assigned(inst, partitions) -> None:
        assigned = {(tp.topic, tp.partition) for tp in inst.consumer.assignment()}
        for t, p in partitions:
            if (t, p) not in assigned:
                raise ProxyError(ILLEGAL_STATE, f"Illegal state: No current assignment for "
                                                f"partition {t}-{p}")

    @staticmethod
    def _move(inst, targets) -> None:
        from kafkalite.client import TopicPartition
        try:
            for t, p, offset in targets:
                inst.consumer.seek(TopicPartition(t, p, offset))
        except Exception as exc:
            raise from_kafka(exc) from None
        moved = {(t, p) for t, p, _ in targets}
        # records fetched before the move and not yet answered are from the old position
        inst.backlog = collections.deque(m for m in inst.backlog
                                         if (m.topic(), m.partition()) not in moved)
