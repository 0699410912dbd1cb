"""Tiered storage (KIP-405): a partition's rolled segments copied to a
remote store and read back from it once their local copies are gone.

- storage_manager.py: Kafka's RemoteStorageManager, the store itself (copy a
  segment's files under a unique id, fetch a byte range, delete), with the
  local-directory implementation;
- metadata.py: Kafka's RemoteLogSegmentMetadata and the per-partition record
  of which segments are remote, in what state (the replica's local copy);
- metadata_store.py: that record as the replicas share it, versions in the
  remote store written by the leader and fenced by leader epoch (the part
  of Kafka's ``__remote_log_metadata`` kafkalite needs);
- remote_log.py: the partition's side of Kafka's RemoteLogManager: what to
  copy, what remote segments total retention deletes, and the per-topic
  counts of copies and reads; its reads below the local log start offset
  are remote_reads.py's, a replica's claim of the shared metadata
  remote_leadership.py's (both parts of its RemoteLog);
- store_backoff.py: how one kind of a partition's store calls is faring:
  the backoff after a failure and the two lines an outage is logged as;
- remote_log_reader.py: Kafka's RemoteLogReader pool, the threads that
  download remote segments for reads so that the owner's event loop never
  waits for the store.
"""
