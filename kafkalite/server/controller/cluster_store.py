"""Cluster metadata in PostgreSQL: the controller's lease, and topics with
their partitions' replicas, leader, ISR and epochs (``--cluster DSN``).

kafkalite does not write a consensus protocol: nodes that form a cluster
share an engine users already run with high availability. PostgreSQL holds
metadata only; record data stays in each broker's segment files.

One job, the cluster's metadata in PostgreSQL: every class and function
here reads or writes its tables and depends on rules written once in it:
``connect``'s timeouts, the failure backoff, and the lease fence that the
metadata, ACL, quota, producer-id and internal-batch writes all take.

The tables, and how they are made, are cluster_schema.py's.

Rules, the roles ZooKeeper's znode versions and KRaft's epochs play:

- One node at a time is the controller: it holds the lease row. Taking the
  lease (``ControllerLease.acquire``) is allowed when it has expired by
  PostgreSQL's clock (no node's clock matters) or is this node's own from
  an earlier incarnation, and always bumps the controller epoch.
- Every metadata write (``PostgresMetadataStore.save``) is one transaction
  that first locks the lease row and checks it is still this node's, with
  this epoch, unexpired. A takeover must lock the same row, so no write of a
  deposed controller can commit after a new one took over.
- A partition row changes only if its ``partition_epoch`` is still the one
  this store last read or wrote: an update computed from stale state
  changes nothing and fails the whole transaction (NOT_CONTROLLER).
- A failed write changes nothing here either: the topics it touched are put
  back, in memory, as PostgreSQL still has them, so the controller never
  acts on state that is not durable (what the file store guarantees by
  fsyncing before acting).
- Each write notifies channel ``kafkalite_metadata`` (with the topics it
  changed) in the same transaction, so observers (``MetadataWatcher``) hear
  of it when it commits; an observer that lost its connection reloads
  everything (polling is the fallback for notifications it missed).

SASL users (``kafkalite_users``) are not fenced by the lease: every
change is a read-modify-write of the row under its row lock (``SELECT ...
FOR UPDATE``, ``update_users``), so the controller's AlterUserScramCredentials
and ``kafkalite users --cluster`` never lose each other's edits; each
notifies channel ``kafkalite_users``. Every node keeps its users file as a
mirror of the row (``UsersMirror``: written at start, and again at each
notification, on a thread of its own); the first node to start seeds the
row from its own file if the row does not exist yet. The Kafka listeners
read that file as on a single node (credentials.py), so a change reaches
every node's listeners a moment after it is stored; with PostgreSQL away
each node keeps logging users in from its last mirror.

PostgreSQL being unreachable stops metadata changes (CreateTopics and the
like answer KAFKA_STORAGE_ERROR; elections wait) and the coordinators'
writes (their internal topics' batches are written here first: commits and
transaction state answer COORDINATOR_NOT_AVAILABLE) but not the data path:
brokers keep serving the partitions they lead, as Kafka's did when
ZooKeeper was away. Calls time out after ``timeout_s`` (PostgreSQL's
statement timeout, and TCP's user timeout for a network that drops their
packets) and, after a failure, fail at once for ``RETRY_BACKOFF_S`` so
that a dead PostgreSQL does not stall the supervisor's single thread on
every request.

Who may call: the supervisor (controller.py through MetadataStore's
interface, supervisor.py for the lease), on its own thread; the lease
renews itself, and ``UsersMirror`` listens, each on a thread of its own,
with its own connection; ``kafkalite users --cluster`` calls
``update_users`` / ``read_users`` on a connection of its own.
"""
from __future__ import annotations

import json
import logging
import threading
import time

import psycopg
from psycopg.types.json import Jsonb

from kafkalite.errors import InvalidConfigurationError, KafkaStorageError, NotControllerError
from kafkalite.ratelimit import RateLimitedLog
from kafkalite.server.auth import credentials
from kafkalite.server.controller.cluster_schema import (  # noqa: F401 (create_schema: users.py, tests)
    _SCHEMA_LOCK, START_TIMEOUT_S, create_schema)
from kafkalite.server.controller.metadata import MetadataStore
from kafkalite.server.topic import INTERNAL_TOPICS

log = logging.getLogger("kafkalite.cluster")

CHANNEL = "kafkalite_metadata"
USERS_CHANNEL = "kafkalite_users"
RETRY_BACKOFF_S = 1.0
IDLE_CHECK_S = 1.0       # a store connection idle this long is checked before use
class _StaleWrite(Exception):
    """A conditional write found newer state than this store had."""


