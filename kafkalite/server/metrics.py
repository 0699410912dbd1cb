"""A node's metrics and health: counted in every broker process, served by the supervisor.

Two halves, one per kind of process:

- In every broker process (the supervisor and each partition worker):
  ``RequestStats`` counts the requests the process answered and their
  time, per API (``RequestDispatcher`` hands it to each ``RequestContext``,
  which records when it is answered, so a request waiting in the purgatory
  counts its wait, as Kafka's TotalTimeMs does). A worker's replica manager
  counts bytes and records in and bytes out per topic, per append and per
  fetch response (never per record). ``WorkerMetrics.snapshot`` turns a
  worker's figures into one compact JSON message, sent to the supervisor on
  the control channel once a second (the worker's housekeeping interval).
  Per-partition figures are sent when they change, and only the partitions
  the housekeeping tick looked at are looked at (those that changed lately
  and the sweep's share: every partition within ``SWEEP_S``) and those the
  controller assigned or unassigned since (``touched``), so an idle worker
  with 10,000 partitions sends next to nothing.

- In the supervisor, ``NodeMetrics`` keeps the workers' latest snapshots
  and, every ``PUBLISH_INTERVAL_S`` on the supervisor's loop, builds an
  immutable view of the node (the workers' sums, plus what only the
  supervisor knows: partitions without a leader or with a short ISR,
  consumer-group lag). The HTTP server's threads (http_server.py) serve that
  view as Prometheus text on ``/metrics`` (through ``prometheus_client``'s
  exposition, with a custom collector that only reads the view) and the
  node's health on ``/health``; the loop never waits for it, and the thread
  never touches the controller's or coordinator's state. Other WSGI apps
  can be mounted under a path prefix on the same port (the web console,
  kafkalite/webconsole/, mounted by ``kafkalite server``): they run on
  that server's threads and may read ``registry``, never the loop's state.
  The port is served by kafkalite's one HTTP server (http_server.py: its
  keep-alive, its cap of ``http_max_connections`` connections and TLS);
  this module counts the connections over the cap and answers the paths.

Counters survive worker restarts: when a worker's snapshot comes from a new
process, the old process's last figures are kept as a base, so node totals
never go down (what a killed worker counted after its last snapshot, at
most a second's worth, is lost).

Client quotas (quotas.py): each process counts the time it throttled each
quota entity; a worker's snapshot carries its totals (``quota_throttles``),
and the supervisor adds its own and the node's current rates (from the
rates the processes share for enforcement), as Kafka's per-user/client-id
``Produce``, ``Fetch`` and ``Request`` quota metrics. Connections a Kafka
listener refused for a connection-rate quota (connection_quotas.py) are
counted the same way (``connections_rejected``), per listener and reason.

Metric names follow Kafka's JMX names as Prometheus' JMX exporter renders
them (``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t``
-> ``kafka_server_brokertopicmetrics_bytesin_total{topic="t"}``); docs/operations.md
lists them.

prometheus_client and the HTTP server are imported by ``NodeMetrics``
alone: a worker, which only sends snapshots, does not load them.

Who may call: ``RequestStats`` and ``worker_snapshot`` from a broker
process's loop thread; ``NodeMetrics`` from the supervisor's loop thread
(its HTTP thread is internal).
"""
from __future__ import annotations

import bisect
import functools
import json
import logging
import os
import resource
import threading
import time

from kafkalite.protocol import ApiKey

log = logging.getLogger("kafkalite.metrics")

PUBLISH_INTERVAL_S = 1.0      # how often the supervisor rebuilds the served view
# Request latency buckets, in ms like Kafka's TotalTimeMs (upper bounds; +Inf is implied).
LATENCY_BUCKETS_MS = (0.5, 1.0, 2.5, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0,
                      2500.0, 5000.0, 10000.0, 30000.0)
_PAGE = os.sysconf("SC_PAGE_SIZE")


def request_name(api_key: int) -> str:
    """Kafka's name of an API in its request metrics: ``Produce``, ``ApiVersions``."""
    try:
        return "".join(w.capitalize() for w in ApiKey(api_key).name.split("_"))
    except ValueError:
        return f"Api{int(api_key)}"


# ---- in every broker process -------------------------------------------------------------------

