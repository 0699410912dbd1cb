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


def _prop(key: str, minimum: int | None = None, maximum: int | None = None, **kw):
    return field(metadata={"key": key, "min": minimum, "max": maximum}, **kw)


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log (Kafka topic-level configs)."""

    segment_bytes: int = _prop("segment.bytes", 14, INT_MAX, default=1 << 30)
    segment_ms: int = _prop("segment.ms", 1, LONG_MAX, default=7 * 24 * 3600 * 1000)
    segment_jitter_ms: int = _prop("segment.jitter.ms", 0, LONG_MAX, default=0)
    segment_index_bytes: int = _prop("segment.index.bytes", 8, INT_MAX, default=10 * 1024 * 1024)
    index_interval_bytes: int = _prop("index.interval.bytes", 0, INT_MAX, default=4096)
    max_message_bytes: int = _prop("max.message.bytes", 0, INT_MAX, default=1048588)
    retention_ms: int = _prop("retention.ms", -1, LONG_MAX, default=7 * 24 * 3600 * 1000)
    retention_bytes: int = _prop("retention.bytes", -1, LONG_MAX, default=-1)
    cleanup_policy: tuple = _prop("cleanup.policy", default=(CLEANUP_DELETE,))
    delete_retention_ms: int = _prop("delete.retention.ms", 0, LONG_MAX, default=24 * 3600 * 1000)
    min_compaction_lag_ms: int = _prop("min.compaction.lag.ms", 0, LONG_MAX, default=0)
    max_compaction_lag_ms: int = _prop("max.compaction.lag.ms", 1, LONG_MAX, default=LONG_MAX)
    min_cleanable_dirty_ratio: float = _prop("min.cleanable.dirty.ratio", 0, 1, default=0.5)
    flush_messages: int = _prop("flush.messages", 1, LONG_MAX, default=LONG_MAX)
    flush_ms: int = _prop("flush.ms", 0, LONG_MAX, default=LONG_MAX)
    message_timestamp_type: str = _prop("message.timestamp.type", default=TIMESTAMP_CREATE_TIME)
    compression_type: str = _prop("compression.type", default="producer")
    # Replication: an acks=all write needs this many in-sync replicas; a
    # partition whose in-sync replicas are all gone may elect an out-of-sync
    # one (losing what only the ISR had) only if this is true.
    min_insync_replicas: int = _prop("min.insync.replicas", 1, INT_MAX, default=1)
    unclean_leader_election_enable: bool = _prop("unclean.leader.election.enable",
                                                 default=False)

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
