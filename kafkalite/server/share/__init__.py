"""Share groups (KIP-932): Kafka's queues, coordinator side (Kafka's
``share-coordinator`` module and the group coordinator's share groups);
the partition side, the workers', is in replica/ (share_partition.py,
share_partition_manager.py, share_dead_letters.py).

What it holds:

- share_group.py: ``ShareGroupCoordinator``, membership and assignment
  (ShareGroupHeartbeat, ShareGroupDescribe, the share-group offsets APIs);
- share_coordinator.py: where share-partition state is kept (Initialize,
  Read, Write and DeleteShareGroupState, ReadShareGroupStateSummary);
- share_state_log.py: that state in ``__share_group_state``.

Which process runs it: the supervisor (the controller node's).

What it may import: server/topic.py (the internal topics' names),
internal_topic.py, network/ and the folders below them; kafkalite.protocol, kafkalite.storage, kafkalite.record and the
bottom. Never group/ or txn/, which sit above it.
"""
