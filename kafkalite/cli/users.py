"""``kafkalite users add|list|delete``: the SASL users of a server's Kafka listeners.

Three ways to the one store (server/auth/credentials.py):

- by default, the credentials file itself (``--data-dir``, ``--users-file``),
  edited under its lock (``credentials.update_users``), for PLAIN and SCRAM
  users, with or without the server running. A cluster node's file is a
  mirror of the cluster's users in PostgreSQL, rewritten by the node
  (cluster_store.UsersMirror): an edit there would be lost, so it is refused
  with a line naming the two ways below;
- with ``--cluster DSN``, the cluster's users in PostgreSQL, for PLAIN and
  SCRAM users (the only way to a cluster's PLAIN users): the same edit as
  on the file, a read-modify-write of the row under its row lock
  (``cluster_store.update_users``); every node's mirror follows at once;
- with ``--bootstrap-server``, over Kafka's protocol, as ``kafka-configs
  --entity-type users --alter --add-config 'SCRAM-SHA-256=[password=...]'``
  does: AlterUserScramCredentials / DescribeUserScramCredentials (KIP-554)
  on a connection of its own (client/blocking_kafka_client.py), sending a salt and the
  salted password, never the password. SCRAM only (Kafka has no API for PLAIN
  users). It logs in as ``kafkalite acls`` does (``--command-config``, or
  ``--security-protocol`` / ``--sasl-*``); with the authorizer on, the
  principal needs Alter on the Cluster (Describe to list).

Who calls: the ``kafkalite`` process (cli/__init__.py's parser and main).
"""
from __future__ import annotations

import os
import sys

from kafkalite.errors import InvalidConfigurationError, KafkaError, error_for_code
from kafkalite.cli.acls import add_login_arguments

DESCRIPTION = ("Add, list or delete the SASL users of a server's Kafka listeners "
               "(--kafka-security-protocol SASL_PLAINTEXT or SASL_SSL). SCRAM users are kept as "
               "salted StoredKey/ServerKey, PLAIN ones as a PBKDF2 hash: never the password. By "
               "default the credentials file is edited (a running server picks changes up at the "
               "next login); with --bootstrap-server, SCRAM users are managed over Kafka's "
               "protocol (AlterUserScramCredentials, like kafka-configs --entity-type users). A "
               "cluster's users (kafkalite server --cluster) live in its PostgreSQL: manage them "
               "with --bootstrap-server or --cluster DSN; a node's file only mirrors them.")
HELP = "add, list, delete SASL users (PLAIN, SCRAM-SHA-256/512)"


def add_arguments(users) -> None:
    usub = users.add_subparsers(dest="action", required=True)
    for action, text in (("add", "add a user or change its password"),
                         ("delete", "delete a user (or only its --mechanism credentials)"),
                         ("list", "user names and their mechanisms")):
        u = usub.add_parser(action, help=text)
        if action != "list":
            u.add_argument("user")
            u.add_argument("--mechanism", action="append",
                           choices=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
                           help="repeatable (default: every mechanism; with --bootstrap-server "
                                "both SCRAM ones)")
        if action == "add":
            u.add_argument("--password", help="default: one line read from stdin")
            u.add_argument("--iterations", type=int, default=4096,
                           help="SCRAM and PLAIN hash iterations (default 4096; the server "
                                "takes 4096-16384 over --bootstrap-server, as Kafka)")
        u.add_argument("--data-dir", default="./kafkalite-data",
                       help="the server's data directory (default ./kafkalite-data)")
        u.add_argument("--users-file", help="the server's --sasl-users-file, if it set one")
        u.add_argument("--bootstrap-server", metavar="HOST:PORT",
                       help="manage SCRAM users over Kafka's protocol through this Kafka "
                            "listener instead of editing the file")
        u.add_argument("--cluster", metavar="DSN",
                       help="a cluster's users (kafkalite server --cluster): edit them in "
                            "its PostgreSQL instead of a node's file, which only mirrors them")
        add_login_arguments(u, "with --bootstrap-server: client properties "
                               "(security.protocol, sasl.mechanism, sasl.jaas.config, ssl.*), "
                               "as kafka-configs takes",
                            "how this command logs in (not the user's --mechanism)")


def run(args) -> int:
    if args.bootstrap_server and args.cluster:
        raise InvalidConfigurationError("give --bootstrap-server or --cluster, not both")
    if args.bootstrap_server:
        return _over_kafka(args)
    if args.cluster:
        return _in_cluster(args)
    return _in_file(args)


def _password(args) -> str:
    password = args.password
    if password is None:
        password = sys.stdin.readline().rstrip("\n")
    if not password:
        raise KafkaError("the password is empty (give --password, or one line on stdin)")
    return password


def _in_file(args) -> int:
    # imported here, not at the top: every `kafkalite` command imports this
    # module to build its parser, and these take tens of ms
    from kafkalite.server.auth import credentials
    path = credentials.users_file(args.data_dir, args.users_file or "")
    if args.action != "list" and credentials.mirrored_cluster(path) is not None:
        raise InvalidConfigurationError(
            f"{path} mirrors the SASL users of a cluster, kept in its PostgreSQL (the node "
            f"rewrites this file): give --bootstrap-server HOST:PORT (SCRAM users, through any "
            f"node) or --cluster DSN")
    return _edit(args, path, lambda: credentials.read_users(path),
                 lambda change: credentials.update_users(path, change))


