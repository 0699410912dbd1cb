"""Incremental fetch sessions (KIP-227): a broker's side, with Kafka's rules.

A client fetching the same partitions over and over (a consumer, a
follower) opens a session with a full fetch; after that each fetch names
only the partitions it adds or whose parameters changed (a new fetch
offset after records, a new leader epoch) and those it drops
(``forgotten_topics_data``), and each answer lists only the partitions
with something to say -- records, an error, a high watermark or log start
offset that moved since the session's last answer -- so neither side pays
per partition for the idle ones. What a fetch's metadata asks for
(Kafka's FetchManager.newContext):

- ``session_epoch`` -1 (FINAL) or a Fetch before v7: a full fetch in no
  session (a ``session_id`` given is closed first);
- epoch 0 (INITIAL): a full fetch that closes ``session_id``'s session if
  any, and opens a new one of its partitions when the cache has a slot
  for it (or may evict a session for it); the answer names it
  (``session_id`` 0: none was made, the client fetches in full again);
- epoch > 0: an incremental fetch in ``session_id``'s session, which must
  exist (FETCH_SESSION_ID_NOT_FOUND), be at that epoch
  (INVALID_FETCH_SESSION_EPOCH: a duplicate or lost request) and name
  topics as the request's version does, by id from v13 (FETCH_SESSION_
  TOPIC_ID_ERROR). Its partitions are added or updated, the forgotten ones
  removed; a session left empty is closed and the fetch answered in no
  session (``session_id`` 0). Each incremental fetch moves the epoch on
  (past 2**31-1 back to 1), and its answer is checked against it when it
  is sent: a fetch that waited while another used the session gets
  INVALID_FETCH_SESSION_EPOCH. A session error answers the whole fetch,
  with no partitions.

The cache holds ``max.incremental.fetch.session.cache.slots`` sessions
(FetchSessionCache): a new session takes a free slot, else evicts one that
went unused for ``EVICTION_MS``, else one of the ``evictable`` sessions
that is worth less -- a consumer's before a follower's (followers'
sessions are *privileged*), then the smaller -- where a session becomes
evictable by consumers only ``EVICTION_MS`` after it was made, so that a
young session is not thrown out by the next one (Kafka's tryEvict; its
trees are scans here, over at most that many sessions, and only when the
cache is full).

The partitions of a session live in C (ext/fetch_session_state.pyx's
SessionPartitions): looking at 10,000 idle ones costs microseconds.

Who may call: the replica manager's fetch path (fetch_handler.py), on the
worker's event-loop thread.
"""
from __future__ import annotations

import random
import time

from kafkalite import errors
from kafkalite._ext.fetch_session_state import SessionPartitions
from kafkalite.protocol.fetch_sessions import (FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID,
                                               MAX_EPOCH, next_epoch)

FIRST_SESSION_VERSION = 7       # Fetch v7 brought sessions
TOPIC_IDS_VERSION = 13          # from v13 a session names its topics by id
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused this
# long may be evicted by any other; one made this long ago becomes evictable
EVICTION_MS = 120_000
DEFAULT_CACHE_SLOTS = 1000      # Kafka's max.incremental.fetch.session.cache.slots


def now_ms() -> int:
    return int(time.monotonic() * 1000)


class FetchSession:
    """One session: its partitions (SessionPartitions), the epoch the next
    incremental fetch must carry, and what the cache orders it by."""

    __slots__ = ("id", "privileged", "partitions", "creation_ms", "last_used_ms", "epoch",
                 "cached_size", "evictable_by_all", "evictable_by_privileged")

    def __init__(self, session_id: int, privileged: bool, partitions: SessionPartitions,
                 now: int):
        self.id = session_id
        self.privileged = privileged          # a follower's
        self.partitions = partitions
        self.creation_ms = now
        self.last_used_ms = now
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1                 # its size when last touched; -1: not cached
        self.evictable_by_all = False
        self.evictable_by_privileged = False

    @property
    def uses_topic_ids(self) -> bool:
        return self.partitions.uses_topic_ids

    def evictable_key(self) -> tuple:
        return (self.privileged, self.cached_size, self.id)

    def __repr__(self) -> str:
        return (f"FetchSession(id={self.id}, privileged={self.privileged}, "
                f"partitions={len(self.partitions)}, epoch={self.epoch})")


