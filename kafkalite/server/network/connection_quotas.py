"""Connection-rate quotas (KIP-612): how fast new Kafka connections are taken.

Two bounds, as in Kafka's ConnectionQuotas, both in connections per second
over the client quotas' sampled rate (quotas.QuotaRates: ``quota_window_num``
windows of ``quota_window_size_seconds``, a short history padded to one
window, so a burst of one window's worth is let through):

- per client IP: the ``connection_creation_rate`` of the ``ip`` quota entity
  (``/config/ips/<ip>``, else ``/config/ips/<default>``; AlterClientQuotas,
  quota_control.py). Each IP has its own rate, counted over all of this
  process's Kafka listeners. A connection that would take its IP over the
  bound is closed right after ``accept``, before anything is read from it,
  and is not counted (Kafka records and then unrecords it). Kafka keeps such
  a socket open for the throttle time before closing it; here it is closed
  at once, so a refused client costs no descriptor.
- per listener: ``max_connection_creation_rate`` (Kafka's
  ``max.connection.creation.rate``; 0: unlimited). Over it, the listener
  stops accepting until its rate is back at the bound, as Kafka's acceptor
  waits: new connections wait in the kernel's backlog, none is refused.

Each broker process (the supervisor, every worker) has its own Kafka ports,
so, as a Kafka broker, it counts its own connections; nothing is shared.
Rates of IPs not seen for a whole span (``num * size``) are dropped, so a
scan from many addresses cannot grow this without bound.

Who may call: the owning process's event loop (the Kafka listeners'
``_accept``); nothing here is thread-safe.
"""
from __future__ import annotations

import ipaddress
import logging
import time

from kafkalite.ratelimit import RateLimitedLog
from kafkalite.server.network.quotas import QuotaRates

log = logging.getLogger("kafkalite.quotas")

CONNECTION_CREATION_RATE = "connection_creation_rate"
IP = "ip"
IP_QUOTA = "ip_quota"               # the metric's reason for a connection refused for its IP
PURGE_INTERVAL_S = 10.0             # how often idle IPs' rates are looked for
LOG_INTERVAL_S = 1.0                # a refused IP is logged at most this often


def canonical_ip(text: str) -> str:
    """``text`` as one IP address is always written (``::ffff:10.0.0.1``,
    an IPv4 client on an IPv6 socket, is ``10.0.0.1``); ValueError when
    it is no IP address."""
    address = ipaddress.ip_address(text)
    mapped = getattr(address, "ipv4_mapped", None)
    return str(mapped or address)


class ConnectionQuotas:
    """One process's connection-rate quotas (module docstring).

    ``ip_quotas`` (``replace``): canonical IP, or None for the default ip
    entity -> connections/s. ``rejected``: (listener name, reason) ->
    connections refused, for the metrics."""

    def __init__(self, window_num: int = 11, window_size_s: float = 1.0,
                 max_connection_creation_rate: float = 0, clock=time.monotonic):
        self.window_num = max(2, int(window_num))
        self.window_size = float(window_size_s)
        self.listener_bound = float(max_connection_creation_rate or 0)
        self.clock = clock
        self.ip_quotas: dict[str | None, float] = {}
        self.ip_rates: dict[str, QuotaRates] = {}
        self.listener_rates: dict[str, QuotaRates] = {}
        self.rejected: dict[tuple[str, str], int] = {}
        self._logged: dict[str, float] = {}      # ip -> when its last refusal was logged
        self._next_purge = 0.0
        self._summary = RateLimitedLog(log, per_interval=20, interval_s=10.0)

    @property
    def enabled(self) -> bool:
        return bool(self.ip_quotas) or self.listener_bound > 0

    def replace(self, ip_quotas: dict[str | None, float]) -> None:
        """The ip entities' connection_creation_rate (IP as the quota names
        it, or None for the default)."""
        self.ip_quotas = {ip if ip is None else canonical_ip(ip): rate
                          for ip, rate in ip_quotas.items()}
        if not ip_quotas:
            self.ip_rates.clear()

    # ---- the accept path ---------------------------------------------------------------------

    def listener_delay(self, listener: str) -> float:
        """Seconds ``listener`` must wait before accepting one more
        connection (0: accept now)."""
        bound = self.listener_bound
        if bound <= 0:
            return 0.0
        rates = self.listener_rates.get(listener)
        if rates is None:
            return 0.0
        now = self.clock()
        total = rates.rate(now) * rates.span(now)
        # the span the windows must cover for one more to keep the rate at the bound
        return max(0.0, (total + 1) / bound - rates.span(now))

    def admit(self, listener: str, host: str) -> bool:
        """Count a connection ``listener`` accepted from ``host`` (the
        peer's address as accept gave it); False when its IP's quota
        refuses it (counted in ``rejected``, logged)."""
        now = self.clock()
        if self.ip_quotas:
            try:
                ip = canonical_ip(host)
            except ValueError:
                ip = host
            if now >= self._next_purge:
                self._purge(now)
            bound = self.ip_quotas.get(ip)
            if bound is None:
                bound = self.ip_quotas.get(None)
            if bound is not None:
                rates = self.ip_rates.get(ip)
                if rates is None:
                    rates = self.ip_rates[ip] = QuotaRates(self.window_num, self.window_size)
                total = rates.rate(now) * rates.span(now)
                if (total + 1) / rates.span(now) > bound:
                    self._refuse(listener, ip, bound, now)
                    return False
                rates.record(1.0, now)
        if self.listener_bound > 0:
            rates = self.listener_rates.get(listener)
            if rates is None:
                rates = self.listener_rates[listener] = QuotaRates(self.window_num,
                                                                   self.window_size)
            rates.record(1.0, now)
        return True

    def _refuse(self, listener: str, ip: str, bound: float, now: float) -> None:
        key = (listener, IP_QUOTA)
        self.rejected[key] = self.rejected.get(key, 0) + 1
        if now - self._logged.get(ip, -LOG_INTERVAL_S) >= LOG_INTERVAL_S:
            self._logged[ip] = now
            self._summary.warning("listener %s: connection from %s closed: over its "
                                  "connection_creation_rate quota (%g/s)", listener, ip, bound)

    def _purge(self, now: float) -> None:
        self._next_purge = now + PURGE_INTERVAL_S
        horizon = now - self.window_num * self.window_size
        for ip in [ip for ip, r in self.ip_rates.items() if r.last < horizon]:
            del self.ip_rates[ip]
        for ip in [ip for ip, when in self._logged.items() if when < now - LOG_INTERVAL_S]:
            del self._logged[ip]

    def rejected_rows(self) -> list:
        """[listener, reason, connections refused] for the metrics."""
        return [[*key, n] for key, n in self.rejected.items()]
