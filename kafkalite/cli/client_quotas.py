from __future__ import annotations

from kafkalite.cli.client_config import client_config, parse_kv
from kafkalite.cli.output import print_json


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


def client_quotas(args) -> int:
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
