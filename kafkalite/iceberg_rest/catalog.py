"""The node's SQL catalog, read-only: the namespaces, tables and table
metadata the REST catalog answers with.

The catalog is pyiceberg's SqlCatalog on the SQLite file the partition
leaders commit to (storage/iceberg/topic_table.py), or on a cluster the
one in the cluster's PostgreSQL, opened with every transaction read-only
(PostgreSQL's ``default_transaction_read_only``). It is opened here
through SQLite's read-only mode (``mode=ro``), so that nothing this process
does can change a table, and without pyiceberg's creation of the
catalog's own tables: the file and its tables appear with the leaders'
first commit, and until then the catalog has no namespace and no table
(an SQLite connection to a missing file would create it, so none is made
before the file exists).

A table's metadata is the JSON of its current metadata file, read through
pyiceberg's FileIO (the location's scheme picks it: ``file://``, or
``s3://`` in the tiered store's bucket, reached with the ``file_io``
properties the server's config gives, ServerConfig.iceberg_file_io). Each
call reads the catalog afresh: a commit by a leader is seen by the next
request.

Who may call: the app's request threads, any number at once (SQLAlchemy's
pool gives each its own connection).
"""
from __future__ import annotations

import json
import os
import threading

from kafkalite.iceberg_rest.errors import NO_SUCH_NAMESPACE, NO_SUCH_TABLE, IcebergError


class NodeCatalog:
    """``catalog``: the SQLite file, or the SQLAlchemy URL of a cluster's
    catalog in its PostgreSQL (``postgresql+psycopg://``, every transaction
    read-only: the supervisor's URL says so), which every node's catalog
    reads: each serves the cluster's tables."""

    def __init__(self, catalog: str, name: str, file_io: dict | None = None):
        self.url = catalog if "://" in catalog else None
        self.catalog_file = None if self.url else os.path.abspath(catalog)
        self.name = name
        self.file_io = dict(file_io or {})
        self._catalog = None
        self._lock = threading.Lock()

    def _sql(self):
        """pyiceberg's SqlCatalog, None while its SQLite file does not exist."""
        with self._lock:
            if self._catalog is None and (self.url or os.path.exists(self.catalog_file)):
                from pyiceberg.catalog.sql import SqlCatalog
                self._catalog = SqlCatalog(
                    self.name,
                    uri=self.url or f"sqlite:///file:{self.catalog_file}?mode=ro&uri=true",
                    init_catalog_tables="false", **self.file_io)
            return self._catalog

    def _read(self, call, default):
        """``call(catalog)``, or ``default`` while the catalog or its tables
        do not exist yet (the file made, the first commit not finished)."""
        from sqlalchemy.exc import OperationalError, ProgrammingError
        catalog = self._sql()
        if catalog is None:
            return default
        try:
            return call(catalog)
        except (OperationalError, ProgrammingError) as exc:
            # SQLite's words, and PostgreSQL's (UndefinedTable)
            if "no such table" in str(exc) or "UndefinedTable" in type(exc.orig).__name__:
                return default
            raise

    def namespaces(self, parent: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
        if parent and not self.namespace_exists(parent):
            raise IcebergError(NO_SUCH_NAMESPACE, f"Namespace does not exist: {_dotted(parent)}")
        return sorted(self._read(lambda c: c.list_namespaces(parent), []))

    def namespace_exists(self, namespace: tuple[str, ...]) -> bool:
        return self._read(lambda c: c.namespace_exists(namespace), False)

    def namespace_properties(self, namespace: tuple[str, ...]) -> dict:
        if not self.namespace_exists(namespace):
            raise IcebergError(NO_SUCH_NAMESPACE, f"Namespace does not exist: {_dotted(namespace)}")
        return self._read(lambda c: c.load_namespace_properties(namespace), {})

    def tables(self, namespace: tuple[str, ...]) -> list[str]:
        """The names of the namespace's tables, sorted."""
        if not self.namespace_exists(namespace):
            raise IcebergError(NO_SUCH_NAMESPACE, f"Namespace does not exist: {_dotted(namespace)}")
        return sorted(ident[-1] for ident in self._read(lambda c: c.list_tables(namespace), []))

    def table_exists(self, namespace: tuple[str, ...], table: str) -> bool:
        return self._read(lambda c: c.table_exists((*namespace, table)), False)

    def load_table(self, namespace: tuple[str, ...], table: str) -> tuple[str, dict]:
        """(metadata location, the metadata as the spec's TableMetadata JSON)."""
        from pyiceberg.exceptions import NoSuchTableError

        def load(catalog):
            try:
                return catalog.load_table((*namespace, table))
            except NoSuchTableError:
                return None
        loaded = self._read(load, None)
        if loaded is None:
            raise IcebergError(NO_SUCH_TABLE, f"Table does not exist: {_dotted((*namespace, table))}")
        # pyiceberg writes the metadata file from this same model (by alias:
        # the spec's kebab-case names), so this is that file's content
        return loaded.metadata_location, json.loads(loaded.metadata.model_dump_json())

    def close(self) -> None:
        with self._lock:
            if self._catalog is not None:
                self._catalog.engine.dispose()
                self._catalog = None


def _dotted(parts) -> str:
    return ".".join(parts)
