"""``kafkalite topics create|list|describe|alter|delete|elect-leaders|reassign|reassignments``,
like kafka-topics, kafka-leader-election and kafka-reassign-partitions:
an AdminClient of kafkalite.client against a running server. Also the
topic helpers configs.py and delete_records.py use (alter_topic_configs,
topic_partitions).

Runs in the ``kafkalite`` process; imports kafkalite.client only in its
functions (the parser imports this module).
"""
from __future__ import annotations

import argparse

from kafkalite import errors
from kafkalite.cli.arguments import client_args, client_properties, output_arg, topic_arg
from kafkalite.cli.client_config import client_config, parse_kv
from kafkalite.cli.output import print_json


HELP = "create, list, describe, alter, delete topics; elect leaders, reassign replicas"
DESCRIPTION = None


def add_arguments(topics: argparse.ArgumentParser) -> None:
    tsub = topics.add_subparsers(dest="action", required=True)
    t = tsub.add_parser("create", help="create a topic")
    topic_arg(t)
    t.add_argument("--if-not-exists", action="store_true",
                   help="succeed quietly if the topic exists already")
    t.add_argument("--partitions", type=int, default=-1, help="default: the server's default")
    t.add_argument("--replication-factor", type=int, default=-1)
    t.add_argument("--config", action="append", metavar="NAME=VALUE", help="topic config (repeatable)")
    t = tsub.add_parser("list", help="list topic names")
    output_arg(t)
    t = tsub.add_parser("describe", help="partitions, leaders, replicas, in-sync replicas, "
                                         "config overrides, and per partition the log start "
                                         "offset, the end offset (high watermark), the records "
                                         "between them and the leader's size on disk in bytes",
                        description="Records counts the offsets between the start and end "
                                    "offsets: records removed by compaction and transaction "
                                    "markers are counted too.")
    topic_arg(t, required=False, text="the topic (default: every topic)")
    output_arg(t)
    t.add_argument("--under-replicated-partitions", action="store_true",
                   help="only partitions whose in-sync replicas are fewer than their replicas")
    t.add_argument("--unavailable-partitions", action="store_true",
                   help="only partitions without a live leader")
    t = tsub.add_parser("elect-leaders", help="elect the preferred (or, unclean, any live) "
                                              "replica as leader, as kafka-leader-election.sh")
    topic_arg(t, required=False, text="default: every topic")
    t.add_argument("--partition", type=int, action="append",
                   help="partition to elect for (repeatable; default: all of the topic)")
    t.add_argument("--election-type", choices=["preferred", "unclean"], default="preferred")
    t = tsub.add_parser("reassign", help="move a partition's replicas to other workers (the "
                                          "data is copied before the old replicas are dropped)")
    topic_arg(t)
    t.add_argument("--partition", type=int, required=True)
    group = t.add_mutually_exclusive_group(required=True)
    group.add_argument("--replicas", help="the new replicas, comma-separated broker ids, "
                                          "the preferred leader first")
    group.add_argument("--cancel", action="store_true", help="cancel a reassignment under way")
    t = tsub.add_parser("reassignments", help="reassignments under way")
    topic_arg(t, required=False, text="default: every topic")
    t = tsub.add_parser("alter", help="add partitions or change configs")
    topic_arg(t)
    t.add_argument("--partitions", type=int, help="new total partition count")
    t.add_argument("--config", action="append", metavar="NAME=VALUE")
    t.add_argument("--delete-config", action="append", metavar="NAME")
    t = tsub.add_parser("delete", help="delete a topic and its data")
    topic_arg(t)
    t.add_argument("--if-exists", action="store_true",
                   help="succeed quietly if there is no such topic")
    for p in tsub.choices.values():
        client_args(p)
        client_properties(p)


def alter_topic_configs(admin, topic: str, set_configs: dict, delete_keys) -> None:
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


def topic_partitions(admin, args, only=None) -> list:
    """[TopicPartition] of ``args.topic``: ``only`` those numbers, or all of its
    partitions (raising the topic's error if it has one)."""
    from kafkalite.client import TopicPartition
    md = admin.list_topics(args.topic, timeout=args.timeout)
    if md.topics[args.topic].error is not None:
        raise md.topics[args.topic].error
    return [TopicPartition(args.topic, i) for i in (only or sorted(md.topics[args.topic].partitions))]


def run(args) -> int:
    from kafkalite.client import AdminClient, NewPartitions, NewTopic
    admin = AdminClient(client_config(args))
    try:
        if args.action == "create":
            try:
                _raise_first(admin.create_topics([NewTopic(
                    args.topic, args.partitions, args.replication_factor,
                    config=parse_kv(args.config, "--config"))], operation_timeout=args.timeout))
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
                print_json([{"topic": name, "partitions": len(md.topics[name].partitions)}
                             for name in sorted(md.topics)])
            for name in sorted(md.topics) if args.output != "json" else ():
                print(name)
        elif args.action == "describe":
            _describe_topics(admin, args)
        elif args.action == "reassign":
            _reassign(admin, args)
        elif args.action == "reassignments":
            _print_reassignments(admin, args)
        elif args.action == "elect-leaders":
            return _elect_leaders(admin, args)
        elif args.action == "alter":
            if args.partitions is None and not args.config and not args.delete_config:
                raise ValueError("topics alter needs --partitions, --config or --delete-config")
            if args.partitions is not None:
                _raise_first(admin.create_partitions([NewPartitions(args.topic, args.partitions)],
                                                     operation_timeout=args.timeout))
                print(f"Topic {args.topic} now has {args.partitions} partitions.")
            if args.config or args.delete_config:
                alter_topic_configs(admin, args.topic, parse_kv(args.config, "--config"),
                                     args.delete_config or [])
                print(f"Updated the configs of topic {args.topic}.")
    finally:
        admin.close()
    return 0


def _reassign(admin, args) -> None:
    """kafka-reassign-partitions for one partition: start or cancel its reassignment."""
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


def _print_reassignments(admin, args) -> None:
    """The reassignments in progress, one line a partition."""
    parts = topic_partitions(admin, args) if args.topic else None
    ongoing = admin.list_partition_reassignments(parts).result()
    for tp, r in sorted(ongoing.items(), key=lambda kv: (kv[0].topic, kv[0].partition)):
        print(f"Topic: {tp.topic}\tPartition: {tp.partition}\t"
              f"Replicas: {','.join(map(str, r['replicas']))}\t"
              f"Adding: {','.join(map(str, r['adding_replicas']))}\t"
              f"Removing: {','.join(map(str, r['removing_replicas']))}")


def _elect_leaders(admin, args) -> int:
    """kafka-leader-election: 1 if an election failed (not needed is no failure)."""
    parts = topic_partitions(admin, args, args.partition) if args.topic else None
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
            print_json([{"topic": name, "partition_count": len(t.partitions),
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
