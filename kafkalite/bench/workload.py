"""Benchmark workloads: YAML files in the OpenMessaging Benchmark (OMB) style,
parsed and checked before anything starts.

Fields (OMB's names; every one is checked, unknown names are refused):

    name                     str   what the report calls the workload (required)
    topics                   int   >= 1 (default 1)
    partitionsPerTopic       int   >= 1 (default 1)
    messageSize              int   bytes per message value, >= 8 (the first 8 bytes
                                   carry the message's intended send time) (required)
    payloadFile              str   optional: bytes the values are cut from (relative
                                   to the workload file); default: random bytes
    keyDistributor           NO_KEY | KEY_ROUND_ROBIN | RANDOM_NANO (default NO_KEY)
    producersPerTopic        int   >= 1 (default 1)
    subscriptionsPerTopic    int   >= 1 (default 1): each subscription gets every message
    consumerPerSubscription  int   >= 1 (default 1): a subscription's partitions are
                                   split among its consumers
    producerRate             number >= 0, messages/s over all producers; 0 = as fast
                                   as the driver accepts (closed loop: the maximum rate)
    testDurationMinutes / testDurationSeconds      > 0 (default 1 minute)
    warmupDurationMinutes / warmupDurationSeconds  >= 0 (default 0)
    consumerBacklogSizeGB    number >= 0 (default 0). Above 0 the workload measures a
                             backlog, as OMB's backlog tests do, in two phases: the
                             producers write this many GB (at producerRate, or as fast
                             as they can with 0) while the consumers wait, then the
                             consumers drain it. The publish rate is the fill's, the
                             consume rate the drain's (both from the first message to
                             the last, acknowledged resp. received); the test
                             duration caps the fill; there is no warm-up and no
                             end-to-end latency (every message waited on purpose).
    drivers                  optional list of driver names this workload runs on

kafkalite's own additions (OMB puts such things in driver files):

    producerConfig           optional mapping of client properties given to the
                             producers of kafkalite's native drivers (kafkalite-zmq,
                             -shm, -tcp, -records), e.g. linger.ms; the Kafka-protocol
                             drivers keep librdkafka's defaults or tuned settings
    consumerConfig           the same for their consumers (e.g. fetch.max.bytes)
    producerPacingMs         number >= 0 (default 0): how often a producer at a fixed
                             rate wakes up to send. 0 = when each message is due (a
                             sleep and a wake-up per message); P > 0 = at most every
                             P ms, sending everything due by then in one go. Each
                             message still carries, and is measured from, its own
                             due time, so up to P ms of waiting is in its latency.
                             For workloads whose paced producers would otherwise
                             take the cores the system under test needs (four or
                             more on 2 cores); it needs producerRate > 0
    kafkaliteWorkers         int >= 1 (default: the server's own default, one per two
                             cores): partition worker processes of the server the
                             kafkalite drivers start (kafkalite-zmq, -shm, -tcp,
                             -records, and -kafka/-kafka-tuned through its Kafka
                             listener). Each worker is a broker of its own: a client
                             writing to partitions on two workers sends each tick's
                             records in two requests, not one, and waits for two
                             answers (launcher.default_worker_count says why the
                             default is what it is)
    targets                  optional mapping: driver name -> {publish_rate,
                             consume_rate (msg/s, at least), e2e_p99_ms (at most)};
                             the report says for each whether it was met. Targets are
                             information: a missed one never fails the run.

A bad file raises WorkloadError (a ValueError) whose message names the file
and the field. Who calls: kafkalite.bench.runner and the ``kafkalite bench``
CLI, in the parent process; a Workload is a plain picklable dataclass that
child processes receive as is.
"""
from __future__ import annotations

import dataclasses
import os

from kafkalite.launcher import default_worker_count

KEY_DISTRIBUTORS = ("NO_KEY", "KEY_ROUND_ROBIN", "RANDOM_NANO")
STAMP_BYTES = 8     # every value starts with its intended send time (time.time_ns, int64 LE)


class WorkloadError(ValueError):
    """A workload file that cannot run; ``field`` names the bad field (or None)."""

    def __init__(self, path: str, field: str | None, problem: str):
        self.path, self.field, self.problem = path, field, problem
        where = f"field '{field}': " if field else ""
        super().__init__(f"workload {path}: {where}{problem}")


