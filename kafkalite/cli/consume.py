"""``kafkalite consume``: print a topic's records, like kafka-console-consumer
and kcat -C: from an offset (earliest, latest, N, -N, @timestamp) or as a
member of a consumer group; kafka-console-consumer's formatter
(``--print-*``, ``--property``), kcat's ``-f`` format or ``--output json``;
``-e``, ``-c``, ``--timeout-ms`` to end. SIGINT and SIGTERM close the
consumer (a group member commits and leaves its group) before the exit.

Runs in the ``kafkalite`` process; kafkalite.client's Consumer is imported
in ``run``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from kafkalite import errors
from kafkalite.cli.arguments import client_args, client_properties, output_arg, topic_arg
from kafkalite.cli.client_config import client_config, is_true, property_flags


HELP = "print a topic's records"
DESCRIPTION = ("Print a topic's records, like kafka-console-consumer and kcat -C. SIGINT and "
               "SIGTERM close the consumer (a group member commits and leaves its group) and "
               "exit 0.")


def add_arguments(cons: argparse.ArgumentParser) -> None:
    topic_arg(cons)
    cons.add_argument("--from-beginning", action="store_true",
                      help="start at the log start (as -o earliest); with --group, where the "
                           "group has no committed offset")
    cons.add_argument("--group", help="consume as a member of this consumer group (resumes from "
                                      "its committed offsets, commits as it goes; assignors "
                                      "range,cooperative-sticky, as Kafka's consumer)")
    cons.add_argument("-p", "--partition", type=int, help="only this partition")
    cons.add_argument("-o", "--offset", metavar="OFFSET",
                      help="where to start: earliest, latest, N (absolute; needs --partition), -N (N records before the end of each "
                           "partition), @MS (the first record at or after this timestamp, "
                           "ms since the epoch)")
    cons.add_argument("-e", "--exit", dest="exit_at_end", action="store_true",
                      help="exit once every partition was read to the end offset it had "
                           "when the command started reading it (kcat -e)")
    cons.add_argument("-c", "--max-messages", type=int, help="exit after this many records")
    cons.add_argument("--timeout-ms", type=int, help="exit after this long without a message")
    cons.add_argument("-f", "--format", metavar="FORMAT",
                      help="kcat's format string: %%s value, %%S value size, %%k key, %%K key "
                           "size, %%t topic, %%p partition, %%o offset, %%T timestamp (ms), "
                           "%%h headers (k=v,...), %%%%; \\n \\t \\r escapes; no newline "
                           "is added, e.g. -f '%%k %%s %%o\\n'")
    output_arg(cons)
    cons.add_argument("--property", action="append", metavar="NAME=VALUE",
                      help="kafka-console-consumer's: print.key, print.timestamp, print.offset, "
                           "print.partition, print.headers, print.value (true|false), "
                           "key.separator, line.separator, headers.separator, null.literal")
    cons.add_argument("--print-key", action="store_true")
    cons.add_argument("--print-headers", action="store_true")
    cons.add_argument("--print-timestamp", action="store_true")
    cons.add_argument("--print-partition", action="store_true")
    cons.add_argument("--print-offset", action="store_true")
    client_args(cons)
    client_properties(cons, "--consumer-property")


# kafka-console-consumer's --property names (DefaultMessageFormatter)
_CONSUMER_PROPERTIES = ("print.timestamp", "print.key", "print.offset", "print.partition",
                        "print.headers", "print.value", "key.separator", "line.separator",
                        "headers.separator", "null.literal")


_ESCAPES = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", "0": b"\0"}


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
    props = property_flags(args, _CONSUMER_PROPERTIES)
    show = {name: getattr(args, "print_" + name) or is_true(props.get("print." + name, "false"))
            for name in ("timestamp", "partition", "offset", "headers", "key")}
    show_value = is_true(props.get("print.value", "true"))
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


def run(args) -> int:
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
