"""The Connect group leader's duties: the session key (KIP-507), rotated
when it is older than ``inter.worker.key.ttl.ms``, and zombie fencing
(KIP-618): before the tasks of an exactly-once source connector's new task
configs start, the producers of every earlier generation's tasks are
fenced and the task count recorded.

A part of distributed_herder.py's ``DistributedHerder`` (which inherits
it, and holds its state and locks): the process, threads and imports are
that module's.
"""
from __future__ import annotations

import logging

from kafkalite.connect.distributed.internal_topics import TASK_COUNT_PREFIX
from kafkalite.connect.signature import SESSION_KEY, SessionKey

log = logging.getLogger("kafkalite.connect")


def transactional_producer_id(group_id: str) -> str:
    """The transactional.id of a Connect group's leader (Kafka's
    DistributedConfig.transactionalProducerId)."""
    return f"connect-cluster-{group_id}"


def fence_producers(client_config: dict, transactional_ids: list[str]) -> None:
    """Fence every producer of ``transactional_ids`` (Kafka's
    Admin.fenceProducers): an InitProducerId for each id bumps its epoch
    and aborts its open transaction, so an earlier holder's next write or
    commit fails and what it left open never becomes visible. Our
    AdminClient has no fenceProducers; a transactional Producer's
    init_transactions sends that same InitProducerId."""
    from kafkalite.connect.clients import Producer
    for tid in transactional_ids:
        p = Producer({**client_config, "transactional.id": tid, "linger.ms": 0})
        try:
            p.init_transactions(30)
        finally:
            p.close(5)


class LeaderDuties:
    """The leader's duties, the DistributedHerder's side (this module's docstring)."""

    def _rotate_session_key(self) -> None:
        """A new session key when there is none or the current one is older
        than ``inter.worker.key.ttl.ms`` (Kafka's leader does the same on
        each tick); the leader signs with it once it has read it back."""
        key = self.internal.session_key
        if key is not None and not key.expired(self.key_ttl_ms):
            return
        new = SessionKey.generate(self.key_algorithm, self.key_size)
        self.internal.write_config([(SESSION_KEY, new.record())])
        log.info("connect group %s: new session key of %d written", self.group_id,
                 new.creation_timestamp)
        self.internal.wait(lambda: self.internal.session_key == new, 10)

    def _fence_zombies(self) -> None:
        """KIP-618: for each exactly-once source connector whose task configs
        are newer than its last task count record, fence the producers of
        every earlier generation's tasks (transactional ids of tasks 0 up to
        the largest earlier task count: a task the new generation no longer
        has would otherwise live on as a zombie, as no new incarnation of it
        fences it), then write ``task-count-record-<name>``
        ``{"task-count": N}``. No task of the new generation starts before
        (``_start_local_task``)."""
        if not self.exactly_once:
            return
        from kafkalite.connect import plugins
        with self.internal._lock:
            pending = {name: (max(before, self.internal.task_count_records.get(name, 0)),
                              len(self.internal.task_configs.get(name, [])))
                       for name, before in self.internal.pending_fencing.items()
                       if name in self.internal.configs}
            classes = {name: self.internal.configs[name].get("connector.class")
                       for name in pending}
        for name, (previous, count) in pending.items():
            try:
                if plugins.connector_class(classes[name]).TYPE != "source":
                    continue
            except Exception:  # noqa: BLE001 -- an unknown class runs no task to fence
                continue
            ids = [self.worker.task_transactional_id(name, i) for i in range(previous)]
            fence_producers(self.worker.client_config, ids)
            self.internal.write_config([(TASK_COUNT_PREFIX + name, {"task-count": count})])
            log.info("connector %s: fenced the producers of %d earlier tasks; task count %d "
                     "recorded", name, previous, count)
            self.internal.wait(lambda: name not in self.internal.pending_fencing, 10)

    def _pending_fencing(self, name) -> bool:
        with self.internal._lock:
            return name in self.internal.pending_fencing
