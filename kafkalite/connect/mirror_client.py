"""MirrorMaker 2's client side (Kafka's connect/mirror-client): what a
consumer switching clusters asks of the checkpoints MM2 wrote.

``translate_offsets(config, "east", "billing")`` is Kafka's
RemoteClusterUtils.translateOffsets: it reads the checkpoint topic
``east.checkpoints.internal`` of the cluster ``config`` reaches (the
target of an ``east`` -> here mirror) from its beginning to its end, and
answers the group's latest checkpoint of each partition: the partition as
named on this cluster (``east.orders``) with the downstream offset (and
the checkpoint's metadata) -- what the group commits or seeks to here.
Checkpoint records are MM2's binary format (connectors/mirror.py).

Who calls: users' code and tests. Nothing here is shared between calls.
"""
from __future__ import annotations

import time

from kafkalite.connect.connectors.mirror import checkpoints_topic_of
from kafkalite.connect.connectors.mirror_records import decode_checkpoint_with_metadata


def translate_offsets(config: dict, remote_cluster_alias: str, consumer_group_id: str,
                      timeout: float = 30.0) -> list:
    """The offsets of ``consumer_group_id`` on the cluster ``config`` reaches,
    translated from cluster ``remote_cluster_alias`` by MM2's checkpoints:
    [TopicPartition(topic, partition, offset, metadata)], sorted; what
    ``Consumer.commit(offsets=...)`` and ``alter_consumer_group_offsets``
    take (Kafka answers a map of the same). [] when there is no checkpoint
    topic or no checkpoint of the group. TimeoutError when the topic
    cannot be read to its end within ``timeout`` seconds."""
    from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
    from kafkalite.errors import UnknownTopicOrPartitionError
    topic = checkpoints_topic_of(remote_cluster_alias)
    consumer = Consumer({k: v for k, v in config.items() if k != "group.id"} |
                        {"group.id": f"{topic}-reader", "enable.auto.commit": False})
    try:
        try:
            low, end = consumer.get_watermark_offsets(TopicPartition(topic, 0))
        except UnknownTopicOrPartitionError:
            return []
        latest: dict = {}
        if end > low:
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + timeout
            position = low
            while position < end:
                if time.monotonic() >= deadline:
                    raise TimeoutError(f"{topic} read up to offset {position} of {end} in "
                                       f"{timeout:g} s")
                for m in consumer.consume(10_000, 0.5):
                    if m.error():
                        continue
                    position = m.offset() + 1
                    if m.key() is None or m.value() is None:
                        continue
                    group, t, p, _, downstream, metadata = decode_checkpoint_with_metadata(
                        m.key(), m.value())
                    if group == consumer_group_id:
                        latest[(t, p)] = (downstream, metadata)
        return sorted(TopicPartition(t, p, down, metadata or None)
                      for (t, p), (down, metadata) in latest.items())
    finally:
        consumer.close()
