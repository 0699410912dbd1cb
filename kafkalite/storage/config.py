"""Per-topic log configuration, with Kafka's property names and defaults.

``LogConfig.from_properties({"segment.bytes": "1048576", ...})`` accepts the
same keys and value syntax as Kafka's topic configs (strings or numbers) and
raises InvalidConfigurationError naming the key for anything it cannot use.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kafkalite.errors import InvalidConfigurationError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
TIMESTAMP_CREATE_TIME = "CreateTime"
TIMESTAMP_LOG_APPEND_TIME = "LogAppendTime"
COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")


def _prop(key: str, minimum: int | None = None, maximum: int | None = None, *, doc: str,
          broker: dict[str, int] | None = None, **kw):
    """A topic config: Kafka's name, its bounds, its documentation, and
    Kafka's broker-wide default settings for it (``server.properties`` name ->
    the factor that turns that setting's unit into this one's: 3600000 for
    ``log.retention.hours``), which a server config file may set."""
    return field(metadata={"key": key, "min": minimum, "max": maximum, "doc": doc,
                           "broker": broker or {}}, **kw)


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log (Kafka topic-level configs)."""

    segment_bytes: int = _prop("segment.bytes", 14, INT_MAX, default=1 << 30,
        doc="Size at which the active segment is rolled.", broker={"log.segment.bytes": 1})
    segment_ms: int = _prop("segment.ms", 1, LONG_MAX, default=7 * 24 * 3600 * 1000,
        doc="Age at which the active segment is rolled even if not full.",
        broker={"log.roll.ms": 1, "log.roll.hours": 3_600_000})
    segment_jitter_ms: int = _prop("segment.jitter.ms", 0, LONG_MAX, default=0,
        doc="Largest random amount taken off `segment.ms`, so that partitions do not all "
            "roll at once.", broker={"log.roll.jitter.ms": 1, "log.roll.jitter.hours": 3_600_000})
    segment_index_bytes: int = _prop("segment.index.bytes", 8, INT_MAX, default=10 * 1024 * 1024,
        doc="Size of a segment's offset and time indexes (a full index rolls the segment).",
        broker={"log.index.size.max.bytes": 1})
    index_interval_bytes: int = _prop("index.interval.bytes", 0, INT_MAX, default=4096,
        doc="Bytes of batches between two offset index entries.",
        broker={"log.index.interval.bytes": 1})
    max_message_bytes: int = _prop("max.message.bytes", 0, INT_MAX, default=1048588,
        doc="Largest record batch a producer may append.", broker={"message.max.bytes": 1})
    retention_ms: int = _prop("retention.ms", -1, LONG_MAX, default=7 * 24 * 3600 * 1000,
        doc="Segments whose records are all older than this are deleted (-1: no limit).",
        broker={"log.retention.ms": 1, "log.retention.minutes": 60_000,
                "log.retention.hours": 3_600_000})
    retention_bytes: int = _prop("retention.bytes", -1, LONG_MAX, default=-1,
        doc="Oldest segments are deleted while a partition is larger than this (-1: no limit).",
        broker={"log.retention.bytes": 1})
    cleanup_policy: tuple = _prop("cleanup.policy", default=(CLEANUP_DELETE,),
        doc="`delete` (retention), `compact` (keep each key's latest record) or both.",
        broker={"log.cleanup.policy": 1})
    delete_retention_ms: int = _prop("delete.retention.ms", 0, LONG_MAX, default=24 * 3600 * 1000,
        doc="How long compaction keeps tombstones (and transaction markers).",
        broker={"log.cleaner.delete.retention.ms": 1})
    min_compaction_lag_ms: int = _prop("min.compaction.lag.ms", 0, LONG_MAX, default=0,
        doc="A record stays uncompacted at least this long.",
        broker={"log.cleaner.min.compaction.lag.ms": 1})
    max_compaction_lag_ms: int = _prop("max.compaction.lag.ms", 1, LONG_MAX, default=LONG_MAX,
        doc="A record is compacted at most this long after it was written, however clean "
            "the log.", broker={"log.cleaner.max.compaction.lag.ms": 1})
    min_cleanable_dirty_ratio: float = _prop("min.cleanable.dirty.ratio", 0, 1, default=0.5,
        doc="Compaction starts when this share of the log is uncompacted.",
        broker={"log.cleaner.min.cleanable.ratio": 1})
    flush_messages: int = _prop("flush.messages", 1, LONG_MAX, default=LONG_MAX,
        doc="fsync after this many records (default: leave it to the OS and replication).",
        broker={"log.flush.interval.messages": 1})
    flush_ms: int = _prop("flush.ms", 0, LONG_MAX, default=LONG_MAX,
        doc="fsync at least this often.", broker={"log.flush.interval.ms": 1})
    message_timestamp_type: str = _prop("message.timestamp.type", default=TIMESTAMP_CREATE_TIME,
        doc="`CreateTime` (the producer's) or `LogAppendTime` (the broker's, set on append).",
        broker={"log.message.timestamp.type": 1})
    compression_type: str = _prop("compression.type", default="producer",
        doc="`producer` (keep the producer's codec) or a codec to store batches in: "
            "uncompressed, gzip, snappy, lz4, zstd.", broker={"compression.type": 1})
    # Replication: an acks=all write needs this many in-sync replicas; a
    # partition whose in-sync replicas are all gone may elect an out-of-sync
    # one (losing what only the ISR had) only if this is true.
    min_insync_replicas: int = _prop("min.insync.replicas", 1, INT_MAX, default=1,
        doc="In-sync replicas an acks=all write needs.", broker={"min.insync.replicas": 1})
    unclean_leader_election_enable: bool = _prop("unclean.leader.election.enable", default=False,
        doc="Elect an out-of-sync replica when no in-sync one is left (losing what only the "
            "ISR had).", broker={"unclean.leader.election.enable": 1})

    def __post_init__(self):
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            lo, hi = f.metadata["min"], f.metadata["max"]
            if lo is not None and not (lo <= value <= hi):
                raise InvalidConfigurationError(
                    f"invalid value {value} for {f.metadata['key']}: must be between {lo} and {hi}")
        bad = [p for p in self.cleanup_policy if p not in (CLEANUP_DELETE, CLEANUP_COMPACT)]
        if bad or not self.cleanup_policy:
            raise InvalidConfigurationError(
                f"invalid value {','.join(self.cleanup_policy)!r} for cleanup.policy: "
                f"expected delete, compact or both")
        if self.message_timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
            raise InvalidConfigurationError(
                f"invalid value {self.message_timestamp_type!r} for message.timestamp.type: "
                f"expected CreateTime or LogAppendTime")
        if self.compression_type not in COMPRESSION_TYPES:
            raise InvalidConfigurationError(
                f"invalid value {self.compression_type!r} for compression.type: expected one of "
                f"{', '.join(COMPRESSION_TYPES)}")

    # derived views
    @property
    def compact(self) -> bool:
        return CLEANUP_COMPACT in self.cleanup_policy

    @property
    def delete(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def log_append_time(self) -> bool:
        return self.message_timestamp_type == TIMESTAMP_LOG_APPEND_TIME

    # Kafka property names <-> fields
    @classmethod
    def keys(cls) -> list[str]:
        return [f.metadata["key"] for f in dataclasses.fields(cls)]

    @classmethod
    def broker_defaults(cls) -> dict[str, tuple[str, int]]:
        """Kafka's broker-wide default settings (``log.retention.hours``, ...) ->
        (the topic config they set, the factor from their unit to its unit)."""
        return {name: (f.metadata["key"], factor) for f in dataclasses.fields(cls)
                for name, factor in f.metadata["broker"].items()}

    @classmethod
    def from_properties(cls, props: dict | None = None, base: "LogConfig | None" = None) -> "LogConfig":
        """Build from Kafka topic-config properties, on top of ``base``."""
        by_key = {f.metadata["key"]: f for f in dataclasses.fields(cls)}
        values = {}
        for key, raw in (props or {}).items():
            f = by_key.get(key)
            if f is None:
                raise InvalidConfigurationError(f"unknown topic config {key!r}")
            values[f.name] = _parse(key, f.type, raw)
        return dataclasses.replace(base or cls(), **values)

    def to_properties(self) -> dict[str, str]:
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool):
                out[f.metadata["key"]] = "true" if value else "false"
            else:
                out[f.metadata["key"]] = ",".join(value) if isinstance(value, tuple) else str(value)
        return out


def _parse(key: str, kind: str, raw):
    try:
        if kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text not in ("true", "false"):
                raise ValueError
            return text == "true"
        if kind == "int":
            if isinstance(raw, bool):
                raise ValueError
            return int(raw)
        if kind == "float":
            return float(raw)
        if kind == "tuple":
            parts = raw if isinstance(raw, (list, tuple)) else str(raw).split(",")
            return tuple(p.strip() for p in parts if p.strip())
        return str(raw)
    except (TypeError, ValueError):
        raise InvalidConfigurationError(f"invalid value {raw!r} for {key}: expected {kind}") from None