def _in_cluster(args) -> int:
    try:
        import psycopg
        from kafkalite.server.controller import cluster_store
    except ImportError as exc:
        raise InvalidConfigurationError(
            f"--cluster needs psycopg 3 ({exc}): pip install 'kafkalite[cluster]'") from None
    conn = cluster_store.connect(args.cluster, args.timeout)
    try:
        if args.action != "list":
            # as a node starting on an empty database would (its first
            # node's own users are then not taken: the row exists)
            cluster_store.create_schema(conn)

        def read() -> dict:
            got = cluster_store.read_users(conn)
            return {} if got is None else got[0]
        return _edit(args, "the cluster's PostgreSQL", read,
                     lambda change: cluster_store.update_users(conn, change))
    except psycopg.errors.UndefinedTable:
        raise KafkaError("no kafkalite cluster in that database (no kafkalite_users table)") \
            from None
    except psycopg.Error as exc:
        raise KafkaError(f"the cluster's PostgreSQL: {exc}".strip().splitlines()[0]) from None
    finally:
        conn.close()


def _edit(args, where: str, read, update) -> int:
    """list, delete or add on a store: ``read()`` the users, ``update(change)``
    them (credentials.update_users's contract)."""
    from kafkalite.server.auth import credentials
    if args.action == "list":
        users = read()
        for name in sorted(users):
            print(f"{name}\t{','.join(sorted(users[name]))}")
        return 0
    mechanisms = args.mechanism or list(credentials.MECHANISMS)
    if args.action == "delete":
        def delete(users: dict) -> None:
            entry = users.get(args.user)
            if entry is None:
                raise KafkaError(f"no SASL user {args.user!r} in {where}")
            for m in mechanisms:
                entry.pop(m, None)
            if not entry or not args.mechanism:
                users.pop(args.user)
        update(delete)
        print(f"deleted {args.user} ({', '.join(mechanisms)}) from {where}")
        return 0
    credentials.check_user_name(args.user)
    password = _password(args)
    # hashed before the lock is taken: 4096+ iterations each
    made = {m: credentials.make_credential(m, password, args.iterations) for m in mechanisms}
    update(lambda users: users.setdefault(args.user, {}).update(made))
    print(f"added {args.user} ({', '.join(mechanisms)}) to {where}")
    return 0


def _over_kafka(args) -> int:
    from kafkalite.client.blocking_kafka_client import BlockingKafkaClient, parse_servers
    from kafkalite.server.auth import credentials
    from kafkalite.protocol import ApiKey
    from kafkalite.cli.acls import client_config
    chosen = getattr(args, "mechanism", None)       # list has no --mechanism
    mechanisms = chosen or list(credentials.SCRAM_MECHANISMS)
    if "PLAIN" in mechanisms:
        raise InvalidConfigurationError(
            "PLAIN users cannot be managed over Kafka's protocol (Kafka has no API for them); "
            "leave out --bootstrap-server to edit the server's credentials file")
    password = _password(args) if args.action == "add" else ""
    # not confluent-kafka's AdminClient: librdkafka (2.12) corrupts its heap
    # reading a DescribeUserScramCredentials answer with a top-level error
    # (what Kafka answers a principal without Describe on the Cluster)
    conf = client_config(args)
    host, port = parse_servers(conf["bootstrap.servers"])[0]
    conn = BlockingKafkaClient(host, port, conf, "kafkalite-users", args.timeout)
    timeout = args.timeout
    try:
        if args.action == "list" or (args.action == "delete" and not chosen):
            named = None if args.action == "list" else [{"name": args.user}]
            answer = conn.send(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0, {"users": named},
                               timeout)
            _raise_for(answer["error_code"], answer["error_message"])
            if args.action == "list":
                for r in sorted(answer["results"], key=lambda r: r["user"]):
                    print(f"{r['user']}\t" + ",".join(
                        f"{credentials.SCRAM_MECHANISM_TYPES.get(c['mechanism'], c['mechanism'])}"
                        f"(iterations={c['iterations']})" for c in r["credential_infos"]))
                return 0
            result, = answer["results"]
            _raise_for(result["error_code"], result["error_message"])
            mechanisms = [credentials.SCRAM_MECHANISM_TYPES[c["mechanism"]]
                          for c in result["credential_infos"]]
        deletions, upsertions = [], []
        for m in mechanisms:
            if args.action == "delete":
                deletions.append({"name": args.user, "mechanism": credentials.SCRAM_TYPE_OF[m]})
                continue
            salt = os.urandom(credentials.SALT_BYTES)
            upsertions.append({
                "name": args.user, "mechanism": credentials.SCRAM_TYPE_OF[m],
                "iterations": args.iterations, "salt": salt,
                "salted_password": credentials.salted_password(m, password, salt,
                                                               args.iterations)})
        # one request per mechanism: Kafka refuses a user named twice in one request
        for alteration in [{"deletions": [d], "upsertions": []} for d in deletions] + [
                {"deletions": [], "upsertions": [u]} for u in upsertions]:
            for result in conn.send(ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0, alteration,
                                    timeout)["results"]:
                _raise_for(result["error_code"], result["error_message"])
    finally:
        conn.close()
    done = "deleted" if args.action == "delete" else "added"
    print(f"{done} {args.user} ({', '.join(mechanisms)}) through {args.bootstrap_server}")
    return 0


def _raise_for(code: int, message: str | None) -> None:
    if code:
        cls = error_for_code(code)
        raise cls(f"{cls.name}: {message or cls.name}")
