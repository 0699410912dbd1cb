"""How a client command reaches the server and configures its client.

The server is found with ``--bootstrap-server`` or, by default, from
``./kafkalite-data/server.json`` (written by a server started here) or
127.0.0.1:7092. The client's properties are the command's own defaults,
then ``--command-config FILE``, then ``-X name=value``; with security on,
the server's owner key pair from its server.json. Also the name=value
arguments' parsing (``parse_kv``) and kafka-console-producer/consumer's
``--property`` flags (``property_flags``).

Runs in the ``kafkalite`` process of a client command. Every command's
parser imports this module, so it imports the standard library alone at
the top (kafkalite.client and server.config where they are used).
"""
from __future__ import annotations

import json
import os

DEFAULT_DATA_DIR = "./kafkalite-data"


def default_bootstrap() -> str:
    try:
        with open(os.path.join(DEFAULT_DATA_DIR, "server.json")) as f:
            return json.load(f)["bootstrap.servers"]
    except (OSError, ValueError, KeyError):
        # here, not at the top: every command's parser imports this module,
        # and server.config (with storage.config) takes tens of ms to import
        from kafkalite.server.config import DEFAULT_PORT
        return f"127.0.0.1:{DEFAULT_PORT}"


def _read_properties(path: str) -> dict:
    """A Java properties file (Kafka's --command-config, --consumer.config)."""
    import javaproperties
    try:
        with open(path, encoding="utf-8") as f:
            return javaproperties.load(f)
    except ValueError as exc:
        raise ValueError(f"{path} is not a Java properties file: {exc}") from None


def client_config(args, **defaults) -> dict:
    """The client's properties: the command's own ``defaults``, then
    ``--command-config FILE``, then ``-X name=value`` (later ones win, as in
    kcat); an explicit ``--bootstrap-server`` wins over them all. Unknown
    names are refused by the client (config.py), naming the property."""
    cfg = {"bootstrap.servers": default_bootstrap(),
           "request.timeout.ms": int(args.timeout * 1000), **defaults}
    if getattr(args, "command_config", None):
        cfg.update(_read_properties(args.command_config))
    cfg.update(parse_kv(getattr(args, "property_x", None), "-X"))
    if args.bootstrap_server:
        cfg["bootstrap.servers"] = args.bootstrap_server
    if "curve.server.key" not in cfg:
        # the server's owner, on a server with security on: its key pair
        from kafkalite.client.config import owner_config
        data_dir = getattr(args, "data_dir", None) or DEFAULT_DATA_DIR
        cfg.update(owner_config(server_json(data_dir, cfg["bootstrap.servers"])))
    return cfg


def parse_kv(items, what: str) -> dict:
    out = {}
    for item in items or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"{what} {item!r} is not name=value")
        out[key] = value
    return out


def property_flags(args, known) -> dict:
    props = parse_kv(args.property, "--property")
    unknown = sorted(set(props) - set(known))
    if unknown:
        raise ValueError(f"unknown --property {unknown[0]!r}: use {', '.join(known)}")
    return props


def is_true(value: str) -> bool:
    return value.strip().lower() == "true"


def server_json(data_dir: str, bootstrap: str) -> dict:
    """The server.json of the server at ``bootstrap``, if it is the one
    whose data dir is ``data_dir`` (its listeners are written there)."""
    try:
        with open(os.path.join(data_dir, "server.json")) as f:
            info = json.load(f)
    except (OSError, ValueError):
        return {}
    return info if bootstrap in (info.get("bootstrap.servers"),
                                 info.get("kafka.bootstrap.servers")) else {}
