"""The client-side CLI commands: topics, produce, consume, groups, transactions,
delete-records.

Like Kafka's kafka-topics, kafka-console-producer,
kafka-console-consumer, kafka-consumer-groups, kafka-transactions and
kafka-delete-records, against a running ``kafkalite server``. The
server is found with ``--bootstrap-server`` or, by default, from
``./kafkalite-data/server.json`` (written by a server started here) or
127.0.0.1:7092. A server that does not answer or a bad argument gives one
line on stderr and a non-zero exit (cli.py turns exceptions into that).
"""
from __future__ import annotations

import json
import os
import sys
import time

from kafkalite import errors
from kafkalite.server.config import DEFAULT_PORT

DEFAULT_DATA_DIR = "./kafkalite-data"


def default_bootstrap() -> str:
    try:
        with open(os.path.join(DEFAULT_DATA_DIR, "server.json")) as f:
            return json.load(f)["bootstrap.servers"]
    except (OSError, ValueError, KeyError):
        return f"127.0.0.1:{DEFAULT_PORT}"


def _read_properties(path: str) -> dict:
    """A Java properties file (Kafka's --command-config, --consumer.config)."""
    import javaproperties
    try:
        with open(path, encoding="utf-8") as f:
            return javaproperties.load(f)
    except ValueError as exc:
        raise ValueError(f"{path} is not a Java properties file: {exc}") from None


def client_config(args, **defaults) -> dict:
    """The client's properties: the command's own ``defaults``, then
    ``--command-config FILE``, then ``-X name=value`` (later ones win, as in
    kcat); an explicit ``--bootstrap-server`` wins over them all. Unknown
    names are refused by the client (config.py), naming the property."""
    cfg = {"bootstrap.servers": default_bootstrap(),
           "request.timeout.ms": int(args.timeout * 1000), **defaults}
    if getattr(args, "command_config", None):
        cfg.update(_read_properties(args.command_config))
    cfg.update(_parse_kv(getattr(args, "property_x", None), "-X"))
    if args.bootstrap_server:
        cfg["bootstrap.servers"] = args.bootstrap_server
    if "curve.server.key" not in cfg:
        # the server's owner, on a server with security on: its key pair
        from kafkalite.client.config import owner_config
        data_dir = getattr(args, "data_dir", None) or DEFAULT_DATA_DIR
        cfg.update(owner_config(_server_json(data_dir, cfg["bootstrap.servers"])))
    return cfg


def _parse_kv(items, what: str) -> dict:
    out = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"{what} {item!r} is not name=value")
        out[key] = value
    return out



def _alter_topic_configs(admin, topic: str, set_configs: dict, delete_keys) -> None:
    """One IncrementalAlterConfigs of a topic: SET each of ``set_configs``, DELETE
    (back to the default) each of ``delete_keys``; the first error is raised."""
    from kafkalite.client import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
    entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
               for k, v in set_configs.items()]
    entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                for k in delete_keys]
    _raise_first(admin.incremental_alter_configs(
        [ConfigResource(ResourceType.TOPIC, topic, incremental_configs=entries)]))

def _raise_first(futures: dict) -> None:
    for f in futures.values():
        f.result()


def _topic_partitions(admin, args, only=None) -> list:
    """[TopicPartition] of ``args.topic``: ``only`` those numbers, or all of its
    partitions (raising the topic's error if it has one)."""
    from kafkalite.client import TopicPartition
    md = admin.list_topics(args.topic, timeout=args.timeout)
    if md.topics[args.topic].error is not None:
        raise md.topics[args.topic].error
    return [TopicPartition(args.topic, i) for i in (only or sorted(md.topics[args.topic].partitions))]


