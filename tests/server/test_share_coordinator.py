"""The share coordinator (KIP-932's APIs 83-87) and ``__share_group_state``.

Over Kafka's wire to a real server's supervisor: state written is read
back, merged as Kafka merges state batches, fenced by state epoch (a reset)
and by leader epoch (a newer leader read it), reset, summarised and
deleted; everything answered survives kill -9 of every process. A state
file of an older kafkalite (a snapshot beside the partition's log) is taken
up once and then removed.
"""
import os
import signal
import struct
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "compat"))
from compat_helpers import KafkaWire  # noqa: E402

from harness import ServerProcess, create  # noqa: E402
from kafkalite import errors  # noqa: E402
from kafkalite._ext.crc32c import crc32c  # noqa: E402
from kafkalite.client import Producer, ShareConsumer  # noqa: E402
from kafkalite.protocol import ApiKey  # noqa: E402
from kafkalite.protocol.codec import encode_data  # noqa: E402
from kafkalite.protocol.messages.share_records import (ACKNOWLEDGED, ARCHIVED,  # noqa: E402
                                                       AVAILABLE, ShareSnapshotKey,
                                                       ShareSnapshotValue)
from kafkalite.server.share.share_coordinator import merge_batches  # noqa: E402

TOPIC_ID = uuid.UUID("6a1b1c3e-0000-4000-8000-00000000c0de")
FENCED_STATE = errors.FencedStateEpochError.code
FENCED_LEADER = errors.FencedLeaderEpochError.code


def test_merge_batches_replaces_what_each_new_batch_covers():
    old = [(10, 19, AVAILABLE, 1), (20, 29, ACKNOWLEDGED, 1)]
    # a batch inside one, across two, and the start offset cutting the head
    assert merge_batches(old, [(12, 13, ACKNOWLEDGED, 1)], 10) == [
        (10, 11, AVAILABLE, 1), (12, 13, ACKNOWLEDGED, 1), (14, 19, AVAILABLE, 1),
        (20, 29, ACKNOWLEDGED, 1)]
    assert merge_batches(old, [(15, 24, ARCHIVED, 2)], 12) == [
        (12, 14, AVAILABLE, 1), (15, 24, ARCHIVED, 2), (25, 29, ACKNOWLEDGED, 1)]
    # neighbours in one state join; everything below the start offset goes
    assert merge_batches(old, [(10, 19, ACKNOWLEDGED, 1)], 10) == [(10, 29, ACKNOWLEDGED, 1)]
    assert merge_batches(old, [], 30) == []


def state_request(wire, api, group, partitions):
    """One topic's partitions ({partition: fields}); {partition: answer}."""
    answer = wire.request(api, 0, {"group_id": group, "topics": [
        {"topic_id": TOPIC_ID, "partitions": [{"partition": p, **fields}
                                              for p, fields in partitions.items()]}]})
    return {p["partition"]: p for r in answer["results"] for p in r["partitions"]}


def write(wire, group, partition, state_epoch, leader_epoch, start, batches):
    return state_request(wire, ApiKey.WRITE_SHARE_GROUP_STATE, group, {partition: {
        "state_epoch": state_epoch, "leader_epoch": leader_epoch, "start_offset": start,
        "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s,
                           "delivery_count": c} for f, la, s, c in batches]}})[partition]


def read(wire, group, partition, leader_epoch=-1):
    p = state_request(wire, ApiKey.READ_SHARE_GROUP_STATE, group,
                      {partition: {"leader_epoch": leader_epoch}})[partition]
    return (p["error_code"], p["state_epoch"], p["start_offset"],
            [(b["first_offset"], b["last_offset"], b["delivery_state"], b["delivery_count"])
             for b in p["state_batches"]])


def summary(wire, group, partition):
    p = state_request(wire, ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, group,
                      {partition: {"leader_epoch": -1}})[partition]
    return p["error_code"], p["state_epoch"], p["start_offset"]


