"""Iceberg topics: a topic's committed records kept as an Iceberg table
(Redpanda's Iceberg Topics, ``iceberg.mode=key_value``).

- ``topic_table.py``: the table of a topic -- its catalog (pyiceberg's SQL
  catalog on SQLite under the data directory), Redpanda's key_value
  schema partitioned by hour(redpanda.timestamp), record columns as Arrow,
  and the commit that records, in the snapshot summary, the next offset of
  every partition the table holds.
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


def iceberg_unavailable() -> str | None:
    """Why Iceberg topics cannot work in this process (pyiceberg or pyarrow
    missing), or None."""
    try:
        import pyarrow  # noqa: F401
        import pyiceberg.catalog.sql  # noqa: F401
    except ImportError as exc:
        return f"cannot import {exc.name or 'pyiceberg'}"
    return None
