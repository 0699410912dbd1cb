"""The group coordinator: consumer groups and their committed offsets
(Kafka's ``group-coordinator`` module).

What it holds:

- coordinator.py: ``GroupCoordinator``, the handler table of every group
  API, routed to the manager of its concern, and FindCoordinator;
- classic_group.py: ``ClassicGroupManager``, the classic protocol
  (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, rebalances);
- offsets.py: ``OffsetMetadataManager``, committed offsets (OffsetCommit,
  OffsetFetch, OffsetDelete, TxnOffsetCommit and its markers, expiry);
- consumer_group.py: KIP-848 consumer groups (ConsumerGroupHeartbeat);
- migration.py: ``GroupMigration``, online conversion between classic and
  consumer groups;
- admin.py: ``GroupAdmin``, DescribeGroups, ListGroups, DeleteGroups;
- groups.py: the group table the managers share (``Group``, ``Member``)
  and the writing of consumer groups' records;
- group_log.py: offsets and group metadata in ``__consumer_offsets``;
- consumer_group_log.py: a KIP-848 group's records in ``__consumer_offsets``.

Which process runs it: the supervisor (in a cluster, the controller
node's), on its event loop.

What it may import: share/ (the share-group coordinator it routes to),
server/topic.py (the internal topics' names), internal_topic.py,
server/config.py, network/ and the folders below them; kafkalite.protocol,
kafkalite.storage and the bottom.
"""
