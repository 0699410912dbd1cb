"""The supervisor's loop clock (server/node/loop_clock.py) on a clock the
test moves, as Kafka tests its coordinators with a mock clock: a worker's
silence counts only the time the loop was able to look."""
from __future__ import annotations

from kafkalite.server.node.loop_clock import LoopClock


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def turns(loop: LoopClock, clock: Clock, seconds: float, step: float = 0.1) -> None:
    """The loop turning normally for ``seconds``."""
    for _ in range(round(seconds / step)):
        clock.t += step
        loop.looked()


def test_a_loop_turning_counts_every_second():
    clock = Clock()
    loop = LoopClock(1.0, clock)
    heard = loop.now()
    turns(loop, clock, 7.0)
    assert abs(loop.now() - heard - 7.0) < 1e-6     # a silent worker: 7 s, fenced at 6
    assert loop.stalls == 0 and abs(loop.longest_s - 0.1) < 1e-6


def test_a_stall_counts_only_its_allowance_during_it_and_after_it():
    clock = Clock()
    loop = LoopClock(1.0, clock)
    turns(loop, clock, 0.5)
    heard = loop.now()                  # a heartbeat seen at this look
    clock.t += 8.0                      # a slow step, the heartbeats queued meanwhile
    assert abs(loop.now() - heard - 1.0) < 1e-6     # checked before the next look
    loop.looked()
    assert abs(loop.now() - heard - 1.0) < 1e-6
    assert loop.stalls == 1 and abs(loop.longest_s - 8.0) < 1e-6
    turns(loop, clock, 5.5)             # silent on after the stall: counted again
    assert abs(loop.now() - heard - 6.5) < 1e-6


def test_available_time_never_goes_back():
    clock = Clock()
    loop = LoopClock(1.0, clock)
    seen = []
    for step in (0.1, 3.0, 0.2, 0.9, 5.0, 0.1):
        for part in (step / 2, step / 2):
            clock.t += part
            seen.append(loop.now())
        loop.looked()
        seen.append(loop.now())
    assert seen == sorted(seen)
