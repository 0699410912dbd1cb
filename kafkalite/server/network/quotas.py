"""Client quotas: what a client may use, and the throttle when it used more.

Kafka's client quotas (KIP-13, KIP-55, KIP-124, KIP-219) in one broker
process. The quota configs themselves are the controller's (quota_control.py:
AlterClientQuotas, DescribeClientQuotas, their storage); every process gets
the whole set and enforces it here.

Quota keys, as Kafka names them: ``producer_byte_rate`` (bytes/s of produce
requests), ``consumer_byte_rate`` (bytes/s of fetch responses) and
``request_percentage`` (handler time, in percent of one broker thread).

Entities and matching: a config belongs to an entity, a user and/or a client
id, each either named or the default. A request's user is its principal's
name (``User:alice`` -> ``alice``; ``ANONYMOUS`` unauthenticated), its client
id the request header's. For each key separately, the first of these that
has the key applies (Kafka's order)::

    /config/users/<user>/clients/<client-id>
    /config/users/<user>/clients/<default>
    /config/users/<user>
    /config/users/<default>/clients/<client-id>
    /config/users/<default>/clients/<default>
    /config/users/<default>
    /config/clients/<client-id>
    /config/clients/<default>

The usage a quota bounds is counted per *quota entity* as Kafka's metric
tags are: by user and client id when the matched config names both (a
default included: each user under ``/users/<default>`` has its own rate),
by user alone, or by client id alone.

Rates: Kafka's sampled rate, ``quota_window_num`` windows of
``quota_window_size_seconds`` each; the rate is what the live windows hold
divided by the time they cover (QuotaRates says how that is measured). A request over the bound is throttled, as in
KIP-219, by the time that brings the rate back to it::

    throttle = (rate - bound) / bound * span     (at most num * size)

Deliberate differences: the time covered is measured from the end of the
last window dropped, not from the oldest window's start (QuotaRates), and
Kafka pads a short span to ``quota_window_num -
1`` whole windows, so a new client may send ten windows' worth of its quota
at once; it is then starved until that burst's window expires, when the
emptied windows let the next burst through, and the quota holds only on
average over many spans (measured here: 1.1-1.2x over 30-45 s). The span
here is padded to one window (``MIN_FULL_WINDOWS``): a new client bursts at
most one window's worth, and the rate stays at the quota from the start.

The listener puts that in the response's ``throttle_time_ms`` at once and
then mutes the connection (Kafka path) or holds the client's next answers
(native path, shared-memory rings) for that long.

The whole node shares one rate: a producer writing partitions led by
several workers is held to its quota, not to N times it. Each process
counts what it served itself (a ``QuotaRates`` per quota entity), and,
every ``SHARE_INTERVAL_S`` while it has something new (and every
``IDLE_SHARE_INTERVAL_S`` while older rates decay), tells the supervisor
its own rates on the control channel (``quota_usage``); the supervisor
answers each with the sum of every *other* process's rates (its own
included), which this process adds to its own when it computes a throttle.
Chosen over a shared-memory counter because the channel exists, works
across a cluster node's processes the same way, and needs no locking: a
rate seen 100 ms late moves the throttle by 100 ms / span of the excess,
about 1 % with Kafka's 11 one-second windows. Rates of other processes not
refreshed for ``num * size`` are forgotten.

Who may call: the owning process's event loop; nothing here is thread-safe.
"""
from __future__ import annotations

import time

from kafkalite.protocol import ApiKey

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
QUOTA_KEYS = (PRODUCER_BYTE_RATE, CONSUMER_BYTE_RATE, REQUEST_PERCENTAGE)
USER = "user"
CLIENT_ID = "client-id"
SHARE_INTERVAL_S = 0.1
IDLE_SHARE_INTERVAL_S = 1.0     # rates still in the windows but not growing: sent this often
# Requests no quota counts, as Kafka exempts them: what a client needs to
# learn it is throttled, and authentication.
EXEMPT_APIS = frozenset((ApiKey.API_VERSIONS, ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE))

# A short history's span is padded to this many whole windows (Kafka pads
# to quota_window_num - 1; module docstring).
MIN_FULL_WINDOWS = 1
_ANY = object()     # a level of the matching order that names the request's own user/client


def user_of(principal: str) -> str:
    """The quota user of a principal: its name for ``User:`` principals
    (what Kafka's user entities name), the whole principal otherwise."""
    return principal[5:] if principal.startswith("User:") else principal


