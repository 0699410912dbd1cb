"""RateLimitedLog moved to kafkalite/ratelimit.py (the ingest gateway, a
client, uses it too); this name stays for the server modules' imports."""
from kafkalite.ratelimit import RateLimitedLog

__all__ = ["RateLimitedLog"]
