"""Distributed mode: workers sharing connectors through a group of protocol
type ``connect`` and three compacted internal topics, as Kafka Connect's
DistributedHerder.

- Membership (ConnectGroup): each worker joins the group ``group.id``
  through the broker's classic JoinGroup/SyncGroup/Heartbeat (protocol
  ``compatible``), with its REST URL and the connectors it runs as member
  metadata (JSON). Assignment is incremental and cooperative as Kafka's
  KIP-415 (CooperativeAssignor): a rebalance stops only the connectors it
  revokes; the others keep running through it. A newcomer gets its share
  in two rounds (the loaded members revoke, then the freed connectors go
  to it). A worker that dies stops heartbeating; after
  ``session.timeout.ms`` the group rebalances, and after
  ``scheduled.rebalance.max.delay.ms`` more (Kafka's default 300000; the
  time a restarting worker has to come back to its connectors) its
  connectors start on the others, their sources at the offsets stored in
  ``offset.storage.topic`` (a moved sink task rejoins its consumer group,
  which waits out the dead task's ``consumer.session.timeout.ms``). A
  worker the group expelled (its session expired while it lived) stops
  everything before it rejoins. The unit of assignment is the connector
  with all its tasks (Kafka assigns tasks separately): the herder's
  lifecycle -- restart, pause, reconfiguration, offsets, exactly-once --
  keeps a connector and its tasks in one place, and task configs are not
  in the config topic for another worker to start them from.
- ``config.storage.topic`` (default ``connect-configs``): Kafka's keys and
  values: ``connector-<name>`` -> ``{"properties": {...}}`` (null: deleted),
  ``target-state-<name>`` -> ``{"state": "STARTED"|"PAUSED"|"STOPPED"}``.
  Every worker tails it; a change of the connector set makes the workers
  rejoin, so the group rebalances; a changed config restarts the
  connector where it runs.
- ``status.storage.topic`` (default ``connect-status``):
  ``status-connector-<name>`` -> ``{"state", "trace", "worker_id",
  "generation", "tasks": [task configs]}``, ``status-task-<name>-<id>`` ->
  ``{"state", "trace", "worker_id", "generation"}``, written by the owner
  whenever a state changes; every worker's REST API answers from it.

REST calls that act on a running connector (restart, offsets) go to its
owner's REST API when another worker owns it.

Who calls: the ``kafkalite connect distributed`` command and tests. Thread
safety: the membership thread and the tail thread change the local herder
under its lock.
"""
from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request

from kafkalite.connect.errors import BadRequestException, ConnectException, NotFoundException
from kafkalite.connect.herder import Herder

log = logging.getLogger("kafkalite.connect")

# Kafka Connect's name of its cooperative protocol (KIP-415); the metadata is ours (JSON)
PROTOCOL = "compatible"


