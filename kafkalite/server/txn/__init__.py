"""kafkalite.server.txn: see kafkalite/server/__init__.py."""