def test_state_is_written_read_fenced_reset_and_deleted(own_server):
    srv = own_server
    wire = KafkaWire(srv.kafka_bootstrap)        # the supervisor's listener
    try:
        # nothing yet: start offset -1
        assert read(wire, "g", 0) == (0, 0, -1, [])
        assert write(wire, "g", 0, 0, 3, 100, [(100, 109, AVAILABLE, 1)])["error_code"] == 0
        # a write may carry only what changed: merged over what is stored
        assert write(wire, "g", 0, 0, 3, -1, [(102, 103, ACKNOWLEDGED, 1)])["error_code"] == 0
        assert read(wire, "g", 0, 3) == (0, 0, 100, [
            (100, 101, AVAILABLE, 1), (102, 103, ACKNOWLEDGED, 1), (104, 109, AVAILABLE, 1)])
        # a newer leader reads it: the old leader's writes are fenced from then on
        assert read(wire, "g", 0, 5)[0] == 0
        assert write(wire, "g", 0, 0, 3, 104, [])["error_code"] == FENCED_LEADER
        assert write(wire, "g", 0, 0, 5, 104, [])["error_code"] == 0
        # a reset (a new state epoch): writes of the old epoch are fenced
        p = state_request(wire, ApiKey.INITIALIZE_SHARE_GROUP_STATE, "g",
                          {0: {"state_epoch": 1, "start_offset": 7}})[0]
        assert p["error_code"] == 0
        assert write(wire, "g", 0, 0, 5, 110, [])["error_code"] == FENCED_STATE
        assert read(wire, "g", 0, 5) == (0, 1, 7, [])
        again = state_request(wire, ApiKey.INITIALIZE_SHARE_GROUP_STATE, "g",
                              {0: {"state_epoch": 1, "start_offset": 9}})[0]
        assert again["error_code"] == FENCED_STATE          # not a newer epoch
        assert summary(wire, "g", 0) == (0, 1, 7)
        # bad input: a partition error each, the others written
        answer = state_request(wire, ApiKey.WRITE_SHARE_GROUP_STATE, "g", {
            1: {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "state_batches": [
                {"first_offset": 5, "last_offset": 2, "delivery_state": 0,
                 "delivery_count": 1}]},
            2: {"state_epoch": 0, "leader_epoch": 0, "start_offset": 0, "state_batches": [
                {"first_offset": 0, "last_offset": 2, "delivery_state": 9,
                 "delivery_count": 1}]},
            3: {"state_epoch": 0, "leader_epoch": 0, "start_offset": 40, "state_batches": []}})
        assert [answer[p]["error_code"] for p in (1, 2, 3)] == \
            [errors.InvalidRequestError.code] * 2 + [0]
        assert state_request(wire, ApiKey.READ_SHARE_GROUP_STATE, "", {0: {"leader_epoch": 0}})[
            0]["error_code"] == errors.InvalidRequestError.code
        # another group's state is its own
        assert write(wire, "h", 0, 0, 0, 50, [(50, 50, ARCHIVED, 5)])["error_code"] == 0
        state_request(wire, ApiKey.DELETE_SHARE_GROUP_STATE, "h", {0: {}})
        assert read(wire, "h", 0) == (0, 0, -1, [])
    finally:
        wire.sock.close()
    # kill -9 of every process: what was answered is still there
    for pid in srv.worker_pids():
        os.kill(pid, signal.SIGKILL)
    srv.kill()
    srv.start()
    wire = KafkaWire(srv.kafka_bootstrap)
    try:
        assert read(wire, "g", 0, 5) == (0, 1, 7, [])
        assert read(wire, "g", 3) == (0, 0, 40, [])
        assert read(wire, "h", 0) == (0, 0, -1, [])
        assert write(wire, "g", 0, 0, 5, 110, [])["error_code"] == FENCED_STATE
        assert write(wire, "g", 0, 1, 4, 110, [])["error_code"] == FENCED_LEADER
    finally:
        wire.sock.close()


def legacy_state_file(path, group, topic_id, start, batches):
    """A state file as kafkalite wrote them before the share coordinator."""
    key = encode_data(ShareSnapshotKey, 0, {"group_id": group, "topic_id": topic_id,
                                            "partition": 0})
    value = encode_data(ShareSnapshotValue, 0, {
        "snapshot_epoch": 3, "state_epoch": 0, "leader_epoch": 0, "start_offset": start,
        "create_timestamp": 0, "write_timestamp": 0,
        "state_batches": [{"first_offset": f, "last_offset": la, "delivery_state": s,
                           "delivery_count": c} for f, la, s, c in batches]})
    body = key + value
    with open(path, "wb") as f:
        f.write(struct.pack(">4sIi", b"KLSS", crc32c(body), len(key)) + body)


