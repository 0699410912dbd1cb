"""kafkalite.server.group: see kafkalite/server/__init__.py."""
