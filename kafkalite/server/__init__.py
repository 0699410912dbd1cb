"""The broker: a supervisor process (metadata, admin, worker lifecycle) and
partition worker processes (the data path), plus the plain ZeroMQ ingest
gateway. Start one with ``kafkalite server``."""
