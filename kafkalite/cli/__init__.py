"""The ``kafkalite`` command line: one module per subcommand.

Each command module (topics.py, produce.py, consume.py, groups.py,
users.py, acls.py, server.py, bench.py, ...; COMMANDS below lists them)
has one shape: HELP (its line in ``kafkalite --help``), DESCRIPTION (the
top of its own --help), ``add_arguments(parser)`` and ``run(args)`` -> exit
status. Here: the parser, a loop over those modules, and ``main`` (the
``kafkalite`` console script and ``python -m kafkalite``), which turns a
command's errors into one line. The helpers several commands share:
arguments.py (arguments), client_config.py (finding the server, the
client's properties), output.py (JSON lines, tables). dump-log and verify
are operator tools of kafkalite/tools/ in the same shape.

Which process runs it: the short-lived ``kafkalite`` process of the
user's shell; ``kafkalite server`` becomes the broker's supervisor. A
command module imports only light modules at its top (the parser imports
each one: kafkalite.client, confluent-kafka, numpy, the bench harness are
imported in ``run``), and `kafkalite <command>` imports only that
command's module. What it may import: anything, as an entry point
(tests/test_layers.py); nothing but another entry point imports it.

Subcommands:
  server      run a broker: a supervisor and partition worker processes
  server-stop stop the server of a data directory and wait for it to exit
              (like kafka-server-stop)
  topics      create, list, describe, alter, delete topics; elect leaders, reassign
              replicas (like kafka-topics, kafka-leader-election, kafka-reassign-partitions)
  produce     send lines from stdin to a topic (like kafka-console-producer)
  consume     print a topic's records (like kafka-console-consumer)
  groups      list, describe, reset and delete offsets of, delete consumer groups
              (like kafka-consumer-groups)
  share-groups  list, describe, delete share groups (like kafka-share-groups)
  configs     describe (with each value's source) and alter topic configs
              (like kafka-configs)
  cluster     cluster id, controller, brokers and listeners
  transactions list, describe, find hanging and abort transactions
              (like kafka-transactions)
  delete-records  delete the records before an offset (like kafka-delete-records)
  demo        append records to a local partition log and read them back,
              without a server (the storage layer on its own)
  dump-log    print the batches (and records) of segment files, like
              kafka-dump-log
  verify      check every batch CRC and index entry under a data directory
  health      one line on a running server's health; exit 0 if healthy, 1 if not
  streams     describe or reset a Streams application (its group, tasks,
              lag, internal topics), like kafka-streams-application-reset
  connect     run a Kafka Connect worker (connectors, REST API), standalone or in a
              cluster, like connect-standalone.sh / connect-distributed.sh
  mirror      mirror topics and group offsets between clusters (MirrorMaker 2)
  schemas     register, list, get, check, delete schemas in the schema registry
  sql         query topics with SQL: one query, a prompt, or EMIT CHANGES on new
              records (DuckDB over the topics' records)
  users       add, list, delete the SASL users (PLAIN, SCRAM) of a server's Kafka
              listeners (like kafka-configs --alter --entity-type users)
  acls        add, list, remove ACLs over the Kafka protocol (like kafka-acls.sh)
  client-quotas describe and alter client quotas (producer_byte_rate,
              consumer_byte_rate, request_percentage) per user and client id
              (like kafka-configs --entity-type users/clients)
  curve       make CURVE key pairs for the native protocol's encryption and
              authentication (server and clients)
  bench       run benchmark workloads on kafkalite, its peers and the
              machine's ceilings, side by side (kafkalite.bench)

Errors print one line to stderr and exit non-zero; a bad flag prints the
usage of the subcommand it was given to. Output to a closed pipe (``| head``)
ends the command quietly with exit 0.
"""
from __future__ import annotations

import argparse
import difflib
import importlib
import os
import re
import sys

from kafkalite import __version__
from kafkalite.errors import KafkaError


class _Parser(argparse.ArgumentParser):
    """argparse's parser, with "did you mean" after a mistyped subcommand,
    choice or flag (a first-time user's typo got only the whole list).
    Subparsers are made of the same class (argparse's default)."""

    def error(self, message: str):
        super().error(message + _did_you_mean(self, message))


def _did_you_mean(parser: argparse.ArgumentParser, message: str) -> str:
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)$", message)
    if choice:
        word, candidates = choice[1], re.findall(r"'([^']*)'", choice[2])
    elif message.startswith("unrecognized arguments: "):
        flags = [a.split("=", 1)[0] for a in message.split()[2:] if a.startswith("--")]
        if not flags:
            return ""
        word, candidates = flags[0], [o for o in parser._option_string_actions if o[:2] == "--"]
    else:
        return ""
    close = difflib.get_close_matches(word, candidates, n=2, cutoff=0.6)
    return f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""


