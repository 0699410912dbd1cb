from __future__ import annotations

from kafkalite.cli.client_config import client_config, parse_kv
from kafkalite.cli.output import print_json
from kafkalite.cli.topics import alter_topic_configs


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