def connect(dsn: str, timeout_s: float, autocommit: bool = False) -> psycopg.Connection:
    try:
        # synchronous_commit on whatever the server's default: a metadata
        # change is acted on once committed, so it must survive a crash
        # statement_timeout is PostgreSQL's own: it cannot end a call whose
        # packets are lost (a network partition: no RST, no answer), which
        # blocked the caller until TCP gave up, many minutes later (the
        # controller's thread, holding a lease it could no longer renew).
        # tcp_user_timeout closes the connection when what was sent stays
        # unacknowledged that long; keepalives do the same for an idle one
        # (a LISTEN connection waiting for notifications).
        ms = int(timeout_s * 1000)
        return psycopg.connect(dsn, connect_timeout=max(1, int(timeout_s)), autocommit=autocommit,
                               tcp_user_timeout=ms, keepalives=1,
                               keepalives_idle=max(1, int(timeout_s)),
                               keepalives_interval=1, keepalives_count=max(1, int(timeout_s)),
                               options=f"-c statement_timeout={ms} "
                                       f"-c synchronous_commit=on")
    except psycopg.Error as exc:
        raise KafkaStorageError(f"cannot reach the cluster's PostgreSQL: {_reason(exc)}") from None


def _close_quietly(conn: psycopg.Connection | None) -> None:
    """Close a connection that may already be broken."""
    if conn is not None:
        try:
            conn.close()
        except psycopg.Error:
            pass


def _reason(exc: Exception) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__


def broker_ids(dsn: str, node_id: int, count: int, timeout_s: float = 2.0) -> list[int]:
    """The broker ids of ``node_id``'s ``count`` workers: given the first
    time a node starts with that many, the next free ids, and the same ever
    after (a replica's broker id must not change)."""
    return node_brokers(dsn, node_id, count, timeout_s)[0]


def node_brokers(dsn: str, node_id: int, count: int,
                 timeout_s: float = 2.0) -> tuple[list[int], dict[int, int]]:
    """``broker_ids``, and every broker's node, on one connection (a start's)."""
    conn = connect(dsn, timeout_s)
    try:
        create_schema(conn)
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            ids = []
            for i in range(count):
                row = conn.execute("SELECT broker_id FROM kafkalite_brokers WHERE node_id = %s "
                                   "AND idx = %s", (node_id, i)).fetchone()
                if row is None:
                    row = conn.execute(
                        "INSERT INTO kafkalite_brokers (broker_id, node_id, idx) SELECT "
                        "coalesce(max(broker_id) + 1, 0), %s, %s FROM kafkalite_brokers "
                        "RETURNING broker_id", (node_id, i)).fetchone()
                ids.append(row[0])
            nodes = dict(conn.execute("SELECT broker_id, node_id FROM kafkalite_brokers")
                         .fetchall())
            return ids, nodes
    except psycopg.Error as exc:
        raise KafkaStorageError(f"cannot reach the cluster's PostgreSQL: {_reason(exc)}") \
            from None
    finally:
        conn.close()


def read_controller(dsn: str, timeout_s: float = 2.0) -> dict | None:
    """The controller as PostgreSQL has it: node_id, epoch, live (the lease
    unexpired), endpoints, and the lease's remaining seconds by
    PostgreSQL's clock (``remaining_s``, negative once expired); None
    before any node took the lease."""
    conn = connect(dsn, timeout_s, autocommit=True)
    try:
        row = conn.execute("SELECT node_id, epoch, lease_until > now(), endpoints, "
                           "EXTRACT(EPOCH FROM lease_until - now())::float8 "
                           "FROM kafkalite_controller WHERE id = 1").fetchone()
    except psycopg.errors.UndefinedTable:
        return None
    except psycopg.Error as exc:
        raise KafkaStorageError(f"cannot reach the cluster's PostgreSQL: {_reason(exc)}") \
            from None
    finally:
        conn.close()
    if row is None:
        return None
    return {"node_id": row[0], "epoch": row[1], "live": row[2], "endpoints": row[3] or {},
            "remaining_s": row[4]}


def read_acls(dsn: str, timeout_s: float = 2.0) -> list:
    """Every ACL of the cluster, in authorizer.acls_to_json's form, for a
    node that is not the controller (a broker node's HTTP login asks them,
    broker_node.py); the controller reads them through its metadata store."""
    conn = connect(dsn, timeout_s, autocommit=True)
    try:
        row = conn.execute("SELECT acls FROM kafkalite_acls WHERE id = 1").fetchone()
    except psycopg.errors.UndefinedTable:
        return []
    except psycopg.Error as exc:
        raise KafkaStorageError(f"cannot reach the cluster's PostgreSQL: {_reason(exc)}") \
            from None
    finally:
        conn.close()
    return [] if row is None else row[0]


def read_users(conn: psycopg.Connection) -> tuple[dict, int] | None:
    """(users, version) of the ``kafkalite_users`` row; None before any
    node seeded it."""
    row = conn.execute("SELECT users, version FROM kafkalite_users WHERE id = 1").fetchone()
    return None if row is None else (row[0], row[1])