def topics(args) -> int:
    from kafkalite.client import AdminClient, NewPartitions, NewTopic
    admin = AdminClient(client_config(args))
    try:
        if args.action == "create":
            try:
                _raise_first(admin.create_topics([NewTopic(
                    args.topic, args.partitions, args.replication_factor,
                    config=_parse_kv(args.config, "--config"))], operation_timeout=args.timeout))
            except errors.TopicAlreadyExistsError:
                if not args.if_not_exists:
                    raise
            else:
                print(f"Created topic {args.topic}.")
        elif args.action == "delete":
            try:
                _raise_first(admin.delete_topics([args.topic], operation_timeout=args.timeout))
            except errors.UnknownTopicOrPartitionError:
                if not args.if_exists:
                    raise
            else:
                print(f"Deleted topic {args.topic}.")
        elif args.action == "list":
            md = admin.list_topics(timeout=args.timeout)
            if args.output == "json":
                _print_json([{"topic": name, "partitions": len(md.topics[name].partitions)}
                             for name in sorted(md.topics)])
            for name in sorted(md.topics) if args.output != "json" else ():
                print(name)
        elif args.action == "describe":
            _describe_topics(admin, args)
        elif args.action == "reassign":
            from kafkalite.client import TopicPartition
            tp = TopicPartition(args.topic, args.partition)
            replicas = None
            if not args.cancel:
                try:
                    replicas = [int(b) for b in args.replicas.split(",")]
                except ValueError:
                    raise ValueError(f"--replicas {args.replicas!r} is not a comma-separated "
                                     f"list of broker ids") from None
            err = admin.alter_partition_reassignments({tp: replicas}).result()[tp]
            if err is not None:
                raise err
            print(f"{'Cancelled the reassignment of' if args.cancel else 'Reassigning'} "
                  f"{args.topic}-{args.partition}"
                  f"{'' if args.cancel else ' to ' + ','.join(map(str, replicas))}.")
        elif args.action == "reassignments":
            parts = _topic_partitions(admin, args) if args.topic else None
            ongoing = admin.list_partition_reassignments(parts).result()
            for tp, r in sorted(ongoing.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
                print(f"Topic: {tp.topic}\tPartition: {tp.partition}\t"
                      f"Replicas: {','.join(map(str, r['replicas']))}\t"
                      f"Adding: {','.join(map(str, r['adding_replicas']))}\t"
                      f"Removing: {','.join(map(str, r['removing_replicas']))}")
        elif args.action == "elect-leaders":
            parts = _topic_partitions(admin, args, args.partition) if args.topic else None
            if not args.topic and args.partition:
                raise ValueError("--partition needs a topic")
            results = admin.elect_leaders(0 if args.election_type == "preferred" else 1,
                                          parts).result()
            failed = 0
            for tp, err in sorted(results.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
                if err is None:
                    print(f"Elected a leader for {tp.topic}-{tp.partition}.")
                elif err.code != errors.ElectionNotNeededError.code or args.topic:
                    print(f"{tp.topic}-{tp.partition}: {err}")
                    failed += err.code != errors.ElectionNotNeededError.code
            return 1 if failed else 0
        elif args.action == "alter":
            if args.partitions is None and not args.config and not args.delete_config:
                raise ValueError("topics alter needs --partitions, --config or --delete-config")
            if args.partitions is not None:
                _raise_first(admin.create_partitions([NewPartitions(args.topic, args.partitions)],
                                                     operation_timeout=args.timeout))
                print(f"Topic {args.topic} now has {args.partitions} partitions.")
            if args.config or args.delete_config:
                _alter_topic_configs(admin, args.topic, _parse_kv(args.config, "--config"),
                                     args.delete_config or [])
                print(f"Updated the configs of topic {args.topic}.")
    finally:
        admin.close()
    return 0


def _print_json(rows) -> None:
    """``--output json``: one JSON document per line (a record, a topic, a
    group...), as rpk and jq pipelines take them."""
    for row in rows:
        sys.stdout.write(json.dumps(row, separators=(",", ":")) + "\n")


def _describe_topics(admin, args) -> None:
    """kafka-topics --describe, with each partition's log start offset, high
    watermark, the records between them and the leader replica's size on
    disk (ListOffsets and DescribeLogDirs)."""
    from kafkalite.client import ConfigResource, ResourceType
    md = admin.list_topics(args.topic, timeout=args.timeout)
    names = [args.topic] if args.topic else sorted(md.topics)
    for name in names:
        if md.topics[name].error is not None:
            raise md.topics[name].error
    led = [(name, p.id) for name in names for p in md.topics[name].partitions.values()
           if p.leader >= 0]
    starts = admin.list_offsets({k: -2 for k in led}) if led else {}
    ends = admin.list_offsets({k: -1 for k in led}) if led else {}
    leaders = {k: md.topics[k[0]].partitions[k[1]].leader for k in led}
    sizes = {}
    for broker, hosted in admin.describe_log_dirs(sorted(set(leaders.values()))).items():
        for tp, size in hosted.items():
            if leaders.get((tp.topic, tp.partition)) == broker:
                sizes[(tp.topic, tp.partition)] = size
    for name in names:
        t = md.topics[name]
        parts = [t.partitions[pid] for pid in sorted(t.partitions)]
        if args.under_replicated_partitions:
            parts = [p for p in parts if len(p.isrs) < len(p.replicas)]
        if args.unavailable_partitions:
            parts = [p for p in parts if p.leader < 0]
        rows = []
        for p in parts:
            k = (name, p.id)
            start, end = starts.get(k), ends.get(k)
            rows.append({"topic": name, "partition": p.id,
                         "leader": p.leader if p.leader >= 0 else None,
                         "replicas": list(p.replicas), "isr": list(p.isrs),
                         "offline": list(p.offline_replicas),
                         "start_offset": start, "end_offset": end,
                         "records": end - start if start is not None and end is not None
                         else None, "size_bytes": sizes.get(k)})
        only = args.under_replicated_partitions or args.unavailable_partitions
        overrides = {}
        if not only:
            configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)])
            overrides = {k: e.value for k, e in next(iter(configs.values())).result().items()
                         if e.source == 1}
        if args.output == "json":
            _print_json([{"topic": name, "partition_count": len(t.partitions),
                          "replication_factor": max((len(p.replicas) for p in
                                                     t.partitions.values()), default=0),
                          "configs": overrides, "partitions": rows}])
            continue
        if not only:
            factor = max((len(p.replicas) for p in t.partitions.values()), default=0)
            print(f"Topic: {name}\tPartitionCount: {len(t.partitions)}\t"
                  f"ReplicationFactor: {factor}\tConfigs: "
                  f"{','.join(f'{k}={v}' for k, v in sorted(overrides.items()))}")
        for r in rows:
            dash = lambda v: "-" if v is None else v  # noqa: E731
            offline = f"\tOffline: {','.join(map(str, r['offline']))}" if r["offline"] else ""
            print(f"\tTopic: {name}\tPartition: {r['partition']}\tLeader: "
                  f"{dash(r['leader']) if r['leader'] is not None else 'none'}\t"
                  f"Replicas: {','.join(map(str, r['replicas']))}\t"
                  f"Isr: {','.join(map(str, r['isr']))}{offline}\t"
                  f"StartOffset: {dash(r['start_offset'])}\tEndOffset: {dash(r['end_offset'])}\t"
                  f"Records: {dash(r['records'])}\tSize: {dash(r['size_bytes'])}")


# kafka-console-producer's --property names (LineMessageReader)
_PRODUCER_PROPERTIES = ("parse.key", "key.separator")
# kafka-console-consumer's --property names (DefaultMessageFormatter)
_CONSUMER_PROPERTIES = ("print.timestamp", "print.key", "print.offset", "print.partition",
                        "print.headers", "print.value", "key.separator", "line.separator",
                        "headers.separator", "null.literal")


def _properties(args, known) -> dict:
    props = _parse_kv(args.property, "--property")
    unknown = sorted(set(props) - set(known))
    if unknown:
        raise ValueError(f"unknown --property {unknown[0]!r}: use {', '.join(known)}")
    return props


def _true(value: str) -> bool:
    return value.strip().lower() == "true"


def produce(args) -> int:
    """Lines of stdin -> records. Every record is accounted for: on an error
    (a refused record, a line without its key separator) the records
    written before it are flushed and counted in the one-line error."""
    from kafkalite.client import Producer
    props = _properties(args, _PRODUCER_PROPERTIES)
    key_separator = args.key_separator
    if _true(props.get("parse.key", "false")):
        key_separator = props.get("key.separator", "\t")
    failures: list = []         # (line number, error)
    written = [0]

    def delivered(line_no, err, msg):
        if err is None:
            written[0] += 1
        else:
            failures.append((line_no, err))

    headers = list(_parse_kv(args.header, "--header").items()) or None
    producer = Producer(client_config(args, **{
        "acks": args.acks, "compression.type": args.compression, "linger.ms": args.linger_ms}))
    sent, read, stopped = 0, 0, None
    try:
        try:
            for line in sys.stdin.buffer:
                # counted as read before it can fail: a line the producer
                # refused (no server) is one of the records not written
                read += 1
                line = line.rstrip(b"\r\n")
                key = None
                if key_separator is not None:
                    sep = key_separator.encode()
                    if sep not in line:
                        raise ValueError(f"line {sent + 1} has no key separator "
                                         f"{key_separator!r}")
                    key, line = line.split(sep, 1)
                line_no = sent + 1
                while True:
                    try:
                        producer.produce(args.topic, line, key, partition=args.partition,
                                         headers=headers,
                                         on_delivery=lambda err, msg, n=line_no:
                                         delivered(n, err, msg))
                        break
                    except BufferError:
                        producer.poll(0.1)
                    except errors.MessageTooLargeError as exc:
                        # refused by produce() itself (over max.request.size):
                        # one failed record, as a refusal by the broker is
                        failures.append((line_no, exc))
                        break
                sent += 1
                producer.poll(0)
        except (ValueError, errors.KafkaError) as exc:
            stopped = exc
        left = producer.flush(args.timeout)
    finally:
        producer.close(0)
    if failures or left or stopped:
        done = f"wrote {written[0]} of {read} record(s) to topic {args.topic!r}"
        if failures:
            line_no, first = min(failures, key=lambda f: f[0])
            raise type(first)(f"{done}; {len(failures)} failed, the first (line {line_no}): "
                              f"{getattr(first, 'message', first)}")
        if stopped is not None:
            raise type(stopped)(f"{done}, then stopped: "
                                f"{getattr(stopped, 'message', stopped)}")
        raise TimeoutError(f"{done}; {left} not delivered within {args.timeout:g} s")
    print(f"Produced {sent} messages to {args.topic}.", file=sys.stderr)
    return 0


