"""``kafkalite transactions list|describe|describe-producers|find-hanging|abort``,
like kafka-transactions.

Runs in the ``kafkalite`` process; kafkalite.client only in ``run``.
"""
from __future__ import annotations

import argparse
import time

from kafkalite.cli.arguments import client_args
from kafkalite.cli.client_config import client_config
from kafkalite.cli.output import print_table


HELP = "list, describe, find hanging and abort transactions"
DESCRIPTION = "Transactions, like kafka-transactions."


def add_arguments(txns: argparse.ArgumentParser) -> None:
    xsub = txns.add_subparsers(dest="action", required=True)
    x = xsub.add_parser("list", help="transactional ids, their producer ids and states")
    x.add_argument("--state", action="append", metavar="STATE",
                   help="only this state (repeatable): Empty, Ongoing, PrepareCommit, ...")
    x = xsub.add_parser("describe", help="a transactional id's state, producer and partitions")
    x.add_argument("transactional_id")
    x = xsub.add_parser("describe-producers", help="the producers with state in partitions "
                                                   "(and their open transactions)")
    x.add_argument("--topic", required=True)
    x.add_argument("--partition", type=int, action="append",
                   help="partition (repeatable; default: all)")
    x = xsub.add_parser("find-hanging", help="open transactions no coordinator will end")
    x.add_argument("--topic", action="append", help="topic to search (repeatable; default: all)")
    x.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="transactions open longer than this are suspects (default: 15, "
                        "the server's transaction_max_timeout_ms)")
    x = xsub.add_parser("abort", help="end a hanging transaction in one partition with an "
                                      "ABORT marker")
    x.add_argument("--topic", required=True)
    x.add_argument("--partition", type=int, required=True)
    x.add_argument("--start-offset", type=int,
                   help="the open transaction's first offset (finds its producer)")
    x.add_argument("--producer-id", type=int)
    x.add_argument("--producer-epoch", type=int)
    x.add_argument("--coordinator-epoch", type=int, default=0)
    for p in xsub.choices.values():
        client_args(p)


def run(args) -> int:
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
