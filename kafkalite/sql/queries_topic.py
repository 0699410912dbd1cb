"""The compacted topic of persistent queries (persistent.py), one partition:

    key "query/<ID>"   {"id", "sql", "select", "input", "output", "partitions",
                        "principal", "created_ms", "seal"}   (a tombstone: terminated)
    key "status/<ID>"  {"state": RUNNING | ERROR, "error", "host"}
                        (written by the runner that runs it, query_runner.py)

Written by the statements (CREATE STREAM, TERMINATE) and the runner;
read whole by SHOW QUERIES and followed by the runner. Imports nothing
but the client, late, so that the idle runner stays small.

The seal: a query runs with its creator's rights, which the statements
checked (persistent.py), yet the runner reads with the node owner's key
pair and the record's "principal" is only what its writer wrote. On a
server with security on, a query record is therefore sealed: an HMAC of
its fields under a key only the owner's key file gives (``seal``), made
by the doors that checked the creator (``POST /query``, the owner's own
``kafkalite sql``). The runner runs only records whose seal it can make
again (``sealed``), so whoever is given Write on this topic still cannot
have a query read what its creator may not. Security off: no key file,
no seal, nothing to check (every client may do everything there).

Who may call: persistent.py, query_runner.py.
"""
from __future__ import annotations

import functools
import hashlib
import hmac
import json

QUERIES_TOPIC = "_kafkalite_queries"
RUNNING, ERROR, PENDING = "RUNNING", "ERROR", "PENDING"


def query_key(query_id: str) -> bytes:
    return f"query/{query_id}".encode()


def status_key(query_id: str) -> bytes:
    return f"status/{query_id}".encode()


@functools.lru_cache(maxsize=4)
def _seal_key(key_file: str) -> bytes:
    with open(key_file, "rb") as f:
        return hashlib.sha256(b"kafkalite persistent query seal\0" + f.read()).digest()


def _digest(record: dict, key_file: str) -> str:
    fields = json.dumps({k: v for k, v in record.items() if k != "seal"}, sort_keys=True,
                        separators=(",", ":")).encode()
    return hmac.new(_seal_key(key_file), fields, hashlib.sha256).hexdigest()


def seal(record: dict, key_file: str | None) -> dict:
    """``record`` with its seal, made with the owner's key file (None:
    security off, no seal)."""
    return record if key_file is None else {**record, "seal": _digest(record, key_file)}


def sealed(record: dict, key_file: str | None) -> bool:
    """Whether ``record`` was sealed with ``key_file`` (always, without one)."""
    if key_file is None:
        return True
    given = record.get("seal")
    return isinstance(given, str) and hmac.compare_digest(given, _digest(record, key_file))


def ensure_queries_topic(client_config: dict, timeout: float) -> None:
    from kafkalite import errors
    from kafkalite.client import AdminClient, NewTopic
    admin = AdminClient(client_config)
    try:
        if QUERIES_TOPIC in admin.list_topics(timeout=timeout).topics:
            return
        future = admin.create_topics([NewTopic(QUERIES_TOPIC, 1, config={
            "cleanup.policy": "compact"})])[QUERIES_TOPIC]
        try:
            future.result(timeout)
        except errors.TopicAlreadyExistsError:
            pass
    finally:
        admin.close()


def apply_record(queries: dict, statuses: dict, key: bytes, value: bytes | None) -> None:
    """One record of QUERIES_TOPIC into ``queries`` / ``statuses`` (by id)."""
    kind, _, query_id = key.decode().partition("/")
    target = queries if kind == "query" else statuses if kind == "status" else None
    if target is None:
        return
    if value is None:
        target.pop(query_id, None)
    else:
        target[query_id] = json.loads(value)


def read_queries(client_config: dict, timeout: float) -> dict:
    from kafkalite.sql import topic_source      # (pyarrow: late)
    queries, statuses = {}, {}
    try:
        for batch in topic_source.history(client_config, QUERIES_TOPIC, timeout):
            for key, value in zip(batch.column("key").to_pylist(),
                                  batch.column("value").to_pylist()):
                apply_record(queries, statuses, key, value)
    except Exception as exc:     # noqa: BLE001 -- no topic yet: no queries
        if "does not exist" not in str(exc):
            raise
    out = {}
    for query_id in sorted(queries):
        status = statuses.get(query_id, {})
        out[query_id] = {**queries[query_id], "state": status.get("state", PENDING),
                         "error": status.get("error"), "host": status.get("host")}
    return out
