"""MirrorMaker 2's internal records, in MM2's binary format (Kafka's
protocol Struct encoding: int16-length strings): OffsetSync (to
``mm2-offset-syncs.<target alias>.internal`` on the source cluster),
Checkpoint (to ``<source alias>.checkpoints.internal`` on the target) and
Heartbeat (to ``heartbeats``), as mirror.py's tasks write them and
mirror_client.py reads the checkpoints back.

Who calls: mirror.py and mirror_client.py; pure functions.
"""
from __future__ import annotations

import struct


def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _read_str(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from(">h", buf, pos)
    return buf[pos + 2:pos + 2 + n].decode(), pos + 2 + n


def encode_offset_sync(topic, partition, upstream, downstream) -> tuple[bytes, bytes]:
    """OffsetSync: key {topic, partition}, value {upstreamOffset, downstreamOffset}."""
    return _str(topic) + struct.pack(">i", partition), struct.pack(">qq", upstream, downstream)


def decode_offset_sync(key: bytes, value: bytes) -> tuple[str, int, int, int]:
    topic, pos = _read_str(key, 0)
    (partition,) = struct.unpack_from(">i", key, pos)
    upstream, downstream = struct.unpack(">qq", value)
    return topic, partition, upstream, downstream


def encode_checkpoint(group, topic, partition, upstream, downstream, metadata=""):
    """Checkpoint: key {group, topic, partition}; value version 0 + {upstreamOffset,
    downstreamOffset, metadata}. ``topic`` is the topic on the target cluster (the
    renamed one, ``east.orders``: MirrorCheckpointTask.renameTopicPartition), the one a
    consumer switched over reads and RemoteClusterUtils.translateOffsets answers for."""
    return (_str(group) + _str(topic) + struct.pack(">i", partition),
            struct.pack(">hqq", 0, upstream, downstream) + _str(metadata or ""))


def decode_checkpoint(key: bytes, value: bytes) -> tuple[str, str, int, int, int]:
    return decode_checkpoint_with_metadata(key, value)[:5]


def decode_checkpoint_with_metadata(key: bytes, value: bytes) -> tuple[str, str, int, int,
                                                                       int, str]:
    """(group, topic, partition, upstream offset, downstream offset, metadata)."""
    group, pos = _read_str(key, 0)
    topic, pos = _read_str(key, pos)
    (partition,) = struct.unpack_from(">i", key, pos)
    _, upstream, downstream = struct.unpack_from(">hqq", value)
    metadata = _read_str(value, 18)[0] if len(value) >= 20 else ""
    return group, topic, partition, upstream, downstream, metadata


def encode_heartbeat(source_alias, target_alias, timestamp_ms) -> tuple[bytes, bytes]:
    return _str(source_alias) + _str(target_alias), struct.pack(">hq", 0, timestamp_ms)
