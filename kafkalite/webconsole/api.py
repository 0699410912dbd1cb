"""What the console's JSON API does: plain functions over kafkalite's clients.

Each function takes the shared ``AdminClient`` (thread-safe) or the
bootstrap address (a reader makes its own ``Consumer``, which is not) and
plain arguments, and returns something ``json.dumps`` takes. What the
user may see is given, not decided, here: ``topic_visible`` and
``group_visible`` (name -> bool, default everything) leave resources out
of an answer, and ``before_change`` may refuse a change by raising
(authorization.py decides both). Bad input
raises ``BadRequest`` (answered 400), a missing topic or group
``NotFound`` (404); a client's ``KafkaError`` is answered by app.py.

Reading records is bounded three ways: at most ``MAX_RECORDS`` returned,
at most ``MAX_BYTES`` of keys, values and headers returned, and at most
``READ_BUDGET_S`` spent; a search by key also stops after ``MAX_SCAN``
records looked at and says where it stopped, so the next search can go on
from there.

Who may call: app.py, on any thread.
"""
from __future__ import annotations

import base64
import time

from kafkalite import errors
from kafkalite.client import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                              Consumer, NewTopic, TopicPartition)
from kafkalite.client.admin import RESET_SPECS

MAX_RECORDS = 500
DEFAULT_RECORDS = 50
MAX_BYTES = 4 << 20
MAX_SCAN = 50_000
READ_BUDGET_S = 5.0


class BadRequest(ValueError):
    status = 400


class NotFound(ValueError):
    status = 404


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode()


def _int(params: dict, name: str, default=None, lo=None, hi=None):
    raw = params.get(name)
    if raw is None or raw == "":
        if default is None:
            raise BadRequest(f"{name} is required")
        return default
    try:
        value = int(raw)
    except (TypeError, ValueError, OverflowError):      # OverflowError: JSON's 1e400 is inf
        raise BadRequest(f"{name} must be an integer, not {raw!r}") from None
    if (lo is not None and value < lo) or (hi is not None and value > hi):
        raise BadRequest(f"{name} must be between {lo} and {hi}, not {value}")
    return value


def _every(name: str) -> bool:
    return True


def _topic_partitions(admin: AdminClient, topic: str) -> dict:
    """{partition: PartitionMetadata} of an existing topic."""
    md = admin.list_topics(topic, timeout=10).topics.get(topic)
    if md is None or md.error is not None or not md.partitions:
        raise NotFound(f"topic {topic!r} does not exist")
    return md.partitions


# ---- cluster ---------------------------------------------------------------------------------

def cluster(admin: AdminClient, metric_values: dict, topic_visible=_every,
            group_visible=_every) -> dict:
    md = admin.list_topics(timeout=10)
    topics = [t for t in md.topics.values() if t.error is None and topic_visible(t.topic)]
    groups = [g for g in admin.list_consumer_groups(request_timeout=10).result()
              if group_visible(g.group_id)]
    up = metric_values.get("kafkalite_worker_up", {})
    return {"cluster_id": md.cluster_id, "controller_id": md.controller_id,
            "brokers": [{"id": b.id, "host": b.host, "port": b.port,
                         "up": up.get((("broker", str(b.id)),), None)}
                        for b in sorted(md.brokers.values(), key=lambda b: b.id)],
            "topic_count": sum(1 for t in topics if not t.topic.startswith("__")),
            "partition_count": sum(len(t.partitions) for t in topics
                                   if not t.topic.startswith("__")),
            "group_count": len(groups)}


# ---- topics ----------------------------------------------------------------------------------

def list_topics(admin: AdminClient, metric_values: dict, topic_visible=_every) -> list:
    md = admin.list_topics(timeout=10)
    sizes = metric_values.get("kafka_log_log_size", {})
    ends = metric_values.get("kafka_log_log_logendoffset", {})
    starts = metric_values.get("kafka_log_log_logstartoffset", {})
    out = []
    for name, t in sorted(md.topics.items()):
        if t.error is not None or not topic_visible(name):
            continue
        labels = [(("partition", str(p)), ("topic", name)) for p in t.partitions]
        out.append({"name": name, "internal": name.startswith("__"),
                    "partitions": len(t.partitions),
                    "replication_factor": max((len(p.replicas) for p in t.partitions.values()),
                                              default=0),
                    "size": sum(sizes.get(k, 0) for k in labels),
                    "records": sum(ends.get(k, 0) - starts.get(k, 0) for k in labels)})
    return out


