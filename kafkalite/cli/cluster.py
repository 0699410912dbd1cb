from __future__ import annotations

from kafkalite.cli.client_config import client_config, server_json
from kafkalite.cli.output import print_json, print_table


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
    local = server_json(args.data_dir, cfg["bootstrap.servers"])
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
        print_json([{"cluster_id": info["cluster_id"], "controller": info["controller_id"],
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
