"""``kafkalite share-groups list|describe|reset-offsets|delete`` (KIP-932),
like kafka-share-groups: members, share-partition start offsets and lag,
start offsets reset (a dry run unless ``--execute``, refused while the group
has members).

Runs in the ``kafkalite`` process; kafkalite.client only in the functions.
"""
from __future__ import annotations

import argparse

from kafkalite.cli.arguments import client_args, client_properties, output_arg
from kafkalite.cli.client_config import client_config
from kafkalite.cli.groups import parse_datetime
from kafkalite.cli.output import print_json, print_table


HELP = "list, describe, reset offsets of, delete share groups"
DESCRIPTION = "Share groups (KIP-932), like kafka-share-groups."


def add_arguments(shares: argparse.ArgumentParser) -> None:
    ssub = shares.add_subparsers(dest="action", required=True)
    g = ssub.add_parser("list", help="share group ids and states")
    output_arg(g)
    g = ssub.add_parser("describe", help="the group's members with their partitions, and per "
                                         "partition its start offset and lag")
    g.add_argument("group", nargs="?")
    g.add_argument("--group", dest="group_opt", metavar="GROUP", help="the group (or positional)")
    show = g.add_mutually_exclusive_group()
    show.add_argument("--members", action="store_true", help="only the members")
    show.add_argument("--offsets", action="store_true",
                      help="only the partitions: START-OFFSET (the share-partition start "
                           "offset: every record before it is done) and LAG (log end - start); "
                           "with --output json, these rows instead of the members")
    output_arg(g)
    g = ssub.add_parser("reset-offsets", help="set the share-partitions' start offsets (dry run "
                                              "unless --execute; refused while the group has "
                                              "members)")
    g.add_argument("group", nargs="?")
    g.add_argument("--group", dest="group_opt", metavar="GROUP", help="the group (or positional)")
    g.add_argument("--topic", action="append", metavar="TOPIC[:P,P]",
                   help="topic to reset, or TOPIC:0,1 for some partitions (repeatable; "
                        "default: every partition the group has state for)")
    how = g.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="to each partition's log start")
    how.add_argument("--to-latest", action="store_true", help="to each partition's log end")
    how.add_argument("--to-offset", type=int, metavar="N", help="to offset N (clamped to the log)")
    how.add_argument("--to-datetime", metavar="ISO8601",
                     help="to the first offset at or after this time (UTC unless a zone is given)")
    run = g.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    run.add_argument("--execute", action="store_true", help="apply the plan")
    g = ssub.add_parser("delete", help="delete a share group and the state of its partitions "
                                       "(refused while it has members)")
    g.add_argument("group")
    for p in ssub.choices.values():
        client_args(p)
        client_properties(p)


def run(args) -> int:
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
                print_json([{"group": g, "state": s} for g, s in listed])
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
            print_json([{"group": d["group_id"], "topic": t, "partition": p,
                          "start_offset": start, "log_end_offset": end, "lag": lag}
                         for t, p, start, end, lag in offsets])
        else:
            print_json(rows or [{"group": d["group_id"], "state": d["group_state"],
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
        at = admin.list_offsets({k: parse_datetime(args.to_datetime) for k in keys})
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
