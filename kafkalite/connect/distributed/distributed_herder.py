"""The distributed herder (Kafka's DistributedHerder): a Herder
(connect/herder.py, whose standalone herder keeps a worker's connectors to
itself) whose connectors and tasks are those the Connect group assigned
to this worker. It runs the membership loop (group_member.py; the leader
assigns with assignor.py), reads configs and statuses from the internal
topics' views (internal_topics.py), sends config writes through the
group's leader, hands a connector's task configs to the leader, and on the
leader runs its duties (session key rotation, KIP-618 zombie fencing,
offsets changes). The design, record by record and thread by thread:
docs/connect-distributed.md.

Which process runs it: a ``kafkalite connect distributed`` worker
(cli/connect.py); threads: ``connect-membership`` (join, heartbeat,
apply assignments), ``connect-internal-requests`` (task configs to the
leader, the leader's duties) and the REST API's.

What it may import: the rest of connect/distributed/, connect/ (herder.py,
worker.py, errors.py, signature.py, rest_login.py, clients.py, plugins.py,
config.py), kafkalite.errors and the standard library.

The class is put together from one module a concern, whose classes it
inherits: the reads from the views and the tracked topics
(connector_views.py), the config writes the leader makes and the calls
forwarded to the leader or a unit's owner (leader_forwarding.py), the
offsets API (offset_admin.py) and the leader's duties, session key and
zombie fencing (leader_duties.py). One state, set in ``__init__`` here,
guarded by the herder's lock (``_lock``) and ``_leadership``: those
modules take the same locks, and hold no state of their own.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

from kafkalite.connect.distributed.assignor import (IncrementalCooperativeAssignor, connector_unit,
                                                    parse_unit, task_unit, unit_connector)
from kafkalite.connect.distributed.connector_views import ConnectorViews
from kafkalite.connect.distributed.group_member import WorkerGroupMember
from kafkalite.connect.distributed.internal_topics import InternalTopics
from kafkalite.connect.distributed.leader_duties import LeaderDuties, transactional_producer_id
from kafkalite.connect.distributed.leader_forwarding import LeaderForwarding
from kafkalite.connect.distributed.offset_admin import OffsetAdmin
from kafkalite.connect.errors import ConnectException, NotFoundException, RebalanceNeededException
from kafkalite.connect.herder import HEALTHY, STARTING, UNHEALTHY, Herder
from kafkalite.connect.signature import ALGORITHMS, DEFAULT_ALGORITHM, DEFAULT_KEY_TTL_MS

log = logging.getLogger("kafkalite.connect")

# a task config write the owner could not hand to the leader is tried again this often (and
# the leader's duties, session key rotation and zombie fencing, run as often)
TASK_CONFIG_RETRY_S = 0.5
# How long a source task starting from new task configs waits for the tasks
# of the earlier configs on other workers to stop (_predecessors_running)
PREDECESSOR_WAIT_S = 5.0
# Kafka's defaults: how long a worker may take to read the config topic up to an
# assignment's config offset (and the leader to its end), and how long one that could
# not waits, out of the group, before it rejoins
# GET /health's bound (Kafka's RestRequestTimeout: 10 s): a step of the membership thread
# (its tick thread) running longer than this, other than a wait on the group coordinator,
# makes the worker unhealthy
HEALTH_CHECK_TIMEOUT_S = 10.0
DEFAULT_WORKER_SYNC_TIMEOUT_MS = 3_000
DEFAULT_WORKER_UNSYNC_BACKOFF_MS = 300_000


def _algorithms(value) -> list[str]:
    return [a.strip() for a in (value.split(",") if isinstance(value, str) else value)
            if a.strip()]


class _LocalTask:
    """A task this worker was assigned: its running WorkerTask (None while its
    configs are not in this worker's view yet, or its connector is STOPPED)
    and what it was started from."""

    def __init__(self, name: str, task: int):
        self.name, self.id = name, task
        self.running = None
        self.commit = None        # the view's task_commits of the connector when it started
        self.target = None
        self.generation = -1      # the group generation it started in (its status's)
        self.waiting_since = None  # monotonic: since when its start waits for predecessors


class DistributedHerder(ConnectorViews, LeaderForwarding, OffsetAdmin, LeaderDuties,
                        Herder):
    """A Herder whose connectors and tasks are those the group assigned to
    this worker; reads come from the internal topics' views, writes go to
    the config topic through the group's leader. A connector this worker
    owns hands its task configs to the leader instead of starting them; each
    task runs where it is assigned."""

    def __init__(self, worker, group_id: str = "connect-cluster",
                 config_topic: str = "connect-configs", status_topic: str = "connect-status",
                 session_timeout_ms: int = 10_000, heartbeat_interval_ms: int = 1_000,
                 scheduled_rebalance_max_delay_ms: int | None = None):
        super().__init__(worker)
        self.group_id = group_id
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval = heartbeat_interval_ms / 1000
        if scheduled_rebalance_max_delay_ms is None:
            scheduled_rebalance_max_delay_ms = int(worker.config.get(
                "scheduled.rebalance.max.delay.ms", 300_000))
        self.assignor = IncrementalCooperativeAssignor(scheduled_rebalance_max_delay_ms,
                                                       group_of=unit_connector)
        eos = str(worker.config.get("exactly.once.source.support", "disabled")).lower() == \
            "enabled"
        self.exactly_once = eos
        self.sync_timeout_s = int(worker.config.get(
            "worker.sync.timeout.ms", DEFAULT_WORKER_SYNC_TIMEOUT_MS)) / 1000
        self.unsync_backoff_s = int(worker.config.get(
            "worker.unsync.backoff.ms", DEFAULT_WORKER_UNSYNC_BACKOFF_MS)) / 1000
        self._session_key_config(worker.config)
        self.internal = InternalTopics(worker.client_config, config_topic, status_topic,
                                       self._config_changed,
                                       transactional_producer_id(group_id) if eos else None,
                                       self._fenced)
        worker.on_topic_active = self._write_topic_status
        self.internal.on_topic_reset = lambda connector, topic: worker.forget_topics(
            connector, [topic])
        self.url = ""                             # this worker's REST URL (set by start)
        # the group leader's REST URL in the current generation; None while rebalancing
        self.leader_url: str | None = None
        self._leadership = threading.Condition()
        self._privileged = False                  # holds the leader's write privileges
        # connector -> task configs its owner (this worker) still has to hand to the leader
        self._pending_task_configs: dict[str, list] = {}
        self._pending_lock = threading.Lock()
        self._task_configs_due = threading.Event()
        self._sender = None
        self.owners: dict[str, str] = {}          # unit -> its owner's REST URL
        self.assigned: set[str] = set()           # units this worker was assigned
        self._tasks: dict[tuple, _LocalTask] = {}
        # connectors whose config changed: their next task configs are written even when
        # equal to the old ones, so their tasks restart with the new connector config
        # (Kafka's KAFKA-9228)
        self._force_task_configs: set[str] = set()
        self._rejoin = threading.Event()
        self._stopping = threading.Event()
        self._thread = None
        self._published: dict = {}
        self.generation = -1
        self._rejoin_at: float | None = None      # a scheduled rebalance (held units' delay)
        # what the membership thread is doing, for GET /health (Kafka's tick thread Stage):
        # (description, began at (epoch s), began (monotonic), completed, a coordinator wait)
        self._stage = ("starting", time.time(), time.monotonic(), False, True)
        self._started = False                     # the first assignment is applied
        self.health_check_timeout_s = HEALTH_CHECK_TIMEOUT_S

    def _session_key_config(self, config: dict) -> None:
        """KIP-507's worker keys, checked as Kafka's DistributedConfig does
        (ConfigException: a ValueError naming the key, one line on the CLI)."""
        from kafkalite.connect.config import ConfigException
        self.key_ttl_ms = int(config.get("inter.worker.key.ttl.ms", DEFAULT_KEY_TTL_MS))
        self.key_algorithm = config.get("inter.worker.key.generation.algorithm",
                                        DEFAULT_ALGORITHM)
        size = config.get("inter.worker.key.size")
        self.key_size = int(size) if size not in (None, "") else None
        self.signature_algorithm = config.get("inter.worker.signature.algorithm",
                                              DEFAULT_ALGORITHM)
        self.verification_algorithms = _algorithms(config.get(
            "inter.worker.verification.algorithms", DEFAULT_ALGORITHM))
        for key, value in (("inter.worker.key.generation.algorithm", self.key_algorithm),
                           ("inter.worker.signature.algorithm", self.signature_algorithm),
                           *(("inter.worker.verification.algorithms", a)
                             for a in self.verification_algorithms)):
            if value not in ALGORITHMS:
                raise ConfigException(key, f"Invalid value {value} for configuration {key}: "
                                           f"one of {', '.join(ALGORITHMS)}", value)
        if not self.verification_algorithms:
            raise ConfigException("inter.worker.verification.algorithms",
                                  "Invalid value for configuration "
                                  "inter.worker.verification.algorithms: at least one algorithm")
        if self.signature_algorithm not in self.verification_algorithms:
            raise ConfigException("inter.worker.signature.algorithm",
                                  f"Signature algorithm '{self.signature_algorithm}' must be "
                                  f"present in inter.worker.verification.algorithms list")
        if self.key_ttl_ms < 0:
            raise ConfigException("inter.worker.key.ttl.ms", "Invalid value "
                                  f"{self.key_ttl_ms} for configuration inter.worker.key.ttl.ms: "
                                  "Value must be at least 0", self.key_ttl_ms)
        if self.key_size is not None and (self.key_size <= 0 or self.key_size % 8):
            raise ConfigException("inter.worker.key.size", "Invalid value "
                                  f"{self.key_size} for configuration inter.worker.key.size: "
                                  "a positive number of bits, a multiple of 8", self.key_size)

    # ---- running ---------------------------------------------------------------------------

    def start(self) -> "DistributedHerder":
        self.url = f"http://{self.worker.worker_id}"
        self.internal.writer = self.worker.worker_id
        self.internal.start()
        self._thread = threading.Thread(target=self._membership, daemon=True,
                                        name="connect-membership")
        self._thread.start()
        self._sender = threading.Thread(target=self._send_task_configs, daemon=True,
                                        name="connect-internal-requests")
        self._sender.start()
        return self

    def _set_leader(self, url: str | None) -> None:
        with self._leadership:
            self.leader_url = url
            self._leadership.notify_all()

    def _take_leadership(self, leader: str | None) -> None:
        """Claim the config topic's write privileges when this worker becomes
        the leader (fencing any earlier leader's writes), give them up when
        another one is; then publish who leads. A failed claim leaves no
        leader known here (writes answer 409) and rejoins shortly."""
        if leader == self.url and not self._privileged:
            try:
                self.internal.claim_write_privileges()
                self._privileged = True
                log.info("connect group %s: this worker leads generation %d and holds the "
                         "config topic's write privileges", self.group_id, self.generation)
            except Exception as e:  # noqa: BLE001 -- coordinator not ready: try again
                log.warning("connect group %s: claiming the config topic's write privileges "
                            "failed: %s", self.group_id, e)
                self._set_leader(None)
                self._stopping.wait(1.0)
                self._rejoin.set()
                return
        elif leader != self.url and self._privileged:
            self.internal.release_write_privileges()
            self._privileged = False
        log.info("connect group %s: generation %d, leader %s", self.group_id, self.generation,
                 leader)
        self._set_leader(leader)

    def _fenced(self):
        # a newer leader claimed the write privileges: rejoin; if the group still makes this
        # worker its leader (the claimant was a zombie), the next assignment claims them again
        self._privileged = False
        self._set_leader(None)
        self._rejoin.set()

    def _config_changed(self):
        self._rejoin.set()

    def _owned(self) -> dict:
        with self._lock:
            return {"owned": sorted([connector_unit(n) for n in self._connectors] +
                                    [task_unit(*k) for k in self._tasks])}

    def _expelled(self):
        # the group no longer counts this member: what it ran may be dealt out
        log.warning("connect group %s: this worker's membership expired; stopping its "
                    "connectors and tasks", self.group_id)
        self._stop_all()

    def _membership(self):
        from kafkalite import errors
        group = WorkerGroupMember(self.worker.client_config, self.group_id, self.url,
                                  self.session_timeout_ms)
        try:
            while not self._stopping.is_set():
                # no leader while the group rebalances: config writes wait for the next
                self._set_leader(None)
                try:
                    self._rejoin.clear()
                    self._enter("ensuring membership in the cluster", waits=True)
                    assignment = group.join(self._assign, self._owned, self._expelled)
                except Exception as e:  # noqa: BLE001 -- coordinator moved or not ready
                    log.warning("connect group %s: join failed: %s", self.group_id, e)
                    self._stopping.wait(1.0)
                    continue
                self.generation = group.generation
                self._enter("reading to the end of the config topic")
                caught_up = self._catch_up(group, assignment)
                if caught_up is None:
                    continue            # the group rebalances meanwhile: rejoin
                if not caught_up:
                    self._fall_behind(group)
                    continue
                self._enter("starting and stopping what the assignment names")
                self._apply(assignment)
                self._started = True
                while not self._stopping.is_set():
                    # at least once per assignment: what it started shows in the status
                    # topic even when a config change makes this worker rejoin at once
                    try:
                        self._enter("following the config topic's connectors and tasks")
                        self._reconcile()
                        self._apply_targets()
                        self._publish_status()
                    except Exception:  # noqa: BLE001 -- keep the membership alive
                        log.exception("connect group %s: status/target update failed",
                                      self.group_id)
                    self._complete()
                    if self._rejoin.is_set():
                        break
                    if self._rejoin_at is not None and time.monotonic() >= self._rejoin_at:
                        self._rejoin_at = None
                        break
                    if self._stopping.wait(self.heartbeat_interval):
                        break
                    try:
                        self._enter("sending a heartbeat to the group coordinator", waits=True)
                        code = group.heartbeat()
                    except Exception as e:  # noqa: BLE001
                        log.warning("connect group %s: heartbeat failed: %s", self.group_id, e)
                        break
                    if code in (errors.UnknownMemberIdError.code,
                                errors.IllegalGenerationError.code):
                        group.member_id = ""
                        self._expelled()
                        break
                    if code:
                        break
                # cooperative: what this worker runs keeps running through the rebalance;
                # the next assignment says what to stop
            group.leave()
        finally:
            self._stop_all()
            group.close()

    def _enter(self, description: str, waits: bool = False) -> None:
        self._stage = (description, time.time(), time.monotonic(), False, waits)

    def _complete(self) -> None:
        self._stage = self._stage[:3] + (True, self._stage[4])

    def _stage_summary(self) -> str:
        description, began, _, completed, _ = self._stage
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(began))
        if completed:
            return (f"The last operation the worker completed was {description}, which began "
                    f"at {at}.")
        return f"The worker is currently {description}, which began at {at}."

    def health(self) -> tuple[int, dict]:
        """KIP-1017's GET /health, as Kafka's distributed herder answers it:
        503 until the worker has joined its group, read the config topic and
        started its first assignment; then 200 while the membership thread
        (Kafka's tick thread) finishes each step within the health check's
        bound, and 500 with the step it is stuck in when it does not (a
        connector whose start() blocks, a config topic that cannot be read).
        Waits on the group coordinator (a join, a heartbeat) are bounded by
        the group's own timeouts and count as healthy, as Kafka's tick thread
        is woken from them to answer."""
        if self._thread is not None and not self._thread.is_alive() and \
                not self._stopping.is_set():
            return 500, {"status": "unhealthy",
                         "message": f"{UNHEALTHY} Its group membership thread has ended."}
        if not self._started:
            return 503, {"status": "starting", "message": f"{STARTING} {self._stage_summary()}"}
        _, _, began, completed, waits = self._stage
        if completed or waits or time.monotonic() - began < self.health_check_timeout_s:
            return 200, {"status": "healthy", "message": HEALTHY}
        return 500, {"status": "unhealthy", "message": f"{UNHEALTHY} {self._stage_summary()}"}

    def _catch_up(self, group, assignment) -> bool | None:
        """Read the config topic up to the assignment's config offset (Kafka's
        configOffset) before anything of it starts: a worker whose view lags
        would otherwise start a task from the task configs it still has (a
        connector's earlier ones). Bounded by ``worker.sync.timeout.ms``,
        heartbeating meanwhile; False when it could not catch up, None when
        the group started another rebalance meanwhile."""
        from kafkalite import errors
        offset = assignment.get("config_offset", 0)
        deadline = time.monotonic() + self.sync_timeout_s
        while not self.internal.read_to(offset, min(self.heartbeat_interval,
                                                    max(0.0, deadline - time.monotonic()))):
            if time.monotonic() >= deadline or self._stopping.is_set():
                return False
            try:
                code = group.heartbeat()
            except Exception as e:  # noqa: BLE001 -- coordinator moving: rejoin
                log.warning("connect group %s: heartbeat failed: %s", self.group_id, e)
                return None
            if code in (errors.UnknownMemberIdError.code, errors.IllegalGenerationError.code):
                group.member_id = ""
                self._expelled()
                return None
            if code:
                return None
        return True

    def _fall_behind(self, group) -> None:
        """Kafka's herder when it cannot read the config topic up to its
        assignment: it leaves the group (what it ran may go to others: it
        stops all of it, so nothing runs twice and nothing from stale configs),
        waits ``worker.unsync.backoff.ms`` while its tail reads on, then rejoins."""
        with self.internal._lock:
            position = self.internal.config_position
        log.warning("connect group %s: this worker read the config topic only up to %d, not to "
                    "its assignment's config offset within %d ms; leaving the group for %d ms",
                    self.group_id, position, self.sync_timeout_s * 1000,
                    self.unsync_backoff_s * 1000)
        self._stop_all()
        group.leave()
        self._stopping.wait(self.unsync_backoff_s)

    def _assign(self, members):
        # the leader assigns from the configs it has read, after reading the config topic to
        # its end (a worker that could not does so with what it has read: its members catch
        # up to that): each connector, and each of its committed tasks. The offset the
        # leader's view has read up to goes in every assignment (Kafka's configOffset)
        if not self.internal.read_to_end(self.sync_timeout_s):
            log.warning("connect group %s: the leader did not read the config topic to its end "
                        "within %d ms; assigning from what it read", self.group_id,
                        self.sync_timeout_s * 1000)
        with self.internal._lock:
            offset = self.internal.config_position
            units = [connector_unit(n) for n in self.internal.configs]
            units += [task_unit(n, i) for n in self.internal.configs
                      for i in range(len(self.internal.task_configs.get(n, [])))]
        out = self.assignor.assign(members, units)
        for a in out.values():
            a["leader"] = self.url       # Kafka's leaderUrl: where config writes go
            a["config_offset"] = offset
        return out

    def _apply(self, assignment: dict) -> None:
        """Stop what was revoked, start what is new; the rest runs on."""
        self._take_leadership(assignment.get("leader"))
        self.owners = assignment.get("owners", {})
        self.assigned = set(assignment.get("units", []))
        self.assignor.remember(assignment)
        revoked = set(assignment.get("revoked", []))
        with self._lock:
            for name in list(self._connectors):
                unit = connector_unit(name)
                if unit in revoked or unit not in self.assigned:
                    self._shutdown(self._connectors.pop(name))
                    self._forget_status(f"status-connector-{name}")
            for key in list(self._tasks):
                unit = task_unit(*key)
                if unit in revoked or unit not in self.assigned:
                    self._stop_local_task(self._tasks.pop(key))
            new_tasks = []
            for unit in sorted(self.assigned):
                key = parse_unit(unit)
                if len(key) == 2 and key not in self._tasks:
                    self._tasks[key] = _LocalTask(*key)
                    new_tasks.append(key)
        if new_tasks:
            store = self.worker.offsets
            if hasattr(store, "refresh"):
                store.refresh()        # offsets written by the tasks' previous owners
        self._start_assigned_connectors()
        with self._lock:
            for key in new_tasks:
                self._start_local_task(self._tasks[key], offsets_read=True)
        if revoked:
            self._rejoin.set()         # the revoked units go out in the next round
        delay = assignment.get("delay", 0)
        self._rejoin_at = time.monotonic() + delay / 1000 if delay else None

    def _start_assigned_connectors(self):
        """Start the assigned connectors not running here whose config this
        worker has read (a config may reach the leader's view before ours)."""
        for unit in sorted(self.assigned):
            key = parse_unit(unit)
            if len(key) != 1 or key[0] in self._connectors:
                continue
            with self.internal._lock:
                config = self.internal.configs.get(key[0])
                target = self.internal.targets.get(key[0], "STARTED")
            if config is not None:
                with self._lock:
                    self._start_local(key[0], config, target)

    def _reconcile(self):
        """Follow the config topic between rebalances: a connector whose config
        changed restarts with the new one (and rewrites its task configs); a
        deleted one stops; a task starts once its configs are in the view,
        restarts when its connector committed new task configs, and stops when
        its connector no longer has it."""
        for name in list(self._connectors):
            with self.internal._lock:
                config = self.internal.configs.get(name)
                target = self.internal.targets.get(name, "STARTED")
            with self._lock:
                c = self._connectors.get(name)
                if c is None or c.config == config:
                    continue
                self._shutdown(self._connectors.pop(name))
                if config is None:
                    self._forget_status(f"status-connector-{name}")
                else:
                    self._force_task_configs.add(name)
                    self._start_local(name, config, target)
        self._start_assigned_connectors()
        with self._lock:
            for key, lt in list(self._tasks.items()):
                with self.internal._lock:
                    configured = key[0] in self.internal.configs and \
                        key[1] < len(self.internal.task_configs.get(key[0], []))
                    commit = self.internal.task_commits.get(key[0])
                if lt.running is None:
                    if configured and lt.target != "STOPPED":
                        self._start_local_task(lt)
                elif not configured:
                    self._stop_local_task(lt)
                elif commit != lt.commit:
                    self._stop_local_task(lt)
                    self._start_local_task(lt)

    def _start_local(self, name, config, target):
        from kafkalite.connect.herder import WorkerConnector
        from kafkalite.connect.worker import STOPPED
        c = self._connectors[name] = WorkerConnector(name, config)
        c.target = target
        c.generation = self.generation
        if target == "STOPPED":
            from kafkalite.connect import plugins
            c.kind = plugins.connector_class(config["connector.class"]).TYPE
            c.state = STOPPED
        else:
            self._start_connector(c)

    # the connector's owner makes its task configs (the leader writes them); the tasks run
    # where they are assigned

    def _start_tasks(self, c) -> None:
        force = c.name in self._force_task_configs
        self._force_task_configs.discard(c.name)
        self._publish_task_configs(c.name, c.task_configs, force)

    def _stop_tasks(self, c) -> None:
        pass        # each task's owner stops it when its connector's task configs change

    def _publish_task_configs(self, name, configs, force=False) -> None:
        """A connector's new task configs, from its owner: written by the
        leader (this worker, or the leader through its REST API, Kafka's
        ``POST /connectors/{name}/tasks``). The owner does not wait for a
        leader (it may hold the herder's lock): what it could not hand over
        now the sender thread hands over when a leader is known."""
        configs = json.loads(json.dumps(list(configs)))     # as the view will read them
        with self.internal._lock:
            if not force and self.internal.task_configs.get(name) == configs:
                return
        if self.leader_url == self.url:
            with self._pending_lock:
                # an older set not handed over yet must not follow this one
                self._pending_task_configs.pop(name, None)
            try:
                self._write_task_configs(name, configs)
                return
            except ConnectException as e:
                log.warning("connector %s: writing its task configs failed (%s); trying again",
                            name, e)
        with self._pending_lock:
            self._pending_task_configs[name] = configs
        self._task_configs_due.set()

    def _write_task_configs(self, name, configs) -> None:
        """Kafka's records: ``task-<name>-<n>`` for each task, then
        ``commit-<name>`` with the count (readers apply the set on the commit)."""
        self.internal.write_config([
            *((f"task-{name}-{i}", {"properties": tc}) for i, tc in enumerate(configs)),
            (f"commit-{name}", {"tasks": len(configs)})])

    def _send_task_configs(self):
        """The sender thread: task configs this worker's connectors produced,
        handed to the leader until it takes them (a newer set of a connector
        replaces one not yet taken; a connector deleted or moved meanwhile
        drops it; a refused signature is a key rotated meanwhile: signed
        again with the new key). On the leader, its duties too."""
        while not self._stopping.is_set():
            self._task_configs_due.wait(TASK_CONFIG_RETRY_S)
            self._task_configs_due.clear()
            if self.leader_url == self.url and self.leader_url is not None:
                try:
                    self._rotate_session_key()
                    self._fence_zombies()
                except RebalanceNeededException as e:
                    # lost the leadership meanwhile (or its write privileges): the next leader's
                    log.debug("connect group %s: leader duties: %s", self.group_id, e)
                except ConnectException as e:
                    log.warning("connect group %s: leader duties: %s", self.group_id, e)
                except Exception:  # noqa: BLE001 -- coordinator moving: next round
                    log.exception("connect group %s: leader duties", self.group_id)
            with self._pending_lock:
                pending = dict(self._pending_task_configs)
            for name, configs in pending.items():
                try:
                    if name not in self._connectors:
                        pass            # revoked or deleted meanwhile: its new owner writes
                    elif self.leader_url == self.url:
                        self._write_task_configs(name, configs)
                    else:
                        self._to_leader("POST", f"/connectors/{urllib.parse.quote(name)}/tasks",
                                        configs)
                except NotFoundException:
                    pass                # deleted meanwhile: nothing to write
                except ConnectException as e:
                    log.debug("connector %s: task configs not taken yet: %s", name, e)
                    continue
                with self._pending_lock:
                    if self._pending_task_configs.get(name) is configs:
                        del self._pending_task_configs[name]

    def _start_local_task(self, lt: _LocalTask, offsets_read: bool = False) -> None:
        """Start ``lt`` from the configs in the view. ``offsets_read``: the
        offset store was read to its end since its predecessors stopped
        (a rebalance's new tasks); otherwise a source task has it read
        again first, for the offsets other workers' tasks committed."""
        from kafkalite.connect import plugins
        from kafkalite.connect.worker import FailedTask
        with self.internal._lock:
            config = self.internal.configs.get(lt.name)
            configs = self.internal.task_configs.get(lt.name, [])
            lt.target = self.internal.targets.get(lt.name, "STARTED")
            lt.commit = self.internal.task_commits.get(lt.name)
        if config is None or lt.id >= len(configs) or lt.target == "STOPPED":
            return
        lt.generation = self.generation
        try:
            cls = plugins.connector_class(config["connector.class"])
            task_class = cls().task_class()
        except Exception as e:  # noqa: BLE001 -- a task that cannot be built is FAILED
            lt.running = FailedTask(lt.name, lt.id, e)
            return
        if cls.TYPE == "source" and self._predecessors_running(lt, len(configs)):
            return          # _reconcile tries again on its next round
        lt.waiting_since = None
        if cls.TYPE == "source" and not offsets_read and hasattr(self.worker.offsets, "refresh"):
            # new task configs may have given it source partitions (tables,
            # files) another worker's task read until now: their offsets are
            # in the topic, not in this worker's view of it
            self.worker.offsets.refresh()
        if self.exactly_once and cls.TYPE == "source" and self._pending_fencing(lt.name):
            # KIP-618: the earlier generation's producers are not fenced yet; _reconcile
            # starts it once the leader's task count record is in this worker's view
            log.info("connector %s task %d: waiting for the leader to fence the earlier "
                     "generation of its tasks", lt.name, lt.id)
            return
        lt.running = self.worker.start_task(cls.TYPE, lt.name, lt.id, config,
                                            dict(configs[lt.id]), task_class,
                                            paused=lt.target == "PAUSED")

    def _predecessors_running(self, lt: _LocalTask, count: int) -> bool:
        """Whether a source task of ``lt``'s connector that runs on another
        worker still runs from an earlier set of task configs (its status
        names an older commit): a new set may hand its source partitions
        (tables, files) to ``lt``, and ``lt`` must read their offsets after
        the old owner stopped and committed them, or it sends again what was
        already sent. Kafka orders this through the rebalance that follows
        new task configs; here each owner restarts its own tasks, so the
        starting one waits, at most PREDECESSOR_WAIT_S (Kafka's
        task.shutdown.graceful.timeout.ms), for each other task's status to
        name the new commit or be removed."""
        now = time.monotonic()
        if lt.waiting_since is None:
            lt.waiting_since = now
        if now - lt.waiting_since >= PREDECESSOR_WAIT_S:
            log.warning("connector %s task %d: starting although an earlier task still shows "
                        "as running after %.0f s", lt.name, lt.id, PREDECESSOR_WAIT_S)
            return False
        local = {key[1] for key in self._tasks if key[0] == lt.name}
        prefix = f"status-task-{lt.name}-"
        with self.internal._lock:
            others = [(key, value) for key, value in self.internal.status.items()
                      if key.startswith(prefix)]
        for key, value in others:
            task = key[len(prefix):]
            if not task.isdigit() or int(task) in local:
                continue
            if value.get("state") == "RUNNING" and value.get("commit") != lt.commit:
                return True
        return False

    def _stop_local_task(self, lt: _LocalTask) -> None:
        if lt.running is not None:
            lt.running.stop()
            lt.running = None
        key = f"status-task-{lt.name}-{lt.id}"
        self._forget_status(key)
        with self.internal._lock:
            removed = (lt.id >= len(self.internal.task_configs.get(lt.name, []))
                       or self.internal.targets.get(lt.name) == "STOPPED")
            published = key in self.internal.status
        if removed and published:
            # its connector has fewer tasks now, or none (STOPPED): no stale
            # RUNNING left behind; written after the task's thread ended, its
            # last offset commit done, so the leader may change the offsets
            # once these are gone (_modify_offsets)
            self.internal.write(self.internal.status_topic, key, None)

    def _forget_status(self, key):
        self._published.pop(key, None)

    def _apply_targets(self):
        """Target states written by any worker, applied by each owner: the
        connector's to the connector, every task's owner to its task."""
        for name in list(self._connectors):
            with self.internal._lock:
                target = self.internal.targets.get(name, "STARTED")
            c = self._connectors.get(name)
            if c is None or c.target == target:
                continue
            if target == "PAUSED":
                Herder.pause(self, name)
            elif target == "STOPPED":
                Herder.stop_connector(self, name)
                # KIP-875: a stopped connector has no task configs (its tasks stop)
                self._publish_task_configs(name, [])
            else:
                Herder.resume(self, name)
        with self._lock:
            for lt in list(self._tasks.values()):
                with self.internal._lock:
                    target = self.internal.targets.get(lt.name, "STARTED")
                if lt.target == target:
                    continue
                if target == "STOPPED":
                    self._stop_local_task(lt)
                    lt.target = target
                elif lt.running is None:
                    self._start_local_task(lt)
                else:
                    lt.target = target
                    (lt.running.pause if target == "PAUSED" else lt.running.resume)()

    def _stop_all(self):
        with self._lock:
            for c in list(self._connectors.values()):
                self._shutdown(c)
            self._connectors.clear()
            for lt in self._tasks.values():
                if lt.running is not None:
                    lt.running.stop()
            self._tasks.clear()
        self._published.clear()

    def _publish_status(self):
        """Each connector's and task's status, written by the worker running it
        when it changes (with the generation it started in, so a unit that
        keeps running through rebalances keeps its record)."""
        with self._lock:
            out = [(f"status-connector-{n}", {
                "state": c.state, "trace": c.trace, "worker_id": self.worker.worker_id,
                "generation": c.generation, "type": c.kind}) for n, c in self._connectors.items()]
            out += [(f"status-task-{lt.name}-{lt.id}", {
                "state": lt.running.state, "trace": lt.running.trace,
                "worker_id": self.worker.worker_id, "generation": lt.generation,
                "commit": lt.commit})
                for lt in self._tasks.values() if lt.running is not None]
        for key, value in out:
            if self._published.get(key) != value and self._may_write_status(key, value):
                self.internal.write(self.internal.status_topic, key, value)
                self._published[key] = value

    def _may_write_status(self, key, value) -> bool:
        """Kafka's putSafe: a status is written over the one in the view only
        by the same worker or from a generation no older than that one's, so
        a worker that has not yet seen the rebalance that took a unit away
        (a zombie) cannot overwrite its new owner's status."""
        with self.internal._lock:
            seen = self.internal.status.get(key)
        return (seen is None or seen.get("worker_id") == value["worker_id"]
                or seen.get("generation", -1) <= value["generation"])

    def stop(self) -> None:
        self._stopping.set()
        self._task_configs_due.set()
        if self._thread is not None:
            self._thread.join(60)
        if self._sender is not None:
            self._sender.join(30)
        self.internal.stop()
