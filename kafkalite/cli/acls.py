"""``kafkalite acls add|list|remove``: a server's ACLs, as kafka-acls.sh manages them.

It speaks Kafka's protocol (CreateAcls, DescribeAcls, DeleteAcls) to a Kafka
listener through confluent-kafka's AdminClient (the ``kafka`` extra), so it
authenticates as any Kafka client does: ``--command-config`` (a properties
file, as kafka-acls.sh takes: ``security.protocol``, ``sasl.mechanism``,
``sasl.jaas.config`` with ``username="..." password="..."``, and any
librdkafka setting) or the ``--security-protocol`` / ``--sasl-*`` flags. The
server answers only a principal with Alter on the Cluster (Describe to
list), or a super user.

Who calls: the ``kafkalite`` process (cli/__init__.py's parser and main).
"""
from __future__ import annotations

import json
import os
import re
import sys

from kafkalite.cli.client_config import DEFAULT_DATA_DIR

DESCRIPTION = ("Add, list or remove ACLs on a server with authorizer_enabled, over the Kafka "
               "protocol, with kafka-acls.sh's flags.")
HELP = "add, list, remove ACLs (as kafka-acls.sh)"
OPERATIONS = ("All", "Read", "Write", "Create", "Delete", "Alter", "Describe", "ClusterAction",
              "DescribeConfigs", "AlterConfigs", "IdempotentWrite")


def add_arguments(p) -> None:
    sub = p.add_subparsers(dest="action", required=True)
    for action, text in (("add", "add ACLs: each principal x host x operation x resource"),
                         ("list", "list the ACLs (of the resources named, or all)"),
                         ("remove", "remove the ACLs matching the flags")):
        a = sub.add_parser(action, help=text)
        a.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help="a Kafka listener (default: kafka.bootstrap.servers of "
                            "./kafkalite-data/server.json, else 127.0.0.1:9092)")
        add_login_arguments(a, "client properties (security.protocol, sasl.mechanism, "
                               "sasl.jaas.config, ssl.*), as kafka-acls.sh takes")
        a.add_argument("--allow-principal", action="append", default=[], metavar="User:NAME")
        a.add_argument("--deny-principal", action="append", default=[], metavar="User:NAME")
        a.add_argument("--principal", action="append", default=[], metavar="User:NAME",
                       help="list/remove: only ACLs of this principal")
        a.add_argument("--allow-host", action="append", default=[], metavar="HOST")
        a.add_argument("--deny-host", action="append", default=[], metavar="HOST")
        a.add_argument("--operation", action="append", default=[], choices=OPERATIONS,
                       help="repeatable (add: default All; list/remove: default any)")
        a.add_argument("--topic", action="append", default=[])
        a.add_argument("--group", action="append", default=[])
        a.add_argument("--transactional-id", action="append", default=[])
        a.add_argument("--cluster", action="store_true", help="the Cluster resource")
        a.add_argument("--resource-pattern-type", default=None,
                       choices=["literal", "prefixed"] + (["any", "match"]
                                                          if action != "add" else []),
                       help="default literal (list: any)")
        if action == "remove":
            a.add_argument("--force", action="store_true", help="accepted for kafka-acls.sh's "
                                                               "sake; nothing is asked")


def _properties(path: str) -> dict:
    props = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith(("#", "!")) and "=" in line:
                key, value = line.split("=", 1)
                props[key.strip()] = value.strip()
    return props


