"""Walking a request's topics and partitions, building the response's.

Most of Kafka's data APIs share one shape: the request lists topics, each
with partitions; the response lists the same topics, each partition with
its own result and ``error_code``. ``each_partition`` walks the request
once and builds that response, calling ``serve`` per partition. A
``KafkaError`` raised by ``serve`` (or by resolving the topic) becomes that
partition's ``error_code`` (and ``error_message`` where the API has one);
the partition's other fields keep the defaults ``blank`` gave them, so an
erroneous partition is always a well-formed answer.

Field names differ from API to API (``topic_data``/``name``/``index`` in
Produce, ``topics``/``topic``/``partition`` in Fetch, ...): a ``Shape``
names them once per API.

Who may call: request handlers, on their process's event-loop thread.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from kafkalite import errors
from kafkalite.errors import KafkaError

# Produce from v13 names each topic by its id (KIP-516), as Fetch does from v13.
PRODUCE_TOPIC_IDS = 13


@dataclass(frozen=True)
class Shape:
    """Where an API keeps its topics and partitions."""

    topic_name: str          # request topic: its name field
    partitions: str          # request topic: its partitions array
    partition: str           # request partition: its index field
    out_topic_name: str      # response topic: its name field
    out_partitions: str      # response topic: its partitions array
    out_partition: str       # response partition: its index field
    error_message: bool = False   # whether response partitions have error_message


def name_produce_topics(body: dict, api_version: int, name_of: Callable) -> None:
    """Give each topic of a Produce request of ``api_version`` its name:
    from v13 the request names topics by id (``name_of(topic_id)`` -> the
    name, or None for an id not known here, which stays ""), so every later
    step (authorization, transaction checks, appends) reads names only."""
    if api_version < PRODUCE_TOPIC_IDS:
        return
    for topic in body.get("topic_data") or ():
        topic["name"] = name_of(topic.get("topic_id")) or ""


def produce_topic_name(topic: dict) -> str:
    """``each_partition``'s ``resolve`` for a Produce request named by
    ``name_produce_topics``: a topic id it could not name is UNKNOWN_TOPIC_ID."""
    if not topic["name"] and topic.get("topic_id") is not None and topic["topic_id"].int:
        raise errors.UnknownTopicIdError(f"no topic with id {topic['topic_id']} here")
    return topic["name"]


def produce_topic_id(topic: dict) -> dict:
    """``each_partition``'s ``topic_fields`` for Produce: the response names
    the topic as the request did (by id from v13)."""
    return {"topic_id": topic.get("topic_id")}


def each_partition(shape: Shape, topics: list, serve: Callable, blank: Callable[[], dict], *,
                   resolve: Callable[[dict], str] | None = None,
                   topic_fields: Callable[[dict], dict] | None = None) -> list[dict]:
    """The response topics for request ``topics``.

    ``serve(name, topic, partition, out)`` fills ``out``, the response
    partition (pre-filled by ``blank()`` with ``error_code`` 0 and the
    index). ``resolve(topic) -> name`` finds a topic's name when it is not
    simply its name field (Fetch names topics by id from v13);
    ``topic_fields(topic)`` adds fields to the response topic.
    """
    result = []
    for topic in topics:
        topic_error = None
        name = topic.get(shape.topic_name)
        if resolve is not None:
            try:
                name = resolve(topic)
            except KafkaError as exc:
                topic_error = exc
        outs = []
        for part in topic[shape.partitions]:
            out = blank()
            out[shape.out_partition] = part[shape.partition]
            try:
                if topic_error is not None:
                    raise topic_error
                serve(name, topic, part, out)
            except KafkaError as exc:
                out["error_code"] = exc.code
                if shape.error_message:
                    out["error_message"] = exc.message
            outs.append(out)
        entry = {shape.out_topic_name: name, shape.out_partitions: outs}
        if topic_fields is not None:
            entry.update(topic_fields(topic))
        result.append(entry)
    return result
