"""pyiceberg's SQL catalog, made safely by processes that start together:
shared by the Connect Iceberg sink (connect/connectors/iceberg.py) and the
Spark source's history read (kafkalite_spark/history.py), which reads the
tables the sink wrote. pyiceberg is imported when a catalog is made (it is
in the connect extra, not the base install); nothing of kafkalite is.
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
