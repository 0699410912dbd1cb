"""The connectors shipped with kafkalite Connect: file (FileStreamSource /
FileStreamSink) and JDBC-style SQLite/PostgreSQL source and sink, and a Parquet sink."""