@dataclasses.dataclass
class Workload:
    name: str
    path: str
    topics: int = 1
    partitions_per_topic: int = 1
    message_size: int = 1024
    payload: bytes | None = None
    key_distributor: str = "NO_KEY"
    producers_per_topic: int = 1
    subscriptions_per_topic: int = 1
    consumers_per_subscription: int = 1
    producer_rate: float = 0.0
    producer_pacing_ms: float = 0.0
    kafkalite_workers: int | None = None    # None: the server's own default
    test_seconds: float = 60.0
    warmup_seconds: float = 0.0
    backlog_gb: float = 0.0
    drivers: list[str] | None = None
    producer_config: dict = dataclasses.field(default_factory=dict)
    consumer_config: dict = dataclasses.field(default_factory=dict)
    targets: dict = dataclasses.field(default_factory=dict)

    @property
    def producers(self) -> int:
        return self.topics * self.producers_per_topic

    @property
    def consumers(self) -> int:
        return self.topics * self.subscriptions_per_topic * self.consumers_per_subscription

    @property
    def max_rate(self) -> bool:
        return self.producer_rate == 0

    @property
    def backlog(self) -> bool:
        return self.backlog_gb > 0

    def backlog_messages(self, producers: int) -> int:
        """Messages each of ``producers`` writes to build the backlog."""
        return max(1, int(self.backlog_gb * 1e9 / self.message_size / producers))

    @property
    def slug(self) -> str:
        """File-name-safe: the workload file's name without .yaml, else from ``name``."""
        base, ext = os.path.splitext(os.path.basename(self.path))
        out = base if ext in (".yaml", ".yml") else self.name
        out = "".join(c if c.isalnum() else "-" for c in out.lower())
        return "-".join(p for p in out.split("-") if p) or "workload"

    def with_durations(self, test_seconds: float | None = None,
                       warmup_seconds: float | None = None, scale: float | None = None) -> "Workload":
        """A copy with the durations overridden (``--duration``, ``--warmup``)
        or, with the backlog size, multiplied by ``scale``."""
        test, warm, backlog = self.test_seconds, self.warmup_seconds, self.backlog_gb
        if scale is not None:
            test, warm, backlog = test * scale, warm * scale, backlog * scale
        if test_seconds is not None:
            test = test_seconds
        if warmup_seconds is not None:
            warm = warmup_seconds
        return dataclasses.replace(self, test_seconds=test, warmup_seconds=warm,
                                   backlog_gb=backlog)

    def describe(self) -> str:
        rate = "max rate" if self.max_rate else f"{self.producer_rate:,.0f} msg/s"
        if self.producer_pacing_ms:
            rate += f" sent every {self.producer_pacing_ms:g} ms"
        phases = (f"a {self.backlog_gb:g} GB backlog written, then drained" if self.backlog else
                  f"{self.warmup_seconds:g} s warm-up + {self.test_seconds:g} s test")
        return (f"{self.topics} topic(s) x {self.partitions_per_topic} partition(s), "
                f"{self.message_size} B messages, {self.key_distributor}, "
                f"{self.producers} producer(s), {self.consumers} consumer(s), {rate}, {phases}, "
                f"kafkalite's server with {self.workers_started} worker(s)"
                + ("" if self.kafkalite_workers else " (its default)"))

    @property
    def workers_started(self) -> int:
        """The workers the kafkalite drivers' server runs: the workload's,
        or the server's own default on this machine."""
        return self.kafkalite_workers or default_worker_count()


def _int(path, data, field, default, minimum):
    v = data.get(field, default)
    if v is None:
        raise WorkloadError(path, field, "is required")
    if isinstance(v, bool) or not isinstance(v, int):
        raise WorkloadError(path, field, f"must be an integer, not {v!r}")
    if v < minimum:
        raise WorkloadError(path, field, f"must be >= {minimum}, not {v}")
    return v


def _number(path, data, field, minimum, *, strict=False):
    v = data[field]
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise WorkloadError(path, field, f"must be a number, not {v!r}")
    if v < minimum or (strict and v == minimum):
        raise WorkloadError(path, field, f"must be {'>' if strict else '>='} {minimum}, not {v}")
    return float(v)


def _seconds(path, data, stem, default, *, strict):
    """``<stem>Seconds`` or ``<stem>Minutes`` (not both) in seconds."""
    minutes, seconds = f"{stem}Minutes", f"{stem}Seconds"
    if minutes in data and seconds in data:
        raise WorkloadError(path, seconds, f"give {minutes} or {seconds}, not both")
    if seconds in data:
        return _number(path, data, seconds, 0, strict=strict)
    if minutes in data:
        return _number(path, data, minutes, 0, strict=strict) * 60
    return default


FIELDS = ("name", "topics", "partitionsPerTopic", "messageSize", "payloadFile", "keyDistributor",
          "producersPerTopic", "subscriptionsPerTopic", "consumerPerSubscription", "producerRate",
          "testDurationMinutes", "testDurationSeconds", "warmupDurationMinutes",
          "warmupDurationSeconds", "consumerBacklogSizeGB", "drivers", "producerConfig",
          "consumerConfig", "producerPacingMs", "kafkaliteWorkers", "targets")
TARGET_KEYS = ("publish_rate", "consume_rate", "e2e_p99_ms")


