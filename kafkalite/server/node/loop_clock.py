"""The supervisor's loop clock: how long a worker was silent, counted only
in time the supervisor's loop was able to look.

A worker is fenced when it sent nothing for ``broker_session_timeout_ms``
(supervisor.py _watch_children). Its heartbeats reach the supervisor's
control socket whatever the supervisor does, but they are only *seen*
when the loop drains that socket. A loop that stalled -- a slow step, a
page-in, a process starved of CPU on a loaded host -- saw nothing for as
long as it stalled, and measured against the wall clock every worker
looked silent: healthy workers were fenced and their leaderships moved
(issue 68, item 5: stalls of 7-18 s right after start under load, with a
6 s timeout). A session is checked here against the time the loop was
able to look, not the wall clock: a fence needs the worker to have been
silent, not only the supervisor to have been away.

The loop calls ``looked()`` each time it drained the control socket. A
gap between two looks longer than ``allowance_s`` (a normal turn is one
poll interval plus its work) is the loop's stall, and all of it past the
allowance is left out of the *available* time: ``now()`` is the
monotonic time less every stall so far, the current one included (a
check made after a slow step of the same turn). Deadlines about what the
supervisor sees -- a worker's last heartbeat, an adopted worker's hello --
are kept on this clock; the group coordinator's sessions are extended by
each stall instead (``looked()`` returns it; GroupCoordinator.
extend_sessions), their members' heartbeats having waited unread on the
client sockets as the workers' did on the control socket. Deadlines about
the outside world (a change's answer, a restart's back-off) stay on the
wall clock.

Two stalls measured on a restarted supervisor's first turns under load
(8 busy processes on 2 cores, load 16-21) are taken off the loop before
it turns (``prepare_for_loop``): a full collection of everything start()
had made (0.17-0.43 s, again at every later one) and the first record
batch's import of the compression codecs (lz4, zstandard: one turn of
0.4-0.6 s). Both scale with the load: a process given a tenth of a core
takes ten times as long.

Alongside, the clock measures the loop's lag: the longest gap between
looks (``longest_s``, and when it ended) and a warning in the log
for each stall, naming its length, so a slow step is found where it
happens.

Who may call: the supervisor's loop, on its one thread.
"""
from __future__ import annotations

import gc
import logging
import os
import time

log = logging.getLogger("kafkalite.supervisor")

# A turn of the loop is one poll (supervisor.POLL_INTERVAL_MS, 0.1 s) and its
# work; on a busy host a few times that. A gap past this is a stall.
STALL_ALLOWANCE_S = 1.0


class LoopClock:
    """Available time of one loop: wall time less the loop's stalls."""

    def __init__(self, allowance_s: float = STALL_ALLOWANCE_S, clock=time.monotonic):
        self.allowance_s = allowance_s
        self._clock = clock
        self._last_look = clock()
        self._stalled_s = 0.0           # every stall before the last look, past the allowance
        self.longest_s = 0.0            # the longest gap between two looks
        self.longest_at = 0.0           # when it ended (this clock's wall time)
        self.stalls = 0                 # gaps past the allowance

    def looked(self) -> float:
        """The loop drained its control socket: what the workers sent until
        now was seen. The gap since the last look is measured; past the
        allowance, it was a stall, whose length past the allowance is
        returned (0.0 after a normal turn): what other sessions the loop
        keeps (the group coordinator's) are extended by it."""
        wall = self._clock()
        gap = wall - self._last_look
        stalled = 0.0
        if gap > self.longest_s:
            self.longest_s, self.longest_at = gap, wall
        if gap > self.allowance_s:
            stalled = gap - self.allowance_s
            self._stalled_s += stalled
            self.stalls += 1
            log.warning("the supervisor's loop did not look at its workers for %.1f s (a slow "
                        "step or a starved process); that time is not counted against their "
                        "heartbeats", gap)
        self._last_look = wall
        return stalled

    def now(self) -> float:
        """Available time: the wall clock less every stall, the one in
        progress included (a slow step since the last look)."""
        wall = self._clock()
        current = max(0.0, wall - self._last_look - self.allowance_s)
        return wall - self._stalled_s - current


def prepare_for_loop(collect: bool = True) -> None:
    """Done once before the loop turns, so that it is not done in a turn:
    the codecs every record batch the coordinators write or read needs
    (imported by the Cython codec at its first batch), and the objects of
    the start -- modules, configuration, the loaded coordinators' state --
    moved out of the collector's reach (``gc.freeze``): they live as long as
    the process, and a full collection walked them all each time. Without
    ``collect`` they are frozen garbage and all, at no cost: a supervisor
    that adopted running workers, whose clients wait for its first turns,
    collects later (``collect_start_garbage``)."""
    import kafkalite.record.compression  # noqa: F401
    if collect:
        gc.collect()
    gc.freeze()


def collect_start_garbage() -> None:
    """The collection prepare_for_loop(collect=False) left for later: once,
    in a turn the loop can spare."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


# Fault injection for the test of a stalled loop (tests/server/
# test_supervisor_stalls.py): "stall-loop:<seconds>" blocks the
# supervisor's loop that long, once, in the first turn after the node is
# ready whose poll found nothing to read, before anything of the turn is
# done: what the workers and the clients send meanwhile waits on the
# sockets, and the turn goes on to check the workers' heartbeats and the
# groups' sessions without having read it (a slow step -- a lazy import, a
# full collection, a starved process -- anywhere in a turn has the same
# effect on the next checks). "slow-start:<seconds>" holds a supervisor's
# start that long before it opens anything, as a start on a loaded host is
# held (10.5 s at load 20): no coordinator answers meanwhile, and group
# members whose session is shorter give up their membership on their own
# (tests/server/test_adoption.py). Never set outside those tests.
FAULT_ENV = "KAFKALITE_SUPERVISOR_FAULT"
STALL_FAULT = "stall-loop:"
SLOW_START_FAULT = "slow-start:"


class PlantedStall:
    """FAULT_ENV's stall, read once at start; unset, a no-op."""

    def __init__(self):
        fault = os.environ.get(FAULT_ENV, "")
        self.seconds = float(fault[len(STALL_FAULT):]) if fault.startswith(STALL_FAULT) else 0.0

    def __call__(self, ready: bool) -> None:
        if self.seconds and ready:
            log.warning("planted stall: the supervisor's loop blocks for %.1f s (%s)",
                        self.seconds, FAULT_ENV)
            time.sleep(self.seconds)
            self.seconds = 0.0


def planted_slow_start() -> None:
    """FAULT_ENV's slow start, if set: a no-op otherwise."""
    fault = os.environ.get(FAULT_ENV, "")
    if fault.startswith(SLOW_START_FAULT):
        seconds = float(fault[len(SLOW_START_FAULT):])
        log.warning("planted slow start: the supervisor waits %.1f s before it starts (%s)",
                    seconds, FAULT_ENV)
        time.sleep(seconds)
