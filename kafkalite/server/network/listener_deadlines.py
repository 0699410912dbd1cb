"""The deadlines of a KafkaListener (kafka_listener.py, "Idle and
unauthenticated connections"): when its loop must wake next
(``next_deadline``, kept as one time in ``_due``) and what ``expire`` does
then -- throttles over, lingering closes, accept pauses over, idle and
unauthenticated connections closed. A mixin of KafkaListener, on its
process's loop; it acts on the listener's own queues and connections.
What it may import: the standard library.
"""
from __future__ import annotations

import logging
import time

log = logging.getLogger("kafkalite.kafka")

NO_DEADLINE = float("inf")     # a listener's _due with nothing to wait for


class ListenerDeadlines:
    """KafkaListener's deadline methods (its ``_due``, ``_throttled``,
    ``_lingering``, ``_by_activity``, ``_authenticating`` and
    ``_accept_paused_until`` are set up by KafkaListener.__init__)."""

    def next_deadline(self) -> float | None:
        """When ``expire`` next has something to do, or may have: the loop
        wakes then at the latest (None: nothing to wake it for)."""
        due = self._due
        return None if due == NO_DEADLINE else due

    def _first_deadline(self) -> float:
        """When the next throttled connection may read again, the next
        lingering one closes, accepting resumes, or the least recently active
        or the oldest unauthenticated connection falls due (inf: none)."""
        due = [c.throttled_until for c in self._throttled.values()]
        due += [c.close_at for c in self._lingering.values()]
        if self._accept_paused_until:
            due.append(self._accept_paused_until)
        if self._by_activity:
            due.append(next(iter(self._by_activity.values())).active_at + self.idle_s)
        if self._authenticating:
            due.append(next(iter(self._authenticating.values())).auth_deadline)
        return min(due, default=NO_DEADLINE)

    def expire(self) -> None:
        """Unmute the connections whose throttle is over; close the lingering
        ones whose delay is, the idle ones and those that did not authenticate
        in time; accept again once a connection-rate pause is."""
        if time.monotonic() < self._due:
            return      # nothing due: most passes of a busy loop
        self._expire_due()
        # what this left (and what it added: a throttle, a linger, a pause)
        self._due = self._first_deadline()

    def _expire_due(self) -> None:
        if self._by_activity or self._authenticating:
            self._close_idle(time.monotonic())
        if self._accept_paused_until and self._accept_paused_until <= time.monotonic():
            self._accept_paused_until = 0.0
            if self.poller is not None:
                self._listen(True)
            self._accept()
        if self._lingering:
            now = time.monotonic()
            for conn in [c for c in self._lingering.values() if c.close_at <= now]:
                self._close(conn, None)
        if not self._throttled:
            return
        now = time.monotonic()
        for fd, conn in list(self._throttled.items()):
            if conn.closed:
                del self._throttled[fd]
            elif conn.throttled_until <= now:
                del self._throttled[fd]
                conn.throttled_until = 0.0
                self._process(conn)

    def _close_idle(self, now: float) -> None:
        """Close the connections idle for ``idle_s`` and those accepted
        ``auth_timeout_s`` ago and not authenticated yet; each queue is
        looked at from its head up to the first connection not due."""
        pending = self._authenticating
        timed_out = 0
        while pending:
            conn = next(iter(pending.values()))
            if conn.auth_deadline > now:
                break
            timed_out += 1
            self._close(conn, None)     # takes it out of ``pending``
        if timed_out:
            # a client that takes this long is stuck or hostile: logged, but
            # as one line per batch (a scan opens hundreds at once)
            self._auth_failures.warning(
                "%s: closed %d connection(s) that had not authenticated %g s after they "
                "were accepted (authentication_timeout_ms), the last from %s", self.name,
                timed_out, self.auth_timeout_s, conn.address)
        active = self._by_activity
        horizon = now - self.idle_s
        while active:
            conn = next(iter(active.values()))
            if conn.active_at > horizon:
                break
            if conn.waiting or conn.throttled_until or conn.closing:
                # being served, muted by a quota, or closing anyway: not idle;
                # looked at again one idle period from now
                conn.active_at = now
                active.move_to_end(conn.fd)
                continue
            log.debug("%s: closing connection from %s, idle for %g s (connections_max_idle_ms)",
                      self.name, conn.address, now - conn.active_at)
            self._close(conn, None)     # takes it out of ``active``