class FetchSessionCache:
    """The broker's sessions, at most ``max_entries`` (module docstring).
    ``clock()``: milliseconds, monotonic."""

    def __init__(self, max_entries: int = DEFAULT_CACHE_SLOTS, eviction_ms: int = EVICTION_MS,
                 clock=now_ms):
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.clock = clock
        self.sessions: dict[int, FetchSession] = {}
        self.evictions = 0
        self.total_partitions = 0       # over the sessions, as last touched

    def __len__(self) -> int:
        return len(self.sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self.sessions.get(session_id)

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, MAX_EPOCH)
            if session_id not in self.sessions:
                return session_id

    def maybe_create(self, now: int, privileged: bool, size: int, make) -> int:
        """A new session of ``make()``'s partitions (``size`` of them) if
        there is room or a session may be evicted for it: its id, else 0."""
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, size, now):
            return INVALID_SESSION_ID
        session = FetchSession(self._new_id(), privileged, make(), now)
        self.sessions[session.id] = session
        self.touch(session, now)
        return session.id

    def _try_evict(self, privileged: bool, size: int, now: int) -> bool:
        if not self.sessions:
            return False
        stale = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now - stale.last_used_ms > self.eviction_ms:
            self.remove(stale.id)
            self.evictions += 1
            return True
        candidates = [s for s in self.sessions.values()
                      if (s.evictable_by_privileged if privileged else s.evictable_by_all)]
        if not candidates:
            return False
        cheapest = min(candidates, key=FetchSession.evictable_key)
        if (privileged, size, 0) < cheapest.evictable_key():
            return False
        self.remove(cheapest.id)
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        session = self.sessions.pop(session_id, None)
        if session is not None and session.cached_size > 0:
            self.total_partitions -= session.cached_size
        return session

    def touch(self, session: FetchSession, now: int) -> None:
        """The session was used now: its place in the eviction order."""
        session.last_used_ms = now
        if session.cached_size > 0:
            self.total_partitions -= session.cached_size
        session.cached_size = len(session.partitions)
        self.total_partitions += session.cached_size
        old = now - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old


SESSIONLESS, FULL, INCREMENTAL = "sessionless", "full", "incremental"


class FetchContext:
    """What a fetch's session metadata made of it (module docstring):
    ``kind`` SESSIONLESS, FULL (a session is made when it is answered) or
    INCREMENTAL (in ``session``, answered if the session is still at
    ``expected_epoch`` then); or an ``error`` (a KafkaError class) that
    answers the whole fetch."""

    __slots__ = ("kind", "session", "expected_epoch", "error", "error_session_id")

    def __init__(self, kind: str, session: FetchSession | None = None,
                 error: type[errors.KafkaError] | None = None):
        self.kind = kind
        self.session = session
        self.expected_epoch = session.epoch if session is not None else None
        self.error = error
        self.error_session_id = INVALID_SESSION_ID


def new_context(cache: FetchSessionCache, version: int, body: dict,
                extra_topics: list = ()) -> FetchContext:
    """The context of a fetch ``body`` of ``version``; an incremental
    fetch's partitions (and ``extra_topics``: its topics the authorizer
    took out, which stay in the session) go into its session here."""
    session_id = body.get("session_id", INVALID_SESSION_ID) if version >= \
        FIRST_SESSION_VERSION else INVALID_SESSION_ID
    epoch = body.get("session_epoch", FINAL_EPOCH) if version >= FIRST_SESSION_VERSION \
        else FINAL_EPOCH
    if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
        if session_id != INVALID_SESSION_ID:
            cache.remove(session_id)
        return FetchContext(FULL if epoch == INITIAL_EPOCH else SESSIONLESS)
    session = cache.get(session_id)
    if session is None:
        return FetchContext(SESSIONLESS, error=errors.FetchSessionIdNotFoundError)
    if session.epoch != epoch:
        return FetchContext(SESSIONLESS, error=errors.InvalidFetchSessionEpochError)
    if session.uses_topic_ids != (version >= TOPIC_IDS_VERSION):
        return FetchContext(SESSIONLESS, error=errors.FetchSessionTopicIdError)
    session.partitions.update(list(body.get("topics") or ()) + list(extra_topics),
                              list(body.get("forgotten_topics_data") or ()))
    if not len(session.partitions):
        cache.remove(session.id)
        return FetchContext(SESSIONLESS)
    cache.touch(session, cache.clock())
    session.epoch = next_epoch(session.epoch)
    return FetchContext(INCREMENTAL, session)


def session_error_response(context: FetchContext) -> dict:
    """The answer to a fetch whose session metadata was refused."""
    return {"throttle_time_ms": 0, "error_code": context.error.code,
            "session_id": context.error_session_id, "responses": []}
