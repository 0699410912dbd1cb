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


def _client_config(args) -> dict:
    return {"bootstrap.servers": args.bootstrap_server or default_bootstrap(),
            "request.timeout.ms": int(args.timeout * 1000)}


def _parse_kv(items, what: str) -> dict:
    out = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"{what} {item!r} is not name=value")
        out[key] = value
    return out


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
    from kafkalite.client import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                  NewPartitions, NewTopic, ResourceType)
    admin = AdminClient(_client_config(args))
    try:
        if args.action == "create":
            _raise_first(admin.create_topics([NewTopic(
                args.topic, args.partitions, args.replication_factor,
                config=_parse_kv(args.config, "--config"))], operation_timeout=args.timeout))
            print(f"Created topic {args.topic}.")
        elif args.action == "delete":
            _raise_first(admin.delete_topics([args.topic], operation_timeout=args.timeout))
            print(f"Deleted topic {args.topic}.")
        elif args.action == "list":
            md = admin.list_topics(timeout=args.timeout)
            for name in sorted(md.topics):
                print(name)
        elif args.action == "describe":
            md = admin.list_topics(args.topic, timeout=args.timeout)
            names = [args.topic] if args.topic else sorted(md.topics)
            only = getattr(args, "under_replicated_partitions", False) or getattr(
                args, "unavailable_partitions", False)
            for name in names:
                t = md.topics[name]
                if t.error is not None:
                    raise t.error
                parts = [t.partitions[pid] for pid in sorted(t.partitions)]
                if getattr(args, "under_replicated_partitions", False):
                    parts = [p for p in parts if len(p.isrs) < len(p.replicas)]
                if getattr(args, "unavailable_partitions", False):
                    parts = [p for p in parts if p.leader < 0]
                if not only:
                    configs = admin.describe_configs([ConfigResource(ResourceType.TOPIC, name)])
                    overrides = {k: e.value for k, e in
                                 next(iter(configs.values())).result().items() if e.source == 1}
                    factor = max((len(p.replicas) for p in t.partitions.values()), default=0)
                    print(f"Topic: {name}\tPartitionCount: {len(t.partitions)}\t"
                          f"ReplicationFactor: {factor}\tConfigs: "
                          f"{','.join(f'{k}={v}' for k, v in sorted(overrides.items()))}")
                for p in parts:
                    offline = (f"\tOffline: {','.join(map(str, p.offline_replicas))}"
                               if p.offline_replicas else "")
                    print(f"\tTopic: {name}\tPartition: {p.id}\tLeader: "
                          f"{p.leader if p.leader >= 0 else 'none'}\t"
                          f"Replicas: {','.join(map(str, p.replicas))}\t"
                          f"Isr: {','.join(map(str, p.isrs))}{offline}")
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
                entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
                           for k, v in _parse_kv(args.config, "--config").items()]
                entries += [ConfigEntry(k, None, incremental_operation=AlterConfigOpType.DELETE)
                            for k in args.delete_config or []]
                _raise_first(admin.incremental_alter_configs(
                    [ConfigResource(ResourceType.TOPIC, args.topic, incremental_configs=entries)]))
                print(f"Updated the configs of topic {args.topic}.")
    finally:
        admin.close()
    return 0


def produce(args) -> int:
    from kafkalite.client import Producer
    failures = []

    def delivered(err, msg):
        if err is not None:
            failures.append(err)

    headers = list(_parse_kv(args.header, "--header").items()) or None
    producer = Producer({**_client_config(args), "acks": args.acks,
                         "compression.type": args.compression, "linger.ms": args.linger_ms,
                         "on_delivery": delivered})
    count = 0
    try:
        for line in sys.stdin.buffer:
            line = line.rstrip(b"\r\n")
            key = None
            if args.key_separator is not None:
                sep = args.key_separator.encode()
                if sep not in line:
                    raise ValueError(f"line {count + 1} has no key separator {args.key_separator!r}")
                key, line = line.split(sep, 1)
            while True:
                try:
                    producer.produce(args.topic, line, key, partition=args.partition,
                                     headers=headers)
                    break
                except BufferError:
                    producer.poll(0.1)
            count += 1
            producer.poll(0)
        left = producer.flush(args.timeout)
    finally:
        producer.close(0)
    if failures or left:
        raise failures[0] if failures else TimeoutError(f"{left} messages were not delivered")
    print(f"Produced {count} messages to {args.topic}.", file=sys.stderr)
    return 0