def seed_users(conn: psycopg.Connection, users: dict) -> bool:
    """Make ``users`` the cluster's if the row does not exist yet (the
    first node's own file); True if they were."""
    with conn.transaction():
        return conn.execute("INSERT INTO kafkalite_users (id, users, version) VALUES (1, %s, 1) "
                            "ON CONFLICT (id) DO NOTHING RETURNING id",
                            (Jsonb(users),)).fetchone() is not None


def update_users(conn: psycopg.Connection, change) -> tuple[object, dict, int]:
    """credentials.update_users on the row: read it under its row lock,
    ``change(users)`` in place, write it back with the next version and
    notify ``kafkalite_users``, all in one transaction (nothing is written
    if ``change`` raises). Returns (``change``'s result, users, version)."""
    with conn.transaction():
        conn.execute("INSERT INTO kafkalite_users (id, users, version) VALUES (1, '{}', 1) "
                     "ON CONFLICT (id) DO NOTHING")
        users, version = conn.execute("SELECT users, version FROM kafkalite_users WHERE id = 1 "
                                      "FOR UPDATE").fetchone()
        before = json.dumps(users, sort_keys=True)
        result = change(users)
        if json.dumps(users, sort_keys=True) != before:
            version += 1
            conn.execute("UPDATE kafkalite_users SET users = %s, version = %s WHERE id = 1",
                         (Jsonb(users), version))
            conn.execute("SELECT pg_notify(%s, %s)", (USERS_CHANNEL,
                                                      json.dumps({"version": version})))
    return result, users, version