_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", "0": b"\0"}


def _text(b):
    return None if b is None else b.decode("utf-8", "surrogateescape")


def _headers_csv(m) -> bytes:
    return b",".join(k.encode() + b"=" + (v if v is not None else b"")
                     for k, v in (m.headers() or []))


# kcat's -f tokens: what each prints of a message
_TOKENS = {
    "s": lambda m: m.value() if m.value() is not None else b"",
    "S": lambda m: b"%d" % (len(m.value()) if m.value() is not None else -1),
    "k": lambda m: m.key() if m.key() is not None else b"",
    "K": lambda m: b"%d" % (len(m.key()) if m.key() is not None else -1),
    "t": lambda m: m.topic().encode(),
    "p": lambda m: b"%d" % m.partition(),
    "o": lambda m: b"%d" % m.offset(),
    "T": lambda m: b"%d" % m.timestamp()[1],
    "h": _headers_csv,
}


def _kcat_format(fmt: str):
    """kcat's -f: %s value, %S its size, %k key, %K its size, %t topic,
    %p partition, %o offset, %T timestamp (ms), %h headers (k=v,...), %%;
    \\n \\t \\r \\\\ escapes. Like kcat, no newline is added."""
    parts, literal, i = [], bytearray(), 0
    while i < len(fmt):
        c = fmt[i]
        if c in "%\\" and i + 1 < len(fmt):
            nxt = fmt[i + 1]
            i += 2
            if c == "%" and nxt == "%":
                literal += b"%"
            elif c == "%" and nxt in _TOKENS:
                parts.append(bytes(literal))
                literal = bytearray()
                parts.append(_TOKENS[nxt])
            elif c == "\\" and nxt in _ESCAPES:
                literal += _ESCAPES[nxt]
            else:
                raise ValueError(f"-f: unknown {c}{nxt} (use %s %S %k %K %t %p %o %T %h %% "
                                 f"and \\n \\t \\r \\\\)")
            continue
        literal += c.encode()
        i += 1
    parts.append(bytes(literal))
    return lambda m: b"".join(p if isinstance(p, bytes) else p(m) for p in parts)


def _json_format(m) -> bytes:
    def text(name, b, out):
        if b is None:
            out[name] = None
            return
        try:
            out[name] = b.decode("utf-8")
        except UnicodeDecodeError:          # bytes that are not text: base64, and said so
            import base64
            out[name] = base64.b64encode(b).decode()
            out[name + "_encoding"] = "base64"
    doc = {"topic": m.topic(), "partition": m.partition(), "offset": m.offset(),
           "timestamp": m.timestamp()[1]}
    text("key", m.key(), doc)
    text("value", m.value(), doc)
    doc["headers"] = []
    for k, v in m.headers() or []:
        h = {"key": k}
        text("value", v, h)
        doc["headers"].append(h)
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def _console_format(args):
    """kafka-console-consumer's DefaultMessageFormatter: timestamp,
    partition, offset, headers, key, value, each as chosen by --print-* or
    --property print.*=true, separated by key.separator."""
    props = _properties(args, _CONSUMER_PROPERTIES)
    show = {name: getattr(args, "print_" + name) or _true(props.get("print." + name, "false"))
            for name in ("timestamp", "partition", "offset", "headers", "key")}
    show_value = _true(props.get("print.value", "true"))
    sep = props.get("key.separator", "\t").encode()
    end = props.get("line.separator", "\n").encode()
    hsep = props.get("headers.separator", ",").encode()
    null = props.get("null.literal", "null").encode()

    def fmt(m) -> bytes:
        fields = []
        if show["timestamp"]:
            fields.append(b"CreateTime:%d" % m.timestamp()[1])
        if show["partition"]:
            fields.append(b"Partition:%d" % m.partition())
        if show["offset"]:
            fields.append(b"Offset:%d" % m.offset())
        if show["headers"]:
            fields.append(hsep.join(k.encode() + b":" + (v if v is not None else null)
                                    for k, v in (m.headers() or [])) or b"NO_HEADERS")
        if show["key"]:
            fields.append(m.key() if m.key() is not None else null)
        if show_value:
            fields.append(m.value() if m.value() is not None else null)
        return sep.join(fields) + end
    return fmt


def _start_offsets(consumer, args, parts) -> list:
    """-o/--offset -> [TopicPartition] to assign: none (auto.offset.reset
    decides), earliest|beginning,
    latest|end, N (absolute, one partition), -N (N before the end of each
    partition, kcat's), @MS or s@MS (the first record at or after that
    timestamp)."""
    from kafkalite.client import OFFSET_BEGINNING, OFFSET_END, TopicPartition
    if args.offset is None:     # where auto.offset.reset says (--from-beginning: earliest)
        return [TopicPartition(args.topic, p) for p in parts]
    spec = args.offset.strip().lower()
    tps = [TopicPartition(args.topic, p) for p in parts]
    if spec in ("earliest", "beginning"):
        return [TopicPartition(args.topic, p, OFFSET_BEGINNING) for p in parts]
    if spec in ("latest", "end"):
        return [TopicPartition(args.topic, p, OFFSET_END) for p in parts]
    if spec.startswith(("@", "s@")):
        try:
            ts = int(spec.split("@", 1)[1])
        except ValueError:
            raise ValueError(f"--offset {args.offset!r}: a timestamp is @MS, milliseconds since "
                             f"the epoch") from None
        return consumer.offsets_for_times([TopicPartition(args.topic, p, ts) for p in parts])
    try:
        n = int(spec)
    except ValueError:
        raise ValueError(f"--offset {args.offset!r} is not earliest, latest, N, -N or @MS") \
            from None
    if n >= 0:
        return [TopicPartition(args.topic, p, n) for p in parts]
    out = []
    for tp in tps:
        low, high = consumer.get_watermark_offsets(tp)
        out.append(TopicPartition(args.topic, tp.partition, max(low, high + n)))
    return out


