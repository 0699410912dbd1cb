"""Share groups (KIP-932): Kafka's queues, coordinator side and partition
side (Kafka's ``share-coordinator`` module and ``SharePartitionManager``).

What it holds:

- share_group.py: ``ShareGroupCoordinator``, membership and assignment
  (ShareGroupHeartbeat, ShareGroupDescribe, the share-group offsets APIs);
- share_coordinator.py: where share-partition state is kept (Initialize,
  Read, Write and DeleteShareGroupState, ReadShareGroupStateSummary);
- share_state_log.py: that state in ``__share_group_state``;
- share_partition.py: a share-partition, one share group's view of a
  partition its leader keeps: which member acquired which records,
  acknowledgements, delivery counts;
- share_partition_manager.py: the share-partitions of the partitions a
  worker leads, its members' share sessions (ShareFetch, ShareAcknowledge)
  and their state's reads and writes at the share coordinator;
- share_dead_letters.py: copies of rejected records in the dead-letter
  topic.

Which process runs it: share_group.py, share_coordinator.py and
share_state_log.py run in the supervisor (the controller node's);
share_partition.py, share_partition_manager.py and share_dead_letters.py in
each partition worker, run by its replica manager.

What it may import: server/topic.py (the internal topics' names),
internal_topic.py, replica/ (the purgatory), network/ and the folders below
them; kafkalite.protocol, kafkalite.storage, kafkalite.record and the
bottom. Never group/ or txn/, which sit above it.
"""
