"""A group that mixes classic and KIP-848 members of confluent-kafka while
records flow (KIP-848's online migration): two classic cooperative-sticky
members form a classic group; a ``group.protocol=consumer`` member joins
and the group becomes a consumer group; an eager classic member (range)
joins it; one classic member leaves, the other is killed with SIGKILL (its
partitions move after its classic session timeout); the consumer-protocol
member leaves and the group is classic again, its last member reading to
the end. Each member is its own process (kip848_member.py).

The checks are test_kip848_confluent.py's ``check_group_run`` (one owner per
partition at any time, no record lost, no re-read below a commit, no stall
of a member not affected), whose planted fault is run there; here a planted
overlap (two owners at once) is shown caught, so the one-owner check cannot
pass vacuously."""
from __future__ import annotations

import signal
import time
import uuid

import confluent_kafka as ck
import pytest
from compat_helpers import create_topic
from test_kip848_confluent import (PARTITIONS, SESSION_TIMEOUT_MS, Members,  # noqa: F401
                                   Producing, check_group_run, committed_offsets,
                                   committed_to_the_end, end_run, kip848_server, owned)

from harness import wait_until

# a server of the module's own (kip848_server): its tests go to one xdist worker
pytestmark = pytest.mark.xdist_group("kip848_migration")


def group_type(server, group):
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": server.kafka_bootstrap})
    return admin.describe_consumer_groups([group])[group].result(10).type


def test_the_one_owner_check_catches_a_planted_overlap():
    logs = {"a": [("A", 1.0, "0,1"), ("M", 1.1, "0", "0"), ("R", 3.0, "0,1")],
            "b": [("A", 2.0, "1"), ("M", 2.1, "1", "0")]}
    problems = check_group_run(logs, {"a": 4.0, "b": 4.0}, {0: 1, 1: 1}, flow_end=4.0)
    assert problems == ["partition 1 owned by a and b at once"]


def test_classic_and_consumer_members_mix_upgrade_and_downgrade(kip848_server, tmp_path,
                                                                topic_name):
    server = kip848_server
    create_topic(server, topic_name, PARTITIONS)
    group = f"mixed-{uuid.uuid4().hex[:8]}"
    producing = Producing(server, topic_name)
    members = Members(server, topic_name, group, tmp_path)
    procs, ended = members.procs, members.ended
    start, events, consuming, owners = (members.start, members.events, members.consuming,
                                        members.owners)

    def stop(name):
        procs[name].send_signal(signal.SIGTERM)
        assert procs[name].wait(20) == 0
        ended[name] = time.time()

    classic = {"KIP848_PROTOCOL": "classic"}
    try:
        producing.start()
        start("c0", **classic)
        wait_until(lambda: len(owned(events("c0"))) == PARTITIONS and consuming("c0"), 30,
                 "the first classic member to own every partition")
        start("c1", **classic)
        wait_until(lambda: consuming("c1") and len(owners()) == PARTITIONS, 30,
                 "the second classic member to get partitions")
        assert group_type(server, group) == ck.ConsumerGroupType.CLASSIC
        start("n0")                                             # group.protocol=consumer
        wait_until(lambda: consuming("n0") and len(owners()) == PARTITIONS, 30,
                 "the consumer-protocol member to get partitions")
        assert group_type(server, group) == ck.ConsumerGroupType.CONSUMER
        start("c2", **classic, KIP848_ASSIGNOR="range")         # eager, in a consumer group
        wait_until(lambda: consuming("c2") and len(owners()) == PARTITIONS, 30,
                 "the eager classic member to get partitions")
        time.sleep(0.5)        # (each change with records flowing to every member a while)
        stop("c0")
        wait_until(lambda: len(owners()) == PARTITIONS, 30, "c0's partitions to move")
        time.sleep(0.5)
        procs["c1"].kill()                                      # kill -9: no goodbye
        procs["c1"].wait(10)
        ended["c1"] = time.time()
        wait_until(lambda: len(owners()) == PARTITIONS, SESSION_TIMEOUT_MS / 1000 + 20,
                 "c1's partitions to move after its session timeout")
        time.sleep(0.5)
        stop("n0")                                      # the last consumer-protocol member
        wait_until(lambda: owned(events("c2")) == set(range(PARTITIONS)), 30,
                 "the last classic member to own every partition")
        assert group_type(server, group) == ck.ConsumerGroupType.CLASSIC
        time.sleep(0.5)
        producing.stop.set()
        producing.join(30)
        flow_end = time.time()
        assert not producing.errors and len(producing.ends) == PARTITIONS

        wait_until(lambda: committed_to_the_end(events("c2"), producing.ends), 30,
                 "c2 to read and commit to the end")
        stop("c2")
    finally:
        end_run(producing, procs)

    logs = {name: events(name) for name in procs}
    assert check_group_run(logs, ended, producing.ends, flow_end) == []
    assert all(any(e[0] == "M" for e in evs) for evs in logs.values())
    assert committed_offsets(server, group, topic_name) == producing.ends
