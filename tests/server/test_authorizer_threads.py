"""One Authorizer called from several threads at once (issue 40;
kafkalite/server/auth/authorizer.py), as the supervisor's is: its loop thread
and the HTTP port's connection threads (the /metrics login, the web
console's decisions).

Before, a denial's count was a read-modify-write of a dict entry with no
lock, and the audit log's rate limit a few unlocked fields: eight threads
denied 8 x 4,000 times lost thousands of counts every run, so
kafkalite_authorizer_denied undercounted exactly when someone hammers the
port. And ``replace`` stored the ACL index's three dicts one by one, so a
decision during a swap could read the new literal ACLs with the old
prefixed ones. Now every denial is counted and every one is either logged
or counted as dropped, and decisions during swaps of equivalent ACL sets
stay the same.

The thread switch interval is set to 1 us while the threads run, so that
the interleavings the GIL makes rare in a short test are common.
"""
from __future__ import annotations

import logging
import sys
import threading

import pytest

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import AclPermissionType as Perm
from kafkalite.protocol.enums import PatternType as Pat
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.server.auth.authorizer import AclBinding, AuditLog, Authorizer
from kafkalite.server.metrics import NodeMetrics, RequestStats

THREADS = 8
ROUNDS = 4_000
LINES_PER_INTERVAL = 5
# the same decisions twice over: alice may read topic "orders" (literal in
# one, prefixed in the other), no one may do anything else
AS_LITERAL = [AclBinding(Res.TOPIC, "orders", Pat.LITERAL, "User:alice", "*", Op.READ, Perm.ALLOW)]
AS_PREFIX = [AclBinding(Res.TOPIC, "orders", Pat.PREFIXED, "User:alice", "*", Op.READ, Perm.ALLOW)]


@pytest.fixture
def fast_switches():
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def exported_denials(stats: RequestStats) -> dict:
    """kafkalite_authorizer_denied as /metrics renders it, by (type, operation)."""
    family = next(f for f in NodeMetrics._security_families(stats.security_snapshot())
                  if f.name == "kafkalite_authorizer_denied")
    return {(s.labels["resource_type"], s.labels["operation"]): s.value for s in family.samples}


def test_concurrent_decisions_count_every_denial_and_log_or_drop_each(fast_switches):
    stats = RequestStats()
    authorizer = Authorizer(acls=AS_LITERAL, stats=stats)
    authorizer.audit = AuditLog(stats, per_interval=LINES_PER_INTERVAL, interval_s=3600)
    lines = _Lines()
    logger = logging.getLogger("kafkalite.authorizer")
    logger.addHandler(lines)
    allowed = [0] * THREADS
    done = threading.Event()
    start = threading.Barrier(THREADS + 1)

    def decide(index: int) -> None:
        start.wait()
        n = 0
        for _ in range(ROUNDS):
            n += authorizer.authorize("User:alice", "10.0.0.1", Op.READ, Res.TOPIC, "orders")
            n += authorizer.authorize("User:alice", "10.0.0.1", Op.WRITE, Res.TOPIC, "orders")
            n += authorizer.authorize("User:bob", "10.0.0.2", Op.READ, Res.GROUP, "g")
        allowed[index] = n

    def swap() -> None:          # the controller's ACL updates, meanwhile
        start.wait()
        while not done.is_set():
            authorizer.replace(AS_PREFIX)
            authorizer.replace(AS_LITERAL)

    threads = [threading.Thread(target=decide, args=(i,)) for i in range(THREADS)]
    swapper = threading.Thread(target=swap)
    try:
        for t in threads + [swapper]:
            t.start()
        for t in threads:
            t.join()
    finally:
        done.set()
        swapper.join()
        logger.removeHandler(lines)
    denials = THREADS * ROUNDS
    assert allowed == [ROUNDS] * THREADS                      # the swaps changed no decision
    assert stats.denied == {"Topic:Write": denials, "Group:Read": denials}
    assert exported_denials(stats) == {("Topic", "Write"): denials, ("Group", "Read"): denials}
    logged = [line for line in lines.lines if "is Denied Operation" in line]
    assert len(logged) == LINES_PER_INTERVAL
    assert stats.audit_lines_dropped == 2 * denials - LINES_PER_INTERVAL
    assert authorizer.audit.dropped == 2 * denials - LINES_PER_INTERVAL
