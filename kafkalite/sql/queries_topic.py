"""The compacted topic of persistent queries (persistent.py), one partition:

    key "query/<ID>"   {"id", "sql", "select", "input", "output", "partitions",
                        "principal", "created_ms"}   (a tombstone: terminated)
    key "status/<ID>"  {"state": RUNNING | ERROR, "error", "host"}
                        (written by the runner that runs it, query_runner.py)

Written by the statements (CREATE STREAM, TERMINATE) and the runner;
read whole by SHOW QUERIES and followed by the runner. Imports nothing
but the client, late, so that the idle runner stays small.

Who may call: persistent.py, query_runner.py.
"""
from __future__ import annotations

import json

QUERIES_TOPIC = "_kafkalite_queries"
RUNNING, ERROR, PENDING = "RUNNING", "ERROR", "PENDING"


def query_key(query_id: str) -> bytes:
    return f"query/{query_id}".encode()


def status_key(query_id: str) -> bytes:
    return f"status/{query_id}".encode()


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