class ConnectGroup:
    """A worker's membership in the Connect group (synchronous calls, one thread)."""

    def __init__(self, client_config: dict, group_id: str, url: str,
                 session_timeout_ms: int = 10_000, rebalance_timeout_ms: int = 60_000):
        import zmq

        from kafkalite.client.connection import parse_bootstrap
        from kafkalite.client.metadata import Metadata
        self.group_id, self.url = group_id, url
        self.session_timeout_ms, self.rebalance_timeout_ms = session_timeout_ms, rebalance_timeout_ms
        self._ctx = zmq.Context()
        self._meta = Metadata(parse_bootstrap(client_config["bootstrap.servers"]),
                              f"connect-{url}", self._ctx)
        self._conn = None
        self.member_id, self.generation = "", -1

    def _coordinator(self):
        from kafkalite.client.connection import Connection
        from kafkalite.protocol import ApiKey
        if self._conn is None:
            resp = self._meta.admin_request(ApiKey.FIND_COORDINATOR, {
                "key": self.group_id, "key_type": 0, "coordinator_keys": [self.group_id]}, 10)
            node = resp["coordinators"][0] if resp.get("coordinators") else resp
            if node.get("error_code"):
                raise ConnectException(f"FindCoordinator({self.group_id}): error "
                                       f"{node['error_code']}")
            self._conn = Connection(f"tcp://{node['host']}:{node['port']}",
                                    f"connect-{self.url}", self._ctx)
        return self._conn

    def _request(self, api, body, timeout):
        try:
            return self._coordinator().request(api, body, timeout=timeout)
        except Exception:
            if self._conn is not None:
                self._conn.close()
            self._conn = None
            raise

    def join(self, assign, metadata=None, on_expelled=None) -> dict:
        """Join and sync; ``assign(members)`` runs on the leader with
        [(member_id, metadata dict)] and returns {member_id: assignment dict}.
        ``metadata()`` adds to this member's metadata (asked at each JoinGroup);
        ``on_expelled()`` runs when the coordinator no longer knows this member
        (its session expired: what it ran may be someone else's by now).
        Returns this member's assignment."""
        from kafkalite import errors
        from kafkalite.protocol import ApiKey
        while True:
            meta = json.dumps({"url": self.url, **(metadata() if metadata else {})}).encode()
            body = self._request(ApiKey.JOIN_GROUP, {
                "group_id": self.group_id, "session_timeout_ms": self.session_timeout_ms,
                "rebalance_timeout_ms": self.rebalance_timeout_ms, "member_id": self.member_id,
                "group_instance_id": None, "protocol_type": "connect",
                "protocols": [{"name": PROTOCOL, "metadata": meta}], "reason": None},
                self.rebalance_timeout_ms / 1000 + 10)
            code = body["error_code"]
            if code == errors.MemberIdRequiredError.code:
                self.member_id = body["member_id"]
                continue
            if code in (errors.UnknownMemberIdError.code, errors.IllegalGenerationError.code):
                self.member_id = ""
                if on_expelled is not None:
                    on_expelled()
                continue
            if code:
                raise errors.error_for_code(code)(f"JoinGroup {self.group_id}")
            self.member_id, self.generation = body["member_id"], body["generation_id"]
            assignments = []
            if body["leader"] == self.member_id:
                members = [(m["member_id"], json.loads(bytes(m["metadata"])))
                           for m in body["members"]]
                assignments = [{"member_id": m, "assignment": json.dumps(a).encode()}
                               for m, a in assign(members).items()]
            sync = self._request(ApiKey.SYNC_GROUP, {
                "group_id": self.group_id, "generation_id": self.generation,
                "member_id": self.member_id, "group_instance_id": None,
                "protocol_type": "connect", "protocol_name": PROTOCOL,
                "assignments": assignments}, self.rebalance_timeout_ms / 1000 + 10)
            if sync["error_code"] == errors.RebalanceInProgressError.code:
                continue
            if sync["error_code"] in (errors.UnknownMemberIdError.code,
                                      errors.IllegalGenerationError.code):
                self.member_id = ""
                if on_expelled is not None:
                    on_expelled()
                continue
            if sync["error_code"]:
                raise errors.error_for_code(sync["error_code"])(f"SyncGroup {self.group_id}")
            return json.loads(bytes(sync["assignment"]) or b"{}")

    def heartbeat(self) -> int:
        """The Heartbeat's error code: 0 while the generation stands,
        REBALANCE_IN_PROGRESS when the group rebalances, UNKNOWN_MEMBER_ID or
        ILLEGAL_GENERATION when this member was expelled."""
        from kafkalite.protocol import ApiKey
        body = self._request(ApiKey.HEARTBEAT, {
            "group_id": self.group_id, "generation_id": self.generation,
            "member_id": self.member_id, "group_instance_id": None}, 10)
        return body["error_code"]

    def leave(self) -> None:
        from kafkalite.protocol import ApiKey
        if not self.member_id:
            return
        try:
            self._request(ApiKey.LEAVE_GROUP, {
                "group_id": self.group_id, "member_id": self.member_id,
                "members": [{"member_id": self.member_id, "group_instance_id": None,
                             "reason": "worker stopping"}]}, 5)
        except Exception:       # noqa: BLE001 -- the session timeout ends it anyway
            pass

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
        self._meta.close()
        self._ctx.term()


