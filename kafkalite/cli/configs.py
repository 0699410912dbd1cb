"""``kafkalite configs describe|alter``: topic configs, like kafka-configs
--entity-type topics: overrides, or ``--all`` with each value's source;
``--add-config`` and ``--delete-config`` (IncrementalAlterConfigs).

Runs in the ``kafkalite`` process; kafkalite.client only in ``run``.
"""
from __future__ import annotations

import argparse

from kafkalite.cli.arguments import client_args, client_properties, output_arg, topic_arg
from kafkalite.cli.client_config import client_config, parse_kv
from kafkalite.cli.output import print_json
from kafkalite.cli.topics import alter_topic_configs


HELP = "describe and alter topic configs"
DESCRIPTION = "Topic configs, like kafka-configs --entity-type topics."


def add_arguments(configs: argparse.ArgumentParser) -> None:
    csub = configs.add_subparsers(dest="action", required=True)
    c = csub.add_parser("describe", help="a topic's config overrides, or --all its configs with "
                                         "their sources")
    topic_arg(c, required=False, text="the topic (default: every topic)")
    c.add_argument("--all", action="store_true",
                   help="every config with its source: DYNAMIC_TOPIC_CONFIG (set on the topic), "
                        "DYNAMIC_DEFAULT_BROKER_CONFIG (the brokers' dynamic default, "
                        "log.retention.ms and the like), STATIC_BROKER_CONFIG (the server's topic "
                        "default), DEFAULT_CONFIG")
    output_arg(c)
    c = csub.add_parser("alter", help="set or delete a topic's config overrides")
    topic_arg(c)
    c.add_argument("--add-config", action="append", metavar="K=V[,K=V]",
                   help="set these overrides (repeatable)")
    c.add_argument("--delete-config", action="append", metavar="K[,K]",
                   help="delete these overrides: back to the default (repeatable)")
    for p in csub.choices.values():
        client_args(p)
        client_properties(p)


def run(args) -> int:
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
                    print_json(rows)
                    continue
                print(f"{'All' if args.all else 'Dynamic'} configs for topic {name} are:")
                for r in rows:
                    print(f"  {r['name']}={r['value']} ({r['source']})")
        else:
            add = {}
            for item in args.add_config or []:
                add.update(parse_kv(item.split(","), "--add-config"))
            if not add and not args.delete_config:
                raise ValueError("configs alter needs --add-config or --delete-config")
            alter_topic_configs(admin, args.topic, add,
                                 [k for item in args.delete_config or []
                                  for k in item.split(",") if k])
            print(f"Completed updating config for topic {args.topic}.")
    finally:
        admin.close()
    return 0