@pytest.mark.processes
def test_a_state_file_of_an_older_version_is_taken_up(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), workers=1).start()
    try:
        create(srv, "legacy", 1)
        p = Producer(srv.config())
        for i in range(10):
            p.produce("legacy", value=b"%d" % i)
        p.flush()
        wire = KafkaWire(srv.kafka_bootstrap)
        try:
            topic_id = topic_id_of(wire, "legacy")
        finally:
            wire.sock.close()
        srv.stop()
        directory = next(os.path.join(root, d) for root, dirs, _ in os.walk(srv.data_dir)
                         for d in dirs if d == "legacy-0")
        path = os.path.join(directory, "share-" + b"old".hex() + ".state")
        # done below 4; 4-5 accepted, 6 in flight (handed out before), 7-9 new
        legacy_state_file(path, "old", topic_id, 4,
                          [(4, 5, ACKNOWLEDGED, 1), (6, 6, AVAILABLE, 1)])
        srv.start()
        c = ShareConsumer(srv.config(**{"group.id": "old"}))
        c.subscribe(["legacy"])
        got, deadline = [], time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            got += [(m.offset(), m.delivery_count()) for m in c.consume(10, 0.2)]
        c.commit_sync()
        c.close()
        assert sorted(got) == [(6, 2), (7, 1), (8, 1), (9, 1)]
        assert not os.path.exists(path)          # the coordinator has it now
        wire = KafkaWire(srv.kafka_bootstrap)
        try:
            assert summary(wire, "old", 0)[2] == -1      # another topic id
            answer = wire.request(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, {
                "group_id": "old", "topics": [{"topic_id": topic_id, "partitions": [
                    {"partition": 0, "leader_epoch": -1}]}]})
            assert answer["results"][0]["partitions"][0]["start_offset"] == 10
        finally:
            wire.sock.close()
    finally:
        if srv.proc is not None and srv.proc.poll() is None:
            srv.stop()
        srv.kill()


@pytest.fixture
def own_server(tmp_path):
    srv = ServerProcess(str(tmp_path / "data"), workers=1).start()
    yield srv
    if srv.proc.poll() is None:
        srv.stop()
    srv.kill()


def topic_id_of(wire, name):
    return wire.request(ApiKey.METADATA, 12, {
        "topics": [{"name": name, "topic_id": uuid.UUID(int=0)}],
        "allow_auto_topic_creation": False,
        "include_topic_authorized_operations": False})["topics"][0]["topic_id"]


def test_a_deleted_topics_share_state_goes_with_it(own_server):
    srv = own_server
    create(srv, "gone", 1)
    wire = KafkaWire(srv.kafka_bootstrap)
    try:
        tid = topic_id_of(wire, "gone")
        assert write(wire, "g", 0, 0, 0, 5, [])["error_code"] == 0     # another topic's
        answer = wire.request(ApiKey.WRITE_SHARE_GROUP_STATE, 0, {"group_id": "g", "topics": [
            {"topic_id": tid, "partitions": [{"partition": 0, "state_epoch": 0,
                                              "leader_epoch": 0, "start_offset": 3,
                                              "state_batches": []}]}]})
        assert answer["results"][0]["partitions"][0]["error_code"] == 0

        def start(topic_id):
            return wire.request(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, 0, {
                "group_id": "g", "topics": [{"topic_id": topic_id, "partitions": [
                    {"partition": 0, "leader_epoch": -1}]}]})["results"][0]["partitions"][0][
                "start_offset"]
        assert start(tid) == 3
        deleted = wire.request(ApiKey.DELETE_TOPICS, 6, {"topics": [
            {"name": "gone", "topic_id": uuid.UUID(int=0)}], "timeout_ms": 10000})
        assert deleted["responses"][0]["error_code"] == 0
        assert start(tid) == -1 and start(TOPIC_ID) == 5
    finally:
        wire.sock.close()