class ControllerLease:
    """This node's claim to be the controller: a row with an epoch and an
    expiry on PostgreSQL's clock. ``acquire`` takes it if free; ``start``
    renews it every ``ttl_ms / 3`` on a thread; ``held`` says whether this
    node may still act as controller (the lease is renewed and not past
    what this node's own monotonic clock allows; a renewal that PostgreSQL
    refused, because another node took the lease, ends it for good:
    ``lost``)."""

    def __init__(self, dsn: str, node_id: int, ttl_ms: int = 10_000, timeout_s: float = 2.0):
        self.dsn, self.node_id, self.ttl_ms, self.timeout_s = dsn, node_id, ttl_ms, timeout_s
        self.epoch = 0
        self.lost = False
        self.holder: int | None = None      # who holds it, as last seen
        self._valid_until = 0.0             # monotonic: when this node must assume it expired
        self._conn: psycopg.Connection | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._warn = RateLimitedLog(log, per_interval=2, interval_s=30.0)

    def _connection(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = connect(self.dsn, self.timeout_s, autocommit=True)
            create_schema(self._conn)    # the first node of a cluster makes the tables
        return self._conn

    def _drop(self) -> None:
        _close_quietly(self._conn)
        self._conn = None

    def acquire(self) -> bool:
        """Take the lease if it has expired (or is this node's own); True
        if this node is now the controller, with a new epoch."""
        sent = time.monotonic()
        try:
            conn = self._connection()
            row = conn.execute(
                "INSERT INTO kafkalite_controller AS c (id, node_id, epoch, lease_until) "
                "VALUES (1, %(node)s, 1, now() + %(ttl)s * interval '1 millisecond') "
                "ON CONFLICT (id) DO UPDATE SET node_id = EXCLUDED.node_id, epoch = c.epoch + 1, "
                "lease_until = EXCLUDED.lease_until, endpoints = NULL "
                "WHERE c.lease_until < now() OR c.node_id = EXCLUDED.node_id "
                "RETURNING epoch", {"node": self.node_id, "ttl": self.ttl_ms}).fetchone()
            if row is None:
                self.holder = conn.execute(
                    "SELECT node_id FROM kafkalite_controller WHERE id = 1").fetchone()[0]
                return False
        except psycopg.Error as exc:
            self._drop()
            raise KafkaStorageError(f"cannot reach the cluster's PostgreSQL: {_reason(exc)}") \
                from None
        with self._lock:
            self.epoch, self.holder, self.lost = row[0], self.node_id, False
            self._valid_until = sent + self.ttl_ms / 1000.0
        log.info("node %d is the controller, epoch %d", self.node_id, self.epoch)
        return True

    def renew(self) -> bool:
        """Extend the lease; False if PostgreSQL could not be reached (the
        lease may still be valid) or refused (``lost`` is then set)."""
        sent = time.monotonic()
        row = None
        for attempt in (1, 2):
            # a connection PostgreSQL dropped (it restarted) fails once:
            # the renewal is idempotent, so try again on a new one
            try:
                row = self._connection().execute(
                    "UPDATE kafkalite_controller SET lease_until = now() + %s * interval "
                    "'1 millisecond' WHERE id = 1 AND node_id = %s AND epoch = %s "
                    "RETURNING epoch", (self.ttl_ms, self.node_id, self.epoch)).fetchone()
                break
            except (psycopg.Error, KafkaStorageError) as exc:
                self._drop()
                if attempt == 2 or isinstance(exc, KafkaStorageError):
                    self._warn.warning("node %d could not renew its controller lease: %s",
                                       self.node_id, _reason(exc))
                    return False
        with self._lock:
            if row is None:
                if not self.lost:
                    log.error("node %d lost the controller lease (epoch %d): another node "
                              "took it", self.node_id, self.epoch)
                self.lost = True
                self._valid_until = 0.0
                return False
            self._valid_until = sent + self.ttl_ms / 1000.0
        return True

    def publish(self, endpoints: dict) -> None:
        """Where other nodes' workers reach this controller (its control
        channel, relay and coordinator), stored with the lease."""
        try:
            self._connection().execute(
                "UPDATE kafkalite_controller SET endpoints = %s WHERE id = 1 AND node_id = %s "
                "AND epoch = %s", (Jsonb(endpoints), self.node_id, self.epoch))
        except psycopg.Error as exc:
            self._drop()
            raise KafkaStorageError(f"cannot reach the cluster's PostgreSQL: {_reason(exc)}") \
                from None

    @property
    def held(self) -> bool:
        with self._lock:
            return not self.lost and self.epoch > 0 and time.monotonic() < self._valid_until

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="controller-lease", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.ttl_ms / 3000.0):
            if not self.lost:
                self.renew()

    def close(self, release: bool = True) -> None:
        """Stop renewing; with ``release``, let the lease go at once so
        another node need not wait for it to expire."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout_s + 1)
        if release and self.epoch and not self.lost:
            try:
                self._connection().execute(
                    "UPDATE kafkalite_controller SET lease_until = now() - interval '1 second' "
                    "WHERE id = 1 AND node_id = %s AND epoch = %s", (self.node_id, self.epoch))
            except (psycopg.Error, KafkaStorageError):
                pass
        self._drop()


class PostgresMetadataStore(MetadataStore):
    """metadata.MetadataStore whose durable copy is in PostgreSQL (see
    the module docstring for the rules); the controller uses it exactly as
    the file store."""

    def __init__(self, dsn: str, lease: ControllerLease, timeout_s: float = 2.0):
        # no file paths: MetadataStore's methods only use topics and save()
        self.dsn, self.lease, self.timeout_s = dsn, lease, timeout_s
        self.topics = {}
        self.broker_configs = {}
        self.group_configs = {}
        self.offset = 0
        self._persisted: dict[str, dict] = {}     # as PostgreSQL has each topic
        self._conn: psycopg.Connection | None = None
        self._failed_at = 0.0
        self._used_at = 0.0
        self._load()

    # ---- connection ----------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection:
        if self._conn is not None and not self._conn.closed \
                and time.monotonic() - self._used_at > IDLE_CHECK_S:
            # PostgreSQL may have restarted since: find out before a write,
            # whose outcome would be unknown if its connection broke
            try:
                self._conn.execute("SELECT 1")
                self._conn.rollback()
            except psycopg.Error:
                self._conn.close()
        self._used_at = time.monotonic()
        if self._conn is None or self._conn.closed:
            if time.monotonic() - self._failed_at < RETRY_BACKOFF_S:
                raise KafkaStorageError("the cluster's PostgreSQL is unreachable (retrying)")
            try:
                self._conn = connect(self.dsn, self.timeout_s)
            except KafkaStorageError:
                self._failed_at = time.monotonic()
                raise
        return self._conn

    def _broken(self, exc: Exception) -> KafkaStorageError:
        self._failed_at = time.monotonic()
        _close_quietly(self._conn)
        self._conn = None
        return KafkaStorageError(f"cannot reach the cluster's PostgreSQL: {_reason(exc)}")

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._conn = None

    # ---- reading -------------------------------------------------------------------------

    def _load(self) -> None:
        conn = self._connection()
        try:
            self.cluster_id = create_schema(conn)
            (self.topics, self._persisted, self.offset, self.broker_configs,
             self.group_configs) = self._read_all(conn)
            conn.rollback()
        except psycopg.Error as exc:
            raise self._broken(exc) from None

    # what the controller keeps, in one statement (five round trips before)
    _READ_ALL = "SELECT (SELECT metadata_offset FROM kafkalite_cluster WHERE id = 1), " + ", ".join(
        f"(SELECT coalesce({agg}, '{empty}') FROM {table})" for agg, empty, table in (
            ("json_agg(json_build_array(name, topic_id, configs))", "[]", "kafkalite_topics"),
            ("json_agg(json_build_array(topic, partition, state) ORDER BY topic, partition)",
             "[]", "kafkalite_partitions"),
            ("json_object_agg(resource, configs)", "{}", "kafkalite_broker_configs"),
            ("json_object_agg(group_id, configs)", "{}", "kafkalite_group_configs")))

    def _read_all(self, conn) -> tuple[dict, dict, int, dict, dict]:
        """(topics, their raw rows, the metadata offset, broker configs,
        group configs)."""
        offset, rows, parts, broker_configs, group_configs = conn.execute(
            self._READ_ALL).fetchone()
        raw: dict[str, dict] = {name: {"topic_id": str(tid), "configs": configs, "partitions": []}
                                for name, tid, configs in rows if name not in INTERNAL_TOPICS}
        for name, index, state in parts:
            if name in raw:
                if index != len(raw[name]["partitions"]):
                    raise KafkaStorageError(f"kafkalite_partitions lacks {name}-"
                                            f"{len(raw[name]['partitions'])}")
                raw[name]["partitions"].append(state)
        return ({name: self._topic(name, t) for name, t in raw.items()}, raw, offset,
                {resource: dict(configs) for resource, configs in broker_configs.items()},
                {group: dict(configs) for group, configs in group_configs.items()})

    def reload(self, names=None) -> None:
        """Read the topics named (all if None) back from PostgreSQL: after
        a notification, or after a write was refused as stale."""
        try:
            conn = self._connection()
            topics, raw, self.offset, _, _ = self._read_all(conn)
            conn.rollback()
        except psycopg.Error as exc:
            raise self._broken(exc) from None
        for name in (set(self.topics) | set(topics)) if names is None else names:
            if name in topics:
                self.topics[name], self._persisted[name] = topics[name], raw[name]
            else:
                self.topics.pop(name, None)
                self._persisted.pop(name, None)

    # ---- writing -------------------------------------------------------------------------

    def save(self, changed=None) -> None:
        names = sorted(set(self.topics) | set(self._persisted)) if changed is None \
            else list(dict.fromkeys(changed))
        wanted = {n: (self._topic_json(self.topics[n]) if n in self.topics else None)
                  for n in names}
        wanted = {n: t for n, t in wanted.items() if t != self._persisted.get(n)}
        if not wanted:
            return
        def write(conn):
            for name, t in wanted.items():
                self._write_topic(conn, name, self._persisted.get(name), t)
            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, json.dumps(
                {"node": self.lease.node_id, "epoch": self.lease.epoch,
                 "topics": sorted(wanted)})))
        try:
            self._fenced_write(write)
        except (NotControllerError, KafkaStorageError):
            self._put_back(wanted)
            raise
        for name, t in wanted.items():
            if t is None:
                self._persisted.pop(name, None)
            else:
                self._persisted[name] = t

    def _save_broker_configs(self, resource: str) -> None:
        """One resource's dynamic broker configs, fenced by the controller
        lease as topic changes are (MetadataStore.set_broker_configs puts
        the memory back if this raises)."""
        configs = self.broker_configs.get(resource)

        def write(conn):
            if configs:
                conn.execute("INSERT INTO kafkalite_broker_configs (resource, configs) "
                             "VALUES (%s, %s) ON CONFLICT (resource) DO UPDATE SET "
                             "configs = EXCLUDED.configs", (resource, Jsonb(configs)))
            else:
                conn.execute("DELETE FROM kafkalite_broker_configs WHERE resource = %s",
                             (resource,))
        self._fenced_write(write)

    def _save_group_configs(self, group: str) -> None:
        """One group's configs, fenced by the lease as broker configs are."""
        configs = self.group_configs.get(group)

        def write(conn):
            if configs:
                conn.execute("INSERT INTO kafkalite_group_configs (group_id, configs) "
                             "VALUES (%s, %s) ON CONFLICT (group_id) DO UPDATE SET "
                             "configs = EXCLUDED.configs", (group, Jsonb(configs)))
            else:
                conn.execute("DELETE FROM kafkalite_group_configs WHERE group_id = %s", (group,))
        self._fenced_write(write)

    # ---- ACLs (acl_control.py) ---------------------------------------------------------------

    def read_acls(self) -> list:
        """Every ACL, in authorizer.acls_to_json's form."""
        try:
            row = self._connection().execute("SELECT acls FROM kafkalite_acls WHERE id = 1") \
                .fetchone()
            self._conn.rollback()
        except psycopg.Error as exc:
            raise self._broken(exc) from None
        return [] if row is None else row[0]

    def write_acls(self, acls: list) -> None:
        """Replace every ACL, fenced by the controller lease as topic changes are."""
        self._fenced_write(lambda conn: conn.execute(
            "INSERT INTO kafkalite_acls (id, acls) VALUES (1, %s) "
            "ON CONFLICT (id) DO UPDATE SET acls = EXCLUDED.acls", (Jsonb(acls),)))

    # ---- client quotas (quota_control.py) ----------------------------------------------------

    def read_quotas(self) -> list:
        """Every client quota config, in quota_control.quotas_to_json's form."""
        try:
            row = self._connection().execute(
                "SELECT quotas FROM kafkalite_quotas WHERE id = 1").fetchone()
            self._conn.rollback()
        except psycopg.Error as exc:
            raise self._broken(exc) from None
        return [] if row is None else row[0]

    def write_quotas(self, quotas: list) -> None:
        """Replace every client quota config, fenced by the controller lease."""
        self._fenced_write(lambda conn: conn.execute(
            "INSERT INTO kafkalite_quotas (id, quotas) VALUES (1, %s) "
            "ON CONFLICT (id) DO UPDATE SET quotas = EXCLUDED.quotas", (Jsonb(quotas),)))

    # ---- producer ids (producer_ids.py) ------------------------------------------------------

    def reserve_producer_ids(self, count: int, floor: int) -> int:
        """Reserve the next ``count`` producer ids, all at or past ``floor``
        (what this node's file had reserved: a cluster older than the
        table); returns the first."""
        out = []

        def work(conn):
            out.append(conn.execute(
                "INSERT INTO kafkalite_producer_ids AS p (id, block_end) VALUES (1, %(e)s) "
                "ON CONFLICT (id) DO UPDATE SET block_end = GREATEST(p.block_end, %(f)s) + %(n)s "
                "RETURNING block_end", {"e": floor + count, "f": floor, "n": count}).fetchone()[0])
        self._fenced_write(work)
        return out[0] - count

    # ---- the coordinators' internal topics (internal_topic.py) ------------------------------

    def read_internal(self, topic: str) -> dict[int, list[tuple[int, bytes]]]:
        """partition -> (base offset, batch) of each batch, in offset order,
        of an internal topic: one query (one per partition, 100 per start,
        took 0.4-1.2 s per 50 at load 12, most of a controller takeover)."""
        try:
            rows = self._connection().execute(
                "SELECT partition, base_offset, batch FROM kafkalite_internal_batches WHERE "
                "topic = %s ORDER BY partition, base_offset", (topic,)).fetchall()
            self._conn.rollback()        # no transaction left open (its snapshot, its locks)
        except psycopg.Error as exc:
            raise self._broken(exc) from None
        out: dict[int, list[tuple[int, bytes]]] = {}
        for index, base, batch in rows:
            out.setdefault(index, []).append((base, bytes(batch)))
        return out

    def append_internal(self, topic: str, partition: int, base_offset: int, batch) -> None:
        """One batch of an internal partition, under the lease: one
        statement, in a transaction of its own, that locks the lease row
        (as ``_fenced_write`` does) and inserts only if it is still this
        node's -- one round trip per group commit, not four."""
        if not self.lease.held:
            raise NotControllerError(f"node {self.lease.node_id} does not hold the "
                                     f"controller lease")
        conn = self._connection()
        try:
            conn.autocommit = True      # a failure closes the connection (_broken)
            inserted = conn.execute(
                "WITH lease AS (SELECT 1 FROM kafkalite_controller WHERE id = 1 AND "
                "node_id = %s AND epoch = %s AND lease_until > now() FOR UPDATE) "
                "INSERT INTO kafkalite_internal_batches (topic, partition, base_offset, batch) "
                "SELECT %s, %s, %s, %s FROM lease ON CONFLICT (topic, partition, base_offset) "
                "DO UPDATE SET batch = EXCLUDED.batch",
                (self.lease.node_id, self.lease.epoch, topic, partition, base_offset,
                 bytes(batch))).rowcount
            conn.autocommit = False
        except psycopg.Error as exc:
            raise self._broken(exc) from None
        if inserted != 1:
            raise NotControllerError(f"metadata changed under node {self.lease.node_id}: the "
                                     f"controller lease is no longer its epoch "
                                     f"{self.lease.epoch}")

    def rewrite_internal(self, topic: str, partition: int, batches: list) -> None:
        """Replace an internal partition's batches (after its log was
        compacted, or to seed them from a log older than this table)."""
        def work(conn):
            conn.execute("DELETE FROM kafkalite_internal_batches WHERE topic = %s AND "
                         "partition = %s", (topic, partition))
            with conn.cursor() as cur:
                cur.executemany(
                    "INSERT INTO kafkalite_internal_batches (topic, partition, base_offset, "
                    "batch) VALUES (%s, %s, %s, %s)",
                    [(topic, partition, base, bytes(batch)) for base, batch in batches])
        self._fenced_write(work)

    # ---- SASL users (scram_control.py) -------------------------------------------------------

    def read_users(self) -> dict:
        """{user: {mechanism: credential}} as PostgreSQL has them."""
        try:
            got = read_users(self._connection())
            self._conn.rollback()
        except psycopg.Error as exc:
            raise self._broken(exc) from None
        return {} if got is None else got[0]

    def update_users(self, change) -> tuple[object, dict, int]:
        """The module's ``update_users`` on this store's connection; not
        fenced by the lease (the row lock keeps every edit)."""
        try:
            return update_users(self._connection(), change)
        except psycopg.Error as exc:
            raise self._broken(exc) from None

    def _fenced_write(self, work) -> None:
        """``work(conn)`` in one transaction that first checks the lease is
        still this node's (the rules in the module docstring); raises
        NotControllerError or KafkaStorageError, and then nothing of it
        was written."""
        if not self.lease.held:
            raise NotControllerError(f"node {self.lease.node_id} does not hold the "
                                     f"controller lease")
        conn = self._connection()
        try:
            with conn.transaction():
                self._fence(conn)
                work(conn)
                offset = conn.execute("UPDATE kafkalite_cluster SET metadata_offset = "
                                      "metadata_offset + 1 WHERE id = 1 "
                                      "RETURNING metadata_offset").fetchone()[0]
        except _StaleWrite as exc:
            raise NotControllerError(f"metadata changed under node "
                                     f"{self.lease.node_id}: {exc}") from None
        except psycopg.Error as exc:
            raise self._broken(exc) from None
        self.offset = offset

    def _fence(self, conn) -> None:
        row = conn.execute("SELECT node_id, epoch, lease_until > now() FROM kafkalite_controller "
                           "WHERE id = 1 FOR UPDATE").fetchone()
        if row is None or row[0] != self.lease.node_id or row[1] != self.lease.epoch \
                or not row[2]:
            raise _StaleWrite(f"the controller lease is {row and (row[0], row[1])}, not "
                              f"node {self.lease.node_id}'s epoch {self.lease.epoch}")

    @staticmethod
    def _write_topic(conn, name: str, old: dict | None, new: dict | None) -> None:
        if old is not None and (new is None or new["topic_id"] != old["topic_id"]):
            if conn.execute("DELETE FROM kafkalite_topics WHERE name = %s AND topic_id = %s",
                            (name, old["topic_id"])).rowcount != 1:
                raise _StaleWrite(f"topic {name} is no longer the one this node knew")
            old = None
        if new is None:
            return
        if old is None:
            try:
                with conn.transaction():     # a savepoint: a duplicate is a stale write
                    conn.execute("INSERT INTO kafkalite_topics (name, topic_id, configs) "
                                 "VALUES (%s, %s, %s)", (name, new["topic_id"],
                                                         Jsonb(new["configs"])))
            except psycopg.errors.UniqueViolation:
                raise _StaleWrite(f"topic {name} was created by another controller") from None
            old = {"configs": new["configs"], "partitions": []}
        elif new["configs"] != old["configs"]:
            conn.execute("UPDATE kafkalite_topics SET configs = %s WHERE name = %s",
                         (Jsonb(new["configs"]), name))
        before, after = old["partitions"], new["partitions"]
        for i, state in enumerate(after):
            if i >= len(before):
                conn.execute("INSERT INTO kafkalite_partitions (topic, partition, state, "
                             "partition_epoch) VALUES (%s, %s, %s, %s)",
                             (name, i, Jsonb(state), state["partition_epoch"]))
            elif state != before[i]:
                if conn.execute(
                        "UPDATE kafkalite_partitions SET state = %s, partition_epoch = %s "
                        "WHERE topic = %s AND partition = %s AND partition_epoch = %s",
                        (Jsonb(state), state["partition_epoch"], name, i,
                         before[i]["partition_epoch"])).rowcount != 1:
                    raise _StaleWrite(f"{name}-{i} is past partition epoch "
                                      f"{before[i]['partition_epoch']}")
        if len(after) < len(before):
            conn.execute("DELETE FROM kafkalite_partitions WHERE topic = %s AND partition >= %s",
                         (name, len(after)))

    def _put_back(self, wanted: dict) -> None:
        """A write failed: the topics it touched become again what
        PostgreSQL holds (as this store last knew it)."""
        for name in wanted:
            old = self._persisted.get(name)
            if old is None:
                self.topics.pop(name, None)
            else:
                self.topics[name] = self._topic(name, old)


