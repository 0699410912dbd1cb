"""The authorizer's audit log (kafkalite/server/auth/authorizer.py's AuditLog)
under a burst of denials: the first lines of each interval are logged, the
rest are counted, never lost silently -- the next line logged says how many
were left out, and RequestStats.audit_lines_dropped (the metric
kafkalite_authorizer_audit_lines_dropped) has them at once."""
from __future__ import annotations

import re
import time

from kafkalite.protocol.enums import AclOperation as Op
from kafkalite.protocol.enums import ResourceType as Res
from kafkalite.server.auth.authorizer import AuditLog, Authorizer
from kafkalite.server.metrics import RequestStats

INTERVAL_S = 0.2


def denial_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "kafkalite.authorizer" and "is Denied Operation" in r.getMessage()]


def test_a_burst_of_denials_is_counted_and_told_by_the_next_line(caplog):
    stats = RequestStats()
    a = Authorizer(stats=stats)
    a.audit = AuditLog(stats, per_interval=5, interval_s=INTERVAL_S)
    caplog.set_level("WARNING", logger="kafkalite.authorizer")
    for i in range(30):
        assert not a.authorize("User:mallory", "10.0.0.9", Op.WRITE, Res.TOPIC, f"t{i}")
    lines = denial_lines(caplog)
    assert len(lines) == 5 and "(" not in lines[-1]
    assert stats.audit_lines_dropped == 25 and stats.denied == {"Topic:Write": 30}
    time.sleep(INTERVAL_S * 1.5)                 # the next interval
    assert not a.authorize("User:mallory", "10.0.0.9", Op.READ, Res.GROUP, "g")
    last = denial_lines(caplog)[-1]
    assert last.startswith("Principal = User:mallory is Denied Operation = Read")
    assert re.search(r"\(25 more denials not logged\)$", last), last
    # told once: the count starts again
    assert not a.authorize("User:mallory", "10.0.0.9", Op.READ, Res.GROUP, "g")
    assert denial_lines(caplog)[-1].endswith("resource = Group:LITERAL:g")
    assert stats.audit_lines_dropped == 25


def test_filters_are_neither_logged_nor_counted_as_dropped(caplog):
    stats = RequestStats()
    a = Authorizer(stats=stats)
    a.audit = AuditLog(stats, per_interval=1, interval_s=60)
    caplog.set_level("WARNING", logger="kafkalite.authorizer")
    for _ in range(10):      # Metadata hiding topics: not an attempt
        a.authorize("User:bob", "10.0.0.9", Op.DESCRIBE, Res.TOPIC, "t", audit=False)
    assert denial_lines(caplog) == [] and stats.audit_lines_dropped == 0


def test_without_metrics_the_count_is_still_told():
    audit = AuditLog(None, per_interval=1, interval_s=INTERVAL_S)
    a = Authorizer()
    a.audit = audit
    for _ in range(4):
        a.authorize("User:bob", "h", Op.READ, Res.TOPIC, "t")
    assert audit.dropped == 3
