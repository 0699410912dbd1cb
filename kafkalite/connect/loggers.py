"""Log levels of a worker's Python loggers, changed while it runs (KIP-495,
and KIP-976's cluster scope): what ``/admin/loggers`` reads and sets.

Levels are named as Kafka's log4j levels (TRACE, DEBUG, INFO, WARN, ERROR,
FATAL, OFF) and map onto Python's (TRACE is 5, below DEBUG; OFF is above
CRITICAL). A logger is "named" as Kafka's are when it has a level of its
own; the root logger is listed as ``root``. Setting a namespace sets the
logger of that name and every logger below it (``kafkalite.connect`` sets
``kafkalite.connect.worker`` too), as Kafka's Loggers.setLevel does, and
stamps each with the time (``last_modified``, ms; null for a level nobody
set through the API). Nothing is persisted: a restarted worker has the
levels of its logging configuration again, except those the config topic
holds for the whole cluster (distributed/ applies them as it reads them).

Who calls: rest.py (worker scope; the standalone herder's cluster scope)
and distributed/ (a ``logger-cluster-<namespace>`` record). Thread
safety: one lock around every change and read.
"""
from __future__ import annotations

import logging
import threading
import time

from kafkalite.connect.errors import BadRequestException, NotFoundException

ROOT = "root"
# Kafka's level names -> Python's numbers; Python's numbers -> the name shown
_LEVELS = {"OFF": logging.CRITICAL + 10, "FATAL": logging.CRITICAL, "ERROR": logging.ERROR,
           "WARN": logging.WARNING, "INFO": logging.INFO, "DEBUG": logging.DEBUG, "TRACE": 5}
_NAMES = {v: k for k, v in _LEVELS.items()}

_lock = threading.Lock()
_last_modified: dict[str, int] = {}


def level_of(text) -> int:
    """Python's level for a Kafka level name; Kafka's 404 for any other
    (LoggingResource answers an unknown level NotFoundException)."""
    if text is None:
        raise BadRequestException("Desired 'level' parameter was not specified in request.")
    level = _LEVELS.get(str(text).upper())
    if level is None:
        raise NotFoundException(f"invalid log level '{text}'.")
    return level


def _name(level: int) -> str:
    if level in _NAMES:
        return _NAMES[level]
    # a level between Kafka's: the next finer one Kafka has
    return _NAMES[max(v for v in _NAMES if v <= level)] if level >= 5 else "TRACE"


def _logger(name: str) -> logging.Logger:
    return logging.getLogger() if name == ROOT else logging.getLogger(name)


def _known() -> dict[str, logging.Logger]:
    """Every logger created so far, by name (placeholders excluded)."""
    out = {n: lg for n, lg in logging.Logger.manager.loggerDict.items()
           if isinstance(lg, logging.Logger)}
    out[ROOT] = logging.getLogger()
    return out


def _entry(name: str, lg: logging.Logger) -> dict:
    return {"level": _name(lg.getEffectiveLevel()), "last_modified": _last_modified.get(name)}


def all_levels() -> dict:
    """{name: {"level", "last_modified"}} of the root logger and every
    logger with a level of its own, by name."""
    with _lock:
        return {n: _entry(n, lg) for n, lg in sorted(_known().items())
                if n == ROOT or lg.level != logging.NOTSET}


def level(name: str) -> dict:
    """One logger's level (its effective level when it has none of its own);
    404 for a logger this process never created."""
    with _lock:
        lg = _known().get(name)
        if lg is None:
            raise NotFoundException(f"Logger {name} not found.")
        return _entry(name, lg)


def set_level(namespace: str, level_name) -> list[str]:
    """Sets ``namespace`` and every logger under it (creating the namespace's
    logger if none exists yet): the names changed, sorted."""
    value = level_of(level_name)
    now = int(time.time() * 1000)
    with _lock:
        named = [n for n in _known() if namespace == ROOT or n == namespace or
                 n.startswith(namespace + ".")]
        if namespace not in named:
            named.append(namespace)
        for n in named:
            _logger(n).setLevel(value)
            _last_modified[n] = now
        return sorted(named)