class MetadataWatcher:
    """Hears what controllers write (LISTEN ``kafkalite_metadata``, or
    ``channel``). ``poll(timeout)`` returns the notifications' payloads, or
    None when the connection was (re)made, so the caller should reload
    everything (it may have missed some)."""

    def __init__(self, dsn: str, timeout_s: float = 2.0, channel: str = CHANNEL):
        self.dsn, self.timeout_s, self.channel = dsn, timeout_s, channel
        self._conn: psycopg.Connection | None = None
        self._warn = RateLimitedLog(log, per_interval=2, interval_s=30.0)

    def poll(self, timeout: float) -> list[dict] | None:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = connect(self.dsn, self.timeout_s, autocommit=True)
                self._conn.execute(f"LISTEN {self.channel}")
            except (psycopg.Error, KafkaStorageError) as exc:
                self._conn = None
                self._warn.warning("cannot listen on %s: %s", self.channel, _reason(exc))
                time.sleep(min(timeout, RETRY_BACKOFF_S))
                return []
            return None
        out = []
        try:
            for n in self._conn.notifies(timeout=timeout, stop_after=1):
                out.append(json.loads(n.payload))
            # and whatever else arrived meanwhile, without waiting
            for n in self._conn.notifies(timeout=0):
                out.append(json.loads(n.payload))
        except psycopg.Error:
            self.close()
            return []
        return out

    def close(self) -> None:
        _close_quietly(self._conn)
        self._conn = None