def parse(data, path: str = "<workload>", known_drivers=None) -> Workload:
    """A Workload from the mapping of a YAML file; WorkloadError naming the bad field."""
    if not isinstance(data, dict):
        raise WorkloadError(path, None, "must be a YAML mapping of OMB workload fields")
    for key in data:
        if key not in FIELDS:
            raise WorkloadError(path, str(key), f"unknown field (known: {', '.join(FIELDS)})")
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise WorkloadError(path, "name", "is required (a non-empty string)")
    w = Workload(name=name.strip(), path=path)
    w.topics = _int(path, data, "topics", 1, 1)
    w.partitions_per_topic = _int(path, data, "partitionsPerTopic", 1, 1)
    w.message_size = _int(path, data, "messageSize", None, STAMP_BYTES)
    if "payloadFile" in data:
        pf = data["payloadFile"]
        if not isinstance(pf, str):
            raise WorkloadError(path, "payloadFile", f"must be a file name, not {pf!r}")
        full = os.path.join(os.path.dirname(os.path.abspath(path)), pf)
        try:
            with open(full, "rb") as f:
                w.payload = f.read()
        except OSError as exc:
            raise WorkloadError(path, "payloadFile", f"cannot read {full}: {exc.strerror}") from None
        if not w.payload:
            raise WorkloadError(path, "payloadFile", f"{full} is empty")
    kd = data.get("keyDistributor", "NO_KEY")
    if kd not in KEY_DISTRIBUTORS:
        raise WorkloadError(path, "keyDistributor",
                            f"must be one of {', '.join(KEY_DISTRIBUTORS)}, not {kd!r}")
    w.key_distributor = kd
    w.producers_per_topic = _int(path, data, "producersPerTopic", 1, 1)
    w.subscriptions_per_topic = _int(path, data, "subscriptionsPerTopic", 1, 1)
    w.consumers_per_subscription = _int(path, data, "consumerPerSubscription", 1, 1)
    if "producerRate" not in data:
        raise WorkloadError(path, "producerRate", "is required (messages/s; 0: the maximum rate)")
    w.producer_rate = _number(path, data, "producerRate", 0)
    if "producerPacingMs" in data:
        w.producer_pacing_ms = _number(path, data, "producerPacingMs", 0)
        if w.producer_pacing_ms and w.max_rate:
            raise WorkloadError(path, "producerPacingMs", "paces a fixed rate: needs "
                                                          "producerRate > 0 (0 is a closed loop)")
    w.kafkalite_workers = (_int(path, data, "kafkaliteWorkers", 1, 1)
                           if "kafkaliteWorkers" in data else None)
    w.test_seconds = _seconds(path, data, "testDuration", 60.0, strict=True)
    w.warmup_seconds = _seconds(path, data, "warmupDuration", 0.0, strict=False)
    if "consumerBacklogSizeGB" in data:
        w.backlog_gb = _number(path, data, "consumerBacklogSizeGB", 0)
        if w.backlog and w.warmup_seconds:
            raise WorkloadError(path, "warmupDurationSeconds",
                                "a backlog workload has no warm-up (it measures the whole fill)")
    for field, attr in (("producerConfig", "producer_config"), ("consumerConfig", "consumer_config")):
        if field in data:
            cfg = data[field]
            if not isinstance(cfg, dict) or not all(isinstance(k, str) for k in cfg):
                raise WorkloadError(path, field, f"must be a mapping of client properties, "
                                                 f"not {cfg!r}")
            setattr(w, attr, dict(cfg))
    if "drivers" in data:
        drivers = data["drivers"]
        if (not isinstance(drivers, list) or not drivers
                or not all(isinstance(d, str) for d in drivers)):
            raise WorkloadError(path, "drivers", f"must be a list of driver names, not {drivers!r}")
        if known_drivers is not None:
            for d in drivers:
                if d not in known_drivers:
                    raise WorkloadError(path, "drivers", f"unknown driver {d!r} "
                                                         f"(known: {', '.join(known_drivers)})")
        w.drivers = list(drivers)
    if "targets" in data:
        w.targets = _targets(path, data["targets"], known_drivers)
    return w


def _targets(path, targets, known_drivers) -> dict:
    if not isinstance(targets, dict):
        raise WorkloadError(path, "targets", f"must map driver names to targets, not {targets!r}")
    out = {}
    for driver, wanted in targets.items():
        if known_drivers is not None and driver not in known_drivers:
            raise WorkloadError(path, "targets", f"unknown driver {driver!r}")
        if not isinstance(wanted, dict) or not wanted:
            raise WorkloadError(path, "targets", f"{driver}: must map {', '.join(TARGET_KEYS)} to "
                                                 f"numbers, not {wanted!r}")
        for key, value in wanted.items():
            if key not in TARGET_KEYS:
                raise WorkloadError(path, "targets", f"{driver}: unknown target {key!r} "
                                                     f"(known: {', '.join(TARGET_KEYS)})")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise WorkloadError(path, "targets", f"{driver}.{key} must be a number > 0, "
                                                     f"not {value!r}")
        out[driver] = {k: float(v) for k, v in wanted.items()}
    return out


def load(path: str, known_drivers=None) -> Workload:
    """Reads and checks one workload file."""
    import yaml
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise WorkloadError(path, None, f"cannot read: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise WorkloadError(path, None, f"not valid YAML{where}: "
                                        f"{getattr(exc, 'problem', None) or exc}") from None
    return parse(data, path, known_drivers)
