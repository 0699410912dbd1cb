"""kafkalite.server.auth: see kafkalite/server/__init__.py."""
