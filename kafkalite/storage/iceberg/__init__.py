"""Iceberg topics: a topic's committed records kept as an Iceberg table
(Redpanda's Iceberg Topics, ``iceberg.mode``: ``key_value``,
``value_schema_id_prefix``, ``value_schema_latest``).

- ``topic_table.py``: the table of a topic -- its catalog (pyiceberg's SQL
  catalog on SQLite under the data directory; on a cluster, in the
  cluster's PostgreSQL), Redpanda's key_value
  schema partitioned by hour(redpanda.timestamp), record columns as Arrow,
  and the commit that records, in the snapshot summary, the next offset of
  every partition the table holds.
- ``registry_lookup.py``: the value schemas, asked of the node's schema
  registry over its HTTP API (by id, or a subject's latest).
- ``avro_values.py``: an Avro schema as Arrow columns (Redpanda's
  translation) and its values decoded into them.
- ``partition_writer.py``: the leader's side: which records of a partition
  are due (below the last stable offset, at most every
  ``iceberg.target.lag.ms`` or at a segment roll), read and committed on a
  background thread of the worker, never its event loop.

Exactly once: the table is the only record of what it holds. Each commit
reads the latest snapshot's summary, writes the records from the offset it
names for the partition, and commits only if no other commit came between
(the catalog's compare-and-swap of the metadata location); a new leader or
a restarted worker starts from the summary too.

pyiceberg is an optional dependency (the connect and test extras): nothing
here imports it at module level.
"""
from __future__ import annotations

# the SQL catalog's file in the Iceberg directory and the tables' namespace:
# here, not in topic_table.py (numpy and pyarrow), for the supervisor's REST
# catalog, which must not load them before the server is ready
NAMESPACE = "kafkalite"
CATALOG_FILE = "catalog.db"


def cluster_catalog_uri(dsn: str, read_only: bool = False) -> str:
    """The SQLAlchemy URL of the Iceberg catalog of the cluster whose
    PostgreSQL is ``dsn`` (``postgresql://...``, the ``cluster`` setting):
    pyiceberg's catalog tables (``iceberg_tables``,
    ``iceberg_namespace_properties``) beside the cluster's own, through
    psycopg 3 (the cluster's driver). Every node's workers commit there, so
    a partition's new leader on another node finds the table its old one
    kept. ``read_only``: every transaction of the connection is read-only
    (the REST catalog's, which must never change a table)."""
    rest = dsn.split("://", 1)[1]
    uri = f"postgresql+psycopg://{rest}"
    if read_only:
        uri += ("&" if "?" in rest else "?") + "options=-c%20default_transaction_read_only%3Don"
    return uri


def iceberg_unavailable(mode: str = "key_value") -> str | None:
    """Why Iceberg topics of ``mode`` cannot work in this process (pyiceberg
    or pyarrow missing; fastavro too for the modes that decode values), or None."""
    try:
        import pyarrow  # noqa: F401
        import pyiceberg.catalog.sql  # noqa: F401
        if mode.startswith("value_schema"):
            import fastavro  # noqa: F401
    except ImportError as exc:
        return f"cannot import {exc.name or 'pyiceberg'}"
    return None
