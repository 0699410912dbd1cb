"""Options of the ``kafkalite`` Spark source and sink, checked at planning time.

Spark's own Kafka source defines the vocabulary (``subscribe``,
``startingOffsets``, ``failOnDataLoss``...); this module parses the same
options into plain, picklable values and rejects bad or conflicting ones
with a ValueError that names the option, so the error surfaces when the
query is planned (``load()`` / ``save()`` / ``start()``), not in a task.

Client properties pass through with the ``kafkalite.`` prefix stripped, as
Spark passes ``kafka.*`` to its Kafka clients: ``kafkalite.bootstrap.servers``
becomes the consumer's / producer's ``bootstrap.servers``, and
``kafkalite.isolation.level`` (read_uncommitted or read_committed) the
source consumers' isolation level, as ``kafka.isolation.level`` does for
Spark's Kafka source.

The sink's ``exactlyOnce`` (with ``transactionalIdPrefix``) turns on its
transactional mode (sink.py); the options it rules out (an explicit
``kafkalite.transactional.id``, a producer that cannot be idempotent, a
streaming query without the ``topic`` option) are refused here.

Offset JSON is Spark's: ``{"topic": {"0": 23, "1": -2}}`` where -2 means
earliest and -1 latest; timestamp JSON the same shape with epoch
milliseconds. Who calls: source.py and sink.py, on the driver.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from kafkalite.client.config import CONSUMER, CONSUMER_ALIASES, PRODUCER, PRODUCER_ALIASES, resolve
from kafkalite.client.producer import idempotence

CLIENT_PREFIX = "kafkalite."
EARLIEST, LATEST = -2, -1

# Spark's defaults for its Kafka source; how long read() waits for a fetch
# that should return records before calling it lost.
DEFAULT_POLL_TIMEOUT_MS = 120_000
# Big fetches: one Arrow batch per fetch, and Spark's per-batch cost is
# paid per ~100k records rather than per ~10k.
READ_FETCH_BYTES = 16 << 20
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")

# exactlyOnce: transactional ids are "<prefix>-<job or query id>-<Spark
# partition>"; the prefix is bounded so that an id stays far below the
# coordinator's limit on a transactional id (4 KiB).
DEFAULT_TRANSACTIONAL_ID_PREFIX = "kafkalite-spark"
MAX_TRANSACTIONAL_ID_PREFIX = 200
# A task's transaction stays open from its first record until the driver
# commits the whole job, so it must outlive the slowest task: the default is
# the server's largest allowed (transaction.max.timeout.ms, 15 minutes).
EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS = 900_000


class OptionError(ValueError):
    """A source or sink option is missing, malformed or conflicts with another."""

    def __init__(self, option: str, message: str):
        super().__init__(f"kafkalite option {option!r}: {message}")
        self.option = option


@dataclass(frozen=True)
class OffsetSpec:
    """Where a range starts or ends before it is resolved against the log.

    kind: "earliest", "latest", "offsets" (per-partition JSON, -2/-1 allowed),
    "timestamp" (one epoch-ms value for every partition) or "timestamps"
    (per-partition JSON). ``option`` is the option it came from, for errors.
    """
    kind: str
    option: str
    offsets: dict = field(default_factory=dict)     # {(topic, partition): offset or ts}
    timestamp: int | None = None
    no_match: str = "error"                          # startingOffsetsByTimestampStrategy


@dataclass(frozen=True)
class SourceOptions:
    client_config: dict
    strategy: str                 # "subscribe", "subscribePattern" or "assign"
    topics: tuple = ()            # subscribe
    pattern: str | None = None    # subscribePattern (Python re, matched from the start)
    assigned: tuple = ()          # assign: ((topic, partition), ...)
    starting: OffsetSpec | None = None
    ending: OffsetSpec | None = None
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    max_offsets_per_trigger: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = DEFAULT_POLL_TIMEOUT_MS
    value_format: object = None   # registry.ValueFormat: values decoded through a schema registry

    @property
    def read_committed(self) -> bool:
        """Offsets end at the last stable offset and aborted records are dropped."""
        return self.client_config.get("isolation.level") == "read_committed"

    def matches(self, topic: str) -> bool:
        if self.strategy == "subscribe":
            return topic in self.topics
        if self.strategy == "subscribePattern":
            return re.match(self.pattern, topic) is not None
        return any(t == topic for t, _ in self.assigned)


@dataclass(frozen=True)
class SinkOptions:
    client_config: dict
    topic: str | None
    exactly_once: bool = False
    transactional_id_prefix: str = DEFAULT_TRANSACTIONAL_ID_PREFIX


# Spark hands options over lower-cased; errors name them as documented.
OPTION_NAMES = {name.lower(): name for name in (
    "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
    "startingTimestamp", "endingTimestamp", "startingOffsetsByTimestamp",
    "endingOffsetsByTimestamp", "startingOffsetsByTimestampStrategy", "minPartitions",
    "maxRecordsPerPartition", "maxOffsetsPerTrigger", "failOnDataLoss", "includeHeaders",
    "kafkaConsumer.pollTimeoutMs", "topic", "exactlyOnce", "transactionalIdPrefix")}


def _lower(options) -> dict:
    """{lower-case name: (documented name, value)}."""
    out = {}
    for k, v in dict(options).items():
        low = str(k).lower()
        out[low] = (OPTION_NAMES.get(low, str(k)), str(v))
    return out


def client_config(options: dict, schema: dict, aliases: dict, **defaults) -> dict:
    cfg = dict(defaults)
    for low, (name, value) in options.items():
        if low.startswith("kafka.") and not low.startswith(CLIENT_PREFIX):
            raise OptionError(name, "kafkalite takes client properties with the prefix "
                                    f"'{CLIENT_PREFIX}' (for example {CLIENT_PREFIX}"
                                    f"{name[len('kafka.'):]})")
        if low.startswith(CLIENT_PREFIX):
            cfg[name[len(CLIENT_PREFIX):]] = value
    if not cfg.get("bootstrap.servers"):
        raise OptionError(CLIENT_PREFIX + "bootstrap.servers",
                          "is required (the bootstrap endpoint of a kafkalite server)")
    try:
        resolve(cfg, schema, aliases)
    except ValueError as exc:
        raise OptionError(CLIENT_PREFIX + "*", str(exc)) from None
    return cfg


def _int(options: dict, low: str, minimum: int | None = None) -> int | None:
    if low not in options:
        return None
    name, raw = options[low]
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(name, f"expected an integer, got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise OptionError(name, f"must be at least {minimum}, got {value}")
    return value


def _bool(options: dict, low: str, default: bool) -> bool:
    if low not in options:
        return default
    name, raw = options[low]
    if raw.strip().lower() not in ("true", "false"):
        raise OptionError(name, f"expected true or false, got {raw!r}")
    return raw.strip().lower() == "true"


def _json_partitions(name: str, raw: str, what: str) -> dict:
    """Spark's ``{"topic": {"0": n}}`` -> {(topic, 0): n}."""
    try:
        doc = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise OptionError(name, f"is not valid JSON ({exc.msg}); expected "
                                f'{{"topic": {{"0": {what}}}}}') from None
    if not isinstance(doc, dict) or not doc:
        raise OptionError(name, f'expected a JSON object like {{"topic": {{"0": {what}}}}}')
    out = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict):
            raise OptionError(name, f"topic {topic!r} must map partitions to {what}s")
        for p, v in parts.items():
            try:
                partition = int(p)
            except ValueError:
                raise OptionError(name, f"partition {p!r} of topic {topic!r} is not an "
                                        f"integer") from None
            if isinstance(v, bool) or not isinstance(v, int):
                raise OptionError(name, f"{topic}-{p}: expected an integer {what}, got {v!r}")
            out[(topic, partition)] = v
    return out


