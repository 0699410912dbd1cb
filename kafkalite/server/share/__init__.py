"""kafkalite.server.share: see kafkalite/server/__init__.py."""