class _Stop:
    """SIGINT/SIGTERM ask the consume loop to stop, so the consumer is
    closed (commits, leaves its group) before the exit; a second signal
    interrupts at once."""

    def __init__(self):
        import signal
        self.requested = False
        self._signal = signal
        self._old = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def _handle(self, signum, frame):
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def restore(self):
        for s, old in self._old.items():
            self._signal.signal(s, old)


def consume(args) -> int:
    from kafkalite.client import Consumer
    if args.group and (args.partition is not None or args.offset is not None):
        raise ValueError("--group shares the topic's partitions among the group's members: it "
                         "cannot be combined with --partition or --offset (use "
                         "--from-beginning, or groups reset-offsets)")
    if args.offset is not None and args.offset.strip().isdigit() and args.partition is None:
        raise ValueError("--offset needs --partition (an offset belongs to one partition); "
                         "-N, earliest, latest and @MS apply to every partition")
    json_out = args.output == "json"
    if (args.format is not None) + json_out + bool(args.property) > 1:
        raise ValueError("choose one of -f FORMAT, --output json, --property print.*")
    if args.format is not None:
        fmt = _kcat_format(args.format)
    elif json_out:
        fmt = _json_format
    else:
        fmt = _console_format(args)
    cfg = client_config(args, **{
        "auto.offset.reset": "latest",
        # Kafka's default: joins groups whose members chose either eager
        # range or cooperative-sticky
        **({"group.id": args.group, "partition.assignment.strategy": "range,cooperative-sticky"}
           if args.group else {})})
    if args.from_beginning:
        cfg["auto.offset.reset"] = "earliest"
    consumer = Consumer(cfg)
    seen = 0
    stop = _Stop()
    try:
        md = consumer.list_topics(args.topic, timeout=args.timeout)
        t = md.topics.get(args.topic)
        if t is None or t.error is not None:
            raise t.error if t is not None and t.error else errors.UnknownTopicOrPartitionError(
                f"topic {args.topic!r} does not exist")
        if args.partition is not None and args.partition not in t.partitions:
            raise errors.UnknownTopicOrPartitionError(
                f"topic {args.topic!r} has no partition {args.partition}")
        if args.group:
            # resumes from the group's committed offsets; commits as it goes and at exit
            consumer.subscribe([args.topic])
        else:
            parts = [args.partition] if args.partition is not None else sorted(t.partitions)
            consumer.assign(_start_offsets(consumer, args, parts))
        ends: dict = {}            # -e: each partition's high watermark when first assigned
        idle_deadline = time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms else None
        out = sys.stdout.buffer
        while not stop.requested and (args.max_messages is None or seen < args.max_messages):
            want = 500 if args.max_messages is None else min(500, args.max_messages - seen)
            msgs = consumer.consume(want, 0.2)
            if not msgs:
                if idle_deadline is not None and time.monotonic() >= idle_deadline:
                    break
                if args.exit_at_end and _at_end(consumer, ends):
                    break
                continue
            if idle_deadline is not None:
                idle_deadline = time.monotonic() + args.timeout_ms / 1000
            out.write(b"".join(fmt(m) for m in msgs))
            out.flush()
            seen += len(msgs)
            if args.exit_at_end and _at_end(consumer, ends):
                break
    except KeyboardInterrupt:
        pass
    finally:
        try:
            consumer.close()
        finally:
            stop.restore()
    print(f"Processed a total of {seen} messages", file=sys.stderr)
    return 0


def _at_end(consumer, ends: dict) -> bool:
    """-e: has every assigned partition been read up to the high watermark
    it had when it was first assigned? (False while nothing is assigned.)"""
    assigned = consumer.assignment()
    if not assigned:
        return False
    for tp in assigned:
        key = (tp.topic, tp.partition)
        if key not in ends:
            ends[key] = consumer.get_watermark_offsets(tp)[1]
    for tp in consumer.position(assigned):
        if ends[(tp.topic, tp.partition)] > 0 and tp.offset < ends[(tp.topic, tp.partition)]:
            return False
    return True


def _parse_datetime(text: str) -> int:
    """Epoch ms from an ISO 8601 date-time (kafka-consumer-groups' --to-datetime);
    without a zone it is UTC."""
    from datetime import datetime, timezone
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--to-datetime {text!r} is not an ISO 8601 date-time such as "
                         f"2026-11-22T10:00:00 or 2026-11-22T10:00:00+01:00") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return int(dt.timestamp() * 1000)


def print_table(rows: list[list], header: list[str]) -> None:
    cells = [header] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def _read_offsets_csv(path: str) -> dict:
    """kafka-consumer-groups' --from-file (and what --export prints): lines
    of topic,partition,offset (a first line may also name the group:
    group,topic,partition,offset)."""
    import csv
    out = {}
    with open(path, newline="") as f:
        for n, row in enumerate(csv.reader(f), 1):
            row = [c.strip() for c in row]
            if not row or not any(row):
                continue
            if len(row) == 4:
                row = row[1:]
            try:
                if len(row) != 3:
                    raise ValueError
                out[(row[0], int(row[1]))] = int(row[2])
            except ValueError:
                raise ValueError(f"{path} line {n}: expected topic,partition,offset, "
                                 f"got {','.join(row)!r}") from None
    if not out:
        raise ValueError(f"{path} has no topic,partition,offset lines")
    return out


def _parse_duration(text: str) -> int:
    """ms in an ISO 8601 duration (kafka-consumer-groups' --by-duration:
    PnDTnHnMn.nS, e.g. PT1H30M, P1D)."""
    import re
    m = re.fullmatch(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?",
                     text.strip().upper())
    if not m or text.strip().upper() in ("P", "PT") or text.strip().upper().endswith("T"):
        raise ValueError(f"--by-duration {text!r} is not an ISO 8601 duration such as PT1H, "
                         f"PT30M, P1DT2H")
    d, h, mi, sec = m.groups()
    return int(((int(d or 0) * 24 + int(h or 0)) * 60 + int(mi or 0)) * 60_000
               + float(sec or 0) * 1000)