def _offset_spec(options: dict, prefix: str, batch: bool) -> OffsetSpec | None:
    """``starting`` or ``ending``: timestamps first, then offsets (Spark's precedence)."""
    strategy = options.get(prefix + "offsetsbytimestampstrategy", (None, "error"))[1].lower()
    if strategy not in ("error", "latest"):
        raise OptionError(options[prefix + "offsetsbytimestampstrategy"][0],
                          f"expected error or latest, got {strategy!r}")
    if prefix + "timestamp" in options:
        name = options[prefix + "timestamp"][0]
        ts = _int(options, prefix + "timestamp", minimum=0)
        return OffsetSpec("timestamp", name, timestamp=ts, no_match=strategy)
    if prefix + "offsetsbytimestamp" in options:
        name, raw = options[prefix + "offsetsbytimestamp"]
        spec = _json_partitions(name, raw, "timestamp")
        if any(v < 0 for v in spec.values()):
            raise OptionError(name, "timestamps are epoch milliseconds, not negative")
        return OffsetSpec("timestamps", name, offsets=spec, no_match=strategy)
    if prefix + "offsets" not in options:
        return None
    name, raw = options[prefix + "offsets"]
    word = raw.strip().lower()
    if word in ("earliest", "latest"):
        if batch and prefix == "starting" and word == "latest":
            raise OptionError(name, "'latest' is not allowed for a batch query (it would read "
                                    "nothing); use earliest or per-partition offsets")
        if batch and prefix == "ending" and word == "earliest":
            raise OptionError(name, "'earliest' is not allowed for a batch query; use latest "
                                    "or per-partition offsets")
        return OffsetSpec(word, name)
    spec = _json_partitions(name, raw, "offset")
    for (t, p), off in spec.items():
        if off < EARLIEST:
            raise OptionError(name, f"{t}-{p}: offset {off} is invalid (use -2 for earliest, "
                                    f"-1 for latest, or an offset >= 0)")
        if batch and prefix == "starting" and off == LATEST:
            raise OptionError(name, f"{t}-{p}: -1 (latest) is not allowed as a batch query's "
                                    f"starting offset")
        if batch and prefix == "ending" and off == EARLIEST:
            raise OptionError(name, f"{t}-{p}: -2 (earliest) is not allowed as a batch query's "
                                    f"ending offset")
    return OffsetSpec("offsets", name, offsets=spec)


