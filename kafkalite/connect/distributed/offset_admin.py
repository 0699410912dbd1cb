"""Connector offsets administration (KIP-875) in a Connect cluster: read on
any worker (the offsets topic for a source connector, the consumer group
for a sink), altered or reset by the leader, for a STOPPED connector only;
under exactly-once support written in a transaction after its tasks'
producers were fenced.

A part of distributed_herder.py's ``DistributedHerder`` (which inherits
it, and holds its state and locks): the process, threads and imports are
that module's.
"""
from __future__ import annotations

import logging
import time

from kafkalite.connect.distributed.leader_duties import fence_producers
from kafkalite.connect.errors import NotFoundException
from kafkalite.connect.connector_offsets import (ask_connector, check_offsets, not_stopped,
                                                 offsets_answer, sink_offsets_of)

log = logging.getLogger("kafkalite.connect")

# how long an offsets change waits for the stopped connector's tasks to end
# on their owners (their last offset commit) before going ahead anyway
TASKS_STOPPED_WAIT_S = 10.0


class OffsetAdmin:
    """The offsets API, the DistributedHerder's side (this module's docstring)."""

    def _kind(self, name, config) -> str:
        st = self._status_of(name) or {}
        if st.get("type"):
            return st["type"]
        from kafkalite.connect import plugins
        return plugins.connector_class(config["connector.class"]).TYPE

    def offsets(self, name):
        """From the offsets topic (source) or the connector's consumer group
        (sink), on whichever worker is asked, as Kafka's."""
        config = self._config(name)
        if self._kind(name, config) != "source":
            return self._sink_offsets(name)
        store = self.worker.offsets
        if hasattr(store, "refresh"):
            store.refresh()        # the connector's tasks commit from their own workers
        return self._source_offsets(name)

    def alter_offsets(self, name, offsets):
        self._config(name)
        check_offsets(offsets)                        # a 400 here, leader or not
        self._require_leader("modify connector offsets")
        handled = self._modify_offsets(
            name, [(o["partition"], o.get("offset")) for o in offsets], offsets)
        return offsets_answer(False, handled)

    def reset_offsets(self, name):
        self._config(name)
        self._require_leader("modify connector offsets")
        return offsets_answer(True, self._modify_offsets(name, None, None))

    def _modify_offsets(self, name, pairs, body) -> bool:
        """Kafka's DistributedHerder.modifyConnectorOffsets, on the leader
        (which has read the config topic to its end): only a STOPPED
        connector with no task configs left (none of its tasks runs
        anywhere), else 400. ``pairs``: [(partition, offset or None)] to
        alter, None to reset all. A source connector's go to the offsets
        topic; under exactly-once support its tasks' producers are fenced
        first and the offsets written in a transaction of its task 0's
        transactional id (Kafka's Worker.modifySourceConnectorOffsets), so no
        zombie task commits over them. A sink connector's are its consumer
        group's (``connect-<name>``), changed with the admin client. The
        connector's own alter_offsets hook is asked first (ask_connector);
        its answer is returned."""
        with self.internal._lock:
            config = self.internal.configs.get(name)
            target = self.internal.targets.get(name, "STARTED")
            tasks = len(self.internal.task_configs.get(name, []))
        if config is None:
            raise NotFoundException(f"Connector {name} not found")
        if target != "STOPPED" or tasks:
            raise not_stopped(name)
        self._await_tasks_stopped(name)
        if self._kind(name, config) != "source":
            if pairs is None:
                handled = ask_connector(name, config, self._sink_reset_map(name))
                self._reset_sink(name)
            else:
                wanted = sink_offsets_of(body)
                handled = ask_connector(name, config, wanted)
                self._alter_sink(name, wanted)
            return handled
        store = self.worker.offsets
        if hasattr(store, "refresh"):
            store.refresh()
        if pairs is None:
            pairs = [(p, None) for p, _ in store.offsets_of(name)]
        handled = ask_connector(name, config, pairs)
        if not pairs:
            return handled
        if self.exactly_once and hasattr(store, "records_for"):
            self._write_offsets_transactionally(name, pairs)
        else:
            store.put(name, pairs)
        return handled

    def _await_tasks_stopped(self, name, timeout: float = TASKS_STOPPED_WAIT_S) -> None:
        """No task configs left does not mean no task runs: each owner stops
        its tasks when it reads the change, and a source task commits its
        offsets once more as it ends, which would land over a reset done
        meanwhile (a fresh-clone run saw {"n": 4} come back after DELETE
        /offsets). Each owner removes its task's status once the task has
        ended; wait for those to be gone. A status left by a worker that
        died is not waited for past ``timeout`` (logged)."""
        prefix = f"status-task-{name}-"
        deadline = time.monotonic() + timeout
        while True:
            with self.internal._lock:
                left = sorted(k for k, v in self.internal.status.items()
                              if k.startswith(prefix) and v is not None)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if left:
            log.warning("connector %s: changing its offsets although %s still show a task "
                        "(a worker that died?)", name, ", ".join(left))

    def _write_offsets_transactionally(self, name, pairs) -> None:
        from kafkalite.connect.clients import Producer
        with self.internal._lock:
            count = max(self.internal.max_task_counts.get(name, 0),
                        self.internal.task_count_records.get(name, 0),
                        self.internal.pending_fencing.get(name, 0))
        fence_producers(self.worker.client_config,
                        [self.worker.task_transactional_id(name, i) for i in range(count)])
        store = self.worker.offsets
        p = Producer({**self.worker.client_config, "linger.ms": 0,
                      "transactional.id": self.worker.task_transactional_id(name, 0)})
        try:
            p.init_transactions(30)
            p.begin_transaction()
            for key, value in store.records_for(name, pairs):
                p.produce(store.topic, key=key, value=value)
            p.commit_transaction(30)
        finally:
            p.close(5)
        store.remember(name, pairs)
        log.info("connector %s: fenced the producers of its %d tasks; %d offsets written in "
                 "a transaction", name, count, len(pairs))
