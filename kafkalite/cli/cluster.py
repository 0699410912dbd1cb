"""``kafkalite cluster info``: cluster id, controller and brokers
(DescribeCluster) and the addresses the server serves, asked of the server
(AdminClient.server_endpoints), so that it works away from the server's
host and data directory.

Runs in the ``kafkalite`` process; kafkalite.client only in ``run``.
"""
from __future__ import annotations

import argparse

from kafkalite.cli.arguments import client_args, client_properties, output_arg
from kafkalite.cli.client_config import client_config
from kafkalite.cli.output import print_json, print_table


HELP = "cluster id, controller, brokers and listeners"
DESCRIPTION = None


def add_arguments(clus: argparse.ArgumentParser) -> None:
    clsub = clus.add_subparsers(dest="action", required=True)
    c = clsub.add_parser("info", help="cluster id, controller, brokers (DescribeCluster) and the "
                                      "server's listeners (asked of the server)")
    c.add_argument("--data-dir", default="./kafkalite-data",
                   help="the server's data directory, whose server.json names the owner's key "
                        "pair on a server with security on (default ./kafkalite-data)")
    output_arg(c)
    client_args(c)
    client_properties(c)


def run(args) -> int:
    """``cluster info``: cluster id, controller, brokers (DescribeCluster)
    and the server's listeners (its server_endpoints extension)."""
    from kafkalite.client import AdminClient
    cfg = client_config(args)
    admin = AdminClient(cfg)
    try:
        info = admin.describe_cluster()
        local = admin.server_endpoints()
    finally:
        admin.close()
    listeners = {name: local[key] for name, key in (
        ("native", "native"), ("kafka", "kafka.bootstrap.servers"), ("ingest", "ingest"),
        ("ingest local", "ingest.local"), ("metrics", "metrics"), ("health", "health"))
        if local.get(key)}
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
    return 0
