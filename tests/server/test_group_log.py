"""``__consumer_offsets`` replayed at a coordinator's start
(kafkalite/server/group/group_log.py): the state a restart comes back
with, and what it costs (only each key's last value is decoded).
Real partition logs in a temporary directory."""
from __future__ import annotations

from kafkalite.server.group import group_log
from kafkalite.server.group.group_log import GroupMetadataLog, OffsetAndMetadata

COMMITS = 500


def group_value(generation: int) -> dict:
    return {"protocol_type": "consumer", "generation": generation, "protocol": "range",
            "leader": "m-1", "current_state_timestamp": 1_000, "members": []}


def test_a_restart_replays_each_keys_last_value_and_decodes_only_that(tmp_path, monkeypatch):
    """Offsets committed many times, a deleted one, a group's generations,
    and transactions committed (then overwritten by a plain commit),
    aborted, and still open: the replay gives the last of each, the open
    transaction's offsets as pending; and decodes each key's last value
    only (a group committing every few seconds leaves hundreds of values
    per key between compactions, and the old replay decoded every one:
    the restarted coordinator's load, issue 68)."""
    store = GroupMetadataLog(str(tmp_path), 4)
    index = store.partition_for("g")
    for i in range(COMMITS):
        store.write_offsets("g", {("t", 0): OffsetAndMetadata(i),
                                  ("t", 1): OffsetAndMetadata(2 * i),
                                  ("gone", 0): OffsetAndMetadata(i)}, 1_000 + i)
        if i % 100 == 0:
            store.write_group("g", group_value(i // 100), 1_000 + i)
    store.write_offsets("g", {("gone", 0): None}, 5_000)
    # committed, then overwritten by a plain commit of one of its offsets
    store.write_offsets("g", {("t", 2): OffsetAndMetadata(70), ("t", 3): OffsetAndMetadata(80)},
                        6_000, producer_id=7, producer_epoch=0)
    store.append_marker(index, 7, 0, True, 0)
    store.write_offsets("g", {("t", 3): OffsetAndMetadata(81)}, 6_001)
    # aborted
    store.write_offsets("g", {("t", 0): OffsetAndMetadata(-5)}, 6_002, producer_id=8,
                        producer_epoch=0)
    store.append_marker(index, 8, 0, False, 0)
    # still open
    store.write_offsets("g", {("t", 4): OffsetAndMetadata(90)}, 6_003, producer_id=9,
                        producer_epoch=0)
    store.close()

    decoded = []
    real_decode = group_log.decode_data

    def counting_decode(schema, data):
        decoded.append(schema)
        return real_decode(schema, data)
    monkeypatch.setattr(group_log, "decode_data", counting_decode)
    reopened = GroupMetadataLog(str(tmp_path), 4)
    try:
        loaded = reopened.load()
    finally:
        reopened.close()
    assert {tp: om.offset for tp, om in loaded.offsets["g"].items()} == {
        ("t", 0): COMMITS - 1, ("t", 1): 2 * (COMMITS - 1), ("t", 2): 70, ("t", 3): 81}
    assert loaded.groups["g"]["generation"] == (COMMITS - 1) // 100
    assert {tp: om.offset for tp, om in loaded.pending[9]["g"].items()} == {("t", 4): 90}
    assert set(loaded.pending) == {9}
    # a key and a value for each of 7 keys (6 offsets, the group's), not
    # one pair for each of the 1,500 and more records
    assert len(decoded) <= 2 * 7, f"{len(decoded)} records decoded for 7 keys"
