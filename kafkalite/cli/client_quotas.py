"""``kafkalite client-quotas describe|alter``: client quotas per user, client
id and IP, like kafka-configs --entity-type users/clients/ips
(DescribeClientQuotas, AlterClientQuotas).

Runs in the ``kafkalite`` process; kafkalite.client only in ``run``.
"""
from __future__ import annotations

import argparse

from kafkalite.cli.arguments import client_args, client_properties, output_arg
from kafkalite.cli.client_config import client_config, parse_kv
from kafkalite.cli.output import print_json


HELP = "describe and alter client quotas per user, client id and IP"
DESCRIPTION = ("Client quotas, like kafka-configs --entity-type users/clients/ips: "
               "producer_byte_rate and consumer_byte_rate (bytes/s) and request_percentage "
               "(percent of one broker thread), for a user, a client id, both, or their "
               "defaults. The most specific quota set for a client applies (Kafka's order: "
               "user+client, user+default client, user, default user+client, ..., default "
               "client). connection_creation_rate (new connections/s each broker accepts from "
               "one IP; KIP-612) for an IP (--ip) or every IP without its own (--ip-defaults); "
               "an IP entity has no user or client part.")


def add_arguments(quotas: argparse.ArgumentParser) -> None:
    qsub = quotas.add_subparsers(dest="action", required=True)
    q_describe = qsub.add_parser("describe", help="the quotas of the entity named (exactly), "
                                                  "or of every entity")
    q_alter = qsub.add_parser("alter", help="set or delete an entity's quotas")
    q_alter.add_argument("--add-config", action="append", metavar="K=V[,K=V]",
                         help="set these quotas, e.g. producer_byte_rate=1048576 (repeatable)")
    q_alter.add_argument("--delete-config", action="append", metavar="K[,K]",
                         help="delete these quotas (repeatable)")
    q_alter.add_argument("--validate-only", action="store_true",
                         help="check the change with the server, change nothing")
    for p in (q_describe, q_alter):
        p.add_argument("--user", metavar="NAME", help="a user (a principal's name: alice for "
                                                      "User:alice)")
        p.add_argument("--user-defaults", action="store_true", help="the default user")
        p.add_argument("--client", metavar="CLIENT_ID", help="a client id")
        p.add_argument("--client-defaults", action="store_true", help="the default client id")
        p.add_argument("--ip", metavar="ADDRESS", help="a client IP address (IPv4 or IPv6)")
        p.add_argument("--ip-defaults", action="store_true", help="the default IP")
        client_args(p)
        client_properties(p)
    output_arg(q_describe)


def _quota_entity(args) -> dict:
    """The entity kafka-configs' --user/--user-defaults/--client/--client-defaults/
    --ip/--ip-defaults name."""
    entity = {}
    if args.user is not None and args.user_defaults:
        raise ValueError("give --user or --user-defaults, not both")
    if args.client is not None and args.client_defaults:
        raise ValueError("give --client or --client-defaults, not both")
    if args.ip is not None and args.ip_defaults:
        raise ValueError("give --ip or --ip-defaults, not both")
    if args.user is not None or args.user_defaults:
        entity["user"] = args.user
    if args.client is not None or args.client_defaults:
        entity["client-id"] = args.client
    if args.ip is not None or args.ip_defaults:
        if entity:
            raise ValueError("an IP quota entity has no user or client part: give --ip or "
                             "--ip-defaults alone")
        entity["ip"] = args.ip
    return entity


def _entity_text(entity: dict) -> str:
    parts = []
    if "user" in entity:
        parts.append(f"user-principal '{entity['user']}'" if entity["user"] is not None
                     else "the default user-principal")
    if "client-id" in entity:
        parts.append(f"client-id '{entity['client-id']}'" if entity["client-id"] is not None
                     else "the default client-id")
    if "ip" in entity:
        parts.append(f"ip '{entity['ip']}'" if entity["ip"] is not None else "the default ip")
    return ", ".join(parts)


def run(args) -> int:
    """Like kafka-configs --entity-type users/clients/ips: describe and alter
    client quotas (DescribeClientQuotas, AlterClientQuotas)."""
    from kafkalite.client.admin import (AdminClient, ClientQuotaAlteration, ClientQuotaEntity,
                                        ClientQuotaFilterComponent)
    entity = _quota_entity(args)
    admin = AdminClient(client_config(args))
    try:
        if args.action == "describe":
            components = [ClientQuotaFilterComponent(kind, name, default=name is None)
                          for kind, name in entity.items()]
            found = admin.describe_client_quotas(components, strict=bool(entity)).result()
            rows = [{"entity": e.as_dict(), "quotas": values}
                    for e, values in sorted(found.items(), key=lambda kv: repr(kv[0]))]
            if args.output == "json":
                print_json(rows)
                return 0
            for r in rows:
                values = ", ".join(f"{k}={v:g}" for k, v in sorted(r["quotas"].items()))
                print(f"Quota configs for {_entity_text(r['entity'])} are {values}")
            return 0
        if not entity:
            raise ValueError("client-quotas alter needs --user, --user-defaults, --client, "
                             "--client-defaults, --ip or --ip-defaults")
        ops = {}
        for item in args.add_config or []:
            for k, v in parse_kv(item.split(","), "--add-config").items():
                try:
                    ops[k] = float(v)
                except ValueError:
                    raise ValueError(f"--add-config {k}={v}: the value must be a number") from None
        for item in args.delete_config or []:
            ops.update((k, None) for k in item.split(",") if k)
        if not ops:
            raise ValueError("client-quotas alter needs --add-config or --delete-config")
        result = admin.alter_client_quotas(
            [ClientQuotaAlteration(ClientQuotaEntity(entity), ops)],
            validate_only=args.validate_only)
        for fut in result.values():
            fut.result()
        print(f"{'Validated' if args.validate_only else 'Completed updating'} config for "
              f"{_entity_text(entity)}.")
    finally:
        admin.close()
    return 0
