"""kafkalite.server.controller.controller: see kafkalite/server/__init__.py."""