def parse_source(options, *, streaming: bool | None) -> SourceOptions:
    """Source options; ``streaming`` None checks only what batch and
    streaming queries share (at load(), before Spark says which it is)."""
    opts = _lower(options)
    cfg = client_config(opts, CONSUMER, CONSUMER_ALIASES,
                        **{"max.partition.fetch.bytes": str(READ_FETCH_BYTES),
                           "fetch.max.bytes": str(4 * READ_FETCH_BYTES)})
    isolation = cfg.get("isolation.level", ISOLATION_LEVELS[0]).strip().lower()
    if isolation not in ISOLATION_LEVELS:
        raise OptionError(CLIENT_PREFIX + "isolation.level", "expected read_uncommitted or "
                                                            f"read_committed, got {isolation!r}")
    cfg["isolation.level"] = isolation
    given = [opts[k][0] for k in ("subscribe", "subscribepattern", "assign") if k in opts]
    if len(given) != 1:
        raise OptionError("subscribe", "exactly one of subscribe, subscribePattern and assign "
                                       f"must be given; got {given or 'none'}")
    kw = {}
    if "subscribe" in opts:
        name, raw = opts["subscribe"]
        topics = tuple(t.strip() for t in raw.split(",") if t.strip())
        if not topics:
            raise OptionError(name, "expected a comma-separated list of topics")
        kw = dict(strategy="subscribe", topics=topics)
    elif "subscribepattern" in opts:
        name, raw = opts["subscribepattern"]
        try:
            re.compile(raw)
        except re.error as exc:
            raise OptionError(name, f"is not a valid regular expression: {exc}") from None
        if not raw:
            raise OptionError(name, "must not be empty")
        kw = dict(strategy="subscribePattern", pattern=raw)
    else:
        name, raw = opts["assign"]
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise OptionError(name, f'is not valid JSON ({exc.msg}); expected {{"topic": [0, 1]}}'
                              ) from None
        if (not isinstance(doc, dict) or not doc
                or not all(isinstance(v, list) and v and all(isinstance(p, int) and p >= 0
                                                             for p in v) for v in doc.values())):
            raise OptionError(name, 'expected a JSON object like {"topic": [0, 1]}')
        kw = dict(strategy="assign",
                  assigned=tuple(sorted((t, p) for t, ps in doc.items() for p in set(ps))))
    if streaming:
        for low in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if low in opts:
                raise OptionError(opts[low][0], "is not allowed for a streaming query")
    starting = _offset_spec(opts, "starting", batch=streaming is False) or OffsetSpec(
        "latest" if streaming else "earliest", "startingOffsets")
    ending = None if streaming else (_offset_spec(opts, "ending", batch=streaming is False)
                                     or OffsetSpec("latest", "endingOffsets"))
    for spec in (starting, ending):
        if spec is not None and spec.offsets and kw["strategy"] != "subscribePattern":
            wanted = set(kw["topics"]) if kw["strategy"] == "subscribe" else {
                t for t, _ in kw["assigned"]}
            stray = sorted({t for t, _ in spec.offsets} - wanted)
            if stray:
                raise OptionError(spec.option, f"names topics {stray} that the query does not "
                                               f"read")
    from kafkalite_spark import registry
    try:
        value_format = registry.parse(opts, kw.get("topics", ()))
    except registry.RegistryOptionError as exc:
        raise OptionError("value.format", str(exc)) from None
    return SourceOptions(
        client_config=cfg, starting=starting, ending=ending, value_format=value_format,
        min_partitions=_int(opts, "minpartitions", minimum=1),
        max_records_per_partition=_int(opts, "maxrecordsperpartition", minimum=1),
        max_offsets_per_trigger=_int(opts, "maxoffsetspertrigger", minimum=1),
        fail_on_data_loss=_bool(opts, "failondataloss", True),
        include_headers=_bool(opts, "includeheaders", False),
        poll_timeout_ms=_int(opts, "kafkaconsumer.polltimeoutms", minimum=1)
        or DEFAULT_POLL_TIMEOUT_MS,
        **kw)


