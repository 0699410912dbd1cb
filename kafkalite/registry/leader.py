"""Which registry writes ``_schemas``, and the forwarding of a write to it.

Several registries may serve one cluster (each node's, or standalone ones:
``python -m kafkalite.registry``). As Confluent Schema Registry's, one of
them, the leader, makes every write (register, deletes, config and mode
changes); the others forward the write's HTTP request to it, the caller's
``Authorization`` header with it, and hand back its answer unchanged
(status and body: a 409 stays a 409). Reads are answered by each registry
from its own replay of ``_schemas`` (store.py).

How one becomes the leader: by taking the transactional id every
registry writes ``_schemas`` with (store.LEADER_TRANSACTIONAL_ID), then
writing a LEADER record naming its URL; the last to take it leads, and
the broker fences every write of the one before (its commit is refused).
There is no election round and no session to time out: a registry takes
over when

- the topic names no leader, or names this registry's URL (a restart of
  this process: a new process must take the id again before writing);
- (a forwarded write that reaches a registry that no longer leads is
  answered 50004, never forwarded again: the sender reads the topic and
  tries the leader it names);
- the leader cannot be connected to (kill -9 of its node, its process
  stopped, a cut between the two): nothing was sent, so the write is made
  here. A leader that took the connection but gave no answer may have
  made the write: that is 50003 ("Error while forwarding the request to
  the primary", Confluent's code), for the caller to retry.

A fenced leader finds the new LEADER record at its next read of the topic
and forwards from then on. Correctness (no id given twice) rests on the
fencing alone; the forwarding keeps the writes on one registry, so they
do not take the id from each other.

Who may call: rest.py's request threads, any number at once.
"""
from __future__ import annotations

import http.client
import json
import logging
import ssl
import time
from urllib.parse import quote, urlsplit

from kafkalite.registry.errors import FORWARDING_ERROR, UNKNOWN_LEADER, RegistryError
from kafkalite.registry.store import SCHEMAS_TOPIC, STORE_TIMEOUT_S, NotLeader, SchemaStore

log = logging.getLogger("kafkalite.registry")

# the request header a forwarded write carries (its value: the sender's instance)
FORWARDED_HEADER = "X-Kafkalite-Registry-Forwarded"
FORWARDED_ENVIRON = "HTTP_" + FORWARDED_HEADER.upper().replace("-", "_")
CONNECT_TIMEOUT_S = 5.0
# the leader's own bound on a write (store.STORE_TIMEOUT_S) and some
FORWARD_TIMEOUT_S = 40.0
# after this registry was fenced: how long the LEADER record of the one that
# fenced it may take to show, and how often the topic is looked at meanwhile
AWAIT_LEADER_S = 1.0
AWAIT_POLL_S = 0.02


class LeaderUnreachable(Exception):
    """No connection to the leader: the request was not sent."""


def serve_write(store: SchemaStore, environ, raw_body: bytes, local):
    """Answer a write: ``local()``'s answer (status 200) where this
    registry leads (or takes over), else the leader's (status, raw body).
    Tried again while the leader moves under it (this registry fenced, the
    leader it forwarded to fenced), within the store's timeout."""
    forwarded = bool(environ.get(FORWARDED_ENVIRON))
    deadline = time.monotonic() + STORE_TIMEOUT_S
    while True:
        try:
            url = _route(store, forwarded)
            if url is None:
                return 200, local()
            status, raw = forward(url, environ, raw_body, store.instance)
            if not _unknown_leader(status, raw):
                return status, raw
        except NotLeader as exc:
            if forwarded:
                raise               # the sender finds the leader and tries again
            log.info("schema registry %s: %s", store.url, exc.message)
        except LeaderUnreachable as exc:
            log.warning("schema registry leader %s cannot be reached (%s): %s takes over",
                        url, exc, store.url)
            with store.lock:
                if not store.leading and (store.state.leader or {}).get("url") == url:
                    try:
                        store.take_over()
                    except NotLeader:
                        pass
        if time.monotonic() > deadline:
            raise RegistryError(UNKNOWN_LEADER, f"no registry kept the lead of the "
                                                f"{SCHEMAS_TOPIC} writes for "
                                                f"{STORE_TIMEOUT_S:.0f} s: retry")
        _await_other_leader(store)


def _route(store: SchemaStore, forwarded: bool) -> str | None:
    """None: this registry writes (it leads, or takes over now); else the
    leader's URL. NotLeader: a forwarded write that found another leader."""
    with store.lock:
        if store.leading:
            return None
        store.catch_up()
        leader = store.state.leader or {}
        if not leader or leader.get("url") in (None, store.url) \
                or leader.get("instance") == store.instance:
            # no leader, a previous process of this URL, or this process
            # fenced with nobody named since (await_other_leader waited)
            store.take_over()
            return None
        if forwarded:
            raise NotLeader(f"this registry does not lead: {leader['url']} does")
        return leader["url"]


def _await_other_leader(store: SchemaStore) -> None:
    """Poll the topic until it names a leader other than this process (the
    one that fenced it commits its LEADER record), for a moment at most:
    taking over again before then would fence it back."""
    deadline = time.monotonic() + AWAIT_LEADER_S
    while time.monotonic() < deadline:
        with store.lock:
            if store.leading:
                return
            store.catch_up()
            leader = store.state.leader or {}
            if leader and leader.get("instance") != store.instance:
                return
        time.sleep(AWAIT_POLL_S)


def _unknown_leader(status: int, raw: bytes) -> bool:
    """The leader's answer says it was not the leader any more (50004)."""
    if status != 500:
        return False
    try:
        return json.loads(raw).get("error_code") == UNKNOWN_LEADER
    except (ValueError, AttributeError):
        return False


def forward(url: str, environ, raw_body: bytes, instance: str) -> tuple[int, bytes]:
    """The leader's (status, body) for the request ``environ`` describes."""
    target = urlsplit(url)
    if target.scheme == "https":
        conn = http.client.HTTPSConnection(target.hostname, target.port or 443,
                                           timeout=CONNECT_TIMEOUT_S,
                                           context=ssl.create_default_context())
    else:
        conn = http.client.HTTPConnection(target.hostname, target.port or 80,
                                          timeout=CONNECT_TIMEOUT_S)
    try:
        try:
            conn.connect()
        except OSError as exc:
            raise LeaderUnreachable(str(exc)) from None
        conn.sock.settimeout(FORWARD_TIMEOUT_S)
        path = quote(environ.get("PATH_INFO", "") or "/", safe="/")
        if environ.get("QUERY_STRING"):
            path += "?" + environ["QUERY_STRING"]
        headers = {"Content-Type": environ.get("CONTENT_TYPE") or "application/json",
                   FORWARDED_HEADER: instance}
        if environ.get("HTTP_AUTHORIZATION"):
            headers["Authorization"] = environ["HTTP_AUTHORIZATION"]   # as Confluent forwards it
        try:
            conn.request(environ.get("REQUEST_METHOD", "POST"), path, body=raw_body,
                         headers=headers)
            resp = conn.getresponse()
            return resp.status, resp.read()
        except (OSError, http.client.HTTPException) as exc:
            raise RegistryError(FORWARDING_ERROR, f"Error while forwarding the request to the "
                                                  f"primary {url}: {exc}") from None
    finally:
        conn.close()