def _group_ids(admin, args) -> list[str]:
    if args.all_groups:
        if args.group:
            raise ValueError("give a group or --all-groups, not both")
        return sorted(g.group_id for g in admin.list_consumer_groups().result())
    if not args.group:
        raise ValueError("name a group, or give --all-groups")
    return [args.group]


def _describe_group(admin, args, group_id: str) -> None:
    desc = admin.describe_consumer_groups([group_id])[group_id].result()
    coordinator = desc.coordinator.id if desc.coordinator is not None else None
    verbose = getattr(args, "verbose", False)
    if args.state:
        row = {"group": desc.group_id, "coordinator": coordinator,
               "assignment_strategy": desc.partition_assignor or None, "state": desc.state,
               "members": len(desc.members)}
        headers = ["GROUP", "COORDINATOR", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS"]
        if verbose or args.output == "json":
            row.update(type=desc.type, group_epoch=desc.group_epoch,
                       target_assignment_epoch=desc.target_assignment_epoch)
            headers += ["TYPE", "GROUP-EPOCH", "TARGET-ASSIGNMENT-EPOCH"]
        if args.output == "json":
            _print_json([row])
        else:
            print_table([list(row.values())], headers)
        return
    if args.members:
        def names(tps):
            return None if tps is None else [f"{tp.topic}-{tp.partition}" for tp in tps]

        rows = [{"group": desc.group_id, "consumer_id": m.member_id,
                 "group_instance_id": m.group_instance_id, "host": m.host,
                 "client_id": m.client_id, "partitions": len(m.assignment),
                 "assignment": names(m.assignment), "member_epoch": m.member_epoch,
                 "target_assignment_epoch": desc.target_assignment_epoch,
                 "target_assignment": names(m.target_assignment), "upgraded": m.upgraded}
                for m in desc.members]
        if args.output == "json":
            _print_json(rows)
            return
        headers = ["GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID",
                   "#PARTITIONS", "ASSIGNMENT"]
        table = [[r["group"], r["consumer_id"], r["group_instance_id"], r["host"],
                  r["client_id"], r["partitions"], ",".join(r["assignment"]) or None]
                 for r in rows]
        if verbose:
            # Kafka's --verbose columns ("-": a classic group has no such thing)
            headers += ["CURRENT-EPOCH", "TARGET-EPOCH", "TARGET-ASSIGNMENT", "UPGRADED"]
            for line, r in zip(table, rows):
                line += [r["member_epoch"], r["target_assignment_epoch"],
                         None if r["target_assignment"] is None
                         else ",".join(r["target_assignment"]) or "(none)",
                         None if r["upgraded"] is None else str(r["upgraded"]).lower()]
        print_table(table, headers)
        return
    lags = admin.describe_group_offsets(group_id)
    if args.output == "json":
        _print_json([{"group": group_id, "state": desc.state, "topic": p.topic,
                      "partition": p.partition,
                      "current_offset": p.committed if p.committed >= 0 else None,
                      "log_end_offset": p.log_end, "lag": p.lag, "consumer_id": p.member_id,
                      "client_id": p.client_id} for p in lags])
        return
    print(f"Group {desc.group_id}: state {desc.state}, assignor "
          f"{desc.partition_assignor or '-'}, {len(desc.members)} member(s)")
    print_table([[p.topic, p.partition, p.committed if p.committed >= 0 else None, p.log_end,
                  p.lag, p.member_id, p.client_id] for p in lags],
                ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                 "CONSUMER-ID", "CLIENT-ID"])
    for m in desc.members:
        if not m.assignment:
            print(f"member {m.member_id} ({m.client_id}) has no partitions")


def _reset_offsets(admin, args) -> None:
    specs = [(name, getattr(args, name.replace("-", "_"))) for name in
             ("to-earliest", "to-latest", "to-current", "to-datetime", "by-duration",
              "to-offset", "shift-by", "from-file")]
    chosen = [(n, v) for n, v in specs if v not in (None, False)]
    if len(chosen) != 1:
        raise ValueError("reset-offsets needs exactly one of --to-earliest, --to-latest, "
                         "--to-current, --to-datetime, --by-duration, --to-offset, --shift-by, "
                         "--from-file")
    spec, value = chosen[0]
    if spec == "to-datetime":
        value = _parse_datetime(value)
    elif spec == "by-duration":
        value = _parse_duration(value)
    elif spec == "from-file":
        value = _read_offsets_csv(value)
    desc = admin.describe_consumer_groups([args.group])[args.group]
    members = desc.result().members if desc.exception() is None else []
    if members:
        raise ValueError(f"consumer group {args.group!r} has {len(members)} active "
                         f"member(s); stop them before resetting its offsets")
    plan = admin.plan_offset_reset(args.group, args.topic or [], spec, value)
    if args.export:
        # kafka-consumer-groups --export: what --from-file reads back
        for tp in plan:
            print(f"{tp.topic},{tp.partition},{tp.offset}")
    else:
        print_table([[tp.topic, tp.partition, tp.offset] for tp in plan],
                    ["TOPIC", "PARTITION", "NEW-OFFSET"])
    if args.execute:
        admin.alter_consumer_group_offsets(args.group, plan).result()
        print(f"Reset the offsets of {len(plan)} partition(s) of group {args.group}.",
              file=sys.stderr if args.export else sys.stdout)
    elif not args.export:
        print("Dry run: nothing changed. Add --execute to apply these offsets.")


def _delete_offsets(admin, args) -> int:
    from kafkalite.client import TopicPartition
    wanted = []
    for spec in args.topic:
        name, colon, parts = spec.partition(":")
        if colon:
            try:
                wanted += [TopicPartition(name, int(p)) for p in parts.split(",")]
            except ValueError:
                raise ValueError(f"--topic {spec!r}: partitions are TOPIC:0,1,2") from None
        else:
            md = admin.list_topics(name, timeout=args.timeout)
            if md.topics[name].error is not None:
                raise md.topics[name].error
            wanted += [TopicPartition(name, p) for p in sorted(md.topics[name].partitions)]
    failed = 0
    rows = []
    for tp, fut in sorted(admin.delete_consumer_group_offsets(args.group, wanted).items(),
                          key=lambda kv: (kv[0].topic, kv[0].partition)):
        exc = fut.exception()
        failed += exc is not None
        rows.append([tp.topic, tp.partition, "Successful" if exc is None else str(exc)])
    print_table(rows, ["TOPIC", "PARTITION", "STATUS"])
    return 1 if failed else 0


