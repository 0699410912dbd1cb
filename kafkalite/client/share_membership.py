"""A share consumer's membership in its share group (KIP-932).

The member sends ShareGroupHeartbeat (API 76) to the group coordinator
every ``HeartbeatIntervalMs`` the coordinator answers: epoch 0 joins (with
the subscription), -1 leaves, and an answer may carry the partitions
assigned to the member now (by topic id; several members may share one).
The member id is the client's own, for its whole life (KIP-1082), so a
join whose answer was lost and is sent again is the same member.
UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH rejoin with epoch 0;
NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE look the coordinator up again;
other errors are retried after a pause.

Heartbeats go from a private thread, as the native Consumer's (group.py,
consumer_membership.py): a member that takes long over the records of one
poll stays in the group (its locks may still expire: the broker's
``group.share.record.lock.duration.ms``). What keeps a member in the group
is ``poll``/``consume`` being called at least every
``max.poll.interval.ms``: past that, the thread sends the leave and the
next poll rejoins.

Threads: the heartbeat thread sends every heartbeat on its own connection
and keeps what the answers say (member epoch, assignment) under ``_lock``.
The application's thread (ShareConsumer, from one thread) finds the
coordinator -- the consumer's Metadata is its alone -- with
``coordinator_lost()``/``set_coordinator()``, notes each poll
(``polled()``), and reads ``state()``; ``close()`` stops the thread
before the application's thread sends the leave.
"""
from __future__ import annotations

import logging
import threading
import time
import uuid

import zmq

from kafkalite import errors
from kafkalite.client.connection import Connection
from kafkalite.protocol import ApiKey

log = logging.getLogger("kafkalite.share_consumer")

HEARTBEAT_VERSION = 0
JOIN_EPOCH, LEAVE_EPOCH = 0, -1
RETRY_S = 0.5                # after a failed heartbeat
IDLE_S = 0.05                # nothing to send yet: how soon to look again
# Errors after which the member rejoins with epoch 0 (its membership is gone).
_REJOIN = frozenset({errors.UnknownMemberIdError.code, errors.FencedMemberEpochError.code})
_RETRY_COORDINATOR = frozenset({errors.NotCoordinatorError.code,
                                errors.CoordinatorNotAvailableError.code,
                                errors.CoordinatorLoadInProgressError.code})


