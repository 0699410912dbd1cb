"""Per-topic log configuration, with Kafka's property names, types and defaults.

``LogConfig.from_properties({"segment.bytes": "1048576", ...})`` accepts the
same keys and value syntax as Kafka's topic configs (strings or numbers) and
raises InvalidConfigurationError naming the key for anything it cannot use.

Every topic config Kafka 4.x documents is a field here, so that any of them
can be given, stored and described. The log acts on most; the others are
kept and shown but have no effect, and their ``effect`` metadata says why
(kafkalite never recompresses a batch, ...). The
configs Kafka 3.x deprecated and 4.0 removed (``DEPRECATED``) are accepted
too, checked and ignored, so that clients written for Kafka 3.x still
create their topics. server/config_registry.py adds what a client is told
about each (its ConfigType, synonyms, documentation) on top of this.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field

from kafkalite.errors import InvalidConfigurationError

LONG_MAX = (1 << 63) - 1
INT_MAX = (1 << 31) - 1

CLEANUP_DELETE = "delete"
CLEANUP_COMPACT = "compact"
TIMESTAMP_CREATE_TIME = "CreateTime"
TIMESTAMP_LOG_APPEND_TIME = "LogAppendTime"
COMPRESSION_TYPES = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")
# Kafka's codec levels: gzip's -1 is zlib's own default
GZIP_LEVELS, LZ4_LEVELS, ZSTD_LEVELS = (1, 9), (1, 17), (-131072, 22)
# leader/follower.replication.throttled.replicas: "*" or partition:broker pairs
_THROTTLED = re.compile(r"^\s*(\*|\d+\s*:\s*\d+(\s*,\s*\d+\s*:\s*\d+)*)?\s*$")
# The releases Kafka 3.x's MetadataVersion knows, which its (deprecated)
# message.format.version takes: "0.x.y" and "x.y", each optionally with an
# inter-broker protocol suffix (-IV0, ...), any further segments ignored as
# MetadataVersion.fromVersionString ignores them ("0.10.0.0" is 0.10.0).
_KAFKA_RELEASES = frozenset(
    ["0.8.0", "0.8.1", "0.8.2", "0.9.0", "0.10.0", "0.10.1", "0.10.2", "0.11.0", "1.0", "1.1"]
    + [f"2.{minor}" for minor in range(9)] + [f"3.{minor}" for minor in range(10)])
_IBP_SUFFIX = re.compile(r"-IV\d+$")


def kafka_3_version(value: str) -> bool:
    """Whether Kafka 3.x takes ``value`` as a message.format.version."""
    segments = value.strip().split(".")
    kept = 3 if value.startswith("0.") else 2
    return _IBP_SUFFIX.sub("", ".".join(segments[:kept])) in _KAFKA_RELEASES

# Why a config has no effect here (the field's ``effect``); empty: the log acts on it.
NO_RECOMPRESSION = ("kafkalite stores a batch as its producer compressed it and never "
                    "recompresses it")
# iceberg.mode: Redpanda's modes. value_schema_latest may name its subject
# as Redpanda's does (``value_schema_latest:subject=<subject>``; default
# ``<topic>-value``, the TopicNameStrategy)
ICEBERG_OFF = "off"
ICEBERG_KEY_VALUE = "key_value"
ICEBERG_VALUE_SCHEMA_ID_PREFIX = "value_schema_id_prefix"
ICEBERG_VALUE_SCHEMA_LATEST = "value_schema_latest"
ICEBERG_MODES = (ICEBERG_OFF, ICEBERG_KEY_VALUE, ICEBERG_VALUE_SCHEMA_ID_PREFIX,
                 ICEBERG_VALUE_SCHEMA_LATEST)
# iceberg.invalid.record.action: Redpanda's; what becomes of a value that does not decode
ICEBERG_DLQ_TABLE = "dlq_table"
ICEBERG_DROP = "drop"
ICEBERG_INVALID_RECORD_ACTIONS = (ICEBERG_DLQ_TABLE, ICEBERG_DROP)
ICEBERG_DEFAULT_PARTITION_SPEC = "(hour(redpanda.timestamp))"   # Redpanda's (partition_spec.py)


def iceberg_mode_parts(mode: str) -> tuple[str, dict[str, str]]:
    """``iceberg.mode`` as (mode, options): ``value_schema_latest:subject=s``
    gives ("value_schema_latest", {"subject": "s"}). Raises ValueError on
    options another mode has, or options it does not know."""
    name, _, rest = mode.partition(":")
    options = {}
    if rest:
        if name != ICEBERG_VALUE_SCHEMA_LATEST:
            raise ValueError(f"{name} takes no options")
        for item in rest.split(","):
            k, sep, v = item.partition("=")
            if not sep or k.strip() != "subject" or not v.strip():
                raise ValueError(f"unknown option {item!r} (value_schema_latest takes "
                                 f"subject=<subject>)")
            options["subject"] = v.strip()
    return name, options
NO_TIMESTAMP_CHECK = ("kafkalite does not compare record timestamps with the broker's clock "
                      "(no INVALID_TIMESTAMP)")


def _prop(key: str, minimum: int | None = None, maximum: int | None = None, *, doc: str,
          kind: str, broker: dict[str, int] | None = None, effect: str = "", **kw):
    """A topic config: Kafka's name, its Kafka type (``kind``: int, long,
    double, boolean, string, list), its bounds, its documentation, Kafka's
    broker-wide default settings for it in Kafka's order of precedence
    (``server.properties`` name -> the factor that turns that setting's unit
    into this one's: 3600000 for ``log.retention.hours``), which a server
    config file may set, and why kafkalite does not act on it (``effect``;
    empty when it does)."""
    return field(metadata={"key": key, "min": minimum, "max": maximum, "doc": doc,
                           "kind": kind, "broker": broker or {}, "effect": effect}, **kw)


@dataclass(frozen=True)
class Deprecated:
    """A topic config Kafka deprecated and has since removed: accepted,
    checked and ignored (``effect`` says what became of it)."""
    kind: str
    default: str
    broker: str
    doc: str
    effect: str


@dataclass(frozen=True)
class LogConfig:
    """Settings of one partition log (Kafka topic-level configs)."""

    segment_bytes: int = _prop("segment.bytes", 14, INT_MAX, default=1 << 30, kind="int",
        doc="Size at which the active segment is rolled (Kafka 4.0's minimum is 1 MiB; "
            "kafkalite keeps Kafka 3's 14 bytes).", broker={"log.segment.bytes": 1})
    segment_ms: int = _prop("segment.ms", 1, LONG_MAX, default=7 * 24 * 3600 * 1000, kind="long",
        doc="Age at which the active segment is rolled even if not full.",
        broker={"log.roll.ms": 1, "log.roll.hours": 3_600_000})
    segment_jitter_ms: int = _prop("segment.jitter.ms", 0, LONG_MAX, default=0, kind="long",
        doc="Largest random amount taken off `segment.ms`, so that partitions do not all "
            "roll at once.", broker={"log.roll.jitter.ms": 1, "log.roll.jitter.hours": 3_600_000})
    segment_index_bytes: int = _prop("segment.index.bytes", 8, INT_MAX, default=10 * 1024 * 1024,
        kind="int",
        doc="Size of a segment's offset and time indexes (a full index rolls the segment).",
        broker={"log.index.size.max.bytes": 1})
    index_interval_bytes: int = _prop("index.interval.bytes", 0, INT_MAX, default=4096, kind="int",
        doc="Bytes of batches between two offset index entries.",
        broker={"log.index.interval.bytes": 1})
    max_message_bytes: int = _prop("max.message.bytes", 0, INT_MAX, default=1048588, kind="int",
        doc="Largest record batch a producer may append.", broker={"message.max.bytes": 1})
    retention_ms: int = _prop("retention.ms", -1, LONG_MAX, default=7 * 24 * 3600 * 1000,
        kind="long",
        doc="Segments whose records are all older than this are deleted (-1: no limit).",
        broker={"log.retention.ms": 1, "log.retention.minutes": 60_000,
                "log.retention.hours": 3_600_000})
    retention_bytes: int = _prop("retention.bytes", -1, LONG_MAX, default=-1, kind="long",
        doc="Oldest segments are deleted while a partition is larger than this (-1: no limit).",
        broker={"log.retention.bytes": 1})
    cleanup_policy: tuple = _prop("cleanup.policy", default=(CLEANUP_DELETE,), kind="list",
        doc="`delete` (retention), `compact` (keep each key's latest record), both, or none "
            "(an empty list: records are kept for ever, as Kafka 4.2's KIP-1161; DeleteRecords "
            "is refused, as for `compact`).", broker={"log.cleanup.policy": 1})
    delete_retention_ms: int = _prop("delete.retention.ms", 0, LONG_MAX, default=24 * 3600 * 1000,
        kind="long", doc="How long compaction keeps tombstones (and transaction markers).",
        broker={"log.cleaner.delete.retention.ms": 1})
    min_compaction_lag_ms: int = _prop("min.compaction.lag.ms", 0, LONG_MAX, default=0,
        kind="long", doc="A record stays uncompacted at least this long.",
        broker={"log.cleaner.min.compaction.lag.ms": 1})
    max_compaction_lag_ms: int = _prop("max.compaction.lag.ms", 1, LONG_MAX, default=LONG_MAX,
        kind="long",
        doc="A record is compacted at most this long after it was written, however clean "
            "the log.", broker={"log.cleaner.max.compaction.lag.ms": 1})
    min_cleanable_dirty_ratio: float = _prop("min.cleanable.dirty.ratio", 0, 1, default=0.5,
        kind="double", doc="Compaction starts when this share of the log is uncompacted.",
        broker={"log.cleaner.min.cleanable.ratio": 1})
    flush_messages: int = _prop("flush.messages", 1, LONG_MAX, default=LONG_MAX, kind="long",
        doc="fsync after this many records (default: leave it to the OS and replication).",
        broker={"log.flush.interval.messages": 1})
    flush_ms: int = _prop("flush.ms", 0, LONG_MAX, default=LONG_MAX, kind="long",
        doc="fsync at least this often.",
        broker={"log.flush.interval.ms": 1, "log.flush.scheduler.interval.ms": 1})
    file_delete_delay_ms: int = _prop("file.delete.delay.ms", 0, LONG_MAX, default=60_000,
        kind="long", doc="How long a deleted segment's files stay on disk.",
        broker={"log.segment.delete.delay.ms": 1},
        effect="kafkalite removes a segment's files as soon as retention, compaction or "
               "DeleteRecords drops the segment")
    preallocate: bool = _prop("preallocate", default=False, kind="boolean",
        doc="Preallocate a new segment's file.", broker={"log.preallocate": 1},
        effect="kafkalite's segment files grow as they are written")
    message_timestamp_type: str = _prop("message.timestamp.type", default=TIMESTAMP_CREATE_TIME,
        kind="string",
        doc="`CreateTime` (the producer's) or `LogAppendTime` (the broker's, set on append).",
        broker={"log.message.timestamp.type": 1})
    message_timestamp_before_max_ms: int = _prop(
        "message.timestamp.before.max.ms", 0, LONG_MAX, default=LONG_MAX, kind="long",
        doc="With CreateTime: how far behind the broker's clock a record's timestamp may be.",
        broker={"log.message.timestamp.before.max.ms": 1}, effect=NO_TIMESTAMP_CHECK)
    message_timestamp_after_max_ms: int = _prop(
        "message.timestamp.after.max.ms", 0, LONG_MAX, default=3_600_000, kind="long",
        doc="With CreateTime: how far ahead of the broker's clock a record's timestamp may be "
            "(Kafka 4.0's default, one hour).",
        broker={"log.message.timestamp.after.max.ms": 1}, effect=NO_TIMESTAMP_CHECK)
    compression_type: str = _prop("compression.type", default="producer", kind="string",
        doc="`producer` (keep the producer's codec) or a codec to store batches in: "
            "uncompressed, gzip, snappy, lz4, zstd.", broker={"compression.type": 1},
        effect=NO_RECOMPRESSION)
    compression_gzip_level: int = _prop("compression.gzip.level", default=-1, kind="int",
        doc="gzip level when `compression.type` is gzip: 1 to 9, or -1 (zlib's default).",
        broker={"compression.gzip.level": 1}, effect=NO_RECOMPRESSION)
    compression_lz4_level: int = _prop("compression.lz4.level", *LZ4_LEVELS, default=9, kind="int",
        doc="lz4 level when `compression.type` is lz4.", broker={"compression.lz4.level": 1},
        effect=NO_RECOMPRESSION)
    compression_zstd_level: int = _prop("compression.zstd.level", *ZSTD_LEVELS, default=3,
        kind="int", doc="zstd level when `compression.type` is zstd.",
        broker={"compression.zstd.level": 1}, effect=NO_RECOMPRESSION)
    # Replication: an acks=all write needs this many in-sync replicas; a
    # partition whose in-sync replicas are all gone may elect an out-of-sync
    # one (losing what only the ISR had) only if this is true.
    min_insync_replicas: int = _prop("min.insync.replicas", 1, INT_MAX, default=1, kind="int",
        doc="In-sync replicas an acks=all write needs.", broker={"min.insync.replicas": 1})
    unclean_leader_election_enable: bool = _prop("unclean.leader.election.enable", default=False,
        kind="boolean",
        doc="Elect an out-of-sync replica when no in-sync one is left (losing what only the "
            "ISR had).", broker={"unclean.leader.election.enable": 1})
    leader_replication_throttled_replicas: tuple = _prop(
        "leader.replication.throttled.replicas", default=(), kind="list",
        doc="Replicas whose replication the leader throttles: `partition:broker` pairs, or "
            "`*` for all.", effect="kafkalite does not throttle replication")
    follower_replication_throttled_replicas: tuple = _prop(
        "follower.replication.throttled.replicas", default=(), kind="list",
        doc="Replicas whose fetching followers throttle: `partition:broker` pairs, or `*`.",
        effect="kafkalite does not throttle replication")
    remote_storage_enable: bool = _prop("remote.storage.enable", default=False, kind="boolean",
        doc="Tier the topic's rolled segments to the broker's remote store (KIP-405); refused "
            "on a broker without `remote.log.storage.system.enable`, as Kafka refuses it.")
    local_retention_ms: int = _prop("local.retention.ms", -2, LONG_MAX, default=-2, kind="long",
        doc="With tiered storage: how long segments stay local once copied (-2: "
            "`retention.ms`).", broker={"log.local.retention.ms": 1})
    local_retention_bytes: int = _prop("local.retention.bytes", -2, LONG_MAX, default=-2,
        kind="long", doc="With tiered storage: local bytes kept once copied (-2: "
                         "`retention.bytes`).", broker={"log.local.retention.bytes": 1})
    remote_log_copy_disable: bool = _prop("remote.log.copy.disable", default=False,
        kind="boolean", doc="With tiered storage: stop copying segments to remote storage.",
        effect="kafkalite's tiered storage copies while remote.storage.enable is true")
    remote_log_delete_on_disable: bool = _prop("remote.log.delete.on.disable", default=False,
        kind="boolean",
        doc="With tiered storage: delete the remote copy when tiering is turned off.",
        effect="kafkalite's tiered storage cannot be turned off on a topic yet")
    # Iceberg topics (Redpanda's redpanda.iceberg.mode and iceberg.target.lag.ms)
    iceberg_mode: str = _prop("iceberg.mode", default=ICEBERG_OFF, kind="string",
        doc="`key_value`: the partition leaders keep the topic's committed records in an "
            "Iceberg table named after the topic (Redpanda's key_value layout: a `redpanda` "
            "struct of partition, offset, timestamp, headers and key, and the value as "
            "binary); `value_schema_id_prefix`: the values, in the schema registry's wire "
            "format, decoded into columns beside `redpanda` (Avro); `value_schema_latest`"
            "[:subject=<subject>]: plain Avro values decoded by the latest schema of "
            "`<topic>-value` (or the subject named); records that do not decode go to the "
            "table `<topic>~dlq`; `off`: no table.")
    iceberg_target_lag_ms: int = _prop("iceberg.target.lag.ms", 1, LONG_MAX, default=60_000,
        kind="long", doc="With `iceberg.mode`: how often the leader commits the records "
                         "below the last stable offset to the table (and at each segment "
                         "roll).")
    iceberg_invalid_record_action: str = _prop(
        "iceberg.invalid.record.action", default=ICEBERG_DLQ_TABLE, kind="string",
        doc="With a decoded `iceberg.mode`: what becomes of a record whose value does not "
            "decode: `dlq_table`, kept in the table `<topic>~dlq`; `drop`, left out of both "
            "tables (it stays in the topic).")
    iceberg_partition_spec: str = _prop(
        "iceberg.partition.spec", default=ICEBERG_DEFAULT_PARTITION_SPEC, kind="string",
        doc="With `iceberg.mode`: the partition spec of the table made for the topic, "
            "Redpanda's syntax: `(term, ...)`, each term a column (`redpanda.partition`, "
            "`redpanda.offset`, `redpanda.timestamp`, `redpanda.key`; `value` in key_value) "
            "or `identity`, `year`, `month`, `day`, `hour`, `void` of one, or `bucket(N, "
            "column)`, `truncate(W, column)`; `()`: unpartitioned. Taken when the table is "
            "created.")

    # Redpanda's names of the Iceberg topic configs, for topics made for
    # Redpanda (alias -> (kafkalite's name, Redpanda's values in kafkalite's
    # spelling)): taken as kafkalite's config, described under the name given
    REDPANDA_ALIASES = {
        "redpanda.iceberg.mode": ("iceberg.mode", {"disabled": ICEBERG_OFF}),
        "redpanda.iceberg.target.lag.ms": ("iceberg.target.lag.ms", {}),
        "redpanda.iceberg.invalid.record.action": ("iceberg.invalid.record.action", {}),
        "redpanda.iceberg.partition.spec": ("iceberg.partition.spec", {}),
    }

    # Accepted and ignored: Kafka 3.x deprecated them, Kafka 4.0 removed them.
    DEPRECATED = {
        "message.format.version": Deprecated(
            "string", "3.0-IV1", "log.message.format.version",
            "The record format version for new batches.",
            "ignored: every batch is RecordBatch v2 (Kafka ignores it since inter-broker "
            "protocol 3.0 and removed it in 4.0, KIP-724)"),
        "message.downconversion.enable": Deprecated(
            "boolean", "true", "log.message.downconversion.enable",
            "Down-convert batches for old consumers.",
            "ignored: kafkalite serves Fetch v4 and later only, which read v2 batches (removed "
            "in Kafka 4.0)"),
        "message.timestamp.difference.max.ms": Deprecated(
            "long", str(LONG_MAX), "log.message.timestamp.difference.max.ms",
            "Largest difference between a record's timestamp and the broker's clock.",
            "ignored: replaced by message.timestamp.before/after.max.ms (KIP-937), removed "
            "in Kafka 4.0"),
    }

    def __post_init__(self):
        # derived views, worked out once: plain attributes, read on every
        # append (a property is a Python call each time)
        object.__setattr__(self, "compact", CLEANUP_COMPACT in self.cleanup_policy)
        object.__setattr__(self, "log_append_time",
                           self.message_timestamp_type == TIMESTAMP_LOG_APPEND_TIME)
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            lo, hi = f.metadata["min"], f.metadata["max"]
            if lo is not None and not (lo <= value <= hi):
                raise InvalidConfigurationError(
                    f"invalid value {value} for {f.metadata['key']}: must be between {lo} and {hi}")
        # KIP-1161: an empty list is no cleanup at all (records kept for ever)
        bad = [p for p in self.cleanup_policy if p not in (CLEANUP_DELETE, CLEANUP_COMPACT)]
        if bad:
            raise InvalidConfigurationError(
                f"invalid value {','.join(self.cleanup_policy)!r} for cleanup.policy: "
                f"expected delete, compact, both, or none (empty)")
        if self.message_timestamp_type not in (TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME):
            raise InvalidConfigurationError(
                f"invalid value {self.message_timestamp_type!r} for message.timestamp.type: "
                f"expected CreateTime or LogAppendTime")
        if self.compression_type not in COMPRESSION_TYPES:
            raise InvalidConfigurationError(
                f"invalid value {self.compression_type!r} for compression.type: expected one of "
                f"{', '.join(COMPRESSION_TYPES)}")
        if self.compression_gzip_level != -1 and not (
                GZIP_LEVELS[0] <= self.compression_gzip_level <= GZIP_LEVELS[1]):
            raise InvalidConfigurationError(
                f"invalid value {self.compression_gzip_level} for compression.gzip.level: "
                f"must be between {GZIP_LEVELS[0]} and {GZIP_LEVELS[1]}, or -1")
        for key, replicas in (("leader.replication.throttled.replicas",
                               self.leader_replication_throttled_replicas),
                              ("follower.replication.throttled.replicas",
                               self.follower_replication_throttled_replicas)):
            if not _THROTTLED.match(",".join(replicas)) or ("*" in replicas and len(replicas) > 1):
                raise InvalidConfigurationError(
                    f"invalid value {','.join(replicas)!r} for {key}: expected * or "
                    f"partition:broker pairs, comma-separated")
        try:
            mode, _ = iceberg_mode_parts(self.iceberg_mode)
            why = "" if mode in ICEBERG_MODES else f"kafkalite supports {', '.join(ICEBERG_MODES)}"
        except ValueError as exc:
            why = str(exc)
        if why:
            raise InvalidConfigurationError(
                f"invalid value {self.iceberg_mode!r} for iceberg.mode: {why}")
        if self.iceberg_invalid_record_action not in ICEBERG_INVALID_RECORD_ACTIONS:
            raise InvalidConfigurationError(
                f"invalid value {self.iceberg_invalid_record_action!r} for "
                f"iceberg.invalid.record.action: expected "
                f"{' or '.join(ICEBERG_INVALID_RECORD_ACTIONS)}")
        from kafkalite.storage.iceberg.partition_spec import parse_partition_spec
        try:
            parse_partition_spec(self.iceberg_partition_spec,
                                 key_value=mode in (ICEBERG_OFF, ICEBERG_KEY_VALUE))
        except ValueError as exc:
            raise InvalidConfigurationError(
                f"invalid value {self.iceberg_partition_spec!r} for iceberg.partition.spec: "
                f"{exc}") from None
        if self.remote_storage_enable:
            self._check_tiered()

    def _check_tiered(self) -> None:
        """Kafka's LogConfig checks of a tiered topic's values (whether the
        broker has a remote store is the config registry's check)."""
        if self.compact:
            raise InvalidConfigurationError(
                "invalid value true for remote.storage.enable: Remote log storage is "
                "unsupported for the compacted topics")
        for key, local, total, total_key in (
                ("local.retention.bytes", self.local_retention_bytes, self.retention_bytes,
                 "retention.bytes"),
                ("local.retention.ms", self.local_retention_ms, self.retention_ms,
                 "retention.ms")):
            if total > -1 and local != -2:
                if local == -1:
                    raise InvalidConfigurationError(
                        f"invalid value -1 for {key}: Value must not be -1 as {total_key} value "
                        f"is set as {total}.")
                if local > total:
                    raise InvalidConfigurationError(
                        f"invalid value {local} for {key}: Value must not be more than "
                        f"{total_key} property value: {total}")

    # derived views (``compact`` and ``log_append_time`` are set by __post_init__)
    @property
    def delete(self) -> bool:
        return CLEANUP_DELETE in self.cleanup_policy

    @property
    def effective_local_retention_ms(self) -> int:
        """``local.retention.ms``, its -2 resolved to ``retention.ms``."""
        return self.retention_ms if self.local_retention_ms == -2 else self.local_retention_ms

    @property
    def effective_local_retention_bytes(self) -> int:
        return (self.retention_bytes if self.local_retention_bytes == -2
                else self.local_retention_bytes)

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
        """Build from Kafka topic-config properties, on top of ``base``. The
        ``DEPRECATED`` configs are checked and left out."""
        by_key = {f.metadata["key"]: f for f in dataclasses.fields(cls)}
        values = {}
        for key, raw in (props or {}).items():
            alias = cls.REDPANDA_ALIASES.get(key)
            if alias is not None:
                key, spelling = alias
                raw = spelling.get(str(raw).strip(), raw)
                if key in values:
                    raise InvalidConfigurationError(
                        f"{key} is given twice, as {key} and as Redpanda's name for it")
            elif by_key.get(key) is not None and by_key[key].name in values:
                raise InvalidConfigurationError(
                    f"{key} is given twice, as {key} and as Redpanda's name for it")
            f = by_key.get(key)
            if f is not None:
                values[f.name] = _parse(key, f.type, raw)
            elif key in cls.DEPRECATED:
                _check_deprecated(key, cls.DEPRECATED[key].kind, raw)
            else:
                raise InvalidConfigurationError(f"unknown topic config {key!r}")
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


def _check_deprecated(key: str, kind: str, raw) -> None:
    """A deprecated config's value must still be one Kafka 3.x would take."""
    if kind == "string":
        if not kafka_3_version(str(raw)):
            raise InvalidConfigurationError(
                f"invalid value {raw!r} for {key}: expected a Kafka version such as 3.0-IV1, "
                f"2.8 or 0.10.0 (0.8.0 to 3.9)")
        return
    _parse(key, {"boolean": "bool", "long": "int"}[kind], raw)


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