class RequestStats:
    """Per API key: [requests answered, total ms, histogram bucket counts];
    and the security audit's counts: requests denied by the authorizer per
    "ResourceType:Operation" (``denied``, authorizer.py) and the denials
    its rate-limited log left out (``audit_lines_dropped``); failed
    authentications (``authentication_failures``), successful
    re-authentications and connections closed because their SASL session
    expired (KIP-368), all counted by the Kafka listener."""

    __slots__ = ("by_api", "denied", "audit_lines_dropped", "authentication_failures",
                 "reauthentications", "expired_sessions_closed")
    # the histogram's bounds, for the listener's C twin of observe (kafka_wake.pyx)
    buckets_ms = LATENCY_BUCKETS_MS

    def __init__(self):
        self.by_api: dict[int, list] = {}
        self.denied: dict[str, int] = {}
        self.audit_lines_dropped = 0
        self.authentication_failures = 0
        self.reauthentications = 0
        self.expired_sessions_closed = 0

    def observe(self, api_key: int, seconds: float) -> None:
        stats = self.by_api.get(api_key)
        if stats is None:
            stats = self.by_api[api_key] = [0, 0.0, [0] * (len(LATENCY_BUCKETS_MS) + 1)]
        ms = seconds * 1000.0
        stats[0] += 1
        stats[1] += ms
        stats[2][bisect.bisect_left(LATENCY_BUCKETS_MS, ms)] += 1

    def snapshot(self) -> dict:
        return {request_name(k): [s[0], s[1], list(s[2])] for k, s in self.by_api.items()}

    def security_snapshot(self) -> dict:
        return {"denied": dict(self.denied), "audit_lines_dropped": self.audit_lines_dropped,
                "authentication_failures": self.authentication_failures,
                "reauthentications": self.reauthentications,
                "expired_sessions_closed": self.expired_sessions_closed}


_SECURITY_COUNTS = ("audit_lines_dropped", "authentication_failures", "reauthentications",
                    "expired_sessions_closed")


def _add_security(into: dict, figures: dict) -> None:
    for key, n in figures.get("denied", {}).items():
        into["denied"][key] = into["denied"].get(key, 0) + n
    for name in _SECURITY_COUNTS:
        into[name] += figures.get(name, 0)


def _no_security() -> dict:
    return {"denied": {}, **{name: 0 for name in _SECURITY_COUNTS}}


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


class WorkerMetrics:
    """A worker's side: its RequestStats, and the partition figures it last
    sent. Per-partition figures are the leader's (a follower's log is a copy)."""

    def __init__(self, index: int):
        self.index = index
        self.requests = RequestStats()
        # partitions the controller assigned or unassigned since the last
        # snapshot: their leadership may have come or gone
        self.touched: set[tuple[str, int]] = set()
        self._full = True                  # the first snapshot of a process: every partition
        self._sent: dict[tuple[str, int], tuple] = {}
        # tiered partitions led here -> (copy lag bytes, segments), as last looked at
        self._copy_lag: dict[tuple[str, int], tuple[int, int]] = {}

    def snapshot(self, replica_manager) -> dict:
        """The control message; call after ``replica_manager.housekeeping()``."""
        full, self._full = self._full, False
        partitions = replica_manager.partitions
        changed, gone = [], []
        keys = list(partitions) if full else replica_manager.visited + list(self.touched)
        self.touched = set()
        for key in keys:
            part = partitions.get(key)
            if part is None or not part.is_leader:
                self._copy_lag.pop(key, None)
                if self._sent.pop(key, None) is not None:
                    gone.append(list(key))
                continue
            plog = part.log
            if plog.remote is not None and not plog.closed:
                self._copy_lag[key] = plog.remote.copy_lag(plog.segments[:-1],
                                                           plog.last_stable_offset)
            else:
                self._copy_lag.pop(key, None)
            figures = (plog.log_end_offset, plog.high_watermark, plog.size_in_bytes,
                       plog.log_start_offset)
            if self._sent.get(key) != figures:
                self._sent[key] = figures
                changed.append([key[0], key[1], *figures])
        copy_lag: dict[str, list[int]] = {}
        for (topic, _), (nbytes, count) in self._copy_lag.items():
            lag = copy_lag.setdefault(topic, [0, 0])
            lag[0] += nbytes
            lag[1] += count
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return {"type": "metrics", "worker": self.index, "pid": os.getpid(),
                "requests": self.requests.snapshot(),
                "security": self.requests.security_snapshot(),
                "topics": {t: list(s) for t, s in replica_manager.topic_stats.items()},
                "remote": _remote_topic_stats(), "copy_lag": copy_lag,
                "remote_refused": _remote_refused(),
                "full": full, "partitions": changed, "gone": gone,
                "partition_count": len(partitions),
                "leader_count": len(self._sent), "purgatory": replica_manager.purgatory.sizes(),
                "fetch_sessions": replica_manager.fetches.figures(),
                "cpu_seconds": usage.ru_utime + usage.ru_stime, "rss_bytes": _rss_bytes(),
                "replica_fetch": dict(getattr(replica_manager.fetcher, "fetched_bytes", {}))}


def _remote_topic_stats() -> dict:
    """This process's tiered-storage counters per topic (none without a
    tiered topic: storage/remote is then not even imported)."""
    import sys
    remote_log = sys.modules.get("kafkalite.storage.remote.remote_log")
    return {} if remote_log is None else remote_log.REMOTE_TOPIC_STATS.snapshot()


