"""The share coordinator's APIs (KIP-932): share-partition state, leader to coordinator.

A partition's leader keeps its share groups' share-partitions
(server/replica/share_partition.py) and has their state kept by the share
coordinator (server/share/share_coordinator.py) in ``__share_group_state``:

- InitializeShareGroupState (83): a share-partition starts afresh at a
  start offset, under a new state epoch (the group coordinator's
  AlterShareGroupOffsets);
- ReadShareGroupState (84): the state, when a leader takes a share-partition
  up (its leader epoch fences older leaders' writes from then on);
- WriteShareGroupState (85): the state after acknowledgements, releases and
  expired locks, before the members are answered;
- DeleteShareGroupState (86): the share group was deleted;
- ReadShareGroupStateSummary (87): the start offset and the epochs, no
  batches (DescribeShareGroupOffsets).

Version 0 of each, as Kafka 4.1 defines them (4.0's
ReadShareGroupStateSummary answered no leader epoch: KAFKA-19218 added it
to v0 before 4.1 made it stable). State batches are ranges of
offsets in one delivery state (0 available, 2 acknowledged, 4 archived)
with their delivery count.
"""
from __future__ import annotations

from kafkalite.protocol.api_keys import ApiKey
from kafkalite.protocol.schema import Array, Field, Request, Response

_STATE_BATCHES = Array("state_batches", fields=[
    Field("first_offset", "int64"),
    Field("last_offset", "int64"),
    Field("delivery_state", "int8"),
    Field("delivery_count", "int16"),
])


# what a read answers (the summary without the batches)
_EPOCH_AND_START = [Field("state_epoch", "int32"), Field("start_offset", "int64")]
_LEADER_EPOCH = Field("leader_epoch", "int32")


def _request(key: ApiKey, partition_fields: list) -> Request:
    return Request(key, "0", flexible="0+", fields=[
        Field("group_id", "string"),
        Array("topics", fields=[
            Field("topic_id", "uuid"),
            Array("partitions", fields=[Field("partition", "int32"), *partition_fields]),
        ]),
    ])


def _response(key: ApiKey, partition_fields: list = ()) -> Response:
    return Response(key, "0", flexible="0+", fields=[
        Array("results", fields=[
            Field("topic_id", "uuid"),
            Array("partitions", fields=[
                Field("partition", "int32"),
                Field("error_code", "int16"),
                Field("error_message", "string", nullable="0+"),
                *partition_fields,
            ]),
        ]),
    ])


InitializeShareGroupStateRequest = _request(ApiKey.INITIALIZE_SHARE_GROUP_STATE,
                                            _EPOCH_AND_START)
InitializeShareGroupStateResponse = _response(ApiKey.INITIALIZE_SHARE_GROUP_STATE)

ReadShareGroupStateRequest = _request(ApiKey.READ_SHARE_GROUP_STATE, [_LEADER_EPOCH])
ReadShareGroupStateResponse = _response(ApiKey.READ_SHARE_GROUP_STATE,
                                        [*_EPOCH_AND_START, _STATE_BATCHES])

WriteShareGroupStateRequest = _request(ApiKey.WRITE_SHARE_GROUP_STATE, [
    Field("state_epoch", "int32"),
    _LEADER_EPOCH,
    Field("start_offset", "int64"),
    _STATE_BATCHES,
])
WriteShareGroupStateResponse = _response(ApiKey.WRITE_SHARE_GROUP_STATE)

DeleteShareGroupStateRequest = _request(ApiKey.DELETE_SHARE_GROUP_STATE, [])
DeleteShareGroupStateResponse = _response(ApiKey.DELETE_SHARE_GROUP_STATE)

ReadShareGroupStateSummaryRequest = _request(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
                                             [_LEADER_EPOCH])
ReadShareGroupStateSummaryResponse = _response(ApiKey.READ_SHARE_GROUP_STATE_SUMMARY, [
    Field("state_epoch", "int32"), _LEADER_EPOCH, Field("start_offset", "int64")])