class ShareMembership:
    def __init__(self, group_id: str, client_id: str, ctx: zmq.Context,
                 request_timeout: float, max_poll_interval_ms: int):
        self.group_id = group_id
        self.client_id = client_id
        self._ctx = ctx
        self.request_timeout = request_timeout
        self.max_poll_interval = max_poll_interval_ms / 1000.0
        self.member_id = str(uuid.uuid4())
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # shared with the heartbeat thread, under _lock:
        self._subscription: list[str] | None = None
        self._send_subscription = True
        self._epoch = JOIN_EPOCH
        self._assignment: list | None = None     # topic_partitions of the last answer with one
        self._assignment_seq = 0                 # counts the answers that carried one
        self._endpoint: str | None = None        # the coordinator
        self._coordinator_lost = True
        self._interval = 0.1                     # until the coordinator says
        self._last_poll = time.monotonic()
        self._polled_out = False                 # left for max.poll.interval.ms

    # ---- the application's thread -----------------------------------------------------------

    def subscribe(self, topics: list[str]) -> None:
        with self._lock:
            self._subscription = topics
            self._send_subscription = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, daemon=True,
                                            name=f"kafkalite-share-heartbeat-{self.group_id}")
            self._thread.start()
        self._wake.set()

    def coordinator_lost(self) -> bool:
        with self._lock:
            return self._subscription is not None and self._coordinator_lost

    def set_coordinator(self, endpoint: str) -> None:
        with self._lock:
            self._endpoint = endpoint
            self._coordinator_lost = False
        self._wake.set()

    def polled(self) -> None:
        """The application polled: it is alive (max.poll.interval.ms), and a
        member that left for not polling rejoins."""
        with self._lock:
            self._last_poll = time.monotonic()
            if not self._polled_out:
                return
            self._polled_out = False
            self._epoch = JOIN_EPOCH
            self._send_subscription = True
        self._wake.set()

    def state(self) -> tuple[int, list | None, int]:
        """(member epoch, the last assignment answered, its sequence number)."""
        with self._lock:
            return self._epoch, self._assignment, self._assignment_seq

    def unsubscribe(self) -> int:
        """No more heartbeats until the next subscribe, which joins afresh;
        the member epoch it had (> 0: the application's thread sends the
        leave)."""
        with self._lock:
            epoch, self._epoch = self._epoch, JOIN_EPOCH
            self._subscription = None
            self._send_subscription = True
            self._polled_out = False
            self._assignment, self._assignment_seq = [], self._assignment_seq + 1
            return epoch

    def close(self) -> int:
        """Stop the heartbeat thread; the member epoch it had (> 0: the
        application's thread sends the leave)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            epoch, self._epoch = self._epoch, LEAVE_EPOCH
            return epoch

    def leave_body(self) -> dict:
        return {"group_id": self.group_id, "member_id": self.member_id,
                "member_epoch": LEAVE_EPOCH, "rack_id": None, "subscribed_topic_names": None}

    # ---- the heartbeat thread ---------------------------------------------------------------

    def _loop(self) -> None:
        conn: Connection | None = None
        wait = 0.0
        try:
            while not self._stop.is_set():
                self._wake.wait(wait)
                self._wake.clear()
                if self._stop.is_set():
                    return
                wait = IDLE_S
                with self._lock:
                    endpoint = None if self._coordinator_lost else self._endpoint
                    idle = self._subscription is None or self._polled_out
                    late = (self._epoch > 0 and
                            time.monotonic() - self._last_poll > self.max_poll_interval)
                    if late:
                        self._polled_out = True
                        self._epoch = JOIN_EPOCH
                    body = {"group_id": self.group_id, "member_id": self.member_id,
                            "member_epoch": self._epoch, "rack_id": None,
                            "subscribed_topic_names": (
                                self._subscription
                                if self._send_subscription or self._epoch == JOIN_EPOCH
                                else None)}
                if endpoint is None or (idle and not late):
                    continue
                if conn is not None and conn.endpoint != endpoint:
                    conn.close()
                    conn = None
                try:
                    conn = conn or Connection(endpoint, self.client_id, self._ctx, watch=True)
                except errors.KafkaError as exc:   # a link not made now fails this beat
                    log.info("share group %s: no link to the coordinator: %s", self.group_id, exc)
                    with self._lock:
                        self._coordinator_lost = True
                    wait = RETRY_S
                    continue
                if late:
                    log.warning("share group %s: poll() was not called for %d ms "
                                "(max.poll.interval.ms); leaving the group", self.group_id,
                                self.max_poll_interval * 1000)
                    conn.send(ApiKey.SHARE_GROUP_HEARTBEAT, self.leave_body(),
                              expect_response=False, version=HEARTBEAT_VERSION)
                    continue
                try:
                    resp = self._request(conn, body)
                    if resp is None:
                        return              # closing
                except zmq.ZMQError:
                    raise
                except Exception as exc:    # noqa: BLE001 (the thread must outlive any answer)
                    log.info("share group %s: heartbeat failed: %s", self.group_id, exc)
                    conn.close()
                    conn = None
                    with self._lock:
                        self._coordinator_lost = True
                    wait = RETRY_S
                    continue
                wait = self._on_answer(body, resp)
        except zmq.ZMQError as exc:   # the consumer closed its context under us
            log.debug("share group %s: heartbeat thread stops: %s", self.group_id, exc)
        finally:
            if conn is not None:
                conn.close()

    def _request(self, conn: Connection, body: dict) -> dict | None:
        """The answer to one heartbeat; None if the consumer closes meanwhile
        (its close does not wait out a request timeout)."""
        cid = conn.send(ApiKey.SHARE_GROUP_HEARTBEAT, body, version=HEARTBEAT_VERSION)
        deadline = time.monotonic() + self.request_timeout
        while not self._stop.is_set():
            got = conn.recv(100)
            if got is not None and got[0] == cid:
                if isinstance(got[1], Exception):
                    raise got[1]
                return got[1]
            if not conn.alive():
                raise errors.NetworkError(f"the coordinator {conn.endpoint} went away")
            if time.monotonic() > deadline:
                raise errors.RequestTimedOutError(
                    f"no heartbeat answer from {conn.endpoint} within "
                    f"{self.request_timeout:.1f} s")
        return None

    def _on_answer(self, body: dict, resp: dict) -> float:
        """Keep what a heartbeat's answer says; the seconds until the next one."""
        code = resp["error_code"]
        with self._lock:
            if body["member_epoch"] != self._epoch or self._polled_out:
                return 0.0              # answered for a membership since given up
            if code in _REJOIN:
                self._epoch = JOIN_EPOCH
                self._send_subscription = True
                return 0.0
            if code in _RETRY_COORDINATOR:
                self._coordinator_lost = True
                return RETRY_S
            if code:
                log.info("share group %s: heartbeat: %s", self.group_id,
                         resp.get("error_message") or errors.error_for_code(code).name)
                return RETRY_S
            self._send_subscription = False
            self.member_id = resp["member_id"] or self.member_id
            self._epoch = resp["member_epoch"]
            if resp["heartbeat_interval_ms"] > 0:
                self._interval = resp["heartbeat_interval_ms"] / 1000.0
            if resp["assignment"] is not None:
                self._assignment = resp["assignment"]["topic_partitions"]
                self._assignment_seq += 1
            return self._interval
