"""kafkalite.server.network: see kafkalite/server/__init__.py."""