def groups(args) -> int:
    """Like kafka-consumer-groups: list, describe, reset-offsets,
    delete-offsets, delete."""
    from kafkalite.client import AdminClient
    admin = AdminClient(client_config(args))
    try:
        if args.action == "list":
            listed = admin.list_consumer_groups().result()
            if args.output == "json":
                _print_json([{"group": g.group_id, "state": g.state} for g in listed])
            else:
                for g in listed:
                    print(f"{g.group_id}\t{g.state}")
        elif args.action == "describe":
            if args.members and args.state:
                raise ValueError("give --members or --state, not both")
            for group_id in _group_ids(admin, args):
                _describe_group(admin, args, group_id)
        elif args.action == "delete":
            admin.delete_consumer_groups([args.group])[args.group].result()
            print(f"Deleted consumer group {args.group}.")
        elif args.action == "reset-offsets":
            _reset_offsets(admin, args)
        elif args.action == "delete-offsets":
            return _delete_offsets(admin, args)
    finally:
        admin.close()
    return 0


def share_groups(args) -> int:
    """Like kafka-share-groups: list, describe (members, start offsets and
    lag), reset-offsets, delete."""
    from kafkalite.client import AdminClient
    admin = AdminClient(client_config(args))
    try:
        if args.action in ("describe", "reset-offsets"):
            args.group = _share_group_id(args)
        if args.action == "list":
            listed = admin.list_share_groups().result()
            if args.output == "json":
                _print_json([{"group": g, "state": s} for g, s in listed])
            else:
                for g, s in listed:
                    print(f"{g}\t{s}")
        elif args.action == "describe":
            _describe_share_group(admin, args)
        elif args.action == "reset-offsets":
            return _reset_share_offsets(admin, args)
        elif args.action == "delete":
            admin.delete_consumer_groups([args.group])[args.group].result()
            print(f"Deleted share group {args.group}.")
    finally:
        admin.close()
    return 0


def _share_group_id(args) -> str:
    if args.group and args.group_opt and args.group != args.group_opt:
        raise ValueError(f"two groups given: {args.group!r} and --group {args.group_opt!r}")
    group = args.group or args.group_opt
    if not group:
        raise ValueError(f"share-groups {args.action} needs a group (GROUP or --group GROUP)")
    return group


def _share_offsets(admin, group: str) -> list:
    """[(topic, partition, start offset or None, log end, lag or None)],
    sorted: the partitions the group has state for."""
    starts = admin.list_share_group_offsets({group: None})[group].result()
    ends = admin.list_offsets({(tp.topic, tp.partition): -1 for tp in starts})
    rows = []
    for tp, start in sorted(starts.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        end = ends[(tp.topic, tp.partition)]
        rows.append((tp.topic, tp.partition, start if start >= 0 else None, end,
                     max(end - start, 0) if start >= 0 else None))
    return rows


def _describe_share_group(admin, args) -> None:
    d = admin.describe_share_groups([args.group])[args.group].result()
    rows = [{"group": d["group_id"], "state": d["group_state"],
             "group_epoch": d["group_epoch"], "member_id": m["member_id"],
             "member_epoch": m["member_epoch"], "client_id": m["client_id"],
             "host": m["client_host"],
             "assignment": [f"{t['topic_name']}-{p}"
                            for t in m["assignment"]["topic_partitions"]
                            for p in t["partitions"]]}
            for m in d["members"]]
    offsets = [] if args.members else _share_offsets(admin, args.group)
    if args.output == "json":
        if args.offsets:
            _print_json([{"group": d["group_id"], "topic": t, "partition": p,
                          "start_offset": start, "log_end_offset": end, "lag": lag}
                         for t, p, start, end, lag in offsets])
        else:
            _print_json(rows or [{"group": d["group_id"], "state": d["group_state"],
                                  "group_epoch": d["group_epoch"]}])
        return
    if not args.offsets:
        if not rows:
            print(f"Share group {d['group_id']} has no members ({d['group_state']}).")
        else:
            print_table([[r["group"], r["state"], r["member_id"], r["member_epoch"],
                          r["client_id"], r["host"], ",".join(r["assignment"]) or None]
                         for r in rows], ["GROUP", "STATE", "MEMBER-ID", "MEMBER-EPOCH",
                                          "CLIENT-ID", "HOST", "ASSIGNMENT"])
    if not args.members:
        if not offsets:
            print(f"Share group {d['group_id']} has no partition state yet.")
        else:
            print_table([[d["group_id"], t, p, start, lag] for t, p, start, _, lag in offsets],
                        ["GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LAG"])


def _reset_share_offsets(admin, args) -> int:
    """kafka-share-groups --reset-offsets: the plan (each target clamped to
    the partition's log), applied with --execute."""
    from kafkalite.client import TopicPartition
    from kafkalite.errors import GroupIdNotFoundError
    try:
        members = admin.describe_share_groups([args.group])[args.group].result()["members"]
    except GroupIdNotFoundError:
        members = []                  # no group yet, or state from before a restart
    if members:
        raise ValueError(f"share group {args.group!r} has {len(members)} active member(s); "
                         f"stop them before resetting its offsets")
    keys = []
    for spec in args.topic or []:
        name, colon, parts = spec.partition(":")
        md = admin.list_topics(name, timeout=args.timeout)
        if md.topics[name].error is not None:
            raise md.topics[name].error
        if colon:
            try:
                wanted = [int(p) for p in parts.split(",")]
            except ValueError:
                raise ValueError(f"--topic {spec!r}: partitions are TOPIC:0,1,2") from None
            missing = [p for p in wanted if p not in md.topics[name].partitions]
            if missing:
                raise ValueError(f"topic {name!r} has no partition {missing[0]}")
        else:
            wanted = sorted(md.topics[name].partitions)
        keys += [(name, p) for p in wanted]
    if not args.topic:
        keys = [(tp.topic, tp.partition) for tp in
                admin.list_share_group_offsets({args.group: None})[args.group].result()]
        if not keys:
            raise ValueError(f"share group {args.group!r} has no partition state: name the "
                             f"topic(s) to reset with --topic")
    keys = sorted(set(keys))
    starts = admin.list_offsets({k: -2 for k in keys})
    ends = admin.list_offsets({k: -1 for k in keys})
    if args.to_datetime is not None:
        at = admin.list_offsets({k: _parse_datetime(args.to_datetime) for k in keys})
    plan = {}
    for k in keys:
        if args.to_earliest:
            target = starts[k]
        elif args.to_latest:
            target = ends[k]
        elif args.to_offset is not None:
            target = args.to_offset
        else:
            target = at[k] if at[k] >= 0 else ends[k]
        plan[TopicPartition(*k)] = min(max(target, starts[k]), ends[k])
    print_table([[args.group, tp.topic, tp.partition, off] for tp, off in plan.items()],
                ["GROUP", "TOPIC", "PARTITION", "NEW-START-OFFSET"])
    if not args.execute:
        print("Dry run: nothing changed. Add --execute to apply these offsets.")
        return 0
    failed = []
    for tp, fut in admin.alter_share_group_offsets(args.group, plan).items():
        if fut.exception() is not None:
            failed.append(f"{tp.topic}-{tp.partition}: {fut.exception()}")
    if failed:
        raise ValueError(f"share group {args.group!r}: {len(failed)} partition(s) not reset "
                         f"({'; '.join(failed)})")
    print(f"Reset the start offsets of {len(plan)} partition(s) of share group {args.group}.")
    return 0


def configs(args) -> int:
    """Like kafka-configs for topics: describe (overrides, or --all with
    each value's source) and alter (--add-config, --delete-config)."""
    from kafkalite.client import AdminClient, ConfigResource, ResourceType
    from kafkalite.protocol.enums import ConfigSource
    admin = AdminClient(client_config(args))
    try:
        if args.action == "describe":
            names = [args.topic] if args.topic else sorted(
                admin.list_topics(timeout=args.timeout).topics)
            for name in names:
                fut = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)])
                entries = next(iter(fut.values())).result()
                rows = [{"topic": name, "name": k, "value": e.value,
                         "source": ConfigSource(int(e.source)).name}
                        for k, e in sorted(entries.items()) if args.all or int(e.source) == 1]
                if args.output == "json":
                    _print_json(rows)
                    continue
                print(f"{'All' if args.all else 'Dynamic'} configs for topic {name} are:")
                for r in rows:
                    print(f"  {r['name']}={r['value']} ({r['source']})")
        else:
            add = {}
            for item in args.add_config or []:
                add.update(_parse_kv(item.split(","), "--add-config"))
            if not add and not args.delete_config:
                raise ValueError("configs alter needs --add-config or --delete-config")
            _alter_topic_configs(admin, args.topic, add,
                                 [k for item in args.delete_config or []
                                  for k in item.split(",") if k])
            print(f"Completed updating config for topic {args.topic}.")
    finally:
        admin.close()
    return 0