def _remote_refused() -> list[str]:
    """The calls to the remote store it refused outright (store_backoff.py)."""
    import sys
    backoff = sys.modules.get("kafkalite.storage.remote.store_backoff")
    return [] if backoff is None else backoff.REFUSED.snapshot()


# ---- in the supervisor -------------------------------------------------------------------------

def _add_requests(into: dict, requests: dict) -> None:
    for name, (count, total, buckets) in requests.items():
        have = into.get(name)
        if have is None:
            into[name] = [count, total, list(buckets)]
        else:
            have[0] += count
            have[1] += total
            have[2] = [a + b for a, b in zip(have[2], buckets)]


def _add_throttles(into: dict, rows) -> None:
    for key, user, client, ms in rows:
        into[(key, user, client)] = into.get((key, user, client), 0.0) + ms


def _add_rejected(into: dict, rows) -> None:
    for listener, reason, n in rows:
        into[(listener, reason)] = into.get((listener, reason), 0) + n


# quota key -> Kafka's quota metric group (kafka.server:type=<it>,user=,client-id=)
_QUOTA_GROUPS = {"producer_byte_rate": ("produce", "byte_rate", "Bytes/s of produce requests"),
                 "consumer_byte_rate": ("fetch", "byte_rate", "Bytes/s of fetch responses"),
                 "request_percentage": ("request", "request_time",
                                        "Handler time, in percent of one broker thread")}


def _add_topics(into: dict, topics: dict, width: int = 3) -> None:
    for topic, figures in topics.items():
        have = into.setdefault(topic, [0] * width)
        for i, n in enumerate(figures[:width]):
            have[i] += n


# Kafka's tiered-storage BrokerTopicMetrics (KIP-405, KIP-963): the counters
# in the order of a snapshot's "remote" figures, then the gauges of its
# "copy_lag" ones, as (Prometheus name, help)
_REMOTE_COUNTERS = (
    ("kafka_server_brokertopicmetrics_remotecopybytes",
     "Bytes of segments copied to remote storage (Kafka's RemoteCopyBytesPerSec)"),
    ("kafka_server_brokertopicmetrics_remotecopyerrors",
     "Copies to remote storage that failed (Kafka's RemoteCopyErrorsPerSec)"),
    ("kafka_server_brokertopicmetrics_remotefetchbytes",
     "Bytes of segments read from remote storage (Kafka's RemoteFetchBytesPerSec)"),
    ("kafka_server_brokertopicmetrics_remotefetcherrors",
     "Reads from remote storage that failed (Kafka's RemoteFetchErrorsPerSec)"),
)
_REMOTE_LAG = (
    ("kafka_server_brokertopicmetrics_remotecopylagbytes",
     "Bytes of rolled segments due for a copy to remote storage and not copied yet "
     "(Kafka's RemoteCopyLagBytes): what the local disk holds for want of uploads"),
    ("kafka_server_brokertopicmetrics_remotecopylagsegments",
     "Rolled segments due for a copy to remote storage and not copied yet "
     "(Kafka's RemoteCopyLagSegments)"),
)