# The subcommands, in the order `kafkalite --help` lists them, and the module
# of each: its HELP (the line in that list; DESCRIPTION when it has none),
# DESCRIPTION (the top of its own --help), add_arguments(parser) and
# run(args) -> exit status. dump-log and verify are operator tools that
# also run on their own (the repository's tools/dump-log and
# tools/verify-data-dir), so they stay in tools/ and are listed from there.
COMMANDS = (
    ("server", "kafkalite.cli.server"),
    ("server-stop", "kafkalite.cli.server_stop"),
    ("curve", "kafkalite.cli.curve"),
    ("users", "kafkalite.cli.users"),
    ("topics", "kafkalite.cli.topics"),
    ("produce", "kafkalite.cli.produce"),
    ("consume", "kafkalite.cli.consume"),
    ("groups", "kafkalite.cli.groups"),
    ("share-groups", "kafkalite.cli.share_groups"),
    ("configs", "kafkalite.cli.configs"),
    ("client-quotas", "kafkalite.cli.client_quotas"),
    ("cluster", "kafkalite.cli.cluster"),
    ("transactions", "kafkalite.cli.transactions"),
    ("delete-records", "kafkalite.cli.delete_records"),
    ("demo", "kafkalite.cli.demo"),
    ("dump-log", "kafkalite.tools.dump_log"),
    ("verify", "kafkalite.tools.verify"),
    ("streams", "kafkalite.cli.streams"),
    ("health", "kafkalite.cli.health"),
    ("connect", "kafkalite.cli.connect"),
    ("mirror", "kafkalite.cli.mirror"),
    ("schemas", "kafkalite.cli.schemas"),
    ("sql", "kafkalite.cli.sql"),
    ("acls", "kafkalite.cli.acls"),
    ("bench", "kafkalite.cli.bench"),
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole CLI; ``only``: the top level with that one subcommand,
    which `kafkalite <command> ...` parses with so that its start-up
    imports none of the other commands' modules (`kafkalite server` starts
    its workers sooner; a client command imports no storage/ module)."""
    parser = _Parser(
        prog="kafkalite", description="kafkalite: Kafka's model on one host. Run a broker, "
                                      "manage topics, produce and consume, inspect data files.")
    parser.add_argument("--version", action="version", version=f"kafkalite {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, module in COMMANDS:
        if only is not None and name != only:
            continue
        command = importlib.import_module(module)
        p = sub.add_parser(name, help=getattr(command, "HELP", command.DESCRIPTION),
                           description=command.DESCRIPTION)
        command.add_arguments(p)
        p.set_defaults(func=command.run)
    return parser


def _leaf_parser(parser: argparse.ArgumentParser, args) -> argparse.ArgumentParser:
    """The (sub)subcommand's parser that ``args`` came through, so that its
    errors print its usage rather than the top level's."""
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or getattr(args, subs[0].dest, None) is None:
            return parser
        parser = subs[0].choices[getattr(args, subs[0].dest)]


def _resolve_topic(leaf: argparse.ArgumentParser, args) -> None:
    if not hasattr(args, "topic_flag"):
        return
    if args.topic_flag is not None:
        if args.topic is not None and args.topic != args.topic_flag:
            leaf.error(f"two topics given: {args.topic!r} and --topic {args.topic_flag!r}")
        args.topic = args.topic_flag
    if args.topic is None and args.topic_required:
        leaf.error("the topic is required (as TOPIC or --topic TOPIC)")


def _quiet_broken_pipe() -> int:
    # The reader went away (| head): nothing more can be said on stdout, and
    # kcat and Kafka's tools say nothing either. Point stdout at /dev/null so
    # the interpreter's flush at exit does not complain on stderr.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 0


def main(argv: list[str] | None = None) -> int:
    first = (sys.argv[1:] if argv is None else argv)[:1]
    # a first word that is no command (a typo, --help, --version): the
    # whole parser, which lists the commands and suggests the nearest
    parser = build_parser(only=first[0] if first and first[0] in dict(COMMANDS) else None)
    args, extra = parser.parse_known_args(argv)
    leaf = _leaf_parser(parser, args)
    if extra:
        leaf.error(f"unrecognized arguments: {' '.join(extra)}")
    _resolve_topic(leaf, args)
    try:
        return args.func(args)
    except BrokenPipeError:
        return _quiet_broken_pipe()
    except KafkaError as exc:
        print(f"kafkalite {args.command}: {exc}", file=sys.stderr)
        return 1
    except (OSError, ValueError, TypeError, TimeoutError) as exc:
        print(f"kafkalite {args.command}: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"kafkalite {args.command}: interrupted", file=sys.stderr)
        return 130