def describe_topic(admin: AdminClient, topic: str, metric_values: dict,
                   with_configs: bool = True) -> dict:
    """Without ``with_configs`` (the user may not describe them) ``configs`` is null."""
    parts = _topic_partitions(admin, topic)
    keys = [(topic, p) for p in sorted(parts)]
    starts = admin.list_offsets({k: -2 for k in keys}, request_timeout=10)
    ends = admin.list_offsets({k: -1 for k in keys}, request_timeout=10)
    sizes = metric_values.get("kafka_log_log_size", {})
    configs = None
    if with_configs:
        resource = ConfigResource("topic", topic)
        configs = admin.describe_configs([resource], request_timeout=10)[resource].result()
    return {"name": topic, "internal": topic.startswith("__"),
            "partitions": [{"partition": p, "leader": parts[p].leader,
                            "replicas": list(parts[p].replicas), "isr": list(parts[p].isrs),
                            "start_offset": starts[(topic, p)], "end_offset": ends[(topic, p)],
                            "size": sizes.get((("partition", str(p)), ("topic", topic)))}
                           for p in sorted(parts)],
            "configs": None if configs is None else
            [{"name": c.name, "value": None if c.is_sensitive else c.value,
              "source": c.source.name, "default": c.is_default, "read_only": c.is_read_only}
             for c in sorted(configs.values(), key=lambda c: c.name)]}


def create_topic(admin: AdminClient, body: dict) -> dict:
    name = body.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest("name must be a topic name")        # the controller checks the rest
    partitions = _int(body, "partitions", 1, 1, 10_000)
    replication = _int(body, "replication_factor", -1, -1, 32)
    configs = body.get("configs") or {}
    if not isinstance(configs, dict) or not all(
            isinstance(k, str) and isinstance(v, (str, int, float)) for k, v in configs.items()):
        raise BadRequest("configs must be an object of name: value")
    admin.create_topics([NewTopic(name, partitions, replication, config=configs)],
                        operation_timeout=10)[name].result()
    return {"created": name}


def delete_topic(admin: AdminClient, topic: str) -> dict:
    _topic_partitions(admin, topic)
    admin.delete_topics([topic], operation_timeout=10)[topic].result()
    return {"deleted": topic}


def alter_topic_configs(admin: AdminClient, topic: str, body: dict) -> dict:
    """``{"set": {name: value}, "delete": [name]}``: Kafka's IncrementalAlterConfigs."""
    to_set, to_delete = body.get("set") or {}, body.get("delete") or []
    if not isinstance(to_set, dict) or not isinstance(to_delete, list) or not (
            to_set or to_delete):
        raise BadRequest('give {"set": {name: value}} and/or {"delete": [name]}')
    if not all(isinstance(k, str) and k for k in list(to_set) + to_delete):
        raise BadRequest("config names must be non-empty strings")
    _topic_partitions(admin, topic)
    entries = [ConfigEntry(k, str(v), incremental_operation=AlterConfigOpType.SET)
               for k, v in to_set.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in to_delete]
    resource = ConfigResource("topic", topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource], request_timeout=10)[resource].result()
    return {"altered": topic}


# ---- records ---------------------------------------------------------------------------------

