"""Compiled hot paths (built from ext/ by setup.py). There is no pure-Python
fallback: importing a missing module here is a build error, not a slow path."""
