"""The Jepsen-style checker's own cases (tests/jepsen.py): an
acknowledgement that came without an offset (librdkafka acknowledges an
idempotent producer's earlier batches implicitly, offset unknown, once a
later batch of the partition is acknowledged) counts as kept when its
value is in its partition, and as moved or lost otherwise; one with an
offset must be at that offset. ResentLog counts the batches librdkafka's
log says it sends again, from lines of a real run's log."""
from jepsen import History, ResentLog, check, kept_out_of_order

# librdkafka 2.16's debug=msg lines (tests/server/test_replication.py's run)
REFUSED = ("MSGSET [rdkafka#producer-1] [thrd:127.0.0.1:37637/0]: 127.0.0.1:37637/0: t [0]: "
           "MessageSet with 2 message(s) (MsgId 0, BaseSeq -1) encountered error: Broker: Not "
           "leader for partition (actions Refresh,MsgNotPersisted) [NOT LEADER]")
TIMED_OUT = ("MSGSET [rdkafka#producer-1] [thrd:127.0.0.1:37815/0]: 127.0.0.1:37815/0: t [3]: "
             "MessageSet with 1 message(s) (MsgId 0, BaseSeq -1) encountered error: Local: "
             "Timed out (actions Retry,MsgPossiblyPersisted)")
SENT = ("PRODUCE [rdkafka#producer-1] [thrd:127.0.0.1:45381/0]: 127.0.0.1:45381/0: t [0]: "
        "Produce MessageSet with 1 message(s) (74 bytes, ApiVersion 10, MsgVersion 2, MsgId 0, "
        "BaseSeq -1, PID{Invalid}, uncompressed)")


def test_an_acknowledgement_without_an_offset_is_kept_in_its_partition():
    final = {0: [(0, b"w-0"), (1, b"w-1")], 1: [(0, b"w-2")]}
    assert check(History(acked=[(0, None, b"w-1"), (1, 0, b"w-2")]), final).ok


def test_an_acknowledgement_without_an_offset_elsewhere_or_nowhere_fails():
    final = {0: [(0, b"w-0")], 1: [(0, b"w-1")]}
    moved = check(History(acked=[(0, None, b"w-1")]), final)
    assert moved.moved == [(0, None, b"w-1", [(1, 0)])]
    assert check(History(acked=[(0, None, b"w-9")]), final).lost == [(0, None, b"w-9")]


def test_an_acknowledgement_at_another_offset_is_moved():
    final = {0: [(0, b"w-0"), (1, b"w-1")]}
    assert check(History(acked=[(0, 0, b"w-1")]), final).moved == [(0, 0, b"w-1", [(0, 1)])]


def test_a_batch_refused_not_leader_is_counted_resent_and_a_timed_out_one_is_not():
    resends = ResentLog()
    log = resends.logger("w")
    for line in (REFUSED, TIMED_OUT, SENT, REFUSED.replace("t [0]", "t [5]")):
        log.debug(line)
    # retries=0: a request timed out in flight fails for good; a refused one
    # was not written, and librdkafka sends it again without counting
    assert resends.resent == {0: 2, 5: 2}
    assert len(resends.lines) == 2
    assert resends.errors == {"Broker: Not leader for partition": 2}


def test_kept_out_of_order_names_acknowledged_records_after_a_later_produced_one():
    final = {0: [(0, b"w-0"), (1, b"w-5"), (2, b"w-3"), (3, b"v-1"), (4, b"w-4"), (5, b"w-9")]}
    assert kept_out_of_order(final, {b"w-0", b"w-5", b"w-3", b"v-1", b"w-9"}) == [(0, 2, b"w-3")]
    # an unacknowledged record neither counts nor is counted
    assert kept_out_of_order(final, {b"w-0", b"w-3", b"w-4"}) == []