def parse_sink(options) -> SinkOptions:
    opts = _lower(options)
    exactly_once = _bool(opts, "exactlyonce", False)
    # A sink must not create topics by writing to them: an unknown topic is
    # an error the user should see (allow.auto.create.topics can override).
    defaults = {"allow.auto.create.topics": "false", "acks": "all"}
    if exactly_once:
        defaults["transaction.timeout.ms"] = str(EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS)
    cfg = client_config(opts, PRODUCER, PRODUCER_ALIASES, **defaults)
    topic = opts.get("topic", (None, None))[1]
    if topic is not None and not topic.strip():
        raise OptionError("topic", "must not be empty")
    for low in ("subscribe", "subscribepattern", "assign"):
        if low in opts:
            raise OptionError(opts[low][0], "is a source option; a sink writes to the 'topic' "
                                            "option or the topic column")
    if "transactional.id" in cfg:
        raise OptionError(CLIENT_PREFIX + "transactional.id",
                          "the sink gives each task its own transactional id; set exactlyOnce="
                          "true (and transactionalIdPrefix to name them) instead")
    prefix = opts.get("transactionalidprefix", (None, None))[1]
    if prefix is not None and not exactly_once:
        raise OptionError("transactionalIdPrefix", "applies only with exactlyOnce=true")
    prefix = DEFAULT_TRANSACTIONAL_ID_PREFIX if prefix is None else prefix.strip()
    if not prefix or len(prefix) > MAX_TRANSACTIONAL_ID_PREFIX:
        raise OptionError("transactionalIdPrefix", f"must be 1 to {MAX_TRANSACTIONAL_ID_PREFIX} "
                                                   f"characters, got {len(prefix)}")
    if exactly_once:
        # the producer's own check, at planning time rather than in every task
        try:
            idempotence(resolve({**cfg, "transactional.id": prefix}, PRODUCER, PRODUCER_ALIASES),
                        cfg)
        except ValueError as exc:
            raise OptionError(CLIENT_PREFIX + "*", f"exactlyOnce: {exc}") from None
    return SinkOptions(client_config=cfg, topic=topic, exactly_once=exactly_once,
                       transactional_id_prefix=prefix)
