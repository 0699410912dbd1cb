"""Operator tools that read a data directory without changing it: dump-log and verify."""