class CooperativeAssignor:
    """The leader's incremental cooperative assignment (Kafka's KIP-415
    IncrementalCooperativeAssignor, with connectors as the units).

    Each member's metadata says what it runs (``owned``). A round:
    units no longer configured are revoked; units of members that left
    (known from this leader's previous round) are held for
    ``scheduled.rebalance.max.delay.ms`` in case the member comes back
    (members rejoin when the delay ends), then dealt out like new units;
    a member above its fair share (total / members, the remainder to the
    members that hold most) revokes the excess; units nobody runs go to
    the members furthest below their share. A unit revoked in a round is
    given to no one in the same round: its member stops it and rejoins,
    and the next round hands it out, so a unit never runs on two members
    at once. Units that stay put are in no list and keep running.

    Assignment per member: ``{"connectors": [what it runs after this
    round], "assigned": [of those, the new ones: to start], "revoked": [to
    stop], "delay": ms until a rejoin is due (0:
    none), "owners": {unit: owner url}, "previous": {unit: url} (what the
    next leader compares with)}``. A new leader starts the delay afresh."""

    def __init__(self, max_delay_ms: int):
        self.max_delay_ms = max_delay_ms
        # unit -> its owner's url after the last round: every member keeps the one it was
        # sent (``remember``), so a new leader still knows what a departed member ran
        self.previous: dict[str, str] = {}
        self.lost_deadline: float | None = None   # monotonic s when held units are dealt out

    def assign(self, members: list, units: list[str], now: float | None = None) -> dict:
        now = time.monotonic() if now is None else now
        units_set = set(units)
        ids = sorted(m for m, _ in members)
        meta = dict(members)
        owned: dict[str, list] = {m: [] for m in ids}
        revoked: dict[str, list] = {m: [] for m in ids}
        taken = set()
        for m in ids:
            for u in sorted(meta[m].get("owned", [])):
                if u not in units_set or u in taken:      # deleted, or claimed twice
                    revoked[m].append(u)
                else:
                    owned[m].append(u)
                    taken.add(u)
        present = {meta[m]["url"] for m in ids}
        lost = {u for u, url in self.previous.items()
                if url not in present and u in units_set and u not in taken}
        delay = 0
        if lost and self.max_delay_ms > 0:
            if self.lost_deadline is None:
                self.lost_deadline = now + self.max_delay_ms / 1000
            if now < self.lost_deadline:
                delay = max(1, int((self.lost_deadline - now) * 1000))
            else:
                lost = set()                  # the delay is over: dealt out as new units
                self.lost_deadline = None
        else:
            lost = set()
            self.lost_deadline = None
        held = lost
        total = len(units_set - held)
        n = len(ids)
        base, extra = divmod(total, n) if n else (0, 0)
        # who keeps one above the base share: those holding most already (fewest moves)
        by_load = sorted(ids, key=lambda m: (-len(owned[m]), m))
        share = {m: base + (1 if i < extra else 0) for i, m in enumerate(by_load)}
        for m in ids:
            excess = len(owned[m]) - share[m]
            if excess > 0:
                revoked[m] += owned[m][-excess:]
                owned[m] = owned[m][:-excess]
        revoked_now = {u for r in revoked.values() for u in r}
        free = sorted(units_set - taken - held)
        free = [u for u in free if u not in revoked_now]
        for u in free:
            m = min(ids, key=lambda x: (len(owned[x]) - share[x], len(owned[x]), x))
            owned[m].append(u)
        owners = {u: meta[m]["url"] for m in ids for u in owned[m]}
        # held units stay their departed member's, and a unit being revoked its member's
        # until it rejoins: lost if that member goes before then
        previous = {**{u: self.previous[u] for u in held},
                    **{u: meta[m]["url"] for m in ids for u in revoked[m] if u in units_set},
                    **owners}
        self.previous = previous
        return {m: {"connectors": sorted(owned[m]),
                    "assigned": sorted(set(owned[m]) - set(meta[m].get("owned", []))),
                    "revoked": sorted(revoked[m]), "delay": delay, "owners": owners,
                    "previous": previous} for m in ids}

    def remember(self, assignment: dict) -> None:
        """A member's copy of the round it was sent, should it lead the next."""
        self.previous = dict(assignment.get("previous", {}))