def fetch_response_bytes(body: dict) -> int:
    """The record bytes of a Fetch response body (what a fetch quota counts)."""
    total = 0
    for topic in body.get("responses") or ():
        partitions = topic.get("partitions") or ()
        # partitions answered inline (a FetchedPartitions) carry no records:
        # only its dicts are looked at
        for p in getattr(partitions, "dicts", partitions):
            records = p.get("records")
            if records is not None:
                length = getattr(records, "length", None)      # a FileRegion's
                total += length if length is not None else len(records)
    return total


# Kafka's matching order (module docstring): (user part, client part) with
# _ANY the request's own name, None the default, False absent.
_ORDER = ((_ANY, _ANY), (_ANY, None), (_ANY, False), (None, _ANY), (None, None), (None, False),
          (False, _ANY), (False, None))


class QuotaRates:
    """The sampled rate (module docstring) of one quota entity.

    ``since`` is the time from which the live windows hold everything that
    was recorded: the first record, then the end of the last window
    purged. Windows start at a record and last ``size``, so the span
    ``now - since`` has exactly the live windows' total in it, also when
    throttled pauses left gaps between windows (measuring from the oldest
    window's start, as Kafka does, skips such a gap and overstates the
    rate after each purge)."""

    __slots__ = ("windows", "num", "size", "last", "since")

    def __init__(self, num: int, size: float):
        self.windows: list[list] = []      # [start, total], oldest first
        self.num = num
        self.size = size
        self.last = 0.0
        self.since = None

    def record(self, value: float, now: float) -> None:
        windows = self.windows
        if self.since is None:
            self.since = now
        if not windows or now >= windows[-1][0] + self.size:
            windows.append([now, 0.0])
            if len(windows) > self.num:
                self._purge_first()
        windows[-1][1] += value
        self.last = now

    def _purge_first(self) -> None:
        start, _ = self.windows.pop(0)
        self.since = max(self.since, start + self.size)

    def span(self, now: float) -> float:
        since = now if self.since is None else self.since
        return max(now - since, MIN_FULL_WINDOWS * self.size)

    def rate(self, now: float) -> float:
        horizon = now - self.num * self.size
        windows = self.windows
        while windows and windows[0][0] <= horizon:     # Kafka's purge of obsolete samples
            self._purge_first()
        if not windows:
            return 0.0
        return sum(w[1] for w in windows) / self.span(now)


