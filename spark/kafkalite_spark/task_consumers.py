"""The Consumer a Spark Python worker's read tasks share, one task after another.

Spark runs a query's tasks in long-lived Python worker processes
(``spark.python.worker.reuse``, on by default), one task at a time. A task
that made its own Consumer paid, each time, for a ZeroMQ context (and the
thread that terminates it at close), a connection and a Metadata round
trip: on tasks of a few hundred thousand records, a tenth of the worker's
CPU. Here a task borrows the worker's Consumer and gives it back when it
read its range to the end; the next task with the same client settings
takes it as it is, connected and with the metadata it learned.

What must not pass from one task to the next: the assignment and positions
(``give_back`` unassigns, which also abandons a fetch still in flight: its
answer is for the last task's partition, and the next task's first fetch
would wait behind its long poll), and the settings (a task whose client
settings differ in any property -- another server, other credentials,
another isolation level -- gets a new Consumer and the old one is closed).
A task that fails, or that Spark stops part-way (a ``limit``), closes its
Consumer instead: its state is not known to be clean. The Consumer is
closed when the worker process exits normally; a worker that ends with
``os._exit`` (pyspark's daemon-forked workers) leaves its sockets to the
kernel, which closes them.

Who calls: source.read_range, in a Python worker (never on the driver);
one task at a time per process, so no lock.
"""
from __future__ import annotations

import atexit
import os

from kafkalite.client import Consumer

# (pid, settings key, Consumer) of the Consumer not lent out, or None. The
# pid: a process forked with it (pyspark's daemon forks workers) must not
# use the parent's ZeroMQ context.
_idle: tuple[int, tuple, Consumer] | None = None


def _key(config: dict) -> tuple:
    return tuple(sorted((k, str(v)) for k, v in config.items()))


def borrow(config: dict) -> Consumer:
    """The worker's Consumer if it has ``config``'s settings and is idle,
    else a new one (an idle one with other settings is closed)."""
    global _idle
    idle, _idle = _idle, None
    if idle is not None:
        pid, key, consumer = idle
        if pid == os.getpid() and key == _key(config):
            return consumer
        if pid == os.getpid():
            consumer.close()
    return Consumer(config)


def give_back(config: dict, consumer: Consumer) -> None:
    """Keep ``consumer`` (borrowed with ``config``) for the next task,
    unassigned; closes it if another is already kept."""
    global _idle
    consumer.unassign()
    if _idle is not None:
        consumer.close()
        return
    _idle = (os.getpid(), _key(config), consumer)


@atexit.register
def close() -> None:
    """Close the kept Consumer, if any (at the worker's exit)."""
    global _idle
    idle, _idle = _idle, None
    if idle is not None and idle[0] == os.getpid():
        idle[2].close()