def _quota_entity(args) -> dict:
    """The entity kafka-configs' --user/--user-defaults/--client/--client-defaults/
    --ip/--ip-defaults name."""
    entity = {}
    if args.user is not None and args.user_defaults:
        raise ValueError("give --user or --user-defaults, not both")
    if args.client is not None and args.client_defaults:
        raise ValueError("give --client or --client-defaults, not both")
    if args.ip is not None and args.ip_defaults:
        raise ValueError("give --ip or --ip-defaults, not both")
    if args.user is not None or args.user_defaults:
        entity["user"] = args.user
    if args.client is not None or args.client_defaults:
        entity["client-id"] = args.client
    if args.ip is not None or args.ip_defaults:
        if entity:
            raise ValueError("an IP quota entity has no user or client part: give --ip or "
                             "--ip-defaults alone")
        entity["ip"] = args.ip
    return entity


def _entity_text(entity: dict) -> str:
    parts = []
    if "user" in entity:
        parts.append(f"user-principal '{entity['user']}'" if entity["user"] is not None
                     else "the default user-principal")
    if "client-id" in entity:
        parts.append(f"client-id '{entity['client-id']}'" if entity["client-id"] is not None
                     else "the default client-id")
    if "ip" in entity:
        parts.append(f"ip '{entity['ip']}'" if entity["ip"] is not None else "the default ip")
    return ", ".join(parts)


def client_quotas(args) -> int:
    """Like kafka-configs --entity-type users/clients/ips: describe and alter
    client quotas (DescribeClientQuotas, AlterClientQuotas)."""
    from kafkalite.client.admin import (AdminClient, ClientQuotaAlteration, ClientQuotaEntity,
                                        ClientQuotaFilterComponent)
    entity = _quota_entity(args)
    admin = AdminClient(client_config(args))
    try:
        if args.action == "describe":
            components = [ClientQuotaFilterComponent(kind, name, default=name is None)
                          for kind, name in entity.items()]
            found = admin.describe_client_quotas(components, strict=bool(entity)).result()
            rows = [{"entity": e.as_dict(), "quotas": values}
                    for e, values in sorted(found.items(), key=lambda kv: repr(kv[0]))]
            if args.output == "json":
                _print_json(rows)
                return 0
            for r in rows:
                values = ", ".join(f"{k}={v:g}" for k, v in sorted(r["quotas"].items()))
                print(f"Quota configs for {_entity_text(r['entity'])} are {values}")
            return 0
        if not entity:
            raise ValueError("client-quotas alter needs --user, --user-defaults, --client, "
                             "--client-defaults, --ip or --ip-defaults")
        ops = {}
        for item in args.add_config or []:
            for k, v in _parse_kv(item.split(","), "--add-config").items():
                try:
                    ops[k] = float(v)
                except ValueError:
                    raise ValueError(f"--add-config {k}={v}: the value must be a number") from None
        for item in args.delete_config or []:
            ops.update((k, None) for k in item.split(",") if k)
        if not ops:
            raise ValueError("client-quotas alter needs --add-config or --delete-config")
        result = admin.alter_client_quotas(
            [ClientQuotaAlteration(ClientQuotaEntity(entity), ops)],
            validate_only=args.validate_only)
        for fut in result.values():
            fut.result()
        print(f"{'Validated' if args.validate_only else 'Completed updating'} config for "
              f"{_entity_text(entity)}.")
    finally:
        admin.close()
    return 0


