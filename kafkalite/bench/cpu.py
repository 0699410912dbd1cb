"""What a run cost in CPU: the system under test's processes and the
clients', over the measured seconds, per message and per request (issue 72).

Latency and rate say whether a server kept up on this machine; CPU time per
message says what it costs, and travels between machines of different
speeds and loads far better than either. ``CpuWindow`` reads every process's
user + system time from /proc (measure.process_table) when the measured
seconds begin and when they end: the server's as its root processes (a
driver's ``server_pids``) and all their descendants, the clients' as the
run's producer and consumer processes. Messages are the producers' sends
over the same window; requests, where the driver can count them
(``server_requests``, kafkalite's request metrics), the server's answered
requests over it. /proc counts in clock ticks (10 ms at 100 Hz): over a
20 s window at one core, 0.05 %. Beside the CPU, the server's voluntary
context switches per message (``server_wakeups_per_msg``): a process that sleeps
and is woken for each request pays the scheduler and, between processes on
a VM, an inter-processor interrupt each time -- the cost that answers held
back and requests read together are meant to cut.

Who calls: runner.run_driver (in the harness's parent process).
"""
from __future__ import annotations

import time

from kafkalite.bench.measure import process_table, tree_pids, tree_seconds, voluntary_switches


class CpuWindow:
    def __init__(self, server_pids, client_pids, requests=None):
        self.server_pids, self.client_pids = list(server_pids), list(client_pids)
        self.requests = requests        # () -> answered requests so far, or None
        self.start = self.end = None

    def _sample(self, sent: int) -> dict:
        table = process_table()
        n = None
        if self.requests is not None:
            try:
                n = self.requests()
            except (OSError, ValueError):
                n = None
        server = tree_pids(table, self.server_pids)
        return {"t": time.monotonic(), "sent": sent, "requests": n,
                "server": tree_seconds(table, self.server_pids),
                "clients": tree_seconds(table, self.client_pids),
                "server_switches": voluntary_switches(server)}

    def open(self, sent: int) -> None:
        self.start = self._sample(sent)

    def close(self, sent: int) -> None:
        if self.start is not None and self.end is None:
            self.end = self._sample(sent)

    def result(self) -> dict | None:
        """{seconds, messages, server_cores, clients_cores,
        server_us_per_msg, clients_us_per_msg, requests,
        server_us_per_request, server_wakeups_per_msg}; None before both
        samples. The server's
        fields are None for a driver with no server (a ceiling)."""
        a, b = self.start, self.end
        if a is None or b is None or b["t"] <= a["t"]:
            return None
        seconds, messages = b["t"] - a["t"], b["sent"] - a["sent"]
        server, clients = b["server"] - a["server"], b["clients"] - a["clients"]
        has_server = bool(self.server_pids)
        requests = (b["requests"] - a["requests"]
                    if a["requests"] is not None and b["requests"] is not None else None)
        return {
            "seconds": seconds, "messages": messages,
            "server_cores": server / seconds if has_server else None,
            "clients_cores": clients / seconds,
            "server_us_per_msg": server * 1e6 / messages if has_server and messages else None,
            "clients_us_per_msg": clients * 1e6 / messages if messages else None,
            "requests": requests,
            "server_us_per_request": server * 1e6 / requests if has_server and requests else None,
            # how often the server's threads slept and were woken, per message
            "server_wakeups_per_msg": ((b["server_switches"] - a["server_switches"]) / messages
                                       if has_server and messages else None),
        }


def summary(cpu: dict | None) -> str:
    """One line of a run's CPU result ('' without one)."""
    if not cpu:
        return ""

    def us(v, what):        # None where nothing was sent or counted in the window
        return "" if v is None else f", {v:.1f} us/{what}"
    parts = []
    if cpu["server_cores"] is not None:
        parts.append(f"server {cpu['server_cores'] * 100:.0f}% of a core"
                     + us(cpu["server_us_per_msg"], "msg")
                     + us(cpu["server_us_per_request"], "request")
                     + ("" if cpu["server_wakeups_per_msg"] is None else
                        f", {cpu['server_wakeups_per_msg']:.2f} wake-ups/msg"))
    parts.append(f"clients {cpu['clients_cores'] * 100:.0f}%" + us(cpu["clients_us_per_msg"], "msg"))
    return "CPU: " + "; ".join(parts)