class QuotaManager:
    """One process's enforcement of the node's client quotas.

    ``replace`` takes quota_control.py's configs, (user, client, ip) ->
    {quota key: value}: each part a name, None for the default entity,
    False when the entity has no such part (``/users/alice`` is ("alice",
    False, False)). ``configs`` keeps the user/client ones as (user, client);
    the ip ones (connection rates) go to ``connections``, the process's
    connection_quotas.ConnectionQuotas, when there is one.
    ``share(message)``, when given, sends a ``quota_usage`` message to the
    supervisor (workers); the supervisor gives its own rates to
    ``others_of`` directly."""

    def __init__(self, window_num: int = 11, window_size_s: float = 1.0, share=None,
                 clock=time.monotonic, connections=None):
        self.window_num = max(2, int(window_num))
        self.window_size = float(window_size_s)
        self.configs: dict[tuple, dict] = {}
        self.rates: dict[tuple, QuotaRates] = {}       # (quota key, user, client) -> rates
        self.others: dict[tuple, float] = {}           # the rest of the node's rates
        self.share = share
        self.clock = clock
        self.connections = connections
        self._dirty = False
        self._next_share = 0.0
        # what the metrics publish: (quota key, user, client) -> total ms throttled
        self.throttle_ms: dict[tuple, float] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.configs)

    def replace(self, configs: dict[tuple, dict]) -> None:
        self.configs = {(user, client): values
                        for (user, client, ip), values in configs.items() if ip is False}
        if self.connections is not None:
            self.connections.replace({ip: values[key] for (_, _, ip), values in configs.items()
                                      for key in values if ip is not False})

    # ---- matching ----------------------------------------------------------------------------

    def quota_of(self, key: str, user: str, client: str) -> tuple[float, tuple] | None:
        """(bound, quota entity) of ``key`` for this user and client id,
        None when no config has it."""
        configs = self.configs
        for u, c in _ORDER:
            values = configs.get((user if u is _ANY else u, client if c is _ANY else c))
            if values is not None and key in values:
                return values[key], (key, user if u is not False else "",
                                     client if c is not False else "")
        return None

    # ---- recording and throttling ------------------------------------------------------------

    def record(self, key: str, user: str, client: str, value: float) -> int:
        """Count ``value`` against the ``key`` quota of (user, client id);
        the throttle time it earns, in ms (0: within the quota)."""
        found = self.quota_of(key, user, client)
        if found is None:
            return 0
        bound, sensor = found
        now = self.clock()
        rates = self.rates.get(sensor)
        if rates is None:
            rates = self.rates[sensor] = QuotaRates(self.window_num, self.window_size)
        rates.record(value, now)
        self._dirty = True
        rate = rates.rate(now) + self.others.get(sensor, 0.0)
        if rate <= bound:
            return 0
        if bound <= 0:
            throttle = self.window_num * self.window_size
        else:
            throttle = min((rate - bound) / bound * rates.span(now),
                           self.window_num * self.window_size)
        ms = int(throttle * 1000)
        if ms:
            self.throttle_ms[sensor] = self.throttle_ms.get(sensor, 0.0) + ms
        return ms

    def on_request(self, user: str, client: str, api_key: int, request_bytes: int,
                   response_bytes: int, handler_s: float) -> int:
        """Count one answered request; its throttle time in ms (Kafka's:
        the largest of the byte-rate and request quotas' throttles)."""
        if not self.configs or api_key in EXEMPT_APIS:
            return 0
        ms = 0
        if api_key == ApiKey.PRODUCE:
            ms = self.record(PRODUCER_BYTE_RATE, user, client, request_bytes)
        elif api_key == ApiKey.FETCH:
            ms = self.record(CONSUMER_BYTE_RATE, user, client, response_bytes)
        if handler_s > 0:
            ms = max(ms, self.record(REQUEST_PERCENTAGE, user, client, handler_s * 100.0))
        return ms

    # ---- sharing the node's rates ------------------------------------------------------------

    def local_rates(self) -> dict[tuple, float]:
        now = self.clock()
        out = {}
        horizon = now - self.window_num * self.window_size
        for sensor, rates in list(self.rates.items()):
            if rates.last < horizon:
                del self.rates[sensor]          # idle for a whole span: forgotten
                continue
            out[sensor] = rates.rate(now)
        return out

    def tick(self) -> None:
        """Send this process's rates to the supervisor when there is news
        (a worker's loop calls it every turn)."""
        if self.share is None or not (self._dirty or self.rates):
            return
        now = self.clock()
        if now < self._next_share:
            return
        if not self._dirty and now < self._next_share + IDLE_SHARE_INTERVAL_S:
            return          # idle: rates decaying are sent now and then, not every turn
        self._dirty = False
        self._next_share = now + SHARE_INTERVAL_S
        self.share({"type": "quota_usage",
                    "rates": [[*sensor, rate] for sensor, rate in self.local_rates().items()]})

    def set_others(self, rows) -> None:
        """The rest of the node's rates (the supervisor's answer)."""
        self.others = {(k, u, c): float(r) for k, u, c, r in rows}

    def next_deadline(self) -> float | None:
        return self._next_share if self.share is not None and self._dirty else None

    def throttle_rows(self) -> list:
        """[quota key, user, client, ms throttled in all] for the metrics."""
        return [[*sensor, ms] for sensor, ms in self.throttle_ms.items()]


class NodeQuotaRates:
    """The supervisor's view of every process's rates: each worker's last
    report, and the supervisor's own QuotaManager."""

    def __init__(self, own: QuotaManager):
        self.own = own
        self.reports: dict[int, tuple[float, dict]] = {}   # worker -> (when, {sensor: rate})

    def on_report(self, worker: int, rows) -> list:
        """Store ``worker``'s rates; the sum of everyone else's, to send back."""
        now = time.monotonic()
        self.reports[worker] = (now, {(k, u, c): float(r) for k, u, c, r in rows})
        horizon = now - self.own.window_num * self.own.window_size
        totals: dict[tuple, float] = {}
        for w, (when, rates) in list(self.reports.items()):
            if when < horizon:
                del self.reports[w]
                continue
            for sensor, rate in rates.items():
                totals[sensor] = totals.get(sensor, 0.0) + rate
        self.own.set_others([[*s, r] for s, r in totals.items()])
        others = dict(totals)
        for sensor, rate in self.reports[worker][1].items():
            others[sensor] -= rate
        for sensor, rate in self.own.local_rates().items():
            others[sensor] = others.get(sensor, 0.0) + rate
        return [[*s, r] for s, r in others.items() if r > 0]

    def node_rates(self) -> dict[tuple, float]:
        """The node's rate of every active quota entity (for the metrics)."""
        horizon = time.monotonic() - self.own.window_num * self.own.window_size
        totals = dict(self.own.local_rates())
        for when, rates in self.reports.values():
            if when >= horizon:
                for sensor, rate in rates.items():
                    totals[sensor] = totals.get(sensor, 0.0) + rate
        return totals
