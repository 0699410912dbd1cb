"""kafkalite.server.replica: see kafkalite/server/__init__.py."""
