"""Fault-injection probes for crash tests.

Storage code calls ``crash_point("name")`` at the moments where a crash is
most interesting (between the steps of a segment swap, say). When the
environment variable ``KAFKALITE_CRASH_AT`` names that point, the process
dies on the spot with ``os._exit`` -- no flush, no cleanup, no finally
blocks -- which is what a kill -9 at that instant would leave behind. Unset,
a probe costs one comparison.
"""
import os

_CRASH_AT = os.environ.get("KAFKALITE_CRASH_AT") or None


def crash_point(name: str) -> None:
    if _CRASH_AT is not None and _CRASH_AT == name:
        os._exit(137)
