"""The cluster's PostgreSQL schema: its tables, made once by whichever node
comes first (an advisory lock serialises the nodes), and checked once per
process and database afterwards.

Tables (created if missing, under an advisory lock so that nodes starting
together do not race)::

    kafkalite_cluster    (id = 1, cluster_id, metadata_offset: +1 at each
                          fenced write, the metadata log's end offset that
                          DescribeQuorum answers, as metadata.py's offset)
    kafkalite_controller (id = 1, node_id, epoch, lease_until,
                          endpoints jsonb: where other nodes' workers reach it)
    kafkalite_brokers    (broker_id PK, node_id, idx): each node's workers'
                          broker ids, given once and kept (dense from 0)
    kafkalite_topics     (name PK, topic_id uuid, configs jsonb)
    kafkalite_partitions (topic -> kafkalite_topics ON DELETE CASCADE, partition,
                          state jsonb (metadata.PartitionAssignment.to_json),
                          partition_epoch, PK (topic, partition))
    kafkalite_acls       (id = 1, acls jsonb: every ACL, acl_control.py's
                          list form), written under the lease as the rest
    kafkalite_quotas     (id = 1, quotas jsonb: every client quota config,
                          quota_control.py's list form), likewise
    kafkalite_broker_configs (resource PK: "" for the cluster-wide defaults or
                          a broker id, configs jsonb: its dynamic broker
                          configs, config_registry.py), likewise
    kafkalite_group_configs (group_id PK, configs jsonb: the group's own
                          configs, group_config.py), likewise
    kafkalite_users      (id = 1, users jsonb: the SASL users, credentials.py's
                          "users" object; version bigint, +1 at each change)
    kafkalite_producer_ids (id = 1, block_end): the end of the last block of
                          producer ids a controller reserved (producer_ids.py)
    kafkalite_internal_batches (topic, partition, base_offset PK, batch bytea):
                          every batch of the coordinators' internal topics
                          (__consumer_offsets, __transaction_state), written
                          under the lease before the controller's own log
                          has it (internal_topic.py), so that a controller
                          on another node starts from them

Which process runs it: a cluster node's supervisor (cluster_store.py's
callers) and ``kafkalite users --cluster``.

What it may import: psycopg and the standard library.
"""
from __future__ import annotations

import re
import uuid

import psycopg

# How long a node's first calls at start-up (its workers' broker ids) wait
# for PostgreSQL to answer: a database that refuses (a wrong address, a
# login it does not take) still fails the start at once, but one slow to
# answer is not taken for a dead one (2 s, the node's other calls' wait,
# was passed by a PostgreSQL serving a loaded 2-core machine's test suite)
START_TIMEOUT_S = 10.0

# any 64-bit number of our own: serialises schema creation between nodes
_SCHEMA_LOCK = 0x6B61666B616C6974

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kafkalite_cluster (
    id int PRIMARY KEY CHECK (id = 1),
    cluster_id text NOT NULL);
ALTER TABLE kafkalite_cluster ADD COLUMN IF NOT EXISTS metadata_offset bigint NOT NULL DEFAULT 0;
CREATE TABLE IF NOT EXISTS kafkalite_controller (
    id int PRIMARY KEY CHECK (id = 1),
    node_id int NOT NULL,
    epoch bigint NOT NULL,
    lease_until timestamptz NOT NULL);
CREATE TABLE IF NOT EXISTS kafkalite_topics (
    name text PRIMARY KEY,
    topic_id uuid NOT NULL,
    configs jsonb NOT NULL);
ALTER TABLE kafkalite_controller ADD COLUMN IF NOT EXISTS endpoints jsonb;
CREATE TABLE IF NOT EXISTS kafkalite_brokers (
    broker_id int PRIMARY KEY,
    node_id int NOT NULL,
    idx int NOT NULL,
    UNIQUE (node_id, idx));
CREATE TABLE IF NOT EXISTS kafkalite_partitions (
    topic text NOT NULL REFERENCES kafkalite_topics (name) ON DELETE CASCADE,
    partition int NOT NULL,
    state jsonb NOT NULL,
    partition_epoch int NOT NULL,
    PRIMARY KEY (topic, partition));