class InternalTopics:
    """The config and status topics: produced to, and tailed into views."""

    def __init__(self, client_config, config_topic, status_topic, on_config_change):
        self.client_config = client_config
        self.config_topic, self.status_topic = config_topic, status_topic
        self.configs: dict[str, dict] = {}       # connector -> properties
        self.targets: dict[str, str] = {}        # connector -> target state
        self.status: dict[str, dict] = {}        # status key -> value
        self.on_config_change = on_config_change
        self._lock = threading.Condition()
        self._seen = 0                            # records applied
        self._stop = threading.Event()
        self._producer = None
        # the REST API serves before start() has made the topics and the producer
        self._ready = threading.Event()
        self._thread = None

    def start(self):
        from kafkalite.client import AdminClient, NewTopic, Producer
        from kafkalite.errors import TopicAlreadyExistsError
        admin = AdminClient(self.client_config)
        try:
            for t in (self.config_topic, self.status_topic):
                try:
                    admin.create_topics([NewTopic(t, 1, config={"cleanup.policy": "compact"})])[
                        t].result()
                except TopicAlreadyExistsError:
                    pass
        finally:
            admin.close()
        self._producer = Producer({**self.client_config, "linger.ms": 0})
        self._ready.set()
        self._thread = threading.Thread(target=self._tail, daemon=True, name="connect-tail")
        self._thread.start()

    def _tail(self):
        from kafkalite.client import OFFSET_BEGINNING, Consumer, TopicPartition
        c = Consumer({**self.client_config, "enable.auto.commit": False,
                      "fetch.max.wait.ms": 100})
        c.assign([TopicPartition(self.config_topic, 0, OFFSET_BEGINNING),
                  TopicPartition(self.status_topic, 0, OFFSET_BEGINNING)])
        try:
            while not self._stop.is_set():
                changed = False
                for m in c.consume(1000, 0.2):
                    if m.error():
                        continue
                    key = m.key().decode()
                    value = None if m.value() is None else json.loads(m.value())
                    with self._lock:
                        if m.topic() == self.config_topic:
                            changed |= self._apply_config(key, value)
                        elif value is None:
                            self.status.pop(key, None)
                        else:
                            self.status[key] = value
                        self._seen += 1
                        self._lock.notify_all()
                if changed:
                    self.on_config_change()
        finally:
            c.close()

    def _apply_config(self, key, value) -> bool:
        if key.startswith("connector-"):
            name = key[len("connector-"):]
            if value is None:
                self.configs.pop(name, None)
                self.targets.pop(name, None)
            else:
                self.configs[name] = value["properties"]
            return True
        if key.startswith("target-state-"):
            # the owner applies a target state between heartbeats: no rebalance
            name = key[len("target-state-"):]
            self.targets[name] = value["state"] if value else "STARTED"
        return False

    def write(self, topic, key, value) -> None:
        if not self._ready.wait(30):
            raise ConnectException("the worker is still starting: its internal topics are not "
                                   "ready")
        self._producer.produce(topic, key=key.encode(),
                               value=None if value is None else json.dumps(value).encode())
        if self._producer.flush(30):
            raise ConnectException(f"{topic}: write of {key} not acknowledged in 30 s")

    def wait(self, cond, timeout=30.0):
        deadline = time.monotonic() + timeout
        with self._lock:
            while not cond():
                left = deadline - time.monotonic()
                if left <= 0:
                    raise ConnectException("timed out waiting for the config topic")
                self._lock.wait(left)

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        if self._producer is not None:
            self._producer.close(10)


