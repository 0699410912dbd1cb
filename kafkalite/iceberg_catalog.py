"""pyiceberg's SQL catalog, made safely by processes that start together:
shared by the Connect Iceberg sink (connect/connectors/iceberg.py) and the
Spark source's history read (kafkalite_spark/history.py), which reads the
tables the sink wrote, and a namespace created by tasks or workers at once
(the sink's, the Iceberg topics'); and a data file's column bounds from its Parquet
footer (``footer_bounds``), for the Iceberg topics' writer and
kafkalite_spark's read_topic. pyiceberg is imported when a catalog is made
(it is in the connect extra, not the base install); nothing of kafkalite is.
"""
from __future__ import annotations


def sql_catalog(name: str, **props):
    """pyiceberg's SqlCatalog; it creates its own tables on first use, one
    after the other, and a second process doing the same at once fails on
    whichever table the other created first: it tries again (twice was not
    always enough: the second try met the other process's next table)."""
    import time

    from pyiceberg.catalog.sql import SqlCatalog
    from sqlalchemy.exc import DatabaseError
    for attempt in range(5):
        try:
            return SqlCatalog(name, **props)
        except DatabaseError:
            if attempt == 4:
                raise
            time.sleep(0.05 * (attempt + 1))


def create_namespace(catalog, namespace) -> None:
    """Create ``namespace`` unless it exists, as a process that may race
    another doing the same: pyiceberg's SQL catalog checks, then inserts,
    and the other's insert between the two makes ours an IntegrityError
    (a key that exists), which means what NamespaceAlreadyExistsError does."""
    from pyiceberg.exceptions import NamespaceAlreadyExistsError
    from sqlalchemy.exc import IntegrityError
    try:
        catalog.create_namespace(namespace)
    except (NamespaceAlreadyExistsError, IntegrityError):
        pass


def footer_bounds(io, path: str, names) -> dict:
    """{column path: (least, greatest)} of the data file ``path`` by its row
    groups' statistics, for each of ``names`` (Parquet column paths, such as
    ``redpanda.offset``) that every row group has them for; read through
    the FileIO ``io`` (one read of the footer: a data file never changes)."""
    import pyarrow.parquet as pq
    with io.new_input(path).open() as stream:
        meta = pq.ParquetFile(stream).metadata
    groups = [meta.row_group(g) for g in range(meta.num_row_groups)]
    out = {}
    for name in names:
        stats = [next((c.statistics for c in (g.column(i) for i in range(g.num_columns))
                       if c.path_in_schema == name), None) for g in groups]
        if stats and all(st is not None and st.has_min_max for st in stats):
            out[name] = (min(st.min for st in stats), max(st.max for st in stats))
    return out
