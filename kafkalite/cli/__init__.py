"""The ``kafkalite`` command line.

Subcommands:
  server      run a broker: a supervisor and partition worker processes
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
import os
import re
import sys

from kafkalite import __version__
from kafkalite.cli.arguments import client_args, client_properties, output_arg, topic_arg
from kafkalite.cli.curve import _curve
from kafkalite.cli.demo import _demo
from kafkalite.cli.server import _server
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


class _Commands:
    """A command module's functions, imported when one runs: a parser that
    imported every command's module took most of `kafkalite --help`'s 0.5 s."""

    def __init__(self, module: str):
        self.module = module

    def __getattr__(self, name: str):
        def run(args):
            import importlib
            return getattr(importlib.import_module(self.module), name)(args)
        run.__name__ = name
        return run


def build_parser(only_server: bool = False) -> argparse.ArgumentParser:
    """The whole CLI; ``only_server``: the top level with the ``server``
    subcommand alone, which `kafkalite server` parses with so that its
    start-up imports none of the other commands' modules."""
    parser = _Parser(
        prog="kafkalite", description="kafkalite: Kafka's model on one host. Run a broker, "
                                      "manage topics, produce and consume, inspect data files.")
    parser.add_argument("--version", action="version", version=f"kafkalite {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    server = sub.add_parser("server", help="run a broker (supervisor + partition workers)",
                            description="Run a kafkalite broker until SIGTERM or Ctrl-C. With no "
                                        "options: data in ./kafkalite-data, native protocol on "
                                        "127.0.0.1:7092, ingest on 7091, workers on 7100+, "
                                        "Prometheus metrics and health on 9404, one "
                                        "worker per core. Flags override --config (TOML).")
    server.add_argument("--config", metavar="FILE", action="append",
                        help="TOML config file (repeatable: a later file's settings override "
                             "an earlier one's)")
    server.add_argument("--data-dir", help="where topics and metadata live (default ./kafkalite-data)")
    server.add_argument("--host", help="interface to bind (default 127.0.0.1)")
    server.add_argument("--advertised-host", help="host clients are told to connect to")
    server.add_argument("--workers", type=int, help="partition worker processes (0: one per core)")
    server.add_argument("--port", type=int, help="native protocol port (0: any free port)")
    server.add_argument("--ingest-port", type=int, help="plain ZeroMQ ingest port (0: any; -1: off)")
    server.add_argument("--worker-base-port", type=int, help="worker i listens on this + i (0: any)")
    server.add_argument("--kafka-port", type=int,
                        help="Kafka wire protocol port of the supervisor (0: any free port)")
    server.add_argument("--kafka-worker-base-port", type=int,
                        help="worker i serves Kafka clients on this + i (0: any)")
    server.add_argument("--metrics-port", type=int,
                        help="HTTP port of Prometheus metrics (/metrics) and health (/health) "
                             "(default 9404; 0: any free port; -1: off)")
    server.add_argument("--schema-registry-port", type=int,
                        help="HTTP port of the schema registry (Confluent's REST API; "
                             "default 8081; 0: any free port; -1: off)")
    server.add_argument("--rest-proxy-port", type=int,
                        help="HTTP port of the REST proxy (Confluent REST Proxy's v3 and v2 "
                             "consumer API; default 8082; 0: any free port; -1: off)")
    server.add_argument("--console", action=argparse.BooleanOptionalAction, default=True,
                        help="serve the web console on the metrics port, at /console/ "
                             "(default: on)")
    server.add_argument("--log-level", metavar="LEVEL",
                        help="DEBUG, INFO (topic, config, group, worker and recovery events), "
                             "WARNING or ERROR (default: $KAFKALITE_LOG_LEVEL, else WARNING)")
    server.add_argument("--auto-create-topics", action=argparse.BooleanOptionalAction, default=None,
                        help="create unknown topics when a client asks for them (default: on)")
    server.add_argument("--default-partitions", type=int,
                        help="partitions of auto-created topics and of topics created without a "
                             "count (default 1)")
    server.add_argument("--default-replication-factor", type=int,
                        help="replicas (on distinct workers) of topics created without a "
                             "replication factor (default 1)")
    server.add_argument("--replica-lag-time-max-ms", type=int,
                        help="a follower not caught up for this long leaves the ISR "
                             "(default 30000)")
    server.add_argument("--auto-leader-rebalance", action=argparse.BooleanOptionalAction,
                        default=None, help="give leaderships back to the preferred replicas "
                                           "(default: on)")
    server.add_argument("--broker-session-timeout-ms", type=int,
                        help="a worker whose loop is silent this long (hung, stopped) loses "
                             "its leaderships (default 6000)")
    server.add_argument("--group-initial-rebalance-delay-ms", type=int,
                        help="a new consumer group's first rebalance waits this long for more "
                             "members (default 3000, as Kafka; test servers use 0)")
    server.add_argument("--leader-imbalance-check-interval-seconds", type=int,
                        help="how often leaderships are checked for that (default 30)")
    server.add_argument("--cluster", metavar="POSTGRESQL_URL",
                        help="keep cluster metadata (topics, leaders, ISR) and the controller "
                             "lease in this PostgreSQL database instead of the data dir, e.g. "
                             "postgresql://user@host/db; nodes given the same one form a "
                             "cluster (the first is its controller, the others broker nodes)")
    server.add_argument("--node-id", type=int, help="this node's id in the cluster (default 1)")
    server.add_argument("--controller-lease-ms", type=int,
                        help="with --cluster: the controller lease's length; a node that cannot "
                             "renew it for this long loses it (default 10000)")
    server.add_argument("--kafka-security-protocol",
                        choices=["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"],
                        help="security of the Kafka listener (supervisor and workers) when "
                             "--listeners is not given, as Kafka's security.protocol (default "
                             "PLAINTEXT)")
    server.add_argument("--listeners", metavar="NAME://HOST:PORT,...",
                        help="named Kafka listeners, as Kafka's listeners (e.g. "
                             "PLAINTEXT://127.0.0.1:9092,SASL_SSL://0.0.0.0:9093); the port is "
                             "the supervisor's, workers take --kafka-worker-base-port + i on the "
                             "first and any free port on the others; clients are told the "
                             "endpoints of the listener they connected to")
    server.add_argument("--advertised-listeners", metavar="NAME://HOST:PORT,...",
                        help="the host told to each listener's clients (the port told is the one "
                             "listened on)")
    server.add_argument("--listener-security-protocol-map", metavar="NAME:PROTOCOL,...",
                        help="each listener's protocol (default: a listener named after a "
                             "protocol speaks it)")
    server.add_argument("--ssl-certfile", metavar="PEM",
                        help="the listeners' TLS certificate (chain), PEM (ssl.keystore)")
    server.add_argument("--ssl-keyfile", metavar="PEM",
                        help="its private key, PEM (default: in --ssl-certfile)")
    server.add_argument("--ssl-cafile", metavar="PEM",
                        help="CA certificates clients' certificates are checked against "
                             "(ssl.truststore), for --ssl-client-auth")
    server.add_argument("--ssl-client-auth", choices=["required", "requested", "none"],
                        help="mutual TLS: ask for client certificates (default none)")
    server.add_argument("--sasl-enabled-mechanisms", metavar="LIST",
                        help="comma-separated: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 (default all)")
    server.add_argument("--sasl-users-file", metavar="FILE",
                        help="SASL credentials, written by `kafkalite users` "
                             "(default <data-dir>/sasl-users.json)")
    server.add_argument("--native-curve-secret-key-file", metavar="FILE",
                        help="CURVE on the native ports and the ingest gateway: this server's "
                             "key pair, a .key_secret file of `kafkalite curve keygen`")
    server.add_argument("--native-curve-authorized-keys", metavar="PATH",
                        help="with CURVE: the clients' public keys and principals, a directory "
                             "of .key files or a file of '<Z85 key> User:<name>' lines")
    server.set_defaults(func=_server)
    if only_server:
        return parser

    from kafkalite.cli import streams as streams_app
    from kafkalite.tools import dump_log, verify

    curve = sub.add_parser(
        "curve", help="make CURVE key pairs (native protocol encryption and authentication)",
        description="Make a CURVE key pair with zmq.curve_keypair: NAME.key (the public key, "
                    "to hand out; the server's goes to its clients as curve.server.key, a "
                    "client's into the server's --native-curve-authorized-keys directory) and "
                    "NAME.key_secret (the pair, mode 0600: the server's "
                    "--native-curve-secret-key-file, or a client's curve.secret.key).")
    csub = curve.add_subparsers(dest="action", required=True)
    k = csub.add_parser("keygen", help="write NAME.key and NAME.key_secret")
    k.add_argument("name", help="the key's name (file names; default principal User:NAME)")
    k.add_argument("--dir", default=".", help="where to write them (default .)")
    k.add_argument("--principal", help="the principal the server maps the key to "
                                       "(default User:NAME)")
    curve.set_defaults(func=_curve)

    from kafkalite.cli import users as users_cmd
    users = sub.add_parser(
        "users", help="add, list, delete SASL users (PLAIN, SCRAM-SHA-256/512)",
        description=users_cmd.DESCRIPTION)
    users_cmd.add_arguments(users)
    users.set_defaults(func=users_cmd.run)

    topics = sub.add_parser("topics", help="create, list, describe, alter, delete topics; elect "
                                           "leaders, reassign replicas")
    tsub = topics.add_subparsers(dest="action", required=True)
    t = tsub.add_parser("create", help="create a topic")
    topic_arg(t)
    t.add_argument("--if-not-exists", action="store_true",
                   help="succeed quietly if the topic exists already")
    t.add_argument("--partitions", type=int, default=-1, help="default: the server's default")
    t.add_argument("--replication-factor", type=int, default=-1)
    t.add_argument("--config", action="append", metavar="NAME=VALUE", help="topic config (repeatable)")
    t = tsub.add_parser("list", help="list topic names")
    output_arg(t)
    t = tsub.add_parser("describe", help="partitions, leaders, replicas, in-sync replicas, "
                                         "config overrides, and per partition the log start "
                                         "offset, the end offset (high watermark), the records "
                                         "between them and the leader's size on disk in bytes",
                        description="Records counts the offsets between the start and end "
                                    "offsets: records removed by compaction and transaction "
                                    "markers are counted too.")
    topic_arg(t, required=False, text="the topic (default: every topic)")
    output_arg(t)
    t.add_argument("--under-replicated-partitions", action="store_true",
                   help="only partitions whose in-sync replicas are fewer than their replicas")
    t.add_argument("--unavailable-partitions", action="store_true",
                   help="only partitions without a live leader")
    t = tsub.add_parser("elect-leaders", help="elect the preferred (or, unclean, any live) "
                                              "replica as leader, as kafka-leader-election.sh")
    topic_arg(t, required=False, text="default: every topic")
    t.add_argument("--partition", type=int, action="append",
                   help="partition to elect for (repeatable; default: all of the topic)")
    t.add_argument("--election-type", choices=["preferred", "unclean"], default="preferred")
    t = tsub.add_parser("reassign", help="move a partition's replicas to other workers (the "
                                          "data is copied before the old replicas are dropped)")
    topic_arg(t)
    t.add_argument("--partition", type=int, required=True)
    group = t.add_mutually_exclusive_group(required=True)
    group.add_argument("--replicas", help="the new replicas, comma-separated broker ids, "
                                          "the preferred leader first")
    group.add_argument("--cancel", action="store_true", help="cancel a reassignment under way")
    t = tsub.add_parser("reassignments", help="reassignments under way")
    topic_arg(t, required=False, text="default: every topic")
    t = tsub.add_parser("alter", help="add partitions or change configs")
    topic_arg(t)
    t.add_argument("--partitions", type=int, help="new total partition count")
    t.add_argument("--config", action="append", metavar="NAME=VALUE")
    t.add_argument("--delete-config", action="append", metavar="NAME")
    t = tsub.add_parser("delete", help="delete a topic and its data")
    topic_arg(t)
    t.add_argument("--if-exists", action="store_true",
                   help="succeed quietly if there is no such topic")
    for p in tsub.choices.values():
        client_args(p)
        client_properties(p)
    topics.set_defaults(func=_Commands("kafkalite.cli.topics").topics)

    prod = sub.add_parser("produce", help="send stdin lines to a topic, one record per line",
                          description="Send stdin lines to a topic, one record per line, like "
                                      "kafka-console-producer. On an error, the records written "
                                      "before it are counted in the error line.")
    topic_arg(prod)
    prod.add_argument("--key-separator", help="split each line into key and value at this string")
    prod.add_argument("--property", action="append", metavar="NAME=VALUE",
                      help="kafka-console-producer's: parse.key=true (key and value split at "
                           "key.separator, default a tab), key.separator=SEP")
    prod.add_argument("-p", "--partition", type=int, default=-1,
                      help="the partition (default: by key, else spread)")
    prod.add_argument("--acks", default="1", choices=["0", "1", "-1", "all"])
    prod.add_argument("--compression", default="none",
                      choices=["none", "gzip", "snappy", "lz4", "zstd"])
    prod.add_argument("--linger-ms", type=int, default=5)
    prod.add_argument("--header", action="append", metavar="NAME=VALUE", help="repeatable")
    client_args(prod)
    client_properties(prod, "--producer-property")
    prod.set_defaults(func=_Commands("kafkalite.cli.produce").produce)

    cons = sub.add_parser(
        "consume", help="print a topic's records",
        description="Print a topic's records, like kafka-console-consumer and kcat -C. SIGINT "
                    "and SIGTERM close the consumer (a group member commits and leaves its "
                    "group) and exit 0.")
    topic_arg(cons)
    cons.add_argument("--from-beginning", action="store_true",
                      help="start at the log start (as -o earliest); with --group, where the "
                           "group has no committed offset")
    cons.add_argument("--group", help="consume as a member of this consumer group (resumes from "
                                      "its committed offsets, commits as it goes; assignors "
                                      "range,cooperative-sticky, as Kafka's consumer)")
    cons.add_argument("-p", "--partition", type=int, help="only this partition")
    cons.add_argument("-o", "--offset", metavar="OFFSET",
                      help="where to start: earliest, latest, N (absolute; needs --partition), -N (N records before the end of each "
                           "partition), @MS (the first record at or after this timestamp, "
                           "ms since the epoch)")
    cons.add_argument("-e", "--exit", dest="exit_at_end", action="store_true",
                      help="exit once every partition was read to the end offset it had "
                           "when the command started reading it (kcat -e)")
    cons.add_argument("-c", "--max-messages", type=int, help="exit after this many records")
    cons.add_argument("--timeout-ms", type=int, help="exit after this long without a message")
    cons.add_argument("-f", "--format", metavar="FORMAT",
                      help="kcat's format string: %%s value, %%S value size, %%k key, %%K key "
                           "size, %%t topic, %%p partition, %%o offset, %%T timestamp (ms), "
                           "%%h headers (k=v,...), %%%%; \\n \\t \\r escapes; no newline "
                           "is added, e.g. -f '%%k %%s %%o\\n'")
    output_arg(cons)
    cons.add_argument("--property", action="append", metavar="NAME=VALUE",
                      help="kafka-console-consumer's: print.key, print.timestamp, print.offset, "
                           "print.partition, print.headers, print.value (true|false), "
                           "key.separator, line.separator, headers.separator, null.literal")
    cons.add_argument("--print-key", action="store_true")
    cons.add_argument("--print-headers", action="store_true")
    cons.add_argument("--print-timestamp", action="store_true")
    cons.add_argument("--print-partition", action="store_true")
    cons.add_argument("--print-offset", action="store_true")
    client_args(cons)
    client_properties(cons, "--consumer-property")
    cons.set_defaults(func=_Commands("kafkalite.cli.consume").consume)

    groups = sub.add_parser("groups", help="list, describe, reset offsets of, delete consumer groups",
                            description="Consumer groups, like kafka-consumer-groups.")
    gsub = groups.add_subparsers(dest="action", required=True)
    g = gsub.add_parser("list", help="group ids and states")
    output_arg(g)
    g = gsub.add_parser("describe", help="committed offset, log end and lag per partition "
                                         "(or --members, --state)")
    g.add_argument("group", nargs="?")
    g.add_argument("--all-groups", action="store_true", help="every group")
    g.add_argument("--members", action="store_true",
                   help="the members: id, instance id, host, client id, partitions")
    g.add_argument("--state", action="store_true",
                   help="the group: coordinator, assignment strategy, state, member count")
    g.add_argument("--verbose", action="store_true",
                   help="with --state: the group's type (classic or consumer) and, for "
                        "KIP-848 groups, its epoch and target assignment epoch; with "
                        "--members: each member's epoch, current and target assignment, and "
                        "whether it speaks the consumer protocol (UPGRADED)")
    output_arg(g)
    g = gsub.add_parser("reset-offsets", help="set a group's committed offsets (dry run unless "
                                              "--execute; refused while it has members)")
    g.add_argument("group")
    g.add_argument("--topic", action="append", metavar="TOPIC",
                   help="topic to reset (repeatable; default: every topic with committed offsets)")
    how = g.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="to each partition's log start")
    how.add_argument("--to-latest", action="store_true", help="to each partition's log end")
    how.add_argument("--to-current", action="store_true",
                     help="to the committed offset (the log end where none is)")
    how.add_argument("--to-datetime", metavar="ISO8601",
                     help="to the first offset at or after this time (UTC unless a zone is given)")
    how.add_argument("--by-duration", metavar="DURATION",
                     help="to the first offset at or after this long ago (ISO 8601: PT1H, P1D)")
    how.add_argument("--to-offset", type=int, metavar="N", help="to offset N (clamped to the log)")
    how.add_argument("--shift-by", type=int, metavar="N",
                     help="move the committed offset by N (negative: back)")
    how.add_argument("--from-file", metavar="CSV",
                     help="to the offsets in a file of topic,partition,offset lines (as "
                          "--export prints)")
    g.add_argument("--export", action="store_true",
                   help="print the plan as topic,partition,offset lines")
    g.add_argument("--execute", action="store_true", help="apply (default: only show the plan)")
    g = gsub.add_parser("delete-offsets", help="delete a group's committed offsets of topics "
                                               "it no longer consumes")
    g.add_argument("group")
    g.add_argument("--topic", action="append", required=True, metavar="TOPIC[:P,P]",
                   help="topic (or TOPIC:0,1 for some partitions; repeatable)")
    g = gsub.add_parser("delete", help="delete a group and its committed offsets (refused while "
                                       "it has members)")
    g.add_argument("group")
    for p in gsub.choices.values():
        client_args(p)
        client_properties(p)
    groups.set_defaults(func=_Commands("kafkalite.cli.groups").groups)

    shares = sub.add_parser("share-groups",
                            help="list, describe, reset offsets of, delete share groups",
                            description="Share groups (KIP-932), like kafka-share-groups.")
    ssub = shares.add_subparsers(dest="action", required=True)
    g = ssub.add_parser("list", help="share group ids and states")
    output_arg(g)
    g = ssub.add_parser("describe", help="the group's members with their partitions, and per "
                                         "partition its start offset and lag")
    g.add_argument("group", nargs="?")
    g.add_argument("--group", dest="group_opt", metavar="GROUP", help="the group (or positional)")
    show = g.add_mutually_exclusive_group()
    show.add_argument("--members", action="store_true", help="only the members")
    show.add_argument("--offsets", action="store_true",
                      help="only the partitions: START-OFFSET (the share-partition start "
                           "offset: every record before it is done) and LAG (log end - start); "
                           "with --output json, these rows instead of the members")
    output_arg(g)
    g = ssub.add_parser("reset-offsets", help="set the share-partitions' start offsets (dry run "
                                              "unless --execute; refused while the group has "
                                              "members)")
    g.add_argument("group", nargs="?")
    g.add_argument("--group", dest="group_opt", metavar="GROUP", help="the group (or positional)")
    g.add_argument("--topic", action="append", metavar="TOPIC[:P,P]",
                   help="topic to reset, or TOPIC:0,1 for some partitions (repeatable; "
                        "default: every partition the group has state for)")
    how = g.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="to each partition's log start")
    how.add_argument("--to-latest", action="store_true", help="to each partition's log end")
    how.add_argument("--to-offset", type=int, metavar="N", help="to offset N (clamped to the log)")
    how.add_argument("--to-datetime", metavar="ISO8601",
                     help="to the first offset at or after this time (UTC unless a zone is given)")
    run = g.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only show the plan (the default)")
    run.add_argument("--execute", action="store_true", help="apply the plan")
    g = ssub.add_parser("delete", help="delete a share group and the state of its partitions "
                                       "(refused while it has members)")
    g.add_argument("group")
    for p in ssub.choices.values():
        client_args(p)
        client_properties(p)
    shares.set_defaults(func=_Commands("kafkalite.cli.share_groups").share_groups)

    configs = sub.add_parser("configs", help="describe and alter topic configs",
                             description="Topic configs, like kafka-configs --entity-type topics.")
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
    configs.set_defaults(func=_Commands("kafkalite.cli.configs").configs)

    quotas = sub.add_parser(
        "client-quotas", help="describe and alter client quotas per user, client id and IP",
        description="Client quotas, like kafka-configs --entity-type users/clients/ips: "
                    "producer_byte_rate and consumer_byte_rate (bytes/s) and request_percentage "
                    "(percent of one broker thread), for a user, a client id, both, or their "
                    "defaults. The most specific quota set for a client applies (Kafka's order: "
                    "user+client, user+default client, user, default user+client, ..., "
                    "default client). connection_creation_rate (new connections/s each broker "
                    "accepts from one IP; KIP-612) for an IP (--ip) or every IP without its "
                    "own (--ip-defaults); an IP entity has no user or client part.")
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
    quotas.set_defaults(func=_Commands("kafkalite.cli.client_quotas").client_quotas)

    clus = sub.add_parser("cluster", help="cluster id, controller, brokers and listeners")
    clsub = clus.add_subparsers(dest="action", required=True)
    c = clsub.add_parser("info", help="cluster id, controller, brokers (DescribeCluster) and the "
                                      "server's listeners (from its server.json)")
    c.add_argument("--data-dir", default="./kafkalite-data",
                   help="where to find the server's server.json for its listeners "
                        "(default ./kafkalite-data)")
    output_arg(c)
    client_args(c)
    client_properties(c)
    clus.set_defaults(func=_Commands("kafkalite.cli.cluster").cluster)

    txns = sub.add_parser("transactions", help="list, describe, find hanging and abort "
                                               "transactions",
                          description="Transactions, like kafka-transactions.")
    xsub = txns.add_subparsers(dest="action", required=True)
    x = xsub.add_parser("list", help="transactional ids, their producer ids and states")
    x.add_argument("--state", action="append", metavar="STATE",
                   help="only this state (repeatable): Empty, Ongoing, PrepareCommit, ...")
    x = xsub.add_parser("describe", help="a transactional id's state, producer and partitions")
    x.add_argument("transactional_id")
    x = xsub.add_parser("describe-producers", help="the producers with state in partitions "
                                                   "(and their open transactions)")
    x.add_argument("--topic", required=True)
    x.add_argument("--partition", type=int, action="append",
                   help="partition (repeatable; default: all)")
    x = xsub.add_parser("find-hanging", help="open transactions no coordinator will end")
    x.add_argument("--topic", action="append", help="topic to search (repeatable; default: all)")
    x.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                   help="transactions open longer than this are suspects (default: 15, "
                        "the server's transaction_max_timeout_ms)")
    x = xsub.add_parser("abort", help="end a hanging transaction in one partition with an "
                                      "ABORT marker")
    x.add_argument("--topic", required=True)
    x.add_argument("--partition", type=int, required=True)
    x.add_argument("--start-offset", type=int,
                   help="the open transaction's first offset (finds its producer)")
    x.add_argument("--producer-id", type=int)
    x.add_argument("--producer-epoch", type=int)
    x.add_argument("--coordinator-epoch", type=int, default=0)
    for p in xsub.choices.values():
        client_args(p)
    txns.set_defaults(func=_Commands("kafkalite.cli.transactions").transactions)

    dr = sub.add_parser("delete-records", help="delete a partition's records before an offset "
                                               "(move its log start offset)",
                        description="Delete records, like kafka-delete-records: every record "
                                    "before --offset becomes unreadable and its segments go.")
    topic_arg(dr, required=False, text="the topic (or give --offset-json-file)")
    dr.add_argument("--partition", type=int, action="append",
                    help="partition (repeatable; default: all of the topic's)")
    dr.add_argument("--offset", type=int,
                    help="delete the records before this offset (-1: all, up to the high "
                         "watermark)")
    dr.add_argument("--offset-json-file", metavar="FILE",
                    help='kafka-delete-records.sh\'s format: {"partitions": [{"topic": "t", '
                         '"partition": 0, "offset": 5}], "version": 1}')
    client_args(dr)
    dr.set_defaults(func=_Commands("kafkalite.cli.delete_records").delete_records)

    demo = sub.add_parser("demo", help="append records to a local partition log and read them "
                                       "back (no server needed)")
    demo.add_argument("--data-dir",
                      help="where the log is kept (default: a temporary directory, removed "
                           "at the end)")
    demo.add_argument("--topic", default="demo", help="topic name (default: demo)")
    demo.add_argument("--records", type=int, default=1_000_000,
                      help="records to append (default: 1,000,000)")
    demo.add_argument("--batch-size", type=int, default=1000,
                      help="records per batch (default: 1000)")
    demo.add_argument("--value-bytes", type=int, default=100,
                      help="bytes per record value (default: 100)")
    demo.add_argument("--compression", default="none",
                      choices=["none", "gzip", "snappy", "lz4", "zstd"])
    demo.add_argument("--segment-bytes", type=int, default=64 << 20,
                      help="segment.bytes of the demo topic (default: 64 MiB)")
    demo.set_defaults(func=_demo)

    dump = sub.add_parser("dump-log", help=dump_log.DESCRIPTION,
                          description=dump_log.DESCRIPTION)
    dump_log.add_arguments(dump)
    dump.set_defaults(func=dump_log.run)

    ver = sub.add_parser("verify", help=verify.DESCRIPTION, description=verify.DESCRIPTION)
    verify.add_arguments(ver)
    ver.set_defaults(func=verify.run)

    streams = sub.add_parser("streams", help="describe or reset a Streams application",
                             description=streams_app.DESCRIPTION)
    streams_app.add_arguments(streams, client_args)
    streams.set_defaults(func=streams_app.run)

    from kafkalite.cli import health as health_cmd
    health = sub.add_parser("health", help=health_cmd.DESCRIPTION,
                            description=health_cmd.DESCRIPTION)
    health_cmd.add_arguments(health, client_args)
    health.set_defaults(func=health_cmd.run)

    from kafkalite.cli import connect as connect_cmd
    conn = sub.add_parser("connect", help="run a Kafka Connect worker (standalone or distributed)",
                          description=connect_cmd.DESCRIPTION)
    connect_cmd.add_arguments(conn, client_args)
    conn.set_defaults(func=connect_cmd.run)

    from kafkalite.cli import mirror as mirror_cmd
    mirror = sub.add_parser("mirror", help="mirror topics and group offsets to another cluster "
                                           "(MirrorMaker 2)", description=mirror_cmd.DESCRIPTION)
    mirror_cmd.add_arguments(mirror)
    mirror.set_defaults(func=mirror_cmd.run)

    from kafkalite.cli import schemas as schemas_cmd
    schemas = sub.add_parser("schemas", help="register, list, get, check, delete schemas in "
                                             "the schema registry",
                             description=schemas_cmd.DESCRIPTION)
    schemas_cmd.add_arguments(schemas)
    schemas.set_defaults(func=schemas_cmd.run)

    from kafkalite.cli import acls as acls_cmd
    acls = sub.add_parser("acls", help="add, list, remove ACLs (as kafka-acls.sh)",
                          description=acls_cmd.DESCRIPTION)
    acls_cmd.add_arguments(acls)
    acls.set_defaults(func=acls_cmd.run)

    from kafkalite.cli import bench as bench_cli
    bench = sub.add_parser("bench", help=bench_cli.DESCRIPTION, description=bench_cli.DESCRIPTION)
    bench_cli.add_arguments(bench)
    bench.set_defaults(func=bench_cli.run)
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
    parser = build_parser(only_server=(sys.argv[1:] if argv is None else argv)[:1] == ["server"])
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
