"""SQL over topics (issue 76): ad-hoc queries, with DuckDB as the engine.

Every topic is a table: ``partition``, ``offset``, ``timestamp``, ``key``,
``value``, ``headers``, plus the value's fields as columns when the
schema registry has an Avro or JSON Schema for the topic's values
(subject ``<topic>-value``, Confluent's TopicNameStrategy). A query reads
each topic it names through kafkalite's own Consumer, from the log start
to the last stable offset at the query's start (read_committed), and
hands DuckDB the records as a stream of Arrow record batches: memory
stays bounded by DuckDB's ``memory_limit`` and a fetch's worth of
batches, never the topic's size. ``... EMIT CHANGES`` keeps a filter over
one topic running on the records that arrive after the query starts.
An Iceberg topic whose table has a commit is read from the table's
Parquet files for the offsets the table holds, the log for the rest.

Modules: topic_source.py (a topic as a RecordBatchReader),
iceberg_source.py (an Iceberg topic's: its table's files, the log past
them), values.py (the
registry's value columns), session.py (the DuckDB connection: which
topics a query names, errors as one line, EMIT CHANGES), http_query.py
(``POST /query`` on the node's HTTP port), persistent.py (CREATE STREAM
AS SELECT, SHOW QUERIES, TERMINATE), queries_topic.py (their records),
errors.py (QueryError, DuckDB's errors as one line), query_runner.py (the process that
runs the persistent queries, spawned by the server).

Which process runs it: the ``kafkalite sql`` command's, and the
supervisor's HTTP threads for ``POST /query`` (one Session per request);
the persistent queries, the query runner's (query_runner.py).
What it may import: kafkalite.client and the bottom of the layers (it is
a client of the broker, tests/test_layers.py), kafkalite.streams (a
persistent query is a Streams application), DuckDB and pyarrow, pyiceberg
(its REST client, for an Iceberg topic's table).
"""
from kafkalite._lazy import lazy_exports

__all__ = ["QueryError", "Session"]
__getattr__, __dir__ = lazy_exports(__name__, {
    "kafkalite.sql.errors": ("QueryError",),
    "kafkalite.sql.session": ("Session",),
})