CREATE TABLE IF NOT EXISTS kafkalite_acls (
    id int PRIMARY KEY CHECK (id = 1),
    acls jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS kafkalite_quotas (
    id int PRIMARY KEY CHECK (id = 1),
    quotas jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS kafkalite_broker_configs (
    resource text PRIMARY KEY,
    configs jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS kafkalite_group_configs (
    group_id text PRIMARY KEY,
    configs jsonb NOT NULL);
CREATE TABLE IF NOT EXISTS kafkalite_users (
    id int PRIMARY KEY CHECK (id = 1),
    users jsonb NOT NULL,
    version bigint NOT NULL);
CREATE TABLE IF NOT EXISTS kafkalite_producer_ids (
    id int PRIMARY KEY CHECK (id = 1),
    block_end bigint NOT NULL);
CREATE TABLE IF NOT EXISTS kafkalite_internal_batches (
    topic text NOT NULL,
    partition int NOT NULL,
    base_offset bigint NOT NULL,
    batch bytea NOT NULL,
    PRIMARY KEY (topic, partition, base_offset));
"""


# what _SCHEMA makes: its tables and the columns it adds to older ones
_SCHEMA_TABLES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", _SCHEMA))
_SCHEMA_COLUMNS = tuple(re.findall(r"ALTER TABLE (\w+) ADD COLUMN IF NOT EXISTS (\w+)", _SCHEMA))


def _schema_in_place(conn: psycopg.Connection) -> str | None:
    """The cluster id if every table and column of _SCHEMA exists and the
    id was made; None if something is missing. Reads the catalog only:
    no table lock is taken."""
    tables = conn.execute("SELECT count(*) FROM unnest(%s::text[]) AS t "
                          "WHERE to_regclass(t) IS NOT NULL", (list(_SCHEMA_TABLES),)).fetchone()[0]
    if tables != len(_SCHEMA_TABLES):
        return None
    columns = conn.execute(
        "SELECT count(*) FROM information_schema.columns WHERE table_schema = current_schema() "
        "AND (table_name, column_name) IN (SELECT * FROM unnest(%s::text[], %s::text[]))",
        ([t for t, _ in _SCHEMA_COLUMNS], [c for _, c in _SCHEMA_COLUMNS])).fetchone()[0]
    if columns != len(_SCHEMA_COLUMNS):
        return None
    row = conn.execute("SELECT cluster_id FROM kafkalite_cluster WHERE id = 1").fetchone()
    return None if row is None else row[0]


# (host, port, database) -> cluster id, once the schema was found there:
# each connection's check read the catalog, 35-80 ms at load 12, four
# times per controller takeover. No node drops the tables under another.
_SCHEMA_FOUND: dict[tuple, str] = {}


def create_schema(conn: psycopg.Connection) -> str:
    """The tables, and the cluster id (made by the first node); returns it.
    Checked once per process and database (_SCHEMA_FOUND).

    Once they exist (every start but the cluster's first), nothing is
    run but reads of the catalog: ``ALTER TABLE ... ADD COLUMN IF NOT
    EXISTS`` takes an ACCESS EXCLUSIVE lock on its table even when the
    column is there. Run by a node losing the race for an expired lease
    while the winner's first metadata writes held the lease row and then
    wanted kafkalite_cluster (its metadata offset), it locked the two
    tables in the other order: PostgreSQL found a deadlock and failed one
    of them, and the losing node's process ended with its workers.

    It is a start-up step, so it waits START_TIMEOUT_S for each statement,
    not the connection's own timeout (a lease's 2 s): a fresh database's
    first statements load its catalogs, and on a loaded machine that took
    a lease's first acquire past 2 s, failing it."""
    database = (conn.info.host, conn.info.port, conn.info.dbname)
    found = _SCHEMA_FOUND.get(database)
    if found is not None:
        return found
    with conn.transaction():
        conn.execute(f"SET LOCAL statement_timeout = {int(START_TIMEOUT_S * 1000)}")
        found = _schema_in_place(conn)
        if found is None:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            conn.execute(_SCHEMA)
            conn.execute("INSERT INTO kafkalite_cluster (id, cluster_id) VALUES (1, %s) "
                          "ON CONFLICT (id) DO NOTHING", (uuid.uuid4().hex[:22],))
            found = conn.execute("SELECT cluster_id FROM kafkalite_cluster WHERE id = 1") \
                .fetchone()[0]
    _SCHEMA_FOUND[database] = found
    return found
