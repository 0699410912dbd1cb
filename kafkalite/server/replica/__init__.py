"""The partitions a broker hosts and their data APIs (Kafka's
``ReplicaManager`` and ``cluster.Partition``).

What it holds:

- replica_manager.py: ``ReplicaManager``, Produce, Fetch, ListOffsets,
  OffsetForLeaderEpoch, WriteTxnMarkers, DeleteRecords, the log-dir APIs
  and the share APIs for the partitions of one broker;
- replica_apis.py: which APIs those are (``API_HANDLERS``), and the
  shapes and blank answers the controller shares with it;
- partition.py: ``Partition``, one hosted partition: its log, leader or
  follower, ISR, high watermark;
- purgatory.py: requests that wait (delayed fetches, acks=all produces,
  record deletions);
- replica_fetcher.py: the follower side of replication;
- ring_gateway.py: same-host producers' shared-memory rings, drained into
  the replica manager;
- share_partition.py: a share-partition (KIP-932), one share group's view
  of a partition its leader keeps: which member acquired which records,
  acknowledgements, delivery counts;
- share_partition_manager.py: the share-partitions of the partitions a
  worker leads, its members' share sessions (ShareFetch, ShareAcknowledge)
  and their state's reads and writes at the share coordinator (share/);
- share_dead_letters.py: copies of rejected records in the dead-letter
  topic.

Which process runs it: each partition worker (one broker), on its event
loop, of the controller node or of a broker node. The supervisor keeps a
``Partition`` per partition of the coordinators' internal topics
(internal_topic.py) and reads replica_apis.py to advertise them (not
replica_manager.py: a restarted supervisor's imports are what a dead
one's transactional clients wait for).

What it may import: network/, auth/, server/topic.py (the internal topics'
names), server/config.py and config_registry.py; kafkalite.protocol,
kafkalite.storage, kafkalite.shm and the bottom.
"""
