"""``kafkalite groups list|describe|reset-offsets|delete-offsets|delete``, like
kafka-consumer-groups: committed offsets, lag, members, state; offsets reset
(earliest, latest, current, a time, a duration ago, an offset, a shift, a
CSV file; a dry run unless ``--execute``, refused while the group has
members). Also parse_datetime, which share_groups.py uses too.

Runs in the ``kafkalite`` process; kafkalite.client only in the functions.
"""
from __future__ import annotations

import argparse
import sys

from kafkalite.cli.arguments import client_args, client_properties, output_arg
from kafkalite.cli.client_config import client_config
from kafkalite.cli.output import print_json, print_table


HELP = "list, describe, reset offsets of, delete consumer groups"
DESCRIPTION = "Consumer groups, like kafka-consumer-groups."


def add_arguments(groups: argparse.ArgumentParser) -> None:
    gsub = groups.add_subparsers(dest="action", required=True)
    g = gsub.add_parser("list", help="group ids and states")
    output_arg(g)
    g = gsub.add_parser("describe", help="committed offset, log end and lag per partition "
                                         "(or --members, --state)")
    g.add_argument("group", nargs="?")
    g.add_argument("--all-groups", action="store_true", help="every group")
    g.add_argument("--members", action="store_true",
                   help="the members: id, instance id, host, client id, partitions")
    g.add_argument("--state", action="store_true",
                   help="the group: coordinator, assignment strategy, state, member count")
    g.add_argument("--verbose", action="store_true",
                   help="with --state: the group's type (classic or consumer) and, for "
                        "KIP-848 groups, its epoch and target assignment epoch; with "
                        "--members: each member's epoch, current and target assignment, and "
                        "whether it speaks the consumer protocol (UPGRADED)")
    output_arg(g)
    g = gsub.add_parser("reset-offsets", help="set a group's committed offsets (dry run unless "
                                              "--execute; refused while it has members)")
    g.add_argument("group")
    g.add_argument("--topic", action="append", metavar="TOPIC",
                   help="topic to reset (repeatable; default: every topic with committed offsets)")
    how = g.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="to each partition's log start")
    how.add_argument("--to-latest", action="store_true", help="to each partition's log end")
    how.add_argument("--to-current", action="store_true",
                     help="to the committed offset (the log end where none is)")
    how.add_argument("--to-datetime", metavar="ISO8601",
                     help="to the first offset at or after this time (UTC unless a zone is given)")
    how.add_argument("--by-duration", metavar="DURATION",
                     help="to the first offset at or after this long ago (ISO 8601: PT1H, P1D)")
    how.add_argument("--to-offset", type=int, metavar="N", help="to offset N (clamped to the log)")
    how.add_argument("--shift-by", type=int, metavar="N",
                     help="move the committed offset by N (negative: back)")
    how.add_argument("--from-file", metavar="CSV",
                     help="to the offsets in a file of topic,partition,offset lines (as "
                          "--export prints)")
    g.add_argument("--export", action="store_true",
                   help="print the plan as topic,partition,offset lines")
    g.add_argument("--execute", action="store_true", help="apply (default: only show the plan)")
    g = gsub.add_parser("delete-offsets", help="delete a group's committed offsets of topics "
                                               "it no longer consumes")
    g.add_argument("group")
    g.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P]",
                   help="topic (or TOPIC:0,1 for some partitions; repeatable)")
    g = gsub.add_parser("delete", help="delete a group and its committed offsets (refused while "
                                       "it has members)")
    g.add_argument("group")
    for p in gsub.choices.values():
        client_args(p)
        client_properties(p)


def parse_datetime(text: str) -> int:
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
            print_json([row])
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
            print_json(rows)
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
        print_json([{"group": group_id, "state": desc.state, "topic": p.topic,
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
        value = parse_datetime(value)
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


def run(args) -> int:
    """Like kafka-consumer-groups: list, describe, reset-offsets,
    delete-offsets, delete."""
    from kafkalite.client import AdminClient
    admin = AdminClient(client_config(args))
    try:
        if args.action == "list":
            listed = admin.list_consumer_groups().result()
            if args.output == "json":
                print_json([{"group": g.group_id, "state": g.state} for g in listed])
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