class UsersMirror:
    """This node's SASL users file (``path``) as a copy of the cluster's
    ``kafkalite_users`` row. ``start`` seeds the row from the file if no
    node did yet, writes the file from the row (raising KafkaStorageError
    if PostgreSQL cannot be reached, as the node's other start-up reads
    do), then follows the row's notifications on a thread. ``write`` is
    also how the controller puts its own change in its file at once.
    Each write carries the row's version and never replaces a newer one
    (credentials.write_mirror), so the thread and the controller cannot
    put an older document back."""

    def __init__(self, dsn: str, path: str, timeout_s: float = 2.0):
        self.dsn, self.path, self.timeout_s = dsn, path, timeout_s
        self.cluster_id = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._warn = RateLimitedLog(log, per_interval=2, interval_s=30.0)

    def start(self) -> None:
        conn = connect(self.dsn, self.timeout_s, autocommit=True)
        try:
            self.cluster_id = create_schema(conn)
            if read_users(conn) is None:
                # the first node of the cluster: its own file's users become the cluster's
                local = credentials.read_users(self.path)
                if seed_users(conn, local):
                    log.info("the cluster's SASL users are now the %d of %s", len(local),
                             self.path)
            # a file that is not yet this cluster's copy: its own users, if any, are dropped
            self._sync(conn, joining=credentials.mirrored_cluster(self.path) != self.cluster_id)
        except psycopg.Error as exc:
            raise KafkaStorageError(f"cannot reach the cluster's PostgreSQL: {_reason(exc)}") \
                from None
        finally:
            _close_quietly(conn)
        self._thread = threading.Thread(target=self._run, name="users-mirror", daemon=True)
        self._thread.start()

    def write(self, users: dict, version: int) -> dict | None:
        """Put version ``version`` of the users in the file, unless it has
        that one or a newer one; returns the users it replaced, or None."""
        return credentials.write_mirror(self.path, users, self.cluster_id, version)

    def _sync(self, conn, joining: bool = False) -> None:
        got = read_users(conn)
        if got is None:
            return
        replaced = self.write(*got)
        gone = sorted(set(replaced or ()) - set(got[0]))
        if joining and gone:
            log.warning("SASL users of %s that the cluster does not have were dropped (a "
                        "cluster's users are in PostgreSQL): %s", self.path, ", ".join(gone))

    def _run(self) -> None:
        watcher = MetadataWatcher(self.dsn, self.timeout_s, channel=USERS_CHANNEL)
        stale = False
        while not self._stop.is_set():
            heard = watcher.poll(1.0)
            stale = stale or heard is None or bool(heard)
            if not stale:
                continue
            # (re)connected, so notifications may have been missed, or told of a change
            try:
                conn = connect(self.dsn, self.timeout_s, autocommit=True)
                try:
                    self._sync(conn)
                finally:
                    _close_quietly(conn)
                stale = False
            except (psycopg.Error, KafkaStorageError, OSError, InvalidConfigurationError) as exc:
                self._warn.warning("cannot mirror the cluster's SASL users to %s now (%s); "
                                   "logins use the last copy", self.path, _reason(exc))
                self._stop.wait(RETRY_BACKOFF_S)
        watcher.close()

    def close(self, wait: bool = True) -> None:
        """Stop following the row; ``wait=False``: without waiting for
        the thread, which ends within a second (its poll), for a node
        handing over to a supervisor that starts a mirror of its own
        (the versioned writes keep the two from putting an older copy back)."""
        self._stop.set()
        if self._thread is not None and wait:
            self._thread.join(self.timeout_s + 2)