def read_records(admin: AdminClient, bootstrap: str, topic: str, params: dict,
                 client_config: dict | None = None, decoder=None) -> dict:
    """Records of ``topic`` from a start point, bounded (see the module).

    ``partition`` (default: every partition); where to start: ``offset``
    (an offset, per partition), ``timestamp`` (epoch ms: the first record
    at or after it) or neither (the log start); ``key`` or ``key_hex``: only
    records whose key is these bytes (UTF-8, or hex digits; a scan of at
    most MAX_SCAN records);
    ``limit``: at most this many records (MAX_RECORDS). ``decoder``
    (schemas.RecordDecoder): a key or value in Confluent's wire format
    gets ``key_schema`` / ``value_schema`` beside its bytes: the schema
    and the decoded JSON, or why it did not decode."""
    keys, limit, starts, ends, begin = _read_bounds(admin, topic, params)
    want_key = _wanted_key(params)
    todo = {k: begin[k] for k in keys if begin[k] < ends[k]}
    records, returned_bytes, scanned = [], 0, 0
    next_offsets = dict(begin)
    if todo:
        consumer = Consumer({**(client_config or {}), "bootstrap.servers": bootstrap,
                             "client.id": "kafkalite-console",
                             "enable.auto.commit": False, "request.timeout.ms": 10_000,
                             "max.partition.fetch.bytes": 1 << 20, "fetch.max.bytes": 8 << 20,
                             "fetch.max.wait.ms": 100})
        try:
            consumer.assign([TopicPartition(t, p, off) for (t, p), off in todo.items()])
            deadline = time.monotonic() + READ_BUDGET_S
            while todo and len(records) < limit:
                remaining = deadline - time.monotonic()
                if remaining <= 0 or scanned >= MAX_SCAN or returned_bytes >= MAX_BYTES:
                    break
                for m in consumer.consume(min(500, MAX_SCAN - scanned), min(remaining, 1.0)):
                    if m.error() is not None:
                        raise m.error()
                    k = (m.topic(), m.partition())
                    if k not in todo:
                        continue                    # already past its end
                    scanned += 1
                    next_offsets[k] = m.offset() + 1
                    if next_offsets[k] >= ends[k]:
                        del todo[k]
                        consumer.incremental_unassign([TopicPartition(*k)])
                    if want_key is not None and m.key() != want_key:
                        continue
                    record = _record(m)
                    if decoder is not None:
                        for kind, data in (("key", m.key()), ("value", m.value())):
                            decoded = decoder.decode(data, topic, kind)
                            if decoded is not None:
                                record[kind + "_schema"] = decoded
                    records.append(record)
                    returned_bytes += record.pop("_bytes")
                    if len(records) >= limit or returned_bytes >= MAX_BYTES:
                        break
        finally:
            consumer.close()
    # more follow wherever a partition was not read to its end (count, bytes or time bound)
    truncated = bool(todo)
    records.sort(key=lambda r: (r["partition"], r["offset"]))
    return {"topic": topic, "records": records, "scanned": scanned, "truncated": truncated,
            "next": {str(p): next_offsets[(t, p)] for t, p in keys},
            "start": {str(p): starts[(t, p)] for t, p in keys},
            "end": {str(p): ends[(t, p)] for t, p in keys}}


def _read_bounds(admin: AdminClient, topic: str, params: dict) -> tuple:
    """read_records' partitions, limit and offsets: (keys, limit, log starts,
    ends, where each partition's read begins); BadRequest or NotFound for
    bad parameters."""
    parts = _topic_partitions(admin, topic)
    partition = params.get("partition")
    if partition not in (None, ""):
        partition = _int(params, "partition", lo=0)
        if partition not in parts:
            raise NotFound(f"topic {topic!r} has no partition {partition}")
        chosen = [partition]
    else:
        chosen = sorted(parts)
    limit = _int(params, "limit", DEFAULT_RECORDS, 1, MAX_RECORDS)
    if params.get("offset") not in (None, "") and params.get("timestamp") not in (None, ""):
        raise BadRequest("give offset or timestamp, not both")
    keys = [(topic, p) for p in chosen]
    starts = admin.list_offsets({k: -2 for k in keys}, request_timeout=10)
    ends = admin.list_offsets({k: -1 for k in keys}, request_timeout=10)
    if params.get("offset") not in (None, ""):
        offset = _int(params, "offset", lo=0)
        begin = {k: min(max(offset, starts[k]), ends[k]) for k in keys}
    elif params.get("timestamp") not in (None, ""):
        ts = _int(params, "timestamp", lo=0)
        found = admin.list_offsets({k: ts for k in keys}, request_timeout=10)
        begin = {k: found[k] if found[k] >= 0 else ends[k] for k in keys}
    else:
        begin = dict(starts)
    return keys, limit, starts, ends, begin


def _wanted_key(params: dict) -> bytes | None:
    """The key read_records filters on (``key`` as UTF-8 or ``key_hex``), or None."""
    want_key = None
    if params.get("key") not in (None, ""):
        want_key = params["key"].encode()
    elif params.get("key_hex") not in (None, ""):
        try:
            want_key = bytes.fromhex(params["key_hex"])
        except ValueError:
            raise BadRequest(f"key_hex {params['key_hex']!r} is not hex") from None
    return want_key


def _record(m) -> dict:
    headers = [[h, _b64(v)] for h, v in (m.headers() or [])]
    ts_type, ts = m.timestamp()
    size = len(m.key() or b"") + len(m.value() or b"") + sum(
        len(h) + len(v or b"") for h, v in (m.headers() or []))
    return {"partition": m.partition(), "offset": m.offset(), "timestamp": ts,
            "timestamp_type": ts_type, "key": _b64(m.key()), "value": _b64(m.value()),
            "headers": headers, "_bytes": size}