def _server_json(data_dir: str, bootstrap: str) -> dict:
    """The server.json of the server at ``bootstrap``, if it is the one
    whose data dir is ``data_dir`` (its listeners are written there)."""
    try:
        with open(os.path.join(data_dir, "server.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return {}
    return info if bootstrap in (info.get("bootstrap.servers"),
                                 info.get("kafka.bootstrap.servers")) else {}


def cluster(args) -> int:
    """``cluster info``: cluster id, controller, brokers (DescribeCluster)
    and, from the server's server.json when it is at hand, its listeners."""
    from kafkalite.client import AdminClient
    cfg = client_config(args)
    admin = AdminClient(cfg)
    try:
        info = admin.describe_cluster()
    finally:
        admin.close()
    local = _server_json(args.data_dir, cfg["bootstrap.servers"])
    listeners = {name: local[key] for name, key in (
        ("native", "native"), ("kafka", "kafka.bootstrap.servers"), ("ingest", "ingest"),
        ("metrics", "metrics"), ("health", "health")) if local.get(key)}
    if local.get("kafka.bootstrap.servers"):
        listeners["kafka_security_protocol"] = local.get("kafka.security.protocol")
    named = local.get("kafka_listeners") or {}
    if len(named) > 1:          # named listeners (listeners.py): each one's address and protocol
        for name, entry in named.items():
            listeners[f"kafka {name}"] = (f"{entry['bootstrap.servers']} "
                                          f"({entry['security.protocol']})")
    controller = ("the supervisor at " + cfg["bootstrap.servers"]
                  if info["controller_id"] < 0 else info["controller_id"])
    if args.output == "json":
        _print_json([{"cluster_id": info["cluster_id"], "controller": info["controller_id"],
                      "bootstrap": cfg["bootstrap.servers"],
                      "brokers": [{"id": b.id, "host": b.host, "port": b.port}
                                  for b in info["brokers"]],
                      "listeners": listeners}])
        return 0
    print(f"Cluster ID: {info['cluster_id']}")
    print(f"Controller: {controller}")
    print_table([[b.id, b.host, b.port] for b in sorted(info["brokers"], key=lambda b: b.id)],
                ["BROKER", "HOST", "PORT"])
    for name, value in listeners.items():
        print(f"{name}: {value}")
    if not local:
        print(f"(listeners: no server.json for {cfg['bootstrap.servers']} in {args.data_dir}; "
              f"give --data-dir)")
    return 0


def transactions(args) -> int:
    """Like kafka-transactions: list, describe, describe-producers,
    find-hanging, abort."""
    from kafkalite.client import AdminClient, TopicPartition
    admin = AdminClient(client_config(args))
    try:
        if args.action == "list":
            print_table([[t.transactional_id, t.producer_id, t.state]
                         for t in admin.list_transactions(states=args.state).result()],
                        ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"])
        elif args.action == "describe":
            d = admin.describe_transactions([args.transactional_id])[args.transactional_id].result()
            start = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(d.transaction_start_time_ms / 1000))
                     if d.transaction_start_time_ms >= 0 else None)
            print_table([[d.transactional_id, d.producer_id, d.producer_epoch, d.state,
                          d.transaction_timeout_ms, start,
                          ",".join(f"{tp.topic}-{tp.partition}"
                                   for tp in d.topic_partitions) or None]],
                        ["TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
                         "START-TIME", "PARTITIONS"])
        elif args.action == "describe-producers":
            parts = args.partition or list(admin.list_topics(args.topic).topics[args.topic].partitions)
            rows = []
            for tp, fut in sorted(admin.describe_producers(
                    [TopicPartition(args.topic, p) for p in parts]).items()):
                for st in fut.result():
                    rows.append([tp.partition, st.producer_id, st.producer_epoch,
                                 st.last_sequence, st.last_timestamp,
                                 st.current_transaction_start_offset
                                 if st.current_transaction_start_offset >= 0 else None])
            print_table(rows, ["PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "LAST-SEQUENCE",
                               "LAST-TIMESTAMP", "CURRENT-TRANSACTION-START-OFFSET"])
        elif args.action == "find-hanging":
            hanging = admin.find_hanging_transactions(
                args.topic, max_transaction_timeout_ms=args.max_transaction_timeout * 60_000)
            print_table([[h.topic, h.partition, h.producer_id, h.producer_epoch, h.start_offset,
                          h.transactional_id, h.reason] for h in hanging],
                        ["TOPIC", "PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "START-OFFSET",
                         "TRANSACTIONAL-ID", "WHY"])
            if hanging:
                print(f"{len(hanging)} hanging transaction(s); end one with `kafkalite "
                      f"transactions abort --topic T --partition P --start-offset O`")
        elif args.action == "abort":
            tp = TopicPartition(args.topic, args.partition)
            pid, epoch = args.producer_id, args.producer_epoch
            if args.start_offset is not None:
                found = [st for st in admin.describe_producers([tp])[tp].result()
                         if st.current_transaction_start_offset == args.start_offset]
                if not found:
                    raise ValueError(f"no open transaction starts at offset {args.start_offset} "
                                     f"in {args.topic}-{args.partition}")
                pid, epoch = found[0].producer_id, found[0].producer_epoch
            if pid is None or epoch is None:
                raise ValueError("abort needs --start-offset, or --producer-id and "
                                 "--producer-epoch")
            admin.abort_transaction(tp, pid, epoch, args.coordinator_epoch).result()
            print(f"Aborted the transaction of producer {pid} (epoch {epoch}) in "
                  f"{args.topic}-{args.partition}.")
    finally:
        admin.close()
    return 0


def _offsets_from_json(path: str) -> list:
    """kafka-delete-records.sh's --offset-json-file: {"partitions": [{"topic":
    T, "partition": N, "offset": K}, ...], "version": 1}."""
    from kafkalite.client import TopicPartition
    with open(path) as f:
        try:
            doc = json.load(f)
        except ValueError as exc:
            raise ValueError(f"{path} is not JSON: {exc}") from None
    entries = doc.get("partitions") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f'{path}: expected {{"partitions": [{{"topic": ..., "partition": ..., '
                         f'"offset": ...}}], "version": 1}}')
    out = []
    for e in entries:
        if not (isinstance(e, dict) and isinstance(e.get("topic"), str)
                and type(e.get("partition")) is int and type(e.get("offset")) is int):
            raise ValueError(f"{path}: entry {e!r} needs a topic (string), a partition and an "
                             f"offset (integers)")
        out.append(TopicPartition(e["topic"], e["partition"], e["offset"]))
    return out


def delete_records(args) -> int:
    """Like kafka-delete-records: move partitions' log start offsets (delete
    every record before ``--offset``; -1: up to the high watermark) and
    print each partition's new low watermark."""
    from kafkalite.client import AdminClient, TopicPartition
    if args.offset_json_file:
        if args.topic or args.partition or args.offset is not None:
            raise ValueError("give either --offset-json-file or a topic and --offset, not both")
        wanted = _offsets_from_json(args.offset_json_file)
    elif not args.topic or args.offset is None:
        raise ValueError("delete-records needs a topic and --offset (or --offset-json-file)")
    else:
        wanted = None
    admin = AdminClient(client_config(args))
    failed = 0
    try:
        if wanted is None:
            wanted = [TopicPartition(tp.topic, tp.partition, args.offset)
                      for tp in _topic_partitions(admin, args, args.partition)]
        for tp, fut in admin.delete_records(wanted, operation_timeout=args.timeout).items():
            try:
                print(f"partition: {tp.topic}-{tp.partition}\t"
                      f"low_watermark: {fut.result().low_watermark}")
            except errors.KafkaError as exc:
                failed += 1
                print(f"kafkalite delete-records: {exc}", file=sys.stderr)
    finally:
        admin.close()
    return 1 if failed else 0