def consume(args) -> int:
    from kafkalite.client import OFFSET_BEGINNING, OFFSET_END, Consumer, TopicPartition
    if args.offset is not None and args.partition is None:
        raise ValueError("--offset needs --partition (an offset belongs to one partition)")
    if args.group and (args.partition is not None or args.offset is not None):
        raise ValueError("--group shares the topic's partitions among the group's members: it "
                         "cannot be combined with --partition or --offset")
    consumer = Consumer({**_client_config(args),
                         "auto.offset.reset": "earliest" if args.from_beginning else "latest",
                         **({"group.id": args.group} if args.group else {})})
    seen = 0
    try:
        md = consumer.list_topics(args.topic, timeout=args.timeout)
        t = md.topics.get(args.topic)
        if t is None or t.error is not None:
            raise t.error if t is not None and t.error else ValueError(f"no topic {args.topic!r}")
        if args.group:
            # resumes from the group's committed offsets; commits as it goes and at exit
            consumer.subscribe([args.topic])
        else:
            parts = [args.partition] if args.partition is not None else sorted(t.partitions)
            start = args.offset if args.offset is not None else (
                OFFSET_BEGINNING if args.from_beginning else OFFSET_END)
            consumer.assign([TopicPartition(args.topic, p, start) for p in parts])
        idle_deadline = time.monotonic() + args.timeout_ms / 1000 if args.timeout_ms else None
        out = sys.stdout.buffer
        while args.max_messages is None or seen < args.max_messages:
            want = 500 if args.max_messages is None else min(500, args.max_messages - seen)
            msgs = consumer.consume(want, 0.2)
            if not msgs:
                if idle_deadline is not None and time.monotonic() >= idle_deadline:
                    break
                continue
            if idle_deadline is not None:
                idle_deadline = time.monotonic() + args.timeout_ms / 1000
            for m in msgs:
                fields = []
                if args.print_timestamp:
                    fields.append(b"CreateTime:%d" % m.timestamp()[1])
                if args.print_partition:
                    fields.append(b"Partition:%d" % m.partition())
                if args.print_offset:
                    fields.append(b"Offset:%d" % m.offset())
                if args.print_headers:
                    fields.append(b",".join(k.encode() + b":" + (v if v is not None else b"NULL")
                                            for k, v in (m.headers() or [])) or b"NO_HEADERS")
                if args.print_key:
                    fields.append(m.key() if m.key() is not None else b"null")
                fields.append(m.value() if m.value() is not None else b"null")
                out.write(b"\t".join(fields) + b"\n")
            out.flush()
            seen += len(msgs)
    except KeyboardInterrupt:
        pass
    finally:
        consumer.close()
    print(f"Processed a total of {seen} messages", file=sys.stderr)
    return 0


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


def _table(rows: list[list], header: list[str]) -> None:
    cells = [header] + [["-" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    for r in cells:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def groups(args) -> int:
    """Like kafka-consumer-groups: list, describe, reset-offsets, delete."""
    from kafkalite.client import AdminClient
    admin = AdminClient(_client_config(args))
    try:
        if args.action == "list":
            for g in admin.list_consumer_groups().result():
                print(f"{g.group_id}\t{g.state}")
        elif args.action == "describe":
            desc = admin.describe_consumer_groups([args.group])[args.group].result()
            print(f"Group {desc.group_id}: state {desc.state}, assignor "
                  f"{desc.partition_assignor or '-'}, {len(desc.members)} member(s)")
            lags = admin.describe_group_offsets(args.group)
            _table([[p.topic, p.partition, p.committed if p.committed >= 0 else None, p.log_end,
                     p.lag, p.member_id, p.client_id] for p in lags],
                   ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                    "CONSUMER-ID", "CLIENT-ID"])
            idle = [m for m in desc.members if not m.assignment]
            for m in idle:
                print(f"member {m.member_id} ({m.client_id}) has no partitions")
        elif args.action == "delete":
            admin.delete_consumer_groups([args.group])[args.group].result()
            print(f"Deleted consumer group {args.group}.")
        elif args.action == "reset-offsets":
            specs = [(name, getattr(args, name.replace("-", "_"))) for name in
                     ("to-earliest", "to-latest", "to-datetime", "to-offset", "shift-by")]
            chosen = [(n, v) for n, v in specs if v not in (None, False)]
            if len(chosen) != 1:
                raise ValueError("reset-offsets needs exactly one of --to-earliest, --to-latest, "
                                 "--to-datetime, --to-offset, --shift-by")
            spec, value = chosen[0]
            if spec == "to-datetime":
                value = _parse_datetime(value)
            desc = admin.describe_consumer_groups([args.group])[args.group]
            members = desc.result().members if desc.exception() is None else []
            if members:
                raise ValueError(f"consumer group {args.group!r} has {len(members)} active "
                                 f"member(s); stop them before resetting its offsets")
            plan = admin.plan_offset_reset(args.group, args.topic or [], spec, value)
            _table([[tp.topic, tp.partition, tp.offset] for tp in plan],
                   ["TOPIC", "PARTITION", "NEW-OFFSET"])
            if args.execute:
                admin.alter_consumer_group_offsets(args.group, plan).result()
                print(f"Reset the offsets of {len(plan)} partition(s) of group {args.group}.")
            else:
                print("Dry run: nothing changed. Add --execute to apply these offsets.")
    finally:
        admin.close()
    return 0


def transactions(args) -> int:
    """Like kafka-transactions: list, describe, describe-producers,
    find-hanging, abort."""
    from kafkalite.client import AdminClient, TopicPartition
    admin = AdminClient(_client_config(args))
    try:
        if args.action == "list":
            _table([[t.transactional_id, t.producer_id, t.state]
                    for t in admin.list_transactions(states=args.state).result()],
                   ["TRANSACTIONAL-ID", "PRODUCER-ID", "STATE"])
        elif args.action == "describe":
            d = admin.describe_transactions([args.transactional_id])[args.transactional_id].result()
            start = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(d.transaction_start_time_ms / 1000))
                     if d.transaction_start_time_ms >= 0 else None)
            _table([[d.transactional_id, d.producer_id, d.producer_epoch, d.state,
                     d.transaction_timeout_ms, start,
                     ",".join(f"{tp.topic}-{tp.partition}" for tp in d.topic_partitions) or None]],
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
            _table(rows, ["PARTITION", "PRODUCER-ID", "PRODUCER-EPOCH", "LAST-SEQUENCE",
                          "LAST-TIMESTAMP", "CURRENT-TRANSACTION-START-OFFSET"])
        elif args.action == "find-hanging":
            hanging = admin.find_hanging_transactions(
                args.topic, max_transaction_timeout_ms=args.max_transaction_timeout * 60_000)
            _table([[h.topic, h.partition, h.producer_id, h.producer_epoch, h.start_offset,
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
    admin = AdminClient(_client_config(args))
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
