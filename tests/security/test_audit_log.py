"""The authorizer's audit log under a burst of denials, on a real server.

The report of issue 40: 30 denied Produce requests in a burst added no line
to the log, and nothing said that anything was left out. The log stays
rate-limited (a client retrying a forbidden write must not flood it), but
what it leaves out is counted: kafkalite_authorizer_audit_lines_dropped on
``/metrics`` at once, and the next denial logged (after the interval) ends
with "(N more denials not logged)".

A server of the module's own: SASL/PLAIN, the authorizer on
(``allow_everyone_if_no_acl_found = false``), ``User:alice`` with no ACL.
"""
from __future__ import annotations

import os
import re
import sys

import pytest
from prometheus_client.parser import text_string_to_metric_families

from harness import ServerProcess, create, scrape, wait_until
from kafkalite import errors
from kafkalite.protocol import ApiKey
from kafkalite.record import RecordBatchBuilder

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
from compat_helpers import KafkaWire, add_user  # noqa: E402

TOPIC_DENIED = errors.TopicAuthorizationFailedError.code
BURST = 30
# the log's interval is 10 s (authorizer.py): the line telling the count
# comes with the first denial after it
TOLD_WITHIN_S = 25.0
DENIAL = "Principal = User:alice is Denied Operation = Write"


def password(user: str) -> str:
    return f"{user}-audit-pw"


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    root = tmp_path_factory.mktemp("audit")
    data = str(root / "data")
    os.makedirs(data, exist_ok=True)
    for user in ("alice", "admin"):        # admin: /metrics asks for a login
        add_user(data, user, password(user), "PLAIN")
    (root / "server.toml").write_text('authorizer_enabled = true\nsuper_users = "User:admin"\n'
                                      "allow_everyone_if_no_acl_found = false\n")
    s = ServerProcess(data, workers=1, extra_args=[
        "--config", str(root / "server.toml"), "--kafka-security-protocol", "SASL_PLAINTEXT",
        "--sasl-enabled-mechanisms", "PLAIN"]).start()
    try:
        yield s
    finally:
        s.stop()
        s.kill()


def alice(address: str) -> KafkaWire:
    w = KafkaWire(address)
    assert w.request(ApiKey.SASL_HANDSHAKE, 1, {"mechanism": "PLAIN"})["error_code"] == 0
    token = b"\0alice\0" + password("alice").encode()
    assert w.request(ApiKey.SASL_AUTHENTICATE, 2, {"auth_bytes": token})["error_code"] == 0
    return w


def dropped(srv) -> float:
    text = scrape(srv, "admin", password("admin"), timeout=5)
    return next((s.value for family in text_string_to_metric_families(text)
                 for s in family.samples
                 if s.name == "kafkalite_authorizer_audit_lines_dropped_total"), -1.0)


def test_a_burst_of_denials_is_counted_and_told(srv):
    create(srv, "audited", 1)
    # the worker leading the partition: where the Produce check runs
    host = srv.kafka_bootstrap.rsplit(":", 1)[0]
    leader = f"{host}:{srv.info['kafka_brokers'][0]['port']}"
    builder = RecordBatchBuilder()
    builder.append(1_700_000_000_000, None, b"x")
    produce = {"acks": 1, "timeout_ms": 5000, "topic_data": [
        {"name": "audited", "partition_data": [{"index": 0, "records": bytes(builder.build())}]}]}
    w = alice(leader)
    try:
        for _ in range(BURST):
            answer = w.request(ApiKey.PRODUCE, 9, produce)
            assert answer["responses"][0]["partition_responses"][0]["error_code"] == TOPIC_DENIED
        # every denial is logged or counted as left out: the metric has the
        # latter at once (the worker's figures reach /metrics each second)
        wait_until(lambda: dropped(srv) + srv.output().count(DENIAL) == BURST, 15,
                   lambda: f"{BURST} denials logged or counted (logged "
                           f"{srv.output().count(DENIAL)}, counted {dropped(srv)})")
        logged = srv.output().count(DENIAL)
        assert logged < BURST                    # the log is rate-limited still
        # the next line logged tells how many were left out since the one before
        told = re.compile(re.escape(DENIAL) + r".*\((\d+) more denials not logged\)")

        def next_line():
            w.request(ApiKey.PRODUCE, 9, produce)
            return told.search(srv.output())
        found = wait_until(next_line, TOLD_WITHIN_S, "the line telling the count",
                           interval=0.5)
        assert int(found.group(1)) >= BURST - logged
    finally:
        w.close()
