"""The partitions a broker hosts and their data APIs (Kafka's
``ReplicaManager`` and ``cluster.Partition``).

What it holds:

- replica_manager.py: ``ReplicaManager``, Produce, Fetch, ListOffsets,
  OffsetForLeaderEpoch, WriteTxnMarkers, DeleteRecords, the log-dir APIs
  and the share APIs for the partitions of one broker (``API_HANDLERS``);
- partition.py: ``Partition``, one hosted partition: its log, leader or
  follower, ISR, high watermark;
- purgatory.py: requests that wait (delayed fetches, acks=all produces,
  record deletions);
- replica_fetcher.py: the follower side of replication;
- ring_gateway.py: same-host producers' shared-memory rings, drained into
  the replica manager.

Which process runs it: each partition worker (one broker), on its event
loop, of the controller node or of a broker node. The supervisor keeps a
``Partition`` per partition of the coordinators' internal topics
(internal_topic.py) and reads ``ReplicaManager.API_KEYS`` to advertise
them.

What it may import: network/, auth/, server/topic.py (the internal topics'
names), server/config.py and config_registry.py; kafkalite.protocol,
kafkalite.storage, kafkalite.shm and the bottom. One declared debt
(tests/test_layers.py, SERVER_UPWARD): replica_manager.py runs the
worker-side share partitions of share/share_partition.py (issue 41 places
those here).
"""
