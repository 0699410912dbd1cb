"""Operator tools: dump-log and verify read a data directory without
changing it; streams_app (``kafkalite streams describe|reset``) talks to a
running server as a client and may reset a Streams application's offsets
and delete its internal topics."""