class DistributedHerder(Herder):
    """A Herder whose connectors are those the group assigned to this
    worker; reads come from the internal topics' views, writes go to them."""

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
        self.assignor = CooperativeAssignor(scheduled_rebalance_max_delay_ms)
        self.internal = InternalTopics(worker.client_config, config_topic, status_topic,
                                     self._config_changed)
        self.owners: dict[str, str] = {}
        self.assigned: list[str] = []
        self._rejoin = threading.Event()
        self._stopping = threading.Event()
        self._thread = None
        self._published: dict = {}
        self.generation = -1
        self._rejoin_at: float | None = None      # a scheduled rebalance (held units' delay)

    # ---- running ---------------------------------------------------------------------------

    def start(self) -> "DistributedHerder":
        self.internal.start()
        self._thread = threading.Thread(target=self._membership, daemon=True,
                                        name="connect-membership")
        self._thread.start()
        return self

    def _config_changed(self):
        self._rejoin.set()

    def _owned(self) -> dict:
        with self._lock:
            return {"owned": sorted(self._connectors)}

    def _expelled(self):
        # the group no longer counts this member: what it ran may be dealt out
        log.warning("connect group %s: this worker's membership expired; stopping its "
                    "connectors", self.group_id)
        self._stop_all()

    def _membership(self):
        from kafkalite import errors
        group = ConnectGroup(self.worker.client_config, self.group_id,
                             f"http://{self.worker.worker_id}", self.session_timeout_ms)
        try:
            while not self._stopping.is_set():
                try:
                    self._rejoin.clear()
                    assignment = group.join(self._assign, self._owned, self._expelled)
                except Exception as e:  # noqa: BLE001 -- coordinator moved or not ready
                    log.warning("connect group %s: join failed: %s", self.group_id, e)
                    self._stopping.wait(1.0)
                    continue
                self.generation = group.generation
                self._apply(assignment)
                while not self._stopping.is_set() and not self._rejoin.is_set():
                    try:
                        self._reconcile_configs()
                        self._publish_status()
                        self._apply_targets()
                    except Exception:  # noqa: BLE001 -- keep the membership alive
                        log.exception("connect group %s: status/target update failed",
                                      self.group_id)
                    if self._rejoin_at is not None and time.monotonic() >= self._rejoin_at:
                        self._rejoin_at = None
                        break
                    if self._stopping.wait(self.heartbeat_interval):
                        break
                    try:
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

    def _assign(self, members):
        # the leader assigns from the configs it has read
        with self.internal._lock:
            names = list(self.internal.configs)
        return self.assignor.assign(members, names)

    def _apply(self, assignment: dict) -> None:
        """Stop what was revoked, start what is new; the rest runs on."""
        self.owners = assignment.get("owners", {})
        self.assigned = assignment.get("connectors", [])
        self.assignor.remember(assignment)
        revoked = set(assignment.get("revoked", []))
        with self._lock:
            for name in list(self._connectors):
                if name in revoked or name not in self.assigned:
                    self._shutdown(self._connectors.pop(name))
                    self._forget_status(name)
        new = [n for n in self.assigned if n not in self._connectors]
        if new:
            store = self.worker.offsets
            if hasattr(store, "refresh"):
                store.refresh()        # offsets written by the connectors' previous owners
        for name in new:
            with self.internal._lock:
                config = self.internal.configs.get(name)
                target = self.internal.targets.get(name, "STARTED")
            if config is None:
                continue
            with self._lock:
                self._start_local(name, config, target)
        if revoked:
            self._rejoin.set()         # the revoked units go out in the next round
        delay = assignment.get("delay", 0)
        self._rejoin_at = time.monotonic() + delay / 1000 if delay else None

    def _reconcile_configs(self):
        """A changed config of a connector this worker runs: restart it with the
        new one (no rebalance moves it); a deleted one: stop it."""
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
                    self._forget_status(name)
                else:
                    self._start_local(name, config, target)

    def _forget_status(self, name):
        for key in [k for k in self._published if k == f"status-connector-{name}" or
                    k.startswith(f"status-task-{name}-")]:
            del self._published[key]

    def _start_local(self, name, config, target):
        from kafkalite.connect.herder import _Connector
        from kafkalite.connect.worker import STOPPED
        c = self._connectors[name] = _Connector(name, config)
        c.target = target
        if target == "STOPPED":
            from kafkalite.connect import plugins
            c.kind = plugins.connector_class(config["connector.class"]).TYPE
            c.state = STOPPED
        else:
            self._start_connector(c)

    def _apply_targets(self):
        """Target states written by any worker, applied by the owner."""
        for name in list(self.assigned):
            with self.internal._lock:
                target = self.internal.targets.get(name, "STARTED")
            c = self._connectors.get(name)
            if c is None or c.target == target:
                continue
            if target == "PAUSED":
                Herder.pause(self, name)
            elif target == "STOPPED":
                Herder.stop_connector(self, name)
            else:
                Herder.resume(self, name)

    def _stop_all(self):
        with self._lock:
            for c in list(self._connectors.values()):
                self._shutdown(c)
            self._connectors.clear()
        self._published.clear()

    def _publish_status(self):
        with self._lock:
            local = {n: Herder.status(self, n) for n in self._connectors}
            configs = {n: [dict(t) for t in c.task_configs] for n, c in self._connectors.items()}
        for name, st in local.items():
            value = {"state": st["connector"]["state"], "trace": st["connector"].get("trace"),
                     "worker_id": self.worker.worker_id, "generation": self.generation,
                     "type": st["type"], "tasks": configs[name]}
            self._put_status(f"status-connector-{name}", value)
            for t in st["tasks"]:
                self._put_status(f"status-task-{name}-{t['id']}", {
                    "state": t["state"], "trace": t.get("trace"),
                    "worker_id": self.worker.worker_id, "generation": self.generation})

    def _put_status(self, key, value):
        if self._published.get(key) != value:
            self.internal.write(self.internal.status_topic, key, value)
            self._published[key] = value

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(60)
        self.internal.stop()

    # ---- reads: from the views -------------------------------------------------------------

    def _config(self, name):
        with self.internal._lock:
            config = self.internal.configs.get(name)
        if config is None:
            raise NotFoundException(f"Connector {name} not found")
        return config

    def connectors(self):
        with self.internal._lock:
            return sorted(self.internal.configs)

    def connector_config(self, name):
        return dict(self._config(name))

    def _status_of(self, name):
        with self.internal._lock:
            return self.internal.status.get(f"status-connector-{name}")

    def connector_info(self, name):
        config = self._config(name)
        st = self._status_of(name) or {}
        from kafkalite.connect import plugins
        return {"name": name, "config": dict(config),
                "tasks": [{"connector": name, "task": i} for i in range(len(st.get("tasks", [])))],
                "type": st.get("type") or plugins.connector_class(config["connector.class"]).TYPE}

    def task_configs(self, name):
        self._config(name)
        st = self._status_of(name) or {}
        return [{"id": {"connector": name, "task": i}, "config": tc}
                for i, tc in enumerate(st.get("tasks", []))]

    def status(self, name):
        info = self.connector_info(name)
        st = self._status_of(name) or {"state": "UNASSIGNED", "worker_id": None}
        tasks = []
        for t in info["tasks"]:
            tasks.append(self.task_status(name, t["task"]))
        conn = {"state": st["state"], "worker_id": st["worker_id"]}
        if st.get("trace"):
            conn["trace"] = st["trace"]
        return {"name": name, "connector": conn, "tasks": tasks, "type": info["type"]}

    def task_status(self, name, task_id):
        self._config(name)
        with self.internal._lock:
            st = self.internal.status.get(f"status-task-{name}-{task_id}")
        if st is None:
            raise NotFoundException(f"Task {name}-{task_id} not found")
        out = {"id": task_id, "state": st["state"], "worker_id": st["worker_id"]}
        if st.get("trace"):
            out["trace"] = st["trace"]
        return out

    # ---- writes: to the config topic -------------------------------------------------------

    def put_connector_config(self, name, config, allow_replace, initial_state=None):
        from kafkalite.connect.herder import _initial_target
        config = self._checked(name, config)
        target = _initial_target(initial_state)
        with self.internal._lock:
            existed = name in self.internal.configs
        if existed and not allow_replace:
            from kafkalite.connect.errors import AlreadyExistsException
            raise AlreadyExistsException(f"Connector {name} already exists")
        if not existed and initial_state is not None:
            # the target first: the connector's first owner starts it in that state
            self.internal.write(self.internal.config_topic, f"target-state-{name}",
                                {"state": target})
        self.internal.write(self.internal.config_topic, f"connector-{name}", {"properties": config})
        self.internal.wait(lambda: self.internal.configs.get(name) == config)
        return not existed, self.connector_info(name)

    def delete_connector(self, name):
        self._config(name)
        self.internal.write(self.internal.config_topic, f"connector-{name}", None)
        self.internal.wait(lambda: name not in self.internal.configs)

    def _target(self, name, state):
        self._config(name)
        self.internal.write(self.internal.config_topic, f"target-state-{name}", {"state": state})
        self.internal.wait(lambda: self.internal.targets.get(name) == state)

    def pause(self, name):
        self._target(name, "PAUSED")

    def resume(self, name):
        self._target(name, "STARTED")

    def stop_connector(self, name):
        self._target(name, "STOPPED")

    # ---- calls for the owner ---------------------------------------------------------------

    def _forward(self, name, method, path, body=None):
        """Ask the owner's REST API; returns (status, body)."""
        self._config(name)
        owner = self.owners.get(name)
        if owner is None:
            raise ConnectException(f"Connector {name} has no owner yet (rebalancing)")
        req = urllib.request.Request(owner + path, method=method,
                                     data=None if body is None else json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            msg = json.loads(e.read() or b"{}").get("message", str(e))
            if e.code == 404:
                raise NotFoundException(msg) from None
            if e.code == 400:
                raise BadRequestException(msg) from None
            raise ConnectException(msg) from None

    def _local(self, name) -> bool:
        return name in self._connectors

    def restart(self, name, include_tasks=False, only_failed=False):
        if self._local(name):
            return super().restart(name, include_tasks, only_failed)
        q = f"?includeTasks={str(include_tasks).lower()}&onlyFailed={str(only_failed).lower()}"
        status, body = self._forward(name, "POST", f"/connectors/{name}/restart{q}")
        return None if status == 204 else body

    def restart_task(self, name, task_id):
        if self._local(name):
            return super().restart_task(name, task_id)
        self._forward(name, "POST", f"/connectors/{name}/tasks/{task_id}/restart")

    def offsets(self, name):
        if self._local(name):
            return super().offsets(name)
        return self._forward(name, "GET", f"/connectors/{name}/offsets")[1]

    def alter_offsets(self, name, offsets):
        if self._local(name):
            return super().alter_offsets(name, offsets)
        return self._forward(name, "PATCH", f"/connectors/{name}/offsets",
                             {"offsets": offsets})[1]["message"]

    def reset_offsets(self, name):
        if self._local(name):
            return super().reset_offsets(name)
        return self._forward(name, "DELETE", f"/connectors/{name}/offsets")[1]["message"]

    def topics(self, name):
        config = self._config(name)
        return sorted({t.strip() for t in config.get("topics", config.get("topic", ""))
                       .split(",") if t.strip()})