def add_login_arguments(p, command_config_help: str, mechanism_help: str | None = None) -> None:
    """How a command logs in to a Kafka listener (read by ``client_config``):
    ``--command-config`` and the flags that override it, and ``--timeout``."""
    p.add_argument("--command-config", metavar="FILE", help=command_config_help)
    p.add_argument("--security-protocol",
                   choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"])
    p.add_argument("--sasl-mechanism", choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                   help=mechanism_help)
    p.add_argument("--sasl-username")
    p.add_argument("--sasl-password", help="default: $KAFKALITE_SASL_PASSWORD")
    p.add_argument("--ssl-cafile", metavar="PEM", help="CA of the server's certificate")
    p.add_argument("--timeout", type=float, default=15.0)


def client_config(args) -> dict:
    """librdkafka settings from the flags and ``--command-config``."""
    bootstrap = args.bootstrap_server
    if not bootstrap:
        try:
            with open(os.path.join(DEFAULT_DATA_DIR, "server.json")) as f:
                bootstrap = json.load(f)["kafka.bootstrap.servers"]
        except (OSError, ValueError, KeyError):
            bootstrap = "127.0.0.1:9092"
    conf = {"bootstrap.servers": bootstrap}
    if args.command_config:
        for key, value in _properties(args.command_config).items():
            if key == "sasl.jaas.config":
                for field in ("username", "password"):
                    m = re.search(field + r'\s*=\s*"([^"]*)"', value)
                    if m:
                        conf[f"sasl.{field}"] = m.group(1)
            elif key == "sasl.mechanism":
                conf["sasl.mechanisms"] = value
            elif key == "ssl.truststore.location" and value.endswith(".pem"):
                conf["ssl.ca.location"] = value
            elif not key.startswith("ssl.truststore") and not key.startswith("ssl.keystore"):
                conf[key] = value
    for flag, key in (("security_protocol", "security.protocol"),
                      ("sasl_mechanism", "sasl.mechanisms"), ("sasl_username", "sasl.username"),
                      ("ssl_cafile", "ssl.ca.location")):
        if getattr(args, flag):
            conf[key] = getattr(args, flag)
    password = args.sasl_password or os.environ.get("KAFKALITE_SASL_PASSWORD")
    if password:
        conf["sasl.password"] = password
    return conf


def _resources(args, ck_admin, default_all: bool) -> list[tuple]:
    rt = ck_admin.ResourceType
    out = [(rt.TOPIC, t) for t in args.topic] + [(rt.GROUP, g) for g in args.group] + [
        (rt.TRANSACTIONAL_ID, t) for t in args.transactional_id]
    if args.cluster:
        out.append((rt.BROKER, "kafka-cluster"))
    if not out and default_all:
        out.append((rt.ANY, None))
    return out


def _operation(ck_admin, name: str):
    # confluent-kafka spells ClusterAction CLUSTER_ACTION, ...
    return ck_admin.AclOperation[re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper()]


def run(args) -> int:
    try:
        from confluent_kafka import KafkaException
        from confluent_kafka import admin as ck_admin
    except ImportError:
        print("kafkalite acls needs confluent-kafka (pip install 'kafkalite[kafka]')",
              file=sys.stderr)
        return 2
    client = ck_admin.AdminClient(client_config(args))
    pattern = ck_admin.ResourcePatternType[(args.resource_pattern_type or (
        "literal" if args.action == "add" else "any")).upper()]
    perm = ck_admin.AclPermissionType
    try:
        if args.action == "add":
            return _add(args, client, ck_admin, pattern)
        filters = []
        principals = ([(p, perm.ALLOW) for p in args.allow_principal]
                      + [(p, perm.DENY) for p in args.deny_principal]
                      + [(p, perm.ANY) for p in args.principal]) or [(None, perm.ANY)]
        hosts = args.allow_host + args.deny_host or [None]
        ops = [_operation(ck_admin, o) for o in args.operation] or [ck_admin.AclOperation.ANY]
        for rtype, name in _resources(args, ck_admin, default_all=True):
            for principal, permission in principals:
                for host in hosts:
                    for op in ops:
                        filters.append(ck_admin.AclBindingFilter(rtype, name, pattern, principal,
                                                                 host, op, permission))
        if args.action == "list":
            seen = []
            for f in filters:
                for b in client.describe_acls(f, request_timeout=args.timeout).result(
                        args.timeout):
                    if b not in seen:
                        seen.append(b)
            _print(seen)
            return 0
        if args.action == "remove" and not (args.topic or args.group or args.transactional_id
                                            or args.cluster):
            print("kafkalite acls remove: name the resources (--topic, --group, "
                  "--transactional-id, --cluster)", file=sys.stderr)
            return 2
        removed = []
        for future in client.delete_acls(filters, request_timeout=args.timeout).values():
            removed.extend(future.result(args.timeout))
        print(f"removed {len(removed)} ACL(s)")
        _print(removed)
        return 0
    except KafkaException as exc:
        print(f"kafkalite acls {args.action}: {exc.args[0]}", file=sys.stderr)
        return 1


def _add(args, client, ck_admin, pattern) -> int:
    perm = ck_admin.AclPermissionType
    entries = [(p, h, perm.ALLOW) for p in args.allow_principal
               for h in (args.allow_host or ["*"])]
    entries += [(p, h, perm.DENY) for p in args.deny_principal
                for h in (args.deny_host or ["*"])]
    resources = _resources(args, ck_admin, default_all=False)
    if not entries or not resources:
        print("kafkalite acls add: give --allow-principal or --deny-principal, and a resource "
              "(--topic, --group, --transactional-id, --cluster)", file=sys.stderr)
        return 2
    ops = [_operation(ck_admin, o) for o in args.operation] or [ck_admin.AclOperation.ALL]
    bindings = [ck_admin.AclBinding(rtype, name, pattern, principal, host, op, permission)
                for rtype, name in resources for principal, host, permission in entries
                for op in ops]
    for future in client.create_acls(bindings, request_timeout=args.timeout).values():
        future.result(args.timeout)
    print(f"added {len(bindings)} ACL(s)")
    _print(bindings)
    return 0


def _print(bindings) -> None:
    for b in bindings:
        rtype = "CLUSTER" if b.restype.name == "BROKER" else b.restype.name
        print(f"{rtype}:{b.resource_pattern_type.name}:{b.name}\t{b.principal}\t"
              f"host={b.host}\t{b.operation.name}\t{b.permission_type.name}")
