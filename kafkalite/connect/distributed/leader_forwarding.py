"""What a worker of a Connect cluster serves by another worker: the config
writes only the leader makes (a worker that does not lead raises
NotLeaderException, which the REST layer forwards to the leader), this
worker's own internal requests to the leader (signed with the session
key), and the calls a connector's or task's owner serves (restarts).

A part of distributed_herder.py's ``DistributedHerder`` (which inherits
it, and holds its state and locks): the process, threads and imports are
that module's.
"""
from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
import urllib.request

from kafkalite.connect.distributed.assignor import connector_unit, parse_unit, task_unit
from kafkalite.connect.errors import (REBALANCE_CONFLICT, BadRequestException, ConnectException,
                                      ForbiddenException, NotFoundException, NotLeaderException,
                                      RebalanceNeededException)
from kafkalite.connect.herder import restart_plan
from kafkalite.connect.rest_login import CALLER
from kafkalite.connect.signature import sign, verify

log = logging.getLogger("kafkalite.connect")

# how long a config write waits out a rebalance for a leader before its 409
LEADER_WAIT_S = 15.0


class LeaderForwarding:
    """Forwarding to the leader and to owners, the DistributedHerder's side (this module's docstring)."""

    def _to_leader(self, method, path, body):
        """An internal request of this worker's own to the leader's REST API,
        signed with the session key (marked as forwarded: a worker that is no
        longer the leader answers 409)."""
        leader = self.leader_url
        if leader is None:
            raise RebalanceNeededException(f"{REBALANCE_CONFLICT}: no leader known")
        key = self.internal.session_key
        if key is None:
            raise RebalanceNeededException(f"{REBALANCE_CONFLICT}: no session key read yet")
        data = json.dumps(body).encode()
        return self._http(leader + path + "?forward=false", method, data, f"the leader {leader}",
                          timeout=30, headers=sign(key, self.signature_algorithm, data))

    def _require_leader(self, what: str, settled=None, wait: float = LEADER_WAIT_S) -> None:
        """Return when this worker leads the group (waiting out a rebalance up
        to ``wait`` s); else NotLeaderException with the leader's URL (None
        when no leader is known), which the REST layer forwards there.
        ``settled`` waits until this worker's view shows the leader's write."""
        with self._leadership:
            self._leadership.wait_for(lambda: self.leader_url is not None, wait)
            leader = self.leader_url
        if leader != self.url:
            raise NotLeaderException(f"Only the leader can {what}", leader, settled)
        # Kafka's leader reads the config topic to its end before a write: what it checks
        # and writes follows every earlier leader's writes
        if not self.internal.read_to_end(self.sync_timeout_s):
            raise RebalanceNeededException(
                f"{REBALANCE_CONFLICT}: the leader could not read the config topic to its end "
                f"within {int(self.sync_timeout_s * 1000)} ms")

    def put_connector_config(self, name, config, allow_replace, initial_state=None):
        from kafkalite.connect.herder import initial_target
        config = self._checked(name, config)          # a 400 here, leader or not
        target = initial_target(initial_state)
        with self.internal._lock:
            existed = name in self.internal.configs
        if existed and not allow_replace:
            from kafkalite.connect.errors import AlreadyExistsException
            raise AlreadyExistsException(f"Connector {name} already exists")
        self._require_leader("set connector configs", lambda: self._settle(
            lambda: self.internal.configs.get(name) == config))
        records = []
        if not existed and initial_state is not None:
            # the target first: the connector's first owner starts it in that state
            records.append((f"target-state-{name}", {"state": target}))
        records.append((f"connector-{name}", {"properties": config}))
        self.internal.write_config(records)
        self.internal.wait(lambda: self.internal.configs.get(name) == config)
        return not existed, self.connector_info(name)

    def delete_connector(self, name):
        self._config(name)
        self._require_leader("delete connectors", lambda: self._settle(
            lambda: name not in self.internal.configs))
        self.internal.write_config([(f"connector-{name}", None)])
        self.internal.wait(lambda: name not in self.internal.configs)
        # as Kafka's onDeletion: a connector created again under the name starts afresh
        self._write_topic_tombstones(name)

    def _target(self, name, state):
        self._config(name)
        self._require_leader("change a connector's target state", lambda: self._settle(
            lambda: self.internal.targets.get(name) == state))
        self.internal.write_config([(f"target-state-{name}", {"state": state})])
        self.internal.wait(lambda: self.internal.targets.get(name) == state)

    def _settle(self, cond, timeout=10.0):
        """After a write the leader made for this worker: wait (bounded) until
        this worker's view shows it, so the caller's next request here sees
        its change; the write stands either way."""
        try:
            self.internal.wait(cond, timeout)
        except ConnectException:
            log.info("config topic: this worker's view is behind the leader's write")

    def pause(self, name):
        self._target(name, "PAUSED")

    def resume(self, name):
        self._target(name, "STARTED")

    def stop_connector(self, name):
        self._target(name, "STOPPED")

    def put_task_configs(self, name, configs, headers=None, body=b""):
        """Kafka's internal ``POST /connectors/{name}/tasks``: a connector's
        owner hands its task configs to the leader, which writes them. The
        request's ``body`` is signed with the session key (``headers``:
        signature.py; 400 unsigned, 403 a wrong key). Not waiting for a
        leader: the owner tries again."""
        if not isinstance(configs, list) or not all(isinstance(tc, dict) for tc in configs):
            raise BadRequestException("the body is a list of task configs (objects)")
        verify(self.internal.session_key, headers or {}, body, self.verification_algorithms)
        self._config(name)
        self._require_leader("write task configs", wait=0)
        self._write_task_configs(name, configs)

    def _forward(self, unit, method, path, body=None):
        """Ask the REST API of the owner of ``unit`` (a connector's or a task's);
        returns (status, body)."""
        owner = self.owners.get(unit)
        what = ' task '.join(map(str, parse_unit(unit)))
        if owner is None:
            raise RebalanceNeededException(f"{REBALANCE_CONFLICT}: {what} has no owner yet")
        # on the caller's behalf: the owner checks the caller's login (rest_login.py)
        caller = CALLER.get()
        return self._http(owner + path, method, body, f"{what}'s owner {owner}",
                          headers={"Authorization": caller} if caller else None)

    @staticmethod
    def _http(url, method, body, who, timeout=60, headers=None):
        """One call to another worker's REST API: (status, body); ``body`` a
        JSON value, or bytes sent as they are (a signed body); its errors
        raised as the Connect exceptions they stand for."""
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, method=method, data=data,
                                     headers={"Content-Type": "application/json",
                                              **(headers or {})})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                return r.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as e:
            msg = json.loads(e.read() or b"{}").get("message", str(e))
            if e.code == 404:
                raise NotFoundException(msg) from None
            if e.code == 400:
                raise BadRequestException(msg) from None
            if e.code == 409:
                raise RebalanceNeededException(msg) from None
            if e.code == 403:
                raise ForbiddenException(msg) from None
            if e.code == 401:
                # the owner refused the login this worker took (the password changed
                # since): the caller's to fix, not a failure of the cluster
                raise ForbiddenException(f"{who} refused the login: {msg}") from None
            raise ConnectException(msg) from None
        except OSError as e:
            # the worker is gone (killed, stopping): the group moves its units (or elects
            # a new leader) once its session expires; until then the request cannot be served
            raise RebalanceNeededException(
                f"{REBALANCE_CONFLICT}: {who} is unreachable ({e})") from None

    def _connector_call(self, name, method, path, body=None):
        self._config(name)
        return self._forward(connector_unit(name), method, path, body)

    def restart(self, name, include_tasks=False, only_failed=False):
        """KIP-745 over the cluster: the connector restarts on its owner, each
        task planned for a restart on its own owner."""
        if not include_tasks and not only_failed:
            self._restart_connector_unit(name)
            return None
        status = self.status(name)
        plan_conn, plan_tasks = restart_plan(status, include_tasks, only_failed)
        if plan_conn:
            self._restart_connector_unit(name)
        for i in plan_tasks:
            self.restart_task(name, i)
        return status

    def _restart_connector_unit(self, name):
        with self._lock:
            c = self._connectors.get(name)
            if c is not None:
                self._restart_connector(c)
                return
        self._connector_call(name, "POST", f"/connectors/{name}/restart")

    def restart_task(self, name, task_id):
        self._config(name)
        if not 0 <= task_id < len(self._task_configs(name)):
            raise NotFoundException(f"Task {name}-{task_id} not found")
        with self._lock:
            lt = self._tasks.get((name, task_id))
            if lt is not None:
                self._stop_local_task(lt)
                self._start_local_task(lt)
                return
        self._forward(task_unit(name, task_id), "POST",
                      f"/connectors/{name}/tasks/{task_id}/restart")
