"""The arguments several commands share, and how each is added to a parser:
how a client command finds the server (``--bootstrap-server``,
``--timeout``), client properties (``-X``, ``--command-config``), the topic
(a positional or ``-t/--topic``, made one ``args.topic`` by the package's
main) and ``--output text|json``.

Runs in the ``kafkalite`` process while its parser is built, so it imports
argparse alone.
"""
from __future__ import annotations

import argparse


def client_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bootstrap-server", metavar="HOST:PORT",
                   help="the server's native endpoint (default: from ./kafkalite-data/server.json, "
                        "else 127.0.0.1:7092)")
    p.add_argument("--timeout", type=float, default=10.0,
                   help="seconds to wait for the server (default: 10)")


def client_properties(p: argparse.ArgumentParser, alias: str | None = None) -> None:
    """Client property pass-through: kcat's -X and Kafka's --command-config
    (and the console tools' --producer-property / --consumer-property)."""
    names = ["-X"] + ([alias] if alias else [])
    p.add_argument(*names, dest="property_x", action="append", metavar="NAME=VALUE",
                   help="a client configuration property, e.g. -X fetch.max.bytes=1048576 "
                        "(repeatable; overrides --command-config)")
    p.add_argument("--command-config", metavar="FILE",
                   help="client configuration properties from a Java properties file")


def topic_arg(p: argparse.ArgumentParser, required: bool = True, text: str | None = None) -> None:
    """The topic as a positional or as -t/--topic (Kafka's tools and kcat
    name it with a flag); main() makes them one ``args.topic``."""
    p.add_argument("topic", nargs="?", help=text or "the topic (or give --topic)")
    p.add_argument("-t", "--topic", dest="topic_flag", metavar="TOPIC",
                   help="the topic, as the positional")
    p.set_defaults(topic_required=required)


def output_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", choices=["text", "json"], default="text",
                   help="json: one JSON document per line (default: text)")
