"""``kafkalite delete-records``: move partitions' log start offsets (every
record before ``--offset`` becomes unreadable), like kafka-delete-records,
with its ``--offset-json-file`` format too.

Runs in the ``kafkalite`` process; kafkalite.client only in the functions.
"""
from __future__ import annotations

import argparse
import json
import sys

from kafkalite import errors
from kafkalite.cli.arguments import client_args, topic_arg
from kafkalite.cli.client_config import client_config
from kafkalite.cli.topics import topic_partitions


HELP = "delete a partition's records before an offset (move its log start offset)"
DESCRIPTION = ("Delete records, like kafka-delete-records: every record before --offset becomes "
               "unreadable and its segments go.")


def add_arguments(dr: argparse.ArgumentParser) -> None:
    topic_arg(dr, required=False, text="the topic (or give --offset-json-file)")
    dr.add_argument("--partition", type=int, action="append",
                    help="partition (repeatable; default: all of the topic's)")
    dr.add_argument("--offset", type=int,
                    help="delete the records before this offset (-1: all, up to the high "
                         "watermark)")
    dr.add_argument("--offset-json-file", metavar="FILE",
                    help='kafka-delete-records.sh\'s format: {"partitions": [{"topic": "t", '
                         '"partition": 0, "offset": 5}], "version": 1}')
    client_args(dr)


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


def run(args) -> int:
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
                      for tp in topic_partitions(admin, args, args.partition)]
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