# ---- consumer groups -------------------------------------------------------------------------

def list_groups(admin: AdminClient, metric_values: dict, group_visible=_every,
                topic_visible=_every) -> list:
    """Lag is summed over the partitions of the topics visible."""
    lag = metric_values.get("kafka_consumergroup_lag", {})
    totals: dict = {}
    for labels, value in lag.items():
        labels = dict(labels)
        if topic_visible(labels["topic"]):
            group = labels["consumergroup"]
            totals[group] = totals.get(group, 0) + value
    groups = [g for g in admin.list_consumer_groups(request_timeout=10).result()
              if group_visible(g.group_id)]
    described = admin.describe_consumer_groups([g.group_id for g in groups],
                                               request_timeout=10) if groups else {}
    out = []
    for g in groups:
        try:
            members = len(described[g.group_id].result().members)
        except (errors.KafkaError, KeyError):
            members = None
        out.append({"group_id": g.group_id, "state": g.state, "members": members,
                    "lag": totals.get(g.group_id)})
    return out


def describe_group(admin: AdminClient, group: str, topic_visible=_every) -> dict:
    """Offsets and lag of the topics visible (Kafka's OffsetFetch of all a
    group's topics leaves out the others); members' assignments in full."""
    try:
        desc = admin.describe_consumer_groups([group], request_timeout=10)[group].result()
    except errors.GroupIdNotFoundError:
        raise NotFound(f"consumer group {group!r} does not exist") from None
    offsets = admin.describe_group_offsets(group)
    return {"group_id": group, "state": desc.state, "protocol": desc.partition_assignor,
            "members": [{"member_id": m.member_id, "client_id": m.client_id, "host": m.host,
                         "group_instance_id": m.group_instance_id,
                         "assignment": [[tp.topic, tp.partition] for tp in m.assignment]}
                        for m in desc.members],
            "offsets": [{"topic": o.topic, "partition": o.partition, "committed": o.committed,
                         "end_offset": o.log_end, "lag": o.lag, "member_id": o.member_id,
                         "client_id": o.client_id}
                        for o in offsets if topic_visible(o.topic)]}


# from-file is the command line's (a file of offsets), not the console's
CONSOLE_RESET_SPECS = tuple(s for s in RESET_SPECS if s != "from-file")


def reset_group_offsets(admin: AdminClient, group: str, body: dict, topic_visible=_every,
                        before_change=None) -> dict:
    """``{"spec": one of CONSOLE_RESET_SPECS, "value": offset / shift / epoch
    ms / ms before now, "topics": [...] (default: those with committed
    offsets that are visible), "dry_run": bool}``; refused (409) while the
    group has members, as Kafka's tool does. ``before_change(topics)`` is
    called with the topics to reset before anything is read or changed."""
    spec = body.get("spec")
    if spec not in CONSOLE_RESET_SPECS:
        raise BadRequest(f"spec must be one of {', '.join(CONSOLE_RESET_SPECS)}")
    value = body.get("value")
    if spec in ("to-offset", "shift-by", "to-datetime", "by-duration"):
        value = _int(body, "value", lo=None if spec == "shift-by" else 0)
    topics = body.get("topics") or []
    if not isinstance(topics, list) or not all(isinstance(t, str) and t for t in topics):
        raise BadRequest("topics must be a list of topic names")
    if not topics:
        committed = admin.list_consumer_group_offsets(group, request_timeout=10).result()
        topics = sorted({tp.topic for tp in committed if topic_visible(tp.topic)})
        if not topics:
            raise BadRequest(f"group {group!r} has no committed offsets: name the topic(s) "
                             f"to reset")
    if before_change is not None:
        before_change(topics)
    try:
        plan = admin.plan_offset_reset(group, topics, spec, value)
    except errors.UnknownTopicOrPartitionError as exc:
        raise NotFound(str(exc)) from None
    except ValueError as exc:
        raise BadRequest(str(exc)) from None
    if not body.get("dry_run"):
        admin.alter_consumer_group_offsets(group, plan, request_timeout=10).result()
    return {"group_id": group, "dry_run": bool(body.get("dry_run")),
            "offsets": [{"topic": tp.topic, "partition": tp.partition, "offset": tp.offset}
                        for tp in plan]}
