"""kafkalite.server.node: see kafkalite/server/__init__.py."""
