"""The group coordinator: consumer groups and their committed offsets
(Kafka's ``group-coordinator`` module).

What it holds:

- coordinator.py: ``GroupCoordinator``: FindCoordinator, the classic
  protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup), offsets (OffsetCommit, OffsetFetch,
  TxnOffsetCommit, OffsetDelete), the group admin APIs, and the routing of
  KIP-848 and share-group requests;
- consumer_group.py: KIP-848 consumer groups (ConsumerGroupHeartbeat);
- group_log.py: offsets and group metadata in ``__consumer_offsets``;
- consumer_group_log.py: a KIP-848 group's records in ``__consumer_offsets``.

Which process runs it: the supervisor (in a cluster, the controller
node's), on its event loop.

What it may import: share/ (the share-group coordinator it routes to),
controller/ (the internal topics' names), internal_topic.py,
server/config.py, network/ and the folders below them; kafkalite.protocol,
kafkalite.storage and the bottom.
"""
