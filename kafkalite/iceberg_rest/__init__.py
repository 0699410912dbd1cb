"""An Iceberg REST catalog of the node's Iceberg topics' tables.

What it holds: the read side of Apache Iceberg's REST catalog API
(apache/iceberg's open-api/rest-catalog-open-api.yaml), answered from the
SQL catalog the partition leaders commit the tables of ``iceberg.mode``
topics to (storage/iceberg/), so that pyiceberg, Spark, Trino and DuckDB
find those tables by a URL alone, with no catalog service of their own:

- errors.py: the spec's error model, ``{"error": {"message", "type",
  "code"}}``, as one exception;
- catalog.py: the node's SQL catalog opened read-only (SQLite's own
  read-only mode, or on a cluster PostgreSQL's read-only transactions:
  this process can never write the tables);
- authorization.py: what each request asks of the server's authorizer for
  the user logged in (a table is its topic's);
- app.py: the WSGI app: config, namespaces, tables, load table, and the
  refusal of every write (the broker owns these tables).

Which process runs it: the supervisor of ``kafkalite server``, on a port of
its own (``iceberg_rest_port``, 8181, Iceberg's conventional REST catalog
port) served by kafkalite's one HTTP server (http_server.py: its
connection cap, keep-alive and TLS) behind the node's login, as the schema registry and the REST proxy are; cli/server.py hands
the supervisor ``make_app`` below, and the supervisor tells it where the
catalog is. It reads the catalog (the SQLite file, or a cluster's
PostgreSQL) and the tables' metadata files, never the broker.

What it may import: the standard library, kafkalite.errors and
kafkalite.protocol.enums (the ACL vocabulary), pyiceberg (imported at the
first request); never kafkalite.server or kafkalite.storage (the
supervisor hands it the catalog's path and name).
"""


from kafkalite.confluent_http import lazy_app


def make_app(catalog_file: str, catalog_name: str, file_io: dict | None = None):
    """The REST catalog of the SQL catalog in ``catalog_file`` (SQLite,
    made by the partition leaders' first commit: until then the catalog is
    empty; or a cluster's catalog's SQLAlchemy URL, its PostgreSQL's),
    whose rows are under ``catalog_name``, as a WSGI app (with a
    ``close()``) that imports pyiceberg at its first request, not on the
    server's way to ready: what ``kafkalite server`` hands the supervisor.
    ``file_io``: the pyiceberg FileIO properties the tables' files are
    reached with (an S3 warehouse's endpoint and region; never a
    credential), which the catalog reads the metadata with and hands to
    readers with each table."""
    from kafkalite.iceberg_rest.errors import login_error_body

    def build():
        from kafkalite.iceberg_rest import app
        return app.make_app(catalog_file, catalog_name, file_io)
    app = lazy_app(build)
    # the login's refusals (401, 403) in the catalog's error model
    app.login_error_body = login_error_body
    return app