class NodeMetrics:
    """The supervisor's side: worker snapshots in, an HTTP endpoint out.
    ``supervisor`` is read on the loop thread only (``tick``)."""

    def __init__(self, supervisor):
        self.sup = supervisor
        self.requests = RequestStats()          # the supervisor's own dispatcher
        self.port = 0
        self._snapshots: dict[int, dict] = {}   # worker index -> its latest snapshot
        # worker index -> {(topic, partition): (log end, high watermark, size,
        # log start)}: copied when changed, never changed once published
        self._partitions: dict[int, dict] = {}
        self._retired_requests: dict = {}       # counters of workers' earlier processes
        self._retired_security: dict = _no_security()
        self._retired_topics: dict = {}
        self._retired_remote: dict = {}
        self._retired_throttles: dict = {}      # (quota key, user, client) -> ms
        self._retired_rejected: dict = {}       # (listener, reason) -> connections refused
        self._view: dict = {}                   # replaced whole, never changed: the HTTP thread's
        self._health = (503, {"status": "starting"})
        self._lock = threading.Lock()
        self._next_publish = 0.0
        self._httpd = None
        self._mounts: list[tuple[str, object]] = []
        # connections over http_max_connections answered 503: written by the
        # accept thread only, read by the connection threads' scrapes
        self.http_refused = 0
        from kafkalite.ratelimit import RateLimitedLog
        self._refused_log = RateLimitedLog(log, per_interval=1, interval_s=60.0)

    @functools.cached_property
    def registry(self):
        """What /metrics serves; mounted apps may collect() it too (on
        their threads). Made (prometheus_client imported) on the loop's
        thread when the HTTP port is served, not at the start: a
        supervisor that adopts running workers serves their clients' first
        transactions before it (supervisor_start.py)."""
        from prometheus_client import CollectorRegistry, ProcessCollector
        registry = CollectorRegistry()
        # the supervisor's own CPU, memory and file descriptors (process_*)
        ProcessCollector(registry=registry)
        registry.register(self)
        return registry

    # ---- the HTTP endpoint (its own thread) ------------------------------------------------

    def serve(self, host: str, port: int, mounts=(), login=None, tls=None, *,
              max_connections: int) -> int:
        """Listen on ``port`` (0: any free port; a taken one: any free port,
        with a warning, as workers do with theirs); return the port bound.
        ``mounts``: (path prefix, WSGI app) pairs served beside /metrics; an
        app with a ``close()`` is closed with the server. ``login`` (an
        http_login.HttpLogin, security on): /metrics and the mounts behind it.
        ``tls`` (an ssl.SSLContext, ``http_tls``): every connection is TLS.
        ``max_connections`` (``http_max_connections``): connections open
        at once; one more is answered 503 and closed (over TLS, closed),
        and counted (http_server.py serves the port)."""
        from prometheus_client import make_wsgi_app

        from kafkalite.http_server import serve

        metrics_app = make_wsgi_app(self.registry)
        self._mounts = [(prefix.rstrip("/"), mounted) for prefix, mounted in mounts]
        routes = [(prefix, mounted) for prefix, mounted in self._mounts]
        if login is not None:
            metrics_app = login.wrap(metrics_app, login.may_scrape)
            # every user who logged in: the app decides each action as them. A
            # change needs the console's CSRF header, but for an app that takes
            # JSON bodies only (``json_only``: POST /query), which another
            # site's page cannot send without a CORS preflight
            routes = [(prefix, login.wrap(mounted, console=not getattr(mounted, "json_only", False)))
                      for prefix, mounted in routes]

        def app(environ, start_response):
            path = environ.get("PATH_INFO", "")
            for prefix, mounted in routes:
                if path == prefix or path.startswith(prefix + "/"):
                    return mounted(environ, start_response)
            if path.rstrip("/") in ("/health", "/healthz"):
                with self._lock:
                    code, body = self._health
                start_response("200 OK" if code == 200 else "503 Service Unavailable",
                               [("Content-Type", "application/json")])
                return [json.dumps(body).encode()]
            if path.rstrip("/") in ("", "/metrics"):
                return metrics_app(environ, start_response)
            # Anything else is a mistyped path: answering it with the metrics
            # (prometheus_client's default) hides the typo from whoever set up
            # the scrape or the probe.
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            served = ["/metrics", "/health"] + [prefix + "/" for prefix, _ in self._mounts]
            return [f"no such path {path!r}; this port serves {', '.join(served)}\n".encode()]

        self._httpd = serve(host, port, app, tls, max_connections=max_connections,
                            refuse=self.refuse_connection, name="metrics")
        self.port = self._httpd.server_port
        return self.port

    def refuse_connection(self, sock, address, answer: bool) -> None:
        """A connection over the cap, on the accept thread: a 503 into its
        empty send buffer (never waiting on the client), counted and
        logged rate-limited; the caller closes it."""
        self.http_refused += 1
        self._refused_log.warning(
            "HTTP port: refused a connection from %s (%d so far): http_max_connections "
            "are open", address[0], self.http_refused)
        if answer:
            from kafkalite.http_server import answer_busy
            answer_busy(sock)

    def close(self) -> None:
        if self._httpd is not None:
            self._httpd.close()
            self._httpd = None
        for _, mounted in self._mounts:
            if hasattr(mounted, "close"):
                mounted.close()
        self._mounts = []

    def collect(self):
        """prometheus_client's collector interface, on the HTTP thread."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        refused = CounterMetricFamily(
            "kafkalite_http_connections_refused", "Connections the HTTP port closed at once, "
            "answered 503 (over http_tls: without an answer), because http_max_connections "
            "were open")
        refused.add_metric([], self.http_refused)
        yield refused
        with self._lock:
            view = self._view
        if not view:
            return
        yield from self._request_families(view["requests"])
        yield from self._security_families(view["security"])
        yield from self._topic_families(view["topics"])
        yield from self._remote_families(view.get("remote", {}), view.get("copy_lag", {}))
        yield from self._partition_families(view["partitions"])
        purgatory = GaugeMetricFamily("kafka_server_delayedoperationpurgatory_purgatorysize",
                                      "Requests waiting in the workers' purgatories",
                                      labels=["delayedOperation"])
        for op, n in sorted(view["purgatory"].items()):
            purgatory.add_metric([op], n)
        yield purgatory
        yield from self._fetch_session_families(view.get("fetch_sessions", {}))
        yield from self._controller_families(view)
        yield from self._broker_families(view["brokers"])
        yield from self._group_families(view["groups"])
        yield from self._quota_families(view.get("quota_throttles", {}),
                                        view.get("quota_rates", {}))
        yield from self._channel_families(view)

    @staticmethod
    def _topic_families(topics: dict):
        """Kafka's per-topic BrokerTopicMetrics: bytes and records in, bytes out."""
        from prometheus_client.core import CounterMetricFamily
        bytes_in = CounterMetricFamily("kafka_server_brokertopicmetrics_bytesin",
                                       "Bytes of record batches appended by producers "
                                       "(Kafka's BytesInPerSec)", labels=["topic"])
        messages_in = CounterMetricFamily("kafka_server_brokertopicmetrics_messagesin",
                                          "Records appended by producers "
                                          "(Kafka's MessagesInPerSec)", labels=["topic"])
        bytes_out = CounterMetricFamily("kafka_server_brokertopicmetrics_bytesout",
                                        "Bytes of record batches sent to consumers "
                                        "(Kafka's BytesOutPerSec)", labels=["topic"])
        for topic, (b_in, m_in, b_out) in sorted(topics.items()):
            bytes_in.add_metric([topic], b_in)
            messages_in.add_metric([topic], m_in)
            bytes_out.add_metric([topic], b_out)
        yield from (bytes_in, messages_in, bytes_out)

    @staticmethod
    def _partition_families(by_worker: dict):
        """Each partition's log size and offsets, from the workers' figures."""
        from prometheus_client.core import GaugeMetricFamily
        size = GaugeMetricFamily("kafka_log_log_size", "Bytes of a partition's log on disk "
                                 "(the leader's)", labels=["topic", "partition"])
        end = GaugeMetricFamily("kafka_log_log_logendoffset", "A partition's log end offset",
                                labels=["topic", "partition"])
        start = GaugeMetricFamily("kafka_log_log_logstartoffset",
                                  "A partition's log start offset", labels=["topic", "partition"])
        hw = GaugeMetricFamily("kafka_cluster_partition_highwatermark",
                               "A partition's high watermark", labels=["topic", "partition"])
        merged = {}
        for figures in by_worker.values():
            merged.update(figures)
        for (topic, index), (leo, high, nbytes, lso) in sorted(merged.items()):
            labels = [topic, str(index)]
            size.add_metric(labels, nbytes)
            end.add_metric(labels, leo)
            start.add_metric(labels, lso)
            hw.add_metric(labels, high)
        yield from (size, end, start, hw)

    @staticmethod
    def _controller_families(view: dict):
        """The controller's partition and topic counts."""
        from prometheus_client.core import GaugeMetricFamily
        yield GaugeMetricFamily("kafka_server_replicamanager_underreplicatedpartitions",
                                "Partitions with a live leader and fewer in-sync replicas "
                                "than replicas", value=view["under_replicated"])
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_offlinepartitionscount",
                                "Partitions without a live leader", value=view["offline"])
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_activecontrollercount",
                                "1: this node is the controller", value=1)
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_globaltopiccount",
                                "Topics (internal ones included)", value=view["topic_count"])
        yield GaugeMetricFamily("kafka_controller_kafkacontroller_globalpartitioncount",
                                "Partitions (internal ones included)",
                                value=view["partition_count"])

    @staticmethod
    def _broker_families(brokers: dict):
        """Each worker's replicas, leaders, liveness, restarts, CPU, memory and replica fetches."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        partitions = GaugeMetricFamily("kafka_server_replicamanager_partitioncount",
                                       "Replicas a broker (worker) hosts", labels=["broker"])
        leaders = GaugeMetricFamily("kafka_server_replicamanager_leadercount",
                                    "Partitions a broker (worker) leads", labels=["broker"])
        up = GaugeMetricFamily("kafkalite_worker_up", "1 while a worker is registered and "
                               "unfenced", labels=["broker"])
        restarts = CounterMetricFamily("kafkalite_worker_restarts", "Times a worker process "
                                       "was started again", labels=["broker"])
        cpu = CounterMetricFamily("kafkalite_worker_process_cpu_seconds",
                                  "A worker process's user and system CPU time",
                                  labels=["broker"])
        rss = GaugeMetricFamily("kafkalite_worker_process_resident_memory_bytes",
                                "A worker process's resident memory", labels=["broker"])
        fetched = CounterMetricFamily("kafkalite_replica_fetched_bytes",
                                      "Bytes a worker's followers appended from their leaders "
                                      "since the process started, by the way they came: local "
                                      "(read from a same-host leader's segment file) or network",
                                      labels=["broker", "path"])
        for index, b in sorted(brokers.items()):
            label = [str(index)]
            up.add_metric(label, 1 if b["up"] else 0)
            restarts.add_metric(label, b["restarts"])
            if b["up"] and b["snapshot"]:
                partitions.add_metric(label, b["partition_count"])
                leaders.add_metric(label, b["leader_count"])
                cpu.add_metric(label, b["cpu_seconds"])
                rss.add_metric(label, b["rss_bytes"])
                for path, n in sorted(b["replica_fetch"].items()):
                    fetched.add_metric([*label, path], n)
        yield from (partitions, leaders, up, restarts, cpu, rss, fetched)

    @staticmethod
    def _group_families(groups: list):
        """Each group's committed offset and lag by partition."""
        from prometheus_client.core import GaugeMetricFamily
        lag = GaugeMetricFamily("kafka_consumergroup_lag", "High watermark minus the group's "
                                "committed offset", labels=["consumergroup", "topic", "partition"])
        committed = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                      "A group's committed offset",
                                      labels=["consumergroup", "topic", "partition"])
        for group, topic, index, offset, behind in groups:
            labels = [group, topic, str(index)]
            committed.add_metric(labels, offset)
            if behind is not None:
                lag.add_metric(labels, behind)
        yield from (lag, committed)

    @staticmethod
    def _channel_families(view: dict):
        """Connections refused and malformed control or relay messages dropped."""
        from prometheus_client.core import CounterMetricFamily
        rejected = CounterMetricFamily(
            "kafkalite_connections_rejected", "Connections a Kafka listener closed right after "
            "accepting them, by reason (ip_quota: over the client IP's connection_creation_rate; "
            "Kafka's connection-rate throttles)", labels=["listener", "reason"])
        for (listener, reason), n in sorted(view.get("connections_rejected", {}).items()):
            rejected.add_metric([listener, reason], n)
        yield rejected
        dropped = CounterMetricFamily(
            "kafkalite_control_messages_dropped", "Malformed messages the supervisor's control "
            "channel dropped (not a worker's: a stray or hostile local process)")
        dropped.add_metric([], view.get("control_dropped", 0))
        yield dropped
        relay_dropped = CounterMetricFamily(
            "kafkalite_relay_messages_dropped", "Malformed messages the supervisor's relay "
            "dropped (not a worker's relay request: a bug, or a process with the node's keys)")
        relay_dropped.add_metric([], view.get("relay_dropped", 0))
        yield relay_dropped

    @staticmethod
    def _fetch_session_families(sessions: dict):
        """The workers' incremental fetch sessions (KIP-227, Kafka's
        FetchSessionCache metrics) and their fetches by kind."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        yield GaugeMetricFamily("kafka_server_fetchsessioncache_numincrementalfetchsessions",
                                "Incremental fetch sessions the workers hold",
                                value=sessions.get("sessions", 0))
        yield GaugeMetricFamily(
            "kafka_server_fetchsessioncache_numincrementalfetchpartitionscached",
            "Partitions in the workers' incremental fetch sessions",
            value=sessions.get("partitions", 0))
        yield CounterMetricFamily(
            "kafka_server_fetchsessioncache_incrementalfetchsessionevictions",
            "Sessions evicted for new ones (Kafka's IncrementalFetchSessionEvictionsPerSec)",
            value=sessions.get("evictions", 0))
        fetches = CounterMetricFamily(
            "kafkalite_fetch_requests", "Fetches the workers served, by their session "
            "metadata: full (opening a session), incremental, sessionless, refused",
            labels=["kind"])
        for kind in ("full", "incremental", "sessionless", "refused"):
            fetches.add_metric([kind], sessions.get(kind, 0))
        yield fetches
        yield CounterMetricFamily(
            "kafkalite_fetch_idle_partitions", "Partitions of consumers' fetches answered "
            "idle (nothing new) from the workers' table in C, not read in Python",
            value=sessions.get("idle_partitions", 0))
        yield CounterMetricFamily(
            "kafkalite_fetch_tail_reads", "Partitions of consumers' fetches with new "
            "records in the active segment's last batches, read in C, not in Python",
            value=sessions.get("tail_reads", 0))

    @staticmethod
    def _remote_families(remote: dict, copy_lag: dict):
        """Tiered storage's per-topic figures (only topics that have them)."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        for i, (name, doc) in enumerate(_REMOTE_COUNTERS):
            family = CounterMetricFamily(name, doc, labels=["topic"])
            for topic, figures in sorted(remote.items()):
                family.add_metric([topic], figures[i])
            yield family
        for i, (name, doc) in enumerate(_REMOTE_LAG):
            family = GaugeMetricFamily(name, doc, labels=["topic"])
            for topic, figures in sorted(copy_lag.items()):
                family.add_metric([topic], figures[i])
            yield family

    @staticmethod
    def _quota_families(throttles: dict, rates: dict):
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
        families = {}
        for key, (group, rate_name, rate_help) in _QUOTA_GROUPS.items():
            families[key] = (
                CounterMetricFamily(f"kafka_server_{group}_throttle_time_ms",
                                    f"Time {group} requests of a quota entity were throttled "
                                    f"(Kafka's {group.capitalize()} throttle-time), in ms",
                                    labels=["user", "client_id"]),
                GaugeMetricFamily(f"kafka_server_{group}_{rate_name}",
                                  f"{rate_help} of a quota entity, over the quota's windows, "
                                  f"node-wide (Kafka's {group.capitalize()} "
                                  f"{rate_name.replace('_', '-')})",
                                  labels=["user", "client_id"]))
        for (key, user, client), ms in sorted(throttles.items()):
            if key in families:
                families[key][0].add_metric([user, client], ms)
        for (key, user, client), rate in sorted(rates.items()):
            if key in families:
                families[key][1].add_metric([user, client], rate)
        for pair in families.values():
            yield from pair

    @staticmethod
    def _security_families(security: dict):
        from prometheus_client.core import CounterMetricFamily
        denied = CounterMetricFamily("kafkalite_authorizer_denied",
                                     "Operations the authorizer denied (authorizer.py), by "
                                     "resource type and operation",
                                     labels=["resource_type", "operation"])
        for key, n in sorted(security["denied"].items()):
            denied.add_metric(key.split(":", 1), n)
        dropped = CounterMetricFamily("kafkalite_authorizer_audit_lines_dropped",
                                      "Denials the authorizer's rate-limited log left out "
                                      "(authorizer.py; each told by the next line logged)")
        dropped.add_metric([], security["audit_lines_dropped"])
        failed = CounterMetricFamily("kafkalite_authentication_failures",
                                     "Failed SASL authentications on the Kafka listeners "
                                     "(Kafka's failed-authentication-total)")
        failed.add_metric([], security["authentication_failures"])
        reauth = CounterMetricFamily("kafkalite_reauthentications",
                                     "Successful SASL re-authentications (KIP-368; Kafka's "
                                     "successful-reauthentication-total)")
        reauth.add_metric([], security["reauthentications"])
        expired = CounterMetricFamily("kafkalite_expired_sessions_closed",
                                      "Connections closed because their SASL session expired "
                                      "without re-authentication (Kafka's "
                                      "expired-connections-killed-count)")
        expired.add_metric([], security["expired_sessions_closed"])
        yield from (denied, dropped, failed, reauth, expired)

    @staticmethod
    def _request_families(requests: dict):
        from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily
        count = CounterMetricFamily("kafka_network_requestmetrics_requests",
                                    "Requests answered (Kafka's RequestsPerSec)",
                                    labels=["request"])
        latency = HistogramMetricFamily("kafka_network_requestmetrics_totaltimems",
                                        "Time from a request's arrival to its answer, in ms "
                                        "(Kafka's TotalTimeMs)", labels=["request"])
        bounds = [repr(b) for b in LATENCY_BUCKETS_MS] + ["+Inf"]
        for name, (n, total, buckets) in sorted(requests.items()):
            count.add_metric([name], n)
            cumulative, running = [], 0
            for bound, c in zip(bounds, buckets):
                running += c
                cumulative.append((bound, running))
            latency.add_metric([name], cumulative, total)
        yield from (count, latency)

    # ---- the supervisor's loop ---------------------------------------------------------------

    def on_snapshot(self, index: int, snapshot: dict) -> None:
        """A worker's snapshot arrived (control channel)."""
        old = self._snapshots.get(index)
        if old is not None and old.get("pid") != snapshot.get("pid"):
            _add_requests(self._retired_requests, old.get("requests", {}))
            _add_security(self._retired_security, old.get("security", {}))
            _add_topics(self._retired_topics, old.get("topics", {}))
            _add_topics(self._retired_remote, old.get("remote", {}), len(_REMOTE_COUNTERS))
            _add_throttles(self._retired_throttles, old.get("quota_throttles", ()))
            _add_rejected(self._retired_rejected, old.get("connections_rejected", ()))
        changed, gone = snapshot.pop("partitions", ()), snapshot.pop("gone", ())
        if snapshot.get("full") or changed or gone:
            figures = {} if snapshot.get("full") else dict(self._partitions.get(index, {}))
            figures.update(((t, p), tuple(f)) for t, p, *f in changed)
            for t, p in gone:
                figures.pop((t, p), None)
            self._partitions[index] = figures
        self._snapshots[index] = snapshot

    def tick(self) -> None:
        """Called on every pass of the supervisor's loop: the health answer
        at once, the metrics view every ``PUBLISH_INTERVAL_S``."""
        sup = self.sup
        brokers = sup.controller.brokers
        down = [w.index for w in sup.workers
                if w.proc is None or w.hung or brokers[w.index].fenced]
        healthy = sup.ready and not down
        # a remote store refusing every call (no such bucket, access denied):
        # the node serves, but nothing is tiered and its disk fills
        refused = [line for index, snap in self._snapshots.items() if index not in down
                   for line in snap.get("remote_refused", ())]
        health = (200 if healthy and not refused else 503, {
            "status": "ok" if healthy and not refused else
                      "remote storage refused" if healthy else "unavailable",
            "controller_ready": sup.ready,
            "workers": len(sup.workers), "workers_up": len(sup.workers) - len(down),
            "workers_down": down})
        if refused:
            health[1]["remote_storage_refused"] = refused[:10]
            health[1]["remote_storage_refused_count"] = len(refused)
        now = time.monotonic()
        if now < self._next_publish:
            with self._lock:
                self._health = health
            return
        self._next_publish = now + PUBLISH_INTERVAL_S
        view = self._build_view(set(down))
        with self._lock:
            self._health = health
            self._view = view

    def _build_view(self, down: set) -> dict:
        sup = self.sup
        requests: dict = {}
        _add_requests(requests, self._retired_requests)
        _add_requests(requests, self.requests.snapshot())
        security = _no_security()
        _add_security(security, self._retired_security)
        _add_security(security, self.requests.security_snapshot())
        topics: dict = {}
        _add_topics(topics, self._retired_topics)
        remote: dict = {}
        _add_topics(remote, self._retired_remote, len(_REMOTE_COUNTERS))
        copy_lag: dict = {}
        partitions: dict = {}                   # worker index -> its partitions' figures
        purgatory = {"Produce": 0, "Fetch": 0}
        sessions: dict = {}                     # the workers' fetch session figures, summed
        brokers = {}
        live = {b.broker_id for b in sup.controller.brokers if not b.fenced}
        for w in sup.workers:
            brokers[w.index] = {"up": w.index not in down, "restarts": w.restarts,
                                "snapshot": False}
        pids = {w.index: w.pid for w in sup.workers}
        for index, snap in self._snapshots.items():
            _add_requests(requests, snap.get("requests", {}))
            _add_security(security, snap.get("security", {}))
            _add_topics(topics, snap.get("topics", {}))
            _add_topics(remote, snap.get("remote", {}), len(_REMOTE_COUNTERS))
            if index not in live or pids.get(index, snap["pid"]) != snap["pid"]:
                continue                 # fenced, or restarted and not heard from yet: old figures
            _add_topics(copy_lag, snap.get("copy_lag", {}), len(_REMOTE_LAG))
            for op, n in snap.get("purgatory", {}).items():
                purgatory[op] = purgatory.get(op, 0) + n
            for name, n in snap.get("fetch_sessions", {}).items():
                sessions[name] = sessions.get(name, 0) + n
            partitions[index] = self._partitions.get(index, {})
            if index in brokers:
                brokers[index].update(snapshot=True, partition_count=snap["partition_count"],
                                      leader_count=snap["leader_count"],
                                      cpu_seconds=snap["cpu_seconds"],
                                      rss_bytes=snap["rss_bytes"],
                                      replica_fetch=snap.get("replica_fetch", {}))
        fenced = {b.broker_id for b in sup.controller.brokers if b.fenced}
        under, offline, count = 0, 0, 0
        topics_md = sup.controller.metadata.topics
        for t in topics_md.values():
            for p in t.partitions:
                count += 1
                if p.leader in fenced or p.leader < 0:
                    offline += 1
                elif len(p.isr) < len(p.replicas):
                    under += 1
        groups = []
        for gid, g in sup.coordinator.groups.items():
            for tp, om in getattr(g, "offsets", {}).items():
                figures = next((f[tp] for f in partitions.values() if tp in f), None)
                behind = None if figures is None else max(0, figures[1] - om.offset)
                topic, index = tp
                groups.append((gid, topic, index, om.offset, behind))
        # a deleted topic's counters go with it, as Kafka removes its metrics
        topics = {t: figures for t, figures in topics.items() if t in topics_md}
        remote = {t: figures for t, figures in remote.items() if t in topics_md}
        copy_lag = {t: figures for t, figures in copy_lag.items() if t in topics_md}
        throttles: dict = dict(self._retired_throttles)
        _add_throttles(throttles, sup.quotas.throttle_rows())
        rejected: dict = dict(self._retired_rejected)
        _add_rejected(rejected, sup.connection_quotas.rejected_rows())
        for snap in self._snapshots.values():
            _add_throttles(throttles, snap.get("quota_throttles", ()))
            _add_rejected(rejected, snap.get("connections_rejected", ()))
        return {"quota_throttles": throttles, "connections_rejected": rejected, "quota_rates": sup.node_quota_rates.node_rates(),
                "requests": requests, "security": security, "topics": topics, "partitions": partitions,
                "remote": remote, "copy_lag": copy_lag,
                "purgatory": purgatory, "fetch_sessions": sessions, "brokers": brokers,
                "under_replicated": under,
                "offline": offline, "topic_count": len(topics_md), "partition_count": count,
                "groups": groups, "control_dropped": sup.control_dropped,
                "relay_dropped": sup.relay.dropped}
